//! NodeOverlay (`karpenter.sh/v1alpha1`) on the real control plane: the committed CRD is
//! Established, its schema and CEL rules refuse what upstream's refuse, and with
//! `FEATURE_GATES=NodeOverlay=true` the controller writes `ValidationSucceeded` on every overlay
//! (`Conflict` for the loser of two same-weight overlays changing the same price).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::v1alpha1::NodeOverlay;
use karpenter_envtest::{Cluster, Karpenter};
use kube::Api;
use kube::api::PostParams;

use super::objects::{DEFAULT_NODECLASS, apply, condition_true, nodeclaims};
use super::{SOON, eventually, repo_root};

fn overlay(spec: serde_json::Value, name: &str) -> NodeOverlay {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// The controller with `NodeOverlay=true` on a real control plane, the default EC2NodeClass and
/// `examples/inflate`'s NodePool applied.
async fn gated_with_inflate_pool(test: &str) -> Option<(Cluster, Karpenter)> {
    let options = super::options().env("FEATURE_GATES", "NodeOverlay=true");
    let (cluster, karpenter) = super::with_karpenter(test, options).await?;
    let client = cluster.client();
    let ns = cluster.namespace();
    apply(&client, ns, DEFAULT_NODECLASS).await;
    let nodepool =
        std::fs::read_to_string(repo_root().join("examples/inflate/nodepool.yaml")).unwrap();
    apply(&client, ns, &nodepool).await;
    Some((cluster, karpenter))
}

/// Waits until the controller has written `ValidationSucceeded=True` on overlay `name`: it has
/// read the overlay, so pods created after are planned with it.
async fn validated(api: &Api<NodeOverlay>, name: &str) {
    eventually("the overlay is evaluated", SOON, || {
        let api = api.clone();
        async move {
            let o = api.get(name).await.ok()?;
            o.status?
                .conditions
                .iter()
                .any(|c| c.type_ == "ValidationSucceeded" && c.status == "True")
                .then_some(())
        }
    })
    .await
    .unwrap();
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
    let Some((cluster, _karpenter)) = gated_with_inflate_pool("nodeoverlay-status").await else {
        return;
    };
    let client = cluster.client();
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

/// `examples/node-overlay` on the controller with the sim provider: the overlay's 40% discount
/// makes m7i the cheapest fit, the NodeClaim carries `karpenter.sh/price-overlay-applied` and the
/// provider launches the m7i type the plan chose, not the list-cheapest c6a `simulate` picks
/// without the gate.
#[tokio::test]
async fn a_price_overlay_annotates_the_nodeclaim_and_the_launch_follows_the_overlaid_price() {
    let options = super::options().env("FEATURE_GATES", "NodeOverlay=true");
    let Some((cluster, _karpenter)) = super::with_karpenter("nodeoverlay-launch", options).await
    else {
        return;
    };
    let client = cluster.client();
    let ns = cluster.namespace();
    let example = repo_root().join("examples/node-overlay");
    let read = |f: &str| std::fs::read_to_string(example.join(f)).unwrap();
    apply(&client, ns, &read("ec2nodeclass.yaml")).await;
    apply(&client, ns, &read("nodepool.yaml")).await;
    apply(&client, ns, &read("nodeoverlay.yaml")).await;
    // The controller has read the overlay once it wrote its status: the pods come after.
    let api = Api::<NodeOverlay>::all(client.clone());
    validated(&api, "savings-plan-m7i").await;
    let inflate = read("inflate.yaml").replace("namespace: default", &format!("namespace: {ns}"));
    apply(&client, ns, &inflate).await;

    let claim = eventually("a launched NodeClaim", SOON, || {
        let client = client.clone();
        async move {
            nodeclaims(&client)
                .await
                .into_iter()
                .find(|c| condition_true(c, "Launched"))
        }
    })
    .await
    .unwrap();
    let annotations = claim.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get(karpenter_api::v1alpha1::PRICE_OVERLAY_APPLIED_ANNOTATION)
            .map(String::as_str),
        Some("true"),
        "{annotations:?}"
    );
    // However the batch split the pods, the NodeClaim's cheapest option at the overlaid price
    // is an m7i type, and that is what the provider launched.
    let first_option = claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == "node.kubernetes.io/instance-type")
        .and_then(|r| r.values.first().map(str::to_string))
        .unwrap();
    assert!(first_option.starts_with("m7i."), "{first_option}");
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    eprintln!(
        "nodeoverlay-launch: {} {:?} price-overlay-applied={:?}",
        claim.metadata.name.as_deref().unwrap_or_default(),
        labels.get("node.kubernetes.io/instance-type"),
        annotations.get(karpenter_api::v1alpha1::PRICE_OVERLAY_APPLIED_ANNOTATION)
    );
    assert_eq!(
        labels.get("node.kubernetes.io/instance-type"),
        Some(&first_option),
        "{labels:?}"
    );
}

/// A NodeOverlay that adds hugepages to the m7i family, and a Deployment whose pods request them:
/// the controller plans on the overlaid m7i types, the NodeClaim carries
/// `karpenter.sh/capacity-overlay-applied`, the sim provider launches it (its catalogue has no
/// hugepages: a launch checking the catalogue alone fails with InsufficientCapacity), the Node
/// registers the hugepages, and the real kube-scheduler binds the pods there.
#[tokio::test]
async fn a_capacity_overlay_launches_nodes_whose_pods_request_the_added_resource() {
    let Some((cluster, _karpenter)) = gated_with_inflate_pool("nodeoverlay-capacity").await else {
        return;
    };
    let client = cluster.client();
    let ns = cluster.namespace();
    let api = Api::<NodeOverlay>::all(client.clone());
    let hugepages = overlay(
        serde_json::json!({
            "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m7i"]}],
            "capacity": {"hugepages-2Mi": "2Gi"},
            "weight": 10
        }),
        "hugepages-m7i",
    );
    api.create(&PostParams::default(), &hugepages)
        .await
        .unwrap();
    validated(&api, "hugepages-m7i").await;
    let deployment = format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: hugepages, namespace: {ns}}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: hugepages}}}}
  template:
    metadata: {{labels: {{app: hugepages}}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: app
          image: public.ecr.aws/eks-distro/kubernetes/pause:3.7
          resources:
            requests: {{cpu: 500m, memory: 512Mi, hugepages-2Mi: 256Mi}}
            limits: {{memory: 512Mi, hugepages-2Mi: 256Mi}}
"#
    );
    apply(&client, ns, &deployment).await;

    let running = eventually("three hugepages pods Running", SOON * 2, || {
        let client = client.clone();
        async move {
            let pods = super::objects::pods(&client, ns, "app=hugepages").await;
            (pods.len() == 3 && pods.iter().all(super::objects::running)).then_some(pods)
        }
    })
    .await
    .unwrap();
    let claims = nodeclaims(&client).await;
    assert!(!claims.is_empty());
    for claim in &claims {
        let annotations = claim.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get(karpenter_api::v1alpha1::CAPACITY_OVERLAY_APPLIED_ANNOTATION)
                .map(String::as_str),
            Some("true"),
            "{annotations:?}"
        );
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        let instance_type = labels
            .get("node.kubernetes.io/instance-type")
            .cloned()
            .unwrap_or_default();
        assert!(instance_type.starts_with("m7i."), "{instance_type}");
        let status = claim.status.clone().unwrap_or_default();
        assert_eq!(
            status
                .allocatable
                .get("hugepages-2Mi")
                .map(|q| q.0.as_str()),
            Some("2Gi")
        );
    }
    for node in super::objects::nodes(&client).await {
        let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
        assert_eq!(
            allocatable.get("hugepages-2Mi").map(|q| q.0.as_str()),
            Some("2Gi"),
            "{:?}",
            node.metadata.name
        );
    }
    eprintln!(
        "nodeoverlay-capacity: {} pods Running on {} NodeClaim(s)",
        running.len(),
        claims.len()
    );
}
