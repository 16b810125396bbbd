//! The label sets of the metric families (`Family<Labels, _>`), with upstream's label names, and
//! how a NodeClaim's labels are derived (upstream's `DisruptionTerminationMode`, the snake-cased
//! consolidation policy).

use karpenter_api::NodeClaim;
use karpenter_api::v1::{ConsolidationPolicy, parse_go_duration_secs};
use karpenter_api::well_known::CAPACITY_TYPE_LABEL;
use kube::ResourceExt;
use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeClaimCreatedLabels {
    pub reason: String,
    pub nodepool: String,
    pub min_values_relaxed: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeClaimLabels {
    pub nodepool: String,
    pub capacity_type: String,
    pub zone: String,
}

/// A Node's pool and zone (`karpenter_nodes_created_total`, `_terminated_total`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolZoneLabels {
    pub nodepool: String,
    pub zone: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeClaimDisruptedLabels {
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
    /// The pool's `consolidationPolicy` in snake case (`when_empty_or_underutilized`) for a
    /// consolidation command; empty for every other reason, as upstream.
    pub consolidation_policy: String,
    /// `graceful` (no `terminationGracePeriod`), `eventual` (one set) or `forceful` (zero).
    pub termination_mode: String,
}

impl NodeClaimDisruptedLabels {
    /// Upstream's labels for `claim` deleted for `reason` by anything but a consolidation
    /// command (drift, expiry, repair, a failed launch, garbage collection, static scale-down).
    pub fn for_claim(reason: impl Into<String>, claim: &NodeClaim) -> Self {
        Self {
            reason: reason.into(),
            nodepool: claim.nodepool_name().unwrap_or_default().to_string(),
            capacity_type: capacity_type(claim),
            consolidation_policy: String::new(),
            termination_mode: termination_mode(claim).to_string(),
        }
    }

    /// Labels the pool's consolidation policy, for a claim a consolidation command deletes.
    pub fn consolidating(mut self, policy: ConsolidationPolicy) -> Self {
        self.consolidation_policy = snake_case(policy.as_str());
        self
    }
}

/// The capacity type label of a NodeClaim.
pub(crate) fn capacity_type(claim: &NodeClaim) -> String {
    claim
        .labels()
        .get(CAPACITY_TYPE_LABEL)
        .cloned()
        .unwrap_or_default()
}

/// Upstream's `DisruptionTerminationMode`: how the claim's drain may end.
pub fn termination_mode(claim: &NodeClaim) -> &'static str {
    match claim.spec.termination_grace_period.as_deref() {
        None => "graceful",
        Some(raw) => match parse_go_duration_secs(raw) {
            Ok(secs) if secs <= 0 => "forceful",
            _ => "eventual",
        },
    }
}

/// `WhenEmptyOrUnderutilized` → `when_empty_or_underutilized` (upstream's `pretty.ToSnakeCase`).
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptionDecisionLabels {
    pub decision: String,
    pub reason: String,
    pub consolidation_type: String,
}

/// Upstream's Balanced-scoring labels (`decision` is `approved` or `rejected`, `policy` the
/// NodePool's consolidation policy).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsolidationMoveLabels {
    pub decision: String,
    pub nodepool: String,
    pub policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsolidationTypeLabels {
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptionReasonLabels {
    pub reason: String,
}

/// Upstream's labels of the disruption pass duration: the acting method's reason (`empty`,
/// `drifted`, `underutilized`; `none` when no method acted) and consolidation type.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptionMethodLabels {
    pub reason: String,
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolReasonLabels {
    pub nodepool: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolLabels {
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolResourceLabels {
    pub nodepool: String,
    pub resource_type: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodStateLabels {
    pub name: String,
    pub namespace: String,
    /// The pod's controller owner, `kind/namespace/name` (empty without one).
    pub owner: String,
    pub node: String,
    pub scheduled: String,
    pub nodepool: String,
    pub zone: String,
    pub arch: String,
    pub capacity_type: String,
    pub instance_type: String,
    pub phase: String,
    pub ready: String,
    pub managed: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodsDrainedLabels {
    /// The NodeClaim's disruption reason, else `Forceful Termination` (upstream's wording).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionRequestLabels {
    /// HTTP status code of the answer (`200` when granted), `error` when there was none.
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(grace: Option<&str>) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "c", "labels": {
                "karpenter.sh/nodepool": "default",
                "karpenter.sh/capacity-type": "spot",
            }},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
        }))
        .unwrap();
        claim.spec.termination_grace_period = grace.map(str::to_string);
        claim
    }

    #[test]
    fn termination_mode_follows_the_claims_grace_period_as_upstream() {
        assert_eq!(termination_mode(&claim(None)), "graceful");
        assert_eq!(termination_mode(&claim(Some("1h"))), "eventual");
        assert_eq!(termination_mode(&claim(Some("0s"))), "forceful");
    }

    #[test]
    fn consolidation_labels_carry_the_pools_policy_in_snake_case() {
        let labels = NodeClaimDisruptedLabels::for_claim("empty", &claim(None));
        assert_eq!(labels.nodepool, "default");
        assert_eq!(labels.capacity_type, "spot");
        assert_eq!(labels.consolidation_policy, "");
        let labels = labels.consolidating(ConsolidationPolicy::WhenEmptyOrUnderutilized);
        assert_eq!(labels.consolidation_policy, "when_empty_or_underutilized");
        assert_eq!(snake_case("WhenEmpty"), "when_empty");
    }
}
