//! `karpenter.sh/nodepool-hash`: a stable hash of `spec.template` used for static drift.
//!
//! Same inputs as upstream (the template minus `requirements`; zero values ignored; lists
//! compared as sets), a different function: 64-bit FNV-1a over canonical JSON. The values are
//! therefore not byte-identical to upstream's, but `karpenter.sh/nodepool-hash-version` is
//! stamped alongside, and a version change re-stamps instead of drifting (as upstream).

use std::collections::BTreeMap;

use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_DRIFTED};
use karpenter_api::well_known::{
    NODEPOOL_HASH_ANNOTATION, NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION_ANNOTATION,
};
use karpenter_api::{NodeClaim, NodePool};
use kube_core::ResourceExt;
use serde_json::Value;

/// The hash annotation value for a NodePool's current template.
pub fn template_hash(pool: &NodePool) -> String {
    let mut template = serde_json::to_value(&pool.spec.template).unwrap_or(Value::Null);
    if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("requirements");
    }
    let canonical = canonicalize(template)
        .map(|v| v.to_string())
        .unwrap_or_default();
    fnv1a64(canonical.as_bytes()).to_string()
}

/// Whether the pool was stamped by another hash version (or never): its NodeClaims' hashes were
/// computed another way and must be re-stamped before the pool takes the current version
/// (upstream `nodepool.hash` re-stamps the claims first, so a failed write is retried).
pub fn pool_needs_claim_restamp(pool: &NodePool) -> bool {
    pool.annotations()
        .get(NODEPOOL_HASH_VERSION_ANNOTATION)
        .map(String::as_str)
        != Some(NODEPOOL_HASH_VERSION)
}

/// The annotations to merge into `claim` when its pool's hash version changed (upstream
/// `updateNodeClaimHash`): a claim stamped by another version takes the current version and, unless
/// it already has a `Drifted` condition (which a changed hash function can neither confirm nor
/// clear), the pool's current hash, so a hash-function change alone never drifts a fleet. `None`:
/// nothing to write (the pool is on the current version, or the claim already is).
pub fn nodeclaim_restamp(pool: &NodePool, claim: &NodeClaim) -> Option<BTreeMap<String, String>> {
    if !pool_needs_claim_restamp(pool) {
        return None;
    }
    if claim
        .annotations()
        .get(NODEPOOL_HASH_VERSION_ANNOTATION)
        .map(String::as_str)
        == Some(NODEPOOL_HASH_VERSION)
    {
        return None;
    }
    let mut annotations = BTreeMap::from([(
        NODEPOOL_HASH_VERSION_ANNOTATION.to_string(),
        NODEPOOL_HASH_VERSION.to_string(),
    )]);
    let has_drifted_condition = claim
        .status
        .as_ref()
        .and_then(|s| s.condition(NODECLAIM_CONDITION_DRIFTED))
        .is_some();
    if !has_drifted_condition {
        annotations.insert(NODEPOOL_HASH_ANNOTATION.to_string(), template_hash(pool));
    }
    Some(annotations)
}

/// Drops zero values (null, "", [], {}, false, 0) and sorts arrays, so equivalent templates
/// hash the same.
fn canonicalize(value: Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Bool(false) => None,
        Value::String(s) if s.is_empty() => None,
        Value::Number(n) if n.as_f64() == Some(0.0) => None,
        Value::Array(items) => {
            let mut items: Vec<Value> = items.into_iter().filter_map(canonicalize).collect();
            items.sort_by_key(|v| v.to_string());
            (!items.is_empty()).then_some(Value::Array(items))
        }
        Value::Object(map) => {
            // serde_json's Map is ordered by key (no preserve_order feature), so output is stable.
            let map: serde_json::Map<String, Value> = map
                .into_iter()
                .filter_map(|(k, v)| canonicalize(v).map(|v| (k, v)))
                .collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
        other => Some(other),
    }
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::{nodeclaim, nodepool};
    use karpenter_api::v1::NodeSelectorRequirementWithMinValues;

    fn stamped<K: kube_core::Resource>(object: &mut K, hash: &str, version: &str) {
        let annotations = object.annotations_mut();
        annotations.insert(NODEPOOL_HASH_ANNOTATION.into(), hash.into());
        annotations.insert(NODEPOOL_HASH_VERSION_ANNOTATION.into(), version.into());
    }

    /// upstream drift_test.go "should update the nodepool-hash annotation on the nodepool and
    /// nodeclaim when the nodepool's nodepool-hash-version annotation does not match the
    /// controller hash version": the claim takes the pool's current hash and version.
    #[test]
    fn claims_of_a_pool_on_another_hash_version_take_the_current_hash_and_version() {
        let mut pool = nodepool("default");
        stamped(&mut pool, "test-hash-1", "test-hash-version-1");
        let mut claim = nodeclaim("default-a", "default", Some("sim://1"), "4");
        stamped(&mut claim, "test-hash-2", "test-hash-version-2");
        let restamp = nodeclaim_restamp(&pool, &claim).unwrap();
        assert_eq!(restamp[NODEPOOL_HASH_ANNOTATION], template_hash(&pool));
        assert_eq!(
            restamp[NODEPOOL_HASH_VERSION_ANNOTATION],
            NODEPOOL_HASH_VERSION
        );

        // A claim without any annotation (made before hashing existed) is stamped too.
        let bare = nodeclaim("default-b", "default", None, "4");
        assert_eq!(nodeclaim_restamp(&pool, &bare).unwrap().len(), 2);
        // A pool never stamped counts as another version (upstream compares with "").
        let unstamped = nodepool("default");
        assert!(pool_needs_claim_restamp(&unstamped));
        assert!(nodeclaim_restamp(&unstamped, &claim).is_some());
    }

    #[test]
    fn nothing_to_restamp_when_the_pool_or_the_claim_is_on_the_current_version() {
        let mut pool = nodepool("default");
        let current = template_hash(&pool);
        stamped(&mut pool, &current, NODEPOOL_HASH_VERSION);
        let mut claim = nodeclaim("default-a", "default", Some("sim://1"), "4");
        stamped(&mut claim, "old", "test-hash-version-2");
        assert!(!pool_needs_claim_restamp(&pool));
        assert!(
            nodeclaim_restamp(&pool, &claim).is_none(),
            "pool on the current version"
        );

        stamped(&mut pool, "test-hash-1", "test-hash-version-1");
        stamped(&mut claim, "stale", NODEPOOL_HASH_VERSION);
        assert!(
            nodeclaim_restamp(&pool, &claim).is_none(),
            "a claim on the current version keeps its hash: drift decides"
        );
    }

    #[test]
    fn a_claim_with_a_drifted_condition_keeps_its_hash_but_takes_the_version() {
        let mut pool = nodepool("default");
        stamped(&mut pool, "test-hash-1", "test-hash-version-1");
        let mut claim = nodeclaim("default-a", "default", Some("sim://1"), "4");
        stamped(&mut claim, "test-hash-2", "test-hash-version-2");
        let status = claim.status.get_or_insert_with(Default::default);
        status.conditions.push(
            serde_json::from_value(serde_json::json!({
                "type": NODECLAIM_CONDITION_DRIFTED, "status": "True", "reason": "NodePoolDrifted",
                "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"
            }))
            .unwrap(),
        );
        let restamp = nodeclaim_restamp(&pool, &claim).unwrap();
        assert_eq!(restamp.len(), 1);
        assert_eq!(
            restamp[NODEPOOL_HASH_VERSION_ANNOTATION],
            NODEPOOL_HASH_VERSION
        );
    }

    #[test]
    fn ignores_requirements_and_taint_order_but_not_labels() {
        let base = nodepool("default");
        let h = template_hash(&base);
        assert_eq!(h, template_hash(&base), "stable");

        let mut reqs = base.clone();
        reqs.spec
            .template
            .spec
            .requirements
            .push(NodeSelectorRequirementWithMinValues {
                key: "kubernetes.io/arch".into(),
                operator: "In".into(),
                values: ["arm64"].into(),
                min_values: None,
            });
        assert_eq!(h, template_hash(&reqs), "requirements are excluded");

        let mut taints = base.clone();
        let t = &mut taints.spec.template.spec.taints;
        t.push(
            serde_json::from_value(serde_json::json!({"key": "b", "effect": "NoSchedule"}))
                .unwrap(),
        );
        t.reverse();
        let mut taints2 = base.clone();
        taints2.spec.template.spec.taints.push(
            serde_json::from_value(serde_json::json!({"key": "b", "effect": "NoSchedule"}))
                .unwrap(),
        );
        assert_eq!(
            template_hash(&taints),
            template_hash(&taints2),
            "lists are sets"
        );
        assert_ne!(h, template_hash(&taints));

        let mut labels = base.clone();
        labels
            .spec
            .template
            .metadata
            .as_mut()
            .unwrap()
            .labels
            .insert("team".into(), "b".into());
        assert_ne!(h, template_hash(&labels));

        let mut weight = base;
        weight.spec.weight = Some(50);
        assert_eq!(h, template_hash(&weight), "only the template counts");
    }
}
