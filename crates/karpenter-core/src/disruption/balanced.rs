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

use super::candidates::{BlockReason, Candidate, OfferingCatalog, eviction_cost};
use super::command::DisruptionInput;
use crate::provisioning::reschedulable::moves_with_its_node;

/// Upstream's `k`: a move must recover at least 1/k of the cost share it disrupts.
pub const BALANCED_K: f64 = 2.0;

/// The score a move needs: 1/k.
pub const BALANCED_THRESHOLD: f64 = 1.0 / BALANCED_K;

/// A NodePool's hourly cost and disruption cost, over all its nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolTotals {
    pub cost: f64,
    pub disruption: f64,
}

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

/// The Balanced score of a move (see the module docs).
pub fn score(savings: f64, pool_cost: f64, move_disruption: f64, pool_disruption: f64) -> f64 {
    if savings.is_nan() || savings <= 0.0 || pool_cost.is_nan() || pool_cost <= 0.0 {
        return 0.0;
    }
    if move_disruption.is_nan() || move_disruption <= 0.0 {
        return f64::INFINITY;
    }
    if pool_disruption.is_nan() || pool_disruption <= 0.0 {
        return 0.0;
    }
    (savings / pool_cost) / (move_disruption / pool_disruption)
}

/// Approves a consolidation move of `candidates` saving `savings` per hour, or says which
/// Balanced pool rejects it and why. Moves touching no Balanced pool are always approved.
pub fn approve(
    input: &DisruptionInput<'_>,
    candidates: &[&Candidate<'_>],
    savings: f64,
) -> Result<(), BlockReason> {
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
    if balanced.is_empty() {
        return Ok(());
    }
    let total_price: f64 = candidates.iter().filter_map(|c| c.price).sum();
    for (pool, (price, move_disruption)) in balanced {
        let share = if total_price > 0.0 {
            price / total_price
        } else {
            1.0 / candidates.len().max(1) as f64
        };
        let pool_savings = savings * share;
        let totals = pool_totals(input, &pool);
        let pool_cost = if totals.cost > 0.0 {
            totals.cost
        } else {
            price
        };
        let value = score(pool_savings, pool_cost, move_disruption, totals.disruption);
        if value < BALANCED_THRESHOLD {
            return Err(BlockReason::BalancedScoreTooLow {
                nodepool: pool,
                score: value,
                savings: pool_savings,
                pool_cost,
                move_disruption,
                pool_disruption: totals.disruption,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;
    use crate::disruption::command::Decision;
    use crate::disruption::consolidation::single_node;
    use crate::disruption::testkit::{World, node, pod, pool};

    #[test]
    fn the_score_is_the_savings_share_over_the_disruption_share() {
        // 10 nodes at $1/h, 5 pods each: cost 10, disruption 10 × (1 + 5) = 60.
        let delete_one = score(1.0, 10.0, 6.0, 60.0);
        assert!((delete_one - 1.0).abs() < 1e-12);
        let cheaper_by_20_cents = score(0.2, 10.0, 6.0, 60.0);
        assert!((cheaper_by_20_cents - 0.2).abs() < 1e-12);
        assert!(delete_one >= BALANCED_THRESHOLD && cheaper_by_20_cents < BALANCED_THRESHOLD);
        // Exactly 1/k passes: savings of half the disrupted share.
        assert!((score(0.5, 10.0, 6.0, 60.0) - BALANCED_THRESHOLD).abs() < 1e-12);
        assert_eq!(score(0.0, 10.0, 6.0, 60.0), 0.0);
        assert_eq!(score(-1.0, 10.0, 6.0, 60.0), 0.0);
        assert_eq!(score(1.0, 10.0, 0.0, 60.0), f64::INFINITY);
        assert_eq!(score(f64::NAN, 10.0, 6.0, 60.0), 0.0);
    }

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
}
