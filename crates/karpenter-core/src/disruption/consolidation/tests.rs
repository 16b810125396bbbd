//! Consolidation behaviours of karpenter-core §7.6 (upstream consolidation_test.go).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::json;

use karpenter_api::NodePool;

use super::*;
use crate::disruption::command::Decision;
use crate::disruption::testkit::{World, node, pod, pool};
use crate::instance_type::InstanceType;

fn on_demand() -> Vec<NodePool> {
    vec![pool("default", &["on-demand"], json!({}))]
}

fn single(world: &World) -> (Vec<Command>, BTreeMap<String, Rejection>) {
    let input = world.input();
    let mut blocked = BTreeMap::new();
    let commands = single_node(&input, &mut blocked);
    (commands, blocked)
}

fn reason_of(blocked: &BTreeMap<String, Rejection>, node: &str) -> String {
    blocked
        .get(node)
        .map(|r| r.reason.to_string())
        .unwrap_or_else(|| panic!("{node} not blocked: {blocked:?}"))
}

fn instance_types_of(claim: &karpenter_api::NodeClaim) -> Vec<String> {
    claim
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == karpenter_api::well_known::INSTANCE_TYPE_LABEL)
        .flat_map(|r| r.values.clone())
        .collect()
}

#[test]
fn single_node_deletes_a_node_whose_pods_fit_on_the_others() {
    let world = World::new(
        on_demand(),
        vec![
            node("big", "big.8x", "on-demand", "default"),
            node("small", "small.2x", "on-demand", "default"),
        ],
        vec![pod("a", "big", "1"), pod("b", "small", "1")],
    );
    let (commands, _) = single(&world);
    assert_eq!(commands.len(), 1);
    let command = &commands[0];
    assert_eq!(command.decision(), Decision::Delete);
    // Both could go; big (0.4/h) has the best savings ratio, and its 1-cpu pod fits on small.
    assert_eq!(command.candidates[0].name, "big");
    assert!((command.savings_per_hour - 0.4).abs() < 1e-9);
}

#[test]
fn single_node_replaces_with_a_strictly_cheaper_other_instance_type() {
    let world = World::new(
        on_demand(),
        vec![node("big", "big.8x", "on-demand", "default")],
        vec![pod("a", "big", "1500m")],
    );
    let (commands, _) = single(&world);
    assert_eq!(commands.len(), 1, "expected a replace");
    let command = &commands[0];
    assert_eq!(command.decision(), Decision::Replace);
    let options = instance_types_of(&command.replacements[0]);
    assert!(!options.contains(&"big.8x".to_string()), "{options:?}");
    assert_eq!(options[0], "small.2x");
    assert!((command.savings_per_hour - 0.3).abs() < 1e-9);
}

#[test]
fn no_cheaper_replacement_is_explained_with_both_prices() {
    // 3 cpu on medium.4x: small is too small, big costs more, medium is the node's own offering
    // (the cheapest option, and not strictly cheaper).
    let world = World::new(
        on_demand(),
        vec![node("m", "medium.4x", "on-demand", "default")],
        vec![pod("a", "m", "3")],
    );
    let (commands, blocked) = single(&world);
    assert!(commands.is_empty());
    assert_eq!(
        reason_of(&blocked, "m"),
        "no cheaper replacement: cheapest option $0.2000/h >= $0.2000/h"
    );
}

#[test]
fn pods_that_would_not_fit_block_with_the_schedulers_reason() {
    let mut special = pod("a", "n", "1");
    special.spec.as_mut().unwrap().node_selector = Some(Arc::new(
        [("special".to_string(), "yes".to_string())].into(),
    ));
    let (claim, mut n) = node("n", "big.8x", "on-demand", "default");
    n.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("special".into(), "yes".into());
    let world = World::new(on_demand(), vec![(claim, n)], vec![special]);
    let (commands, blocked) = single(&world);
    assert!(commands.is_empty());
    let reason = reason_of(&blocked, "n");
    assert!(
        reason.starts_with("pods would not fit: default/a: "),
        "{reason}"
    );
}

#[test]
fn spot_to_spot_needs_the_feature_gate_then_fifteen_cheaper_options() {
    let pools = vec![pool("default", &["spot"], json!({}))];
    let mut world = World::new(
        pools,
        vec![node("s", "big.8x", "spot", "default")],
        vec![pod("a", "s", "1")],
    );
    let (commands, blocked) = single(&world);
    assert!(commands.is_empty());
    assert!(matches!(
        blocked["s"].reason,
        BlockReason::SpotToSpotDisabled
    ));
    world.options.spot_to_spot_consolidation = true;
    let (commands, blocked) = single(&world);
    assert!(commands.is_empty());
    assert_eq!(
        blocked["s"].reason,
        BlockReason::SpotToSpotTooFewOptions(2),
        "small and medium are cheaper, 15 are needed"
    );
}

#[test]
fn multi_node_spot_to_spot_needs_no_fifteen_options() {
    let pools = vec![pool("default", &["spot"], json!({}))];
    let mut world = World::new(
        pools,
        vec![
            node("s1", "medium.4x", "spot", "default"),
            node("s2", "medium.4x", "spot", "default"),
        ],
        vec![pod("a", "s1", "500m"), pod("b", "s2", "500m")],
    );
    world.options.spot_to_spot_consolidation = true;
    let input = world.input();
    let commands = multi_node(&input, &mut BTreeMap::new());
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0].candidates.len(), 2);
    assert_eq!(commands[0].decision(), Decision::Replace);
}

#[test]
fn on_demand_is_replaced_by_spot_when_the_pool_allows_both() {
    let pools = vec![pool("default", &["spot", "on-demand"], json!({}))];
    let world = World::new(
        pools,
        vec![node("od", "big.8x", "on-demand", "default")],
        vec![pod("a", "od", "1")],
    );
    let (commands, _) = single(&world);
    assert_eq!(commands.len(), 1);
    let capacity = commands[0].replacements[0]
        .spec
        .requirements
        .iter()
        .find(|r| r.key == CAPACITY_TYPE_LABEL)
        .unwrap();
    assert_eq!(capacity.values, ["spot"]);
}

#[test]
fn multi_node_merges_nodes_into_one_cheaper_node() {
    let world = World::new(
        on_demand(),
        vec![
            node("a", "medium.4x", "on-demand", "default"),
            node("b", "medium.4x", "on-demand", "default"),
            node("c", "medium.4x", "on-demand", "default"),
        ],
        vec![
            pod("pa", "a", "600m"),
            pod("pb", "b", "600m"),
            pod("pc", "c", "600m"),
        ],
    );
    let input = world.input();
    let commands = multi_node(&input, &mut BTreeMap::new());
    assert_eq!(commands.len(), 1);
    let command = &commands[0];
    assert_eq!(command.candidates.len(), 3);
    assert_eq!(command.replacements.len(), 1);
    let options = instance_types_of(&command.replacements[0]);
    assert!(!options.contains(&"medium.4x".to_string()), "{options:?}");
    assert!(command.savings_per_hour > 0.0);
}

#[test]
fn budgets_cap_multi_node_and_block_single_node() {
    let limited = pool(
        "default",
        &["on-demand"],
        json!({"disruption": {
        "consolidateAfter": "0s", "budgets": [{"nodes": "2"}]}}),
    );
    let world = World::new(
        vec![limited],
        vec![
            node("a", "medium.4x", "on-demand", "default"),
            node("b", "medium.4x", "on-demand", "default"),
            node("c", "medium.4x", "on-demand", "default"),
        ],
        vec![
            pod("pa", "a", "600m"),
            pod("pb", "b", "600m"),
            pod("pc", "c", "600m"),
        ],
    );
    let input = world.input();
    let commands = multi_node(&input, &mut BTreeMap::new());
    assert_eq!(commands[0].candidates.len(), 2, "budget nodes: 2");

    let none = pool(
        "default",
        &["on-demand"],
        json!({"disruption": {
        "consolidateAfter": "0s", "budgets": [{"nodes": "0"}]}}),
    );
    let world = World::new(
        vec![none],
        vec![node("a", "big.8x", "on-demand", "default")],
        vec![pod("pa", "a", "1")],
    );
    let (commands, blocked) = single(&world);
    assert!(commands.is_empty());
    assert!(matches!(
        blocked["a"].reason,
        BlockReason::BudgetExhausted { .. }
    ));
}

#[test]
fn consolidate_after_not_elapsed_and_when_empty_policy_are_reasons() {
    let later = pool(
        "default",
        &["on-demand"],
        json!({"disruption": {
        "consolidateAfter": "2h", "budgets": [{"nodes": "100%"}]}}),
    );
    let (claim, mut n) = node("a", "big.8x", "on-demand", "default");
    n.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        crate::disruption::testkit::t0(),
    ));
    let world = World::new(vec![later], vec![(claim, n)], vec![pod("pa", "a", "1")]);
    let (_, blocked) = single(&world);
    assert!(matches!(
        blocked["a"].reason,
        BlockReason::ConsolidatableAt(_)
    ));

    let when_empty = pool(
        "default",
        &["on-demand"],
        json!({"disruption": {
        "consolidateAfter": "0s", "consolidationPolicy": "WhenEmpty"}}),
    );
    let world = World::new(
        vec![when_empty],
        vec![node("a", "big.8x", "on-demand", "default")],
        vec![pod("pa", "a", "1")],
    );
    let (_, blocked) = single(&world);
    assert_eq!(
        reason_of(&blocked, "a"),
        "NodePool \"default\" has consolidation policy WhenEmpty, but node is not empty"
    );
}

#[test]
fn do_not_disrupt_pods_keep_their_node() {
    let mut pinned = pod("pa", "a", "1");
    pinned
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("karpenter.sh/do-not-disrupt".into(), "true".into());
    let world = World::new(
        on_demand(),
        vec![node("a", "big.8x", "on-demand", "default")],
        vec![pinned],
    );
    let (commands, blocked) = single(&world);
    assert!(commands.is_empty());
    assert!(matches!(
        blocked["a"].reason,
        BlockReason::DoNotDisruptPod { .. }
    ));
}

#[test]
fn multi_node_wont_merge_two_nodes_into_one_of_the_same_type() {
    // 1.5 + 1.5 cpu fit one medium.4x, but that is a disguised delete; big.8x is not cheaper.
    let world = World::new(
        on_demand(),
        vec![
            node("a", "medium.4x", "on-demand", "default"),
            node("b", "medium.4x", "on-demand", "default"),
        ],
        vec![pod("pa", "a", "1500m"), pod("pb", "b", "1500m")],
    );
    let input = world.input();
    assert!(multi_node(&input, &mut BTreeMap::new()).is_empty());
    // Single-node consolidation still deletes one of them: its pod fits on the other.
    let (commands, _) = single(&world);
    assert_eq!(commands[0].decision(), Decision::Delete);
}

#[test]
fn pods_are_not_moved_onto_an_uninitialized_node() {
    let (fresh_claim, mut fresh) = node("fresh", "big.8x", "on-demand", "default");
    fresh
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("karpenter.sh/initialized");
    let world = World::new(
        on_demand(),
        vec![
            (fresh_claim, fresh),
            node("old", "small.2x", "on-demand", "default"),
        ],
        vec![pod("p", "old", "1")],
    );
    let (commands, blocked) = single(&world);
    assert!(commands.is_empty(), "{commands:?}");
    assert_eq!(
        reason_of(&blocked, "old"),
        "pods would schedule against uninitialized node fresh"
    );
}

/// A pool of `capacity_types` whose template also asks for `min_values` instance types.
fn pool_with_min_values(capacity_types: &[&str], min_values: u32) -> Vec<NodePool> {
    vec![pool(
        "default",
        capacity_types,
        json!({"template": {"spec": {
            "requirements": [
                {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": capacity_types},
                {"key": karpenter_api::well_known::INSTANCE_TYPE_LABEL, "operator": "Exists",
                 "minValues": min_values}
            ],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}),
    )]
}

#[test]
fn a_price_filter_that_breaks_min_values_fails_the_replacement() {
    // A lone big node: its replacement may be small or medium (big is its own type). With
    // `minValues: 3` two cheaper options are not enough (upstream §7.6 #12); with 2 they are.
    let nodes = || vec![node("big", "big.8x", "on-demand", "default")];
    let pods = || vec![pod("a", "big", "1")];
    let world = World::new(pool_with_min_values(&["on-demand"], 3), nodes(), pods());
    let (commands, blocked) = single(&world);
    assert!(commands.is_empty(), "{commands:?}");
    assert_eq!(
        blocked["big"].reason,
        BlockReason::MinValuesAfterPriceFilter {
            kept: 2,
            min_values: 3
        }
    );
    let world = World::new(pool_with_min_values(&["on-demand"], 2), nodes(), pods());
    let (commands, blocked) = single(&world);
    assert_eq!(commands.len(), 1, "{blocked:?}");
    let mut options = instance_types_of(&commands[0].replacements[0]);
    options.sort();
    assert_eq!(options, ["medium.4x", "small.2x"]);
}

/// Twenty 4-cpu instance types `t00` … `t19`, each a cent dearer than the last.
fn twenty_types() -> Vec<std::sync::Arc<InstanceType>> {
    (0..20)
        .map(|i| {
            let price = 0.1 + 0.01 * f64::from(i);
            std::sync::Arc::new(crate::disruption::testkit::instance_type(
                &format!("t{i:02}"),
                "4",
                price,
            ))
        })
        .collect()
}

#[test]
fn spot_to_spot_keeps_the_fifteen_cheapest_options_or_what_min_values_needs() {
    // A spot node of the dearest type: 19 cheaper spot options. Single-node spot-to-spot
    // launches only among the 15 cheapest (upstream §7.6 #10–11), or max(15, minValues).
    for (min_values, kept) in [(None, 15), (Some(17), 17)] {
        let pools = match min_values {
            None => vec![pool("default", &["spot"], json!({}))],
            Some(n) => pool_with_min_values(&["spot"], n),
        };
        let mut world = World::new(
            pools,
            vec![node("s", "t19", "spot", "default")],
            vec![pod("a", "s", "1")],
        );
        world.types.insert("default".into(), twenty_types());
        world.options.spot_to_spot_consolidation = true;
        let (commands, blocked) = single(&world);
        assert_eq!(commands.len(), 1, "{blocked:?}");
        let options = instance_types_of(&commands[0].replacements[0]);
        let expected: Vec<String> = (0..kept).map(|i| format!("t{i:02}")).collect();
        let mut sorted = options.clone();
        sorted.sort();
        assert_eq!(sorted, expected, "minValues {min_values:?}");
    }
}

/// `small` in `pool`, with a pod event a minute before the pass: under any window longer than
/// that.
fn busy_small(
    pool: &str,
    world_now: jiff::Timestamp,
) -> (karpenter_api::NodeClaim, k8s_openapi::api::core::v1::Node) {
    let (mut claim, node) = node("small", "small.2x", "on-demand", pool);
    let recent = world_now
        .checked_sub(jiff::SignedDuration::from_mins(1))
        .unwrap();
    claim.status.get_or_insert_default().last_pod_event_time = Some(recent.to_string());
    (claim, node)
}

#[test]
fn moved_pods_do_not_land_on_a_node_under_its_consolidate_after_window() {
    // big's 1-cpu pod fits on small; small had a pod event a minute ago and its pool waits 30m.
    let waiting = pool(
        "default",
        &["on-demand"],
        json!({"disruption": {"consolidateAfter": "30m", "budgets": [{"nodes": "100%"}]}}),
    );
    let now = World::new(vec![], vec![], vec![]).now;
    let world = World::new(
        vec![waiting.clone()],
        vec![
            node("big", "big.8x", "on-demand", "default"),
            busy_small("default", now),
        ],
        vec![pod("a", "big", "1"), pod("b", "small", "500m")],
    );
    let (commands, blocked) = single(&world);
    assert!(matches!(
        blocked["small"].reason,
        BlockReason::ConsolidatableAt(_)
    ));
    // Not "delete big, its pod goes to small": small is no destination yet. Replacing big with
    // a cheaper node still is (the window only guards destinations).
    assert_eq!(commands.len(), 1, "{commands:?}");
    assert_eq!(commands[0].candidates[0].name, "big");
    assert_eq!(commands[0].decision(), Decision::Replace);
    assert_eq!(
        instance_types_of(&commands[0].replacements[0])[0],
        "small.2x"
    );

    // The same cluster once small's window has passed: big's pod moves there.
    let (mut claim, small) = busy_small("default", now);
    claim.status.get_or_insert_default().last_pod_event_time = None;
    let world = World::new(
        vec![waiting],
        vec![
            node("big", "big.8x", "on-demand", "default"),
            (claim, small),
        ],
        vec![pod("a", "big", "1"), pod("b", "small", "500m")],
    );
    let (commands, _) = single(&world);
    assert_eq!(commands.len(), 1, "{commands:?}");
    assert_eq!(commands[0].candidates[0].name, "big");
    assert_eq!(commands[0].decision(), Decision::Delete);
}

#[test]
fn moved_pods_may_land_on_a_node_whose_pool_never_consolidates() {
    // small's pool never consolidates: no window to wait for, so it takes big's pod at once.
    let never = pool(
        "keep",
        &["on-demand"],
        json!({"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "100%"}]}}),
    );
    let now = World::new(vec![], vec![], vec![]).now;
    let world = World::new(
        vec![pool("default", &["on-demand"], json!({})), never],
        vec![
            node("big", "big.8x", "on-demand", "default"),
            busy_small("keep", now),
        ],
        vec![pod("a", "big", "1"), pod("b", "small", "500m")],
    );
    let (commands, _) = single(&world);
    assert_eq!(commands.len(), 1, "{commands:?}");
    assert_eq!(commands[0].candidates[0].name, "big");
    assert_eq!(commands[0].decision(), Decision::Delete);
}

#[test]
fn a_replacement_planned_with_an_overlaid_price_is_annotated_and_ordered_by_it() {
    use karpenter_api::v1alpha1::{
        NodeOverlay, NodeOverlaySpec, OverlayRequirement, PRICE_OVERLAY_APPLIED_ANNOTATION,
    };
    // medium.4x at $0.05/h (a discount) is now cheaper than small.2x ($0.1/h).
    let overlay = NodeOverlay::new(
        "discount-medium",
        NodeOverlaySpec {
            requirements: vec![OverlayRequirement {
                key: karpenter_api::well_known::INSTANCE_TYPE_LABEL.into(),
                operator: "In".into(),
                values: vec!["medium.4x".into()],
            }],
            price: Some("0.05".into()),
            ..Default::default()
        },
    );
    let pools = on_demand();
    let offered = vec![(pools[0].clone(), crate::disruption::testkit::sizes())];
    let overlaid = crate::node_overlay::evaluate(&[overlay], &offered).apply_all(offered);
    let world = World::new(
        pools,
        vec![node("big", "big.8x", "on-demand", "default")],
        vec![pod("a", "big", "1500m")],
    )
    .with_types(&overlaid[0].1);
    let (commands, _) = single(&world);
    assert_eq!(commands.len(), 1, "expected a replace");
    let replacement = &commands[0].replacements[0];
    assert_eq!(instance_types_of(replacement)[0], "medium.4x");
    assert_eq!(
        replacement
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PRICE_OVERLAY_APPLIED_ANNOTATION))
            .map(String::as_str),
        Some("true")
    );
}
