//! `CostOptimal` multi-node consolidation's second search: the most wasteful candidates,
//! re-planned together ([`grown_group`]).
//!
//! A node's waste is its price less what its pods are worth at the dual prices of its
//! NodePool's lower bound ([`crate::scheduling::bound`]): the cheapest fractional mix of the
//! pool's instance types covering the cpu, memory and pod count of every candidate's pods. By LP
//! duality those pods are worth exactly the bound in total, and no instance type is worth more
//! than its price, so every node's waste is its share of the pool's cost above the bound, ≥ 0
//! (less any daemonset overhead, which the ranking ignores).
//!
//! Upstream's order (savings per unit of disruption) picks cheap-to-move nodes first. On a
//! cluster of mixed pods, local moves stop at nodes each nearly full in one resource but of the
//! wrong shape (cpu-hungry pods on memory-optimised nodes, one large pod on a node twice its
//! size); no prefix of that order holds the complementary nodes together. Re-planning the
//! most wasteful nodes together does: the pods the other nodes' room does not take go into fresh
//! bins shaped for them.
//!
//! The re-plan places the moved pods as the provisioner will once the candidates drain: on the
//! free room of the nodes that stay first, in new nodes only for the rest (the simulation every
//! consolidation command runs). Re-planning into new nodes only, as this search once did, let a
//! command launch a replacement for pods that fit on a node staying; the provisioner then put
//! them there, the replacement went empty, and the node whose room took them (which a delete
//! would have removed) stayed: on a found cluster the default converged at twice `Upstream`'s
//! cost (`properties::the_default_policy_converges_no_dearer_than_upstream_on_the_found_cluster`).

use std::collections::BTreeMap;

use super::super::budgets::BudgetMapping;
use super::super::candidates::Candidate;
use super::super::command::DisruptionInput;
use super::super::command::{Command, Method};
use super::super::simulate::Simulator;
use super::replacements::MIN_SAVINGS_FRACTION;
use super::{MAX_MULTI_CANDIDATES, compute_as_planned, pool_offers};
use crate::pod::effective_requests;
use crate::resources::ResourceList;
use crate::scheduling::bound::{Column, RESOURCES, cheapest_mix};

/// A candidate and its waste (USD/hour).
pub(super) struct Wasteful<'a, 'c> {
    pub candidate: &'a Candidate<'c>,
    /// `f64::INFINITY` when it cannot be judged: such a candidate is never ruled out.
    pub waste: f64,
}

/// `candidates` (all of them, in no particular order) most wasteful first; ties by name.
/// Candidates whose waste cannot be judged (no price, a pod whose requests cannot be read, a
/// pool without a bound) come last, in their given order.
pub(super) fn most_wasteful_first<'c, 'a>(
    input: &DisruptionInput<'_>,
    simulator: &Simulator<'c>,
    candidates: &[&'a Candidate<'c>],
) -> Vec<Wasteful<'a, 'c>> {
    let rows: Vec<Option<[f64; RESOURCES]>> =
        candidates.iter().map(|c| demand_of(simulator, c)).collect();
    let mut demand: BTreeMap<String, [f64; RESOURCES]> = BTreeMap::new();
    for (candidate, row) in candidates.iter().zip(&rows) {
        let Some(row) = row else { continue };
        let total = demand.entry(candidate.nodepool_name()).or_default();
        for (sum, amount) in total.iter_mut().zip(row) {
            *sum += amount;
        }
    }
    let offers = pool_offers(input);
    let duals: BTreeMap<String, [f64; RESOURCES]> = demand
        .into_iter()
        .filter_map(|(pool, demand)| {
            let columns: Vec<Column> = offers
                .get(&pool)?
                .iter()
                .map(|(allocatable, price)| Column {
                    price: *price,
                    room: row(allocatable),
                })
                .collect();
            Some((pool, cheapest_mix(&columns, demand)?.duals))
        })
        .collect();
    let mut judged: Vec<(f64, &'a Candidate<'c>)> = Vec::new();
    let mut unjudged = Vec::new();
    for (candidate, row) in candidates.iter().zip(rows) {
        let waste = (|| {
            let duals = duals.get(&candidate.nodepool_name())?;
            let worth: f64 = row?.iter().zip(duals).map(|(a, d)| a * d).sum();
            Some(candidate.price? - worth)
        })();
        match waste {
            Some(waste) => judged.push((waste, candidate)),
            None => unjudged.push(*candidate),
        }
    }
    judged.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| a.1.name().cmp(&b.1.name()))
    });
    let unjudged = unjudged.into_iter().map(|candidate| Wasteful {
        candidate,
        waste: f64::INFINITY,
    });
    judged
        .into_iter()
        .map(|(waste, candidate)| Wasteful { candidate, waste })
        .chain(unjudged)
        .collect()
}

/// The bound's rows of the pods the simulation would move off `candidate`.
fn demand_of<'c>(simulator: &Simulator<'c>, candidate: &Candidate<'c>) -> Option<[f64; RESOURCES]> {
    let mut total = ResourceList::new();
    let pods = simulator.pods_of(candidate);
    for pod in &pods {
        total.add(&effective_requests(pod).ok()?);
    }
    let mut out = row(&total);
    // Every pod takes one slot, whether or not it requests `pods`.
    out[2] = pods.len() as f64;
    Some(out)
}

/// cpu (cores), memory (bytes), pods: the bound's rows in the units of [`ResourceList`].
fn row(resources: &ResourceList) -> [f64; RESOURCES] {
    [
        resources.get("cpu").as_f64_units(),
        resources.get("memory").as_f64_units(),
        resources.get("pods").as_f64_units(),
    ]
}

/// [`grown_group`] once per zone, along the candidates of that zone only (in `order`'s order),
/// and the command of the zone that saves most per hour; `None` when the candidates are all
/// in one zone (the whole order is that zone's) or no zone's group works.
///
/// Waste comes in complementary shapes: a cpu-optimised node full of cpu-hungry pods wastes
/// memory, a memory-optimised one full of memory-hungry replicas wastes cpu, and re-planning
/// the two together fills balanced nodes. The most wasteful nodes of the whole cluster are the
/// large ones of every zone, though, and a zone-spread replica cannot leave its zone: a window
/// over them re-plans each zone's large node without the small nodes of the same zone that
/// would complement it, and saves nothing. Within one zone the window takes the large node and
/// its zone's small ones together.
pub(super) fn grown_group_per_zone<'c>(
    input: &DisruptionInput<'_>,
    simulator: &mut Simulator<'c>,
    order: &[Wasteful<'_, 'c>],
    budgets: &BudgetMapping,
) -> Option<Command> {
    let mut zones: Vec<&str> = order.iter().filter_map(|w| w.candidate.zone).collect();
    zones.sort_unstable();
    zones.dedup();
    if zones.len() < 2 {
        return None;
    }
    let mut best: Option<Command> = None;
    for zone in zones {
        let in_zone: Vec<Wasteful<'_, 'c>> = order
            .iter()
            .filter(|w| w.candidate.zone == Some(zone))
            .map(|w| Wasteful {
                candidate: w.candidate,
                waste: w.waste,
            })
            .collect();
        if in_zone.len() < 2 {
            continue;
        }
        if let Some(command) = grown_group(input, simulator, &in_zone, budgets)
            && best
                .as_ref()
                .is_none_or(|b| command.savings_per_hour > b.savings_per_hour)
        {
            best = Some(command);
        }
    }
    best
}

/// The command for a group of candidates grown along `order` (most wasteful first; the first
/// [`MAX_MULTI_CANDIDATES`] are looked at, one simulation each) within `budgets`.
///
/// Until some group works, the group is a window sliding down the order, as large as the
/// budget allows: pods that re-plan no cheaper on a few nodes may on more, and a node nothing
/// improves (its type already the best for its pods) drops out of the window. Once a group
/// works, a candidate joins only when the command with it saves at least
/// [`MIN_SAVINGS_FRACTION`] of the candidate's price more (the node pays for its own
/// disruption); otherwise it is skipped.
pub(super) fn grown_group<'c>(
    input: &DisruptionInput<'_>,
    simulator: &mut Simulator<'c>,
    order: &[Wasteful<'_, 'c>],
    budgets: &BudgetMapping,
) -> Option<Command> {
    let order = &order[..order.len().min(MAX_MULTI_CANDIDATES)];
    let candidates: Vec<&Candidate<'c>> = order.iter().map(|w| w.candidate).collect();
    simulator.prepare(&candidates);
    // Indices into `order`, ascending (the prepared engine's order).
    let mut group: Vec<usize> = Vec::new();
    let mut best: Option<Command> = None;
    let within_budget = |group: &[usize]| {
        let mut left = budgets.clone();
        group
            .iter()
            .all(|&i| left.take(&order[i].candidate.nodepool_name()))
    };
    let price = |i: usize| order[i].candidate.price.unwrap_or(0.0);
    for next in 0..order.len() {
        let mut trial = group.clone();
        trial.push(next);
        if best.is_none() {
            // No working group yet: a window sliding down the order, as large as the budget.
            while !trial.is_empty() && !within_budget(&trial) {
                trial.remove(0);
            }
        } else if !within_budget(&trial) {
            continue;
        }
        if trial.len() < 2 {
            group = trial;
            continue;
        }
        // No re-plan saves more than the group's waste (replacements cost at least their
        // pods' worth), so a group that cannot reach the saving it needs is not simulated.
        let waste: f64 = trial.iter().map(|&i| order[i].waste).sum();
        let needed = match &best {
            None => trial.iter().map(|&i| price(i)).sum::<f64>() * MIN_SAVINGS_FRACTION,
            Some(b) => b.savings_per_hour + price(next) * MIN_SAVINGS_FRACTION,
        };
        let result = if waste < needed {
            None
        } else {
            let members: Vec<&Candidate<'c>> = trial.iter().map(|&i| candidates[i]).collect();
            compute_as_planned(input, simulator, &members, Method::MultiNodeConsolidation).ok()
        };
        match result {
            Some(command) if command.savings_per_hour >= needed => {
                group = trial;
                best = Some(command);
            }
            // More pods may re-plan cheaper together.
            _ if best.is_none() => group = trial,
            _ => {}
        }
    }
    best
}
