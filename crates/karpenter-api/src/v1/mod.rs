//! `karpenter.sh/v1` and `karpenter.k8s.aws/v1` types.

mod budget;
mod duration;
mod ec2nodeclass;
mod nodeclaim;
mod nodepool;
mod shared;
mod values;

pub use budget::*;
pub use duration::{DurationError, NillableDuration, format_go_duration, parse_go_duration_secs};
pub use ec2nodeclass::*;
pub use nodeclaim::*;
pub use nodepool::*;
pub use shared::*;
pub use values::{Values, ValuesPool};
