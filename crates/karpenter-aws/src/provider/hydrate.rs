//! Turning instances into NodeClaims: the provider ID, labels, capacity and annotations a
//! launched NodeClaim gets (`hydrate`), and the NodeClaims `get`/`list` describe instances with.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::v1::{
    EC2NodeClass, NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeSelectorRequirementWithMinValues,
};
use karpenter_api::well_known as wk;
use karpenter_core::cloud_provider::node_resources;
use karpenter_core::instance_type::InstanceType;
use karpenter_core::resources::ResourceList;

use crate::instance::{self, Instance};

/// The labels an instance gives its NodeClaim: the type's, then zone, zone ID, capacity type
/// and the NodePool/NodeClass it was launched for.
fn instance_labels(
    instance: &Instance,
    instance_type: Option<&InstanceType>,
    zone_id: Option<&str>,
) -> BTreeMap<String, String> {
    let mut labels = instance_type.map(|t| t.labels.clone()).unwrap_or_default();
    labels.insert(
        wk::INSTANCE_TYPE_LABEL.to_string(),
        instance.instance_type.clone(),
    );
    labels.insert(wk::ZONE_LABEL.to_string(), instance.zone.clone());
    labels.insert(
        wk::CAPACITY_TYPE_LABEL.to_string(),
        instance.capacity_type.clone(),
    );
    if let Some(zone_id) = zone_id {
        labels.insert(wk::AWS_ZONE_ID_LABEL.to_string(), zone_id.to_string());
    }
    if let Some(id) = &instance.capacity_reservation_id {
        labels.insert(
            wk::AWS_CAPACITY_RESERVATION_ID_LABEL.to_string(),
            id.clone(),
        );
    }
    for tag in [instance::NODEPOOL_TAG, instance::NODECLASS_TAG] {
        if let Some(value) = instance.tags.get(tag) {
            labels.insert(tag.to_string(), value.clone());
        }
    }
    labels
}

/// Upstream's annotation naming the instance profile a NodeClaim's instance was launched with.
pub const INSTANCE_PROFILE_ANNOTATION: &str = "karpenter.k8s.aws/instance-profile-name";

/// The annotations a launch copies from the EC2NodeClass (reference §4.1): its hash and hash
/// version (static drift compares them later) and the instance profile.
pub fn node_class_annotations(node_class: &EC2NodeClass) -> BTreeMap<String, String> {
    let mut annotations: BTreeMap<String, String> = [
        wk::EC2NODECLASS_HASH_ANNOTATION,
        wk::EC2NODECLASS_HASH_VERSION_ANNOTATION,
    ]
    .into_iter()
    .filter_map(|key| {
        let value = node_class.metadata.annotations.as_ref()?.get(key)?;
        Some((key.to_string(), value.clone()))
    })
    .collect();
    let profile = node_class
        .status
        .as_ref()
        .and_then(|s| s.instance_profile.clone())
        .or_else(|| node_class.spec.instance_profile.clone());
    if let Some(profile) = profile {
        annotations.insert(INSTANCE_PROFILE_ANNOTATION.to_string(), profile);
    }
    annotations
}

/// `node_claim` with the instance's provider ID, image, labels, capacity and allocatable.
pub fn hydrate(
    mut node_claim: NodeClaim,
    instance: &Instance,
    instance_type: Option<&InstanceType>,
    zone_id: Option<&str>,
) -> NodeClaim {
    let requests = node_claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| ResourceList::from_k8s(&r.requests).ok())
        .unwrap_or_default();
    node_claim
        .metadata
        .labels
        .get_or_insert_default()
        .extend(instance_labels(instance, instance_type, zone_id));
    let status = node_claim
        .status
        .get_or_insert_with(NodeClaimStatus::default);
    status.provider_id = Some(instance.provider_id());
    status.image_id.clone_from(&instance.image_id);
    if let Some(it) = instance_type {
        status.capacity = node_resources(&it.capacity, &requests).to_k8s();
        status.allocatable = node_resources(&it.allocatable(), &requests).to_k8s();
    }
    node_claim
}

/// A NodeClaim describing an instance, for `get`/`list` (which have only the instance).
pub fn node_claim_of(instance: &Instance) -> NodeClaim {
    let single = |key: &str, value: &str| NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: "In".to_string(),
        values: [value].into(),
        min_values: None,
    };
    let mut node_claim = NodeClaim::new(
        instance.node_claim().unwrap_or_default(),
        NodeClaimSpec {
            requirements: vec![
                single(wk::INSTANCE_TYPE_LABEL, &instance.instance_type),
                single(wk::ZONE_LABEL, &instance.zone),
                single(wk::CAPACITY_TYPE_LABEL, &instance.capacity_type),
            ],
            node_class_ref: karpenter_api::v1::NodeClassReference {
                group: wk::AWS_GROUP.to_string(),
                kind: "EC2NodeClass".to_string(),
                name: instance
                    .tags
                    .get(instance::NODECLASS_TAG)
                    .cloned()
                    .unwrap_or_default(),
            },
            ..NodeClaimSpec::default()
        },
    );
    node_claim.metadata.creation_timestamp = instance.launch_time.map(Time);
    hydrate(node_claim, instance, None, None)
}

#[cfg(test)]
mod tests {
    use karpenter_api::v1::EC2NodeClassSpec;
    use karpenter_core::resources;

    use super::*;

    use crate::provider::tests::m5_large;

    fn instance() -> Instance {
        Instance {
            id: "i-0abc".into(),
            instance_type: "m5.large".into(),
            zone: "us-west-2b".into(),
            capacity_type: "spot".into(),
            image_id: Some("ami-1".into()),
            state: "running".into(),
            launch_time: None,
            subnet_id: None,
            security_group_ids: vec![],
            tags: BTreeMap::from([
                (instance::NODECLAIM_TAG.to_string(), "general-x".to_string()),
                (instance::NODEPOOL_TAG.to_string(), "general".to_string()),
                (instance::NODECLASS_TAG.to_string(), "default".to_string()),
            ]),
            capacity_reservation_id: None,
        }
    }

    #[test]
    fn hydrate_sets_provider_id_labels_and_resources_of_the_type() {
        let claim = hydrate(
            NodeClaim::new("general-x", NodeClaimSpec::default()),
            &instance(),
            Some(&m5_large()),
            Some("usw2-az1"),
        );
        let labels = claim.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[wk::INSTANCE_TYPE_LABEL], "m5.large");
        assert_eq!(labels[wk::ZONE_LABEL], "us-west-2b");
        assert_eq!(labels[wk::AWS_ZONE_ID_LABEL], "usw2-az1");
        assert_eq!(labels[wk::CAPACITY_TYPE_LABEL], "spot");
        assert_eq!(labels[wk::ARCH_LABEL], "amd64");
        assert_eq!(labels[wk::NODEPOOL_LABEL], "general");
        let status = claim.status.as_ref().unwrap();
        assert_eq!(
            status.provider_id.as_deref(),
            Some("aws:///us-west-2b/i-0abc")
        );
        assert_eq!(status.image_id.as_deref(), Some("ami-1"));
        assert_eq!(status.capacity["pods"].0, "29");
        // A zero EFA capacity is dropped, as upstream does for resources not asked for.
        assert!(!status.capacity.contains_key(resources::EFA));
    }

    #[test]
    fn launches_copy_the_node_class_hash_and_instance_profile() {
        let mut node_class = EC2NodeClass::new("default", EC2NodeClassSpec::default());
        assert!(node_class_annotations(&node_class).is_empty());
        node_class.metadata.annotations = Some(BTreeMap::from([
            (
                wk::EC2NODECLASS_HASH_ANNOTATION.to_string(),
                "123".to_string(),
            ),
            (
                wk::EC2NODECLASS_HASH_VERSION_ANNOTATION.to_string(),
                "v5".to_string(),
            ),
            ("other".to_string(), "x".to_string()),
        ]));
        node_class.spec.instance_profile = Some("given".into());
        let annotations = node_class_annotations(&node_class);
        assert_eq!(annotations.len(), 3);
        assert_eq!(annotations[wk::EC2NODECLASS_HASH_ANNOTATION], "123");
        assert_eq!(annotations[INSTANCE_PROFILE_ANNOTATION], "given");
        node_class.status = Some(karpenter_api::v1::EC2NodeClassStatus {
            instance_profile: Some("resolved".into()),
            ..Default::default()
        });
        assert_eq!(
            node_class_annotations(&node_class)[INSTANCE_PROFILE_ANNOTATION],
            "resolved"
        );
    }

    #[test]
    fn node_claim_of_names_the_claim_and_its_class_from_tags() {
        let claim = node_claim_of(&instance());
        assert_eq!(claim.metadata.name.as_deref(), Some("general-x"));
        assert_eq!(claim.spec.node_class_ref.name, "default");
        assert_eq!(claim.spec.node_class_ref.kind, "EC2NodeClass");
        assert_eq!(claim.spec.requirements.len(), 3);
        assert!(claim.status.as_ref().unwrap().capacity.is_empty());
    }
}
