//! Owner-reference garbage collection and late responses (`delay_response`).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use futures::StreamExt;
use karpenter_testapi::{TestApiServer, Verb};

fn owned(name: &str, namespace: &str, owner_uids: &[&str]) -> serde_json::Value {
    let refs: Vec<_> = owner_uids
        .iter()
        .map(|uid| json!({"apiVersion": "v1", "kind": "Node", "name": "x", "uid": uid}))
        .collect();
    json!({"name": name, "namespace": namespace, "ownerReferences": refs})
}

#[tokio::test]
async fn deleting_an_owner_deletes_dependents_that_have_no_other_owner() {
    let server = TestApiServer::new();
    let nodes: Api<Node> = Api::all(server.client());
    let mut uids = Vec::new();
    for name in ["n1", "n2"] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        let created = nodes.create(&PostParams::default(), &node).await.unwrap();
        uids.push(created.metadata.uid.unwrap());
    }
    let lease: Lease = serde_json::from_value(json!({
        "metadata": owned("n1", "kube-node-lease", &[&uids[0]])
    }))
    .unwrap();
    Api::<Lease>::namespaced(server.client(), "kube-node-lease")
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    // Owned by both nodes: survives n1's deletion.
    let shared: ConfigMap = serde_json::from_value(json!({
        "metadata": owned("shared", "default", &[&uids[0], &uids[1]])
    }))
    .unwrap();
    // A dependent of the lease (GC is recursive) and one with a finalizer (deletion starts).
    let grandchild: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "grandchild", "namespace": "default"}
    }))
    .unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    configmaps
        .create(&PostParams::default(), &shared)
        .await
        .unwrap();
    let lease_uid = server
        .get::<Lease>(Some("kube-node-lease"), "n1")
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let mut grandchild = grandchild;
    grandchild.metadata.owner_references = Some(vec![
        serde_json::from_value(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": "n1", "uid": lease_uid}),
        )
        .unwrap(),
    ]);
    grandchild.metadata.finalizers = Some(vec!["test/hold".into()]);
    configmaps
        .create(&PostParams::default(), &grandchild)
        .await
        .unwrap();

    nodes.delete("n1", &DeleteParams::default()).await.unwrap();

    assert!(server.get::<Lease>(Some("kube-node-lease"), "n1").is_none());
    assert!(server.get::<ConfigMap>(Some("default"), "shared").is_some());
    let held = server
        .get::<ConfigMap>(Some("default"), "grandchild")
        .unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "finalizers still hold a collected dependent"
    );
    nodes.delete("n2", &DeleteParams::default()).await.unwrap();
    assert!(server.get::<ConfigMap>(Some("default"), "shared").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_delayed_response_arrives_after_the_write_is_applied_and_watched() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let stream = watcher::watcher(api.clone(), watcher::Config::default());
    futures::pin_mut!(stream);
    // Initial list of nothing.
    while !matches!(stream.next().await, Some(Ok(watcher::Event::InitDone))) {}

    server.delay_response(Some(Verb::Create), "configmaps", Duration::from_secs(5), 1);
    let started = tokio::time::Instant::now();
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "late"}})).unwrap();
    let create = tokio::spawn({
        let api = api.clone();
        async move { api.create(&PostParams::default(), &cm).await.unwrap() }
    });
    let Some(Ok(watcher::Event::Apply(seen))) = stream.next().await else {
        panic!("expected the watch event first");
    };
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(!create.is_finished());
    let answered = create.await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(5));
    assert_eq!(
        answered.metadata.resource_version,
        seen.metadata.resource_version
    );
    // Used up: the next create is answered at once.
    let again = tokio::time::Instant::now();
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "prompt"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    assert!(again.elapsed() < Duration::from_secs(1));
}
