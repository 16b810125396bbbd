//! Cluster-state freshness: a NodeClaim whose Node exists is registered within seconds whatever
//! order the API server's answers and watch events arrive in.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): injected reordering of answers and watch events.

use std::sync::Arc;
use std::time::Duration;

use karpenter_api::NodeClaim;
use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_REGISTERED};
use karpenter_controller::provisioning::CoreScheduler;
use karpenter_core::pod::Pod;
use karpenter_testapi::Verb;

use crate::sim_cluster::{SimCluster, bind_pending, inflate_pod};

fn registered(claim: &NodeClaim) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        s.is_condition_true(NODECLAIM_CONDITION_REGISTERED) && s.node_name.is_some()
    })
}

/// The create answer of every NodeClaim arrives late: after its watch event and after the
/// lifecycle launched it. The provisioner's stale
/// copy must not replace the newer watched one (which would make every later write conflict with
/// no event left to repair the state).
#[tokio::test(start_paused = true)]
async fn late_create_answers_do_not_stall_registration() {
    // Answers landing after launch and before (1.5 s) or after (2.5 s) the Node registered;
    // both stalled registration for good before state copies compared resourceVersions.
    for delay in [1500, 2500] {
        late_create_answers(Duration::from_millis(delay)).await;
    }
}

async fn late_create_answers(delay: Duration) {
    let cluster = SimCluster::with_catalogue("us-east-1").await;
    cluster.put_default_nodepool();
    let controller = cluster.start_controller_with(Arc::new(CoreScheduler)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster
        .server
        .delay_response(Some(Verb::Create), "nodeclaims", delay, usize::MAX);
    for i in 0..6 {
        cluster.server.put(&inflate_pod(i)).unwrap();
    }
    let claims = cluster
        .eventually("NodeClaims created", Duration::from_secs(15), || {
            let claims = cluster.server.list::<NodeClaim>();
            (!claims.is_empty()).then_some(claims)
        })
        .await;
    cluster
        .eventually(
            "every NodeClaim registered",
            Duration::from_secs(15),
            || {
                let claims = cluster.server.list::<NodeClaim>();
                claims.iter().all(registered).then_some(())
            },
        )
        .await;
    cluster
        .eventually("pods running", Duration::from_secs(30), || {
            bind_pending(&cluster);
            let pods = cluster.server.list::<Pod>();
            pods.iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .then_some(())
        })
        .await;
    assert_eq!(
        cluster.server.count::<NodeClaim>(),
        claims.len(),
        "no capacity added twice"
    );
    assert!(
        cluster
            .server
            .list::<NodeClaim>()
            .iter()
            .all(NodeClaim::is_ready)
    );
    controller.stop().await;
    cluster.shutdown().await;
}

/// Registration is made impossible (every Node update fails): the pods nominated to the stuck
/// NodeClaim's Node must not stay nominated to it pass after pass; once the Node has been
/// unregistered past the grace, the provisioner adds capacity that can take them.
#[tokio::test(start_paused = true)]
async fn pods_nominated_to_a_node_stuck_unregistered_get_new_capacity() {
    let cluster = SimCluster::with_catalogue("us-east-1").await;
    cluster.put_default_nodepool();
    let controller = cluster.start_controller_with(Arc::new(CoreScheduler)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.server.inject_error(
        Some(Verb::Update),
        "nodes",
        karpenter_testapi::ApiError::internal("etcd is having a bad day"),
        usize::MAX,
    );
    for i in 0..2 {
        cluster.server.put(&inflate_pod(i)).unwrap();
    }
    // One NodeClaim (upstream's packing) or one per pod (the default's cheaper pair).
    let first = cluster
        .eventually(
            "NodeClaims whose Nodes joined",
            Duration::from_secs(15),
            || {
                let claims = cluster.server.list::<NodeClaim>();
                let nodes = cluster.server.count::<k8s_openapi::api::core::v1::Node>();
                (!claims.is_empty() && nodes == claims.len()).then_some(claims)
            },
        )
        .await;
    assert!(first.iter().all(|c| !registered(c)));
    let launched = first.len();
    cluster
        .eventually("new capacity for the pods", Duration::from_secs(90), || {
            (cluster.server.count::<NodeClaim>() > launched).then_some(())
        })
        .await;
    controller.abort();
    cluster.shutdown().await;
}
