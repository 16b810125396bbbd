//! CapacityBuffer (`autoscaling.x-k8s.io/v1beta1`) on the real control plane: the committed CRD is
//! Established and its schema and CEL rules refuse what upstream's refuse. (The controller's
//! behaviour is upstream's regression suite: `regression::capacitybuffer`.)

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::autoscaling::CapacityBuffer;
use kube::Api;
use kube::api::PostParams;

fn buffer(name: &str, spec: serde_json::Value) -> CapacityBuffer {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn the_capacitybuffer_crd_is_established_and_refuses_invalid_buffers() {
    let Some(cluster) = super::cluster("capacitybuffer-crd").await else {
        return;
    };
    let client = cluster.client();
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get("capacitybuffers.autoscaling.x-k8s.io")
        .await
        .unwrap();
    let established = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(
        established,
        "capacitybuffers.autoscaling.x-k8s.io is not Established"
    );

    let api = Api::<CapacityBuffer>::namespaced(client.clone(), cluster.namespace());
    let created = api
        .create(
            &PostParams::default(),
            &buffer(
                "valid",
                serde_json::json!({"podTemplateRef": {"name": "t"}, "replicas": 2, "limits": {"cpu": "4"}}),
            ),
        )
        .await
        .unwrap();
    // The API server defaults the strategy, as upstream's CRD does.
    assert_eq!(
        created.spec.provisioning_strategy.as_deref(),
        Some("buffer.x-k8s.io/active-capacity")
    );

    for (name, spec, refusal) in [
        (
            "both-refs",
            serde_json::json!({"podTemplateRef": {"name": "t"}, "scalableRef": {"kind": "Deployment", "name": "web"}, "replicas": 1}),
            "You must define either PodTemplateRef or ScalableRef, but not both",
        ),
        (
            "no-size",
            serde_json::json!({"podTemplateRef": {"name": "t"}}),
            "If podTemplateRef is set, replicas or limits must also be set",
        ),
        (
            "negative",
            serde_json::json!({"podTemplateRef": {"name": "t"}, "replicas": -1}),
            "spec.replicas",
        ),
        (
            "empty-name",
            serde_json::json!({"scalableRef": {"kind": "Deployment", "name": ""}, "replicas": 1}),
            "spec.scalableRef.name",
        ),
    ] {
        let err = api
            .create(&PostParams::default(), &buffer(name, spec))
            .await
            .expect_err(name);
        eprintln!("{name}: refused as expected: {err}");
        assert!(err.to_string().contains(refusal), "{name}: {err}");
    }
}
