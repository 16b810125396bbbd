//! Fault injection: hung requests are neither answered nor applied; named clients are recorded.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use karpenter_testapi::{ApiError, TestApiServer, Verb};

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_hung_request_is_never_answered_nor_applied() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client_named("replica-a"));
    server.inject_hang(Some(Verb::Create), "configmaps", 1);

    let hung = tokio::time::timeout(
        Duration::from_secs(3600),
        api.create(&PostParams::default(), &configmap("one")),
    )
    .await;
    assert!(hung.is_err(), "answered: {hung:?}");
    assert_eq!(
        server.count::<ConfigMap>(),
        0,
        "a hung write is not applied"
    );
    let hung = server.hung_requests();
    assert_eq!(hung.len(), 1);
    assert_eq!(
        (hung[0].verb, hung[0].code, hung[0].client.as_deref()),
        (Verb::Create, 0, Some("replica-a"))
    );
    assert!(server.requests().is_empty(), "hung requests are not served");

    // The fault is spent: the retry goes through, attributed to its client.
    api.create(&PostParams::default(), &configmap("one"))
        .await
        .unwrap();
    let served = server.requests();
    assert_eq!(served.len(), 1);
    assert_eq!(served[0].client.as_deref(), Some("replica-a"));
    assert_eq!(server.count::<ConfigMap>(), 1);
}

#[tokio::test(start_paused = true)]
async fn hangs_apply_to_watches_and_clear_faults_heals() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    server.inject_hang(Some(Verb::Watch), "", 1);
    let watch = tokio::time::timeout(
        Duration::from_secs(60),
        api.watch(&kube::api::WatchParams::default(), "0"),
    )
    .await;
    assert!(watch.is_err(), "a hung watch never starts");

    server.inject_hang(None, "", 100);
    server.inject_error(
        None,
        "configmaps",
        ApiError::new(500, "InternalError", "boom"),
        1,
    );
    server.clear_faults();
    // A client-specific hang leaves other clients alone.
    let other: Api<ConfigMap> = Api::default_namespaced(server.client_named("b"));
    server.inject_hang_for_client("a", None, "configmaps", 5);
    other
        .create(&PostParams::default(), &configmap("three"))
        .await
        .unwrap();
    server.clear_faults();
    api.create(&PostParams::default(), &configmap("two"))
        .await
        .unwrap();
    let clients: Vec<Option<String>> = server.requests().into_iter().map(|r| r.client).collect();
    assert_eq!(clients, [Some("b".to_string()), None]);
}
