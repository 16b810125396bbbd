//! Small Kubernetes helpers every I/O crate needs (the controller, the sim cluster): who we are
//! on the wire ([`identity`]: User-Agent and field manager), what an API
//! error means ([`errors`]), one bound for every call ([`timeouts`]), how a watch lists ([`watch`]), locks that survive a panicked holder ([`sync`]) and the shutdown signal
//! every loop waits on ([`shutdown`]).
//!
//! Written once here so a fix (say, a 410 on a watch) lands everywhere at once.

pub mod errors;
pub mod identity;
pub mod shutdown;
pub mod sync;
pub mod timeouts;
pub mod watch;

pub use errors::{
    delete_ignoring_not_found, ignore_not_found, is_conflict, is_gone, is_not_found, status_code,
};
pub use shutdown::stopped;
pub use sync::{lock, read, write};
