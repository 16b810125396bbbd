//! Provisioning: pending pods → batch window → the core pipeline → NodeClaims.
//!
//! * [`batcher`]: collects provisioning triggers into windows (idle 1 s, max 10 s).
//! * [`solver`]: the seam to the scheduler, so the provisioner is testable with any solver;
//!   [`CoreScheduler`] is the production one.
//! * [`provisioner`]: the singleton loop: snapshot the state, build the scheduler's input, solve,
//!   build the NodeClaims (all with `karpenter_core::provisioning`), create them, nominate pods.

pub mod batcher;
pub mod provisioner;
pub mod solver;

pub use batcher::{BatchWindow, Batcher, Trigger};
pub use provisioner::{ProvisionOutcome, provision, run};
pub use solver::{CoreScheduler, NoScheduler, Solver};
