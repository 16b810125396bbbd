//! The `Balanced` consolidation policy (upstream `balanced.go`, karpenter-core §4.9): a
//! consolidation move touching a NodePool with `consolidationPolicy: Balanced` goes ahead only
//! when what it saves is worth what it disrupts, relative to the pool:
//!
//! ```text
//! score = (savings / pool cost) / (move disruption / pool disruption)   ≥ 1/k, k = 2
//! ```
//!
//! * pool cost: the hourly price of every node of the pool (the candidates' prices when the
//!   catalogue prices none);
//! * pool disruption: Σ over every node of the pool of `1 + Σ max(0, eviction cost)` of its
//!   reschedulable pods (each node's upstream `RescheduleDisruptionCost`);
//! * move disruption: the same sum over the move's candidates of that pool;
//! * savings: the command's, split across pools in proportion to the candidates' prices.
//!
//! Savings that are not positive score 0; a move that disrupts nothing scores +∞. Every Balanced
//! pool of a move must approve it; other policies are not scored. So a 10-node pool of $1/h nodes
//! with 5 pods each (cost 10, disruption 60) deletes a node (savings 1, disruption 6: score 1)
//! but does not replace one by a $0.80/h node (savings 0.2: score 0.2).

use std::collections::BTreeMap;

use karpenter_api::v1::ConsolidationPolicy;
use karpenter_api::well_known::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL};

use super::candidates::{BlockReason, Candidate, OfferingCatalog, Rejection, eviction_cost};
use super::command::{Command, DisruptionInput, JudgedMove, Method};
use super::score::{PoolScore, PoolTotals};
use crate::provisioning::reschedulable::moves_with_its_node;

/// The totals of NodePool `pool` in the pass's state (nodes being deleted included: they still
/// cost until they are gone, as upstream's provider-derived cost does).
pub fn pool_totals(input: &DisruptionInput<'_>, pool: &str) -> PoolTotals {
    let mut totals = PoolTotals::default();
    for node in input.state.state_nodes() {
        if node.node.is_none() || node.nodepool() != Some(pool) {
            continue;
        }
        let price = match (
            node.label(INSTANCE_TYPE_LABEL),
            node.label(ZONE_LABEL),
            node.label(CAPACITY_TYPE_LABEL),
        ) {
            (Some(it), Some(zone), Some(ct)) => input.instance_types.price(pool, it, zone, ct),
            _ => None,
        };
        totals.cost += price.unwrap_or(0.0);
        totals.disruption += 1.0
            + node
                .pods
                .iter()
                .filter(|p| moves_with_its_node(p))
                .map(|p| eviction_cost(p).max(0.0))
                .sum::<f64>();
    }
    totals
}

/// Approves a consolidation move of `candidates` saving `savings` per hour: the scores of its
/// Balanced pools (empty when it touches none), or the reason of the first pool that rejects it.
pub fn approve(
    input: &DisruptionInput<'_>,
    candidates: &[&Candidate<'_>],
    savings: f64,
) -> Result<Vec<PoolScore>, BlockReason> {
    // (candidates' price, candidates' disruption) per Balanced pool.
    let mut balanced: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for candidate in candidates {
        if candidate.nodepool.consolidation_policy() != ConsolidationPolicy::Balanced {
            continue;
        }
        let entry = balanced.entry(candidate.nodepool_name()).or_default();
        entry.0 += candidate.price.unwrap_or(0.0);
        entry.1 += candidate.reschedule_disruption_cost();
    }
    let total_price: f64 = candidates.iter().filter_map(|c| c.price).sum();
    let mut scores = Vec::with_capacity(balanced.len());
    for (pool, (price, move_disruption)) in balanced {
        let share = if total_price > 0.0 {
            price / total_price
        } else {
            1.0 / candidates.len().max(1) as f64
        };
        let totals = pool_totals(input, &pool);
        let pool_cost = if totals.cost > 0.0 {
            totals.cost
        } else {
            price
        };
        let verdict = PoolScore::new(pool, savings * share, pool_cost, move_disruption, totals);
        if !verdict.approved() {
            return Err(BlockReason::BalancedScoreTooLow(verdict));
        }
        scores.push(verdict);
    }
    Ok(scores)
}

/// The totals of every Balanced NodePool among `candidates`, computed once per pass for
/// [`even_a_delete_fails`].
pub fn balanced_pool_totals(
    input: &DisruptionInput<'_>,
    candidates: &[Candidate<'_>],
) -> BTreeMap<String, PoolTotals> {
    let mut totals = BTreeMap::new();
    for candidate in candidates {
        if candidate.nodepool.consolidation_policy() != ConsolidationPolicy::Balanced {
            continue;
        }
        let pool = candidate.nodepool_name();
        if let std::collections::btree_map::Entry::Vacant(slot) = totals.entry(pool) {
            let pool_total = pool_totals(input, slot.key());
            slot.insert(pool_total);
        }
    }
    totals
}

/// Upstream `CanPassThreshold` (§4.8 step 3): deleting a node outright saves its whole price
/// for the least disruption any move of it can cause, so when even that scores below the
/// threshold no move of the node will pass and single-node consolidation skips it without
/// simulating. `None` for other policies, unknown totals or prices (the simulation decides).
pub fn even_a_delete_fails(
    candidate: &Candidate<'_>,
    totals: &BTreeMap<String, PoolTotals>,
) -> Option<BlockReason> {
    if candidate.nodepool.consolidation_policy() != ConsolidationPolicy::Balanced {
        return None;
    }
    let pool = candidate.nodepool_name();
    let pool_total = *totals.get(&pool)?;
    let price = candidate.price?;
    if pool_total.cost <= 0.0 {
        return None;
    }
    let verdict = PoolScore::new(
        pool,
        price,
        pool_total.cost,
        candidate.reschedule_disruption_cost(),
        pool_total,
    );
    (!verdict.approved()).then_some(BlockReason::BalancedDeleteWouldNotPass(verdict))
}

/// The moves of a pass (see [`JudgedMove`]): one per NodePool of each consolidation command,
/// and one per node single-node consolidation rejected on its Balanced score (`blocked` holds
/// those, and only single-node consolidation records them there).
pub fn judged_moves<'r>(
    input: &DisruptionInput<'_>,
    commands: &[Command],
    rejections: impl Iterator<Item = &'r Rejection>,
) -> Vec<JudgedMove> {
    let mut moves = Vec::new();
    for command in commands {
        if !matches!(
            command.method,
            Method::MultiNodeConsolidation | Method::SingleNodeConsolidation
        ) {
            continue;
        }
        let mut by_pool: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for node in &command.candidates {
            by_pool
                .entry(node.node_pool.as_str())
                .or_default()
                .push(node.name.clone());
        }
        for (pool, candidates) in by_pool {
            let policy = input
                .state
                .nodepool(pool)
                .map_or(ConsolidationPolicy::WhenEmptyOrUnderutilized, |p| {
                    p.consolidation_policy()
                });
            moves.push(JudgedMove {
                method: command.method,
                candidates,
                nodepool: pool.to_string(),
                policy,
                score: command
                    .balanced_scores
                    .iter()
                    .find(|s| s.nodepool == pool)
                    .cloned(),
            });
        }
    }
    for rejection in rejections {
        if let BlockReason::BalancedScoreTooLow(verdict) = &rejection.reason {
            moves.push(JudgedMove {
                method: Method::SingleNodeConsolidation,
                candidates: vec![rejection.name.clone()],
                nodepool: verdict.nodepool.clone(),
                policy: ConsolidationPolicy::Balanced,
                score: Some(verdict.clone()),
            });
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;
    use crate::disruption::command::Decision;
    use crate::disruption::consolidation::single_node;
    use crate::disruption::score::BALANCED_THRESHOLD;
    use crate::disruption::testkit::{World, node, pod, pool};

    fn balanced_pool() -> Vec<karpenter_api::NodePool> {
        vec![pool(
            "default",
            &["on-demand"],
            json!({"disruption": {"consolidateAfter": "0s", "consolidationPolicy": "Balanced",
                                  "budgets": [{"nodes": "100%"}]}}),
        )]
    }

    /// Four medium nodes ($0.2/h), each with `per_node` pods of 1 cpu (1 on the last one).
    fn cluster(pools: Vec<karpenter_api::NodePool>, per_node: usize) -> World {
        let mut nodes = Vec::new();
        let mut pods = Vec::new();
        for n in 0..4 {
            let name = format!("m{n}");
            nodes.push(node(&name, "medium.4x", "on-demand", "default"));
            let count = if n == 3 { 1 } else { per_node };
            for p in 0..count {
                pods.push(pod(&format!("{name}-p{p}"), &name, "1"));
            }
        }
        World::new(pools, nodes, pods)
    }

    #[test]
    fn a_balanced_pool_deletes_a_node_worth_its_disruption() {
        // Pods: 3 + 3 + 3 + 1; cost 0.8, disruption 4 + 4 + 4 + 2 = 14. Deleting m3 (its pod fits
        // on another node) saves 0.2 for 2: (0.2/0.8)/(2/14) = 1.75.
        let world = cluster(balanced_pool(), 3);
        let input = world.input();
        let candidate_names = ["m3"];
        let (found, _) = crate::disruption::candidates::candidates(
            &world.state,
            world.now,
            crate::disruption::candidates::DisruptionClass::Graceful,
            &world.types,
        );
        let picked: Vec<&Candidate<'_>> = found
            .iter()
            .filter(|c| candidate_names.contains(&c.name().as_str()))
            .collect();
        let totals = pool_totals(&input, "default");
        assert!((totals.cost - 0.8).abs() < 1e-9, "{totals:?}");
        assert!((totals.disruption - 14.0).abs() < 1e-9, "{totals:?}");
        approve(&input, &picked, 0.2).unwrap();
        // The same node replaced by one saving 2 cents: (0.02/0.8)/(2/14) = 0.175 < 0.5.
        let rejected = approve(&input, &picked, 0.02).unwrap_err();
        assert!(
            rejected.to_string().contains("Balanced") && rejected.to_string().contains("< 0.50"),
            "{rejected}"
        );
        let mut blocked = BTreeMap::new();
        let commands = single_node(&input, &mut blocked);
        assert_eq!(commands.len(), 1, "{blocked:?}");
        assert_eq!(commands[0].decision(), Decision::Delete);
    }

    #[test]
    fn a_balanced_pool_refuses_a_replacement_that_saves_too_little_for_its_disruption() {
        // One big node ($0.4/h) with 3 busy cpu among small pods, in a pool of two big nodes:
        // replacing it by a medium ($0.2/h) saves 0.2 of 0.8 (25 %) but moves 7 of 9 disruption
        // (78 %): score 0.32, refused; WhenEmptyOrUnderutilized replaces it.
        let nodes = || {
            vec![
                node("big", "big.8x", "on-demand", "default"),
                node("full", "big.8x", "on-demand", "default"),
            ]
        };
        let pods = || {
            let mut pods: Vec<_> = (0..6)
                .map(|i| pod(&format!("b{i}"), "big", "500m"))
                .collect();
            pods.push(pod("f0", "full", "8"));
            pods
        };
        let world = World::new(balanced_pool(), nodes(), pods());
        let mut blocked = BTreeMap::new();
        let commands = single_node(&world.input(), &mut blocked);
        assert!(commands.is_empty(), "{commands:?}");
        let reason = blocked.get("big").unwrap().reason.to_string();
        assert!(reason.contains("Balanced"), "{reason}");

        let plain = World::new(
            vec![pool("default", &["on-demand"], json!({}))],
            nodes(),
            pods(),
        );
        let mut blocked = BTreeMap::new();
        let commands = single_node(&plain.input(), &mut blocked);
        assert_eq!(commands.len(), 1, "{blocked:?}");
        assert_eq!(commands[0].decision(), Decision::Replace);
    }

    #[test]
    fn a_node_even_a_delete_of_which_fails_is_skipped_before_simulating() {
        // Four medium nodes ($0.2/h): `heavy` runs 20 small pods, the others one each. Pool
        // disruption 21 + 3 × 2 = 27; deleting `heavy` saves 25 % of the cost for 78 % of the
        // disruption: 0.32 < 0.5, so no move of it can pass — while a light node's delete
        // (25 % for 7 %) scores 3.4.
        let mut nodes = vec![node("heavy", "medium.4x", "on-demand", "default")];
        let mut pods: Vec<_> = (0..20)
            .map(|i| pod(&format!("h{i}"), "heavy", "100m"))
            .collect();
        for n in 0..3 {
            let name = format!("light{n}");
            nodes.push(node(&name, "medium.4x", "on-demand", "default"));
            pods.push(pod(&format!("{name}-p"), &name, "100m"));
        }
        let world = World::new(balanced_pool(), nodes, pods);
        let input = world.input();
        let mut blocked = BTreeMap::new();
        let workable = crate::disruption::consolidation::evaluate_each(&input, &mut blocked);
        let reason = &blocked.get("heavy").unwrap().reason;
        let BlockReason::BalancedDeleteWouldNotPass(verdict) = reason else {
            panic!("{reason:?}");
        };
        assert!(
            (verdict.score - (0.25 / (21.0 / 27.0))).abs() < 1e-9,
            "{verdict:?}"
        );
        assert!(
            reason.to_string().contains("even deleting the node"),
            "{reason}"
        );
        // What the skip saves is a simulation whose delete the policy would refuse anyway.
        let (found, _) = crate::disruption::candidates::candidates(
            &world.state,
            world.now,
            crate::disruption::candidates::DisruptionClass::Graceful,
            &world.types,
        );
        let heavy: Vec<&Candidate<'_>> = found.iter().filter(|c| c.name() == "heavy").collect();
        let refused = approve(&input, &heavy, 0.2).unwrap_err();
        assert_eq!(refused, BlockReason::BalancedScoreTooLow(verdict.clone()));
        // The light nodes are still judged, and each can go.
        assert_eq!(workable.len(), 3, "{blocked:?}");
        assert!(
            workable
                .iter()
                .all(|c| c.candidates[0].name.starts_with("light"))
        );
    }

    #[test]
    fn a_pass_returns_the_scores_of_the_moves_it_judged() {
        // Approved: consolidation of the 3 + 3 + 3 + 1 pool; its command carries the score.
        let world = cluster(balanced_pool(), 3);
        let pass = crate::disruption::decide(&world.input());
        assert!(
            pass.method
                .is_some_and(|m| m.reason() == crate::disruption::DisruptionReason::Underutilized)
        );
        let command = &pass.commands[0];
        assert_eq!(command.balanced_scores.len(), 1);
        assert_eq!(pass.moves.len(), 1, "one pool, one move: {:?}", pass.moves);
        let approved = &pass.moves[0];
        let names: Vec<String> = command.candidates.iter().map(|c| c.name.clone()).collect();
        assert_eq!(approved.candidates, names);
        assert_eq!(approved.method, command.method);
        assert_eq!(approved.policy, ConsolidationPolicy::Balanced);
        assert_eq!(approved.decision(), "approved");
        assert_eq!(approved.score.as_ref(), Some(&command.balanced_scores[0]));
        let summary = command.balanced_scores[0].summary();
        assert!(
            summary.starts_with("score ") && summary.contains(">= threshold 0.50"),
            "{summary}"
        );

        // Rejected: the replacement of `big` (score 0.32) is counted as a rejected move.
        let world = World::new(
            balanced_pool(),
            vec![
                node("big", "big.8x", "on-demand", "default"),
                node("full", "big.8x", "on-demand", "default"),
            ],
            (0..6)
                .map(|i| pod(&format!("b{i}"), "big", "500m"))
                .chain([pod("f0", "full", "8")])
                .collect(),
        );
        let pass = crate::disruption::decide(&world.input());
        assert!(pass.commands.is_empty(), "{:?}", pass.commands);
        let rejected: Vec<_> = pass.moves.iter().filter(|m| !m.approved()).collect();
        assert_eq!(rejected.len(), 1, "{:?}", pass.moves);
        assert_eq!(rejected[0].candidates, ["big"]);
        assert_eq!(rejected[0].decision(), "rejected");
        let score = rejected[0].score.as_ref().unwrap();
        assert!(score.score < BALANCED_THRESHOLD);
        assert!(
            score.summary().contains("< threshold 0.50"),
            "{}",
            score.summary()
        );

        // Other policies are counted, unscored.
        let plain = cluster(vec![pool("default", &["on-demand"], json!({}))], 3);
        let pass = crate::disruption::decide(&plain.input());
        assert_eq!(pass.moves.len(), 1, "{:?}", pass.moves);
        assert_eq!(
            pass.moves[0].policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert!(pass.moves[0].score.is_none() && pass.moves[0].approved());
    }
}
