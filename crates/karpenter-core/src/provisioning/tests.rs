use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use karpenter_api::NodePool;
use serde_json::json;

use super::*;
use crate::instance_type::{InstanceType, Offering};
use crate::resources::ResourceList;
use crate::state::fixtures::{bound_pod, node, nodeclaim, pending_pod};

fn t0() -> Timestamp {
    Timestamp::from_second(1_704_067_200).unwrap()
}

fn pool(name: &str, extra: serde_json::Value) -> NodePool {
    let mut value = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}
    });
    if let (Some(spec), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(value).unwrap()
}

fn instance_type(name: &str, cpu: &str, price: f64) -> Arc<InstanceType> {
    Arc::new(InstanceType {
        name: name.into(),
        labels: [("node.kubernetes.io/instance-type".into(), name.into())].into(),
        capacity: ResourceList::parse([("cpu", cpu), ("memory", "32Gi"), ("pods", "110")]).unwrap(),
        offerings: vec![Offering {
            zone: "test-1a".into(),
            capacity_type: "on-demand".into(),
            price,
            available: true,
            ..Offering::default()
        }],
        ..InstanceType::default()
    })
}

fn catalogue() -> Vec<Arc<InstanceType>> {
    vec![
        instance_type("big.8x", "8", 0.4),
        instance_type("small.2x", "2", 0.1),
        instance_type("medium.4x", "4", 0.2),
    ]
}

fn state_with(
    pools: Vec<NodePool>,
    claims: Vec<NodeClaim>,
    nodes: Vec<k8s_openapi::api::core::v1::Node>,
    pods: Vec<Pod>,
) -> ClusterState {
    ClusterState::from_objects(pools, claims, nodes, pods)
}

#[test]
fn plans_cheapest_first_and_builds_the_nodeclaim() {
    let default = pool("default", json!({"limits": {"cpu": "100"}}));
    let state = state_with(
        vec![default.clone()],
        vec![],
        vec![],
        vec![pending_pod("a", "1500m"), pending_pod("b", "1500m")],
    );
    let types = catalogue();
    let snapshot = Snapshot::new(&state, SchedulerOptions::default(), t0()).offer(&default, &types);
    let pods = snapshot.pods_to_place();
    assert_eq!(pods.len(), 2);
    let prepared = snapshot.scheduler_input();
    assert!(prepared.problems.is_empty());
    let results = solve(prepared.input, &pods);
    let [claim] = results.new_node_claims.as_slice() else {
        panic!("one NodeClaim for both pods: {results:?}");
    };
    assert_eq!(claim.pods, [0, 1]);
    let object = nodeclaim::build(claim, &default);
    let types = object
        .spec
        .requirements
        .iter()
        .find(|r| r.key == "node.kubernetes.io/instance-type")
        .unwrap();
    assert_eq!(types.values, ["medium.4x", "big.8x"]);
    assert_eq!(object.labels()["karpenter.sh/nodepool"], "default");
}

#[test]
fn without_leaves_nodes_out_and_places_their_pods_again() {
    let default = pool("default", json!({}));
    let state = state_with(
        vec![default.clone()],
        vec![nodeclaim("default-a", "default", Some("sim://a"), "4")],
        vec![node("node-a", Some("default"), "sim://a", "4")],
        vec![bound_pod("on-a", "node-a", "1")],
    );
    let types = catalogue();
    let full = Snapshot::new(&state, SchedulerOptions::default(), t0()).offer(&default, &types);
    assert!(full.pods_to_place().is_empty());
    let prepared = full.scheduler_input();
    assert_eq!(prepared.input.existing_nodes.len(), 1);
    assert_eq!(
        prepared.input.node_pools[0].usage.get("nodes").millis(),
        1000
    );

    // By Node name or by NodeClaim name: the same node is left out.
    for name in ["node-a", "default-a"] {
        let without = full.clone().without([name]);
        let pods = without.pods_to_place();
        assert_eq!(pods.len(), 1, "its pod needs a new home");
        let prepared = without.scheduler_input();
        assert!(prepared.input.existing_nodes.is_empty(), "{name}");
        assert!(prepared.input.node_pools[0].usage.get("nodes").is_zero());
        let results = solve(prepared.input, &pods);
        assert_eq!(results.new_node_claims.len(), 1);
    }
    // The state itself is untouched.
    assert_eq!(full.scheduler_input().input.existing_nodes.len(), 1);
}

/// A Node tainted unregistered past the grace is left out only once its NodeClaim's
/// registration was tried and failed: a registration controller that is merely behind (a burst
/// of Nodes joining) does not make every late Node look stuck and launch a second NodeClaim.
#[test]
fn an_unregistered_node_past_the_grace_is_left_out_only_when_its_registration_failed() {
    let default = pool("default", json!({}));
    let mut joined = node("node-a", Some("default"), "sim://a", "4");
    joined.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t0()));
    joined.spec.as_mut().unwrap().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
        key: "karpenter.sh/unregistered".into(),
        effect: "NoExecute".into(),
        ..Default::default()
    }]);
    let state = state_with(
        vec![default.clone()],
        vec![nodeclaim("default-a", "default", Some("sim://a"), "4")],
        vec![joined],
        vec![],
    );
    let types = catalogue();
    let later = t0().checked_add(SignedDuration::from_secs(90)).unwrap();
    let grace = SignedDuration::from_secs(30);
    let counted = |failed: &[&str]| {
        let prepared = Snapshot::new(&state, SchedulerOptions::default(), later)
            .offer(&default, &types)
            .unregistered_grace(grace, failed.iter().map(|s| s.to_string()).collect())
            .scheduler_input();
        (
            prepared.input.existing_nodes.len(),
            prepared.stuck_unregistered,
        )
    };
    assert_eq!(counted(&[]), (1, vec![]), "registration not tried yet");
    assert_eq!(counted(&["default-other"]), (1, vec![]));
    assert_eq!(
        counted(&["default-a"]),
        (0, vec!["node-a".to_string()]),
        "registration failed"
    );
}

#[test]
fn namespaces_reach_the_scheduler() {
    let mut state = state_with(vec![], vec![], vec![], vec![]);
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "team-a", "labels": {"team": "a"}}}))
            .unwrap();
    state.apply(ns);
    let prepared = Snapshot::new(&state, SchedulerOptions::default(), t0()).scheduler_input();
    assert_eq!(prepared.input.namespaces.len(), 1);
    assert_eq!(
        prepared.input.namespaces[0]
            .metadata
            .labels
            .as_ref()
            .unwrap()["team"],
        "a"
    );
}

#[test]
fn static_pools_get_exactly_their_replicas_and_nothing_dynamic() {
    let fixed = pool("fixed", json!({"replicas": 3}));
    let dynamic = pool("default", json!({}));
    let mut held = nodeclaim("fixed-1", "fixed", Some("sim://1"), "4");
    held.metadata.uid = Some("u1".into());
    let state = state_with(
        vec![fixed.clone(), dynamic.clone()],
        vec![held],
        vec![],
        vec![pending_pod("a", "1")],
    );
    let missing = static_nodeclaims(&state);
    assert_eq!(missing.len(), 2, "3 replicas, 1 held");
    assert!(
        missing
            .iter()
            .all(|c| c.labels()["karpenter.sh/nodepool"] == "fixed")
    );
    assert_eq!(
        dynamic_pools(&state)
            .iter()
            .map(|p| p.name_any())
            .collect::<Vec<_>>(),
        ["default"]
    );
    let types = catalogue();
    let snapshot = Snapshot::new(&state, SchedulerOptions::default(), t0())
        .offer(&fixed, &types)
        .offer(&dynamic, &types);
    assert_eq!(snapshot.pools().len(), 1, "a static pool is never offered");
}

#[test]
fn unlaunched_nodeclaims_offer_what_they_were_created_for() {
    let mut claim = nodeclaim("default-x", "default", None, "4");
    claim.status = None;
    claim.spec.resources = Some(
        serde_json::from_value(json!({"requests": {"cpu": "3", "memory": "2Gi", "pods": "2"}}))
            .unwrap(),
    );
    let offered = offered_capacity(&claim);
    assert_eq!(offered.status.as_ref().unwrap().allocatable["cpu"].0, "3");
    let mut launched = nodeclaim("default-y", "default", Some("sim://y"), "4");
    launched.spec.resources = claim.spec.resources.clone();
    assert!(matches!(offered_capacity(&launched), Cow::Borrowed(_)));
}

/// Issue 38's runaway: a DaemonSet whose template sets no CPU, in a namespace whose LimitRange
/// defaults every container to 2 CPU. Its pods will request 2 CPU; a node sized from the bare
/// template (the pod's 2 CPU alone: small.2x) cannot hold both, and the DaemonSet's pod
/// (higher priority) would preempt the workload's pod, which would ask for another such node,
/// forever. Planned with the admitted requests, one node holds both; a LimitRange of another
/// namespace changes nothing.
#[test]
fn daemonset_overhead_is_its_pod_after_the_limit_range_admission_of_its_namespace() {
    let default = pool("default", json!({}));
    let mut state = state_with(
        vec![default.clone()],
        vec![],
        vec![],
        vec![pending_pod("app", "2")],
    );
    let daemonset: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent", "namespace": "default", "uid": "uid-agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "1Gi"}}}]}
        }}
    }))
    .unwrap();
    state.apply(daemonset);
    let limit_range = |namespace: &str| -> k8s_openapi::api::core::v1::LimitRange {
        serde_json::from_value(json!({
            "metadata": {"name": "limits", "namespace": namespace},
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "2", "memory": "1Gi"}}]}
        }))
        .unwrap()
    };
    let types = catalogue();
    let plan = |state: &ClusterState| {
        let snapshot =
            Snapshot::new(state, SchedulerOptions::default(), t0()).offer(&default, &types);
        let pods = snapshot.pods_to_place();
        let prepared = snapshot.scheduler_input();
        let overhead = crate::pod::effective_requests(&prepared.input.daemonsets[0]).unwrap();
        let results = solve(prepared.input, &pods);
        let [claim] = results.new_node_claims.as_slice() else {
            panic!("one NodeClaim: {results:?}");
        };
        let cheapest = nodeclaim::build(claim, &default)
            .spec
            .requirements
            .iter()
            .find(|r| r.key == "node.kubernetes.io/instance-type")
            .map(|r| r.values[0].to_string())
            .unwrap();
        (overhead.get("cpu").millis(), cheapest)
    };
    state.apply(limit_range("elsewhere"));
    assert_eq!(plan(&state), (0, "small.2x".to_string()));
    state.apply(limit_range("default"));
    assert_eq!(plan(&state), (2000, "medium.4x".to_string()));
}

/// An overlay pricing `name` at `price` (USD/h) in every pool.
fn price_overlay(name: &str, price: &str) -> karpenter_api::v1alpha1::NodeOverlay {
    karpenter_api::v1alpha1::NodeOverlay::new(
        &format!("price-{name}"),
        karpenter_api::v1alpha1::NodeOverlaySpec {
            requirements: vec![karpenter_api::v1alpha1::OverlayRequirement {
                key: "node.kubernetes.io/instance-type".into(),
                operator: "In".into(),
                values: vec![name.into()],
            }],
            price: Some(price.into()),
            ..Default::default()
        },
    )
}

/// The NodeClaim the provisioner builds for two 1500m pods over `types`.
fn planned_claim(default: &NodePool, types: &[Arc<InstanceType>]) -> NodeClaim {
    let state = state_with(
        vec![default.clone()],
        vec![],
        vec![],
        vec![pending_pod("a", "1500m"), pending_pod("b", "1500m")],
    );
    let snapshot = Snapshot::new(&state, SchedulerOptions::default(), t0()).offer(default, types);
    let pods = snapshot.pods_to_place();
    let results = solve(snapshot.scheduler_input().input, &pods);
    let [claim] = results.new_node_claims.as_slice() else {
        panic!("one NodeClaim for both pods: {results:?}");
    };
    nodeclaim::build(claim, default)
}

fn instance_type_values(claim: &NodeClaim) -> Vec<String> {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == "node.kubernetes.io/instance-type")
        .unwrap()
        .values
        .to_vec()
}

#[test]
fn a_price_overlay_on_an_option_annotates_the_nodeclaim_and_orders_its_options() {
    use karpenter_api::v1alpha1::{
        CAPACITY_OVERLAY_APPLIED_ANNOTATION, PRICE_OVERLAY_APPLIED_ANNOTATION,
    };
    let default = pool("default", json!({}));
    let offered = vec![(default.clone(), catalogue())];
    let overlays = [price_overlay("big.8x", "0.05")];
    let overlaid = crate::node_overlay::evaluate(&overlays, &offered).apply_all(offered);
    let claim = planned_claim(&default, &overlaid[0].1);
    assert_eq!(
        claim.annotations().get(PRICE_OVERLAY_APPLIED_ANNOTATION),
        Some(&"true".to_string())
    );
    assert!(
        !claim
            .annotations()
            .contains_key(CAPACITY_OVERLAY_APPLIED_ANNOTATION)
    );
    // The overlaid type is now the cheapest option: first, as the provider must launch it.
    assert_eq!(instance_type_values(&claim), ["big.8x", "medium.4x"]);
}

#[test]
fn an_overlay_on_a_type_that_is_not_an_option_does_not_annotate() {
    use karpenter_api::v1alpha1::PRICE_OVERLAY_APPLIED_ANNOTATION;
    let default = pool("default", json!({}));
    let offered = vec![(default.clone(), catalogue())];
    // Dearer, small.2x is still the only type changed, but it cannot hold both pods: it is not
    // an option of the NodeClaim, whose options keep their list prices.
    let overlays = [price_overlay("small.2x", "5.0")];
    let overlaid = crate::node_overlay::evaluate(&overlays, &offered).apply_all(offered);
    let claim = planned_claim(&default, &overlaid[0].1);
    assert_eq!(instance_type_values(&claim), ["medium.4x", "big.8x"]);
    assert!(
        !claim
            .annotations()
            .contains_key(PRICE_OVERLAY_APPLIED_ANNOTATION)
    );
}

/// Upstream's expiration test on a loaded control plane: the drain evicted one of five pods
/// before the pass ran and the ReplicaSet had not created its replacement yet. The pass saw four
/// pods, planned a node for four, then a second node for the replacement. An evicted pod now
/// stands in for its replacement until the replacement exists, and no longer after.
#[test]
fn an_evicted_pod_stands_in_for_its_replacement_until_the_replacement_exists() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let default = pool("default", json!({}));
    let mut claim = nodeclaim("default-a", "default", Some("sim://a"), "4");
    claim.metadata.deletion_timestamp = Some(Time(t0()));
    let owned = |mut pod: Pod, created: i64| {
        pod.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                "uid": "rs-web-1", "controller": true
            }))
            .unwrap(),
        ]);
        pod.metadata.creation_timestamp = Some(Time(
            t0().checked_add(jiff::SignedDuration::from_secs(created))
                .unwrap(),
        ));
        pod
    };
    let evicted_at = "2024-01-01T00:00:10Z";
    let terminating = |name: &str, evicted: bool| {
        let mut pod = owned(bound_pod(name, "node-a", "500m"), -600);
        pod.metadata.deletion_timestamp = Some(Time("2024-01-01T00:00:40Z".parse().unwrap()));
        pod.metadata.deletion_grace_period_seconds = Some(30);
        if evicted {
            pod.status = serde_json::from_value(json!({"phase": "Running", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                 "lastTransitionTime": evicted_at}]}))
            .unwrap();
        }
        pod
    };
    let on_node: Vec<Pod> = (0..3)
        .map(|i| owned(bound_pod(&format!("web-{i}"), "node-a", "500m"), -600))
        .chain([terminating("web-evicted", true)])
        .collect();
    let placed = |pods: Vec<Pod>| -> Vec<String> {
        let state = state_with(
            vec![default.clone()],
            vec![claim.clone()],
            vec![node("node-a", Some("default"), "sim://a", "4")],
            pods,
        );
        let types = catalogue();
        let snapshot =
            Snapshot::new(&state, SchedulerOptions::default(), t0()).offer(&default, &types);
        let mut names: Vec<String> = snapshot
            .pods_to_place()
            .iter()
            .map(|p| p.name_any())
            .collect();
        names.sort();
        names
    };

    // No replacement yet: the evicted pod is planned for with the three still running.
    assert_eq!(
        placed(on_node.clone()),
        ["web-0", "web-1", "web-2", "web-evicted"]
    );
    // The replacement (created in the eviction's second): it is planned for, not both.
    let replacement = owned(pending_pod("web-new", "500m"), 10);
    assert_eq!(
        placed([on_node.clone(), vec![replacement]].concat()),
        ["web-0", "web-1", "web-2", "web-new"]
    );
    // A pod of the same ReplicaSet from before the eviction is no replacement.
    let older = owned(pending_pod("web-older", "500m"), 5);
    assert_eq!(
        placed([on_node.clone(), vec![older]].concat()),
        ["web-0", "web-1", "web-2", "web-evicted", "web-older"]
    );
    // Deleted without the Eviction API (a scale-down): nothing will replace it.
    let mut scaled_down = on_node;
    scaled_down[3] = terminating("web-evicted", false);
    assert_eq!(placed(scaled_down), ["web-0", "web-1", "web-2"]);
}
