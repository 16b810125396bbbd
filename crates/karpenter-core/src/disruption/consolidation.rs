//! Consolidation (upstream `consolidation.go`, `multinodeconsolidation.go`,
//! `singlenodeconsolidation.go`, karpenter-core §4.6–§4.8): remove nodes whose pods fit
//! elsewhere, or replace them with one strictly cheaper node. Under `PackingPolicy::CostOptimal`
//! (issue 24) a command may launch M ≥ 1 replacements that together save
//! [`MIN_SAVINGS_FRACTION`] ([`replacements`]), and single-node consolidation returns the command
//! with the best [`savings_per_disruption`] instead of the first that works.
//!
//! Upstream bounds the search by wall time (single 3 min, multi 1 min). Here the bounds are
//! counts, so a pass is deterministic: single-node evaluates every candidate until one works,
//! multi-node binary-searches prefixes of at most [`MAX_MULTI_CANDIDATES`] candidates. Each
//! evaluation is one simulation over the pass's shared scheduler input ([`Simulator`]).
//!
//! Moves touching a NodePool with the `Balanced` policy must also pass its score (§4.9,
//! [`super::balanced`]).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use karpenter_api::v1::ConsolidationPolicy;
use karpenter_api::well_known::{CAPACITY_TYPE_LABEL, ZONE_LABEL};
use kube_core::ResourceExt;

use super::balanced;
use super::budgets::DisruptionReason;
use super::candidates::{BlockReason, Candidate, DisruptionClass, Rejection};
use super::command::{Command, DisruptedNode, DisruptionInput, Method};
use super::emptiness::consolidation_block;
use super::facts::{Classified, PassFacts};
use super::simulate::{Simulation, Simulator};
use crate::provisioning::nodeclaim;
use crate::requirements::Requirements;
use crate::resources::ResourceList;
use crate::scheduling::PackingPolicy;
use kube_placement::{Destination, MovedPod};
use replacements::{Allowance, Replacements, cheaper_replacements};

pub use replacements::MIN_SAVINGS_FRACTION;

/// Upstream `MinInstanceTypesForSpotToSpotConsolidation`.
pub const MIN_SPOT_TO_SPOT_OPTIONS: usize = 15;
/// Upstream's cap on the candidates one multi-node command considers.
pub const MAX_MULTI_CANDIDATES: usize = 100;

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

/// `Method::SingleNodeConsolidation`: one command per pass. Under the `Upstream` packing policy
/// the first candidate (best savings ratio first) that can be deleted or replaced by one cheaper
/// node; under `CostOptimal` the command saving the most per unit of disruption
/// ([`savings_per_disruption`]): candidates are tried in the same order until no later one could
/// beat the best found (a candidate's savings ratio is the most any of its commands can reach).
pub fn single_node<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, Rejection>,
) -> Vec<Command> {
    let search = match facts.input().scheduler.packing_policy {
        PackingPolicy::Upstream => Search::First,
        PackingPolicy::CostOptimal => Search::BestPerDisruption,
    };
    single_node_commands(facts, blocked, search)
}

/// How many of the workable candidates single-node consolidation turns into commands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Search {
    /// The first that works (upstream).
    First,
    /// The one with the best [`savings_per_disruption`].
    BestPerDisruption,
    /// Every one ([`evaluate_each`]).
    Each,
}

/// A command's savings per hour per unit of upstream's disruption cost (`1 + Σ eviction cost`
/// of each candidate's pods): how `CostOptimal` ranks consolidation commands. For one candidate
/// it is at most the candidate's savings ratio (a delete saves its whole price).
pub fn savings_per_disruption(command: &Command, candidates: &[&Candidate<'_>]) -> f64 {
    let disruption: f64 = candidates
        .iter()
        .map(|c| c.reschedule_disruption_cost())
        .sum();
    command.savings_per_hour / disruption.max(1.0)
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
    single_node_commands(facts, blocked, Search::Each)
}

fn single_node_commands<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, Rejection>,
    search: Search,
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
        .filter(|c| bounds.hopeless(input, &simulator, c).is_none())
        .collect();
    if worth.len() > 1 {
        simulator.prepare(&worth);
    }
    let mut commands = Vec::new();
    // The best command so far under `BestPerDisruption`, with its savings per disruption.
    let mut best: Option<(Command, f64)> = None;
    // Under `BestPerDisruption`: the first command that works, upstream's choice, which the
    // pass takes instead when it saves more per hour (the guard of issue 35: the default never
    // ends a pass dearer than `Upstream`'s search would).
    let mut first: Option<Command> = None;
    for candidate in &found {
        if best
            .as_ref()
            .is_some_and(|(_, ratio)| candidate.savings_ratio() <= *ratio)
        {
            // Sorted by savings ratio: no candidate from here on can do better.
            break;
        }
        if budgets.allowed(&candidate.nodepool_name()) == 0 {
            blocked.insert(candidate.name(), reject(candidate, budget_block(candidate)));
            continue;
        }
        if let Some(reason) = balanced::even_a_delete_fails(candidate, &balanced_totals) {
            blocked.insert(candidate.name(), reject(candidate, reason));
            continue;
        }
        if let Some(reason) = bounds.hopeless(input, &simulator, candidate) {
            blocked.insert(candidate.name(), reject(candidate, reason));
            continue;
        }
        match compute(
            input,
            &simulator,
            &[candidate],
            Method::SingleNodeConsolidation,
        ) {
            Ok(command) => match search {
                Search::First => {
                    commands.push(command);
                    break;
                }
                Search::Each => commands.push(command),
                Search::BestPerDisruption => {
                    let ratio = savings_per_disruption(&command, &[candidate]);
                    if first.is_none() {
                        first = Some(command.clone());
                    }
                    if best.as_ref().is_none_or(|(_, b)| ratio > *b) {
                        best = Some((command, ratio));
                    }
                }
            },
            Err(reason) => {
                blocked.insert(candidate.name(), reject(candidate, reason));
            }
        }
    }
    commands.extend(match (best, first) {
        (Some((best, _)), Some(first)) if first.savings_per_hour > best.savings_per_hour => {
            Some(first)
        }
        (best, _) => best.map(|(command, _)| command),
    });
    commands
}

/// `Method::MultiNodeConsolidation`: the largest prefix of the candidates (best savings first,
/// within budgets, at most [`MAX_MULTI_CANDIDATES`]) that can be deleted or replaced by one
/// cheaper node, found by binary search as upstream `firstNConsolidationOption`.
///
/// Under `PackingPolicy::CostOptimal` the search also grows a group of the most wasteful
/// candidates ([`waste`]; when no group of the whole cluster works, of one zone) re-planned
/// together (into the other nodes' free room first, then new nodes, as the provisioner will
/// place them), and returns whichever of the two commands saves more per unit of disruption ([`savings_per_disruption`]); the group alone only when it also
/// beats single-node consolidation's best command on that rate (else nothing, and the pass goes
/// on to single-node). A third search ([`batched`]) grows a group along upstream's order,
/// skipping the candidates that do not go with it: upstream's single-node moves in one command,
/// taken over any command saving no more per hour (over single-node's best too).
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
    let first_n = largest_working_prefix(input, &mut simulator, &within_budget);
    if input.scheduler.packing_policy == PackingPolicy::Upstream {
        return first_n.into_iter().collect();
    }
    // Every candidate within budget, in the prefix's order (the prefix search prepared only
    // its first hundred); before the waste search re-prepares the engine for its own order.
    if within_budget.len() > MAX_MULTI_CANDIDATES + 1 {
        simulator.prepare(&within_budget);
    }
    let batched = batched::batched_group(input, &simulator, &within_budget);
    let all: Vec<&Candidate<'_>> = found.iter().collect();
    let by_waste = waste::most_wasteful_first(input, &simulator, &all);
    let budgets = facts.budgets(DisruptionReason::Underutilized);
    // The same search within each zone when the cluster-wide windows find nothing (a search per
    // zone costs as much again per zone: at 1,000 nodes over three zones it tripled the pass).
    let wasteful = waste::grown_group(input, &mut simulator, &by_waste, &budgets)
        .or_else(|| waste::grown_group_per_zone(input, &mut simulator, &by_waste, &budgets));
    let rate = |command: &Command| {
        let disrupted: Vec<&Candidate<'_>> = found
            .iter()
            .filter(|c| command.candidates.iter().any(|d| d.name == c.name()))
            .collect();
        savings_per_disruption(command, &disrupted)
    };
    // Single-node consolidation below builds a simulation of its own: this one's copy of the
    // cluster goes first (at ~900 nodes the two together were the controller's peak memory).
    drop(by_waste);
    drop(simulator);
    // When upstream's search finds nothing the pass would go on to single-node consolidation:
    // its best command is what the other groups must beat.
    let single = match (&first_n, &wasteful, &batched) {
        (None, Some(_), _) | (None, _, Some(_)) => single_node(facts, &mut BTreeMap::new()),
        _ => Vec::new(),
    };
    let single = single.first();
    // The better rate wins unless it saves less per hour than upstream's search (the guard).
    let chosen = match (first_n, wasteful) {
        (Some(a), Some(b)) if rate(&b) > rate(&a) && b.savings_per_hour >= a.savings_per_hour => {
            Some(b)
        }
        (Some(a), _) => Some(a),
        // Single-node consolidation ranks its commands by the same rate: the re-planned group
        // only when it beats the best of them. Otherwise a group that saves more now but less
        // per node it disrupts takes the pass (say, two nodes emptied onto a large spot node
        // that then cannot shrink) where one node's delete would lead on to a cheaper cluster.
        (None, Some(b)) => single.is_none_or(|s| rate(s) < rate(&b)).then_some(b),
        (None, None) => None,
    };
    // Upstream's single-node moves batched beat any command saving no more per hour. Grown
    // along upstream's order, the group starts with the move upstream's single-node search
    // would take first, so it does what upstream does, and more at once; it needs no better
    // rate than single-node's best (the average of independent moves never beats the best of
    // them), only to save as much.
    let batched = batched.filter(|d| {
        chosen
            .as_ref()
            .or(single)
            .is_none_or(|c| d.savings_per_hour >= c.savings_per_hour)
    });
    batched.or(chosen).into_iter().collect()
}

/// Upstream `firstNConsolidationOption`: the command for the largest prefix of `order` (at least
/// two, at most [`MAX_MULTI_CANDIDATES`] candidates) that can be deleted or replaced, found by
/// binary search.
fn largest_working_prefix<'c>(
    input: &DisruptionInput<'_>,
    simulator: &mut Simulator<'c>,
    order: &[&Candidate<'c>],
) -> Option<Command> {
    let max = order.len().min(MAX_MULTI_CANDIDATES);
    simulator.prepare(&order[..order.len().min(max + 1)]);
    let mut lo = 1;
    let mut hi = if order.len() <= max {
        order.len() - 1
    } else {
        max
    };
    let mut best = None;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        let prefix = &order[..=mid];
        match compute(input, simulator, prefix, Method::MultiNodeConsolidation) {
            Ok(command) => {
                best = Some(command);
                lo = mid + 1;
            }
            Err(_) => hi = mid - 1,
        }
    }
    best
}

/// Cheap necessary conditions checked before simulating a single candidate, so a pass over a
/// well-packed cluster does not simulate every node: its pods must fit in the free capacity of
/// the other nodes (all of it together), or else in replacements cheaper than the node. Under
/// the `Upstream` packing policy that is one instance type (its own included) whose cheapest
/// offering its NodePool allows is cheaper than the node; under `CostOptimal` (any number of
/// replacements) the part of the pods the other nodes cannot hold, bought at the cheapest price
/// per unit of each resource any type offers, must cost less than the node minus the
/// [`MIN_SAVINGS_FRACTION`] margin. All are optimistic (pending pods, daemonsets and pod
/// constraints are ignored), so a candidate they reject would fail the simulation too.
struct Bounds {
    free: BTreeMap<String, Option<ResourceList>>,
    total_free: Option<ResourceList>,
    /// (allocatable, cheapest price the pool allows) of every instance type of dynamic pools.
    offers: Vec<(ResourceList, f64)>,
    /// Resource name → the cheapest price per unit of it among `offers`.
    unit_prices: BTreeMap<String, f64>,
}

impl Bounds {
    fn new(input: &DisruptionInput<'_>, simulator: &Simulator<'_>) -> Self {
        let free = simulator.free_capacity();
        let total_free = free.values().try_fold(ResourceList::new(), |mut acc, f| {
            acc.add(f.as_ref()?);
            Some(acc)
        });
        let offers: Vec<(ResourceList, f64)> = pool_offers(input).into_values().flatten().collect();
        let mut unit_prices: BTreeMap<String, f64> = BTreeMap::new();
        for (allocatable, price) in &offers {
            for (resource, amount) in allocatable.iter() {
                let units = amount.as_f64_units();
                if units > 0.0 {
                    let per_unit = price / units;
                    let entry = unit_prices.entry(resource.to_string()).or_insert(per_unit);
                    *entry = entry.min(per_unit);
                }
            }
        }
        Bounds {
            free,
            total_free,
            offers,
            unit_prices,
        }
    }

    fn hopeless<'c>(
        &self,
        input: &DisruptionInput<'_>,
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
        let allowance = Allowance::new(input, price);
        if allowance.max_replacements > 1 {
            let mut shortfall = need;
            shortfall.sub_floor_zero(&others);
            let cheapest = shortfall
                .iter()
                .map(|(resource, amount)| {
                    let per_unit = self.unit_prices.get(resource).copied();
                    per_unit.map_or(f64::INFINITY, |p| p * amount.as_f64_units())
                })
                .fold(0.0, f64::max);
            // Against the price itself, not less the margin: a single replacement strictly
            // cheaper passes without it (the guard in `cheaper_replacements`).
            return (cheapest >= price).then(|| BlockReason::NoCheaperReplacement {
                cheapest: cheapest.is_finite().then_some(cheapest),
                price,
            });
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

/// Every instance type each dynamic NodePool's requirements admit (by pool name), as
/// (allocatable, the cheapest price of its available offerings in the zones and capacity types
/// the pool allows).
fn pool_offers(input: &DisruptionInput<'_>) -> BTreeMap<String, Vec<(ResourceList, f64)>> {
    let mut out = BTreeMap::new();
    for pool in input.state.nodepools() {
        if pool.is_static() || pool.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(types) = input.instance_types.get(&pool.name_any()) else {
            continue;
        };
        let requirements =
            Requirements::from_node_selector_with_min_values(&pool.spec.template.spec.requirements)
                .unwrap_or_default();
        let capacity_types = requirements.get(&CAPACITY_TYPE_LABEL.to_string());
        let zones = requirements.get(&ZONE_LABEL.to_string());
        let offers: Vec<(ResourceList, f64)> = types
            .iter()
            .filter(|it| {
                Requirements::from_labels(&it.labels)
                    .intersects(&requirements)
                    .is_ok()
            })
            .filter_map(|it| {
                let cheapest = it
                    .available_offerings()
                    .filter(|o| capacity_types.is_none_or(|r| r.has(&o.capacity_type)))
                    .filter(|o| zones.is_none_or(|r| r.has(&o.zone)))
                    .map(|o| o.price)
                    .min_by(f64::total_cmp)?;
                Some((it.allocatable(), cheapest))
            })
            .collect();
        out.insert(pool.name_any(), offers);
    }
    out
}

/// Upstream `computeConsolidation` for `candidates` together: delete when their pods fit on the
/// remaining nodes, replace when the simulation's new NodeClaims are cheaper than them all
/// (exactly one strictly cheaper node under the `Upstream` packing policy; M ≥ 1 nodes saving
/// [`replacements::MIN_SAVINGS_FRACTION`] under `CostOptimal`); otherwise the reason. Under
/// `CostOptimal` a plan with several replacements must also hold its pods as the kube-scheduler
/// places them ([`kube_placement`]); when it would not, the same pods packed as upstream packs
/// them make the command, if they can.
pub fn compute<'c>(
    input: &DisruptionInput<'_>,
    simulator: &Simulator<'c>,
    candidates: &[&Candidate<'c>],
    method: Method,
) -> Result<Command, BlockReason> {
    match compute_as_planned(input, simulator, candidates, method) {
        // The cost-optimal plan needs the pods where the kube-scheduler will not put them: the
        // same pods packed as upstream packs them (one replacement, if any, sized for all).
        Err(stranded @ BlockReason::StrandedByScheduler(_)) => {
            let upstream = simulator.run_with_policy(candidates, PackingPolicy::Upstream);
            command_from(input, simulator, candidates, method, &upstream).map_err(|_| stranded)
        }
        other => other,
    }
}

/// [`compute`] without its fallback: the cost-optimal plan of `candidates` or why not. For the
/// group re-planned together ([`waste::grown_group`]), grown one candidate at a time with a
/// simulation each: upstream's packing of the same nodes is the prefix search's command, and a
/// fresh simulation per step for it doubled the multi-node pass at 1,000 nodes.
fn compute_as_planned<'c>(
    input: &DisruptionInput<'_>,
    simulator: &Simulator<'c>,
    candidates: &[&Candidate<'c>],
    method: Method,
) -> Result<Command, BlockReason> {
    let simulation = simulator.run(candidates);
    command_from(input, simulator, candidates, method, &simulation)
}

/// [`compute`] from one simulation of `candidates`.
fn command_from<'c>(
    input: &DisruptionInput<'_>,
    simulator: &Simulator<'c>,
    candidates: &[&Candidate<'c>],
    method: Method,
    simulation: &Simulation<'c>,
) -> Result<Command, BlockReason> {
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
    if new_claims.is_empty() {
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
    let single = method == Method::SingleNodeConsolidation;
    let Replacements {
        claims,
        cheapest_total,
    } = cheaper_replacements(input, candidates, new_claims, price, single)?;
    if claims.len() > 1
        && let Some(pod) = stranded_by_scheduler(input, simulator, simulation, &claims)
    {
        return Err(BlockReason::StrandedByScheduler(pod));
    }
    let balanced_scores = balanced::approve(input, candidates, price - cheapest_total)?;
    let mut replacements = Vec::with_capacity(claims.len());
    for claim in &claims {
        let pool = input
            .state
            .nodepool(&claim.node_pool)
            .ok_or_else(|| BlockReason::NodePoolNotFound(claim.node_pool.clone()))?;
        replacements.push(nodeclaim::build(claim, pool));
    }
    Ok(Command {
        method,
        reason: DisruptionReason::Underutilized,
        candidates: nodes,
        replacements,
        savings_per_hour: price - cheapest_total,
        balanced_scores,
    })
}

/// The pod the kube-scheduler would leave without a node ([`kube_placement`]) when the pods
/// `simulation` places land on its destinations and on the replacements `claims` (each launched
/// as its cheapest option, less the daemons' overhead the simulation counted). `None` too when
/// a pod's or node's requests cannot be read: the simulation's own answer stands.
fn stranded_by_scheduler<'c>(
    input: &DisruptionInput<'_>,
    simulator: &Simulator<'c>,
    simulation: &Simulation<'c>,
    claims: &[crate::scheduling::NewNodeClaim],
) -> Option<String> {
    let mut pods = Vec::new();
    let mut moved = |i: usize| -> Option<ResourceList> {
        let pod = simulator.pod_at(simulation, i)?;
        let requests = crate::pod::effective_requests(pod).ok()?;
        pods.push(MovedPod::new(pod, requests.clone()));
        Some(requests)
    };
    let mut destinations = Vec::new();
    for placement in &simulation.results.existing_nodes {
        let Some(node) = simulator.existing_node(&placement.node) else {
            continue;
        };
        let free = simulator.free_on(node)?;
        for &i in &placement.pods {
            moved(i)?;
        }
        destinations.push(Destination {
            allocatable: node.allocatable.clone(),
            free,
            labels: node.labels.clone(),
            taints: node.taints.clone(),
        });
    }
    for claim in claims {
        let option = claim.instance_types.first()?;
        let it = input
            .instance_types
            .get(&claim.node_pool)?
            .iter()
            .find(|it| it.name == *option.name)?;
        let mut pods_requests = ResourceList::new();
        for &i in &claim.pods {
            pods_requests.add(&moved(i)?);
        }
        let mut overhead = claim.requests.clone();
        overhead.sub_floor_zero(&pods_requests);
        let allocatable = it.allocatable();
        let mut free = allocatable.clone();
        free.sub_floor_zero(&overhead);
        let mut labels = claim.labels.clone();
        labels.extend(it.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        destinations.push(Destination {
            allocatable,
            free,
            labels,
            taints: claim.taints.clone(),
        });
    }
    // Pods alike in everything the check reads fit their bins in any order.
    if pods.windows(2).all(|w| w[0].alike(&w[1])) {
        return None;
    }
    kube_placement::first_left_over(&pods, &destinations)
}

mod batched;
mod kube_placement;
mod replacements;
mod waste;

#[cfg(test)]
mod cost_optimal_tests;
#[cfg(test)]
mod guard_tests;
#[cfg(test)]
mod rules_tests;
#[cfg(test)]
mod tests;
