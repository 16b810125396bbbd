//! Drift behaviours of karpenter-core §7.8 (upstream drift_test.go, nodeclaim drift detection).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::disruption::command::{Decision, ProviderDrift};
use crate::disruption::decide;
use crate::disruption::testkit::{World, node, pod, pool};
use crate::instance_type::InstanceType;

fn stamped(claim: &mut NodeClaim, hash: &str, version: &str) {
    let annotations = claim.metadata.annotations.get_or_insert_default();
    annotations.insert(NODEPOOL_HASH_ANNOTATION.into(), hash.into());
    annotations.insert(NODEPOOL_HASH_VERSION_ANNOTATION.into(), version.into());
}

/// Provider drift only: no instance types known.
fn only(provider_drift: &ProviderDrift) -> DriftContext<'_> {
    DriftContext {
        provider_drift,
        instance_types: None,
        now: crate::disruption::testkit::t0(),
    }
}

#[test]
fn hash_drift_needs_matching_hash_versions() {
    let pool = pool("default", &["on-demand"], json!({}));
    let (mut claim, _) = node("a", "big.8x", "on-demand", "default");
    let none = ProviderDrift::new();
    assert_eq!(
        drifted(&claim, &pool, only(&none)),
        None,
        "no hash: not drifted"
    );
    stamped(&mut claim, &template_hash(&pool), NODEPOOL_HASH_VERSION);
    assert_eq!(drifted(&claim, &pool, only(&none)), None, "same hash");
    stamped(&mut claim, "stale", NODEPOOL_HASH_VERSION);
    assert_eq!(
        drifted(&claim, &pool, only(&none)).as_deref(),
        Some(NODEPOOL_DRIFTED)
    );
    stamped(&mut claim, "stale", "v0");
    assert_eq!(
        drifted(&claim, &pool, only(&none)),
        None,
        "other hash version"
    );
}

#[test]
fn requirement_drift_comes_before_provider_drift() {
    let pool = pool("default", &["on-demand"], json!({}));
    let (claim, _) = node("a", "big.8x", "spot", "default");
    let provider = ProviderDrift::from([("a-claim".to_string(), "AMIDrift".to_string())]);
    assert_eq!(
        drifted(&claim, &pool, only(&provider)).as_deref(),
        Some(REQUIREMENTS_DRIFTED)
    );
    let (claim, _) = node("a", "big.8x", "on-demand", "default");
    assert_eq!(
        drifted(&claim, &pool, only(&provider)).as_deref(),
        Some("AMIDrift")
    );
    assert_eq!(drifted(&claim, &pool, only(&ProviderDrift::new())), None);
}

fn drifted_world(budget: &str) -> World {
    let pools = vec![pool(
        "default",
        &["on-demand"],
        json!({"disruption": {
        "consolidateAfter": "Never", "budgets": [{"nodes": budget}]}}),
    )];
    let mut world = World::new(
        pools,
        vec![
            node("busy-1", "medium.4x", "on-demand", "default"),
            node("busy-2", "medium.4x", "on-demand", "default"),
            node("empty", "medium.4x", "on-demand", "default"),
        ],
        vec![pod("p1", "busy-1", "3"), pod("p2", "busy-2", "3")],
    );
    for name in ["busy-1", "busy-2", "empty"] {
        world
            .drift
            .insert(format!("{name}-claim"), "AMIDrift".to_string());
    }
    world
}

#[test]
fn drift_runs_one_command_per_node_the_budget_allows_empty_first() {
    let world = drifted_world("2");
    let input = world.input();
    assert_eq!(
        drift_order(&input)
            .into_iter()
            .map(|(n, _)| n)
            .collect::<Vec<_>>(),
        ["empty", "busy-1", "busy-2"]
    );
    let pass = decide(&input);
    assert_eq!(pass.method, Some(Method::Drift));
    let names: Vec<&str> = pass
        .commands
        .iter()
        .map(|c| c.candidates[0].name.as_str())
        .collect();
    assert_eq!(names, ["empty", "busy-1"]);
    assert_eq!(pass.commands[0].decision(), Decision::Delete);
    // busy-1's 3 cpu fit nowhere else (the empty node is going): one replacement.
    assert_eq!(pass.commands[1].decision(), Decision::Replace);
    let budget = pass.blocked.iter().find(|r| r.name == "busy-2").unwrap();
    assert!(matches!(budget.reason, BlockReason::BudgetExhausted { .. }));
}

#[test]
fn later_drift_commands_do_not_count_on_capacity_an_earlier_one_took() {
    // One spare medium node with room for one 3-cpu pod: the first drifted node's pod goes
    // there, the second needs a replacement.
    let pools = vec![pool(
        "default",
        &["on-demand"],
        json!({"disruption": {
        "consolidateAfter": "Never", "budgets": [{"nodes": "100%"}]}}),
    )];
    let mut world = World::new(
        pools,
        vec![
            node("d1", "medium.4x", "on-demand", "default"),
            node("d2", "medium.4x", "on-demand", "default"),
            node("spare", "medium.4x", "on-demand", "default"),
        ],
        vec![
            pod("p1", "d1", "3"),
            pod("p2", "d2", "3"),
            pod("keep", "spare", "500m"),
        ],
    );
    world.drift.insert("d1-claim".into(), "AMIDrift".into());
    world.drift.insert("d2-claim".into(), "AMIDrift".into());
    let pass = decide(&world.input());
    let decisions: Vec<(String, Decision)> = pass
        .commands
        .iter()
        .map(|c| (c.candidates[0].name.clone(), c.decision()))
        .collect();
    assert_eq!(
        decisions,
        [
            ("d1".to_string(), Decision::Delete),
            ("d2".to_string(), Decision::Replace)
        ]
    );
}

#[test]
fn a_drifted_node_whose_pods_cannot_move_is_explained_and_the_next_one_runs() {
    let pools = vec![pool(
        "default",
        &["on-demand"],
        json!({"disruption": {
        "consolidateAfter": "Never", "budgets": [{"nodes": "100%"}]}}),
    )];
    let mut special = pod("p1", "d1", "1");
    special.spec.as_mut().unwrap().node_selector = Some(Arc::new(
        [("special".to_string(), "yes".to_string())].into(),
    ));
    let (c1, mut n1) = node("d1", "medium.4x", "on-demand", "default");
    n1.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("special".into(), "yes".into());
    let mut world = World::new(
        pools,
        vec![(c1, n1), node("d2", "medium.4x", "on-demand", "default")],
        vec![special, pod("p2", "d2", "1")],
    );
    world.drift.insert("d1-claim".into(), "AMIDrift".into());
    world.drift.insert("d2-claim".into(), "AMIDrift".into());
    let pass = decide(&world.input());
    assert_eq!(pass.commands.len(), 1);
    assert_eq!(pass.commands[0].candidates[0].name, "d2");
    let d1 = pass.blocked.iter().find(|r| r.name == "d1").unwrap();
    assert!(
        d1.reason
            .to_string()
            .starts_with("pods would not fit: default/p1")
    );
}

fn do_not_disrupt(
    mut p: crate::pod::Pod,
    value: &str,
    started: jiff::Timestamp,
) -> crate::pod::Pod {
    p.metadata.annotations.get_or_insert_default().insert(
        karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION.into(),
        value.into(),
    );
    p.status.get_or_insert_default().start_time = Some(Box::new(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(started),
    ));
    p
}

#[test]
fn drift_waits_until_the_longest_do_not_disrupt_duration_runs_out() {
    let pools = vec![pool(
        "default",
        &["on-demand"],
        json!({"disruption": {
        "consolidateAfter": "Never", "budgets": [{"nodes": "100%"}]}}),
    )];
    let t0 = crate::disruption::testkit::t0();
    let at = |mins: i64| {
        t0.checked_add(jiff::SignedDuration::from_mins(mins))
            .unwrap()
    };
    let mut world = World::new(
        pools,
        vec![node("d", "medium.4x", "on-demand", "default")],
        vec![
            do_not_disrupt(pod("short", "d", "1"), "2m", at(0)),
            do_not_disrupt(pod("long", "d", "1"), "10m", at(0)),
            do_not_disrupt(pod("invalid", "d", "1"), "later", at(0)),
        ],
    );
    world.drift.insert("d-claim".into(), "AMIDrift".into());
    for now in [at(1), at(2), at(9)] {
        world.now = now;
        let pass = decide(&world.input());
        assert!(pass.commands.is_empty(), "at {now}");
        let d = pass.blocked.iter().find(|r| r.name == "d").unwrap();
        assert_eq!(
            d.reason,
            BlockReason::DoNotDisruptPod {
                pod: "default/long".into(),
                until: Some(at(10))
            },
            "at {now}"
        );
        assert_eq!(d.reason.frees_at(), Some(at(10)));
    }
    world.now = at(10);
    let pass = decide(&world.input());
    assert_eq!(pass.method, Some(Method::Drift), "{:?}", pass.blocked);
    assert_eq!(pass.commands[0].candidates[0].name, "d");
}

#[test]
fn static_drift_replaces_one_for_one_from_the_template() {
    let pools = vec![pool("fixed", &["on-demand"], json!({"replicas": 2}))];
    let mut world = World::new(
        pools,
        vec![
            node("s1", "medium.4x", "on-demand", "fixed"),
            node("s2", "medium.4x", "on-demand", "fixed"),
        ],
        vec![pod("p1", "s1", "1")],
    );
    world.drift.insert("s1-claim".into(), "AMIDrift".into());
    let pass = decide(&world.input());
    assert_eq!(pass.method, Some(Method::StaticDrift));
    assert_eq!(pass.commands.len(), 1);
    let command = &pass.commands[0];
    assert_eq!(command.candidates[0].name, "s1");
    assert_eq!(command.replacements.len(), 1);
    assert_eq!(command.replacements[0].nodepool_name(), Some("fixed"));
}

/// A NodeClaim of `size` and `capacity_type` created at t0, judged `hours` later against `types`.
fn instance_type_drift(
    size: &str,
    capacity_type: &str,
    hours: i64,
    types: &[Arc<InstanceType>],
) -> Option<String> {
    use crate::disruption::testkit::t0;
    let pool = pool("default", &["on-demand", "spot", "reserved"], json!({}));
    let (mut claim, _) = node("a", size, capacity_type, "default");
    claim.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t0()));
    let none = ProviderDrift::new();
    let context = DriftContext {
        provider_drift: &none,
        instance_types: Some(types),
        now: t0().checked_add(SignedDuration::from_hours(hours)).unwrap(),
    };
    drifted(&claim, &pool, context)
}

#[test]
fn a_node_whose_instance_type_is_no_longer_offered_drifts_after_an_hour() {
    let sizes = crate::disruption::testkit::sizes();
    let without_big: Vec<Arc<InstanceType>> = sizes
        .iter()
        .filter(|t| t.name != "big.8x")
        .cloned()
        .collect();
    assert_eq!(instance_type_drift("big.8x", "on-demand", 2, &sizes), None);
    assert_eq!(
        instance_type_drift("big.8x", "on-demand", 2, &without_big).as_deref(),
        Some(INSTANCE_TYPE_NOT_FOUND)
    );
    assert_eq!(
        instance_type_drift("big.8x", "on-demand", 0, &without_big),
        None,
        "younger than an hour: the catalogue may predate it"
    );
    assert_eq!(
        instance_type_drift("big.8x", "on-demand", 2, &[]),
        None,
        "no types known (NodeClass not ready): nothing drifts"
    );
}

#[test]
fn a_node_whose_offering_is_gone_drifts_but_a_reserved_one_may_run_on_demand() {
    // The test catalogue offers on-demand and spot in one zone: no reserved offering.
    let sizes = crate::disruption::testkit::sizes();
    assert_eq!(instance_type_drift("small.2x", "spot", 2, &sizes), None);
    assert_eq!(
        instance_type_drift("small.2x", "reserved", 2, &sizes),
        None,
        "a reservation that ended leaves an on-demand instance"
    );
    let spot_gone: Vec<Arc<InstanceType>> = sizes
        .iter()
        .map(|t| {
            let mut t = (**t).clone();
            t.offerings.retain(|o| o.capacity_type != "spot");
            Arc::new(t)
        })
        .collect();
    assert_eq!(
        instance_type_drift("small.2x", "spot", 2, &spot_gone).as_deref(),
        Some(INSTANCE_TYPE_NOT_FOUND)
    );
    let elsewhere: Vec<Arc<InstanceType>> = sizes
        .iter()
        .map(|t| {
            let mut t = (**t).clone();
            for o in &mut t.offerings {
                o.zone = "test-1b".into();
            }
            Arc::new(t)
        })
        .collect();
    assert_eq!(
        instance_type_drift("small.2x", "on-demand", 2, &elsewhere).as_deref(),
        Some(INSTANCE_TYPE_NOT_FOUND),
        "no offering in the node's zone"
    );
}
