//! Properties of whole passes: no churn once converged (random clusters settle within a few
//! passes, never replacing a node by its own type), and on random clusters no budget exceeded, no do-not-disrupt pod or blocking PDB on a disrupted node, a place for every pod
//! (checked by solving again with the replacements in flight), consolidation never raising cost.
#![allow(clippy::unwrap_used)]

use crate::pod::Pod;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_api::well_known::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL};
use karpenter_api::{NodeClaim, NodePool};
use kube_core::ResourceExt;
use proptest::prelude::*;
use serde_json::json;

use super::budgets::DisruptionReason;
use super::command::{Command, Method};
use super::decide;
use super::testkit::{SIZES, World, node, pod, pool};
use crate::provisioning::{Snapshot, solve};
use crate::requirements::Requirements;
use crate::scheduling::PackingPolicy;

fn pending(mut pod: Pod) -> Pod {
    pod.spec.as_mut().unwrap().node_name = None;
    pod.status = serde_json::from_value(json!({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}))
    .unwrap();
    pod
}

fn requirement_values(claim: &NodeClaim, key: &str) -> Vec<String> {
    claim
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == key)
        .flat_map(|r| r.values.clone())
        .collect()
}

/// Runs a command as the controller would, instantly: launch the replacements (the cheapest
/// option), delete the candidates, then provision their pods (and any pending ones).
/// Returns the replacements' Node names.
fn execute(world: &mut World, command: &Command, serial: &mut usize) -> Vec<String> {
    let mut launched = Vec::new();
    for replacement in &command.replacements {
        *serial += 1;
        launched.push(format!("r{serial}"));
        let size = requirement_values(replacement, INSTANCE_TYPE_LABEL)
            .first()
            .cloned()
            .unwrap_or_else(|| "big.8x".into());
        let capacity = requirement_values(replacement, CAPACITY_TYPE_LABEL)
            .first()
            .cloned()
            .unwrap_or_else(|| "on-demand".into());
        let pool = replacement.labels()["karpenter.sh/nodepool"].clone();
        let (claim, node) = node(&format!("r{serial}"), &size, &capacity, &pool);
        world.state.apply(claim);
        world.state.apply(node);
    }
    for gone in &command.candidates {
        let pods: Vec<Pod> = world.state.pods_on_node(&gone.name).cloned().collect();
        for p in pods {
            world.state.delete(&p);
            world.state.apply(pending(p));
        }
        let node = world.state.node(&gone.name).cloned().unwrap();
        let claim = world.state.nodeclaim(&gone.nodeclaim).cloned().unwrap();
        world.state.delete(&node);
        world.state.delete(&claim);
    }
    provision(world, serial);
    launched
}

fn provision(world: &mut World, serial: &mut usize) {
    let pools: Vec<NodePool> = world.state.nodepools().cloned().collect();
    let (results, pods) = {
        let mut snapshot = Snapshot::new(&world.state, world.scheduler.clone(), world.now);
        for p in &pools {
            snapshot = snapshot.offer(p, &world.types[&p.name_any()]);
        }
        let pods: Vec<Pod> = snapshot.pods_to_place().into_iter().cloned().collect();
        (solve(snapshot.scheduler_input().input, &pods), pods)
    };
    let bind = |world: &mut World, index: usize, node: &str| {
        let mut p = pods[index].clone();
        p.spec.as_mut().unwrap().node_name = Some(node.to_string());
        p.status = serde_json::from_value(json!({"phase": "Running"})).unwrap();
        world.state.apply(p);
    };
    for placed in &results.existing_nodes {
        for &i in &placed.pods {
            bind(world, i, &placed.node);
        }
    }
    for claim in &results.new_node_claims {
        *serial += 1;
        let name = format!("p{serial}");
        let size = claim.instance_types[0].name.to_string();
        let (c, n) = node(&name, &size, "on-demand", &claim.node_pool);
        world.state.apply(c);
        world.state.apply(n);
        for &i in &claim.pods {
            bind(world, i, &name);
        }
    }
}

#[test]
fn a_converged_cluster_gets_no_more_commands_and_nothing_is_replaced_by_its_own_type() {
    for policy in [PackingPolicy::Upstream, PackingPolicy::CostOptimal] {
        converges_without_own_type_replacements(policy);
    }
}

fn converges_without_own_type_replacements(policy: PackingPolicy) {
    let mut world = World::new(
        vec![pool("default", &["on-demand"], json!({}))],
        vec![
            node("a", "big.8x", "on-demand", "default"),
            node("b", "big.8x", "on-demand", "default"),
            node("c", "medium.4x", "on-demand", "default"),
            node("d", "small.2x", "on-demand", "default"),
        ],
        vec![
            pod("a1", "a", "1500m"),
            pod("a2", "a", "700m"),
            pod("b1", "b", "3"),
            pod("c1", "c", "900m"),
            pod("d1", "d", "1"),
        ],
    );
    world.scheduler.packing_policy = policy;
    let mut serial = 0;
    let mut passes = 0;
    loop {
        let pass = decide(&world.input());
        if pass.commands.is_empty() {
            break;
        }
        passes += 1;
        assert!(passes < 20, "no convergence: {:?}", pass.commands);
        for command in &pass.commands {
            for replacement in &command.replacements {
                let options = requirement_values(replacement, INSTANCE_TYPE_LABEL);
                for candidate in &command.candidates {
                    let own = candidate.instance_type.as_ref().unwrap();
                    assert!(!options.contains(own), "{own} replaced by itself");
                }
            }
            execute(&mut world, command, &mut serial);
        }
    }
    assert!(passes > 0, "the starting cluster was wasteful");
    // The same state again: still nothing (decisions depend on the state only).
    let again = decide(&world.input());
    assert!(again.commands.is_empty(), "{:?}", again.commands);
    let pods = world.state.pods().count();
    assert_eq!(pods, 5, "no pod lost");
    assert_eq!(
        world
            .state
            .pods()
            .filter(|p| p.spec.as_ref().unwrap().node_name.is_none())
            .count(),
        0,
        "every pod bound"
    );
}

/// A generated cluster, as objects (so it can be built twice: once to decide, once to check).
#[derive(Clone, Debug)]
struct Cluster {
    /// Every property holds under both packing policies.
    policy: PackingPolicy,
    budget: String,
    spot: bool,
    spot_to_spot: bool,
    nodes: Vec<GenNode>,
    pending: usize,
    pdb_allowed: Option<i32>,
}

#[derive(Clone, Debug)]
struct GenNode {
    size: usize,
    spot: bool,
    drifted: bool,
    /// (millicores, do-not-disrupt, app=web)
    pods: Vec<(u32, bool, bool)>,
}

fn gen_node() -> impl Strategy<Value = GenNode> {
    (
        0..SIZES.len(),
        any::<bool>(),
        prop::bool::weighted(0.3),
        prop::collection::vec(
            (
                prop::sample::select(vec![100u32, 250, 500, 1000]),
                prop::bool::weighted(0.08),
                prop::bool::weighted(0.3),
            ),
            0..4,
        ),
    )
        .prop_map(|(size, spot, drifted, pods)| GenNode {
            size,
            spot,
            drifted,
            pods,
        })
}

fn gen_cluster() -> impl Strategy<Value = Cluster> {
    (
        prop::sample::select(vec![PackingPolicy::Upstream, PackingPolicy::CostOptimal]),
        prop::sample::select(vec!["0", "1", "2", "50%", "100%", "window"]),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(gen_node(), 1..6),
        0..3usize,
        prop::option::of(0..2i32),
    )
        .prop_map(
            |(policy, budget, spot, spot_to_spot, nodes, pending, pdb_allowed)| Cluster {
                policy,
                budget: budget.to_string(),
                spot,
                spot_to_spot,
                nodes,
                pending,
                pdb_allowed,
            },
        )
}

fn build(cluster: &Cluster) -> World {
    let budgets = if cluster.budget == "window" {
        // Open from midnight for 2h: `now` (01:00) is inside, so nothing may be disrupted.
        json!([{"nodes": "0", "schedule": "0 0 * * *", "duration": "2h"}, {"nodes": "100%"}])
    } else {
        json!([{"nodes": cluster.budget}])
    };
    let capacity_types: &[&str] = if cluster.spot {
        &["spot", "on-demand"]
    } else {
        &["on-demand"]
    };
    let pools = vec![pool(
        "default",
        capacity_types,
        json!({"disruption": {"consolidateAfter": "0s", "budgets": budgets}}),
    )];
    let mut nodes: Vec<(NodeClaim, Node)> = Vec::new();
    let mut pods = Vec::new();
    let mut drifted = Vec::new();
    for (i, n) in cluster.nodes.iter().enumerate() {
        let name = format!("n{i}");
        let (size, cpu, _) = SIZES[n.size];
        let ct = if n.spot && cluster.spot {
            "spot"
        } else {
            "on-demand"
        };
        nodes.push(node(&name, size, ct, "default"));
        if n.drifted {
            drifted.push(format!("{name}-claim"));
        }
        let capacity: u32 = cpu.parse::<u32>().unwrap() * 1000;
        let mut used = 0;
        for (j, &(milli, dnd, web)) in n.pods.iter().enumerate() {
            if used + milli > capacity {
                continue;
            }
            used += milli;
            let mut p = pod(&format!("{name}-p{j}"), &name, &format!("{milli}m"));
            if dnd {
                p.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert("karpenter.sh/do-not-disrupt".into(), "true".into());
            }
            if web {
                p.metadata
                    .labels
                    .get_or_insert_default()
                    .insert("app".into(), "web".into());
            }
            pods.push(p);
        }
    }
    for k in 0..cluster.pending {
        pods.push(pending(pod(&format!("pending-{k}"), "none", "500m")));
    }
    let mut world = World::new(pools, nodes, pods);
    if let Some(allowed) = cluster.pdb_allowed {
        world.state.apply(pdb(allowed));
    }
    for claim in drifted {
        world.drift.insert(claim, "AMIDrift".into());
    }
    world.options.spot_to_spot_consolidation = cluster.spot_to_spot;
    world.scheduler.packing_policy = cluster.policy;
    world
}

fn pdb(allowed: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": allowed},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                   "expectedPods": 1}
    }))
    .unwrap()
}

/// How many nodes the generated budget lets be disrupted at once, computed from the spec (not
/// from `BudgetMapping`): counts as written, percentages of the pool's nodes rounded up, and the
/// schedule window (open at `now`) allowing none.
fn budget_limit(cluster: &Cluster) -> usize {
    let nodes = cluster.nodes.len();
    match cluster.budget.as_str() {
        "window" => 0,
        "50%" => nodes.div_ceil(2),
        "100%" => nodes,
        count => count.parse().unwrap(),
    }
}

/// Passes the loop runs while earlier commands are still in flight (their candidates claimed,
/// not yet gone): the budget must hold at that instant too.
const PASSES_IN_FLIGHT: usize = 3;

/// Checks the passes of the loop on `cluster`: up to [`PASSES_IN_FLIGHT`] passes, each with the
/// earlier passes' candidates still being disrupted (claimed as the controller's queue does);
/// `Err` names the broken property.
fn check(cluster: &Cluster) -> Result<(), String> {
    let mut world = build(cluster);
    let limit = budget_limit(cluster);
    let mut in_flight: Vec<String> = Vec::new();
    let mut first_commands: Option<Vec<Command>> = None;
    for round in 0..PASSES_IN_FLIGHT {
        let pass = decide(&world.input());
        let Some(method) = pass.method else {
            break;
        };
        check_pass(cluster, &world, &pass.commands)?;
        // Budgets, at this instant: what is in flight plus what this pass starts.
        for c in pass.commands.iter().flat_map(|c| &c.candidates) {
            if in_flight.contains(&c.name) {
                return Err(format!("{} disrupted twice (pass {round})", c.name));
            }
            in_flight.push(c.name.clone());
        }
        if in_flight.len() > limit {
            return Err(format!(
                "{} nodes disrupted at once after pass {round} ({method}), budget {:?} allows {limit}",
                in_flight.len(),
                cluster.budget
            ));
        }
        for name in &in_flight {
            world.state.mark_being_disrupted(name);
        }
        if first_commands.is_none() {
            first_commands = Some(pass.commands);
        }
    }
    match first_commands {
        Some(commands) => check_places(cluster, &commands),
        None => Ok(()),
    }
}

/// No do-not-disrupt pod or blocking PDB on a disrupted node; consolidation never raises cost.
fn check_pass(cluster: &Cluster, world: &World, commands: &[Command]) -> Result<(), String> {
    // Pod blocks.
    let pdb_blocks = cluster.pdb_allowed == Some(0);
    for c in commands.iter().flat_map(|c| &c.candidates) {
        for p in world.state.pods_on_node(&c.name) {
            if crate::pod::has_do_not_disrupt(p, world.now) {
                return Err(format!("do-not-disrupt pod on {}", c.name));
            }
            if pdb_blocks && p.labels().get("app").is_some_and(|v| v == "web") {
                return Err(format!("PDB-blocked pod on {}", c.name));
            }
        }
    }
    // Cost.
    for command in commands {
        if !matches!(
            command.method,
            Method::SingleNodeConsolidation | Method::MultiNodeConsolidation
        ) {
            continue;
        }
        // Whatever option each replacement launches as, together they cost less than the
        // nodes they replace.
        let price: f64 = command.candidates.iter().filter_map(|c| c.price).sum();
        let mut dearest_total = 0.0;
        for replacement in &command.replacements {
            let reqs =
                Requirements::from_node_selector_with_min_values(&replacement.spec.requirements)
                    .unwrap();
            let cts = reqs.get(&CAPACITY_TYPE_LABEL.to_string()).unwrap();
            let mut dearest = 0.0;
            for name in requirement_values(replacement, INSTANCE_TYPE_LABEL) {
                let it = world.types["default"]
                    .iter()
                    .find(|t| t.name == name)
                    .unwrap();
                let worst = it
                    .offerings
                    .iter()
                    .filter(|o| cts.has(&o.capacity_type))
                    .map(|o| o.price)
                    .fold(0.0, f64::max);
                if worst >= price {
                    return Err(format!("replacement {name} at {worst} >= {price}"));
                }
                dearest = f64::max(dearest, worst);
            }
            dearest_total += dearest;
        }
        if dearest_total >= price {
            return Err(format!(
                "{} replacements at up to {dearest_total} >= {price}",
                command.replacements.len()
            ));
        }
    }
    Ok(())
}

/// Every pod that was running still has a place after the first pass's commands.
fn check_places(cluster: &Cluster, commands: &[Command]) -> Result<(), String> {
    // Every pod has a place: solve again with the candidates going and the replacements in
    // flight.
    let mut after = build(cluster);
    let mut serial = 0;
    for command in commands {
        for c in &command.candidates {
            after.state.mark_for_deletion(&c.name);
        }
        for r in &command.replacements {
            serial += 1;
            let mut r = r.clone();
            r.metadata.name = Some(format!("replacement-{serial}"));
            // Launched as its cheapest option (the first listed), with that type's capacity: a
            // claim sized to exactly its planned pods would make the check depend on the
            // order the scheduler packs them in.
            let size = requirement_values(&r, INSTANCE_TYPE_LABEL)[0].clone();
            let cpu = SIZES.iter().find(|(n, _, _)| *n == size).unwrap().1;
            r.status = Some(
                serde_json::from_value(json!({
                    "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                    "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}))
                .unwrap(),
            );
            after.state.apply(r);
        }
    }
    let pools: Vec<NodePool> = after.state.nodepools().cloned().collect();
    let mut snapshot = Snapshot::new(&after.state, after.scheduler.clone(), after.now);
    for p in &pools {
        snapshot = snapshot.offer(p, &after.types[&p.name_any()]);
    }
    let pods = snapshot.pods_to_place();
    let first_moved = after.state.provisionable_pods(after.now).len();
    let results = solve(snapshot.scheduler_input().input, &pods);
    if let Some(u) = results.unschedulable.iter().find(|u| u.pod >= first_moved) {
        return Err(format!(
            "{}/{} has no place: {}",
            u.namespace, u.name, u.explanation
        ));
    }
    if let Some(extra) = results
        .new_node_claims
        .iter()
        .find(|c| c.pods.iter().any(|&i| i >= first_moved))
    {
        return Err(format!(
            "moved pods need a NodeClaim the command did not launch: {extra:?}"
        ));
    }
    Ok(())
}

/// 10,000 random clusters by default (about 25 s in a debug build on one core);
/// `PROPTEST_CASES` sets another count.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]
    #[test]
    fn passes_keep_budgets_pod_blocks_places_and_cost(cluster in gen_cluster()) {
        if let Err(broken) = check(&cluster) {
            prop_assert!(false, "{broken}\n{cluster:?}");
        }
    }
}

/// Passes after which a cluster must have converged: each pass removes at least one node or
/// replaces nodes by cheaper ones, and the generated clusters have at most five nodes.
const CONVERGENCE_PASSES: usize = 12;

/// Runs the loop on `cluster`, executing every command, until a pass finds nothing; `Err` when
/// it does not settle (churn), replaces a node by its own instance type, or leaves a node
/// without exactly one reason.
fn converge(cluster: &Cluster) -> Result<Converged, String> {
    let mut world = build(cluster);
    let mut serial = 0;
    let mut several_replacements = 0;
    let mut log = Vec::new();
    for _ in 0..CONVERGENCE_PASSES {
        let pass = decide(&world.input());
        if pass.commands.is_empty() {
            // Explained: every node left has one reason a person reads.
            for node in world.state.state_nodes() {
                let name = node.name();
                let reasons: Vec<_> = pass.blocked.iter().filter(|r| r.name == name).collect();
                if reasons.len() != 1 || reasons[0].reason.to_string().is_empty() {
                    return Err(format!("{name} left with reasons {reasons:?}"));
                }
            }
            return Ok(Converged {
                several_replacements,
                cost: world.hourly_cost(),
                log,
            });
        }
        for command in &pass.commands {
            if matches!(
                command.method,
                Method::SingleNodeConsolidation | Method::MultiNodeConsolidation
            ) {
                for replacement in &command.replacements {
                    // Its own type only on another, cheaper capacity type (on-demand by spot
                    // or a reservation): the same offering is never strictly cheaper.
                    let options = requirement_values(replacement, INSTANCE_TYPE_LABEL);
                    let capacity = requirement_values(replacement, CAPACITY_TYPE_LABEL);
                    for candidate in &command.candidates {
                        if let (Some(own), Some(ct)) =
                            (&candidate.instance_type, &candidate.capacity_type)
                            && options.contains(own)
                            && capacity.contains(ct)
                        {
                            return Err(format!(
                                "{} replaced by its own offering {own} {ct}",
                                candidate.name
                            ));
                        }
                    }
                }
            }
            if command.replacements.len() > 1 {
                several_replacements += 1;
            }
            log.push(describe(command));
            let launched = execute(&mut world, command, &mut serial);
            // A consolidation command's replacements are planned for its pods; one the
            // provisioner leaves empty means the decision placed pods where the provisioner
            // does not (such a replacement goes again, and the node that took its pods stays).
            if command.reason == DisruptionReason::Underutilized
                && let Some(empty) = launched
                    .iter()
                    .find(|r| world.state.pods_on_node(r).next().is_none())
            {
                return Err(format!(
                    "replacement {empty} of {} left empty by the provisioner",
                    describe(command)
                ));
            }
        }
    }
    Err(format!("still acting after {CONVERGENCE_PASSES} passes"))
}

/// One command as a failure message shows it: method, candidates, replacements' options.
fn describe(command: &Command) -> String {
    let candidates: Vec<String> = command
        .candidates
        .iter()
        .map(|c| {
            format!(
                "{} ({} {})",
                c.name,
                c.instance_type.as_deref().unwrap_or("?"),
                c.capacity_type.as_deref().unwrap_or("?")
            )
        })
        .collect();
    let replacements: Vec<String> = command
        .replacements
        .iter()
        .map(|r| {
            format!(
                "{:?} {:?}",
                requirement_values(r, INSTANCE_TYPE_LABEL),
                requirement_values(r, CAPACITY_TYPE_LABEL)
            )
        })
        .collect();
    format!(
        "{:?}: [{}] -> [{}] saving {:.3}",
        command.method,
        candidates.join(", "),
        replacements.join(", "),
        command.savings_per_hour
    )
}

/// How a cluster settled.
struct Converged {
    /// Commands that launched more than one replacement (`CostOptimal` only).
    several_replacements: usize,
    /// What the nodes left cost per hour.
    cost: f64,
    /// The commands executed, in order.
    log: Vec<String>,
}

/// What one pass's consolidation (its commands' savings) leaves the cluster costing per hour.
fn cost_after_one_pass(cluster: &Cluster) -> f64 {
    let world = build(cluster);
    let pass = decide(&world.input());
    world.hourly_cost()
        - pass
            .commands
            .iter()
            .map(|c| c.savings_per_hour)
            .sum::<f64>()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases() / 20))]
    /// The guard in consolidation: on the same random cluster, the default policy's pass ends no
    /// dearer than `Upstream`'s. (After convergence it can: passes are greedy and the two
    /// policies' paths part; see the ignored test below.)
    #[test]
    fn the_default_policy_never_ends_a_consolidation_pass_dearer_than_upstream(cluster in gen_cluster()) {
        let with = |policy: PackingPolicy| Cluster { policy, ..cluster.clone() };
        let upstream = with(PackingPolicy::Upstream);
        let default = with(PackingPolicy::default());
        let (one_u, one_d) = (cost_after_one_pass(&upstream), cost_after_one_pass(&default));
        prop_assert!(one_d <= one_u + 1e-9, "one pass: default ${one_d:.3}/h, Upstream ${one_u:.3}/h");
    }
}

proptest! {
    // Two convergences per case: 200 by default (1,000 cases passed locally).
    #![proptest_config(ProptestConfig::with_cases(cases() / 50))]
    /// The guard after convergence: on the same random cluster, the default policy's loop settles
    /// no dearer than `Upstream`'s (the one-pass property above does not imply it).
    #[test]
    fn the_default_policy_converges_no_dearer_than_upstream(cluster in gen_cluster()) {
        let with = |policy: PackingPolicy| Cluster { policy, ..cluster.clone() };
        let upstream = converge(&with(PackingPolicy::Upstream));
        let default = converge(&with(PackingPolicy::default()));
        if let (Ok(upstream), Ok(default)) = (upstream, default) {
            prop_assert!(
                default.cost <= upstream.cost + 1e-9,
                "converged: default ${:.3}/h after {:#?}, Upstream ${:.3}/h after {:#?}",
                default.cost, default.log, upstream.cost, upstream.log
            );
        }
    }
}

/// A cluster the property search found where the default policy, pass after pass, settled at
/// $0.120/h and `Upstream` at $0.060/h (a spot node of size 2 with one small pod, an on-demand one
/// of size 0 with two, a spot one of size 2 with two; one pending pod; a budget of 2). Each pass
/// was no dearer; the converged cluster was. The default's first pass replaced {n2 big spot, n1
/// small on-demand} by one small spot node while n0, a big spot node with 7.9 free cpu, stayed:
/// the most-wasteful group was re-planned into new nodes only. Provisioning then put the moved
/// pods on n0, the replacement went empty, and n0 ($0.120/h) could not be replaced spot-to-spot
/// (the gate is off). `Upstream` deletes n0 first, then replaces {n2, n1} by a medium spot
/// ($0.060/h). Two fixes: the re-plan places moved pods as the provisioner does (room of the
/// nodes that stay first, `consolidation/waste.rs`); with that alone the default deleted {n2,
/// n1} onto n0 (saving $0.22/h in one pass, $0.044/h per unit of disruption) and still stuck at
/// n0's $0.120/h, so the group now also has to beat single-node consolidation's best rate (n0's
/// delete, $0.060/h per unit), and the default takes `Upstream`'s path.
#[test]
fn the_default_policy_converges_no_dearer_than_upstream_on_the_found_cluster() {
    let node = |size, spot, pods: Vec<(u32, bool, bool)>| GenNode {
        size,
        spot,
        drifted: false,
        pods,
    };
    let cluster = Cluster {
        policy: PackingPolicy::Upstream,
        budget: "2".into(),
        spot: true,
        spot_to_spot: false,
        nodes: vec![
            node(2, true, vec![(100, false, false)]),
            node(0, false, vec![(100, false, false), (250, false, false)]),
            node(2, true, vec![(100, false, false), (1000, false, false)]),
        ],
        pending: 1,
        pdb_allowed: None,
    };
    let with = |policy: PackingPolicy| Cluster {
        policy,
        ..cluster.clone()
    };
    let upstream = converge(&with(PackingPolicy::Upstream)).unwrap_or_else(|e| panic!("{e}"));
    let default = converge(&with(PackingPolicy::default())).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        default.cost <= upstream.cost + 1e-9,
        "converged: default ${:.3}/h after {:#?}, Upstream ${:.3}/h after {:#?}",
        default.cost,
        default.log,
        upstream.cost,
        upstream.log
    );
}

/// The convergence property must also see `CostOptimal`'s N → M commands, not only deletes and
/// 1 → 1 replacements: over 400 of the random clusters (a fixed seed) under `CostOptimal`,
/// some converge through commands with several replacements, and none under `Upstream`.
#[test]
fn random_clusters_converge_through_several_replacements_under_cost_optimal_only() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut several = [0usize; 2];
    for _ in 0..400 {
        let cluster = gen_cluster().new_tree(&mut runner).unwrap().current();
        for (i, policy) in [PackingPolicy::Upstream, PackingPolicy::CostOptimal]
            .into_iter()
            .enumerate()
        {
            let cluster = Cluster {
                policy,
                ..cluster.clone()
            };
            let converged = converge(&cluster).unwrap_or_else(|e| panic!("{e}\n{cluster:?}"));
            several[i] += converged.several_replacements;
        }
    }
    assert_eq!(several[0], 0, "Upstream launches one replacement at most");
    assert!(several[1] > 0, "no N -> M command in 400 clusters");
}

proptest! {
    // Each case runs up to a dozen passes with their commands executed: a fifth of the cases of
    // the property above (2,000 by default, ≈ 5 s debug; `PROPTEST_CASES` scales both).
    #![proptest_config(ProptestConfig::with_cases(cases() / 5))]
    #[test]
    fn random_clusters_converge_without_churn(cluster in gen_cluster()) {
        if let Err(broken) = converge(&cluster) {
            prop_assert!(false, "{broken}\n{cluster:?}");
        }
    }
}

/// Timing of one pass over a full cluster where no node can go (every candidate is simulated):
/// `NODES=1000 cargo test -p karpenter-core --lib pass_timing -- --ignored --nocapture`
/// (`POLICY=CostOptimal` for that packing policy).
#[test]
#[ignore = "measurement, prints the time of one pass"]
fn pass_timing_on_a_packed_cluster() {
    let n: usize = std::env::var("NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    for i in 0..n {
        let name = format!("n{i:04}");
        nodes.push(node(&name, "medium.4x", "on-demand", "default"));
        for j in 0..4 {
            pods.push(pod(&format!("{name}-{j}"), &name, "1"));
        }
    }
    let mut world = World::new(
        vec![pool("default", &["on-demand"], json!({}))],
        nodes,
        pods,
    );
    if std::env::var("POLICY").as_deref() == Ok("CostOptimal") {
        world.scheduler.packing_policy = PackingPolicy::CostOptimal;
    }
    let started = std::time::Instant::now();
    let pass = decide(&world.input());
    let elapsed = started.elapsed();
    assert!(pass.commands.is_empty());
    assert_eq!(pass.blocked.len(), n);
    println!(
        "{n} nodes, {:?}: one pass in {elapsed:?}",
        world.scheduler.packing_policy
    );
}
