//! Runtime validation behind the `ValidationSucceeded` condition (upstream `RuntimeValidate`):
//! template labels, taints and requirements. The first problem is reported, naming the field.

use std::collections::BTreeSet;

use karpenter_api::NodePool;
use karpenter_api::well_known::{NODEPOOL_LABEL, normalize_label_key, restricted_label_reason};

const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const OPERATORS: [&str; 8] = [
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
    "Gte",
    "Lte",
];

/// `Ok` or the message for the `ValidationSucceeded=False` condition.
pub fn validate(pool: &NodePool) -> Result<(), String> {
    let template = &pool.spec.template;
    for key in template.metadata.iter().flat_map(|m| m.labels.keys()) {
        if let Some(reason) = restricted_label_reason(normalize_label_key(key)) {
            return Err(format!("spec.template.metadata.labels[{key:?}]: {reason}"));
        }
    }
    let mut seen = BTreeSet::new();
    let taints = template.spec.taints.iter().map(|t| ("taints", t));
    let startup = template
        .spec
        .startup_taints
        .iter()
        .map(|t| ("startupTaints", t));
    for (field, taint) in taints.chain(startup) {
        if taint.key.is_empty() {
            return Err(format!("spec.template.spec.{field}: taint key is required"));
        }
        if !TAINT_EFFECTS.contains(&taint.effect.as_str()) {
            return Err(format!(
                "spec.template.spec.{field}[{:?}]: effect {:?} is not one of {TAINT_EFFECTS:?}",
                taint.key, taint.effect
            ));
        }
        if !seen.insert((taint.key.clone(), taint.effect.clone())) {
            return Err(format!(
                "spec.template.spec.{field}[{:?}]: duplicate taint key and effect {:?}",
                taint.key, taint.effect
            ));
        }
    }
    for (i, req) in template.spec.requirements.iter().enumerate() {
        let at = format!("spec.template.spec.requirements[{i}]");
        let key = normalize_label_key(&req.key);
        if key == NODEPOOL_LABEL {
            return Err(format!(
                "{at}.key: {NODEPOOL_LABEL} may not be used in NodePool requirements"
            ));
        }
        if let Some(reason) = restricted_label_reason(key) {
            return Err(format!("{at}.key {:?}: {reason}", req.key));
        }
        if !OPERATORS.contains(&req.operator.as_str()) {
            return Err(format!(
                "{at}.operator: {:?} is not one of {OPERATORS:?}",
                req.operator
            ));
        }
        match req.operator.as_str() {
            "In" if req.values.is_empty() => {
                return Err(format!("{at}.values: operator In needs at least one value"));
            }
            "Gt" | "Lt" | "Gte" | "Lte"
                if req.values.len() != 1 || req.values[0].parse::<u64>().is_err() =>
            {
                return Err(format!(
                    "{at}.values: operator {} needs exactly one non-negative integer",
                    req.operator
                ));
            }
            _ => {}
        }
        if let Some(min) = req.min_values
            && req.operator == "In"
            && usize::try_from(min).is_ok_and(|m| req.values.len() < m)
        {
            return Err(format!(
                "{at}.minValues: {min} is more than the {} values given",
                req.values.len()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::nodepool;
    use karpenter_api::v1::NodeSelectorRequirementWithMinValues;

    fn with_requirement(key: &str, op: &str, values: &[&str]) -> NodePool {
        let mut pool = nodepool("p");
        pool.spec
            .template
            .spec
            .requirements
            .push(NodeSelectorRequirementWithMinValues {
                key: key.into(),
                operator: op.into(),
                values: values.iter().map(|v| v.to_string()).collect(),
                min_values: None,
            });
        pool
    }

    #[test]
    fn accepts_the_fixture_and_rejects_bad_fields() {
        validate(&nodepool("p")).unwrap();
        let err = validate(&with_requirement("karpenter.sh/nodepool", "In", &["x"])).unwrap_err();
        assert!(err.contains("requirements[1].key"), "{err}");
        let err = validate(&with_requirement("kubernetes.io/hostname", "In", &["x"])).unwrap_err();
        assert!(err.contains("kubelet"), "{err}");
        assert!(
            validate(&with_requirement("example.com/x", "In", &[]))
                .unwrap_err()
                .contains("at least one")
        );
        assert!(validate(&with_requirement("example.com/x", "Gt", &["-1"])).is_err());
        assert!(validate(&with_requirement("example.com/x", "Foo", &["1"])).is_err());
        validate(&with_requirement(
            "karpenter.k8s.aws/instance-cpu",
            "Gt",
            &["4"],
        ))
        .unwrap();

        let mut pool = nodepool("p");
        pool.spec
            .template
            .metadata
            .as_mut()
            .unwrap()
            .labels
            .insert("karpenter.sh/custom".into(), "x".into());
        assert!(validate(&pool).unwrap_err().contains("metadata.labels"));

        let mut pool = nodepool("p");
        pool.spec.template.spec.taints[0].effect = "Sometimes".into();
        assert!(validate(&pool).unwrap_err().contains("effect"));
    }
}
