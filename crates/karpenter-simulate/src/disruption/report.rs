//! The `"disruption"` object `simulate --disruption -o json` adds to the plan. The keys are the
//! ones issue 10 fixes (documented in `docs/simulate.md`); `method` and the blocked nodes'
//! `nodePool` are additions.

use serde::{Deserialize, Serialize};

use crate::plan::Plan;

/// The plan and, after it, what the disruption loop did in virtual time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanWithDisruption {
    #[serde(flatten)]
    pub plan: Plan,
    pub disruption: DisruptionReport,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionReport {
    /// The commands in the order they started.
    pub commands: Vec<CommandReport>,
    /// Every node left at the end that the last pass looked at and did not disrupt, with why.
    pub blocked: Vec<BlockedNode>,
    /// The cluster at `--now`, once the pending pods were provisioned.
    pub before: Before,
    /// RFC 3339: when the last command completed (its last candidate gone); `null` when no
    /// command completed.
    pub completed_at: Option<String>,
    /// Nodes still on their way out when the loop stopped (a drain held by a PDB or a
    /// do-not-disrupt pod, or `--until` reached), by name.
    pub in_flight: Vec<String>,
    /// The cluster when the loop stopped.
    pub after: After,
    /// With timed scale steps in the input: the cluster at the end of each period (the input's
    /// until the first step, then each step's until the next or the end), as it converged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepReport>,
}

/// The cluster at the end of one period of a run with scale steps.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    /// RFC 3339: when the period began (`--now`, then each step's instant).
    pub at: String,
    /// Bound pods at its end.
    pub pods: usize,
    pub nodes: usize,
    pub hourly_cost: f64,
    /// The fractional lower bound for the pods on the nodes (USD/hour).
    pub cost_lower_bound: f64,
    /// `hourlyCost / costLowerBound`, to 3 decimals (`null` when the bound is 0).
    pub ratio: Option<f64>,
    /// Commands started during the period, and the nodes they disrupted.
    pub commands: usize,
    pub disrupted_nodes: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandReport {
    /// RFC 3339: when the candidates were tainted and the replacements launched.
    pub at: String,
    /// RFC 3339: when the last candidate was gone (drained, its instance shut down); `null`
    /// while a candidate is still on its way out when the loop stops.
    pub completed_at: Option<String>,
    /// `Empty`, `Underutilized`, `Drifted` or `Expired`.
    pub reason: String,
    /// `delete` or `replace`.
    pub decision: String,
    /// The method that decided (`empty`, `drift`, `multi`, `single`, `expiration`).
    pub method: String,
    pub candidates: Vec<CandidateReport>,
    pub replacements: Vec<ReplacementReport>,
    /// Σ candidate prices − Σ replacement prices, USD per hour.
    pub savings_per_hour: f64,
    /// Set when the command was rolled back (a replacement failed to launch, was deleted, or
    /// did not initialize in time): its candidates were untainted and stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<RolledBack>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolledBack {
    /// RFC 3339.
    pub at: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateReport {
    pub name: String,
    pub node_pool: String,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    pub price: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplacementReport {
    pub name: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedNode {
    pub name: String,
    pub node_pool: Option<String>,
    pub reason: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Before {
    pub nodes: usize,
    pub hourly_cost: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct After {
    pub nodes: Vec<NodeReport>,
    pub hourly_cost: f64,
    pub unschedulable: Vec<UnschedulableReport>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub name: String,
    pub node_pool: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    pub price: Option<f64>,
    /// `namespace/name` of the pods bound to it.
    pub pods: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulableReport {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

/// USD amounts rounded to 6 decimals, so sums print without float noise.
pub(crate) fn round6(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}
