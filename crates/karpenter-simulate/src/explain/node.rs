//! `explain node NAME` / `explain nodeclaim NAME`: is the node a disruption candidate now, and
//! if not, each reason with its object and the time it ends (core's candidate filters, the
//! pass the controller's disruption loop runs, the budgets); drifted or not and why; expiry.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_DRIFTED};
use karpenter_api::well_known::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL};
use karpenter_core::disruption::budgets::{BudgetAllowance, DisruptionReason, PoolNodeCount};
use karpenter_core::disruption::candidates::{
    DisruptionClass, OfferingCatalog, candidates as disruption_candidates,
};
use karpenter_core::disruption::command::DriftContext;
use karpenter_core::disruption::consolidation::evaluate_each;
use karpenter_core::disruption::drift::drift_reason;
use karpenter_core::disruption::emptiness::{consolidatable_at, consolidation_block};
use karpenter_core::disruption::expiration::expires_at;
use karpenter_core::disruption::{DisruptionInput, DisruptionOptions, ProviderDrift, decide};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::state::{ClusterState, StateNode};
use kube_core::ResourceExt;
use serde::{Deserialize, Serialize};

use super::{ExplainError, ExplainInput, Reason, budget_changes_at};

/// What a node is: its NodeClaim, pool and offering, and the offering's price.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFacts {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    /// USD per hour, from the catalogue (spot prices are modelled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
}

impl NodeFacts {
    /// The facts of node (or NodeClaim) `name`; empty when the state does not know it.
    pub(crate) fn of(
        state: &ClusterState,
        types: &BTreeMap<String, Vec<Arc<InstanceType>>>,
        name: &str,
    ) -> Self {
        state
            .state_nodes()
            .iter()
            .find(|n| n.name() == name)
            .map(|n| Self::of_state_node(n, types))
            .unwrap_or_default()
    }

    fn of_state_node(
        node: &StateNode<'_>,
        types: &BTreeMap<String, Vec<Arc<InstanceType>>>,
    ) -> Self {
        let label = |key: &str| node.label(key).map(str::to_string);
        let node_pool = node.nodepool().map(str::to_string);
        let instance_type = label(INSTANCE_TYPE_LABEL);
        let zone = label(ZONE_LABEL);
        let capacity_type = label(CAPACITY_TYPE_LABEL);
        let price = match (&node_pool, &instance_type, &zone, &capacity_type) {
            (Some(pool), Some(it), Some(zone), Some(ct)) => types.price(pool, it, zone, ct),
            _ => None,
        };
        NodeFacts {
            node_claim: node.nodeclaim.map(ResourceExt::name_any),
            node_pool,
            instance_type,
            zone,
            capacity_type,
            price,
        }
    }
}

/// What the disruption loop would do with the node now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDecision {
    /// `Empty`, `Drifted` or `Underutilized`.
    pub reason: String,
    /// `empty`, `drift`, `multi` or `single`.
    pub method: String,
    /// `delete` or `replace`.
    pub decision: String,
    /// Instance types the replacement may launch as, cheapest first.
    pub replacement_options: Vec<String>,
    pub savings_per_hour: f64,
}

/// The answer for one node or NodeClaim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    /// The Node's name (the NodeClaim's while no Node has registered).
    pub node: String,
    #[serde(flatten)]
    pub facts: NodeFacts,
    /// Pods bound to it.
    pub pods: usize,
    /// Passes every candidate filter (managed, initialized, no do-not-disrupt, PDBs, ...).
    pub candidate: bool,
    /// What the disruption loop's pass would do with it now, if anything.
    pub decision: Option<NodeDecision>,
    /// Why it is not disrupted now, each with its object and end time.
    pub reasons: Vec<Reason>,
    /// The drift reason (`NodePoolDrifted`, `RequirementsDrifted`, ...), when drifted.
    pub drifted: Option<String>,
    /// RFC 3339: when consolidation may first consider it (`consolidateAfter` after its last
    /// pod event).
    pub consolidatable_at: Option<String>,
    /// RFC 3339: when its NodeClaim expires (`expireAfter`).
    pub expires_at: Option<String>,
    /// Its NodePool's budgets now, one per disruption reason.
    pub budgets: Vec<Reason>,
}

/// Explains node `name` (or a NodeClaim with no Node yet, by its name).
pub fn explain_node(input: &ExplainInput<'_>, name: &str) -> Result<NodeExplanation, ExplainError> {
    let state = input.manifests.cluster_state();
    let found = state
        .state_nodes()
        .into_iter()
        .find(|n| n.node.map(ResourceExt::name_any).as_deref() == Some(name))
        .map(|n| n.name());
    let Some(found) = found else {
        return Err(ExplainError::NotFound {
            kind: "node",
            name: name.to_string(),
        });
    };
    explain(input, &state, &found)
}

/// Explains the node of NodeClaim `name` (the NodeClaim itself while it has no Node).
pub fn explain_nodeclaim(
    input: &ExplainInput<'_>,
    name: &str,
) -> Result<NodeExplanation, ExplainError> {
    let state = input.manifests.cluster_state();
    let found = state
        .state_nodes()
        .into_iter()
        .find(|n| n.nodeclaim.map(ResourceExt::name_any).as_deref() == Some(name))
        .map(|n| n.name());
    let Some(found) = found else {
        return Err(ExplainError::NotFound {
            kind: "nodeclaim",
            name: name.to_string(),
        });
    };
    explain(input, &state, &found)
}

fn explain(
    input: &ExplainInput<'_>,
    state: &ClusterState,
    name: &str,
) -> Result<NodeExplanation, ExplainError> {
    let types = super::pool_types(input)?;
    let now = input.now;
    let nodes = state.state_nodes();
    let Some(node) = nodes.iter().find(|n| n.name() == name) else {
        return Err(ExplainError::NotFound {
            kind: "node",
            name: name.to_string(),
        });
    };
    let facts = NodeFacts::of_state_node(node, &types);
    let mut reasons: Vec<Reason> = Vec::new();
    let mut push = |reason: Reason| {
        if !reasons.iter().any(|r| r.reason == reason.reason) {
            reasons.push(reason);
        }
    };

    // The candidate filters, as every voluntary method applies them.
    let (found, rejected) = disruption_candidates(state, now, DisruptionClass::Graceful, &types);
    let candidate = found.iter().find(|c| c.name() == name);
    if let Some(rejection) = rejected.iter().find(|r| r.name == name) {
        push(Reason::from_block(&rejection.reason));
    }
    let consolidatable = candidate.and_then(consolidatable_at);
    if let Some(block) = candidate.and_then(|c| consolidation_block(c, now)) {
        push(Reason::from_block(&block));
    }

    // One pass of the loop, as the controller runs it: the node's command or its reason.
    let scheduler = input.options.clone();
    let options = DisruptionOptions::default();
    let provider_drift = ProviderDrift::new();
    let disruption_input = DisruptionInput {
        state,
        instance_types: &types,
        scheduler: &scheduler,
        options: &options,
        provider_drift: &provider_drift,
        now,
    };
    let pass = decide(&disruption_input);
    let decision = pass
        .commands
        .iter()
        .find(|c| c.candidates.iter().any(|n| n.name == name))
        .map(|command| NodeDecision {
            reason: command.reason.as_str().to_string(),
            method: command.method.as_str().to_string(),
            decision: if command.replacements.is_empty() {
                "delete".to_string()
            } else {
                "replace".to_string()
            },
            replacement_options: command
                .replacements
                .iter()
                .flat_map(|r| r.spec.requirements.iter())
                .filter(|r| r.key == INSTANCE_TYPE_LABEL)
                .flat_map(|r| r.values.iter().map(str::to_string))
                .collect(),
            savings_per_hour: super::round6(command.savings_per_hour),
        });
    let pass_reason = pass.blocked.iter().find(|r| r.name == name);
    if decision.is_none()
        && let Some(blocked) = pass_reason
    {
        push(Reason::from_block(&blocked.reason));
    }
    // A pass stops at the first command: a candidate it did not reach is judged on its own, as
    // single-node consolidation would judge it (no cheaper option, pods that would not fit).
    if decision.is_none() && pass_reason.is_none() && candidate.is_some() {
        let mut each = BTreeMap::new();
        let commands = evaluate_each(&disruption_input, &mut each);
        if let Some(rejection) = each.get(name) {
            push(Reason::from_block(&rejection.reason));
        } else if let Some(method) = pass.method {
            let alone = commands
                .iter()
                .find(|c| c.candidates.iter().any(|n| n.name == name))
                .map(|c| {
                    format!(
                        "; on its own it would be {}d (reason {}, saving ${:.4}/h)",
                        if c.replacements.is_empty() {
                            "delete"
                        } else {
                            "replace"
                        },
                        c.reason.as_str(),
                        c.savings_per_hour
                    )
                })
                .unwrap_or_default();
            push(Reason {
                reason: format!(
                    "this pass's {} command goes first; the node is looked at again in the next pass{alone}",
                    method.as_str()
                ),
                object: None,
                until: None,
            });
        }
    }

    // The pool's budgets: each reason's allowance now and when it changes.
    let mut budgets = Vec::new();
    if let Some(pool) = node.nodepool().and_then(|p| state.nodepool(p)) {
        let pool_name = pool.name_any();
        let count = PoolNodeCount::by_nodepool(state)
            .get(&pool_name)
            .copied()
            .unwrap_or_default();
        for reason in DisruptionReason::ALL {
            let allowance = BudgetAllowance::evaluate(pool, reason, count, now);
            let budget = Reason {
                reason: allowance.to_string(),
                object: Some(format!("NodePool/{pool_name}")),
                until: budget_changes_at(pool, reason, count, now).map(|t| t.to_string()),
            };
            if allowance.allowed == 0 && decision.is_none() {
                push(budget.clone());
            }
            budgets.push(budget);
        }
    }

    let drifted = drift_of(node, state, &types, now);
    let expires = node.nodeclaim.and_then(expires_at);
    Ok(NodeExplanation {
        node: name.to_string(),
        facts,
        pods: node.pods.len(),
        candidate: candidate.is_some(),
        decision,
        reasons,
        drifted,
        consolidatable_at: consolidatable.map(|t| t.to_string()),
        expires_at: expires.map(|t| t.to_string()),
        budgets,
    })
}

/// Why the node is drifted, if it is: core's detection (NodePool hash, requirements, instance
/// type), else the controller's `Drifted` condition (the provider's reasons, e.g. `AMIDrift`,
/// which only the live provider can judge).
pub(crate) fn drift_of(
    node: &StateNode<'_>,
    state: &ClusterState,
    types: &BTreeMap<String, Vec<Arc<InstanceType>>>,
    now: Timestamp,
) -> Option<String> {
    let claim = node.nodeclaim?;
    let pool = state.nodepool(node.nodepool()?)?;
    let labels = node.node.map_or_else(|| claim.labels(), |n| n.labels());
    let provider_drift = ProviderDrift::new();
    let context = DriftContext {
        provider_drift: &provider_drift,
        instance_types: types.get(&pool.name_any()).map(Vec::as_slice),
        now,
    };
    drift_reason(claim, labels, pool, context).or_else(|| {
        claim
            .status
            .as_ref()
            .and_then(|s| s.condition(NODECLAIM_CONDITION_DRIFTED))
            .filter(|c| c.status == "True")
            .and_then(|c| c.reason.clone())
    })
}
