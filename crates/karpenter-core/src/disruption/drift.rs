//! Drift (upstream `drift.go`, `staticdrift.go` and the NodeClaim drift detection, karpenter-core
//! §4.5 and §7.8): a NodeClaim no longer matching its NodePool or its NodeClass is replaced.
//!
//! Detection is pure ([`drifted`]): the controller writes the `Drifted` condition from it, and
//! the disruption pass uses it directly, so a pass never waits for that write.
//!
//! Unlike upstream (one drift command per loop, which made rollouts of thousands of nodes very
//! slow, upstream issue #3197), a pass returns **one command per drifted node the budgets allow**:
//! each is simulated after the previous ones are committed ([`Simulator::commit`]), so two
//! commands never count on the same free capacity.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_DRIFTED};
use karpenter_api::well_known::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, INSTANCE_TYPE_LABEL,
    NODEPOOL_HASH_ANNOTATION, NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION_ANNOTATION, ZONE_LABEL,
};
use karpenter_api::{NodeClaim, NodePool};
use kube_core::ResourceExt;

use super::budgets::DisruptionReason;
use super::candidates::{BlockReason, Candidate, DisruptionClass, Rejection};
use super::command::{Command, DisruptedNode, DriftContext, Method};
use super::facts::{Classified, PassFacts};
use super::rebalance::{SPOT_REBALANCE_RECOMMENDED, recommended_away_from};
use super::simulate::Simulator;
use crate::nodepool::{hash::template_hash, static_capacity, static_replicas};
use crate::provisioning::nodeclaim;
use crate::requirements::Requirement;

/// The NodePool's template changed (its hash differs from the NodeClaim's).
pub const NODEPOOL_DRIFTED: &str = "NodePoolDrifted";
/// The NodeClaim's labels no longer satisfy the NodePool's requirements.
pub const REQUIREMENTS_DRIFTED: &str = "RequirementsDrifted";

/// The node's instance type, or the offering it runs on, is no longer offered for its NodePool.
pub const INSTANCE_TYPE_NOT_FOUND: &str = "InstanceTypeNotFound";
/// Upstream looks for instance-type drift only on NodeClaims older than this: a new NodeClaim's
/// type may not be in a catalogue refreshed before it launched.
pub const INSTANCE_TYPE_DRIFT_MIN_AGE: SignedDuration = SignedDuration::from_hours(1);

/// Why `claim` is drifted from `pool`, if it is: the NodePool hash first, then the NodePool's
/// requirements against the NodeClaim's labels, then its instance type and offering, then the
/// provider's verdict (`AMIDrift`, …), then a spot rebalance recommendation (see [`rebalance`]).
///
/// [`rebalance`]: super::rebalance
pub fn drifted(claim: &NodeClaim, pool: &NodePool, context: DriftContext<'_>) -> Option<String> {
    drift_reason(claim, claim.labels(), pool, context)
}

/// [`drifted`] with the labels to check against (the Node's labels over the NodeClaim's, when the
/// Node exists: they are what the workloads see).
pub fn drift_reason(
    claim: &NodeClaim,
    labels: &BTreeMap<String, String>,
    pool: &NodePool,
    context: DriftContext<'_>,
) -> Option<String> {
    if hash_drifted(claim, pool) {
        return Some(NODEPOOL_DRIFTED.to_string());
    }
    if requirements_drifted(labels, pool) {
        return Some(REQUIREMENTS_DRIFTED.to_string());
    }
    if instance_type_drifted(claim, labels, context) {
        return Some(INSTANCE_TYPE_NOT_FOUND.to_string());
    }
    if let Some(reason) = context.provider_drift.get(&claim.name_any()) {
        return Some(reason.clone());
    }
    recommended_away_from(claim, labels).map(|_| SPOT_REBALANCE_RECOMMENDED.to_string())
}

/// Upstream's instance-type drift, for NodeClaims older than [`INSTANCE_TYPE_DRIFT_MIN_AGE`]:
/// the instance-type label is missing, the type is no longer offered for the pool, or none of
/// its offerings matches the node's zone and capacity type (a `reserved` node also matches an
/// `on-demand` offering: a reservation that ended leaves an on-demand instance). Availability
/// is not asked: a spot pool short of capacity is not a reason to replace its nodes.
fn instance_type_drifted(
    claim: &NodeClaim,
    labels: &BTreeMap<String, String>,
    context: DriftContext<'_>,
) -> bool {
    let Some(types) = context.instance_types.filter(|t| !t.is_empty()) else {
        return false;
    };
    let Some(created) = claim.metadata.creation_timestamp.as_ref() else {
        return false;
    };
    if context.now.duration_since(created.0) < INSTANCE_TYPE_DRIFT_MIN_AGE {
        return false;
    }
    let Some(name) = labels.get(INSTANCE_TYPE_LABEL) else {
        return true;
    };
    let Some(instance_type) = types.iter().find(|t| &t.name == name) else {
        return true;
    };
    let zone = labels.get(ZONE_LABEL);
    let capacity_type = labels.get(CAPACITY_TYPE_LABEL).map(String::as_str);
    !instance_type.offerings.iter().any(|o| {
        zone.is_none_or(|z| *z == o.zone)
            && match capacity_type {
                None => true,
                Some(CAPACITY_TYPE_RESERVED) => {
                    o.capacity_type == CAPACITY_TYPE_RESERVED
                        || o.capacity_type == CAPACITY_TYPE_ON_DEMAND
                }
                Some(ct) => o.capacity_type == ct,
            }
    })
}

/// Static drift: both carry the current hash version and the hashes differ. A NodeClaim without
/// the annotations, or stamped by another version, is re-stamped, not drifted (upstream).
fn hash_drifted(claim: &NodeClaim, pool: &NodePool) -> bool {
    let claim_annotations = claim.annotations();
    let Some(claim_hash) = claim_annotations.get(NODEPOOL_HASH_ANNOTATION) else {
        return false;
    };
    if claim_annotations
        .get(NODEPOOL_HASH_VERSION_ANNOTATION)
        .map(String::as_str)
        != Some(NODEPOOL_HASH_VERSION)
    {
        return false;
    }
    let pool_annotations = pool.annotations();
    let pool_hash = match pool_annotations.get(NODEPOOL_HASH_ANNOTATION) {
        Some(hash)
            if pool_annotations
                .get(NODEPOOL_HASH_VERSION_ANNOTATION)
                .is_none_or(|v| v == NODEPOOL_HASH_VERSION) =>
        {
            hash.clone()
        }
        Some(_) => return false,
        None => template_hash(pool),
    };
    *claim_hash != pool_hash
}

/// A requirement of the pool whose key the node carries with a value it no longer allows. A
/// missing label is not drift (upstream allows undefined well-known labels); an unparsable
/// requirement is ignored (validation reports it).
fn requirements_drifted(labels: &BTreeMap<String, String>, pool: &NodePool) -> bool {
    pool.spec.template.spec.requirements.iter().any(|r| {
        let Some(value) = labels.get(&r.key) else {
            return false;
        };
        Requirement::from_values(&r.key, &r.operator, &r.values).is_ok_and(|req| !req.has(value))
    })
}

/// The candidate's labels for requirement drift: the NodeClaim's, overlaid by the Node's.
fn labels_of(candidate: &Candidate<'_>) -> BTreeMap<String, String> {
    let mut labels = candidate.nodeclaim.labels().clone();
    labels.extend(
        candidate
            .node
            .labels()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    labels
}

/// A drifted candidate and when it drifted (the `Drifted` condition's transition, when written).
struct DriftedCandidate<'a> {
    candidate: Candidate<'a>,
    since: Option<Timestamp>,
}

fn drifted_candidates<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, Rejection>,
    want_static: bool,
) -> Vec<DriftedCandidate<'a>> {
    let input = facts.input();
    let Classified { found, rejected } = facts.candidates(DisruptionClass::Eventual).into_owned();
    for rejection in rejected {
        blocked.entry(rejection.name.clone()).or_insert(rejection);
    }
    let mut out: Vec<DriftedCandidate<'a>> = found
        .into_iter()
        .filter(|c| c.nodepool.is_static() == want_static)
        .filter_map(|candidate| {
            let labels = labels_of(&candidate);
            drift_reason(
                candidate.nodeclaim,
                &labels,
                candidate.nodepool,
                input.drift_context(&candidate.nodepool_name()),
            )?;
            let since = candidate
                .nodeclaim
                .status
                .as_ref()
                .and_then(|s| s.condition(NODECLAIM_CONDITION_DRIFTED))
                .filter(|c| c.status == "True")
                .and_then(|c| c.last_transition_time.as_deref()?.parse().ok());
            Some(DriftedCandidate { candidate, since })
        })
        .collect();
    // Earliest drift first (unknown instants last), then empty nodes before busy ones.
    out.sort_by(|a, b| {
        let by_time = match (a.since, b.since) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_time
            .then_with(|| {
                a.candidate
                    .reschedulable_pods
                    .is_empty()
                    .cmp(&b.candidate.reschedulable_pods.is_empty())
                    .reverse()
            })
            .then_with(|| a.candidate.name().cmp(&b.candidate.name()))
    });
    out
}

fn budget_block(candidate: &Candidate<'_>) -> BlockReason {
    BlockReason::BudgetExhausted {
        nodepool: candidate.nodepool_name(),
        reason: DisruptionReason::Drifted.to_string(),
    }
}

fn reject(candidate: &Candidate<'_>, reason: BlockReason) -> Rejection {
    Rejection {
        name: candidate.name(),
        nodepool: Some(candidate.nodepool_name()),
        reason,
    }
}

/// `Method::Drift`: every drifted node of a dynamic NodePool the `Drifted` budgets allow, each
/// replaced by what the pipeline would launch for its pods (nothing when they fit elsewhere or
/// when it is empty).
pub fn drift<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, Rejection>,
) -> Vec<Command> {
    let found = drifted_candidates(facts, blocked, false);
    if found.is_empty() {
        return Vec::new();
    }
    let input = facts.input();
    let mut budgets = facts.budgets(DisruptionReason::Drifted).into_owned();
    let mut simulator = Simulator::new(input);
    let mut commands = Vec::new();
    for drifted in &found {
        let candidate = &drifted.candidate;
        if budgets.allowed(&candidate.nodepool_name()) == 0 {
            blocked.insert(candidate.name(), reject(candidate, budget_block(candidate)));
            continue;
        }
        if simulator.is_destination(&candidate.name()) {
            let rejection = reject(candidate, BlockReason::DestinationOfAnotherCommand);
            blocked.insert(candidate.name(), rejection);
            continue;
        }
        // A node replaced on a spot rebalance recommendation (whatever else drifted it) must
        // not go back into the spot pool at risk.
        let away_from = recommended_away_from(candidate.nodeclaim, &labels_of(candidate));
        let simulation = match &away_from {
            Some(spot_pool) => simulator.run_away_from(&[candidate], spot_pool),
            None => simulator.run(&[candidate]),
        };
        if let Some(first) = simulation.first_unplaced_candidate_pod() {
            let rejection = reject(candidate, BlockReason::PodsWouldNotFit(first));
            blocked.insert(candidate.name(), rejection);
            continue;
        }
        if let Some(node) = simulation.uninitialized_destination() {
            let rejection = reject(candidate, BlockReason::UninitializedDestination(node));
            blocked.insert(candidate.name(), rejection);
            continue;
        }
        let replacements: Vec<NodeClaim> = simulation
            .new_node_claims()
            .iter()
            .filter_map(|claim| {
                let pool = input.state.nodepool(&claim.node_pool)?;
                let mut built = nodeclaim::build(claim, pool);
                if let Some(spot_pool) = &away_from {
                    let types = input
                        .instance_types
                        .get(&claim.node_pool)
                        .map_or(&[][..], Vec::as_slice);
                    spot_pool.exclude_from(&mut built, types);
                }
                Some(built)
            })
            .collect();
        let replacement_price: f64 = simulation
            .new_node_claims()
            .iter()
            .filter_map(|c| c.instance_types.first().map(|o| o.price))
            .sum();
        budgets.take(&candidate.nodepool_name());
        simulator.commit(&[candidate], &simulation);
        blocked.remove(&candidate.name());
        commands.push(Command {
            method: Method::Drift,
            reason: DisruptionReason::Drifted,
            candidates: vec![DisruptedNode::from_candidate(candidate)],
            replacements,
            savings_per_hour: candidate.price.unwrap_or(0.0) - replacement_price,
            balanced_scores: Vec::new(),
        });
    }
    commands
}

/// `Method::StaticDrift`: drifted NodeClaims of static NodePools, each replaced 1:1 from the
/// template, as many as the pool's budget allows, and only while the pool is not over its
/// replica count (a surplus is the deprovisioner's, not drift's).
pub fn static_drift<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, Rejection>,
) -> Vec<Command> {
    let found = drifted_candidates(facts, blocked, true);
    let input = facts.input();
    let mut budgets = facts.budgets(DisruptionReason::Drifted).into_owned();
    let mut commands = Vec::new();
    // Per pool: how many replacements `limits.nodes` still allows (upstream reserves them
    // against the limit, every NodeClaim of the pool counting, deleting ones included).
    let mut room: BTreeMap<String, i64> = BTreeMap::new();
    for drifted in &found {
        let candidate = &drifted.candidate;
        let pool_name = candidate.nodepool_name();
        let replicas = static_replicas(candidate.nodepool).unwrap_or(0);
        let counts = static_capacity::counts(input.state, &pool_name);
        // Not while the pool is over its replicas: the scale-down comes first.
        if counts.active + counts.pending_disruption > replicas {
            continue;
        }
        let room = room
            .entry(pool_name.clone())
            .or_insert_with(|| static_capacity::room_under_node_limit(candidate.nodepool, &counts));
        if *room <= 0 {
            // The next pass looks again once a replaced node is gone.
            continue;
        }
        if !budgets.take(&pool_name) {
            blocked.insert(candidate.name(), reject(candidate, budget_block(candidate)));
            continue;
        }
        *room -= 1;
        blocked.remove(&candidate.name());
        commands.push(Command {
            method: Method::StaticDrift,
            reason: DisruptionReason::Drifted,
            candidates: vec![DisruptedNode::from_candidate(candidate)],
            replacements: vec![nodeclaim::build_static(candidate.nodepool)],
            savings_per_hour: 0.0,
            balanced_scores: Vec::new(),
        });
    }
    commands
}

/// For callers that want the order drift uses without running it (tests, `simulate`).
#[cfg(test)]
pub(crate) fn drift_order<'a>(
    input: &'a super::command::DisruptionInput<'a>,
) -> Vec<(String, String)> {
    let mut blocked = BTreeMap::new();
    drifted_candidates(input, &mut blocked, false)
        .into_iter()
        .map(|d| {
            let labels = labels_of(&d.candidate);
            let reason = drift_reason(
                d.candidate.nodeclaim,
                &labels,
                d.candidate.nodepool,
                input.drift_context(&d.candidate.nodepool_name()),
            );
            (d.candidate.name(), reason.unwrap_or_default())
        })
        .collect()
}

#[cfg(test)]
mod tests;
