//! Stays on `karpenter-testapi` (docs/testing.md): injected faults and exact lease expiry in
//! virtual time; the real-cluster takeover is `karpenter/tests/it/real_cluster/leader.rs`.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::pod::Pod;
use karpenter_testapi::{RequestRecord, TestApiServer, Verb};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

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

/// The writes `client` sent that reached the server, from the `from`-th request of the log.
fn writes_of(server: &TestApiServer, client: &str, from: usize) -> Vec<RequestRecord> {
    server
        .requests()
        .into_iter()
        .skip(from)
        .filter(|r| r.verb.is_write() && r.client.as_deref() == Some(client))
        .collect()
}

/// Labels the `default` NodePool through `client`.
async fn label_nodepool(client: kube::Client, value: &str) -> Result<NodePool, kube::Error> {
    let patch = json!({"metadata": {"labels": {"written-by": value}}});
    Api::<NodePool>::all(client)
        .patch("default", &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

fn refused(result: Result<NodePool, kube::Error>) -> bool {
    result.is_err_and(|err| err.to_string().contains("only the leader writes"))
}

#[tokio::test(start_paused = true)]
async fn a_follower_sends_no_writes_and_a_write_that_forgot_to_ask_is_refused() {
    let server = api_server();
    server.put(&nodepool("default")).unwrap();
    server.put(&nodeclass("default")).unwrap();
    let a = start_named(&server, "replica-a").await;
    advance(Duration::from_millis(500)).await;
    let b = start_named(&server, "replica-b").await;
    advance(Duration::from_secs(3)).await;
    assert!(a.ctx.leader().is_some() && b.ctx.leader().is_none());

    // Work for every controller: pending pods to provision, NodePool status to write.
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    for i in 0..3 {
        pods.create(&PostParams::default(), &pending_pod(&format!("p-{i}"), "1"))
            .await
            .unwrap();
    }
    advance(Duration::from_secs(12)).await;
    assert!(server.count::<NodeClaim>() >= 1, "the leader wrote");
    assert!(!writes_of(&server, "replica-a", 0).is_empty());

    // A controller that writes through the shared client instead of a Leader's writer: the
    // request is refused before it leaves the replica, on the follower and the leader alike.
    assert!(refused(label_nodepool(b.ctx.client.clone(), "b").await));
    assert!(refused(label_nodepool(a.ctx.client.clone(), "a").await));
    let pool: NodePool = server.get(None, "default").unwrap();
    assert!(
        !pool
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("written-by")
    );

    let follower_writes = writes_of(&server, "replica-b", 0);
    assert!(follower_writes.is_empty(), "{follower_writes:?}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn losing_the_lease_revokes_the_writer_and_stops_writes() {
    let server = api_server();
    server.put(&nodepool("default")).unwrap();
    server.put(&nodeclass("default")).unwrap();
    let a = start_named(&server, "replica-a").await;
    advance(Duration::from_secs(3)).await;
    let leader = a.ctx.leader().expect("a lone replica leads");
    assert!(label_nodepool(leader.writer(), "first-term").await.is_ok());

    // Another replica takes the lease over (as after a partition): A sees a fresh holder at its
    // next renewal and steps down.
    let mut lease: Lease = server
        .get(Some("kube-system"), "karpenter-leader-election")
        .unwrap();
    let spec = lease.spec.get_or_insert_default();
    spec.holder_identity = Some("replica-z".into());
    spec.renew_time = Some(MicroTime(epoch()));
    server.put(&lease).unwrap();
    advance(Duration::from_secs(3)).await;
    assert!(!a.ctx.is_leader());
    assert!(!leader.is_current());
    assert!(a.ctx.leader().is_none());

    // The old term's writer is refused; nothing of A's but lease rounds reaches the server.
    let lost_at = server.requests().len();
    assert!(refused(label_nodepool(leader.writer(), "after-loss").await));
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    pods.create(&PostParams::default(), &pending_pod("p-late", "1"))
        .await
        .unwrap();
    advance(Duration::from_secs(8)).await;
    let after: Vec<RequestRecord> = writes_of(&server, "replica-a", lost_at)
        .into_iter()
        .filter(|r| r.resource != "leases")
        .collect();
    assert!(after.is_empty(), "{after:?}");

    // Replica Z never renews: A takes the lease again, in a new term. The old writer stays
    // revoked; the new one writes.
    let mut waited = Duration::ZERO;
    while !a.ctx.is_leader() {
        advance(Duration::from_millis(500)).await;
        waited += Duration::from_millis(500);
        assert!(
            waited < Duration::from_secs(30),
            "A did not take the lease again"
        );
    }
    let again = a.ctx.leader().expect("A leads again");
    assert!(again.term() > leader.term());
    assert!(refused(label_nodepool(leader.writer(), "old-term").await));
    assert!(label_nodepool(again.writer(), "second-term").await.is_ok());
    a.stop().await;
}
