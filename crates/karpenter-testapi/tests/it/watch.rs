use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector};
use serde_json::json;

use karpenter_testapi::TestApiServer;

use crate::pod;

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "0"}})).unwrap()
}

/// The next item, failing the test instead of hanging when nothing arrives.
async fn next<S: Stream + Unpin>(stream: &mut S) -> S::Item {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the stream produced nothing within 10s")
        .expect("the stream ended")
}

/// A compact label for watcher events: "init", "apply:name", "delete:name", ...
fn label<K: kube::Resource>(event: &Event<K>) -> String {
    match event {
        Event::Init => "init".into(),
        Event::InitApply(o) => format!("init-apply:{}", o.meta().name.clone().unwrap_or_default()),
        Event::InitDone => "init-done".into(),
        Event::Apply(o) => format!("apply:{}", o.meta().name.clone().unwrap_or_default()),
        Event::Delete(o) => format!("delete:{}", o.meta().name.clone().unwrap_or_default()),
    }
}

#[tokio::test]
async fn watcher_and_reflector_follow_changes() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &configmap("before"))
        .await
        .unwrap();

    let (reader, writer) = reflector::store();
    let mut events = reflector(
        writer,
        watcher::watcher(api.clone(), watcher::Config::default()),
    )
    .boxed();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(label(&next(&mut events).await.unwrap()));
    }
    assert_eq!(seen, ["init", "init-apply:before", "init-done"]);

    api.create(&PostParams::default(), &configmap("after"))
        .await
        .unwrap();
    assert_eq!(label(&next(&mut events).await.unwrap()), "apply:after");
    let patch = json!({"data": {"v": "1"}});
    api.patch("before", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(label(&next(&mut events).await.unwrap()), "apply:before");
    api.delete("after", &DeleteParams::default()).await.unwrap();
    assert_eq!(label(&next(&mut events).await.unwrap()), "delete:after");

    let names: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
    assert_eq!(names, ["before"]);
    let before = reader.state().into_iter().next().unwrap();
    assert_eq!(
        before
            .data
            .as_ref()
            .and_then(|d| d.get("v"))
            .map(String::as_str),
        Some("1")
    );
}

#[tokio::test]
async fn watcher_relists_after_410_gone() {
    let server = TestApiServer::builder().history_limit(2).build();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let (reader, writer) = reflector::store();
    let mut events = reflector(
        writer,
        watcher::watcher(api.clone(), watcher::Config::default()),
    )
    .boxed();
    assert_eq!(label(&next(&mut events).await.unwrap()), "init");
    assert_eq!(label(&next(&mut events).await.unwrap()), "init-done");
    api.create(&PostParams::default(), &configmap("a"))
        .await
        .unwrap();
    assert_eq!(label(&next(&mut events).await.unwrap()), "apply:a");

    // While the watcher is not looking, more changes happen than the history keeps, and its
    // watch connection drops: resuming from its old resourceVersion must fail with 410.
    for name in ["b", "c", "d"] {
        api.create(&PostParams::default(), &configmap(name))
            .await
            .unwrap();
    }
    server.close_watches();

    match next(&mut events).await {
        Err(watcher::Error::WatchError(status)) => assert_eq!(status.code, 410),
        other => panic!("expected a 410 watch error, got {other:?}"),
    }
    let mut seen = Vec::new();
    loop {
        let event = label(&next(&mut events).await.unwrap());
        let done = event == "init-done";
        seen.push(event);
        if done {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            "init",
            "init-apply:a",
            "init-apply:b",
            "init-apply:c",
            "init-apply:d",
            "init-done"
        ]
    );
    assert_eq!(reader.state().len(), 4);
}

#[tokio::test]
async fn watcher_resumes_without_relist_when_history_suffices() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    assert_eq!(label(&next(&mut events).await.unwrap()), "init");
    assert_eq!(label(&next(&mut events).await.unwrap()), "init-done");
    api.create(&PostParams::default(), &configmap("a"))
        .await
        .unwrap();
    server.close_watches();
    // The change made before the drop is replayed from history after the re-watch.
    assert_eq!(label(&next(&mut events).await.unwrap()), "apply:a");
}

#[tokio::test]
async fn selector_watches_see_objects_enter_and_leave() {
    let server = TestApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let config = watcher::Config::default()
        .labels("app=web")
        .fields("spec.nodeName=n1");
    let mut events = watcher::watcher(pods.clone(), config)
        .applied_objects()
        .boxed();
    pods.create(
        &PostParams::default(),
        &pod("elsewhere", "web", Some("n2"), true),
    )
    .await
    .unwrap();
    pods.create(&PostParams::default(), &pod("db", "db", Some("n1"), true))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("web", "web", Some("n1"), true))
        .await
        .unwrap();
    assert_eq!(next(&mut events).await.unwrap().name_any(), "web");

    // Relabelling "web" out of the selection is a DELETED event for this watch.
    let mut raw = pods
        .watch(
            &WatchParams::default().labels("app=web"),
            &server.resource_version().to_string(),
        )
        .await
        .unwrap()
        .boxed();
    let relabel = json!({"metadata": {"labels": {"app": "api"}}});
    pods.patch("web", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    match next(&mut raw).await.unwrap() {
        WatchEvent::Deleted(p) => assert_eq!(p.name_any(), "web"),
        other => panic!("expected DELETED, got {other:?}"),
    }
}

#[tokio::test]
async fn streaming_lists_and_metadata_watches() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &configmap("x"))
        .await
        .unwrap();

    let mut streaming =
        watcher::watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(label(&next(&mut streaming).await.unwrap()));
    }
    assert_eq!(seen, ["init", "init-apply:x", "init-done"]);

    let metadata_api: Api<PartialObjectMeta<ConfigMap>> = Api::default_namespaced(server.client());
    let mut metadata = watcher::watcher(metadata_api, watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = next(&mut metadata).await.unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("x"));
    api.create(&PostParams::default(), &configmap("y"))
        .await
        .unwrap();
    assert_eq!(
        next(&mut metadata).await.unwrap().metadata.name.as_deref(),
        Some("y")
    );
}

#[tokio::test(start_paused = true)]
async fn watch_times_out_with_a_bookmark() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &configmap("x"))
        .await
        .unwrap();
    let params = WatchParams {
        bookmarks: true,
        ..WatchParams::default().timeout(5)
    };
    let events: Vec<WatchEvent<ConfigMap>> = api
        .watch(&params, "0")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(matches!(&events[0], WatchEvent::Added(c) if c.name_any() == "x"));
    match &events[1] {
        WatchEvent::Bookmark(b) => assert_eq!(
            b.metadata.resource_version,
            server.resource_version().to_string()
        ),
        other => panic!("expected a bookmark, got {other:?}"),
    }
    assert_eq!(events.len(), 2);
}

#[tokio::test]
async fn watch_from_a_compacted_version_is_gone() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &configmap("x"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &configmap("y"))
        .await
        .unwrap();
    server.compact_history();
    let events: Vec<WatchEvent<ConfigMap>> = api
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    match events.as_slice() {
        [WatchEvent::Error(status)] => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected one 410 error event, got {other:?}"),
    }
}
