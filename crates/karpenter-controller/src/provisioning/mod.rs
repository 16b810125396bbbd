//! Provisioning: pending pods → batch window → scheduling simulation → NodeClaims.
//!
//! * [`batcher`]: collects provisioning triggers into windows (idle 1 s, max 10 s).
//! * [`solver`]: the seam to the scheduler, so the provisioner is testable with any solver;
//!   [`core_solver`] is the production one (`karpenter_core::scheduling`).
//! * [`reschedulable`]: pods of deleting nodes that the pass plans capacity for.
//! * [`nodeclaim`]: turns a planned NodeClaim into the API object.
//! * [`provisioner`]: the singleton loop that ties them together.

pub mod batcher;
pub mod core_solver;
pub mod nodeclaim;
pub mod provisioner;
pub mod solver;

pub use karpenter_core::provisioning::reschedulable;

pub use batcher::{BatchWindow, Batcher, Trigger};
pub use core_solver::CoreScheduler;
pub use provisioner::{ProvisionOutcome, provision, run};
pub use solver::{PlannedNodeClaim, SolveInput, SolveOutput, Solver};
