//! The provisioner with the production solver (`CoreScheduler`, i.e. `karpenter_core::scheduling`)
//! and the sim provider's embedded catalogue, on the test API server in virtual time.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): virtual time: batch windows and launches
//! measured exactly.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node};
use karpenter_api::NodeClaim;
use karpenter_api::well_known as wk;
use karpenter_controller::events::{REASON_FAILED_SCHEDULING, REASON_NOMINATED};
use karpenter_controller::provisioning::CoreScheduler;
use karpenter_controller::run::{Options, RunningController};
use karpenter_controller::{Context, TokioClock};
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::CloudProvider;
use karpenter_core::pod::Pod;
use karpenter_core::pod::effective_requests as pod_requests;
use karpenter_sim::SimCloudProvider;
use karpenter_testapi::{TestApiServer, Verb};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::support::*;

/// A leading replica with the real scheduler and the sim provider's us-east-1 catalogue.
async fn start_core(server: &TestApiServer) -> (RunningController, Arc<SimCloudProvider>) {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(epoch()));
    let cloud = Arc::new(SimCloudProvider::new("us-east-1", clock.clone()).unwrap());
    let (ctx, batcher) = Context::new(
        server.client(),
        settings("replica-a"),
        cloud.clone(),
        Arc::new(CoreScheduler),
        clock,
    );
    let replica = RunningController::start(ctx, batcher, Options::default())
        .await
        .unwrap();
    advance(Duration::from_secs(3)).await; // sync + leadership
    assert!(replica.ctx.is_leader());
    (replica, cloud)
}

/// The seed guide's `inflate` pod: pause with 1 cpu, pending as kube-scheduler leaves it.
fn inflate_pod(name: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "inflate"}},
        "spec": {"containers": [{"name": "inflate", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                 "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap()
}

fn nodeclaim_creates(server: &TestApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.verb == Verb::Create && r.resource == "nodeclaims")
        .count()
}

fn requirement_values<'a>(claim: &'a NodeClaim, key: &str) -> &'a karpenter_api::v1::Values {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == key)
        .map(|r| &r.values)
        .unwrap_or_else(|| panic!("{} has no {key} requirement", claim.name_any()))
}

#[tokio::test(start_paused = true)]
async fn inflate_pods_get_catalogue_nodeclaims_sorted_by_price_in_one_window() {
    let server = api_server();
    let pool = nodepool("default");
    server.put(&pool).unwrap();
    server.put(&nodeclass("default")).unwrap();
    let (replica, cloud) = start_core(&server).await;

    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    for i in 0..10 {
        pods.create(
            &PostParams::default(),
            &inflate_pod(&format!("inflate-{i}"), "1"),
        )
        .await
        .unwrap();
        advance(Duration::from_millis(100)).await;
    }
    assert_eq!(server.count::<NodeClaim>(), 0, "the window is still open");
    advance(Duration::from_secs(2)).await;

    let claims: Vec<NodeClaim> = server.list();
    assert!(!claims.is_empty());
    assert_eq!(
        nodeclaim_creates(&server),
        claims.len(),
        "one pass, one create per NodeClaim"
    );

    // What the catalogue offers this pool, and the cheapest on-demand price per type.
    let catalogue = cloud.instance_types(&pool, None).await.unwrap();
    let on_demand_price: BTreeMap<&str, f64> = catalogue
        .iter()
        .filter_map(|t| {
            let price = t
                .offerings
                .iter()
                .filter(|o| o.available && o.capacity_type == "on-demand")
                .map(|o| o.price)
                .min_by(f64::total_cmp)?;
            Some((t.name.as_str(), price))
        })
        .collect();

    let mut requested_cpu = 0;
    for claim in &claims {
        assert_eq!(claim.labels()[wk::NODEPOOL_LABEL], "default");
        // The pool's requirement is carried over.
        assert_eq!(
            *requirement_values(claim, wk::CAPACITY_TYPE_LABEL),
            ["on-demand"]
        );
        let options = requirement_values(claim, wk::INSTANCE_TYPE_LABEL);
        assert!(options.len() > 1, "a choice of real types: {options:?}");
        let requests = claim.spec.resources.as_ref().unwrap();
        let cpu = karpenter_core::resources::Quantity::parse(&requests.requests["cpu"].0).unwrap();
        requested_cpu += cpu.millis();
        let prices: Vec<f64> = options
            .iter()
            .map(|name| {
                let price = on_demand_price.get(name);
                *price.unwrap_or_else(|| panic!("{name} is not an on-demand catalogue type"))
            })
            .collect();
        assert!(
            prices.windows(2).all(|w| w[0] <= w[1]),
            "options are cheapest first: {:?}",
            options.iter().zip(&prices).take(10).collect::<Vec<_>>()
        );
        for name in options {
            let it = catalogue.iter().find(|t| t.name == name).unwrap();
            assert!(
                it.allocatable().get("cpu") >= cpu,
                "{name} cannot hold the NodeClaim's {cpu} cpu"
            );
        }
    }
    assert!(requested_cpu >= 10_000, "every pod's cpu is requested");

    let nominated = replica.ctx.events.with_reason(REASON_NOMINATED);
    assert_eq!(nominated.len(), 10, "{nominated:?}");
    assert!(nominated.iter().all(|e| {
        e.message
            .starts_with("Pod should schedule on: nodeclaim/default-")
    }));
    assert!(
        replica
            .ctx
            .events
            .with_reason(REASON_FAILED_SCHEDULING)
            .is_empty()
    );

    // Re-triggers inside the nomination window create nothing more.
    advance(Duration::from_secs(12)).await;
    assert_eq!(server.count::<NodeClaim>(), claims.len());
    replica.stop().await;
}

#[tokio::test(start_paused = true)]
async fn impossible_pod_gets_failed_scheduling_naming_pool_and_constraint() {
    let server = api_server();
    server.put(&nodepool("default")).unwrap();
    server.put(&nodeclass("default")).unwrap();
    let (replica, _cloud) = start_core(&server).await;

    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    pods.create(&PostParams::default(), &inflate_pod("huge", "1000"))
        .await
        .unwrap();
    advance(Duration::from_secs(3)).await;

    assert_eq!(server.count::<NodeClaim>(), 0);
    let failed = replica.ctx.events.with_reason(REASON_FAILED_SCHEDULING);
    assert_eq!(failed.len(), 1, "{failed:?}");
    let message = &failed[0].message;
    assert!(message.starts_with("Failed to schedule pod, "), "{message}");
    assert!(message.contains("nodepool default"), "{message}");
    assert!(
        message.contains("1000 cpu"),
        "names the blocking resource: {message}"
    );
    let events: Vec<Event> = server.list();
    assert!(events.iter().any(|e| {
        e.reason.as_deref() == Some(REASON_FAILED_SCHEDULING)
            && e.involved_object.name.as_deref() == Some("huge")
    }));
    replica.stop().await;
}

/// An unmanaged node the termination controller leaves alone (foreign finalizer and provider).
fn old_node() -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "old-node", "finalizers": ["example.com/hold"]},
        "spec": {"providerID": "kind://old-node"},
        "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                   "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn running_on(name: &str, node: &str, annotations: serde_json::Value) -> Pod {
    let mut pod = inflate_pod(name, "1");
    pod.metadata.annotations = serde_json::from_value(annotations).unwrap();
    pod.spec.as_mut().unwrap().node_name = Some(node.into());
    pod.status = serde_json::from_value(json!({"phase": "Running"})).unwrap();
    pod
}

#[tokio::test(start_paused = true)]
async fn pods_of_a_deleting_node_are_provisioned_for() {
    let server = api_server();
    server.put(&nodepool("default")).unwrap();
    server.put(&nodeclass("default")).unwrap();
    server.put(&old_node()).unwrap();
    server
        .put(&running_on("web-0", "old-node", json!({})))
        .unwrap();
    server
        .put(&running_on(
            "pinned",
            "old-node",
            json!({wk::DO_NOT_DISRUPT_ANNOTATION: "true"}),
        ))
        .unwrap();
    let (replica, _cloud) = start_core(&server).await;
    advance(Duration::from_secs(12)).await;
    assert_eq!(
        server.count::<NodeClaim>(),
        0,
        "a healthy node's pods need nothing"
    );

    let nodes: Api<Node> = Api::all(server.client());
    nodes
        .delete("old-node", &DeleteParams::default())
        .await
        .unwrap();
    advance(Duration::from_secs(3)).await;

    let claims: Vec<NodeClaim> = server.list();
    assert_eq!(claims.len(), 1, "{claims:#?}");
    let nominated = replica.ctx.events.with_reason(REASON_NOMINATED);
    let names: Vec<&str> = nominated
        .iter()
        .filter_map(|e| e.involved.name.as_deref())
        .collect();
    assert_eq!(names, ["web-0"], "do-not-disrupt pods are not moved");
    let web = replica
        .ctx
        .state
        .read()
        .pod("default/web-0")
        .cloned()
        .unwrap();
    let requests = claims[0].spec.resources.as_ref().unwrap();
    let cpu = karpenter_core::resources::Quantity::parse(&requests.requests["cpu"].0).unwrap();
    assert!(cpu >= pod_requests(&web).unwrap().get("cpu"));
    assert_eq!(
        claims[0].meta().owner_references.as_ref().unwrap()[0].name,
        "default"
    );

    // Planned once: re-triggers within the nomination window create nothing more.
    advance(Duration::from_secs(12)).await;
    assert_eq!(server.count::<NodeClaim>(), 1);
    replica.stop().await;
}
