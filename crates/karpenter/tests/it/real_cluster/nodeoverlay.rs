//! NodeOverlay (`karpenter.sh/v1alpha1`) on the real control plane: the committed CRD is
//! Established, its schema and CEL rules refuse what upstream's refuse, and with
//! `FEATURE_GATES=NodeOverlay=true` the controller writes `ValidationSucceeded` on every overlay
//! (`Conflict` for the loser of two same-weight overlays changing the same price).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::v1alpha1::NodeOverlay;
use kube::Api;
use kube::api::PostParams;

use super::objects::{DEFAULT_NODECLASS, apply};
use super::{SOON, eventually, repo_root};

fn overlay(spec: serde_json::Value, name: &str) -> NodeOverlay {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn the_nodeoverlay_crd_is_established_and_refuses_invalid_overlays() {
    let Some(cluster) = super::cluster("nodeoverlay-crd").await else {
        return;
    };
    let client = cluster.client();
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get("nodeoverlays.karpenter.sh")
        .await
        .unwrap();
    let established = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established, "nodeoverlays.karpenter.sh is not Established");

    let api = Api::<NodeOverlay>::all(client.clone());
    let valid = overlay(
        serde_json::json!({
            "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m7i"]}],
            "priceAdjustment": "-30%",
            "capacity": {"hugepages-2Mi": "1Gi"},
            "weight": 10
        }),
        "valid",
    );
    api.create(&PostParams::default(), &valid).await.unwrap();

    for (name, spec, refusal) in [
        (
            "both-prices",
            serde_json::json!({"requirements": [], "price": "0.1", "priceAdjustment": "-10%"}),
            "cannot set both 'price' and 'priceAdjustment'",
        ),
        (
            "cpu-capacity",
            serde_json::json!({"requirements": [], "capacity": {"cpu": "4"}}),
            "invalid resource restricted",
        ),
        (
            "not-in-empty",
            serde_json::json!({"requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "NotIn"}], "price": "1"}),
            "requirements with operator 'NotIn' must have a value defined",
        ),
        (
            "bad-adjustment",
            serde_json::json!({"requirements": [], "priceAdjustment": "10%"}),
            "spec.priceAdjustment",
        ),
    ] {
        let err = api
            .create(&PostParams::default(), &overlay(spec, name))
            .await
            .expect_err(name);
        eprintln!("{name}: refused as expected: {err}");
        assert!(err.to_string().contains(refusal), "{name}: {err}");
    }
}

#[tokio::test]
async fn the_controller_writes_validation_succeeded_and_conflict_with_the_gate_on() {
    let options = super::options().env("FEATURE_GATES", "NodeOverlay=true");
    let Some((cluster, _karpenter)) = super::with_karpenter("nodeoverlay-status", options).await
    else {
        return;
    };
    let client = cluster.client();
    let ns = cluster.namespace();
    apply(&client, ns, DEFAULT_NODECLASS).await;
    let nodepool =
        std::fs::read_to_string(repo_root().join("examples/inflate/nodepool.yaml")).unwrap();
    apply(&client, ns, &nodepool).await;
    let api = Api::<NodeOverlay>::all(client.clone());
    for (name, price) in [("overlay-a", "0.5"), ("overlay-b", "0.7")] {
        let o = overlay(
            serde_json::json!({
                "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
                "price": price,
                "weight": 10
            }),
            name,
        );
        api.create(&PostParams::default(), &o).await.unwrap();
    }
    let condition = |o: &NodeOverlay| {
        o.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "ValidationSucceeded")
                .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
        })
    };
    let (a, b) = eventually("both overlays have ValidationSucceeded", SOON, || {
        let api = api.clone();
        async move {
            let a = condition(&api.get("overlay-a").await.ok()?)?;
            let b = condition(&api.get("overlay-b").await.ok()?)?;
            Some((a, b))
        }
    })
    .await
    .unwrap();
    // Same weight, same offerings: the later name is evaluated first and wins.
    assert_eq!(a, ("False".to_string(), "Conflict".to_string()));
    assert_eq!(b.0, "True");
}
