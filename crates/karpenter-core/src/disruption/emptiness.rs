//! Emptiness (upstream `emptiness.go`, karpenter-core §4.4 and §4.13): candidates with nothing
//! worth moving, whose NodePool's `consolidateAfter` has elapsed, deleted in one command within
//! each NodePool's budget.
//!
//! **When a node becomes consolidatable.** Upstream sets the NodeClaim condition
//! `Consolidatable` once `consolidateAfter` has passed since the later of the NodeClaim's
//! initialization and its `status.lastPodEventTime`. No controller of ours writes that
//! condition yet, so the instant is derived here from what the objects carry, and the
//! condition writer can later use [`consolidatable_at`] itself. The clock starts at the latest of:
//! - the NodeClaim's `Initialized=True` transition time (else the Node's creation time: a node
//!   that just joined has had no chance to receive pods);
//! - `status.lastPodEventTime` (written on pod bind / terminal / terminating; it is the only trace
//!   left by a pod that has already gone away);
//! - for the pods still bound: their `PodScheduled=True` transition (the bind) and, for
//!   terminating ones, their deletion timestamp. These are the same events `lastPodEventTime`
//!   records; reading them from the pods keeps a fresh bind from counting as idle time when the
//!   podevents writer lags (it dedupes writes for 10 s) or is not running (`simulate`).
//!
//! An unparseable timestamp is ignored rather than failing the pass; a node with none of these
//! (hand-written objects without timestamps) counts as idle since the epoch.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::pod::Pod;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_INITIALIZED};
use karpenter_api::{NodeClaim, NodePool};

use super::candidates::{BlockReason, Candidate, Rejection};

/// The disruption reason emptiness reports and budgets are scoped by.
pub const REASON: &str = "Empty";

/// Emptiness's decision: one delete command (possibly with no nodes) and why other empty nodes
/// wait.
#[derive(Clone, Debug, Default)]
pub struct EmptinessDecision<'a> {
    /// Nodes to delete, highest savings first.
    pub delete: Vec<Candidate<'a>>,
    /// Empty nodes that are not deleted now, each with its reason.
    pub blocked: Vec<Rejection>,
    /// Some empty, consolidatable node was left only because of a budget: the cluster is not
    /// "consolidated" and the method must run again.
    pub budget_constrained: bool,
}

/// Picks the empty candidates to delete. `allowed` is the number of nodes each NodePool may
/// still lose for reason `Empty` (a pool missing from the map may lose none).
pub fn emptiness<'a>(
    candidates: &[Candidate<'a>],
    now: Timestamp,
    allowed: &BTreeMap<String, usize>,
) -> EmptinessDecision<'a> {
    let mut decision = EmptinessDecision::default();
    let mut eligible: Vec<&Candidate<'a>> = Vec::new();
    for candidate in candidates.iter().filter(|c| c.is_empty()) {
        match consolidation_block(candidate, now) {
            Some(reason) => decision.blocked.push(rejection(candidate, reason)),
            None => eligible.push(candidate),
        }
    }
    // Highest savings first; the name breaks ties so the choice is deterministic.
    eligible.sort_by(|a, b| {
        b.savings_ratio()
            .partial_cmp(&a.savings_ratio())
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.name().cmp(&b.name()))
    });
    let mut remaining = allowed.clone();
    for candidate in eligible {
        let pool = candidate.nodepool_name();
        match remaining.get_mut(&pool) {
            Some(left) if *left > 0 => {
                *left -= 1;
                decision.delete.push(candidate.clone());
            }
            _ => {
                decision.budget_constrained = true;
                decision.blocked.push(rejection(
                    candidate,
                    BlockReason::BudgetExhausted {
                        nodepool: pool,
                        reason: REASON.to_string(),
                    },
                ));
            }
        }
    }
    decision
}

/// Why consolidation (emptiness included) may not touch this candidate now, if anything:
/// a static pool, `consolidateAfter: Never`, or `consolidateAfter` not elapsed yet.
pub fn consolidation_block(candidate: &Candidate<'_>, now: Timestamp) -> Option<BlockReason> {
    let pool = candidate.nodepool_name();
    if candidate.nodepool.is_static() {
        return Some(BlockReason::StaticNodePool(pool));
    }
    match consolidatable_at(candidate) {
        None => Some(BlockReason::ConsolidationDisabled(pool)),
        Some(at) if at > now => Some(BlockReason::ConsolidatableAt(at)),
        Some(_) => None,
    }
}

/// When the candidate becomes consolidatable (see the module docs for the timestamps used);
/// `None` when its NodePool never consolidates. A start too far in the future to add
/// `consolidateAfter` to also yields `None`.
pub fn consolidatable_at(candidate: &Candidate<'_>) -> Option<Timestamp> {
    node_consolidatable_at(
        candidate.nodepool,
        candidate.nodeclaim,
        Some(candidate.node),
        &candidate.pods,
    )
}

/// [`consolidatable_at`] for any managed node: its NodePool, NodeClaim, Node (if registered) and
/// bound pods. Consolidation simulations use it to keep moved pods off nodes still under their
/// window.
pub fn node_consolidatable_at(
    nodepool: &NodePool,
    nodeclaim: &NodeClaim,
    node: Option<&Node>,
    pods: &[&Pod],
) -> Option<Timestamp> {
    let after = nodepool.consolidate_after().duration()?;
    let claim_status = nodeclaim.status.as_ref();
    let initialized = claim_status
        .and_then(|s| s.condition(NODECLAIM_CONDITION_INITIALIZED))
        .filter(|c| c.status == "True")
        .and_then(|c| parse(c.last_transition_time.as_deref()))
        .or_else(|| {
            node.and_then(|n| n.metadata.creation_timestamp.as_ref())
                .map(|t| t.0)
        });
    let last_pod_event = claim_status.and_then(|s| parse(s.last_pod_event_time.as_deref()));
    let pod_events = pods.iter().filter_map(|p| pod_event_time(p));
    let since = initialized
        .into_iter()
        .chain(last_pod_event)
        .chain(pod_events)
        .max()
        .unwrap_or(Timestamp::UNIX_EPOCH);
    since.checked_add(after).ok()
}

/// The latest pod event visible on a pod still bound: its deletion, else its bind.
fn pod_event_time(pod: &Pod) -> Option<Timestamp> {
    let deleted = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    let bound = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "True")
        })
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    deleted.into_iter().chain(bound).max()
}

fn parse(raw: Option<&str>) -> Option<Timestamp> {
    raw?.parse().ok()
}

fn rejection(candidate: &Candidate<'_>, reason: BlockReason) -> Rejection {
    Rejection {
        name: candidate.name(),
        nodepool: Some(candidate.nodepool_name()),
        reason,
    }
}

#[cfg(test)]
mod tests;
