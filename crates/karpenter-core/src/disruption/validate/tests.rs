//! Validation before execution (karpenter-core §4.4, §4.11; §7.6 items 28–30, §7.7 item 11).
#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;
use crate::disruption::decide;
use crate::disruption::testkit::{World, node, pod, pool};

fn replace_world() -> World {
    World::new(
        vec![pool("default", &["on-demand"], json!({}))],
        vec![
            node("big", "big.8x", "on-demand", "default"),
            node("small", "small.2x", "on-demand", "default"),
        ],
        vec![pod("a", "big", "1"), pod("b", "small", "500m")],
    )
}

#[test]
fn a_fresh_command_validates_against_the_same_state() {
    let world = replace_world();
    let pass = decide(&world.input());
    assert!(!pass.commands.is_empty());
    for command in &pass.commands {
        let runnable = validate(command, &world.input()).unwrap();
        assert_eq!(runnable.candidates, command.candidates);
    }
}

#[test]
fn a_pod_that_arrived_during_the_wait_invalidates_the_command() {
    let mut world = replace_world();
    let pass = decide(&world.input());
    let command = pass.commands[0].clone();
    // A new pod pins a candidate.
    let mut pinned = pod("late", &command.candidates[0].name, "100m");
    pinned
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("karpenter.sh/do-not-disrupt".into(), "true".into());
    world.state.apply(pinned);
    let err = validate(&command, &world.input()).unwrap_err();
    assert!(
        matches!(&err, BlockReason::NoLongerCandidate(inner) if matches!(**inner, BlockReason::DoNotDisruptPod { .. })),
        "{err}"
    );
}

#[test]
fn a_budget_closed_during_the_wait_invalidates_the_command() {
    let mut world = replace_world();
    let pass = decide(&world.input());
    let command = pass.commands[0].clone();
    world.state.apply(pool(
        "default",
        &["on-demand"],
        json!({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "0"}]}}),
    ));
    assert!(matches!(
        validate(&command, &world.input()),
        Err(BlockReason::BudgetExhausted { .. })
    ));
}

#[test]
fn capacity_taken_during_the_wait_changes_the_decision() {
    let mut world = World::new(
        vec![pool("default", &["on-demand"], json!({}))],
        vec![
            node("big", "big.8x", "on-demand", "default"),
            node("small", "small.2x", "on-demand", "default"),
        ],
        vec![pod("a", "big", "7"), pod("b", "small", "1")],
    );
    let input = world.input();
    let mut blocked = BTreeMap::new();
    let commands = crate::disruption::consolidation::single_node(&input, &mut blocked);
    let command = commands[0].clone();
    assert_eq!(command.candidates[0].name, "small");
    assert!(command.replacements.is_empty(), "b fits on big");
    // Another pod fills big meanwhile: b no longer fits without a replacement.
    world.state.apply(pod("c", "big", "1"));
    let err = validate(&command, &world.input()).unwrap_err();
    assert!(
        matches!(
            err,
            BlockReason::DecisionChanged(_) | BlockReason::NoCheaperReplacement { .. }
        ),
        "{err}"
    );
}

/// Three empty nodes of `default` (budget 100 %), deleted by one emptiness command.
fn three_empty() -> (World, Command) {
    let world = World::new(
        vec![pool("default", &["on-demand"], json!({}))],
        vec![
            node("e1", "small.2x", "on-demand", "default"),
            node("e2", "medium.4x", "on-demand", "default"),
            node("e3", "big.8x", "on-demand", "default"),
        ],
        vec![],
    );
    let pass = decide(&world.input());
    assert_eq!(pass.method, Some(Method::Emptiness));
    let command = pass.commands[0].clone();
    assert_eq!(command.candidates.len(), 3);
    (world, command)
}

fn names(command: &Command) -> Vec<&str> {
    let mut names: Vec<&str> = command.candidates.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    names
}

/// Upstream's emptiness validation 15 s after the decision keeps the nodes still empty and
/// drops the others (partial success), with the savings of what is left.
#[test]
fn an_emptiness_command_keeps_the_nodes_still_empty_after_the_wait() {
    let (mut world, command) = three_empty();
    world.state.apply(pod("arrived", "e3", "1"));
    let runnable = validate(&command, &world.input()).unwrap();
    assert_eq!(names(&runnable), ["e1", "e2"]);
    assert!(
        (runnable.savings_per_hour - 0.3).abs() < 1e-9,
        "{runnable:?}"
    );
    assert_eq!(runnable.method, Method::Emptiness);
}

/// "abandoning empty node consolidation attempt due to pod churn": no node left empty.
#[test]
fn an_emptiness_command_with_no_node_left_empty_is_abandoned() {
    let (mut world, command) = three_empty();
    for node in ["e1", "e2", "e3"] {
        world.state.apply(pod(&format!("on-{node}"), node, "1"));
    }
    let err = validate(&command, &world.input()).unwrap_err();
    assert!(matches!(err, BlockReason::DecisionChanged(_)), "{err}");
}

/// The budget is computed afresh: nodes it no longer admits stay.
#[test]
fn an_emptiness_command_keeps_only_what_a_fresh_budget_allows() {
    let (mut world, command) = three_empty();
    world.state.apply(pool(
        "default",
        &["on-demand"],
        json!({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "1"}]}}),
    ));
    let runnable = validate(&command, &world.input()).unwrap();
    assert_eq!(runnable.candidates.len(), 1, "{runnable:?}");
    world.state.apply(pool(
        "default",
        &["on-demand"],
        json!({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "0"}]}}),
    ));
    assert!(matches!(
        validate(&command, &world.input()),
        Err(BlockReason::BudgetExhausted { .. })
    ));
}

/// A node a pending pod was nominated to during the wait, or one that started deleting, is no
/// longer a candidate; the others still go.
#[test]
fn an_emptiness_command_drops_nominated_and_deleting_nodes() {
    let (mut world, command) = three_empty();
    world
        .state
        .apply(crate::state::fixtures::pending_pod("waiting", "1"));
    let until = world
        .now
        .checked_add(jiff::SignedDuration::from_mins(1))
        .unwrap();
    world.state.nominate("default/waiting", "e1-claim", until);
    let mut deleting = node("e2", "medium.4x", "on-demand", "default").0;
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(world.now),
    );
    world.state.apply(deleting);
    let runnable = validate(&command, &world.input()).unwrap();
    assert_eq!(names(&runnable), ["e3"]);
}

/// The pod arrived and left during the wait with `consolidateAfter` 1m: the node is empty again
/// but its window started over, so it stays (upstream re-checks `Consolidatable`).
#[test]
fn an_emptiness_command_drops_a_node_whose_consolidate_after_restarted() {
    let (mut world, command) = three_empty();
    world.state.apply(pool(
        "default",
        &["on-demand"],
        json!({"disruption": {"consolidateAfter": "1m", "budgets": [{"nodes": "100%"}]}}),
    ));
    let mut claim = node("e1", "small.2x", "on-demand", "default").0;
    let recent = world
        .now
        .checked_sub(jiff::SignedDuration::from_secs(5))
        .unwrap();
    claim.status.get_or_insert_default().last_pod_event_time = Some(recent.to_string());
    world.state.apply(claim);
    let runnable = validate(&command, &world.input()).unwrap();
    assert_eq!(names(&runnable), ["e2", "e3"]);
}
