//! Provisioning: pending pods → batch window → scheduling simulation → NodeClaims.
//!
//! * [`batcher`]: collects provisioning triggers into windows (idle 1 s, max 10 s).
//! * [`solver`]: the seam to the scheduler (`karpenter_core::scheduling`), so the provisioner is
//!   testable with any solver.
//! * [`nodeclaim`]: turns a planned NodeClaim into the API object.
//! * [`provisioner`]: the singleton loop that ties them together.

pub mod batcher;
pub mod nodeclaim;
pub mod provisioner;
pub mod solver;

pub use batcher::{BatchWindow, Batcher, Trigger};
pub use provisioner::{ProvisionOutcome, provision, run};
pub use solver::{PlannedNodeClaim, SolveInput, SolveOutput, Solver};
