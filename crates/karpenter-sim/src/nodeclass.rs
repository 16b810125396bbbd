//! EC2NodeClass readiness for the sim cloud, the decisions only (the writer is
//! `cluster::nodeclass`): the status conditions the aws provider's EC2NodeClass controller
//! writes, derived from the NodeClass alone, and whether a NodeClaim may launch against it.
//!
//! The sim cloud has no subnets, security groups, AMIs or instance profiles to look up: each of
//! those conditions is `True`. `ValidationSucceeded` is whether the sim can shape the catalogue
//! with the NodeClass (kubelet settings, block devices, AMI family: what it reads of it), and
//! `Ready` their conjunction, as aws computes it.
//!
//! A NodeClass is reconciled once per generation: a `Ready` condition already observed for the
//! current `metadata.generation` is left as it is, whoever wrote it (upstream's e2e tests set
//! `Ready=False` themselves to make a NodeClass not ready; a writer that recomputed it every
//! time would undo that).

use karpenter_api::v1::{
    CONDITION_FALSE, CONDITION_READY, CONDITION_TRUE, Condition, ConditionsExt, EC2NodeClass,
    EC2NodeClassStatus, NodeClassReference,
};
use karpenter_catalog::{NodeClassShape, ProviderSettings};
use karpenter_core::cloud_provider::CloudError;

/// The kind and group of the NodeClasses the sim reads.
pub const EC2_NODECLASS_KIND: &str = "EC2NodeClass";

/// The conditions besides `Ready` that the aws provider writes, all `True` in the sim cloud
/// except `ValidationSucceeded` (see the module docs).
pub const RESOLVED_CONDITIONS: [&str; 4] = [
    "AMIsReady",
    "SubnetsReady",
    "SecurityGroupsReady",
    "InstanceProfileReady",
];
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// `ValidationSucceeded=False`: the sim cannot shape instance types with this NodeClass.
pub const REASON_INVALID_FOR_SIM: &str = "NodeClassInvalid";
/// `Ready=False` because a dependency is not `True` (the aws provider's reason).
pub const REASON_NOT_READY: &str = "NotReady";

/// The conditions to write into `node_class`'s status at `now_rfc3339`, or `None` when its
/// `Ready` condition already describes the current generation (nothing to do).
pub fn conditions_to_write(node_class: &EC2NodeClass, now_rfc3339: &str) -> Option<Vec<Condition>> {
    let generation = node_class.metadata.generation;
    let mut status = node_class.status.clone().unwrap_or_default();
    if status
        .condition(CONDITION_READY)
        .is_some_and(|ready| ready.observed_generation == generation)
    {
        return None;
    }
    for type_ in RESOLVED_CONDITIONS {
        status.set_condition(type_, CONDITION_TRUE, type_, "", now_rfc3339, generation);
    }
    match NodeClassShape::from_node_class(node_class, ProviderSettings::default()) {
        Ok(_) => status.set_condition(
            CONDITION_VALIDATION_SUCCEEDED,
            CONDITION_TRUE,
            CONDITION_VALIDATION_SUCCEEDED,
            "",
            now_rfc3339,
            generation,
        ),
        Err(err) => status.set_condition(
            CONDITION_VALIDATION_SUCCEEDED,
            CONDITION_FALSE,
            REASON_INVALID_FOR_SIM,
            &err.to_string(),
            now_rfc3339,
            generation,
        ),
    };
    set_ready(&mut status, now_rfc3339, generation);
    Some(status.conditions)
}

/// `Ready`: `True` when every other condition is, else `False` naming those that are not.
fn set_ready(status: &mut EC2NodeClassStatus, now_rfc3339: &str, generation: Option<i64>) {
    let unready: Vec<String> = RESOLVED_CONDITIONS
        .iter()
        .chain(&[CONDITION_VALIDATION_SUCCEEDED])
        .filter(|type_| !status.is_condition_true(type_))
        .map(|type_| match status.condition(type_) {
            Some(c) => format!(
                "{type_}={}: {}",
                c.status,
                c.message.as_deref().unwrap_or("")
            ),
            None => format!("{type_}=Unknown"),
        })
        .collect();
    if unready.is_empty() {
        status.set_condition(
            CONDITION_READY,
            CONDITION_TRUE,
            CONDITION_READY,
            "",
            now_rfc3339,
            generation,
        );
    } else {
        status.set_condition(
            CONDITION_READY,
            CONDITION_FALSE,
            REASON_NOT_READY,
            &unready.join("; "),
            now_rfc3339,
            generation,
        );
    }
}

/// Whether the NodeClaim referring to `reference` may launch, given the NodeClass as the API
/// server has it (`None`: not found). Like the aws provider, a missing NodeClass or one whose
/// `Ready` is `False` refuses with [`CloudError::NodeClassNotReady`] (the lifecycle then deletes
/// the NodeClaim, as upstream's); a NodeClass not reconciled yet (no `Ready`) may launch.
/// Kinds other than EC2NodeClass are not the sim's to check.
pub fn launch_refusal(
    reference: &NodeClassReference,
    node_class: Option<&EC2NodeClass>,
) -> Option<CloudError> {
    if reference.kind != EC2_NODECLASS_KIND
        || reference.group != karpenter_api::well_known::AWS_GROUP
    {
        return None;
    }
    let Some(node_class) = node_class else {
        return Some(CloudError::NodeClassNotReady(format!(
            "EC2NodeClass {:?} not found",
            reference.name
        )));
    };
    let ready = node_class
        .status
        .as_ref()
        .and_then(|s| s.condition(CONDITION_READY))?;
    (ready.status == CONDITION_FALSE).then(|| {
        CloudError::NodeClassNotReady(format!(
            "EC2NodeClass {:?} is not ready: {}",
            reference.name,
            ready.message.as_deref().unwrap_or_default()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-01-01T00:00:00Z";
    const LATER: &str = "2026-01-01T00:05:00Z";

    fn node_class(generation: i64, status: serde_json::Value) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default", "generation": generation},
            "spec": {
                "role": "KarpenterNodeRole-e2e",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "e2e"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "e2e"}}]
            },
            "status": status
        }))
        .unwrap()
    }

    fn with(conditions: Vec<Condition>) -> EC2NodeClass {
        let mut class = node_class(1, json!({}));
        class.status = Some(EC2NodeClassStatus {
            conditions,
            ..EC2NodeClassStatus::default()
        });
        class
    }

    fn reference(kind: &str) -> NodeClassReference {
        serde_json::from_value(
            json!({"group": "karpenter.k8s.aws", "kind": kind, "name": "default"}),
        )
        .unwrap()
    }

    #[test]
    fn a_new_nodeclass_gets_the_aws_conditions_all_true_for_its_generation() {
        let conditions = conditions_to_write(&node_class(1, json!({})), NOW).unwrap();
        let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        for expected in RESOLVED_CONDITIONS
            .iter()
            .chain(&[CONDITION_VALIDATION_SUCCEEDED, CONDITION_READY])
        {
            assert!(
                types.contains(expected),
                "{expected} missing from {types:?}"
            );
        }
        assert!(
            conditions.iter().all(|c| c.status == CONDITION_TRUE),
            "{conditions:?}"
        );
        assert!(conditions.iter().all(|c| c.observed_generation == Some(1)));
        assert!(
            conditions_to_write(&with(conditions.clone()), LATER).is_none(),
            "reconciled once per generation"
        );
    }

    #[test]
    fn a_ready_condition_written_by_someone_else_for_this_generation_is_kept() {
        let not_ready = Condition {
            type_: CONDITION_READY.into(),
            status: CONDITION_FALSE.into(),
            reason: Some("TestingNotReady".into()),
            message: Some("NodeClass is not ready".into()),
            last_transition_time: Some(NOW.into()),
            observed_generation: Some(1),
        };
        assert!(conditions_to_write(&with(vec![not_ready.clone()]), LATER).is_none());
        // A spec change (a new generation) is reconciled again.
        let mut changed = with(vec![not_ready]);
        changed.metadata.generation = Some(2);
        let conditions = conditions_to_write(&changed, LATER).unwrap();
        let ready = conditions
            .iter()
            .find(|c| c.type_ == CONDITION_READY)
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.observed_generation),
            ("True", Some(2))
        );
    }

    #[test]
    fn launch_is_refused_without_the_nodeclass_or_when_it_is_not_ready() {
        let missing = launch_refusal(&reference(EC2_NODECLASS_KIND), None);
        assert!(
            matches!(missing, Some(CloudError::NodeClassNotReady(m)) if m.contains("not found"))
        );
        let unreconciled = node_class(1, json!({}));
        assert!(launch_refusal(&reference(EC2_NODECLASS_KIND), Some(&unreconciled)).is_none());
        let ready = with(conditions_to_write(&unreconciled, NOW).unwrap());
        assert!(launch_refusal(&reference(EC2_NODECLASS_KIND), Some(&ready)).is_none());
        let mut not_ready = ready.clone();
        let status = not_ready.status.as_mut().unwrap();
        status.set_condition(
            CONDITION_READY,
            CONDITION_FALSE,
            "TestingNotReady",
            "NodeClass is not ready",
            LATER,
            Some(1),
        );
        let refused = launch_refusal(&reference(EC2_NODECLASS_KIND), Some(&not_ready));
        assert!(
            matches!(&refused, Some(CloudError::NodeClassNotReady(m)) if m.contains("NodeClass is not ready")),
            "{refused:?}"
        );
        assert!(!refused.unwrap().is_retryable());
        assert!(launch_refusal(&reference("KWOKNodeClass"), None).is_none());
    }
}
