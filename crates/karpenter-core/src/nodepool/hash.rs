//! `karpenter.sh/nodepool-hash`: a stable hash of `spec.template` used for static drift.
//!
//! Same inputs as upstream (the template minus `requirements`; zero values ignored; lists
//! compared as sets), a different function: 64-bit FNV-1a over canonical JSON. The values are
//! therefore not byte-identical to upstream's, but `karpenter.sh/nodepool-hash-version` is
//! stamped alongside, and a version change re-stamps instead of drifting (as upstream).

use karpenter_api::NodePool;
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
    use crate::state::fixtures::nodepool;
    use karpenter_api::v1::NodeSelectorRequirementWithMinValues;

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
                values: vec!["arm64".into()],
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
