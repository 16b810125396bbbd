//! Validation before execution (karpenter-core §4.11, §7.6 items 28–30).
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
        assert_eq!(validate(command, &world.input()), Ok(()));
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
