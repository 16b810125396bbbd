//! Budget rules with the numbers of spec §4.3 / §7.9 and upstream's budget tests.
#![allow(clippy::unwrap_used)] // test code

use jiff::Timestamp;
use karpenter_api::NodePool;
use karpenter_api::v1::{
    Budget, ConditionsExt, Disruption, NODECLAIM_CONDITION_INSTANCE_TERMINATING,
};
use proptest::prelude::*;

use super::*;
use crate::state::ClusterState;
use crate::state::fixtures;

use DisruptionReason::{Drifted, Empty, Underutilized};

fn at(rfc3339: &str) -> Timestamp {
    rfc3339.parse().unwrap()
}

/// 2024-01-01 is a Monday.
const MONDAY_NOON: &str = "2024-01-01T12:00:00Z";

fn budget(nodes: &str) -> Budget {
    Budget {
        nodes: nodes.into(),
        ..Budget::default()
    }
}

fn scheduled(nodes: &str, schedule: &str, duration: &str) -> Budget {
    Budget {
        schedule: Some(schedule.into()),
        duration: Some(duration.into()),
        ..budget(nodes)
    }
}

fn for_reasons(mut budget: Budget, reasons: &[DisruptionReason]) -> Budget {
    budget.reasons = Some(reasons.iter().map(|r| r.as_str().to_string()).collect());
    budget
}

fn pool(name: &str, budgets: Option<Vec<Budget>>) -> NodePool {
    let mut pool = fixtures::nodepool(name);
    pool.spec.disruption = Some(Disruption {
        budgets,
        ..Disruption::default()
    });
    pool
}

fn nodes(nodes: u32, disrupting: u32) -> PoolNodeCount {
    PoolNodeCount { nodes, disrupting }
}

fn allowed(budgets: Vec<Budget>, reason: DisruptionReason, count: PoolNodeCount, now: &str) -> u32 {
    BudgetAllowance::evaluate(&pool("default", Some(budgets)), reason, count, at(now)).allowed
}

#[test]
fn default_budget_is_ten_percent_rounded_up() {
    let default_pool = pool("default", None);
    let allowance = BudgetAllowance::evaluate(&default_pool, Empty, nodes(25, 0), at(MONDAY_NOON));
    assert_eq!(allowance.allowed, 3, "10% of 25 = 2.5 rounds up");
    assert_eq!(allowance.binding.unwrap().budget.nodes, "10%");
    let one = BudgetAllowance::evaluate(&default_pool, Empty, nodes(1, 0), at(MONDAY_NOON));
    assert_eq!(one.allowed, 1, "10% of 1 node still allows 1");
    let none = BudgetAllowance::evaluate(&default_pool, Empty, nodes(0, 0), at(MONDAY_NOON));
    assert_eq!(none.allowed, 0, "an empty pool allows nothing");
}

#[test]
fn thirty_percent_of_ten_nodes_allows_three() {
    for reason in DisruptionReason::ALL {
        assert_eq!(
            allowed(vec![budget("30%")], reason, nodes(10, 0), MONDAY_NOON),
            3
        );
    }
    assert_eq!(
        allowed(vec![budget("100%")], Empty, nodes(10, 0), MONDAY_NOON),
        10
    );
    assert_eq!(
        allowed(vec![budget("0%")], Empty, nodes(10, 0), MONDAY_NOON),
        0
    );
}

#[test]
fn nodes_zero_blocks_every_reason() {
    for reason in DisruptionReason::ALL {
        assert_eq!(
            allowed(vec![budget("0")], reason, nodes(10, 0), MONDAY_NOON),
            0
        );
    }
}

#[test]
fn only_a_budget_allowing_nothing_for_a_pool_with_nodes_blocks_all() {
    let evaluate = |budgets: Vec<Budget>, count: PoolNodeCount| {
        BudgetAllowance::evaluate(&pool("p", Some(budgets)), Empty, count, at(MONDAY_NOON))
    };
    assert!(evaluate(vec![budget("0")], nodes(3, 0)).blocks_all());
    assert!(evaluate(vec![budget("0%")], nodes(3, 0)).blocks_all());
    assert!(evaluate(vec![budget("not-a-number")], nodes(3, 0)).blocks_all());
    // Nothing to disrupt, or nodes in flight using the budget up: not a blocking budget.
    assert!(!evaluate(vec![budget("0")], nodes(0, 0)).blocks_all());
    assert!(!evaluate(vec![budget("1")], nodes(3, 1)).blocks_all());
    assert!(!evaluate(vec![for_reasons(budget("0"), &[Drifted])], nodes(3, 0)).blocks_all());
}

#[test]
fn minimum_over_active_budgets_per_reason() {
    let budgets = vec![
        budget("5"),
        budget("30%"),
        for_reasons(budget("2"), &[Drifted]),
        for_reasons(budget("1"), &[Underutilized, Empty]),
    ];
    assert_eq!(
        allowed(budgets.clone(), Drifted, nodes(20, 0), MONDAY_NOON),
        2
    );
    assert_eq!(
        allowed(budgets.clone(), Empty, nodes(20, 0), MONDAY_NOON),
        1
    );
    assert_eq!(
        allowed(budgets[..2].to_vec(), Empty, nodes(20, 0), MONDAY_NOON),
        5
    );
    assert_eq!(
        allowed(budgets[..2].to_vec(), Empty, nodes(10, 0), MONDAY_NOON),
        3
    );
}

#[test]
fn reason_scoped_budget_leaves_other_reasons_unlimited() {
    let only_drift = vec![for_reasons(budget("0"), &[Drifted])];
    assert_eq!(
        allowed(only_drift.clone(), Drifted, nodes(10, 0), MONDAY_NOON),
        0
    );
    let empty = BudgetAllowance::evaluate(
        &pool("default", Some(only_drift)),
        Empty,
        nodes(10, 0),
        at(MONDAY_NOON),
    );
    assert!(empty.is_unlimited());
    assert_eq!(empty.allowed, u32::MAX);
}

#[test]
fn schedule_window_is_open_from_start_until_just_before_start_plus_duration() {
    let weekdays = vec![scheduled("0", "0 9 * * mon-fri", "8h")];
    let at_time = |t: &str| allowed(weekdays.clone(), Drifted, nodes(10, 0), t);
    assert_eq!(
        at_time("2024-01-01T08:59:59Z"),
        u32::MAX,
        "before the start"
    );
    assert_eq!(at_time("2024-01-01T09:00:00Z"), 0, "exactly at the start");
    assert_eq!(at_time("2024-01-01T16:59:59Z"), 0, "inside the window");
    assert_eq!(
        at_time("2024-01-01T17:00:00Z"),
        u32::MAX,
        "exactly at start + duration"
    );
    assert_eq!(
        at_time("2024-01-06T10:00:00Z"),
        u32::MAX,
        "Saturday: no start"
    );
}

#[test]
fn schedule_is_read_in_utc_and_accepts_macros() {
    // 23:30 in UTC-05:00 is 04:30 UTC the next day: inside a 00:00 UTC + 5h window.
    let daily = vec![scheduled("0", "@daily", "5h")];
    let now: Timestamp = "2024-01-01T23:30:00-05:00".parse().unwrap();
    let allowance =
        BudgetAllowance::evaluate(&pool("default", Some(daily)), Empty, nodes(10, 0), now);
    assert_eq!(allowance.allowed, 0);
    let midnight = vec![scheduled("0", "@midnight", "1h")];
    assert_eq!(
        allowed(
            midnight.clone(),
            Empty,
            nodes(10, 0),
            "2024-01-02T00:59:00Z"
        ),
        0
    );
    assert_eq!(
        allowed(midnight, Empty, nodes(10, 0), "2024-01-02T01:00:00Z"),
        u32::MAX
    );
}

#[test]
fn duration_longer_than_recurrence_keeps_the_budget_active() {
    let hourly = vec![scheduled("1", "@hourly", "2h")];
    assert_eq!(
        allowed(hourly, Empty, nodes(10, 0), "2024-01-01T09:59:59Z"),
        1
    );
}

#[test]
fn an_active_scheduled_budget_tightens_an_always_active_one() {
    let budgets = vec![budget("50%"), scheduled("1", "0 0 * * *", "1h")];
    assert_eq!(
        allowed(budgets.clone(), Empty, nodes(10, 0), "2024-01-01T00:30:00Z"),
        1
    );
    assert_eq!(allowed(budgets, Empty, nodes(10, 0), MONDAY_NOON), 5);
}

#[test]
fn disrupting_nodes_are_subtracted_and_the_result_floored_at_zero() {
    assert_eq!(
        allowed(vec![budget("30%")], Drifted, nodes(10, 1), MONDAY_NOON),
        2
    );
    assert_eq!(
        allowed(vec![budget("3")], Drifted, nodes(10, 3), MONDAY_NOON),
        0
    );
    assert_eq!(
        allowed(vec![budget("3")], Drifted, nodes(10, 7), MONDAY_NOON),
        0
    );
}

#[test]
fn an_invalid_budget_fails_closed_for_every_reason() {
    let budgets = vec![
        budget("5"),
        for_reasons(scheduled("1", "* * *", "1h"), &[Drifted]),
    ];
    for reason in DisruptionReason::ALL {
        let allowance = BudgetAllowance::evaluate(
            &pool("default", Some(budgets.clone())),
            reason,
            nodes(10, 0),
            at(MONDAY_NOON),
        );
        assert_eq!(allowance.allowed, 0, "{reason}");
        assert!(
            matches!(allowance.errors[..], [BudgetError::InvalidSchedule { .. }]),
            "{:?}",
            allowance.errors
        );
        assert!(
            allowance.to_string().contains("invalid disruption budget"),
            "{allowance}"
        );
    }
    assert_eq!(
        allowed(vec![budget("ten")], Empty, nodes(10, 0), MONDAY_NOON),
        0
    );
}

#[test]
fn nodes_of_an_inactive_budget_are_not_read() {
    // Upstream only parses `nodes` once the schedule says the budget is active.
    let budgets = vec![scheduled("ten", "0 9 * * *", "1h")];
    assert_eq!(
        allowed(budgets.clone(), Empty, nodes(10, 0), MONDAY_NOON),
        u32::MAX
    );
    assert_eq!(
        allowed(budgets, Empty, nodes(10, 0), "2024-01-01T09:30:00Z"),
        0
    );
}

#[test]
fn explanation_names_the_binding_budget() {
    let explain = |budgets: Vec<Budget>, reason, count, now: &str| {
        BudgetAllowance::evaluate(&pool("default", Some(budgets)), reason, count, at(now))
            .to_string()
    };
    assert_eq!(
        explain(
            vec![budget("5"), scheduled("0", "0 9 * * mon-fri", "8h")],
            Drifted,
            nodes(10, 0),
            "2024-01-01T10:00:00Z"
        ),
        "budget \"nodes: 0\" of NodePool default (reason Drifted, schedule \"0 9 * * mon-fri\" for 8h) allows 0 disruptions now"
    );
    assert_eq!(
        explain(vec![budget("10%")], Empty, nodes(25, 2), MONDAY_NOON),
        "budget \"nodes: 10%\" of NodePool default (reason Empty) allows 1 disruption now \
         (10% of 25 nodes rounds up to 3, minus 2 already disrupting)"
    );
    assert_eq!(
        explain(vec![budget("4")], Underutilized, nodes(25, 1), MONDAY_NOON),
        "budget \"nodes: 4\" of NodePool default (reason Underutilized) allows 3 disruptions now \
         (4 minus 1 already disrupting)"
    );
    assert_eq!(
        explain(
            vec![for_reasons(budget("0"), &[Drifted])],
            Empty,
            nodes(3, 0),
            MONDAY_NOON
        ),
        "no active budget of NodePool default limits reason Empty now: disruptions are unlimited"
    );
}

/// A state node: managed, initialized and Ready unless the test changes it.
fn managed(state_objects: &mut Objects, name: &str, pool: &str) {
    let provider_id = format!("aws:///zone/{name}");
    state_objects.claims.push(fixtures::nodeclaim(
        &format!("claim-{name}"),
        pool,
        Some(&provider_id),
        "4",
    ));
    state_objects
        .nodes
        .push(fixtures::node(name, Some(pool), &provider_id, "4"));
}

#[derive(Default)]
struct Objects {
    claims: Vec<karpenter_api::NodeClaim>,
    nodes: Vec<k8s_openapi::api::core::v1::Node>,
}

#[test]
fn mapping_counts_nodes_and_disrupting_nodes_as_upstream() {
    let mut objects = Objects::default();
    for name in ["n1", "n2", "n3", "n4", "n5", "n6", "not-ready", "deleting"] {
        managed(&mut objects, name, "default");
    }
    // Counted and disrupting: Node not Ready; NodeClaim with a deletion timestamp.
    let not_ready = objects
        .nodes
        .iter_mut()
        .find(|n| n.metadata.name.as_deref() == Some("not-ready"));
    not_ready
        .unwrap()
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "False".into();
    let deleting = objects
        .claims
        .iter_mut()
        .find(|c| c.metadata.name.as_deref() == Some("claim-deleting"));
    deleting.unwrap().metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(MONDAY_NOON)),
    );
    // Not counted: uninitialized, instance terminating, unmanaged, in flight.
    managed(&mut objects, "uninitialized", "default");
    objects
        .nodes
        .last_mut()
        .unwrap()
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("karpenter.sh/initialized");
    managed(&mut objects, "terminating", "default");
    objects
        .claims
        .last_mut()
        .unwrap()
        .status
        .as_mut()
        .unwrap()
        .set_condition(
            NODECLAIM_CONDITION_INSTANCE_TERMINATING,
            "True",
            "InstanceTerminating",
            "",
            MONDAY_NOON,
            None,
        );
    objects.nodes.push(fixtures::node(
        "unmanaged",
        Some("default"),
        "aws:///zone/unmanaged",
        "4",
    ));
    objects
        .claims
        .push(fixtures::nodeclaim("in-flight", "default", None, "4"));
    // Another pool with its own budget and no nodes.
    let pools = vec![
        pool("default", Some(vec![budget("75%")])),
        pool("idle", Some(vec![budget("5")])),
    ];
    let mut state = ClusterState::from_objects(pools, objects.claims, objects.nodes, Vec::new());
    // Counted and disrupting: marked for deletion by Karpenter; in a disruption command.
    state.mark_for_deletion("n5");
    state.mark_being_disrupted("n6");

    let counts = PoolNodeCount::by_nodepool(&state);
    assert_eq!(counts["default"], nodes(8, 4));
    let mut mapping = BudgetMapping::build(&state, Drifted, at(MONDAY_NOON));
    assert_eq!(mapping.reason(), Drifted);
    // ceil(75% of 8) = 6, minus 4 disrupting.
    assert_eq!(mapping.allowed("default"), 2);
    assert_eq!(
        mapping.allowed("idle"),
        5,
        "a count does not depend on the pool's size"
    );
    assert_eq!(mapping.allowed("unknown"), 0);
    assert!(mapping.allowance("unknown").is_none());
    assert_eq!(mapping.iter().count(), 2);

    assert!(mapping.take("default"));
    assert!(mapping.take("default"));
    assert!(!mapping.take("default"), "the budget is used up");
    assert_eq!(mapping.allowed("default"), 0);
    assert!(!mapping.take("unknown"));
}

#[test]
fn unlimited_allowance_is_not_used_up() {
    let pools = vec![pool(
        "default",
        Some(vec![for_reasons(budget("0"), &[Drifted])]),
    )];
    let state = ClusterState::from_objects(pools, Vec::new(), Vec::new(), Vec::new());
    let mut mapping = BudgetMapping::build(&state, Empty, at(MONDAY_NOON));
    for _ in 0..3 {
        assert!(mapping.take("default"));
    }
    assert_eq!(mapping.allowed("default"), u32::MAX);
}

fn arb_budget() -> impl Strategy<Value = Budget> {
    let nodes = prop_oneof![
        (0u32..20).prop_map(|n| n.to_string()),
        (0u32..=100).prop_map(|p| format!("{p}%")),
    ];
    let schedule = proptest::option::of((
        prop::sample::select(vec![
            "0 9 * * mon-fri",
            "@daily",
            "@hourly",
            "*/15 * * * *",
            "30 2 1 * *",
            "0 0 * * 0",
        ]),
        prop::sample::select(vec!["1h", "30m", "8h", "2h30m", "24h"]),
    ));
    let reasons = proptest::option::of(prop::sample::subsequence(
        DisruptionReason::ALL.to_vec(),
        1..=3,
    ));
    (nodes, schedule, reasons).prop_map(|(nodes, schedule, reasons)| Budget {
        nodes,
        schedule: schedule.map(|(s, _)| s.to_string()),
        duration: schedule.map(|(_, d)| d.to_string()),
        reasons: reasons.map(|r| r.iter().map(|r| r.as_str().to_string()).collect()),
    })
}

proptest! {
    #[test]
    fn allowed_never_exceeds_an_active_budget(
        budgets in prop::collection::vec(arb_budget(), 0..5),
        reason in prop::sample::select(DisruptionReason::ALL.to_vec()),
        num_nodes in 0u32..200,
        disrupting_share in 0u32..=100,
        // Any minute of 2024.
        minute in 0i64..(366 * 24 * 60),
    ) {
        let disrupting = num_nodes * disrupting_share / 100;
        let now = at("2024-01-01T00:00:00Z") + jiff::SignedDuration::from_mins(minute);
        let pool = pool("default", Some(budgets.clone()));
        let allowance = BudgetAllowance::evaluate(&pool, reason, nodes(num_nodes, disrupting), now);
        prop_assert!(allowance.errors.is_empty(), "{:?}", allowance.errors);
        let mut tightest = None::<u32>;
        for budget in budgets.iter().filter(|b| b.applies_to(reason.as_str())) {
            if budget.is_active(now).unwrap() {
                let limit = u32::try_from(parse_budget_nodes(&budget.nodes, num_nodes).unwrap()).unwrap();
                prop_assert!(allowance.allowed <= limit, "{allowance}");
                prop_assert!(allowance.allowed.saturating_add(disrupting) <= limit || allowance.allowed == 0);
                tightest = Some(tightest.map_or(limit, |t| t.min(limit)));
            }
        }
        match tightest {
            Some(limit) => prop_assert_eq!(allowance.allowed, limit.saturating_sub(disrupting)),
            None => prop_assert!(allowance.is_unlimited()),
        }
    }
}
