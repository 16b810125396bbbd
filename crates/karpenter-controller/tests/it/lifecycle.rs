//! NodeClaim lifecycle on the test API server with the sim provider and its kubelet.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): virtual time: the 15-minute registration TTL and
//! liveness timeouts.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::v1::ConditionsExt;
use karpenter_api::well_known as wk;
use karpenter_core::cloud_provider::CloudError;
use karpenter_testapi::{ApiError, Verb};
use kube::ResourceExt;
use kube::api::WatchEvent;
use serde_json::json;

use crate::sim_cluster::SimCluster;

/// Whoever reads a launched NodeClaim sees its offering: the first version of it that carries the
/// providerID carries the instance-type, zone and capacity-type labels too (they are written
/// first), so no reader, user or test, sees a launched NodeClaim without them.
#[tokio::test(start_paused = true)]
async fn the_provider_id_is_never_seen_without_the_offering_labels() {
    let cluster = SimCluster::new().await;
    let before_launch = cluster.server.resource_version().to_string();
    let _controller = cluster.start_controller().await;
    cluster.create_nodeclaim("default-abc", json!({})).await;
    cluster
        .eventually("launch", Duration::from_secs(10), || {
            cluster
                .nodeclaim("default-abc")
                .filter(|c| c.status.as_ref().is_some_and(|s| s.provider_id.is_some()))
        })
        .await;
    // Every change since, replayed from the server's history in order.
    let api: kube::Api<NodeClaim> = kube::Api::all(cluster.client.clone());
    let mut versions = api
        .watch(&kube::api::WatchParams::default(), &before_launch)
        .await
        .unwrap()
        .boxed();
    let first_launched = loop {
        let event = versions
            .try_next()
            .await
            .unwrap()
            .expect("the launch is in the history");
        let (WatchEvent::Added(claim) | WatchEvent::Modified(claim)) = event else {
            continue;
        };
        if claim
            .status
            .as_ref()
            .is_some_and(|s| s.provider_id.is_some())
        {
            break claim;
        }
    };
    for label in [
        wk::INSTANCE_TYPE_LABEL,
        wk::ZONE_LABEL,
        wk::CAPACITY_TYPE_LABEL,
    ] {
        assert!(
            first_launched.labels().contains_key(label),
            "resourceVersion {:?} has a providerID but no {label}: {:?}",
            first_launched.resource_version(),
            first_launched.labels()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn nodeclaim_launches_registers_and_initializes() {
    let cluster = SimCluster::new().await;
    let controller = cluster.start_controller().await;
    cluster
        .create_nodeclaim(
            "default-abc",
            json!({"startupTaints": [{"key": "example.com/agent", "effect": "NoSchedule"}]}),
        )
        .await;

    // Launched: providerID, capacity and the resolved labels land on the NodeClaim.
    let launched = cluster
        .eventually("launch", Duration::from_secs(10), || {
            cluster
                .nodeclaim("default-abc")
                .filter(|c| c.status.as_ref().is_some_and(|s| s.provider_id.is_some()))
        })
        .await;
    let status = launched.status.as_ref().unwrap();
    assert!(
        status
            .provider_id
            .as_deref()
            .unwrap()
            .starts_with("sim://us-west-2/us-west-2a/i-")
    );
    assert_eq!(
        status.image_id.as_deref(),
        Some(karpenter_sim::provider::SIM_IMAGE_ID)
    );
    assert_eq!(status.capacity["cpu"].0, "2");
    assert_eq!(launched.labels()[wk::INSTANCE_TYPE_LABEL], "sim.large");
    assert_eq!(launched.labels()["team"], "a");
    assert!(
        launched
            .finalizers()
            .contains(&wk::TERMINATION_FINALIZER.to_string())
    );

    // Registered, but the startup taint holds initialization back.
    let registered = cluster
        .eventually("registration", Duration::from_secs(30), || {
            cluster.nodeclaim("default-abc").filter(|c| {
                c.status
                    .as_ref()
                    .is_some_and(|s| s.is_condition_true("Registered"))
            })
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let claim = cluster.nodeclaim("default-abc").unwrap();
    let init = claim
        .status
        .as_ref()
        .unwrap()
        .condition("Initialized")
        .unwrap();
    assert_eq!(
        (init.status.as_str(), init.reason.as_deref()),
        ("Unknown", Some("StartupTaintsExist"))
    );
    assert!(!claim.is_ready());

    let node_name = registered
        .status
        .as_ref()
        .unwrap()
        .node_name
        .clone()
        .unwrap();
    let node: Node = cluster.node(&node_name).unwrap();
    assert_eq!(node.labels()[wk::NODE_REGISTERED_LABEL], "true");
    assert_eq!(
        node.labels()["team"],
        "a",
        "NodeClaim labels synced to the Node"
    );
    assert_eq!(node.labels()[wk::NODEPOOL_LABEL], "default");
    assert!(
        node.finalizers()
            .contains(&wk::TERMINATION_FINALIZER.to_string())
    );
    assert_eq!(node.owner_references()[0].name, "default-abc");
    let taints: Vec<String> = node
        .spec
        .as_ref()
        .unwrap()
        .taints
        .iter()
        .flatten()
        .map(|t| t.key.clone())
        .collect();
    assert!(
        !taints.contains(&wk::UNREGISTERED_TAINT_KEY.to_string()),
        "{taints:?}"
    );
    assert!(
        taints.contains(&"dedicated".to_string())
            && taints.contains(&"example.com/agent".to_string())
    );

    // The agent removes its startup taint → initialized → Ready.
    let mut node = cluster.node(&node_name).unwrap();
    node.spec
        .as_mut()
        .unwrap()
        .taints
        .as_mut()
        .unwrap()
        .retain(|t| t.key != "example.com/agent");
    cluster.server.put(&node).unwrap();
    let (claim, _) = cluster.ready_nodeclaim("default-abc").await;
    let status = claim.status.as_ref().unwrap();
    for condition in ["Launched", "Registered", "Initialized", "Ready"] {
        assert!(
            status.is_condition_true(condition),
            "{condition} not True: {:?}",
            status.conditions
        );
    }
    assert_eq!(
        cluster.node(&node_name).unwrap().labels()[wk::NODE_INITIALIZED_LABEL],
        "true"
    );
    assert_eq!(cluster.provider.instances().len(), 1);

    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn restart_between_launch_and_status_write_launches_exactly_one_instance() {
    let cluster = SimCluster::new().await;
    // The first status write (the one recording the launch) fails, as if the controller died
    // right after the cloud call.
    cluster.server.inject_error(
        Some(Verb::Update),
        "nodeclaims/status",
        ApiError::internal("connection reset"),
        1,
    );
    let first = cluster.start_controller().await;
    cluster.create_nodeclaim("default-restart", json!({})).await;
    cluster
        .eventually("the first launch", Duration::from_secs(10), || {
            (!cluster.provider.instances().is_empty()).then_some(())
        })
        .await;
    first.abort();
    let claim = cluster.nodeclaim("default-restart").unwrap();
    assert!(
        claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .is_none(),
        "launch was never recorded"
    );

    let second = cluster.start_controller().await;
    let (claim, _) = cluster.ready_nodeclaim("default-restart").await;
    let instances = cluster.provider.instances();
    assert_eq!(instances.len(), 1, "exactly one instance for the NodeClaim");
    assert_eq!(
        claim.status.as_ref().unwrap().provider_id.as_deref(),
        Some(instances[0].provider_id.as_str())
    );
    second.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn insufficient_capacity_deletes_the_nodeclaim() {
    let cluster = SimCluster::new().await;
    cluster.provider.fail_next_creates(
        1,
        CloudError::InsufficientCapacity("no sim.large left".into()),
    );
    let controller = cluster.start_controller().await;
    cluster.create_nodeclaim("default-ice", json!({})).await;
    cluster
        .eventually("nodeclaim deleted", Duration::from_secs(10), || {
            cluster.nodeclaim("default-ice").is_none().then_some(())
        })
        .await;
    assert!(cluster.provider.instances().is_empty());
    assert!(
        controller
            .ctx
            .metrics
            .encode()
            .contains("reason=\"insufficient_capacity\"")
    );
    assert_eq!(
        controller
            .ctx
            .events
            .with_reason("InsufficientCapacityError")
            .len(),
        1
    );
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn unregistered_nodeclaim_is_deleted_after_the_registration_timeout() {
    let cluster = SimCluster::new().await;
    let controller = cluster.start_controller().await;
    // The first instance's kubelet never starts (sim node names derive from the launch sequence).
    cluster
        .kubelet
        .stop_heartbeats("ip-10-0-0-1.us-west-2.compute.internal");
    cluster.create_nodeclaim("default-dead", json!({})).await;
    cluster
        .eventually("launch", Duration::from_secs(10), || {
            cluster
                .nodeclaim("default-dead")
                .filter(|c| c.status.as_ref().is_some_and(|s| s.provider_id.is_some()))
        })
        .await;
    assert_eq!(
        cluster.provider.instances()[0].node_name,
        "ip-10-0-0-1.us-west-2.compute.internal"
    );
    let deleted_at = cluster
        .eventually("liveness deletion", Duration::from_secs(20 * 60), || {
            cluster
                .nodeclaim("default-dead")
                .is_none()
                .then(|| cluster.now())
        })
        .await;
    let elapsed =
        deleted_at.duration_since(jiff::Timestamp::from_second(crate::sim_cluster::EPOCH).unwrap());
    assert!(
        elapsed >= jiff::SignedDuration::from_mins(15),
        "deleted after {elapsed:?}"
    );
    assert!(
        cluster.provider.instances().is_empty(),
        "the instance was terminated"
    );
    controller.stop().await;
    cluster.shutdown().await;
}
