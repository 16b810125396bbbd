use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use karpenter_testapi::{ApiError, TestApiServer, Verb};

use crate::{code_of, pod};

fn configmap(name: &str, data: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"team": "a"}},
        "data": {"key": data},
    }))
    .unwrap()
}

#[tokio::test]
async fn create_get_list_replace_delete() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());

    let created = api
        .create(&PostParams::default(), &configmap("one", "1"))
        .await
        .unwrap();
    assert_eq!(created.namespace().as_deref(), Some("default"));
    assert!(created.uid().is_some() && created.meta().creation_timestamp.is_some());
    assert_eq!(created.meta().generation, Some(1));
    assert_eq!(
        code_of(
            api.create(&PostParams::default(), &configmap("one", "1"))
                .await
        ),
        409
    );

    let mut generated = configmap("", "2");
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let generated = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(generated.name_any().starts_with("gen-") && generated.name_any().len() == 9);

    assert_eq!(api.get("one").await.unwrap().data, created.data);
    assert_eq!(code_of(api.get("missing").await), 404);
    assert!(api.get_opt("missing").await.unwrap().is_none());
    let listed = api
        .list(&ListParams::default().labels("team=a"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);
    assert!(listed.metadata.resource_version.is_some());
    let none = api
        .list(&ListParams::default().labels("team notin (a)"))
        .await
        .unwrap();
    assert!(none.items.is_empty());

    // Replace with a stale resourceVersion is a conflict; with the current one it succeeds.
    let mut stale = created.clone();
    stale.data = Some([("key".to_owned(), "x".to_owned())].into());
    let fresh = api
        .replace("one", &PostParams::default(), &stale)
        .await
        .unwrap();
    assert!(fresh.resource_version() > created.resource_version());
    assert_eq!(
        code_of(api.replace("one", &PostParams::default(), &stale).await),
        409
    );
    assert_eq!(
        fresh.meta().generation,
        Some(2),
        "data changes bump generation"
    );

    api.delete("one", &DeleteParams::default()).await.unwrap();
    assert_eq!(code_of(api.get("one").await), 404);
    assert_eq!(
        code_of(api.delete("one", &DeleteParams::default()).await),
        404
    );
    assert_eq!(server.count::<ConfigMap>(), 1);
}

#[tokio::test]
async fn patches_status_subresource_and_generation() {
    let server = TestApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let created = pods
        .create(&PostParams::default(), &pod("p", "web", None, false))
        .await
        .unwrap();
    let rv = created.resource_version();

    // Merge patch on the main resource: labels change, the status change is ignored.
    let patch = json!({"metadata": {"labels": {"extra": "yes"}}, "status": {"phase": "Failed"}});
    let patched = pods
        .patch("p", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        patched.labels().get("extra").map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        patched.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert_eq!(
        patched.meta().generation,
        Some(1),
        "metadata changes keep generation"
    );

    // The status subresource changes only status.
    let status =
        json!({"metadata": {"labels": {"ignored": "yes"}}, "status": {"phase": "Succeeded"}});
    let patched = pods
        .patch_status("p", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(
        patched.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
    assert!(!patched.labels().contains_key("ignored"));
    assert_eq!(patched.meta().generation, Some(1));

    // Spec changes bump generation; JSON patch with a failing test op is rejected.
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx"}
    ]))
    .unwrap();
    let patched = pods
        .patch("p", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .unwrap();
    assert_eq!(patched.meta().generation, Some(2));
    let failing: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/spec/containers/0/image", "value": "x"}]),
    )
    .unwrap();
    assert_eq!(
        code_of(
            pods.patch("p", &PatchParams::default(), &Patch::<()>::Json(failing))
                .await
        ),
        422
    );

    // A patch that changes nothing keeps the resourceVersion.
    let before = pods.get("p").await.unwrap().resource_version();
    let same = json!({"metadata": {"labels": {"extra": "yes"}}});
    let after = pods
        .patch("p", &PatchParams::default(), &Patch::Merge(&same))
        .await
        .unwrap();
    assert_eq!(after.resource_version(), before);
    assert_ne!(before, rv);

    // Server-side apply creates and updates; a field manager is required.
    let apply = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q", "labels": {"app": "api"}},
        "spec": {"containers": [{"name": "c", "image": "pause"}]}});
    let params = PatchParams::apply("tests").force();
    let q = pods
        .patch("q", &params, &Patch::Apply(&apply))
        .await
        .unwrap();
    assert_eq!(q.labels().get("app").map(String::as_str), Some("api"));
    let relabel = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q", "labels": {"app": "v2"}}});
    let q = pods
        .patch("q", &params, &Patch::Apply(&relabel))
        .await
        .unwrap();
    assert_eq!(q.labels().get("app").map(String::as_str), Some("v2"));
    assert_eq!(
        q.spec.map(|s| s.containers.len()),
        Some(1),
        "fields not in the apply are kept"
    );
    let no_manager = pods
        .patch("q", &PatchParams::default(), &Patch::Apply(&relabel))
        .await;
    assert_eq!(code_of(no_manager), 400);

    // Field selectors.
    let running = pods
        .list(&ListParams::default().fields("status.phase=Succeeded"))
        .await
        .unwrap();
    assert_eq!(
        running
            .items
            .iter()
            .map(|p| p.name_any())
            .collect::<Vec<_>>(),
        ["p"]
    );
    let unbound = pods
        .list(&ListParams::default().fields("spec.nodeName=,metadata.name!=p"))
        .await
        .unwrap();
    assert_eq!(unbound.items.len(), 1);
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let server = TestApiServer::new();
    let nodes: Api<Node> = Api::all(server.client());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "finalizers": ["karpenter.sh/termination"]},
        "status": {"capacity": {"cpu": "4"}},
    }))
    .unwrap();
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    assert!(
        created.status.is_some(),
        "built-in kinds keep status on create (kubelets register that way)"
    );

    let deleting = nodes
        .delete("n1", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(deleting.meta().deletion_timestamp.is_some());
    assert_eq!(deleting.meta().deletion_grace_period_seconds, Some(0));
    assert!(
        nodes
            .get("n1")
            .await
            .unwrap()
            .meta()
            .deletion_timestamp
            .is_some()
    );

    // No new finalizers on a terminating object.
    let add = json!({"metadata": {"finalizers": ["karpenter.sh/termination", "other"]}});
    assert_eq!(
        code_of(
            nodes
                .patch("n1", &PatchParams::default(), &Patch::Merge(&add))
                .await
        ),
        422
    );

    let remove = json!({"metadata": {"finalizers": null}});
    nodes
        .patch("n1", &PatchParams::default(), &Patch::Merge(&remove))
        .await
        .unwrap();
    assert_eq!(code_of(nodes.get("n1").await), 404);
    assert_eq!(server.count::<Node>(), 0);
}

#[tokio::test]
async fn pods_terminate_gracefully_unless_told_otherwise() {
    let server = TestApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    pods.create(
        &PostParams::default(),
        &pod("bound", "web", Some("n1"), true),
    )
    .await
    .unwrap();
    pods.create(&PostParams::default(), &pod("pending", "web", None, false))
        .await
        .unwrap();

    // A bound pod waits for its kubelet; an unbound one goes at once.
    let terminating = pods
        .delete("bound", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(terminating.meta().deletion_grace_period_seconds, Some(30));
    pods.delete("pending", &DeleteParams::default())
        .await
        .unwrap();
    assert!(pods.get_opt("pending").await.unwrap().is_none());
    assert!(pods.get_opt("bound").await.unwrap().is_some());

    // The kubelet finishes with a zero grace period.
    pods.delete(
        "bound",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
    assert!(pods.get_opt("bound").await.unwrap().is_none());

    server.set_pods_terminate_immediately(true);
    pods.create(
        &PostParams::default(),
        &pod("bound", "web", Some("n1"), true),
    )
    .await
    .unwrap();
    pods.delete("bound", &DeleteParams::default())
        .await
        .unwrap();
    assert!(pods.get_opt("bound").await.unwrap().is_none());
}

#[tokio::test]
async fn injected_errors_and_request_log() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    server.inject_error(
        Some(Verb::Create),
        "configmaps",
        ApiError::internal("disk on fire"),
        1,
    );
    assert_eq!(
        code_of(
            api.create(&PostParams::default(), &configmap("c", "1"))
                .await
        ),
        500
    );
    api.create(&PostParams::default(), &configmap("c", "1"))
        .await
        .unwrap();

    server.clear_requests();
    api.get("c").await.unwrap();
    api.list(&ListParams::default()).await.unwrap();
    let requests = server.requests();
    assert_eq!(
        requests.iter().map(|r| r.verb).collect::<Vec<_>>(),
        [Verb::Get, Verb::List]
    );
    assert!(requests.iter().all(|r| !r.verb.is_write() && r.code == 200));
    assert_eq!(requests[0].name.as_deref(), Some("c"));
}

#[tokio::test]
async fn direct_accessors_share_state_with_clients() {
    let server = TestApiServer::new();
    let api: Api<Pod> = Api::default_namespaced(server.client());
    server.put(&pod("p", "web", Some("n1"), true)).unwrap();
    assert_eq!(api.get("p").await.unwrap().name_any(), "p");
    let typed: Option<Pod> = server.get(Some("default"), "p");
    assert!(typed.is_some());
    assert_eq!(server.list::<Pod>().len(), 1);
    server.delete::<Pod>(Some("default"), "p").unwrap();
    assert_eq!(server.count::<Pod>(), 0);
    assert!(
        server
            .put_value(json!({"apiVersion": "v9", "kind": "Nope"}))
            .is_err()
    );
}

#[tokio::test]
async fn discovery_and_version() {
    let server = TestApiServer::new();
    let client = server.client();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
    let discovery = kube::discovery::Discovery::new(client).run().await.unwrap();
    let (leases, _) = discovery
        .resolve_gvk(&kube::api::GroupVersionKind::gvk(
            "coordination.k8s.io",
            "v1",
            "Lease",
        ))
        .unwrap();
    assert_eq!(leases.plural, "leases");
    assert!(discovery.has_group("policy"));
    let unknown = server
        .client()
        .list_api_group_resources("nope.example.com/v1")
        .await;
    assert_eq!(code_of(unknown), 404);
}

#[tokio::test]
async fn kube_runtime_finalizer_helper_round_trip() {
    use kube::runtime::controller::Action;
    use kube::runtime::finalizer::{Event, finalizer};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &configmap("guarded", "1"))
        .await
        .unwrap();
    let cleanups = Arc::new(AtomicUsize::new(0));
    let run = |obj: ConfigMap| {
        let (api, cleanups) = (api.clone(), Arc::clone(&cleanups));
        async move {
            finalizer(
                &api,
                "example.com/cleanup",
                Arc::new(obj),
                |event| async move {
                    if let Event::Cleanup(_) = event {
                        cleanups.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok::<_, std::convert::Infallible>(Action::await_change())
                },
            )
            .await
        }
    };
    // First pass adds the finalizer (JSON patch: test null + add).
    run(api.get("guarded").await.unwrap()).await.unwrap();
    assert_eq!(
        api.get("guarded").await.unwrap().finalizers(),
        ["example.com/cleanup"]
    );
    // Deleting leaves it terminating; the next pass cleans up and removes the finalizer.
    api.delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
    run(api.get("guarded").await.unwrap()).await.unwrap();
    assert_eq!(cleanups.load(Ordering::SeqCst), 1);
    assert!(api.get_opt("guarded").await.unwrap().is_none());
}

#[tokio::test]
async fn unsupported_methods_paths_and_bodies() {
    let server = TestApiServer::new();
    let client = server.client();
    let request = |method: &str, path: &str, body: &str| {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.as_bytes().to_vec())
            .unwrap()
    };
    let put_collection = request("PUT", "/api/v1/namespaces/default/configmaps", "{}");
    assert_eq!(code_of(client.request_text(put_collection).await), 405);
    let unknown = request("GET", "/apis/example.com/v1/widgets", "");
    assert_eq!(code_of(client.request_text(unknown).await), 404);
    let not_json = request("POST", "/api/v1/namespaces/default/configmaps", "{oops");
    assert_eq!(code_of(client.request_text(not_json).await), 400);
    let nameless = request("POST", "/api/v1/namespaces/default/configmaps", "{}");
    assert_eq!(code_of(client.request_text(nameless).await), 422);
    let patch = request("PATCH", "/api/v1/namespaces/default/configmaps/x", "{}");
    assert_eq!(
        code_of(client.request_text(patch).await),
        415,
        "plain JSON is not a patch type"
    );
    let dry_run = request(
        "POST",
        "/api/v1/namespaces/default/configmaps?dryRun=All",
        "{}",
    );
    assert_eq!(code_of(client.request_text(dry_run).await), 400);
    assert_eq!(server.count::<ConfigMap>(), 0);
}

/// The real API server refuses a ConfigMap over 1 MiB of data (etcd's request limit), on
/// create and on update; the test server must too, or code that outgrows it passes here only.
#[tokio::test]
async fn a_configmap_over_one_mebibyte_is_refused_like_the_api_server_does() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let limit = karpenter_testapi::MAX_CONFIG_MAP_BYTES;
    // "key" plus the value: exactly at the limit is fine.
    let at_limit = "x".repeat(limit - "key".len());
    let mut cm = api
        .create(&PostParams::default(), &configmap("big", &at_limit))
        .await
        .unwrap();
    let too_big = configmap("bigger", &format!("{at_limit}x"));
    let err = api
        .create(&PostParams::default(), &too_big)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("must have at most 1048576 bytes"),
        "{}",
        status.message
    );
    cm.data = too_big.data;
    assert_eq!(
        code_of(api.replace("big", &PostParams::default(), &cm).await),
        422
    );
}
