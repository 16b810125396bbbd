//! Garbage collection of instances on moto, as the controller's GC
//! (`karpenter_controller::nodeclaim::gc`) drives it through the provider: `list` shows every
//! instance of the cluster as a NodeClaim with its launch time and NodePool label (what the GC's
//! grace period and ownership filter read), and `delete` terminates only instances carrying this
//! cluster's ownership tag — an instance with Karpenter's other tags but not that one is listed,
//! seen as leaked, and still never terminated.

use std::collections::BTreeSet;

use aws_sdk_ec2::types::{InstanceType, ResourceType, Tag, TagSpecification};
use jiff::{SignedDuration, Timestamp};
use karpenter_api::well_known as wk;
use karpenter_aws::instance::{
    EKS_CLUSTER_NAME_TAG, NODECLAIM_TAG, NODECLASS_TAG, NODEPOOL_TAG, cluster_ownership_tag,
};
use karpenter_aws::provider::node_claim_of;
use karpenter_aws::{AwsClients, Error};

use crate::harness::{moto_clients, unique_cluster};

async fn launch(clients: &AwsClients, tags: &[(&str, &str)]) -> String {
    let tags = TagSpecification::builder()
        .resource_type(ResourceType::Instance)
        .set_tags(Some(
            tags.iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build();
    let out = clients
        .ec2
        .run_instances()
        .image_id("ami-ekslinux")
        .instance_type(InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .tag_specifications(tags)
        .send()
        .await
        .unwrap();
    out.instances()[0].instance_id().unwrap().to_string()
}

#[tokio::test]
async fn leaked_instances_are_terminated_only_when_this_cluster_owns_them() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("gc");
    let owner = cluster_ownership_tag(&cluster);
    let karpenter_tags = [
        (EKS_CLUSTER_NAME_TAG, cluster.as_str()),
        (NODEPOOL_TAG, "general"),
        (NODECLASS_TAG, "default"),
    ];
    let mut owned_tags = karpenter_tags.to_vec();
    owned_tags.extend([(owner.as_str(), "owned"), (NODECLAIM_TAG, "general-gone")]);
    let owned = launch(&clients, &owned_tags).await;
    let mut foreign_tags = karpenter_tags.to_vec();
    foreign_tags.push((NODECLAIM_TAG, "general-foreign"));
    let foreign = launch(&clients, &foreign_tags).await;

    let listed = clients.cluster_instances(&cluster).await.unwrap();
    assert_eq!(listed.len(), 2);
    for instance in &listed {
        // What the controller's GC reads from `CloudProvider::list`.
        let claim = node_claim_of(instance);
        assert!(claim.metadata.creation_timestamp.is_some());
        assert_eq!(
            claim.metadata.labels.as_ref().unwrap()[wk::NODEPOOL_LABEL],
            "general"
        );
        assert_eq!(
            claim.status.as_ref().unwrap().provider_id.as_deref(),
            Some(instance.provider_id().as_str())
        );
    }

    // No NodeClaim exists: past the 30 s grace both are leaked, before it neither.
    let no_claims = BTreeSet::new();
    let grace = SignedDuration::from_secs(30);
    let later = Timestamp::now() + SignedDuration::from_secs(60);
    let leaked = clients
        .leaked_instances(&cluster, &no_claims, later, grace)
        .await
        .unwrap();
    assert_eq!(leaked.len(), 2);
    let just_launched = Timestamp::now() - SignedDuration::from_secs(5);
    assert!(
        clients
            .leaked_instances(&cluster, &no_claims, just_launched, grace)
            .await
            .unwrap()
            .is_empty()
    );

    for instance in &leaked {
        let result = clients
            .terminate_instance(&cluster, &instance.provider_id())
            .await;
        if instance.id == owned {
            assert!(matches!(result, Ok(Some(_))), "{result:?}");
        } else {
            assert_eq!(instance.id, foreign);
            assert!(matches!(result, Err(Error::NotOwned { .. })), "{result:?}");
        }
    }
    let left: Vec<String> = clients
        .cluster_instances(&cluster)
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state == "running")
        .map(|i| i.id)
        .collect();
    assert_eq!(left, vec![foreign.clone()]);
    clients
        .ec2
        .terminate_instances()
        .instance_ids(foreign)
        .send()
        .await
        .unwrap();
}
