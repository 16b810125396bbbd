//! Stays on `karpenter-testapi` (docs/testing.md): virtual time and a stand-in solver: batch
//! windows measured exactly.

use std::time::Duration;

use karpenter_api::{NodeClaim, NodePool};
use karpenter_controller::events::{REASON_FAILED_SCHEDULING, REASON_NOMINATED};
use karpenter_core::pod::Pod;
use karpenter_testapi::Verb;
use kube::ResourceExt;
use kube::api::{Api, PostParams};

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn ten_pending_pods_get_nodeclaims_in_one_batch_window() {
    let server = api_server();
    server.put(&nodepool("default")).unwrap();
    server.put(&nodeclass("default")).unwrap();
    let replica = start(&server, settings("replica-a")).await;
    advance(Duration::from_secs(3)).await; // sync + leadership
    assert!(replica.ctx.is_leader());

    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    for i in 0..10 {
        pods.create(
            &PostParams::default(),
            &pending_pod(&format!("inflate-{i}"), "3"),
        )
        .await
        .unwrap();
        advance(Duration::from_millis(100)).await;
    }
    // Nothing is created while the window is still open (< 1 s idle since the last pod).
    assert_eq!(server.count::<NodeClaim>(), 0);
    advance(Duration::from_secs(2)).await;

    let claims: Vec<NodeClaim> = server.list();
    // 10 × 3 cpu, packed 5 per 16-cpu machine: two NodeClaims.
    assert_eq!(claims.len(), 2, "{claims:#?}");
    let creates = server
        .requests()
        .iter()
        .filter(|r| r.verb == Verb::Create && r.resource == "nodeclaims")
        .count();
    assert_eq!(creates, 2, "one pass, one create per NodeClaim");
    for claim in &claims {
        assert!(claim.name_any().starts_with("default-"));
        assert_eq!(claim.labels()["karpenter.sh/nodepool"], "default");
        assert_eq!(claim.owner_references()[0].kind, "NodePool");
        assert!(
            claim
                .annotations()
                .contains_key("karpenter.sh/nodepool-hash")
        );
        let it = claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == "node.kubernetes.io/instance-type")
            .unwrap();
        assert_eq!(it.values, ["huge.16x"]);
        assert_eq!(
            claim.spec.resources.as_ref().unwrap().requests["cpu"].0,
            "15"
        );
        assert!(
            claim
                .spec
                .resources
                .as_ref()
                .unwrap()
                .requests
                .contains_key("cpu")
        );
    }
    let nominated = replica.ctx.events.with_reason(REASON_NOMINATED);
    assert_eq!(nominated.len(), 10);
    assert!(
        nominated[0]
            .message
            .starts_with("Pod should schedule on: nodeclaim/default-")
    );

    // The pods stay pending (no kubelet here), but they are nominated: the next re-trigger
    // (every 10 s) must not create more NodeClaims within the nomination window (20 s).
    advance(Duration::from_secs(12)).await;
    assert_eq!(server.count::<NodeClaim>(), 2, "no double provisioning");

    // The NodePool status counts the in-flight NodeClaims.
    let pool: NodePool = server.get(None, "default").unwrap();
    let status = pool.status.unwrap();
    assert_eq!(status.nodes, Some(2));
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "{:?}",
        status.conditions
    );
    assert!(
        pool.metadata
            .annotations
            .unwrap()
            .contains_key("karpenter.sh/nodepool-hash")
    );
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn invalid_nodepool_is_reported_and_pods_get_failed_scheduling() {
    let server = api_server();
    let mut pool = nodepool("bad");
    pool.spec.template.spec.requirements[0].key = "kubernetes.io/hostname".into();
    server.put(&pool).unwrap();
    server.put(&nodeclass("default")).unwrap();
    let replica = start(&server, settings("replica-a")).await;
    advance(Duration::from_secs(3)).await;

    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    pods.create(&PostParams::default(), &pending_pod("lonely", "1"))
        .await
        .unwrap();
    advance(Duration::from_secs(8)).await;

    assert_eq!(server.count::<NodeClaim>(), 0);
    let pool: NodePool = server.get(None, "bad").unwrap();
    let validation = pool
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "ValidationSucceeded")
        .unwrap();
    assert_eq!(validation.status, "False");
    assert!(
        validation
            .message
            .unwrap()
            .contains("kubernetes.io/hostname")
    );
    let failed = replica.ctx.events.with_reason(REASON_FAILED_SCHEDULING);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].message.contains("no nodepools found"));
    let events: Vec<k8s_openapi::api::core::v1::Event> = server.list();
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some(REASON_FAILED_SCHEDULING))
    );
    replica.stop().await;
}
