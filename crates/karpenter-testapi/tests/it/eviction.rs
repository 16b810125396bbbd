use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, PostParams};
use serde_json::json;

use karpenter_testapi::TestApiServer;

use crate::{code_of, pod};

fn budget(spec: serde_json::Value) -> PodDisruptionBudget {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": "web"}});
    serde_json::from_value(
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec}),
    )
    .unwrap()
}

fn status_of(server: &TestApiServer) -> (i32, i32, i32, i32) {
    let pdb: PodDisruptionBudget = server.get(Some("default"), "web").unwrap();
    let s = pdb.status.unwrap();
    (
        s.expected_pods,
        s.current_healthy,
        s.desired_healthy,
        s.disruptions_allowed,
    )
}

#[tokio::test]
async fn evictions_respect_disruption_budgets() {
    let server = TestApiServer::new();
    let client = server.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client);
    for name in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &pod(name, "web", Some("n1"), true))
            .await
            .unwrap();
    }
    pods.create(
        &PostParams::default(),
        &pod("other", "db", Some("n1"), true),
    )
    .await
    .unwrap();
    pdbs.create(&PostParams::default(), &budget(json!({"minAvailable": 2})))
        .await
        .unwrap();
    assert_eq!(status_of(&server), (3, 3, 2, 1));

    // The first eviction fits the budget: the pod starts terminating (its kubelet finishes it).
    pods.evict("a", &EvictParams::default()).await.unwrap();
    assert!(
        pods.get("a")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    assert_eq!(status_of(&server), (3, 2, 2, 0));

    // The second would leave fewer than two healthy pods.
    assert_eq!(code_of(pods.evict("b", &EvictParams::default()).await), 429);
    assert!(
        pods.get("b")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
    // Pods the budget does not select, and pods already terminating, are not held back.
    pods.evict("other", &EvictParams::default()).await.unwrap();
    pods.evict("a", &EvictParams::default()).await.unwrap();

    // A replacement becomes Ready: now one more disruption is allowed.
    pods.create(&PostParams::default(), &pod("d", "web", Some("n2"), false))
        .await
        .unwrap();
    assert_eq!(code_of(pods.evict("b", &EvictParams::default()).await), 429);
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status("d", &Default::default(), &kube::api::Patch::Merge(&ready))
        .await
        .unwrap();
    // Without an owning controller every pod counts, the terminating "a" included.
    assert_eq!(status_of(&server), (4, 3, 2, 1));
    pods.evict("b", &EvictParams::default()).await.unwrap();

    let evictions = server
        .requests()
        .into_iter()
        .filter(|r| r.subresource.as_deref() == Some("eviction"));
    let codes: Vec<u16> = evictions.map(|r| r.code).collect();
    assert_eq!(codes, [201, 429, 201, 201, 429, 201]);
}

#[tokio::test]
async fn max_unavailable_percent_uses_controller_scale() {
    let server = TestApiServer::builder()
        .pods_terminate_immediately(true)
        .build();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    server
        .put_value(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "rs", "namespace": "default"}, "spec": {"replicas": 4}}))
        .unwrap();
    for name in ["a", "b", "c", "d"] {
        let mut p = pod(name, "web", Some("n1"), true);
        p.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true
        }))
        .unwrap()]);
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    server
        .put(&budget(json!({"maxUnavailable": "25%"})))
        .unwrap();
    assert_eq!(status_of(&server), (4, 4, 3, 1));
    pods.evict("a", &EvictParams::default()).await.unwrap();
    assert!(
        pods.get_opt("a").await.unwrap().is_none(),
        "deleted at once without a kubelet"
    );
    // The ReplicaSet still wants 4, so the missing pod counts against the budget.
    assert_eq!(status_of(&server), (4, 3, 3, 0));
    assert_eq!(code_of(pods.evict("b", &EvictParams::default()).await), 429);
}
