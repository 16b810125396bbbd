//! `karpenter explain`: why a pod is pending, why a node is not disrupted, what a NodePool
//! allows, answered from a cluster's objects (a live snapshot read by the binary, or manifests).
//!
//! Pure, like the rest of this crate: the objects arrive as [`Manifests`], time as `now`. Every
//! sentence is one the controller already uses (the scheduler's explanations, core's
//! [`BlockReason`] and [`BudgetAllowance`] texts, drift reasons), so `explain`, `simulate`,
//! events and conditions say the same thing.

mod node;
mod nodepool;
mod pod;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use karpenter_api::NodePool;
use karpenter_core::disruption::budgets::{BudgetAllowance, DisruptionReason, PoolNodeCount};
use karpenter_core::disruption::candidates::BlockReason;
use karpenter_core::instance_type::InstanceType;
use karpenter_core::scheduling::SchedulerOptions;
use serde::{Deserialize, Serialize};

use crate::manifests::Manifests;
use crate::plan::SimulateError;
use karpenter_sim::SimCloudProvider;

pub(crate) use node::drift_of;
pub use node::{NodeDecision, NodeExplanation, NodeFacts, explain_node, explain_nodeclaim};
pub use nodepool::{BudgetReport, LimitReport, NodePoolExplanation, PoolNode, explain_nodepool};
pub use pod::{PodExplanation, PodStatus, explain_pod};

/// What `explain` needs besides the object's name.
#[derive(Clone)]
pub struct ExplainInput<'a> {
    pub manifests: &'a Manifests,
    pub provider: &'a SimCloudProvider,
    pub options: SchedulerOptions,
    /// The instant the answer is for (the binary passes the wall clock).
    pub now: Timestamp,
}

/// Why there is no answer.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The object is not in the cluster (exit 1, one line).
    #[error("{kind} {name} not found")]
    NotFound { kind: &'static str, name: String },
    #[error(transparent)]
    Plan(#[from] SimulateError),
}

/// One reason, with the object it names and the instant it stops holding (when it does by
/// itself): `budget of NodePool P allows 0 until T`, `do-not-disrupt pod ns/name until T`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reason {
    /// The controller's sentence (the text of its events).
    pub reason: String,
    /// `Kind/name` (`Pod/ns/name`, `PodDisruptionBudget/ns/name`, `NodePool/name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// RFC 3339: when the reason stops holding by itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

impl Reason {
    /// A disruption block with its object and end time.
    fn from_block(block: &BlockReason) -> Self {
        let object = match block {
            BlockReason::DoNotDisruptPod { pod, .. } => Some(format!("Pod/{pod}")),
            BlockReason::PdbBlocks { pdb, .. } => Some(format!("PodDisruptionBudget/{pdb}")),
            BlockReason::MultiplePdbs { pod, .. } => Some(format!("Pod/{pod}")),
            BlockReason::BudgetExhausted { nodepool, .. }
            | BlockReason::ConsolidationDisabled(nodepool)
            | BlockReason::StaticNodePool(nodepool)
            | BlockReason::WhenEmptyPolicy(nodepool)
            | BlockReason::NodePoolNotFound(nodepool)
            | BlockReason::NoInstanceTypes(nodepool) => Some(format!("NodePool/{nodepool}")),
            _ => None,
        };
        Reason {
            reason: block.to_string(),
            object,
            until: block.frees_at().map(|at| at.to_string()),
        }
    }
}

/// Each NodePool's instance types, shaped by its EC2NodeClass as `simulate` shapes them.
fn pool_types(
    input: &ExplainInput<'_>,
) -> Result<BTreeMap<String, Vec<Arc<InstanceType>>>, SimulateError> {
    crate::disruption::pool_instance_types(input.manifests, input.provider)
}

/// How far ahead [`budget_changes_at`] looks for a schedule window to open or close.
pub const BUDGET_LOOKAHEAD: SignedDuration = SignedDuration::from_hours(24 * 7);

/// The first minute after `now` (within [`BUDGET_LOOKAHEAD`]) at which `pool`'s budgets allow a
/// different number of disruptions for `reason`; `None` when no budget has a schedule or nothing
/// changes within the look-ahead. Budget schedules are cron expressions in minutes, so looking at
/// every minute finds each window edge.
pub fn budget_changes_at(
    pool: &NodePool,
    reason: DisruptionReason,
    count: PoolNodeCount,
    now: Timestamp,
) -> Option<Timestamp> {
    let scheduled = pool.budgets().iter().any(|b| b.schedule.is_some());
    if !scheduled {
        return None;
    }
    let allowed_now = BudgetAllowance::evaluate(pool, reason, count, now).allowed;
    let first_minute = now.as_second().div_euclid(60).saturating_add(1);
    let minutes = BUDGET_LOOKAHEAD.as_secs() / 60;
    (0..minutes)
        .filter_map(|m| {
            Timestamp::from_second(first_minute.saturating_add(m).saturating_mul(60)).ok()
        })
        .find(|at| BudgetAllowance::evaluate(pool, reason, count, *at).allowed != allowed_now)
}

/// Hours in a month, as `simulate` counts them.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// USD amounts rounded to 6 decimals, so sums print without float noise.
pub(crate) fn round6(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}
