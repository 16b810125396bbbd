//! Spot rebalance replacement: the marked node is drifted, replaced within the drift budgets,
//! and its replacement can land anywhere but its spot pool.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use karpenter_api::well_known::{CAPACITY_TYPE_ON_DEMAND, NODEPOOL_LABEL};
use serde_json::json;

use super::*;
use crate::disruption::budgets::DisruptionReason;
use crate::disruption::candidates::BlockReason;
use crate::disruption::command::{Decision, DriftContext, Method, ProviderDrift};
use crate::disruption::testkit::{World, ZONE, instance_type, node, pod, pool, t0};
use crate::disruption::{decide, drifted};
use crate::instance_type::Offering;

const OTHER_ZONE: &str = "test-1b";

fn marked(
    mut pair: (NodeClaim, k8s_openapi::api::core::v1::Node),
) -> (NodeClaim, k8s_openapi::api::core::v1::Node) {
    pair.0.metadata.annotations.get_or_insert_default().insert(
        SPOT_REBALANCE_RECOMMENDATION_ANNOTATION.into(),
        "2024-01-01T00:30:00Z".into(),
    );
    pair
}

/// Whether `claim`'s requirements admit launching `instance_type` in `zone` as `capacity_type`.
fn admits(claim: &NodeClaim, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
    let value = |key: &str| match key {
        INSTANCE_TYPE_LABEL => instance_type,
        ZONE_LABEL => zone,
        CAPACITY_TYPE_LABEL => capacity_type,
        _ => "",
    };
    claim.spec.requirements.iter().all(|r| {
        if ![INSTANCE_TYPE_LABEL, ZONE_LABEL, CAPACITY_TYPE_LABEL].contains(&r.key.as_str()) {
            return true;
        }
        Requirement::from_values(&r.key, &r.operator, &r.values)
            .unwrap()
            .has(&value(&r.key).to_string())
    })
}

fn no_context(drift: &ProviderDrift) -> DriftContext<'_> {
    DriftContext {
        provider_drift: drift,
        instance_types: None,
        now: t0(),
    }
}

#[test]
fn only_a_marked_spot_node_is_drifted_by_a_recommendation() {
    let pool = pool("default", &["spot", "on-demand"], json!({}));
    let none = ProviderDrift::new();
    let (claim, _) = node("a", "medium.4x", "spot", "default");
    assert_eq!(
        drifted(&claim, &pool, no_context(&none)),
        None,
        "not marked"
    );
    let (claim, _) = marked(node("a", "medium.4x", "spot", "default"));
    assert_eq!(
        drifted(&claim, &pool, no_context(&none)).as_deref(),
        Some(SPOT_REBALANCE_RECOMMENDED)
    );
    let (on_demand, _) = marked(node("a", "medium.4x", CAPACITY_TYPE_ON_DEMAND, "default"));
    assert_eq!(
        drifted(&on_demand, &pool, no_context(&none)),
        None,
        "an on-demand node has no spot pool at risk"
    );
    // Another drift reason wins the condition; the node is replaced either way.
    let provider = ProviderDrift::from([("a-claim".to_string(), "AMIDrift".to_string())]);
    assert_eq!(
        drifted(&claim, &pool, no_context(&provider)).as_deref(),
        Some("AMIDrift")
    );
}

fn spot_world(budget: &str) -> World {
    let pools = vec![pool(
        "default",
        &["spot"],
        json!({"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": budget}]}}),
    )];
    World::new(
        pools,
        vec![
            marked(node("at-risk", "medium.4x", "spot", "default")),
            node("other", "medium.4x", "spot", "default"),
        ],
        vec![pod("p1", "at-risk", "3"), pod("p2", "other", "3")],
    )
}

#[test]
fn a_recommended_node_is_replaced_as_drift_away_from_its_spot_pool() {
    let world = spot_world("100%");
    let pass = decide(&world.input());
    assert_eq!(pass.method, Some(Method::Drift));
    let [command] = pass.commands.as_slice() else {
        panic!("one command: {:?}", pass.commands);
    };
    assert_eq!(command.reason, DisruptionReason::Drifted);
    assert_eq!(command.candidates[0].name, "at-risk");
    assert_eq!(
        command.decision(),
        Decision::Replace,
        "3 cpu fit nowhere else"
    );
    let [replacement] = command.replacements.as_slice() else {
        panic!("one replacement: {:?}", command.replacements);
    };
    assert!(
        !admits(replacement, "medium.4x", ZONE, "spot"),
        "{:?}",
        replacement.spec.requirements
    );
    assert!(admits(replacement, "big.8x", ZONE, "spot"));
    assert_eq!(
        replacement.labels().get(NODEPOOL_LABEL).map(String::as_str),
        Some("default")
    );
}

#[test]
fn a_recommended_node_waits_for_the_drift_budget() {
    let world = spot_world("0");
    let input = world.input();
    let mut blocked = std::collections::BTreeMap::new();
    let commands = crate::disruption::drift::drift(&input, &mut blocked);
    assert!(commands.is_empty(), "{commands:?}");
    let blocked = &blocked["at-risk"];
    assert!(
        matches!(&blocked.reason, BlockReason::BudgetExhausted { reason, .. } if reason == "Drifted"),
        "{blocked:?}"
    );
}

#[test]
fn an_only_instance_type_moves_to_on_demand_when_spot_has_no_other_zone() {
    // The pool allows one type, spot or on-demand, in one zone: the replacement is on-demand.
    let pools = vec![pool(
        "default",
        &["spot", "on-demand"],
        json!({"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}}),
    )];
    let world = World::new(
        pools,
        vec![marked(node("at-risk", "medium.4x", "spot", "default"))],
        vec![pod("p1", "at-risk", "3")],
    )
    .with_types(&[Arc::new(instance_type("medium.4x", "4", 0.2))]);
    let pass = decide(&world.input());
    let [command] = pass.commands.as_slice() else {
        panic!("one command: {:?}", pass.blocked);
    };
    let replacement = &command.replacements[0];
    assert!(!admits(replacement, "medium.4x", ZONE, "spot"));
    assert!(admits(replacement, "medium.4x", ZONE, "on-demand"));
}

fn two_zone_type() -> InstanceType {
    let mut t = instance_type("medium.4x", "4", 0.2);
    t.offerings.push(Offering {
        zone: OTHER_ZONE.into(),
        capacity_type: "spot".into(),
        price: 0.06,
        available: true,
        ..Offering::default()
    });
    t
}

fn claim_with(requirements: serde_json::Value) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "replacement"},
        "spec": {"requirements": requirements,
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap()
}

fn at_risk() -> SpotPool {
    SpotPool {
        instance_type: "medium.4x".into(),
        zone: ZONE.into(),
    }
}

#[test]
fn the_type_leaves_the_list_when_others_remain_and_min_values_hold() {
    let types = [Arc::new(two_zone_type())];
    let mut claim = claim_with(json!([
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": ["medium.4x", "big.8x"]},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot"]}
    ]));
    at_risk().exclude_from(&mut claim, &types);
    assert_eq!(claim.spec.requirements[0].values, ["big.8x"]);
    assert!(admits(&claim, "big.8x", ZONE, "spot"));

    // minValues 2 needs both types: the zone goes instead (the type has spot in another zone).
    let mut claim = claim_with(json!([
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": ["medium.4x", "big.8x"], "minValues": 2},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot"]}
    ]));
    at_risk().exclude_from(&mut claim, &types);
    assert_eq!(claim.spec.requirements[0].values.len(), 2);
    assert!(!admits(&claim, "medium.4x", ZONE, "spot"));
    assert!(admits(&claim, "medium.4x", OTHER_ZONE, "spot"));
}

#[test]
fn an_only_type_keeps_spot_in_another_allowed_zone() {
    let types = [Arc::new(two_zone_type())];
    let mut claim = claim_with(json!([
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": ["medium.4x"]},
        {"key": ZONE_LABEL, "operator": "In", "values": [ZONE, OTHER_ZONE]},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot", "on-demand"]}
    ]));
    at_risk().exclude_from(&mut claim, &types);
    assert!(!admits(&claim, "medium.4x", ZONE, "spot"));
    assert!(admits(&claim, "medium.4x", OTHER_ZONE, "spot"));

    // The other zone is not allowed: spot goes.
    let mut claim = claim_with(json!([
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": ["medium.4x"]},
        {"key": ZONE_LABEL, "operator": "NotIn", "values": [OTHER_ZONE]},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot", "on-demand"]}
    ]));
    at_risk().exclude_from(&mut claim, &types);
    assert!(!admits(&claim, "medium.4x", ZONE, "spot"));
    assert!(admits(&claim, "medium.4x", ZONE, "on-demand"));
}

#[test]
fn requirements_that_exclude_the_pool_already_are_left_alone() {
    let types = [Arc::new(two_zone_type())];
    let requirements = json!([
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": ["medium.4x"]},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]}
    ]);
    let mut claim = claim_with(requirements.clone());
    at_risk().exclude_from(&mut claim, &types);
    assert_eq!(
        claim.spec.requirements,
        claim_with(requirements).spec.requirements
    );
}

#[test]
fn hiding_a_spot_pool_leaves_the_type_s_other_offerings() {
    let shared = Arc::new(instance_type("big.8x", "8", 0.4));
    let types = vec![Arc::new(two_zone_type()), Arc::clone(&shared)];
    let hidden = at_risk().hide_in(&types);
    let available: Vec<(&str, &str, bool)> = hidden[0]
        .offerings
        .iter()
        .map(|o| (o.zone.as_str(), o.capacity_type.as_str(), o.available))
        .collect();
    assert_eq!(
        available,
        [
            (ZONE, "on-demand", true),
            (ZONE, "spot", false),
            (OTHER_ZONE, "spot", true)
        ]
    );
    assert!(
        Arc::ptr_eq(&hidden[1], &shared),
        "other types are not copied"
    );
}
