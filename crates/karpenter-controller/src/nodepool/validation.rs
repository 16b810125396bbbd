//! Validation behind the `ValidationSucceeded` condition: `karpenter_api::validation`, the same
//! checks `karpenter validate` and `simulate` apply (schema, CEL rules and upstream's runtime
//! validation), so a NodePool is judged the same everywhere.

use karpenter_api::NodePool;
use karpenter_api::validation::{ValidationError, validate_nodepool};

/// Every problem of an invalid NodePool; its message (for the `ValidationSucceeded=False`
/// condition) names each field and the fix, separated by `; `.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct InvalidNodePool(pub Vec<ValidationError>);

/// `Ok`, or every problem of the pool.
pub fn validate(pool: &NodePool) -> Result<(), InvalidNodePool> {
    let errors = validate_nodepool(pool);
    if errors.is_empty() {
        return Ok(());
    }
    Err(InvalidNodePool(errors))
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

    fn error(pool: &NodePool) -> String {
        validate(pool)
            .expect_err("the pool should be invalid")
            .to_string()
    }

    #[test]
    fn accepts_the_fixture_and_rejects_bad_fields() {
        validate(&nodepool("p")).unwrap();
        let err = error(&with_requirement("karpenter.sh/nodepool", "In", &["x"]));
        assert!(err.contains("requirements[1].key"), "{err}");
        let err = error(&with_requirement("kubernetes.io/hostname", "In", &["x"]));
        assert!(err.contains("requirements[1].key"), "{err}");
        assert!(err.contains("kubernetes.io/hostname"), "{err}");
        let err = error(&with_requirement("example.com/x", "In", &[]));
        assert!(err.contains("requirements[1]"), "{err}");
        let err = error(&with_requirement("example.com/x", "Gt", &["-1"]));
        assert!(err.contains("requirements[1]"), "{err}");
        let err = error(&with_requirement("example.com/x", "Foo", &["1"]));
        assert!(err.contains("requirements[1].operator"), "{err}");
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
        let err = error(&pool);
        assert!(err.contains("metadata.labels"), "{err}");

        let mut pool = nodepool("p");
        pool.spec.template.spec.taints[0].effect = "Sometimes".into();
        let err = error(&pool);
        assert!(err.contains("taints[0].effect"), "{err}");
    }

    #[test]
    fn reports_every_problem_with_its_hint() {
        let mut pool = with_requirement("kubernetes.io/hostname", "In", &["x"]);
        pool.spec.template.spec.taints[0].effect = "Sometimes".into();
        let err = error(&pool);
        assert!(err.contains("requirements[1].key"), "{err}");
        assert!(err.contains("taints[0].effect"), "{err}");
        assert!(err.contains(" ("), "hints are included: {err}");
    }
}
