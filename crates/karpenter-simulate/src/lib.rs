//! `karpenter simulate` as a library: manifests → cluster state → plan and disruption report.
//!
//! Pure: no kube client, no async runtime, no filesystem. Input arrives as text already read by
//! `karpenter-input` (the one `-f` reader), instances come from the in-memory
//! [`karpenter_sim::SimCloudProvider`], and time is virtual. The `karpenter` binary only parses
//! flags and prints; the controller tests reuse the same pipeline.

pub mod custom_types;
pub mod diff;
pub mod disruption;
pub mod explain;
pub mod manifests;
pub mod pending;
pub mod plan;
mod workloads;

pub use custom_types::{CustomTypesError, parse_instance_types};
pub use diff::{DiffReport, diff};
pub use disruption::{
    DisruptionSettings, DisruptionSimError, PlanWithDisruption, simulate_disruption,
};
pub use explain::{ExplainError, ExplainInput};
pub use manifests::{IgnoredDocument, MAX_PODS, ManifestError, Manifests, Problem};
pub use pending::PendingPod;
pub use plan::{
    ExistingNodePods, Plan, PlanOutcome, PlannedNodeClaim, SimulateError, Summary,
    UnschedulablePod, plan, plan_only, plan_with,
};
