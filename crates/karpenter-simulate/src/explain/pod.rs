//! `explain pod NAMESPACE/NAME`: where a bound pod runs and on what; for a pending pod, where the
//! provisioner would put it, or why it cannot, per NodePool and per constraint (the scheduler's
//! own explanation, the text of the controller's `FailedScheduling` events).

use karpenter_core::pod::pod_key;
use serde::{Deserialize, Serialize};

use super::node::NodeFacts;
use super::{ExplainError, ExplainInput};
use crate::plan::plan_only;

/// Where the pod stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PodStatus {
    /// Bound to a node.
    Running,
    /// Pending; the provisioner would place it (on an existing node or a new NodeClaim).
    WouldSchedule,
    /// Pending; no NodePool and no node can take it.
    CannotSchedule,
}

/// The answer for one pod.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    /// `namespace/name`.
    pub pod: String,
    pub status: PodStatus,
    /// The node it runs on, or the existing node it would go to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// True when a new NodeClaim would be launched for it.
    pub new_node_claim: bool,
    /// The node's (or the planned NodeClaim's) facts: pool, type, zone, capacity type, price.
    #[serde(flatten)]
    pub facts: NodeFacts,
    /// Why it cannot be scheduled: one entry per NodePool or constraint.
    pub reasons: Vec<String>,
}

/// Explains pod `key` (`namespace/name`; a name alone means namespace `default`).
pub fn explain_pod(input: &ExplainInput<'_>, key: &str) -> Result<PodExplanation, ExplainError> {
    let key = if key.contains('/') {
        key.to_string()
    } else {
        format!("default/{key}")
    };
    let manifests = input.manifests;
    if let Some(pod) = manifests.bound_pods.iter().find(|p| {
        let (namespace, name) = pod_key(p);
        format!("{namespace}/{name}") == key
    }) {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let state = manifests.cluster_state();
        let types = super::pool_types(input)?;
        return Ok(PodExplanation {
            pod: key,
            status: PodStatus::Running,
            facts: NodeFacts::of(&state, &types, &node),
            node: Some(node),
            new_node_claim: false,
            reasons: Vec::new(),
        });
    }
    let Some(pending) = manifests.pending_pods.iter().find(|p| p.key() == key) else {
        return Err(ExplainError::NotFound {
            kind: "pod",
            name: key,
        });
    };
    // Only this pod: the answer is where *it* would go, whatever else is pending.
    let mut alone = manifests.clone();
    alone.pending_pods = vec![pending.clone()];
    let outcome = plan_only(&alone, input.provider, input.options.clone())?;
    let plan = outcome.plan;
    if let Some(claim) = plan.node_claims.first() {
        return Ok(PodExplanation {
            pod: key,
            status: PodStatus::WouldSchedule,
            node: None,
            new_node_claim: true,
            facts: NodeFacts {
                node_claim: None,
                node_pool: Some(claim.node_pool.clone()),
                instance_type: Some(claim.instance_type.clone()),
                zone: Some(claim.zone.clone()),
                capacity_type: Some(claim.capacity_type.clone()),
                price: Some(claim.price),
            },
            reasons: Vec::new(),
        });
    }
    if let Some(existing) = plan.existing_nodes.first() {
        let state = manifests.cluster_state();
        let types = super::pool_types(input)?;
        return Ok(PodExplanation {
            pod: key,
            status: PodStatus::WouldSchedule,
            facts: NodeFacts::of(&state, &types, &existing.name),
            node: Some(existing.name.clone()),
            new_node_claim: false,
            reasons: Vec::new(),
        });
    }
    // The scheduler joins its per-NodePool lines with "; ".
    let reasons = plan
        .unschedulable
        .iter()
        .flat_map(|u| u.reason.split("; ").map(str::to_string))
        .filter(|r| !r.is_empty())
        .collect();
    Ok(PodExplanation {
        pod: key,
        status: PodStatus::CannotSchedule,
        node: None,
        new_node_claim: false,
        facts: NodeFacts::default(),
        reasons,
    })
}
