//! The one NodeClaim builder (upstream `NodeClaimTemplate.ToNodeClaim`): the provisioner creates
//! what it returns, and `simulate` plans with the very same objects.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use karpenter_api::v1::{NodeSelectorRequirementWithMinValues, ResourceRequirements};
use karpenter_api::well_known::{
    NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION, NODEPOOL_HASH_ANNOTATION, NODEPOOL_HASH_VERSION,
    NODEPOOL_HASH_VERSION_ANNOTATION, NODEPOOL_LABEL,
};
use karpenter_api::{NodeClaim, NodeClaimSpec, NodePool};
use kube_core::{Resource, ResourceExt};

use karpenter_api::v1alpha1::{
    CAPACITY_OVERLAY_APPLIED_ANNOTATION, PRICE_OVERLAY_APPLIED_ANNOTATION,
};

use crate::instance_type::OverlayApplied;
use crate::nodepool::hash::template_hash;
use crate::resources::ResourceList;
use crate::scheduling::NewNodeClaim;

/// The NodeClaim for a scheduler decision, from `pool` (the NodePool object the pass scheduled
/// with, so a NodePool edited mid-pass cannot put a different hash on the NodeClaim). Its
/// requirements include `node.kubernetes.io/instance-type In [the options, cheapest first]`.
pub fn build(claim: &NewNodeClaim, pool: &NodePool) -> NodeClaim {
    from_template(
        pool,
        Shape {
            requirements: claim.node_claim_requirements(),
            requests: &claim.requests,
            labels: &claim.labels,
            taints: &claim.taints,
            startup_taints: &claim.startup_taints,
            min_values_relaxed: claim.min_values_relaxed,
            overlay_applied: claim.overlay_applied,
        },
    )
}

/// A NodeClaim of a static NodePool (`spec.replicas`): the template as it is, no instance-type
/// requirement injected (the provider picks, as upstream), no requests beyond what the template
/// says.
pub fn build_static(pool: &NodePool) -> NodeClaim {
    let template = &pool.spec.template.spec;
    from_template(
        pool,
        Shape {
            requirements: template.requirements.clone(),
            requests: &ResourceList::new(),
            labels: &BTreeMap::new(),
            taints: &template.taints,
            startup_taints: &template.startup_taints,
            min_values_relaxed: false,
            overlay_applied: OverlayApplied::default(),
        },
    )
}

/// What the scheduler decided about one NodeClaim; the rest comes from the NodePool.
struct Shape<'a> {
    requirements: Vec<NodeSelectorRequirementWithMinValues>,
    requests: &'a ResourceList,
    labels: &'a BTreeMap<String, String>,
    taints: &'a [Taint],
    startup_taints: &'a [Taint],
    min_values_relaxed: bool,
    overlay_applied: OverlayApplied,
}

fn from_template(pool: &NodePool, shape: Shape<'_>) -> NodeClaim {
    let template = &pool.spec.template;
    let class = &template.spec.node_class_ref;
    let pool_name = pool.name_any();

    let mut labels: BTreeMap<String, String> = template
        .metadata
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default();
    labels.extend(shape.labels.clone());
    labels.insert(NODEPOOL_LABEL.into(), pool_name.clone());
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
        shape.min_values_relaxed.to_string(),
    );
    // Upstream's `ToNodeClaim`: the provider launches a price-overlaid NodeClaim by the overlaid
    // price (the order of its instance-type options), not by its own list price.
    if shape.overlay_applied.price {
        annotations.insert(PRICE_OVERLAY_APPLIED_ANNOTATION.into(), "true".into());
    }
    if shape.overlay_applied.capacity {
        annotations.insert(CAPACITY_OVERLAY_APPLIED_ANNOTATION.into(), "true".into());
    }

    let owner = OwnerReference {
        api_version: NodePool::api_version(&()).into_owned(),
        kind: NodePool::kind(&()).into_owned(),
        name: pool_name.clone(),
        uid: pool.uid().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    };

    // The scheduler copies the pool's taints onto its decisions; an empty list there means the
    // template's.
    let taints = if shape.taints.is_empty() {
        template.spec.taints.clone()
    } else {
        shape.taints.to_vec()
    };
    let startup_taints = if shape.startup_taints.is_empty() {
        template.spec.startup_taints.clone()
    } else {
        shape.startup_taints.to_vec()
    };

    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{pool_name}-")),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints,
            startup_taints,
            requirements: shape.requirements,
            resources: Some(ResourceRequirements {
                requests: shape.requests.to_k8s(),
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
        format!("{shown} and {} other(s)", names.len().saturating_sub(show))
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::InstanceTypeOption;
    use crate::state::fixtures::nodepool;
    use karpenter_api::well_known::INSTANCE_TYPE_LABEL;
    use std::sync::Arc;

    fn decision() -> NewNodeClaim {
        NewNodeClaim {
            node_pool: "default".into(),
            requirements: vec![NodeSelectorRequirementWithMinValues {
                key: "karpenter.sh/capacity-type".into(),
                operator: "In".into(),
                values: ["on-demand"].into(),
                min_values: None,
            }],
            instance_types: Arc::from(vec![
                InstanceTypeOption {
                    name: Arc::from("m5.large"),
                    price: 0.1,
                },
                InstanceTypeOption {
                    name: Arc::from("m5.xlarge"),
                    price: 0.2,
                },
            ]),
            pods: vec![0, 1],
            requests: ResourceList::parse([("cpu", "1500m"), ("pods", "2")]).unwrap(),
            labels: [("custom".to_string(), "x".to_string())].into(),
            hostname: "hostname-placeholder-0".into(),
            instance_type_min_values: None,
            taints: Vec::new(),
            startup_taints: Vec::new(),
            min_values_relaxed: false,
            overlay_applied: OverlayApplied::default(),
        }
    }

    #[test]
    fn builds_nodeclaim_with_owner_labels_requirements_and_hash() {
        let pool = nodepool("default");
        let claim = build(&decision(), &pool);
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
    fn static_nodeclaims_leave_the_instance_type_to_the_provider() {
        let mut pool = nodepool("fixed");
        pool.spec.replicas = Some(2);
        let claim = build_static(&pool);
        assert!(
            claim
                .spec
                .requirements
                .iter()
                .all(|r| r.key != INSTANCE_TYPE_LABEL)
        );
        assert_eq!(claim.labels()["karpenter.sh/nodepool"], "fixed");
        assert_eq!(claim.spec.taints, pool.spec.template.spec.taints);
        assert!(claim.annotations().contains_key(NODEPOOL_HASH_ANNOTATION));
    }

    #[test]
    fn overlay_annotations_only_when_an_option_carries_an_overlay() {
        let pool = nodepool("default");
        let plain = build(&decision(), &pool);
        assert!(
            !plain
                .annotations()
                .contains_key(PRICE_OVERLAY_APPLIED_ANNOTATION)
        );
        assert!(
            !plain
                .annotations()
                .contains_key(CAPACITY_OVERLAY_APPLIED_ANNOTATION)
        );

        let mut priced = decision();
        priced.overlay_applied = OverlayApplied {
            price: true,
            capacity: false,
        };
        let claim = build(&priced, &pool);
        assert_eq!(
            claim.annotations()[PRICE_OVERLAY_APPLIED_ANNOTATION],
            "true"
        );
        assert!(
            !claim
                .annotations()
                .contains_key(CAPACITY_OVERLAY_APPLIED_ANNOTATION)
        );

        let mut both = decision();
        both.overlay_applied = OverlayApplied {
            price: true,
            capacity: true,
        };
        let claim = build(&both, &pool);
        assert_eq!(
            claim.annotations()[PRICE_OVERLAY_APPLIED_ANNOTATION],
            "true"
        );
        assert_eq!(
            claim.annotations()[CAPACITY_OVERLAY_APPLIED_ANNOTATION],
            "true"
        );
    }

    #[test]
    fn summarizes_long_lists() {
        let names: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
        assert_eq!(summarize(&names, 5), "t0, t1, t2, t3, t4 and 3 other(s)");
        assert_eq!(summarize(&names[..2], 5), "t0, t1");
    }
}
