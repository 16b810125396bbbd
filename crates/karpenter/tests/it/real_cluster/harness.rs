//! The harness itself: the control plane is the real one (its version, its CRD validation), and
//! what a test leaves is gone for the next.

use karpenter_api::NodePool;
use kube::Api;
use kube::api::PostParams;

use super::objects::{DEFAULT_NODECLASS, apply};

/// The API server says which Kubernetes it is, accepts the committed CRDs (structural schema,
/// defaults, CEL cost) and refuses what their CEL rules refuse: a `karpenter-testapi` could not
/// tell us that the CRDs are acceptable to the real thing.
#[tokio::test]
async fn the_control_plane_is_a_real_kube_apiserver_with_our_crds() {
    let Some(cluster) = super::cluster("harness-version").await else {
        return;
    };
    let client = cluster.client();
    let version = client.apiserver_version().await.unwrap();
    eprintln!(
        "control plane: Kubernetes {} ({}), platform {}",
        version.git_version, version.go_version, version.platform
    );
    assert_eq!(cluster.plane().version(), version.git_version);
    assert!(version.git_version.starts_with("v1."), "{version:?}");

    apply(&client, cluster.namespace(), DEFAULT_NODECLASS).await;
    // A NodePool whose requirement uses a restricted label: the CRD's CEL rule refuses it.
    let invalid: NodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "harness-invalid"},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}
    }))
    .unwrap();
    let err = Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &invalid)
        .await
        .expect_err("the API server must refuse a restricted requirement key");
    eprintln!("refused as expected: {err}");
    assert!(err.to_string().contains("restricted"), "{err}");
}
