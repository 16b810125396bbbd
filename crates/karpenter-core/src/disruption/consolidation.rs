//! Consolidation (upstream `consolidation.go`, `multinodeconsolidation.go`,
//! `singlenodeconsolidation.go`, karpenter-core §4.6–§4.8): remove nodes whose pods fit
//! elsewhere, or replace them with one strictly cheaper node.
//!
//! Upstream bounds the search by wall time (single 3 min, multi 1 min). Here the bounds are
//! counts, so a pass is deterministic: single-node evaluates every candidate until one works,
//! multi-node binary-searches prefixes of at most [`MAX_MULTI_CANDIDATES`] candidates. Each
//! evaluation is one simulation over the pass's shared scheduler input ([`Simulator`]).
//!
//! Moves touching a NodePool with the `Balanced` policy must also pass its score (§4.9,
//! [`super::balanced`]).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use karpenter_api::v1::{ConsolidationPolicy, NodeSelectorRequirementWithMinValues};
use karpenter_api::well_known::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT,
    ZONE_LABEL,
};
use kube_core::ResourceExt;

use super::balanced;
use super::budgets::DisruptionReason;
use super::candidates::{BlockReason, Candidate, DisruptionClass, Rejection};
use super::command::{Command, DisruptedNode, DisruptionInput, Method};
use super::emptiness::consolidation_block;
use super::facts::{Classified, PassFacts};
use super::simulate::Simulator;
use crate::instance_type::InstanceType;
use crate::provisioning::nodeclaim;
use crate::requirements::Requirements;
use crate::resources::ResourceList;
use crate::scheduling::{InstanceTypeOption, NewNodeClaim};

/// Upstream `MinInstanceTypesForSpotToSpotConsolidation`.
pub const MIN_SPOT_TO_SPOT_OPTIONS: usize = 15;
/// Upstream's cap on the candidates one multi-node command considers.
pub const MAX_MULTI_CANDIDATES: usize = 100;

const SPOT: &str = CAPACITY_TYPE_SPOT;
const ON_DEMAND: &str = CAPACITY_TYPE_ON_DEMAND;
const RESERVED: &str = CAPACITY_TYPE_RESERVED;
/// The capacity type a launch falls back through, cheapest commitment first (upstream
/// `WorstLaunchPrice`).
const LAUNCH_ORDER: [&str; 3] = [RESERVED, SPOT, ON_DEMAND];

/// The candidates consolidation may consider, best savings ratio first; every other node that
/// is not empty gets its reason in `blocked`.
pub fn consolidation_candidates<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, Rejection>,
) -> Vec<Candidate<'a>> {
    let input = facts.input();
    let Classified { found, rejected } = facts.candidates(DisruptionClass::Graceful).into_owned();
    for rejection in rejected {
        blocked.insert(rejection.name.clone(), rejection);
    }
    let mut out = Vec::new();
    for candidate in found {
        // Empty nodes are emptiness's, so the `Empty` budget applies to them.
        if candidate.is_empty() {
            continue;
        }
        let block = consolidation_block(&candidate, input.now).or_else(|| {
            if candidate.nodepool.consolidation_policy() == ConsolidationPolicy::WhenEmpty {
                Some(BlockReason::WhenEmptyPolicy(candidate.nodepool_name()))
            } else if candidate.price.is_none() {
                Some(BlockReason::UnknownPrice)
            } else {
                None
            }
        });
        match block {
            Some(reason) => {
                blocked.insert(candidate.name(), reject(&candidate, reason));
            }
            None => out.push(candidate),
        }
    }
    out.sort_by(|a, b| {
        b.savings_ratio()
            .partial_cmp(&a.savings_ratio())
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.name().cmp(&b.name()))
    });
    out
}

fn reject(candidate: &Candidate<'_>, reason: BlockReason) -> Rejection {
    Rejection {
        name: candidate.name(),
        nodepool: Some(candidate.nodepool_name()),
        reason,
    }
}

fn budget_block(candidate: &Candidate<'_>) -> BlockReason {
    BlockReason::BudgetExhausted {
        nodepool: candidate.nodepool_name(),
        reason: DisruptionReason::Underutilized.to_string(),
    }
}

/// `Method::SingleNodeConsolidation`: the first candidate (best savings first) that can be
/// deleted or replaced by one cheaper node; one command per pass.
pub fn single_node<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, Rejection>,
) -> Vec<Command> {
    single_node_commands(facts, blocked, true)
}

/// Every consolidation candidate judged on its own, as single-node consolidation would judge it,
/// without stopping at the first that works: the command each workable candidate would get
/// (each computed against the cluster as it is, so they are alternatives, not a plan), and
/// every other candidate's reason in `blocked`. What `karpenter bench disruption` times as "a
/// pass that evaluates every candidate".
pub fn evaluate_each<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, Rejection>,
) -> Vec<Command> {
    single_node_commands(facts, blocked, false)
}

fn single_node_commands<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, Rejection>,
    first_only: bool,
) -> Vec<Command> {
    let found = consolidation_candidates(facts, blocked);
    if found.is_empty() {
        return Vec::new();
    }
    let input = facts.input();
    let budgets = facts.budgets(DisruptionReason::Underutilized);
    let balanced_totals = balanced::balanced_pool_totals(input, &found);
    let mut simulator = Simulator::for_consolidation(input);
    let bounds = Bounds::new(input, &simulator);
    // One engine for every candidate worth simulating (within budget, not ruled out by the
    // Balanced policy or the bounds): each simulation then costs its own pods, not a rebuild
    // of the cluster.
    let worth: Vec<&Candidate<'_>> = found
        .iter()
        .filter(|c| budgets.allowed(&c.nodepool_name()) > 0)
        .filter(|c| balanced::even_a_delete_fails(c, &balanced_totals).is_none())
        .filter(|c| bounds.hopeless(&simulator, c).is_none())
        .collect();
    if worth.len() > 1 {
        simulator.prepare(&worth);
    }
    let mut commands = Vec::new();
    for candidate in &found {
        if budgets.allowed(&candidate.nodepool_name()) == 0 {
            blocked.insert(candidate.name(), reject(candidate, budget_block(candidate)));
            continue;
        }
        if let Some(reason) = balanced::even_a_delete_fails(candidate, &balanced_totals) {
            blocked.insert(candidate.name(), reject(candidate, reason));
            continue;
        }
        if let Some(reason) = bounds.hopeless(&simulator, candidate) {
            blocked.insert(candidate.name(), reject(candidate, reason));
            continue;
        }
        match compute(
            input,
            &simulator,
            &[candidate],
            Method::SingleNodeConsolidation,
        ) {
            Ok(command) => {
                commands.push(command);
                if first_only {
                    break;
                }
            }
            Err(reason) => {
                blocked.insert(candidate.name(), reject(candidate, reason));
            }
        }
    }
    commands
}

/// `Method::MultiNodeConsolidation`: the largest prefix of the candidates (best savings first,
/// within budgets, at most [`MAX_MULTI_CANDIDATES`]) that can be deleted or replaced by one
/// cheaper node, found by binary search as upstream `firstNConsolidationOption`.
pub fn multi_node<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, Rejection>,
) -> Vec<Command> {
    let found = consolidation_candidates(facts, blocked);
    let input = facts.input();
    let mut budgets = facts.budgets(DisruptionReason::Underutilized).into_owned();
    let within_budget: Vec<&Candidate<'_>> = found
        .iter()
        .filter(|c| budgets.take(&c.nodepool_name()))
        .collect();
    if within_budget.len() < 2 {
        return Vec::new();
    }
    let mut simulator = Simulator::for_consolidation(input);
    let max = within_budget.len().min(MAX_MULTI_CANDIDATES);
    simulator.prepare(&within_budget[..within_budget.len().min(max + 1)]);
    let mut lo = 1;
    let mut hi = if within_budget.len() <= max {
        within_budget.len() - 1
    } else {
        max
    };
    let mut best = None;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        let prefix = &within_budget[..=mid];
        match compute(input, &simulator, prefix, Method::MultiNodeConsolidation) {
            Ok(command) => {
                best = Some(command);
                lo = mid + 1;
            }
            Err(_) => hi = mid - 1,
        }
    }
    best.into_iter().collect()
}

/// Cheap necessary conditions checked before simulating a single candidate, so a pass over a
/// well-packed cluster does not simulate every node: its pods must fit in the free capacity of
/// the other nodes (all of it together), or in one instance type (its own included) whose
/// cheapest offering its NodePool allows is cheaper than the node. Both are upper bounds (pending
/// pods, daemonsets and pod constraints are ignored), so a candidate they reject would fail the
/// simulation too.
struct Bounds {
    free: BTreeMap<String, Option<ResourceList>>,
    total_free: Option<ResourceList>,
    /// (allocatable, cheapest price the pool allows) of every instance type of dynamic pools.
    offers: Vec<(ResourceList, f64)>,
}

impl Bounds {
    fn new(input: &DisruptionInput<'_>, simulator: &Simulator<'_>) -> Self {
        let free = simulator.free_capacity();
        let total_free = free.values().try_fold(ResourceList::new(), |mut acc, f| {
            acc.add(f.as_ref()?);
            Some(acc)
        });
        let mut offers = Vec::new();
        for pool in input.state.nodepools() {
            if pool.is_static() || pool.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(types) = input.instance_types.get(&pool.name_any()) else {
                continue;
            };
            let requirements = Requirements::from_node_selector_with_min_values(
                &pool.spec.template.spec.requirements,
            )
            .unwrap_or_default();
            let capacity_types = requirements.get(&CAPACITY_TYPE_LABEL.to_string());
            for it in types {
                let cheapest = it
                    .available_offerings()
                    .filter(|o| capacity_types.is_none_or(|r| r.has(&o.capacity_type)))
                    .map(|o| o.price)
                    .min_by(f64::total_cmp);
                if let Some(price) = cheapest {
                    offers.push((it.allocatable(), price));
                }
            }
        }
        Bounds {
            free,
            total_free,
            offers,
        }
    }

    fn hopeless<'c>(
        &self,
        simulator: &Simulator<'c>,
        candidate: &Candidate<'c>,
    ) -> Option<BlockReason> {
        let price = candidate.price?;
        let mut need = ResourceList::new();
        for p in simulator.pods_of(candidate) {
            need.add(&crate::pod::effective_requests(p).ok()?);
        }
        let mut others = self.total_free.clone()?;
        if let Some(own) = self.free.get(&candidate.name()) {
            others.sub_floor_zero(own.as_ref()?);
        }
        if others.fits(&need) {
            return None;
        }
        // The node's own type stays in: one of its cheaper offerings (spot, a reservation) may
        // replace it.
        let fitting = self
            .offers
            .iter()
            .filter(|(allocatable, _)| allocatable.fits(&need))
            .map(|(_, p)| *p);
        let cheapest = fitting.min_by(f64::total_cmp);
        match cheapest {
            Some(cheapest) if cheapest < price => None,
            cheapest => Some(BlockReason::NoCheaperReplacement { cheapest, price }),
        }
    }
}

/// Upstream `computeConsolidation` for `candidates` together: delete when their pods fit on the
/// remaining nodes, replace when exactly one new node strictly cheaper than them all takes the
/// pods; otherwise the reason.
pub fn compute<'c>(
    input: &DisruptionInput<'_>,
    simulator: &Simulator<'c>,
    candidates: &[&Candidate<'c>],
    method: Method,
) -> Result<Command, BlockReason> {
    let simulation = simulator.run(candidates);
    if let Some(first) = simulation.first_unplaced_candidate_pod() {
        return Err(BlockReason::PodsWouldNotFit(first));
    }
    if let Some(node) = simulation.uninitialized_destination() {
        return Err(BlockReason::UninitializedDestination(node));
    }
    let price: f64 = candidates.iter().filter_map(|c| c.price).sum();
    let nodes: Vec<DisruptedNode> = candidates
        .iter()
        .map(|c| DisruptedNode::from_candidate(c))
        .collect();
    let new_claims = simulation.new_node_claims();
    let claim = match new_claims {
        [] => {
            let balanced_scores = balanced::approve(input, candidates, price)?;
            return Ok(Command {
                method,
                reason: DisruptionReason::Underutilized,
                candidates: nodes,
                replacements: Vec::new(),
                savings_per_hour: price,
                balanced_scores,
            });
        }
        [claim] => claim,
        several => return Err(BlockReason::TooManyReplacements(several.len())),
    };
    let single = method == Method::SingleNodeConsolidation;
    let (replacement, cheapest) = cheaper_replacement(input, candidates, claim, price, single)?;
    let balanced_scores = balanced::approve(input, candidates, price - cheapest)?;
    let pool = input
        .state
        .nodepool(&replacement.node_pool)
        .ok_or_else(|| BlockReason::NodePoolNotFound(replacement.node_pool.clone()))?;
    Ok(Command {
        method,
        reason: DisruptionReason::Underutilized,
        candidates: nodes,
        replacements: vec![nodeclaim::build(&replacement, pool)],
        savings_per_hour: price - cheapest,
        balanced_scores,
    })
}

/// The replacement restricted to options strictly cheaper than `price` (the candidates' total)
/// and than the cheapest candidate of the same instance type (upstream
/// `filterOutSameInstanceType`), still meeting `minValues`, and with the capacity-type rules of
/// §4.6 (reserved capacity first, spot-to-spot behind its gate and, for one node, 15 options).
/// Returns it with the worst launch price of its cheapest option.
fn cheaper_replacement(
    input: &DisruptionInput<'_>,
    candidates: &[&Candidate<'_>],
    claim: &NewNodeClaim,
    price: f64,
    single: bool,
) -> Result<(NewNodeClaim, f64), BlockReason> {
    let requirements =
        Requirements::from_node_selector_with_min_values(&claim.requirements).unwrap_or_default();
    let capacity_types = requirements.get(&CAPACITY_TYPE_LABEL.to_string());
    let allows = |ct: &str| capacity_types.is_none_or(|r| r.has(&ct.to_string()));
    let zones = requirements.get(&ZONE_LABEL.to_string());
    let catalog: BTreeMap<&str, &InstanceType> = input
        .instance_types
        .get(&claim.node_pool)
        .map(|types| {
            types
                .iter()
                .map(|t| (t.name.as_str(), t.as_ref()))
                .collect()
        })
        .unwrap_or_default();
    let offers = |option: &InstanceTypeOption, ct: &str| -> Vec<f64> {
        catalog
            .get(option.name.as_ref())
            .map(|it| {
                it.available_offerings()
                    .filter(|o| zones.is_none_or(|z| z.has(&o.zone)))
                    .filter(|o| o.capacity_type == ct)
                    .map(|o| o.price)
                    .collect()
            })
            .unwrap_or_default()
    };
    // A launch takes reserved capacity whenever one of the options offers it (as the provisioner's
    // launches do), so such a replacement is priced, and pinned, as reserved only (upstream's
    // scheduler restricts a NodeClaim holding reservations to them).
    let reserved_only = allows(RESERVED)
        && claim
            .instance_types
            .iter()
            .any(|o| !offers(o, RESERVED).is_empty());
    let all_spot = candidates.iter().all(|c| c.capacity_type == Some(SPOT));
    let spot_to_spot = !reserved_only && all_spot && allows(SPOT);
    if spot_to_spot && !input.options.spot_to_spot_consolidation {
        return Err(BlockReason::SpotToSpotDisabled);
    }
    // Prices are judged as spot whenever spot is allowed, so the replacement must launch as
    // spot: falling back to on-demand could cost more than the candidates.
    let restrict_to_spot = !reserved_only && allows(SPOT) && (spot_to_spot || allows(ON_DEMAND));
    let launch_order: &[&str] = if reserved_only {
        &[RESERVED]
    } else if restrict_to_spot {
        &[SPOT]
    } else {
        &LAUNCH_ORDER
    };
    let worst_price = |option: &InstanceTypeOption| -> Option<f64> {
        launch_order
            .iter()
            .filter(|ct| allows(ct))
            .find_map(|ct| offers(option, ct).into_iter().max_by(f64::total_cmp))
    };
    let mut priced: Vec<(InstanceTypeOption, f64)> = claim
        .instance_types
        .iter()
        .filter_map(|o| Some((o.clone(), worst_price(o)?)))
        .collect();
    priced.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.name.cmp(&b.0.name)));
    let cap = same_type_price_cap(candidates, claim, price);
    let cheapest_any = priced.first().map(|(_, p)| *p);
    let mut kept: Vec<(InstanceTypeOption, f64)> =
        priced.into_iter().filter(|(_, p)| *p < cap).collect();
    if kept.is_empty() {
        return Err(BlockReason::NoCheaperReplacement {
            cheapest: cheapest_any,
            price: cap,
        });
    }
    let min_values = claim.instance_type_min_values.unwrap_or(0);
    let needed = usize::try_from(min_values).unwrap_or(0);
    if kept.len() < needed {
        return Err(BlockReason::MinValuesAfterPriceFilter {
            kept: kept.len(),
            min_values,
        });
    }
    if spot_to_spot && single {
        if kept.len() < MIN_SPOT_TO_SPOT_OPTIONS {
            return Err(BlockReason::SpotToSpotTooFewOptions(kept.len()));
        }
        // Launching any of the 15 cheapest cannot itself be consolidated right away.
        kept.truncate(MIN_SPOT_TO_SPOT_OPTIONS.max(needed));
    }
    let cheapest = kept.first().map_or(price, |(_, p)| *p);
    let mut replacement = claim.clone();
    replacement.instance_types = kept.into_iter().map(|(o, _)| o).collect::<Vec<_>>().into();
    let pinned = if reserved_only {
        Some(RESERVED)
    } else if restrict_to_spot {
        Some(SPOT)
    } else {
        None
    };
    if let Some(capacity_type) = pinned {
        replacement
            .requirements
            .retain(|r| r.key != CAPACITY_TYPE_LABEL);
        replacement
            .requirements
            .push(NodeSelectorRequirementWithMinValues {
                key: CAPACITY_TYPE_LABEL.to_string(),
                operator: "In".to_string(),
                values: vec![capacity_type.to_string()],
                min_values: None,
            });
        replacement.requirements.sort_by(|a, b| a.key.cmp(&b.key));
    }
    Ok((replacement, cheapest))
}

/// The price every replacement option must be strictly below: the candidates' total, and, when
/// an option is the instance type of a candidate, that candidate's price (the cheapest such).
/// Replacing several nodes by one of their own type is deleting all but one of them with more
/// pods moved, so only a strictly cheaper option is a real replacement (upstream
/// `filterOutSameInstanceType`); otherwise the search falls back to fewer candidates.
fn same_type_price_cap(candidates: &[&Candidate<'_>], claim: &NewNodeClaim, price: f64) -> f64 {
    let options: BTreeSet<&str> = claim
        .instance_types
        .iter()
        .map(|o| o.name.as_ref())
        .collect();
    candidates
        .iter()
        .filter(|c| c.instance_type.is_some_and(|t| options.contains(t)))
        .filter_map(|c| c.price)
        .fold(price, f64::min)
}

#[cfg(test)]
mod rules_tests;
#[cfg(test)]
mod tests;
