use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use karpenter_testapi::TestApiServer;

use crate::code_of;

#[tokio::test]
async fn leases_replace_with_optimistic_concurrency() {
    let server = TestApiServer::new();
    let leases: Api<Lease> = Api::namespaced(server.client(), "kube-system");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "karpenter-leader-election"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();

    let mut take = created.clone();
    take.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let taken = leases
        .replace("karpenter-leader-election", &PostParams::default(), &take)
        .await
        .unwrap();
    assert_eq!(taken.spec.unwrap().holder_identity.as_deref(), Some("b"));

    // A second candidate acting on the old version loses.
    let mut late = created;
    late.spec.as_mut().unwrap().holder_identity = Some("c".into());
    assert_eq!(
        code_of(
            leases
                .replace("karpenter-leader-election", &PostParams::default(), &late)
                .await
        ),
        409
    );
}

#[tokio::test]
async fn leases_by_server_side_apply() {
    let server = TestApiServer::new();
    let leases: Api<Lease> = Api::namespaced(server.client(), "kube-system");
    let params = PatchParams::apply("karpenter").force();
    let apply = |holder: &str, seconds: i32, rv: Option<&str>| {
        let mut body = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "leader"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds},
        });
        if let Some(rv) = rv {
            body["metadata"]["resourceVersion"] = json!(rv);
        }
        body
    };
    let created = leases
        .patch("leader", &params, &Patch::Apply(apply("a", 15, None)))
        .await
        .unwrap();
    assert_eq!(created.spec.unwrap().holder_identity.as_deref(), Some("a"));
    let rv = created.metadata.resource_version.unwrap();
    let renewed = leases
        .patch("leader", &params, &Patch::Apply(apply("a", 20, Some(&rv))))
        .await
        .unwrap();
    assert_eq!(renewed.spec.unwrap().lease_duration_seconds, Some(20));
    // The resourceVersion in an apply body is a precondition.
    let stale = leases
        .patch("leader", &params, &Patch::Apply(apply("b", 15, Some(&rv))))
        .await;
    assert_eq!(code_of(stale), 409);
    assert_eq!(
        server
            .get::<Lease>(Some("kube-system"), "leader")
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("a")
    );
    assert_eq!(
        server
            .list::<Lease>()
            .iter()
            .map(|l| l.name_any())
            .collect::<Vec<_>>(),
        ["leader"]
    );
}
