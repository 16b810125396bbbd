//! Issue 21's consolidation rules as upstream's consolidation_test.go states them (§7.6): the
//! multi-node same-type price cap, duration-valued do-not-disrupt pods, reserved capacity and
//! PDBs that let unhealthy pods go. Each asserts the end cost or the decision upstream reaches.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::*;
use crate::disruption::command::Decision;
use crate::disruption::decide;
use crate::disruption::testkit::{World, ZONE, instance_type, node_with_cpu, pod, pool, t0};
use crate::instance_type::InstanceType;
use crate::instance_type::Offering;

fn on_demand_pool() -> Vec<karpenter_api::NodePool> {
    vec![pool("default", &["on-demand"], json!({}))]
}

/// The hourly cost after the pass's commands: what the cluster costs minus what they save.
fn end_cost(world: &World, pass: &crate::disruption::Pass) -> f64 {
    world.hourly_cost()
        - pass
            .commands
            .iter()
            .map(|c| c.savings_per_hour)
            .sum::<f64>()
}

fn assert_cost(actual: f64, expected: f64) {
    assert!(
        (actual - expected).abs() < 1e-9,
        "ends at ${actual:.2}/h, upstream ends at ${expected:.2}/h"
    );
}

#[test]
fn multi_node_deletes_four_of_five_same_type_nodes_rather_than_replace_them_by_a_bigger_one() {
    // Five std-4x ($0.40/h) each running one 700m pod: all 3.5 cpu fit one std-4x, so
    // replacing the five by a std-8x ($0.80/h) is not strictly cheaper than a std-4x kept.
    let types = [
        Arc::new(instance_type("std-4x", "4", 0.40)),
        Arc::new(instance_type("std-8x", "8", 0.80)),
    ];
    let names = ["n1", "n2", "n3", "n4", "n5"];
    let world = World::new(
        on_demand_pool(),
        names
            .iter()
            .map(|n| node_with_cpu(n, "std-4x", "4", "on-demand", "default"))
            .collect(),
        names
            .iter()
            .map(|n| pod(&format!("p-{n}"), n, "700m"))
            .collect(),
    )
    .with_types(&types);
    assert_cost(world.hourly_cost(), 2.0);
    let pass = decide(&world.input());
    assert_eq!(pass.method, Some(Method::MultiNodeConsolidation));
    let command = &pass.commands[0];
    assert_eq!(command.decision(), Decision::Delete);
    assert_eq!(command.candidates.len(), 4);
    assert_cost(end_cost(&world, &pass), 0.40);
}

#[test]
fn multi_node_wont_merge_two_nodes_into_a_bigger_type_when_one_of_their_own_fits_all() {
    // Two c1-m1 ($0.21/h), one pod on one and two on the other: all fit a c1-m1, so the merge
    // into a c2-m1 ($0.31/h) is refused and single-node deletes the node with fewer pods.
    let types = [
        Arc::new(instance_type("c1-m1", "1", 0.21)),
        Arc::new(instance_type("c2-m1", "2", 0.31)),
    ];
    let world = World::new(
        on_demand_pool(),
        vec![
            node_with_cpu("few", "c1-m1", "1", "on-demand", "default"),
            node_with_cpu("many", "c1-m1", "1", "on-demand", "default"),
        ],
        vec![
            pod("a", "few", "100m"),
            pod("b", "many", "100m"),
            pod("c", "many", "100m"),
        ],
    )
    .with_types(&types);
    let input = world.input();
    let mut blocked = BTreeMap::new();
    assert!(multi_node(&input, &mut blocked).is_empty());
    let pass = decide(&input);
    assert_eq!(pass.method, Some(Method::SingleNodeConsolidation));
    let command = &pass.commands[0];
    assert_eq!(command.decision(), Decision::Delete);
    assert_eq!(command.candidates[0].name, "few");
    assert_cost(end_cost(&world, &pass), 0.21);
}

#[test]
fn multi_node_still_merges_into_a_cheaper_type_than_any_candidate() {
    // Three medium.4x ($0.20/h) with 600m each: a small.2x ($0.10/h) holds them all and is
    // cheaper than the medium.4x among the options, so the cap keeps it.
    let world = World::new(
        on_demand_pool(),
        ["a", "b", "c"]
            .iter()
            .map(|n| node_with_cpu(n, "medium.4x", "4", "on-demand", "default"))
            .collect(),
        vec![
            pod("pa", "a", "600m"),
            pod("pb", "b", "600m"),
            pod("pc", "c", "600m"),
        ],
    );
    let pass = decide(&world.input());
    let command = &pass.commands[0];
    assert_eq!(command.decision(), Decision::Replace);
    assert_eq!(command.candidates.len(), 3);
    assert_cost(end_cost(&world, &pass), 0.10);
}

fn with_do_not_disrupt(
    mut p: crate::pod::Pod,
    value: &str,
    started: Option<Timestamp>,
) -> crate::pod::Pod {
    p.metadata.annotations.get_or_insert_default().insert(
        karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION.into(),
        value.into(),
    );
    p.status.get_or_insert_default().start_time = started.map(|t| Box::new(Time(t)));
    p
}

fn one_big_node(pods: Vec<crate::pod::Pod>) -> World {
    World::new(
        on_demand_pool(),
        vec![node_with_cpu("a", "big.8x", "8", "on-demand", "default")],
        pods,
    )
}

#[test]
fn does_not_consolidate_a_node_whose_pod_has_an_active_do_not_disrupt_duration() {
    // The pass runs an hour after t0; the pod started a minute before.
    let started = t0().checked_add(SignedDuration::from_mins(59)).unwrap();
    let frees = started.checked_add(SignedDuration::from_mins(2)).unwrap();
    let mut world = one_big_node(vec![with_do_not_disrupt(
        pod("p", "a", "1"),
        "2m",
        Some(started),
    )]);
    let pass = decide(&world.input());
    assert!(pass.commands.is_empty());
    let reason = &pass.blocked.iter().find(|r| r.name == "a").unwrap().reason;
    assert_eq!(
        reason,
        &BlockReason::DoNotDisruptPod {
            pod: "default/p".into(),
            until: Some(frees)
        }
    );
    assert_eq!(reason.frees_at(), Some(frees));
    let sentence = reason.to_string();
    assert!(sentence.contains("default/p"), "{sentence}");
    assert!(sentence.contains(&frees.to_string()), "{sentence}");
    // Once the duration has run out the node is consolidated.
    world.now = frees;
    let pass = decide(&world.input());
    assert_eq!(pass.commands.len(), 1, "{:?}", pass.blocked);
    assert_eq!(pass.commands[0].candidates[0].name, "a");
}

#[test]
fn a_do_not_disrupt_duration_on_a_pod_without_a_start_time_blocks() {
    let world = one_big_node(vec![with_do_not_disrupt(pod("p", "a", "1"), "2m", None)]);
    let pass = decide(&world.input());
    assert!(pass.commands.is_empty());
    let reason = &pass.blocked.iter().find(|r| r.name == "a").unwrap().reason;
    assert!(
        matches!(reason, BlockReason::DoNotDisruptPod { until: None, .. }),
        "{reason:?}"
    );
}

#[test]
fn an_invalid_do_not_disrupt_value_does_not_block_consolidation() {
    let world = one_big_node(vec![with_do_not_disrupt(
        pod("p", "a", "1"),
        "not-a-duration",
        Some(t0()),
    )]);
    let pass = decide(&world.input());
    assert_eq!(pass.commands.len(), 1, "{:?}", pass.blocked);
}

#[test]
fn a_duration_on_a_node_does_not_block_only_true_does() {
    let (claim, mut n) = node_with_cpu("a", "big.8x", "8", "on-demand", "default");
    n.metadata.annotations.get_or_insert_default().insert(
        karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION.into(),
        "1h".into(),
    );
    let world = World::new(on_demand_pool(), vec![(claim, n)], vec![pod("p", "a", "1")]);
    let pass = decide(&world.input());
    assert_eq!(pass.commands.len(), 1, "{:?}", pass.blocked);
}

/// `name` with `cpu`, on-demand at `on_demand` and on a reservation at `reserved` in [`ZONE`].
fn reservable(name: &str, cpu: &str, on_demand: f64, reserved: f64) -> Arc<InstanceType> {
    let mut it = instance_type(name, cpu, on_demand);
    it.offerings.retain(|o| o.capacity_type == "on-demand");
    it.offerings.push(Offering {
        zone: ZONE.into(),
        capacity_type: "reserved".into(),
        price: reserved,
        available: true,
        reservation_id: Some(format!("cr-{name}")),
        reservation_capacity: Some(1),
    });
    Arc::new(it)
}

fn capacity_types_of(claim: &karpenter_api::NodeClaim) -> Vec<String> {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == CAPACITY_TYPE_LABEL)
        .map(|r| r.values.to_vec())
        .unwrap_or_default()
}

#[test]
fn can_consolidate_from_on_demand_to_the_same_type_on_a_reservation() {
    let types = [reservable("r.4x", "4", 0.40, 0.10)];
    let pools = vec![pool("default", &["on-demand", "reserved"], json!({}))];
    let world = World::new(
        pools,
        vec![node_with_cpu("od", "r.4x", "4", "on-demand", "default")],
        vec![pod("p", "od", "3")],
    )
    .with_types(&types);
    let pass = decide(&world.input());
    let command = pass
        .commands
        .first()
        .unwrap_or_else(|| panic!("{:?}", pass.blocked));
    assert_eq!(command.decision(), Decision::Replace);
    let replacement = &command.replacements[0];
    assert_eq!(capacity_types_of(replacement), ["reserved"]);
    assert_cost(end_cost(&world, &pass), 0.10);
}

#[test]
fn can_consolidate_from_one_reserved_offering_to_a_cheaper_one() {
    let types = [
        reservable("r.4x", "4", 0.40, 0.15),
        reservable("r.8x", "8", 0.80, 0.30),
    ];
    let pools = vec![pool("default", &["on-demand", "reserved"], json!({}))];
    let world = World::new(
        pools,
        vec![node_with_cpu("res", "r.8x", "8", "reserved", "default")],
        vec![pod("p", "res", "3")],
    )
    .with_types(&types);
    assert_cost(world.hourly_cost(), 0.30);
    let pass = decide(&world.input());
    let command = pass
        .commands
        .first()
        .unwrap_or_else(|| panic!("{:?}", pass.blocked));
    assert_eq!(command.decision(), Decision::Replace);
    let replacement = &command.replacements[0];
    assert_eq!(capacity_types_of(replacement), ["reserved"]);
    assert_cost(end_cost(&world, &pass), 0.15);
}

#[test]
fn a_reservation_no_cheaper_than_the_node_is_not_a_replacement() {
    let types = [reservable("r.4x", "4", 0.40, 0.40)];
    let pools = vec![pool("default", &["on-demand", "reserved"], json!({}))];
    let world = World::new(
        pools,
        vec![node_with_cpu("od", "r.4x", "4", "on-demand", "default")],
        vec![pod("p", "od", "3")],
    )
    .with_types(&types);
    let pass = decide(&world.input());
    assert!(pass.commands.is_empty());
}

fn not_ready(mut p: crate::pod::Pod) -> crate::pod::Pod {
    let status = p.status.get_or_insert_default();
    status.phase = Some("Running".into());
    status.conditions = Some(vec![crate::pod::PodCondition {
        type_: "Ready".into(),
        status: "False".into(),
        ..Default::default()
    }]);
    p
}

fn zero_budget_pdb(policy: &str) -> k8s_openapi::api::policy::v1::PodDisruptionBudget {
    serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}},
                 "unhealthyPodEvictionPolicy": policy},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 1,
                   "expectedPods": 1}
    }))
    .unwrap()
}

fn web_pod_under_pdb(policy: &str) -> World {
    let mut p = not_ready(pod("p", "a", "1500m"));
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("app".into(), "web".into());
    let mut world = one_big_node(vec![p]);
    world.state.apply(zero_budget_pdb(policy));
    world
}

#[test]
fn can_replace_nodes_considering_the_pdb_policy_always_allow() {
    // The unready pod may be evicted whatever the budget says, so the node is a candidate and
    // its pod is moved like any other: a replacement is launched first.
    let world = web_pod_under_pdb("AlwaysAllow");
    let pass = decide(&world.input());
    let command = pass
        .commands
        .first()
        .unwrap_or_else(|| panic!("{:?}", pass.blocked));
    assert_eq!(command.decision(), Decision::Replace);
    assert_eq!(command.candidates[0].reschedulable_pods, ["default/p"]);
    assert_cost(end_cost(&world, &pass), 0.10);
    // The default policy (IfHealthyBudget) holds the node.
    let world = web_pod_under_pdb("IfHealthyBudget");
    let pass = decide(&world.input());
    assert!(pass.commands.is_empty());
    let reason = &pass.blocked.iter().find(|r| r.name == "a").unwrap().reason;
    assert!(
        matches!(reason, BlockReason::PdbBlocks { .. }),
        "{reason:?}"
    );
}
