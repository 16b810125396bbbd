//! Consolidation under `PackingPolicy::CostOptimal` (issue 24 part 3): M ≥ 1 replacements
//! (1 → 2 splits, N → M), the savings margin, and commands ranked by savings per disruption;
//! `Upstream` still refuses two replacements.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::disruption::command::Decision;
use crate::disruption::testkit::{World, instance_type, node, node_with_cpu, pod, pool, sizes};
use crate::instance_type::InstanceType;

/// The testkit sizes (2, 4, 8 cpu at $0.05 per cpu) plus `huge.16x`, 16 cpu at $2.00: dear
/// enough that anything else replaces it.
fn with_huge() -> Vec<Arc<InstanceType>> {
    let mut types = sizes();
    types.push(Arc::new(instance_type("huge.16x", "16", 2.0)));
    types
}

pub(super) fn world(
    nodes: Vec<(karpenter_api::NodeClaim, k8s_openapi::api::core::v1::Node)>,
    pods: Vec<crate::pod::Pod>,
    policy: PackingPolicy,
) -> World {
    let mut world = World::new(
        vec![pool("default", &["on-demand"], json!({}))],
        nodes,
        pods,
    )
    .with_types(&with_huge());
    world.scheduler.packing_policy = policy;
    world
}

fn single(world: &World) -> (Vec<Command>, BTreeMap<String, Rejection>) {
    let mut blocked = BTreeMap::new();
    let commands = single_node(&world.input(), &mut blocked);
    (commands, blocked)
}

fn first_option(claim: &karpenter_api::NodeClaim) -> String {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == karpenter_api::well_known::INSTANCE_TYPE_LABEL)
        .map(|r| r.values[0].to_string())
        .unwrap()
}

/// A `huge.16x` node holding two 6-cpu pods: no type but its own holds both, two `big.8x`
/// ($0.80) hold one each.
fn two_big_pods(policy: PackingPolicy) -> World {
    world(
        vec![node_with_cpu("h", "huge.16x", "16", "on-demand", "default")],
        vec![pod("a", "h", "6"), pod("b", "h", "6")],
        policy,
    )
}

/// A pod of `cpu` on `node` that no other `app: apart` pod may share a node with.
fn apart(name: &str, node: &str, cpu: &str) -> crate::pod::Pod {
    let mut p = pod(name, node, cpu);
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("app".into(), "apart".into());
    let spec = p.spec.as_mut().unwrap();
    spec.affinity = Some(
        serde_json::from_value(json!({"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"app": "apart"}}}]}}))
        .unwrap(),
    );
    p
}

#[test]
fn upstream_still_refuses_two_replacements() {
    // Two pods that may not share a node: any simulation launches two nodes for them.
    let nodes = || vec![node_with_cpu("h", "huge.16x", "16", "on-demand", "default")];
    let pods = || vec![apart("a", "h", "1"), apart("b", "h", "1")];
    let upstream = world(nodes(), pods(), PackingPolicy::Upstream);
    let input = upstream.input();
    let found = consolidation_candidates(&input, &mut BTreeMap::new());
    let simulator = Simulator::for_consolidation(&input);
    let refused = compute(
        &input,
        &simulator,
        &[&found[0]],
        Method::SingleNodeConsolidation,
    );
    assert_eq!(refused.unwrap_err(), BlockReason::TooManyReplacements(2));
    // CostOptimal launches the two small nodes.
    let cost_optimal = world(nodes(), pods(), PackingPolicy::CostOptimal);
    let (commands, blocked) = single(&cost_optimal);
    assert_eq!(commands.len(), 1, "{blocked:?}");
    assert_eq!(commands[0].replacements.len(), 2);
    assert!((commands[0].savings_per_hour - 1.8).abs() < 1e-9);
}

#[test]
fn cost_optimal_splits_one_node_into_two_cheaper_ones() {
    let (commands, blocked) = single(&two_big_pods(PackingPolicy::CostOptimal));
    assert_eq!(commands.len(), 1, "{blocked:?}");
    let command = &commands[0];
    assert_eq!(command.decision(), Decision::Replace);
    assert_eq!(command.replacements.len(), 2);
    for replacement in &command.replacements {
        assert_eq!(first_option(replacement), "big.8x");
    }
    assert!((command.savings_per_hour - 1.2).abs() < 1e-9, "{command:?}");
}

#[test]
fn a_split_may_pick_any_options_and_still_save_the_margin() {
    // Each replacement keeps options up to its cheapest plus an equal share of the slack, so the
    // dearest options together still cost less than the node minus the margin.
    let (commands, _) = single(&two_big_pods(PackingPolicy::CostOptimal));
    let command = &commands[0];
    let prices: BTreeMap<String, f64> = with_huge()
        .iter()
        .map(|t| (t.name.clone(), t.offerings[0].price))
        .collect();
    let dearest: f64 = command
        .replacements
        .iter()
        .map(|r| {
            r.spec
                .requirements
                .iter()
                .filter(|q| q.key == karpenter_api::well_known::INSTANCE_TYPE_LABEL)
                .flat_map(|q| q.values.iter().map(|v| prices[v]))
                .fold(0.0, f64::max)
        })
        .sum();
    assert!(dearest < 2.0 * (1.0 - MIN_SAVINGS_FRACTION), "{dearest}");
}

#[test]
fn cost_optimal_replaces_n_nodes_by_m_cheaper_ones() {
    // Three huge nodes with a 4-cpu pod each: 12 cpu, which one big.8x (8) cannot hold, so
    // upstream's one-replacement rule finds nothing for all three together; CostOptimal
    // replaces the three by two nodes.
    let nodes = ["h1", "h2", "h3"]
        .iter()
        .map(|n| node_with_cpu(n, "huge.16x", "4", "on-demand", "default"))
        .collect();
    let pods = vec![
        pod("a", "h1", "4"),
        pod("b", "h2", "4"),
        pod("c", "h3", "4"),
    ];
    let upstream = world(nodes, pods, PackingPolicy::Upstream);
    let mut blocked = BTreeMap::new();
    let commands = multi_node(&upstream.input(), &mut blocked);
    assert!(
        commands.iter().all(|c| c.candidates.len() < 3),
        "upstream needs 2 nodes for 3: {commands:?}"
    );
    let mut cost_optimal = upstream;
    cost_optimal.scheduler.packing_policy = PackingPolicy::CostOptimal;
    let commands = multi_node(&cost_optimal.input(), &mut BTreeMap::new());
    assert_eq!(commands.len(), 1);
    let command = &commands[0];
    assert_eq!(command.candidates.len(), 3);
    assert_eq!(command.replacements.len(), 2, "{command:?}");
    assert!(command.savings_per_hour > 6.0 - 0.61, "{command:?}");
}

/// A `big.8x` node holding a 4-cpu and a 1.5-cpu pod, under `CostOptimal`, over `types`.
fn big_node_with_two_pods(types: &[Arc<InstanceType>]) -> World {
    let mut world = World::new(
        vec![pool("default", &["on-demand"], json!({}))],
        vec![node("b", "big.8x", "on-demand", "default")],
        vec![pod("a", "b", "4"), pod("c", "b", "1500m")],
    )
    .with_types(types);
    world.scheduler.packing_policy = PackingPolicy::CostOptimal;
    world
}

#[test]
fn a_saving_below_the_margin_is_refused_and_explained() {
    // big.8x at $0.40 holding 4 cpu and 1.5 cpu: medium.4x + small.2x cost $0.30 (saves 25 %);
    // odd.6x alone ($0.295) saves 26 %.
    let mut types = sizes();
    types.push(Arc::new(instance_type("odd.6x", "6", 0.295)));
    let mut world = big_node_with_two_pods(&types);
    let (commands, _) = single(&world);
    assert_eq!(commands.len(), 1, "odd.6x alone saves 26 %");
    // The node barely dearer than one replacement: upstream's rule (one replacement, strictly
    // cheaper) accepts it, so the default does too (the guard of issue 35).
    let mut types = sizes();
    types.retain(|t| t.name != "big.8x");
    types.push(Arc::new(instance_type("big.8x", "8", 0.30)));
    types.push(Arc::new(instance_type("odd.6x", "6", 0.295)));
    world = world.with_types(&types);
    let (commands, blocked) = single(&world);
    assert_eq!(commands.len(), 1, "{blocked:?}");
    assert_eq!(commands[0].replacements.len(), 1);
    assert!((commands[0].savings_per_hour - 0.005).abs() < 1e-9);
    // Only a split saves anything, and less than 2 %: refused, and said so.
    let mut types = sizes();
    types.retain(|t| t.name != "big.8x");
    types.push(Arc::new(instance_type("big.8x", "8", 0.303)));
    world = world.with_types(&types);
    let (commands, blocked) = single(&world);
    assert!(commands.is_empty(), "{commands:?}");
    let reason = blocked["b"].reason.to_string();
    assert!(reason.starts_with("no cheaper replacement"), "{reason}");
}

#[test]
fn a_split_must_save_the_margin_again_for_every_node_it_adds() {
    // big.8x holding two 3-cpu pods; only two medium.4x ($0.40) are cheaper: one node becomes
    // two, so the split must save 2 × 2 %.
    let world_at = |price: f64| {
        let mut types = sizes();
        types.retain(|t| t.name != "big.8x");
        types.push(Arc::new(instance_type("big.8x", "8", price)));
        let mut world = World::new(
            vec![pool("default", &["on-demand"], json!({}))],
            vec![node("b", "big.8x", "on-demand", "default")],
            vec![pod("a", "b", "3"), pod("c", "b", "3")],
        )
        .with_types(&types);
        world.scheduler.packing_policy = PackingPolicy::CostOptimal;
        world
    };
    // Saves 3 %: enough for a replacement that adds no node, not for a split.
    let (commands, blocked) = single(&world_at(0.40 / 0.97));
    assert!(commands.is_empty(), "{commands:?}");
    let reason = blocked["b"].reason.to_string();
    assert!(reason.starts_with("no cheaper replacement"), "{reason}");
    // Saves 5 %: the split pays for the node it adds.
    let (commands, blocked) = single(&world_at(0.40 / 0.95));
    assert_eq!(commands.len(), 1, "{blocked:?}");
    assert_eq!(commands[0].replacements.len(), 2);
    // The margin grows with the nodes added, never with the nodes removed.
    let allowance = Allowance {
        max_replacements: usize::MAX,
        margin: 0.02,
    };
    assert!((allowance.margin_for(1, 4) - 0.08).abs() < 1e-12);
    assert!((allowance.margin_for(3, 2) - 0.02).abs() < 1e-12);
    assert!((allowance.margin_for(2, 2) - 0.02).abs() < 1e-12);
    // Per added node the margin of an average candidate: ten nodes split in two in one
    // multi-node command owe what ten single-node splits owe (4 % each), not 22 %.
    assert!((allowance.margin_for(10, 20) - 0.04).abs() < 1e-12);
    assert!((allowance.margin_for(2, 3) - 0.03).abs() < 1e-12);
}

#[test]
fn cost_optimal_picks_the_best_savings_per_disruption_not_the_first_candidate() {
    // Both nodes are huge.16x ($2.00). `y` holds one 7.5-cpu pod: it sorts first (savings ratio
    // 2.00 / 2 = 1.00) but only big.8x holds its pod (saves $1.60, 0.80 per unit of
    // disruption). `x` holds one 1-cpu pod with a deletion cost (eviction cost 1.2): it sorts
    // second (2.00 / 2.2 = 0.91) yet small.2x replaces it (saves $1.90, 0.86 per unit).
    let mut x_pod = pod("x1", "x", "1");
    x_pod.metadata.annotations.get_or_insert_default().insert(
        "controller.kubernetes.io/pod-deletion-cost".into(),
        ((1i64 << 27) / 5).to_string(),
    );
    let nodes = || {
        vec![
            node_with_cpu("x", "huge.16x", "1", "on-demand", "default"),
            node_with_cpu("y", "huge.16x", "7500m", "on-demand", "default"),
        ]
    };
    let pods = || vec![x_pod.clone(), pod("y1", "y", "7500m")];
    let world = world(nodes(), pods(), PackingPolicy::CostOptimal);
    let input = world.input();
    let mut blocked = BTreeMap::new();
    let found = consolidation_candidates(&input, &mut blocked);
    let order: Vec<String> = found.iter().map(|c| c.name()).collect();
    assert_eq!(order, ["y", "x"].map(String::from), "savings ratio order");
    let simulator = Simulator::for_consolidation(&input);
    let each: Vec<f64> = found
        .iter()
        .map(|c| {
            let command =
                compute(&input, &simulator, &[c], Method::SingleNodeConsolidation).unwrap();
            savings_per_disruption(&command, &[c])
        })
        .collect();
    assert!(each[1] > each[0], "x saves more per disruption: {each:?}");
    let (commands, _) = single(&world);
    assert_eq!(commands.len(), 1);
    assert_eq!(
        commands[0].candidates[0].name, "x",
        "the best, not the first"
    );
    // Upstream takes the first that works.
    let upstream = super::cost_optimal_tests::world(nodes(), pods(), PackingPolicy::Upstream);
    let (commands, _) = single(&upstream);
    assert_eq!(commands[0].candidates[0].name, "y");
}

/// A split the kube-scheduler would undo is refused, though it saves enough as planned:
/// medium.4x + small.2x for a 4-cpu and a 1.5-cpu pod hold them only when the 4-cpu pod is
/// scheduled first; the 1.5-cpu pod first scores the empty medium.4x best and takes it, and the
/// 4-cpu pod then needs a node of its own. No single replacement is cheaper, so nothing is done.
/// (Splits of pods of one shape always fit: `a_split_must_save_the_margin_again_…`.)
#[test]
fn a_split_the_kube_scheduler_would_undo_is_refused() {
    let mut types = sizes();
    types.retain(|t| t.name != "big.8x");
    types.push(Arc::new(instance_type("big.8x", "8", 0.30 / 0.90)));
    let world = big_node_with_two_pods(&types);
    let (commands, blocked) = single(&world);
    assert!(commands.is_empty(), "{commands:?}");
    assert_eq!(
        blocked["b"].reason,
        BlockReason::StrandedByScheduler("default/a".into()),
        "{}",
        blocked["b"].reason
    );
}

/// The same pods on a `huge.16x` ($2.00): the split (medium.4x + small.2x, $0.30) would strand
/// the 4-cpu pod as above, so the command is upstream's: one big.8x ($0.40) holding both.
#[test]
fn a_split_the_kube_scheduler_would_undo_falls_back_to_one_replacement() {
    let world = world(
        vec![node_with_cpu("h", "huge.16x", "16", "on-demand", "default")],
        vec![pod("a", "h", "4"), pod("c", "h", "1500m")],
        PackingPolicy::CostOptimal,
    );
    let input = world.input();
    let simulator = Simulator::for_consolidation(&input);
    let mut blocked = BTreeMap::new();
    let found = consolidation_candidates(&input, &mut blocked);
    // As planned, the split: two replacements.
    let planned = compute_as_planned(
        &input,
        &simulator,
        &[&found[0]],
        Method::SingleNodeConsolidation,
    );
    assert_eq!(
        planned.unwrap_err(),
        BlockReason::StrandedByScheduler("default/a".into())
    );
    let (commands, blocked) = single(&world);
    assert_eq!(commands.len(), 1, "{blocked:?}");
    assert_eq!(commands[0].replacements.len(), 1);
    assert_eq!(first_option(&commands[0].replacements[0]), "big.8x");
    assert!(
        (commands[0].savings_per_hour - 1.60).abs() < 1e-9,
        "{commands:?}"
    );
}

#[test]
fn a_split_is_validated_replacement_by_replacement() {
    let mut world = two_big_pods(PackingPolicy::CostOptimal);
    let pass = crate::disruption::decide(&world.input());
    let command = &pass.commands[0];
    assert_eq!(command.replacements.len(), 2);
    assert!(crate::disruption::validate(command, &world.input()).is_ok());
    // A third pod arrived during the wait: three nodes are needed now.
    world.state.apply(pod("c", "h", "6"));
    let err = crate::disruption::validate(command, &world.input()).unwrap_err();
    assert_eq!(
        err.to_string(),
        BlockReason::DecisionChanged("3 replacements instead of 2".into()).to_string()
    );
}

/// `p1`, `p2`: medium.4x ($0.20) with one 3-cpu pod each; together they fit one `six.6x`
/// ($0.28, the cheapest per cpu), alone nothing cheaper holds them. `q1`, `q2`: big.8x ($0.40)
/// with one 7.5-cpu pod each, full: upstream's order (savings per disruption) puts them first.
/// The pool's budget allows two nodes at a time.
fn complementary_pair_behind_full_nodes(policy: PackingPolicy) -> World {
    let mut types = sizes();
    types.push(Arc::new(instance_type("six.6x", "6", 0.28)));
    let budget = json!({"disruption": {
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "2"}]
    }});
    let mut world = World::new(
        vec![pool("default", &["on-demand"], budget)],
        vec![
            node("p1", "medium.4x", "on-demand", "default"),
            node("p2", "medium.4x", "on-demand", "default"),
            node("q1", "big.8x", "on-demand", "default"),
            node("q2", "big.8x", "on-demand", "default"),
        ],
        vec![
            pod("a", "p1", "3"),
            pod("b", "p2", "3"),
            pod("c", "q1", "7500m"),
            pod("d", "q2", "7500m"),
        ],
    )
    .with_types(&types);
    world.scheduler.packing_policy = policy;
    world
}

#[test]
fn the_most_wasteful_nodes_come_first_by_their_price_above_their_pods_worth() {
    let world = complementary_pair_behind_full_nodes(PackingPolicy::CostOptimal);
    let input = world.input();
    let found = consolidation_candidates(&input, &mut BTreeMap::new());
    let names = |order: &[&Candidate<'_>]| order.iter().map(|c| c.name()).collect::<Vec<_>>();
    let all: Vec<&Candidate<'_>> = found.iter().collect();
    assert_eq!(names(&all), ["q1", "q2", "p1", "p2"], "savings ratio order");
    let simulator = Simulator::for_consolidation(&input);
    // At the bound's cpu price ($0.28 / 6 cpu), a medium.4x holding 3 cpu wastes $0.06/h and a
    // big.8x holding 7.5 cpu $0.05/h.
    let by_waste = waste::most_wasteful_first(&input, &simulator, &all);
    let order: Vec<&Candidate<'_>> = by_waste.iter().map(|w| w.candidate).collect();
    assert_eq!(names(&order), ["p1", "p2", "q1", "q2"]);
    let wastes: Vec<f64> = by_waste.iter().map(|w| w.waste).collect();
    for (waste, expected) in wastes.iter().zip([0.06, 0.06, 0.05, 0.05]) {
        assert!((waste - expected).abs() < 1e-9, "{wastes:?}");
    }
}

#[test]
fn cost_optimal_consolidates_the_wasteful_pair_upstream_order_never_reaches() {
    // Upstream: the budget's prefix is q1 + q2 (15 cpu: two big.8x again), and no node alone
    // has anything cheaper. Nothing to do.
    let upstream = complementary_pair_behind_full_nodes(PackingPolicy::Upstream);
    let pass = crate::disruption::decide(&upstream.input());
    assert!(pass.commands.is_empty(), "{:?}", pass.commands);
    // CostOptimal also tries the most wasteful nodes together: p1 + p2 → one six.6x.
    let cost_optimal = complementary_pair_behind_full_nodes(PackingPolicy::CostOptimal);
    let pass = crate::disruption::decide(&cost_optimal.input());
    assert_eq!(pass.method, Some(Method::MultiNodeConsolidation));
    let command = &pass.commands[0];
    let candidates: Vec<&str> = command.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(candidates, ["p1", "p2"]);
    assert_eq!(command.replacements.len(), 1);
    assert_eq!(first_option(&command.replacements[0]), "six.6x");
    assert!(
        (command.savings_per_hour - 0.12).abs() < 1e-9,
        "{command:?}"
    );
}

/// `p1`, `p2`: medium.4x ($0.20) with one 900m pod each, the most wasteful nodes; `r`: a big.8x
/// with a 6-cpu pod, 2 cpu free. The pool's budget allows every node at once.
fn wasteful_pair_beside_room() -> World {
    let budget = json!({"disruption": {
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "100%"}]
    }});
    let mut world = World::new(
        vec![pool("default", &["on-demand"], budget)],
        vec![
            node("p1", "medium.4x", "on-demand", "default"),
            node("p2", "medium.4x", "on-demand", "default"),
            node("r", "big.8x", "on-demand", "default"),
        ],
        vec![
            pod("a", "p1", "900m"),
            pod("b", "p2", "900m"),
            pod("c", "r", "6"),
        ],
    );
    world.scheduler.packing_policy = PackingPolicy::CostOptimal;
    world
}

#[test]
fn a_re_plan_puts_moved_pods_on_the_room_of_nodes_that_stay_before_new_nodes() {
    // Into new nodes only, the pair's pods would go to one small.2x (saving $0.30/h); once p1 and
    // p2 drain the provisioner puts both on r's free room, the small.2x would go empty and r
    // would hold them. The re-plan places them as the provisioner will: a delete, $0.40/h.
    let world = wasteful_pair_beside_room();
    let input = world.input();
    let found = consolidation_candidates(&input, &mut BTreeMap::new());
    let all: Vec<&Candidate<'_>> = found.iter().collect();
    let mut simulator = Simulator::for_consolidation(&input);
    let by_waste = waste::most_wasteful_first(&input, &simulator, &all);
    let order: Vec<String> = by_waste.iter().map(|w| w.candidate.name()).collect();
    assert_eq!(order, ["p1", "p2", "r"]);
    let budgets = input.budgets(DisruptionReason::Underutilized);
    let command = waste::grown_group(&input, &mut simulator, &by_waste, &budgets).unwrap();
    let candidates: Vec<&str> = command.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(candidates, ["p1", "p2"]);
    assert!(command.replacements.is_empty(), "{command:?}");
    assert!(
        (command.savings_per_hour - 0.40).abs() < 1e-9,
        "{command:?}"
    );
}

/// The one command multi-node consolidation returns under `CostOptimal` for these nodes and pods.
fn the_cost_optimal_multi_node_command(
    nodes: Vec<(karpenter_api::NodeClaim, k8s_openapi::api::core::v1::Node)>,
    pods: Vec<crate::pod::Pod>,
) -> Command {
    let cost_optimal = world(nodes, pods, PackingPolicy::CostOptimal);
    let mut commands = multi_node(&cost_optimal.input(), &mut BTreeMap::new());
    assert_eq!(commands.len(), 1, "{commands:?}");
    commands.remove(0)
}

/// Names of a command's candidates, sorted.
fn disrupted(command: &Command) -> Vec<&str> {
    let mut names: Vec<&str> = command.candidates.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    names
}

/// `a` (medium.4x, one 2.5-cpu pod), `c` (small.2x, one 1-cpu pod) and `s` (big.8x, 4 of its 8
/// cpu free: room for `a`'s pod or for another like it, and for `c`'s beside either).
fn room_for_one_beside_a_and_c() -> (
    Vec<(karpenter_api::NodeClaim, k8s_openapi::api::core::v1::Node)>,
    Vec<crate::pod::Pod>,
) {
    let nodes = vec![
        node("a", "medium.4x", "on-demand", "default"),
        node("c", "small.2x", "on-demand", "default"),
        node("s", "big.8x", "on-demand", "default"),
    ];
    let pods = vec![
        pod("pa", "a", "2500m"),
        pod("pc", "c", "1"),
        pod("s1", "s", "1"),
        pod("s2", "s", "1"),
        pod("s3", "s", "1"),
        pod("s4", "s", "1"),
    ];
    (nodes, pods)
}

#[test]
fn multi_node_deletes_the_nodes_that_fit_together_past_two_that_do_not() {
    // `a` and `b` (medium.4x, one 2.5-cpu pod each) both need the 4 free cpu of `s`, which has
    // room for one of them: upstream's prefix of its two best candidates fails (the other pod
    // needs a medium.4x of its own, no cheaper than the node it leaves), and so does every
    // longer prefix. `c`'s pod fits beside `a`'s: skipping `b` deletes `a` and `c` at once,
    // where single-node consolidation would take them one command at a time.
    let (mut nodes, mut pods) = room_for_one_beside_a_and_c();
    nodes.push(node("b", "medium.4x", "on-demand", "default"));
    pods.push(pod("pb", "b", "2500m"));
    let upstream = world(nodes.clone(), pods.clone(), PackingPolicy::Upstream);
    assert!(
        multi_node(&upstream.input(), &mut BTreeMap::new()).is_empty(),
        "upstream's prefix search finds nothing here"
    );
    let command = &the_cost_optimal_multi_node_command(nodes, pods);
    assert_eq!(command.decision(), Decision::Delete, "{command:?}");
    assert_eq!(disrupted(command), ["a", "c"]);
    assert!((command.savings_per_hour - 0.3).abs() < 1e-9, "{command:?}");
}

#[test]
fn multi_node_replaces_nodes_one_pod_each_may_not_share_in_one_command() {
    // Three huge nodes, each with one pod no other may share a node with, and first in
    // upstream's order a huge node whose 15.5-cpu pod nothing but a new huge node holds: every
    // prefix starts with it and fails, so the three moves wait for single-node consolidation,
    // one command each. CostOptimal skips the full node and batches the three moves (three
    // small nodes) in one command.
    let mut nodes = ["h1", "h2", "h3"]
        .iter()
        .map(|n| node_with_cpu(n, "huge.16x", "16", "on-demand", "default"))
        .collect::<Vec<_>>();
    // Named to sort first among candidates of the same savings ratio.
    nodes.push(node_with_cpu(
        "a-full",
        "huge.16x",
        "16",
        "on-demand",
        "default",
    ));
    let pods = vec![
        apart("a", "h1", "1"),
        apart("b", "h2", "1"),
        apart("c", "h3", "1"),
        // Two pods to move make h3 dearer to disrupt: the three moves together save less per
        // unit of disruption than h1's alone, which once kept them apart.
        pod("d", "h3", "500m"),
        pod("full", "a-full", "15500m"),
    ];
    let command = &the_cost_optimal_multi_node_command(nodes, pods);
    assert_eq!(disrupted(command), ["h1", "h2", "h3"]);
    assert_eq!(command.replacements.len(), 3, "{command:?}");
    for replacement in &command.replacements {
        assert_eq!(first_option(replacement), "small.2x");
    }
    assert!((command.savings_per_hour - 5.7).abs() < 1e-9, "{command:?}");
}

#[test]
fn the_batched_group_stops_after_twenty_candidates_in_a_row_do_not_join_it() {
    // The first test's cluster with `b` repeated, its pods apart from each other: each `b` can
    // go alone (onto `s`), none beside `a`, which took the room, nor with another; nor can `s`
    // (its pods would need the room the group took), which comes next in the order. `c`, last,
    // joins after 19 misses in a row and is not reached after 20: each miss re-plans the whole
    // group, so the walk is bounded.
    let disrupted_after = |misses: usize| {
        let (mut nodes, mut pods) = room_for_one_beside_a_and_c();
        for i in 0..misses - 1 {
            let name = format!("b{i:02}");
            nodes.push(node(&name, "medium.4x", "on-demand", "default"));
            pods.push(apart(&format!("p{name}"), &name, "2500m"));
        }
        let world = world(nodes, pods, PackingPolicy::CostOptimal);
        let commands = multi_node(&world.input(), &mut BTreeMap::new());
        commands
            .first()
            .map(|c| disrupted(c).into_iter().map(str::to_owned).collect())
            .unwrap_or_else(Vec::<String>::new)
    };
    let misses = super::batched::MAX_MISSES_IN_A_ROW;
    assert_eq!(disrupted_after(misses - 1), ["a", "c"]);
    assert_ne!(disrupted_after(misses), ["a", "c"]);
}

/// Four medium.4x nodes alternating between two zones (n1, n3 in test-1a; n2, n4 in test-1b),
/// one pod each of a Deployment spread over the zones (maxSkew 1), so no pod may change zones;
/// six.6x ($0.28) is the cheapest per cpu. Budget: two nodes.
fn spread_pods_in_alternating_zones() -> World {
    let mut types = sizes();
    types.push(Arc::new(instance_type("six.6x", "6", 0.28)));
    for it in &mut types {
        let it = Arc::get_mut(it).unwrap();
        let mut other_zone = it.offerings.clone();
        for offering in &mut other_zone {
            offering.zone = "test-1b".into();
        }
        it.offerings.extend(other_zone);
    }
    let budget = json!({"disruption": {
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "2"}]
    }});
    let zones = [
        ("n1", "test-1a"),
        ("n2", "test-1b"),
        ("n3", "test-1a"),
        ("n4", "test-1b"),
    ];
    let nodes = zones
        .iter()
        .map(|(name, zone)| {
            let (mut claim, mut node) = node(name, "medium.4x", "on-demand", "default");
            for labels in [
                node.metadata.labels.as_mut().unwrap(),
                claim.metadata.labels.as_mut().unwrap(),
            ] {
                labels.insert(ZONE_LABEL.into(), (*zone).into());
            }
            (claim, node)
        })
        .collect();
    let spread = |name: &str, node: &str, cpu: &str| {
        let mut p = pod(name, node, cpu);
        p.metadata
            .labels
            .get_or_insert_default()
            .insert("app".into(), "spread".into());
        p.spec.as_mut().unwrap().topology_spread_constraints = Some(
            serde_json::from_value(json!([{
                "maxSkew": 1, "topologyKey": ZONE_LABEL,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "spread"}}}]))
            .unwrap(),
        );
        p
    };
    let pods = vec![
        spread("a", "n1", "2200m"),
        spread("b", "n2", "2300m"),
        spread("c", "n3", "2500m"),
        spread("d", "n4", "2600m"),
    ];
    let mut world =
        World::new(vec![pool("default", &["on-demand"], budget)], nodes, pods).with_types(&types);
    world.scheduler.packing_policy = PackingPolicy::CostOptimal;
    world
}

#[test]
fn the_wasteful_nodes_of_one_zone_are_re_planned_together_when_the_cluster_wide_windows_mix_zones()
{
    // Most wasteful first is n1, n2, n3, n4 (the least cpu used first), and so is upstream's
    // order (names): every window of two holds one node of each zone, whose pods must each
    // stay in their zone on a node of their own. Within test-1a, n1 + n3 (4.7 cpu) go onto one
    // six.6x: $0.40 → $0.28.
    let world = spread_pods_in_alternating_zones();
    let input = world.input();
    let found = consolidation_candidates(&input, &mut BTreeMap::new());
    let all: Vec<&Candidate<'_>> = found.iter().collect();
    let simulator = Simulator::for_consolidation(&input);
    let by_waste = waste::most_wasteful_first(&input, &simulator, &all);
    let order: Vec<String> = by_waste.iter().map(|w| w.candidate.name()).collect();
    assert_eq!(order, ["n1", "n2", "n3", "n4"]);
    let budgets = input.budgets(DisruptionReason::Underutilized);
    let mut simulator = Simulator::for_consolidation(&input);
    assert!(waste::grown_group(&input, &mut simulator, &by_waste, &budgets).is_none());
    let commands = multi_node(&input, &mut BTreeMap::new());
    let command = commands.first().expect("a command");
    assert_eq!(disrupted(command), ["n1", "n3"]);
    assert_eq!(command.replacements.len(), 1, "{command:?}");
    assert_eq!(first_option(&command.replacements[0]), "six.6x");
    assert!(
        (command.savings_per_hour - 0.12).abs() < 1e-9,
        "{command:?}"
    );
}
