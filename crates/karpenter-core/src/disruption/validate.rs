//! Validation of a command against a fresh view just before it runs (upstream `validation.go`,
//! karpenter-core §4.4 and §4.11). Upstream waits 15 s after deciding an emptiness or
//! consolidation command; the controller does the waiting and then calls [`validate`] with the
//! state as it is now.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use kube_core::ResourceExt;

use super::candidates::{BlockReason, Candidate, DisruptionClass};
use super::command::{Command, DisruptionInput, Method};
use super::consolidation::{compute, consolidation_candidates};
use super::emptiness::consolidation_block;
use super::facts::{PassCache, PassFacts};
use super::rebalance::recommended_away_from;
use super::simulate::Simulator;

/// Upstream's `commandValidationDelay`: a consolidation command waits this long after the pass
/// that decided it, then is [`validate`]d against the cluster as it is; the controller sleeps it,
/// `simulate --disruption` waits it in virtual time.
pub const VALIDATION_DELAY: SignedDuration = SignedDuration::from_secs(15);

/// Whether the method's commands wait [`VALIDATION_DELAY`] and are re-validated before they run
/// (upstream validates emptiness and consolidation; drift runs at once). The wait is what keeps
/// a node that just went empty — a replacement its command has not drained onto yet, a node
/// between two pods of a rollout — from being deleted the moment it is seen empty.
pub fn needs_validation(method: Method) -> bool {
    matches!(
        method,
        Method::Emptiness | Method::MultiNodeConsolidation | Method::SingleNodeConsolidation
    )
}

/// The command to run now if `command` may still run on `input`'s state, else why not.
///
/// An emptiness command keeps those of its nodes that are still empty candidates past their
/// `consolidateAfter`, not nominated, within a freshly computed budget, and fails only when none
/// is left (upstream's partial success, "abandoning empty node consolidation attempt due to pod
/// churn"). Every other command runs whole or not at all: its nodes are all still candidates
/// (none nominated, being deleted, or newly holding a do-not-disrupt pod), the budgets still
/// admit them, and — for consolidation and drift — a fresh simulation still finds a place for
/// every pod and decides the same way (delete stays delete; a replacement's options are a
/// superset of the command's, since the command's list was price-filtered).
pub fn validate(command: &Command, input: &DisruptionInput<'_>) -> Result<Command, BlockReason> {
    if command.method == Method::Emptiness {
        return still_empty(command, input);
    }
    validate_whole(command, input).map(|()| command.clone())
}

/// The nodes of an emptiness command that may still go (see [`validate`]).
fn still_empty(command: &Command, input: &DisruptionInput<'_>) -> Result<Command, BlockReason> {
    let facts = PassCache::new(input);
    let classified = facts.candidates(DisruptionClass::Graceful);
    let mut budgets = facts.budgets(command.reason).into_owned();
    let mut kept = Vec::with_capacity(command.candidates.len());
    let mut first_refusal = None;
    for node in &command.candidates {
        let refusal = if let Some(rejection) =
            classified.rejected.iter().find(|r| r.name == node.name)
        {
            Some(BlockReason::NoLongerCandidate(Box::new(
                rejection.reason.clone(),
            )))
        } else if let Some(candidate) = classified.found.iter().find(|c| c.name() == node.name) {
            if !candidate.is_empty() {
                Some(BlockReason::DecisionChanged(format!(
                    "node {} is no longer empty",
                    node.name
                )))
            } else if let Some(block) = consolidation_block(candidate, input.now) {
                Some(BlockReason::NoLongerCandidate(Box::new(block)))
            } else if !budgets.take(&candidate.nodepool_name()) {
                Some(BlockReason::BudgetExhausted {
                    nodepool: candidate.nodepool_name(),
                    reason: command.reason.to_string(),
                })
            } else {
                None
            }
        } else {
            Some(BlockReason::NoLongerCandidate(Box::new(
                BlockReason::NoNode,
            )))
        };
        match refusal {
            None => kept.push(node.clone()),
            Some(why) => {
                first_refusal.get_or_insert(why);
            }
        }
    }
    if kept.is_empty() {
        return Err(first_refusal.unwrap_or_else(|| {
            BlockReason::DecisionChanged("the command has no node".to_string())
        }));
    }
    Ok(Command {
        savings_per_hour: kept.iter().filter_map(|n| n.price).sum(),
        candidates: kept,
        ..command.clone()
    })
}

/// [`validate`] for the commands that run whole.
fn validate_whole(command: &Command, input: &DisruptionInput<'_>) -> Result<(), BlockReason> {
    let class = match command.method {
        Method::Drift | Method::StaticDrift => DisruptionClass::Eventual,
        _ => DisruptionClass::Graceful,
    };
    // The consolidation re-check below reads the graceful candidates again: share them.
    let facts = PassCache::new(input);
    let classified = facts.candidates(class);
    let (found, rejected) = (&classified.found, &classified.rejected);
    let mut chosen: Vec<&Candidate<'_>> = Vec::new();
    for node in &command.candidates {
        if let Some(rejection) = rejected.iter().find(|r| r.name == node.name) {
            return Err(BlockReason::NoLongerCandidate(Box::new(
                rejection.reason.clone(),
            )));
        }
        match found.iter().find(|c| c.name() == node.name) {
            Some(candidate) => chosen.push(candidate),
            None => {
                return Err(BlockReason::NoLongerCandidate(Box::new(
                    BlockReason::NoNode,
                )));
            }
        }
    }
    let mut budgets = facts.budgets(command.reason).into_owned();
    for candidate in &chosen {
        if !budgets.take(&candidate.nodepool_name()) {
            return Err(BlockReason::BudgetExhausted {
                nodepool: candidate.nodepool_name(),
                reason: command.reason.to_string(),
            });
        }
    }
    match command.method {
        Method::Emptiness | Method::StaticDrift => Ok(()),
        Method::Drift => {
            let simulator = Simulator::new(input);
            // A node replaced on a spot rebalance recommendation may not count on its pool.
            let away_from = match chosen.as_slice() {
                [one] => recommended_away_from(one.nodeclaim, one.nodeclaim.labels()),
                _ => None,
            };
            let simulation = match &away_from {
                Some(spot_pool) => simulator.run_away_from(&chosen, spot_pool),
                None => simulator.run(&chosen),
            };
            match simulation.first_unplaced_candidate_pod() {
                Some(first) => Err(BlockReason::PodsWouldNotFit(first)),
                None => Ok(()),
            }
        }
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
            // Re-check the consolidation filters (consolidateAfter, policy, price) too.
            let mut blocked = BTreeMap::new();
            let eligible = consolidation_candidates(&facts, &mut blocked);
            for node in &command.candidates {
                if let Some(rejection) = blocked.get(&node.name) {
                    return Err(BlockReason::NoLongerCandidate(Box::new(
                        rejection.reason.clone(),
                    )));
                }
                if !eligible.iter().any(|c| c.name() == node.name) {
                    return Err(BlockReason::DecisionChanged(format!(
                        "node {} is empty now (emptiness will take it)",
                        node.name
                    )));
                }
            }
            let simulator = Simulator::for_consolidation(input);
            let fresh = compute(input, &simulator, &chosen, command.method)?;
            same_decision(command, &fresh)
        }
    }
}

/// Whether the fresh computation decides as the command did: a delete stays a delete, and a
/// replacement keeps its count (one under `Upstream`; M under `CostOptimal`) with every
/// replacement's options a subset of the fresh one's at the same place (the planner is
/// deterministic, so the same state lists the replacements in the same order).
fn same_decision(command: &Command, fresh: &Command) -> Result<(), BlockReason> {
    match (
        command.replacements.as_slice(),
        fresh.replacements.as_slice(),
    ) {
        ([], []) => Ok(()),
        ([], [_, ..]) => Err(BlockReason::DecisionChanged(
            "the pods no longer fit without a replacement".to_string(),
        )),
        ([_, ..], []) => Err(BlockReason::DecisionChanged(
            "the nodes can now be deleted without a replacement".to_string(),
        )),
        (before, after) if before.len() == after.len() => {
            for (before, after) in before.iter().zip(after) {
                let new = instance_types(after);
                if let Some(missing) = instance_types(before).iter().find(|t| !new.contains(t)) {
                    return Err(BlockReason::DecisionChanged(format!(
                        "instance type {missing} is no longer a replacement option"
                    )));
                }
            }
            Ok(())
        }
        (before, after) => Err(BlockReason::DecisionChanged(format!(
            "{} replacements instead of {}",
            after.len(),
            before.len()
        ))),
    }
}

/// The instance-type options written on a replacement NodeClaim.
fn instance_types(claim: &karpenter_api::NodeClaim) -> Vec<String> {
    claim
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == karpenter_api::well_known::INSTANCE_TYPE_LABEL)
        .flat_map(|r| r.values.iter().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests;
