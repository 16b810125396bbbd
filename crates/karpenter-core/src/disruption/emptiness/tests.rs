//! Emptiness rules of karpenter-core §4.4 / §4.13 (upstream emptiness_test.go, §7.7), and a
//! property test over random clusters for the safety of candidates and emptiness together.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::pod::Pod;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::{NodeClaim, NodePool};
use kube_core::ResourceExt;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::disruption::candidates::tests::{
    catalog, do_not_disrupt, managed, owned_by, pdb, pod_on, t0, web,
};
use crate::disruption::candidates::{DisruptionClass, candidates};
use crate::instance_type::{InstanceType, Offering};
use crate::pod;
use crate::state::{ClusterState, fixtures};

fn pool_with(name: &str, disruption: serde_json::Value) -> NodePool {
    let mut value = serde_json::to_value(fixtures::nodepool(name)).unwrap();
    value["spec"]["disruption"] = disruption;
    serde_json::from_value(value).unwrap()
}

fn after(consolidate_after: &str) -> NodePool {
    pool_with("default", json!({"consolidateAfter": consolidate_after}))
}

fn mins(n: i64) -> SignedDuration {
    SignedDuration::from_mins(n)
}

fn rfc3339(at: Timestamp) -> String {
    at.to_string()
}

/// A managed node whose NodeClaim saw its last pod event at `last_pod_event`.
fn idle_since(name: &str, last_pod_event: Timestamp) -> (NodeClaim, Node) {
    let (mut claim, node) = managed(name);
    claim.status.as_mut().unwrap().last_pod_event_time = Some(rfc3339(last_pod_event));
    (claim, node)
}

fn state_of(pools: Vec<NodePool>, nodes: Vec<(NodeClaim, Node)>, pods: Vec<Pod>) -> ClusterState {
    let (claims, nodes) = nodes.into_iter().unzip();
    ClusterState::from_objects(pools, claims, nodes, pods)
}

fn all_allowed(pools: &[&str]) -> BTreeMap<String, usize> {
    pools.iter().map(|p| (p.to_string(), usize::MAX)).collect()
}

fn decide(state: &ClusterState, now: Timestamp, allowed: &BTreeMap<String, usize>) -> Vec<String> {
    let (cands, _) = candidates(state, now, DisruptionClass::Graceful, &catalog());
    emptiness(&cands, now, allowed)
        .delete
        .iter()
        .map(Candidate::name)
        .collect()
}

fn blocked(state: &ClusterState, now: Timestamp) -> Vec<(String, BlockReason)> {
    let (cands, _) = candidates(state, now, DisruptionClass::Graceful, &catalog());
    emptiness(&cands, now, &all_allowed(&["default"]))
        .blocked
        .into_iter()
        .map(|r| (r.name, r.reason))
        .collect()
}

#[test]
fn deletes_empty_nodes_in_one_command_and_keeps_nodes_with_pods() {
    let state = state_of(
        vec![after("0s")],
        vec![managed("a"), managed("b"), managed("busy")],
        vec![
            pod_on("app", "busy", json!({})),
            pod_on("agent", "a", owned_by("DaemonSet")),
        ],
    );
    assert_eq!(decide(&state, t0(), &all_allowed(&["default"])), ["a", "b"]);
}

#[test]
fn highest_savings_go_first_when_the_budget_is_short() {
    let (claim, mut cheap) = managed("cheap");
    cheap
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("node.kubernetes.io/instance-type".into(), "t3.small".into());
    let state = state_of(
        vec![after("0s")],
        vec![(claim, cheap), managed("pricey")],
        vec![],
    );
    let mut prices = catalog();
    prices.get_mut("default").unwrap().push(InstanceType {
        name: "t3.small".into(),
        offerings: vec![Offering {
            zone: "us-west-2a".into(),
            capacity_type: "on-demand".into(),
            price: 0.02,
            available: true,
            ..Offering::default()
        }],
        ..InstanceType::default()
    });
    let (cands, _) = candidates(&state, t0(), DisruptionClass::Graceful, &prices);
    let allowed = BTreeMap::from([("default".to_string(), 1)]);
    let decision = emptiness(&cands, t0(), &allowed);
    let names: Vec<String> = decision.delete.iter().map(Candidate::name).collect();
    assert_eq!(names, ["pricey"]);
    assert!(decision.budget_constrained);
}

#[test]
fn consolidate_after_never_disables_emptiness_for_the_pool() {
    let state = state_of(vec![after("Never")], vec![managed("a")], vec![]);
    assert!(decide(&state, t0(), &all_allowed(&["default"])).is_empty());
    assert_eq!(
        blocked(&state, t0()),
        [(
            "a".to_string(),
            BlockReason::ConsolidationDisabled("default".into())
        )]
    );
}

#[test]
fn waits_for_consolidate_after_since_the_last_pod_event() {
    let state = state_of(vec![after("10m")], vec![idle_since("a", t0())], vec![]);
    let allowed = all_allowed(&["default"]);
    assert!(decide(&state, t0() + mins(9), &allowed).is_empty());
    assert_eq!(
        blocked(&state, t0() + mins(9)),
        [(
            "a".to_string(),
            BlockReason::ConsolidatableAt(t0() + mins(10))
        )]
    );
    assert_eq!(decide(&state, t0() + mins(10), &allowed), ["a"]);
}

#[test]
fn the_clock_starts_at_initialization_when_no_pod_event_is_later() {
    let (mut claim, node) = idle_since("a", t0());
    claim.status.as_mut().unwrap().conditions = vec![
        serde_json::from_value(json!({"type": "Initialized", "status": "True",
            "lastTransitionTime": rfc3339(t0() + mins(30))}))
        .unwrap(),
    ];
    let state = state_of(vec![after("10m")], vec![(claim, node)], vec![]);
    let allowed = all_allowed(&["default"]);
    assert!(decide(&state, t0() + mins(39), &allowed).is_empty());
    assert_eq!(decide(&state, t0() + mins(40), &allowed), ["a"]);
}

#[test]
fn without_initialized_condition_the_node_creation_time_starts_the_clock() {
    let (claim, mut node) = managed("a");
    node.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t0()));
    let state = state_of(vec![after("10m")], vec![(claim, node)], vec![]);
    assert_eq!(
        blocked(&state, t0()),
        [(
            "a".to_string(),
            BlockReason::ConsolidatableAt(t0() + mins(10))
        )]
    );
}

#[test]
fn a_pod_bound_after_the_recorded_pod_event_restarts_the_clock() {
    // The DaemonSet pod leaves the node empty, but its bind is still a pod event.
    let mut agent = owned_by("DaemonSet");
    agent["status"] = json!({"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(t0() + mins(5))}]});
    let state = state_of(
        vec![after("10m")],
        vec![idle_since("a", t0())],
        vec![pod_on("agent", "a", agent)],
    );
    assert_eq!(
        blocked(&state, t0() + mins(12)),
        [(
            "a".to_string(),
            BlockReason::ConsolidatableAt(t0() + mins(15))
        )]
    );
}

#[test]
fn static_nodepools_are_not_consolidated() {
    let mut pool = after("0s");
    let mut value = serde_json::to_value(&pool).unwrap();
    value["spec"]["replicas"] = json!(2);
    pool = serde_json::from_value(value).unwrap();
    let state = state_of(vec![pool], vec![managed("a")], vec![]);
    assert_eq!(
        blocked(&state, t0()),
        [(
            "a".to_string(),
            BlockReason::StaticNodePool("default".into())
        )]
    );
}

#[test]
fn applies_to_every_consolidation_policy() {
    for policy in ["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"] {
        let pool = pool_with(
            "default",
            json!({"consolidateAfter": "0s", "consolidationPolicy": policy}),
        );
        let state = state_of(vec![pool], vec![managed("a")], vec![]);
        assert_eq!(
            decide(&state, t0(), &all_allowed(&["default"])),
            ["a"],
            "{policy}"
        );
    }
}

fn ten_empty_nodes() -> ClusterState {
    let nodes = (0..10).map(|i| managed(&format!("n{i}"))).collect();
    state_of(vec![after("0s")], nodes, vec![])
}

#[test]
fn budgets_allow_all_none_or_only_some_empty_nodes() {
    let state = ten_empty_nodes();
    let with = |n: usize| BTreeMap::from([("default".to_string(), n)]);
    assert_eq!(decide(&state, t0(), &with(10)).len(), 10);
    assert_eq!(decide(&state, t0(), &with(0)).len(), 0);
    assert_eq!(decide(&state, t0(), &with(3)).len(), 3);
    assert_eq!(
        decide(&state, t0(), &BTreeMap::new()).len(),
        0,
        "a pool missing from the budget map may lose nothing"
    );

    let (cands, _) = candidates(&state, t0(), DisruptionClass::Graceful, &catalog());
    let decision = emptiness(&cands, t0(), &with(3));
    assert_eq!(decision.blocked.len(), 7);
    assert!(decision.budget_constrained);
    assert_eq!(
        decision.blocked[0].reason.to_string(),
        "disruption budget of NodePool \"default\" allows no more Empty disruptions now"
    );
}

#[test]
fn budgets_apply_per_nodepool() {
    let mut pools = Vec::new();
    let mut nodes = Vec::new();
    for pool in ["p1", "p2"] {
        pools.push(pool_with(pool, json!({"consolidateAfter": "0s"})));
        for i in 0..3 {
            let (mut claim, mut node) = managed(&format!("{pool}-{i}"));
            for labels in [&mut claim.metadata.labels, &mut node.metadata.labels] {
                labels
                    .as_mut()
                    .unwrap()
                    .insert("karpenter.sh/nodepool".into(), pool.into());
            }
            nodes.push((claim, node));
        }
    }
    let state = state_of(pools, nodes, vec![]);
    let mut prices = catalog();
    let types = prices.remove("default").unwrap();
    prices.insert("p1".into(), types.clone());
    prices.insert("p2".into(), types);
    let (cands, _) = candidates(&state, t0(), DisruptionClass::Graceful, &prices);
    let allowed = BTreeMap::from([("p1".to_string(), 2), ("p2".to_string(), 3)]);
    let decision = emptiness(&cands, t0(), &allowed);
    let per_pool = |pool: &str| {
        decision
            .delete
            .iter()
            .filter(|c| c.nodepool_name() == pool)
            .count()
    };
    assert_eq!((per_pool("p1"), per_pool("p2")), (2, 3));
}

#[test]
fn a_non_empty_node_is_neither_deleted_nor_reported_by_emptiness() {
    let state = state_of(
        vec![after("0s")],
        vec![managed("busy")],
        vec![pod_on("app", "busy", json!({}))],
    );
    assert!(decide(&state, t0(), &all_allowed(&["default"])).is_empty());
    assert!(
        blocked(&state, t0()).is_empty(),
        "consolidation explains it"
    );
}

/// One random pod: which node, and its flags.
#[derive(Clone, Debug)]
struct PodSpec {
    node: usize,
    do_not_disrupt: bool,
    under_pdb: bool,
    daemonset: bool,
    terminal: bool,
}

fn pod_spec(nodes: usize) -> impl Strategy<Value = PodSpec> {
    (
        0..nodes,
        prop::bool::weighted(0.2),
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(node, do_not_disrupt, under_pdb, daemonset, terminal)| PodSpec {
                node,
                do_not_disrupt,
                under_pdb,
                daemonset,
                terminal,
            },
        )
}

fn build(
    nodes: usize,
    pods: &[PodSpec],
    pool_of: &[bool],
    pdb_allowed: Option<i32>,
) -> ClusterState {
    let pools = ["p0", "p1"];
    let objects = (0..nodes)
        .map(|i| {
            let pool = pools[usize::from(pool_of[i % pool_of.len()])];
            let (mut claim, mut node) = managed(&format!("n{i}"));
            for labels in [&mut claim.metadata.labels, &mut node.metadata.labels] {
                labels
                    .as_mut()
                    .unwrap()
                    .insert("karpenter.sh/nodepool".into(), pool.into());
            }
            (claim, node)
        })
        .collect();
    let pod_objects = pods
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let mut extra = json!({});
            if spec.under_pdb {
                extra = web();
            }
            if spec.daemonset {
                extra["metadata"]["ownerReferences"] =
                    owned_by("DaemonSet")["metadata"]["ownerReferences"].clone();
            }
            if spec.do_not_disrupt {
                extra["metadata"]["annotations"] =
                    do_not_disrupt()["metadata"]["annotations"].clone();
            }
            if spec.terminal {
                extra["status"] = json!({"phase": "Failed"});
            }
            pod_on(&format!("p{i}"), &format!("n{}", spec.node), extra)
        })
        .collect();
    let mut state = state_of(
        pools
            .iter()
            .map(|p| pool_with(p, json!({"consolidateAfter": "0s"})))
            .collect(),
        objects,
        pod_objects,
    );
    if let Some(allowed) = pdb_allowed {
        state.apply(pdb("web-pdb", allowed, json!({})));
    }
    state
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn candidates_never_hold_blocking_pods_and_emptiness_respects_budgets(
        (nodes, pods) in (1usize..8).prop_flat_map(|n| (Just(n), prop::collection::vec(pod_spec(n), 0..16))),
        pool_of in prop::collection::vec(any::<bool>(), 1..8),
        pdb_allowed in prop::option::of(0i32..2),
        allowed_p0 in 0usize..4,
        allowed_p1 in 0usize..4,
    ) {
        let state = build(nodes, &pods, &pool_of, pdb_allowed);
        let mut prices = catalog();
        let types = prices.remove("default").unwrap();
        prices.insert("p0".into(), types.clone());
        prices.insert("p1".into(), types);
        let (cands, rejections) = candidates(&state, t0(), DisruptionClass::Graceful, &prices);
        prop_assert_eq!(cands.len() + rejections.len(), nodes);
        for candidate in &cands {
            for p in &candidate.pods {
                let active = !pod::is_terminal(p) && !pod::is_terminating(p);
                prop_assert!(!(active && pod::has_do_not_disrupt(p, t0())),
                    "{} holds do-not-disrupt pod {}", candidate.name(), pod::key(p));
                let held = p.labels().get("app").is_some_and(|v| v == "web")
                    && active
                    && !pod::has_do_not_disrupt(p, t0())
                    && pdb_allowed == Some(0);
                prop_assert!(!held, "{} holds PDB-blocked pod {}", candidate.name(), pod::key(p));
            }
        }
        let allowed = BTreeMap::from([("p0".to_string(), allowed_p0), ("p1".to_string(), allowed_p1)]);
        let decision = emptiness(&cands, t0(), &allowed);
        for (pool, limit) in &allowed {
            let taken = decision.delete.iter().filter(|c| &c.nodepool_name() == pool).count();
            prop_assert!(taken <= *limit, "{pool}: {taken} > {limit}");
        }
        for candidate in &decision.delete {
            prop_assert!(candidate.is_empty());
            prop_assert!(candidate.reschedulable_pods.is_empty());
        }
    }
}
