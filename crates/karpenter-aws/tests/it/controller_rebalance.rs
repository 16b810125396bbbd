//! Spot rebalance recommendations through the controller (karpenter-rs, `--spot-rebalance-replace`),
//! on a real control plane against moto, with the SQS message exactly as EventBridge sends it.
//! With the setting on, the node is replaced as drift replaces: the replacement launches on
//! another offering and is initialized before the old node is drained, and the pod is recreated
//! on it. With the setting off (upstream's behaviour) the recommendation is an event only.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Event, Node};
use karpenter_api::v1::{
    ConditionsExt, EC2NodeClass, NODECLAIM_CONDITION_INITIALIZED, NodeClaim, NodePool,
};
use karpenter_api::well_known as wk;
use karpenter_aws::interruption::consumer::{EVENT_NAMESPACE, REPLACING_ON_REBALANCE};
use karpenter_core::cloud_provider::{
    CloudError, CloudProvider, DriftReason, NodeClassKind, RepairPolicy,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::requirements::Requirement;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::controller_e2e::{
    AwsCluster, instance_id_of, instance_id_of_opt, node_name, offering_of,
};

/// The aws provider without its own drift verdicts: on moto a launched instance reports
/// `SecurityGroupDrift` within seconds (moto's instances do not carry the launch template's
/// security groups), which would replace the node whatever the recommendation says. Only the
/// rebalance recommendation may replace a node here.
struct WithoutProviderDrift(Arc<dyn CloudProvider>);

#[async_trait]
impl CloudProvider for WithoutProviderDrift {
    fn name(&self) -> &str {
        self.0.name()
    }
    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        self.0.create(node_claim).await
    }
    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudError> {
        self.0.delete(node_claim).await
    }
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        self.0.get(provider_id).await
    }
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudError> {
        self.0.list().await
    }
    async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.0.instance_types(node_pool, node_class).await
    }
    async fn is_drifted(&self, _: &NodeClaim) -> Result<Option<DriftReason>, CloudError> {
        Ok(None)
    }
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.0.repair_policies()
    }
    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.0.supported_node_classes()
    }
}

/// An `EC2 Instance Rebalance Recommendation` as EventBridge delivers it to the queue
/// (AWS's documented example, for our instance).
fn rebalance_recommendation(instance_id: &str) -> String {
    json!({
        "version": "0",
        "id": "2ea9a1a4-7b4c-4ad1-9a3c-0c4c1b0c9d2e",
        "detail-type": "EC2 Instance Rebalance Recommendation",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2026-11-28T15:00:00Z",
        "region": "us-west-2",
        "resources": [format!("arn:aws:ec2:us-west-2:123456789012:instance/{instance_id}")],
        "detail": {"instance-id": instance_id}
    })
    .to_string()
}

/// Whether the NodeClaim's requirements admit the offering (type, zone, capacity type).
fn admits(claim: &NodeClaim, offering: &karpenter_aws::unavailable::OfferingKey) -> bool {
    claim.spec.requirements.iter().all(|r| {
        let value = match r.key.as_str() {
            wk::INSTANCE_TYPE_LABEL => &offering.instance_type,
            wk::ZONE_LABEL => &offering.zone,
            wk::CAPACITY_TYPE_LABEL => &offering.capacity_type,
            _ => return true,
        };
        Requirement::from_values(&r.key, &r.operator, &r.values).is_ok_and(|req| req.has(value))
    })
}

/// When the NodeClaim became Initialized, if it is.
fn initialized_at(claim: &NodeClaim) -> Option<jiff::Timestamp> {
    let condition = claim
        .status
        .as_ref()?
        .condition(NODECLAIM_CONDITION_INITIALIZED)?;
    (condition.status == "True")
        .then(|| condition.last_transition_time.as_deref()?.parse().ok())
        .flatten()
}

async fn events_about(cluster: &AwsCluster, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(cluster.kube.client(), EVENT_NAMESPACE)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

/// A spot node running one inflate pod, the queue and a controller with the setting as given.
struct Running {
    cluster: AwsCluster,
    controller: karpenter_controller::run::RunningController,
    claim: NodeClaim,
    instance: String,
    pod_uid: String,
}

async fn spot_node_with_a_pod(test: &str, spot_rebalance_replace: bool) -> Option<Running> {
    let cluster = AwsCluster::new(test).await?;
    let queue_url = cluster
        .clients
        .sqs
        .create_queue()
        .queue_name(&cluster.name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let (controller, _) = cluster
        .start_controller_with(
            |p| Arc::new(WithoutProviderDrift(p)),
            Some(cluster.name.as_str()),
            spot_rebalance_replace,
        )
        .await;
    cluster.ready_node_class().await;
    cluster
        .put(&cluster.node_pool_of(&[wk::CAPACITY_TYPE_SPOT], &["m5.large", "m5.xlarge"]))
        .await;
    cluster.deploy("inflate", 1, "1").await;
    let claim = cluster
        .eventually("a spot NodeClaim", Duration::from_secs(30), async || {
            cluster.launched_claims().await.into_iter().next()
        })
        .await;
    assert_eq!(offering_of(&claim).capacity_type, wk::CAPACITY_TYPE_SPOT);
    let instance = instance_id_of(&claim);
    let pod = cluster
        .eventually("the pod bound", Duration::from_secs(30), async || {
            cluster.play_kubelet().await;
            cluster
                .pods("inflate")
                .await
                .into_iter()
                .find(|p| node_name(p) == Some(instance.as_str()))
        })
        .await;
    let claim = cluster
        .eventually(
            "the NodeClaim initialized",
            Duration::from_secs(30),
            async || {
                cluster.play_kubelet().await;
                cluster
                    .get::<NodeClaim>(&claim.name_any())
                    .await
                    .filter(|c| initialized_at(c).is_some())
            },
        )
        .await;
    cluster
        .clients
        .sqs
        .send_message()
        .queue_url(&queue_url)
        .message_body(rebalance_recommendation(&instance))
        .send()
        .await
        .unwrap();
    Some(Running {
        pod_uid: pod.uid().unwrap(),
        cluster,
        controller,
        claim,
        instance,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_recommendation_replaces_the_spot_node_before_draining_it() {
    let Some(Running {
        cluster,
        controller,
        claim,
        instance,
        pod_uid,
        ..
    }) = spot_node_with_a_pod("e2e-rebalance", true).await
    else {
        return;
    };
    let old_offering = offering_of(&claim);
    // Watch the old NodeClaim and the replacement: the replacement must be initialized no later
    // than the old one starts going away (its deletion is what drains it), as seen both by this
    // poll and by the API server's own timestamps.
    let mut replacement: Option<NodeClaim> = None;
    let mut drained_while_replacement_not_ready = false;
    let mut old_deleted_at: Option<jiff::Timestamp> = None;
    let mut drift_reasons = std::collections::BTreeSet::new();
    let pod = cluster
        .eventually(
            "the node replaced and the pod bound on the replacement",
            // A drift pass, a launch, an initialization and a drain: seconds alone; generous
            // beside other tests on 2 cores (a wait, not a measure).
            Duration::from_secs(150),
            async || {
                cluster.play_kubelet().await;
                let claims = cluster.list::<NodeClaim>().await;
                let old = claims.iter().find(|c| c.name_any() == claim.name_any());
                let newest = claims.iter().find(|c| c.name_any() != claim.name_any());
                if let Some(new) = newest {
                    replacement = Some(new.clone());
                }
                let ready = replacement.as_ref().and_then(initialized_at).is_some();
                let going = old.is_none_or(|c| c.metadata.deletion_timestamp.is_some());
                if going && !ready {
                    drained_while_replacement_not_ready = true;
                }
                if let Some(reason) = old
                    .and_then(|c| c.status.as_ref()?.condition("Drifted"))
                    .and_then(|c| c.reason.clone())
                {
                    drift_reasons.insert(reason);
                }
                if let Some(at) = old.and_then(|c| c.metadata.deletion_timestamp.as_ref()) {
                    old_deleted_at.get_or_insert(at.0);
                }
                if old.is_some() {
                    return None;
                }
                let new_instance = instance_id_of_opt(replacement.as_ref()?)?;
                let pods = cluster.pods("inflate").await;
                let [pod] = pods.as_slice() else {
                    return None;
                };
                (node_name(pod) == Some(new_instance.as_str())).then(|| pod.clone())
            },
        )
        .await;
    // Replaced for the recommendation, nothing else (when a poll saw the condition at all).
    assert!(
        drift_reasons
            .iter()
            .all(|r| r == "SpotRebalanceRecommendation"),
        "{drift_reasons:?}"
    );
    assert!(
        !drained_while_replacement_not_ready,
        "the old node went away before its replacement was initialized"
    );
    let replacement = cluster
        .get::<NodeClaim>(&replacement.unwrap().name_any())
        .await
        .unwrap();
    if let (Some(ready), Some(deleted)) = (initialized_at(&replacement), old_deleted_at) {
        // deletionTimestamp has whole seconds.
        assert!(
            ready.as_second() <= deleted.as_second(),
            "initialized {ready}, old deleted {deleted}"
        );
    }
    // Nothing lost: the one pod was evicted, recreated and runs on the replacement.
    assert_ne!(pod.uid().unwrap(), pod_uid, "the pod was recreated");
    // Another offering, and the replacement's requirements exclude the spot pool at risk.
    let new_offering = offering_of(&replacement);
    assert_ne!(new_offering, old_offering);
    assert!(
        !admits(&replacement, &old_offering),
        "{:?} admits {old_offering:?}",
        replacement.spec.requirements
    );
    let replacement_instance = instance_id_of(&replacement);
    cluster
        .eventually(
            "the old instance terminated",
            Duration::from_secs(30),
            async || {
                let instances = cluster
                    .clients
                    .cluster_instances(&cluster.name)
                    .await
                    .ok()?;
                let ids: Vec<&str> = instances.iter().map(|i| i.id.as_str()).collect();
                (ids == [replacement_instance.as_str()]).then_some(())
            },
        )
        .await;
    assert!(cluster.get::<Node>(&instance).await.is_none());
    let events = events_about(&cluster, &claim.name_any()).await;
    for reason in ["SpotRebalanceRecommendation", REPLACING_ON_REBALANCE.0] {
        assert!(
            events.iter().any(|e| e == reason),
            "{reason} not in {events:?}"
        );
    }
    let metrics = controller.ctx.metrics.encode();
    for line in [
        "karpenter_interruption_received_messages_total{message_type=\"rebalance_recommendation\"} 1",
        "karpenter_nodeclaims_disrupted_total{reason=\"drifted\",nodepool=\"general\",capacity_type=\"spot\",consolidation_policy=\"\",termination_mode=\"graceful\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_setting_a_rebalance_recommendation_is_an_event_only() {
    let Some(Running {
        cluster,
        controller,
        claim,
        pod_uid,
        ..
    }) = spot_node_with_a_pod("e2e-rebalance-off", false).await
    else {
        return;
    };
    cluster
        .eventually("the message handled", Duration::from_secs(60), async || {
            let metrics = controller.ctx.metrics.encode();
            metrics
                .contains("karpenter_interruption_deleted_messages_total 1")
                .then_some(())
        })
        .await;
    let events = events_about(&cluster, &claim.name_any()).await;
    assert!(
        events.iter().any(|e| e == "SpotRebalanceRecommendation"),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|e| e == REPLACING_ON_REBALANCE.0),
        "{events:?}"
    );
    // A few disruption passes later the node is still there, unmarked and undrifted.
    tokio::time::sleep(Duration::from_secs(12)).await;
    cluster.play_kubelet().await;
    let claims = cluster.list::<NodeClaim>().await;
    let [still] = claims.as_slice() else {
        panic!("one NodeClaim: {claims:?}");
    };
    assert_eq!(still.name_any(), claim.name_any());
    assert!(still.metadata.deletion_timestamp.is_none());
    assert!(
        !still
            .annotations()
            .contains_key(wk::SPOT_REBALANCE_RECOMMENDATION_ANNOTATION)
    );
    let pods = cluster.pods("inflate").await;
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].uid().unwrap(), pod_uid, "the pod was not evicted");
    controller.stop().await;
}
