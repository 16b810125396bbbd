//! `explain nodepool NAME`: its budgets now and when they change, its limits and how much of
//! them its NodeClaims use, its nodes (drifted or not) and what they cost.

use karpenter_api::well_known::NODEPOOL_LABEL;
use karpenter_core::disruption::budgets::{BudgetAllowance, DisruptionReason, PoolNodeCount};
use karpenter_core::resources::{Quantity, ResourceList};
use kube_core::ResourceExt;
use serde::{Deserialize, Serialize};

use super::node::{NodeFacts, drift_of};
use super::{ExplainError, ExplainInput, HOURS_PER_MONTH, budget_changes_at, round6};

/// One node of the pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolNode {
    pub name: String,
    #[serde(flatten)]
    pub facts: NodeFacts,
    pub pods: usize,
    /// The drift reason, when drifted.
    pub drifted: Option<String>,
}

/// One reason's budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    /// `Empty`, `Drifted` or `Underutilized`.
    pub reason: String,
    /// Disruptions allowed now; `null` when unlimited.
    pub allowed: Option<u32>,
    /// The controller's sentence for it.
    pub explanation: String,
    /// RFC 3339: when a schedule window opens or closes and the number changes.
    pub changes_at: Option<String>,
}

/// One resource of `spec.limits`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitReport {
    pub resource: String,
    /// Σ capacity of the pool's NodeClaims.
    pub used: String,
    pub limit: String,
}

/// The answer for one NodePool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolExplanation {
    pub node_pool: String,
    pub nodes: Vec<PoolNode>,
    /// Of `nodes`, the drifted ones.
    pub drifted: usize,
    /// Σ node prices, USD per hour (nodes without a known price count 0).
    pub hourly_cost: f64,
    /// `hourlyCost` × 730.
    pub monthly_cost: f64,
    pub limits: Vec<LimitReport>,
    pub budgets: Vec<BudgetReport>,
}

/// Explains NodePool `name`.
pub fn explain_nodepool(
    input: &ExplainInput<'_>,
    name: &str,
) -> Result<NodePoolExplanation, ExplainError> {
    let state = input.manifests.cluster_state();
    let Some(pool) = state.nodepool(name) else {
        return Err(ExplainError::NotFound {
            kind: "nodepool",
            name: name.to_string(),
        });
    };
    let types = super::pool_types(input)?;
    let now = input.now;
    let nodes: Vec<PoolNode> = state
        .state_nodes()
        .iter()
        .filter(|n| n.nodepool() == Some(name))
        .map(|n| PoolNode {
            name: n.name(),
            facts: NodeFacts::of(&state, &types, &n.name()),
            pods: n.pods.len(),
            drifted: drift_of(n, &state, &types, now),
        })
        .collect();
    let hourly_cost = round6(nodes.iter().filter_map(|n| n.facts.price).sum());

    let mut used = ResourceList::new();
    for claim in state
        .nodeclaims()
        .filter(|c| c.labels().get(NODEPOOL_LABEL).map(String::as_str) == Some(name))
    {
        if let Some(capacity) = claim
            .status
            .as_ref()
            .and_then(|s| ResourceList::from_k8s(&s.capacity).ok())
        {
            used.add(&capacity);
        }
    }
    let limits = pool
        .spec
        .limits
        .iter()
        .flatten()
        .map(|(resource, limit)| LimitReport {
            resource: resource.clone(),
            used: used.get(resource).to_string(),
            limit: Quantity::parse(&limit.0).map_or_else(|_| limit.0.clone(), |q| q.to_string()),
        })
        .collect();

    let count = PoolNodeCount::by_nodepool(&state)
        .get(name)
        .copied()
        .unwrap_or_default();
    let budgets = DisruptionReason::ALL
        .into_iter()
        .map(|reason| {
            let allowance = BudgetAllowance::evaluate(pool, reason, count, now);
            BudgetReport {
                reason: reason.as_str().to_string(),
                allowed: (!allowance.is_unlimited()).then_some(allowance.allowed),
                explanation: allowance.to_string(),
                changes_at: budget_changes_at(pool, reason, count, now).map(|t| t.to_string()),
            }
        })
        .collect();
    Ok(NodePoolExplanation {
        node_pool: name.to_string(),
        drifted: nodes.iter().filter(|n| n.drifted.is_some()).count(),
        nodes,
        hourly_cost,
        monthly_cost: round6(hourly_cost * HOURS_PER_MONTH),
        limits,
        budgets,
    })
}
