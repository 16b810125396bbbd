//! Expiration (karpenter-core §1.2): a NodeClaim older than its `spec.expireAfter` is deleted,
//! forcefully — no budgets, no do-not-disrupt, no PDB check before the deletion starts (the drain
//! still respects PDBs up to `terminationGracePeriod`). Upstream runs it in the NodeClaim
//! lifecycle, not in the disruption loop; the pods it displaces are provisioned for as usual.

use jiff::Timestamp;
use karpenter_api::NodeClaim;
use kube_core::ResourceExt;

use crate::state::ClusterState;

/// When the NodeClaim expires: its creation plus `spec.expireAfter`. `None` for `Never`, for a
/// NodeClaim without a creation timestamp, or when the sum overflows.
pub fn expires_at(claim: &NodeClaim) -> Option<Timestamp> {
    let after = claim.spec.expire_after.as_ref()?.duration()?;
    let created = claim.metadata.creation_timestamp.as_ref()?.0;
    created.checked_add(after).ok()
}

/// Names of the NodeClaims that have expired at `now` and are not being deleted yet, in name
/// order.
pub fn expired(state: &ClusterState, now: Timestamp) -> Vec<String> {
    state
        .nodeclaims()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| expires_at(c).is_some_and(|at| at <= now))
        .map(|c| c.name_any())
        .collect()
}

/// The earliest instant after `now` at which some NodeClaim expires (when to look again).
pub fn next_expiry(state: &ClusterState, now: Timestamp) -> Option<Timestamp> {
    state
        .nodeclaims()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(expires_at)
        .filter(|at| *at > now)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::v1::NillableDuration;

    fn claim(name: &str, created: &str, expire_after: Option<&str>) -> NodeClaim {
        let mut c: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []}
        }))
        .unwrap();
        c.spec.expire_after = expire_after.map(|raw| NillableDuration::parse(raw).unwrap());
        c
    }

    #[test]
    fn expires_at_creation_plus_expire_after_and_never_for_never() {
        let c = claim("a", "2026-01-01T00:00:00Z", Some("720h"));
        assert_eq!(
            expires_at(&c),
            Some("2026-01-31T00:00:00Z".parse().unwrap())
        );
        assert_eq!(
            expires_at(&claim("b", "2026-01-01T00:00:00Z", Some("Never"))),
            None
        );
        assert_eq!(expires_at(&claim("c", "2026-01-01T00:00:00Z", None)), None);
    }
}
