use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use karpenter_testapi::TestApiServer;

#[tokio::test]
async fn serves_a_real_client_over_loopback_with_a_kubeconfig() {
    let server = TestApiServer::new();
    let tcp = server.serve_tcp().await.unwrap();
    assert!(tcp.url().starts_with("http://127.0.0.1:"));
    let path = std::env::temp_dir().join(format!("testapi-kubeconfig-{}.yaml", std::process::id()));
    tcp.write_kubeconfig(&path).unwrap();

    let kubeconfig = Kubeconfig::read_from(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(client);

    let mut applied = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "over-tcp"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let seen = tokio::time::timeout(std::time::Duration::from_secs(10), applied.next())
        .await
        .unwrap();
    assert_eq!(
        seen.unwrap().unwrap().metadata.name.as_deref(),
        Some("over-tcp")
    );
    assert_eq!(server.count::<ConfigMap>(), 1);
}
