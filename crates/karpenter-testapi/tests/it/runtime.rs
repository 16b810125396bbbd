//! kube-runtime machinery end to end: a `Controller`, the events `Recorder`, and a modest scale run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use karpenter_testapi::{TestApiServer, Verb};

use crate::pod;

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ReconcileError(#[from] kube::Error);

/// Copies `data.v` into an annotation: a stand-in for a real reconciler.
async fn reconcile(cm: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>) -> Result<Action, ReconcileError> {
    let value = cm
        .data
        .as_ref()
        .and_then(|d| d.get("v"))
        .cloned()
        .unwrap_or_default();
    if cm.annotations().get("reconciled") != Some(&value) {
        let patch = json!({"metadata": {"annotations": {"reconciled": value}}});
        api.patch(
            &cm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    Ok(Action::await_change())
}

#[tokio::test]
async fn a_kube_runtime_controller_converges() {
    let server = TestApiServer::new();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    for i in 0..3 {
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": format!("cm{i}")}, "data": {"v": format!("{i}")}}),
        )
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_secs(1)),
            Arc::new(api.clone()),
        )
        .for_each(|_| async {});
    let handle = tokio::spawn(controller);

    let converged = |server: &TestApiServer| {
        server.list::<ConfigMap>().iter().all(|cm| {
            cm.annotations().get("reconciled") == cm.data.as_ref().and_then(|d| d.get("v"))
        })
    };
    // A change after start-up is picked up through the watch.
    let mut changes = watcher::watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let patch = json!({"data": {"v": "changed"}});
    api.patch("cm1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !converged(&server) {
        assert!(Instant::now() < deadline, "the controller did not converge");
        tokio::time::timeout(Duration::from_secs(10), changes.next())
            .await
            .unwrap();
    }
    assert_eq!(
        api.get("cm1")
            .await
            .unwrap()
            .annotations()
            .get("reconciled")
            .map(String::as_str),
        Some("changed")
    );
    handle.abort();
}

#[tokio::test]
async fn the_events_recorder_publishes_events() {
    let server = TestApiServer::new();
    let client = server.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let created = pods
        .create(&PostParams::default(), &pod("p", "web", None, false))
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "karpenter".into(),
            instance: None,
        },
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "Nominated".into(),
        note: Some("Pod should schedule on: nodeclaim/default-abcde".into()),
        action: "Nominate".into(),
        secondary: None,
    };
    recorder
        .publish(&event, &created.object_ref(&()))
        .await
        .unwrap();
    recorder
        .publish(&event, &created.object_ref(&()))
        .await
        .unwrap();

    let events: Api<K8sEvent> = Api::default_namespaced(client);
    let listed = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1, "the repeat is folded into a series");
    assert_eq!(listed.items[0].reason.as_deref(), Some("Nominated"));
    let writes: Vec<Verb> = server
        .requests()
        .iter()
        .filter(|r| r.resource == "events")
        .map(|r| r.verb)
        .collect();
    assert_eq!(writes, [Verb::Create, Verb::Patch, Verb::List]);
}

#[tokio::test]
async fn a_thousand_pods_through_client_and_watch() {
    let server = TestApiServer::new();
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let mut applied = watcher::watcher(pods.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let started = Instant::now();
    for i in 0..1000 {
        pods.create(
            &PostParams::default(),
            &pod(&format!("p{i}"), "web", Some("n1"), true),
        )
        .await
        .unwrap();
    }
    for _ in 0..1000 {
        tokio::time::timeout(Duration::from_secs(10), applied.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
    let listed = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1000);
    eprintln!(
        "1000 creates + 1000 watch events + 1 list: {:?}",
        started.elapsed()
    );
}
