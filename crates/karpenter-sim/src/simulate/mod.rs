//! `karpenter simulate` as a library: load manifests, plan, report. The CLI only parses flags
//! and prints; the controller tests and `explain` reuse this.

pub mod custom_types;
pub mod manifests;
pub mod plan;

pub use custom_types::{CustomTypesError, parse_instance_types};
pub use manifests::{ManifestError, Manifests};
pub use plan::{
    ExistingNodePods, Plan, PlanOutcome, PlannedNodeClaim, SimulateError, Summary,
    UnschedulablePod, plan,
};
