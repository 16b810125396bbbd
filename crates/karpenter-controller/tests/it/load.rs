//! Load: 2,000 pending pods (500m / 512Mi, a NodePool of c/m `xlarge` on-demand) on the sim
//! cluster with the production scheduler, in virtual time. Every NodeClaim whose Node exists is
//! registered within seconds, and every pod ends up Running on an initialized node.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): virtual time: 2,000 pods settle in seconds of
//! wall time.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_REGISTERED};
use karpenter_controller::provisioning::CoreScheduler;
use karpenter_core::pod::Pod;
use kube::ResourceExt;
use serde_json::json;

use crate::sim_cluster::{SimCluster, bind_pending};

const PODS: usize = 2_000;

fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("load-{i}"), "namespace": "default", "uid": format!("load-uid-{i}"), "labels": {"app": "load"}},
        "spec": {"terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "app", "image": "pause",
                                 "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap()
}

fn registration_delay_secs(claim: &NodeClaim, cluster: &SimCluster) -> Option<i64> {
    let status = claim.status.as_ref()?;
    let registered = status.condition(NODECLAIM_CONDITION_REGISTERED)?;
    if registered.status != "True" {
        return None;
    }
    let at: jiff::Timestamp = registered.last_transition_time.as_deref()?.parse().ok()?;
    let node = cluster.node(status.node_name.as_deref()?)?;
    let joined = node.metadata.creation_timestamp?.0;
    Some(at.duration_since(joined).as_secs())
}

#[tokio::test(start_paused = true)]
async fn two_thousand_pods_all_registered_and_running() {
    let wall = std::time::Instant::now();
    let cluster = SimCluster::with_catalogue("us-east-1").await;
    cluster.put_default_nodeclass();
    cluster.server.put_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default", "uid": "pool-uid", "generation": 1},
        "spec": {"template": {"spec": {
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
                {"key": "karpenter.k8s.aws/instance-size", "operator": "In", "values": ["xlarge"]}
            ],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "expireAfter": "720h"
        }}}
    })).unwrap();
    let controller = cluster.start_controller_with(Arc::new(CoreScheduler)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..PODS {
        cluster.server.put(&pod(i)).unwrap();
    }
    // Polled once per virtual second (listing 2,000 pods is the test's main cost).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        bind_pending(&cluster);
        let running = cluster
            .server
            .list::<Pod>()
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == PODS {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {running} of {PODS} pods Running after 600 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let claims = cluster.server.list::<NodeClaim>();
    let nodes = cluster.server.count::<Node>();
    assert_eq!(nodes, claims.len(), "one Node per NodeClaim");
    // The cluster got 186 for the same pods and pool; twice that is double provisioning.
    assert!(
        claims.len() >= PODS / 16 && claims.len() <= 2 * 186,
        "{} NodeClaims for {PODS} pods",
        claims.len()
    );
    let mut worst = 0;
    for claim in &claims {
        assert!(claim.is_ready(), "{} not Ready", claim.name_any());
        let delay = registration_delay_secs(claim, &cluster)
            .unwrap_or_else(|| panic!("{} not registered", claim.name_any()));
        worst = worst.max(delay);
    }
    assert!(
        worst <= 5,
        "a NodeClaim was registered {worst} s after its Node joined"
    );
    eprintln!(
        "load: {PODS} pods, {} NodeClaims, worst registration {worst} s, {:?} virtual, {:?} wall",
        claims.len(),
        cluster
            .now()
            .duration_since(jiff::Timestamp::from_second(crate::sim_cluster::EPOCH).unwrap()),
        wall.elapsed()
    );
    let metrics = controller.ctx.metrics.encode();
    let solve = metrics
        .lines()
        .find(|l| l.starts_with("karpenter_provisioner_scheduling_duration_seconds_sum"))
        .unwrap_or_default();
    eprintln!("load: {solve}");
    controller.abort();
    cluster.shutdown().await;
}
