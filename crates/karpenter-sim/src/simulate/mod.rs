//! `karpenter simulate` as a library: load manifests, plan, report. The CLI only parses flags
//! and prints; the controller tests and `explain` reuse this.

pub mod custom_types;
pub mod disruption;
pub mod manifests;
pub mod pending;
pub mod plan;
pub mod sources;
mod workloads;

pub use custom_types::{CustomTypesError, parse_instance_types};
pub use disruption::{
    DisruptionSettings, DisruptionSimError, PlanWithDisruption, simulate_disruption,
};
pub use manifests::{IgnoredDocument, MAX_PODS, ManifestError, Manifests, Problem};
pub use pending::PendingPod;
pub use plan::{
    ExistingNodePods, Plan, PlanOutcome, PlannedNodeClaim, SimulateError, Summary,
    UnschedulablePod, plan, plan_only, plan_with,
};
