//! Objects on the real cluster: applied from YAML as `kubectl apply --server-side` would, and read
#![allow(dead_code)] // helpers shared by the real-cluster tests; each uses a part
//! back typed.

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::{NodeClaim, NodePool};
use kube::api::{DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::discovery::{Scope, pinned_kind};
use kube::{Api, Client, ResourceExt};

/// Applies every document of `yaml` (server-side, forced), namespaced ones into `namespace`
/// unless they name their own. Panics with the API server's answer when one is refused.
pub(crate) async fn apply(client: &Client, namespace: &str, yaml: &str) {
    for doc in yaml.split("\n---") {
        if doc.trim().is_empty()
            || doc
                .lines()
                .all(|l| l.trim_start().starts_with('#') || l.trim().is_empty())
        {
            continue;
        }
        let object: DynamicObject = serde_saphyr::from_str(doc)
            .unwrap_or_else(|err| panic!("a test manifest does not parse: {err}\n{doc}"));
        let types = object.types.clone().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(&types).unwrap();
        let (resource, caps) = pinned_kind(client, &gvk).await.unwrap();
        let name = object.name_any();
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &resource),
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                object.metadata.namespace.as_deref().unwrap_or(namespace),
                &resource,
            ),
        };
        if let Err(err) = api
            .patch(
                &name,
                &PatchParams::apply("karpenter-e2e").force(),
                &Patch::Apply(&object),
            )
            .await
        {
            panic!("applying {} {name}: {err}", gvk.kind);
        }
    }
}

pub(crate) async fn nodeclaims(client: &Client) -> Vec<NodeClaim> {
    Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

pub(crate) async fn nodepool(client: &Client, name: &str) -> NodePool {
    Api::<NodePool>::all(client.clone())
        .get(name)
        .await
        .unwrap()
}

pub(crate) async fn nodes(client: &Client) -> Vec<Node> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// The pods of `namespace` matching the label selector.
pub(crate) async fn pods(client: &Client, namespace: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
}

/// Whether the pod is bound and Running (the sim kubelet's word).
pub(crate) fn running(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && pod.metadata.deletion_timestamp.is_none()
}

pub(crate) fn condition_true(claim: &NodeClaim, type_: &str) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

/// The guide's EC2NodeClass (`examples/inflate/ec2nodeclass.yaml`), the one every test's
/// NodePool refers to.
pub(crate) const DEFAULT_NODECLASS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-e2e
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: e2e
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: e2e
"#;

/// Scales a Deployment (`kubectl scale`).
pub(crate) async fn scale(client: &Client, namespace: &str, deployment: &str, replicas: i32) {
    let api = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), namespace);
    api.patch(
        deployment,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap();
}
