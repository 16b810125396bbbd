//! A planned NodeClaim → the `karpenter.sh/v1` object the provisioner creates (upstream
//! `NodeClaimTemplate.ToNodeClaim`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use karpenter_api::v1::{NodeSelectorRequirementWithMinValues, ResourceRequirements};
use karpenter_api::well_known::{
    INSTANCE_TYPE_LABEL, NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION, NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION_ANNOTATION, NODEPOOL_LABEL,
};
use karpenter_api::{NodeClaim, NodeClaimSpec, NodePool};
use kube::{Resource, ResourceExt};

use super::solver::PlannedNodeClaim;
use crate::nodepool::hash::template_hash;

/// Builds the NodeClaim for `plan` from `pool` (the NodePool object the pass scheduled with, so
/// a NodePool edited mid-pass cannot put a different hash on the NodeClaim).
pub fn build(plan: &PlannedNodeClaim, pool: &NodePool) -> NodeClaim {
    let template = &pool.spec.template;
    let class = &template.spec.node_class_ref;

    let mut labels: BTreeMap<String, String> = template
        .metadata
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default();
    labels.extend(plan.labels.clone());
    labels.insert(NODEPOOL_LABEL.into(), pool.name_any());
    // `<group>/<lowercase kind>: <name>`, e.g. karpenter.k8s.aws/ec2nodeclass: default.
    labels.insert(
        format!("{}/{}", class.group, class.kind.to_lowercase()),
        class.name.clone(),
    );

    let mut annotations: BTreeMap<String, String> = template
        .metadata
        .as_ref()
        .map(|m| m.annotations.clone())
        .unwrap_or_default();
    annotations.insert(NODEPOOL_HASH_ANNOTATION.into(), template_hash(pool));
    annotations.insert(
        NODEPOOL_HASH_VERSION_ANNOTATION.into(),
        NODEPOOL_HASH_VERSION.into(),
    );
    annotations.insert(
        NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION.into(),
        plan.min_values_relaxed.to_string(),
    );

    let mut requirements = plan.requirements.clone();
    if !plan.instance_types.is_empty() && !requirements.iter().any(|r| r.key == INSTANCE_TYPE_LABEL)
    {
        requirements.push(NodeSelectorRequirementWithMinValues {
            key: INSTANCE_TYPE_LABEL.into(),
            operator: "In".into(),
            values: plan.instance_types.clone(),
            min_values: None,
        });
    }

    let owner = OwnerReference {
        api_version: NodePool::api_version(&()).into_owned(),
        kind: NodePool::kind(&()).into_owned(),
        name: pool.name_any(),
        uid: pool.uid().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    };

    let taints = if plan.taints.is_empty() {
        template.spec.taints.clone()
    } else {
        plan.taints.clone()
    };
    let startup_taints = if plan.startup_taints.is_empty() {
        template.spec.startup_taints.clone()
    } else {
        plan.startup_taints.clone()
    };

    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", pool.name_any())),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints,
            startup_taints,
            requirements,
            resources: Some(ResourceRequirements {
                requests: plan.requests.to_k8s(),
            }),
            node_class_ref: class.clone(),
            termination_grace_period: template.spec.termination_grace_period.clone(),
            expire_after: template.spec.expire_after.clone(),
        },
        status: None,
    }
}

/// `a, b, c, d, e and 12 other(s)`: how upstream logs long instance-type lists.
pub fn summarize(names: &[String], show: usize) -> String {
    let shown = names
        .iter()
        .take(show)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > show {
        format!("{shown} and {} other(s)", names.len() - show)
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::nodepool;
    use karpenter_core::resources::ResourceList;

    #[test]
    fn builds_nodeclaim_with_owner_labels_requirements_and_hash() {
        let pool = nodepool("default");
        let plan = PlannedNodeClaim {
            nodepool: "default".into(),
            requirements: vec![NodeSelectorRequirementWithMinValues {
                key: "karpenter.sh/capacity-type".into(),
                operator: "In".into(),
                values: vec!["on-demand".into()],
                min_values: None,
            }],
            instance_types: vec!["m5.large".into(), "m5.xlarge".into()],
            pods: vec![0, 1],
            requests: ResourceList::parse([("cpu", "1500m"), ("pods", "2")]).unwrap(),
            labels: [("custom".to_string(), "x".to_string())].into(),
            ..PlannedNodeClaim::default()
        };
        let claim = build(&plan, &pool);
        assert_eq!(claim.metadata.generate_name.as_deref(), Some("default-"));
        let owner = &claim.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("NodePool", "default", "uid-default")
        );
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert_eq!(owner.api_version, "karpenter.sh/v1");
        let labels = claim.labels();
        assert_eq!(labels["karpenter.sh/nodepool"], "default");
        assert_eq!(labels["karpenter.k8s.aws/ec2nodeclass"], "default");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["custom"], "x");
        let annotations = claim.annotations();
        assert_eq!(annotations[NODEPOOL_HASH_ANNOTATION], template_hash(&pool));
        assert_eq!(annotations[NODEPOOL_HASH_VERSION_ANNOTATION], "v3");
        assert_eq!(
            annotations[NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION],
            "false"
        );
        let it = claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == INSTANCE_TYPE_LABEL)
            .unwrap();
        assert_eq!(it.values, ["m5.large", "m5.xlarge"]);
        assert_eq!(claim.spec.resources.unwrap().requests["cpu"].0, "1500m");
        assert_eq!(claim.spec.taints[0].key, "dedicated");
        assert_eq!(claim.spec.startup_taints[0].key, "startup");
        assert_eq!(claim.spec.node_class_ref.name, "default");
        assert_eq!(claim.spec.expire_after.unwrap().as_str(), "720h");
    }

    #[test]
    fn summarizes_long_lists() {
        let names: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
        assert_eq!(summarize(&names, 5), "t0, t1, t2, t3, t4 and 3 other(s)");
        assert_eq!(summarize(&names[..2], 5), "t0, t1");
    }
}
