//! Validation of a command against a fresh view just before it runs (upstream `validation.go`,
//! karpenter-core §4.11). Upstream waits 15 s after deciding a consolidation; the controller
//! does the waiting and then calls [`validate`] with the state as it is now.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use kube_core::ResourceExt;

use super::candidates::{BlockReason, Candidate, DisruptionClass};
use super::command::{Command, DisruptionInput, Method};
use super::consolidation::{compute, consolidation_candidates};
use super::facts::{PassCache, PassFacts};
use super::rebalance::recommended_away_from;
use super::simulate::Simulator;

/// Upstream's `commandValidationDelay`: a consolidation command waits this long after the pass
/// that decided it, then is [`validate`]d against the cluster as it is; the controller sleeps it,
/// `simulate --disruption` waits it in virtual time.
pub const VALIDATION_DELAY: SignedDuration = SignedDuration::from_secs(15);

/// Whether the method's commands wait [`VALIDATION_DELAY`] and are re-validated before they run
/// (upstream validates consolidation; emptiness and drift run at once).
pub fn needs_validation(method: Method) -> bool {
    matches!(
        method,
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation
    )
}

/// `Ok` when `command` may still run on `input`'s state: its nodes are all still candidates
/// (none nominated, being deleted, or newly holding a do-not-disrupt pod), the budgets still
/// admit them, and — for consolidation and drift — a fresh simulation still finds a place for
/// every pod and decides the same way (delete stays delete; a replacement's options are a
/// superset of the command's, since the command's list was price-filtered).
pub fn validate(command: &Command, input: &DisruptionInput<'_>) -> Result<(), BlockReason> {
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
        Method::Emptiness | Method::StaticDrift => {
            if command.method == Method::Emptiness
                && let Some(busy) = chosen.iter().find(|c| !c.is_empty())
            {
                return Err(BlockReason::DecisionChanged(format!(
                    "node {} is no longer empty",
                    busy.name()
                )));
            }
            Ok(())
        }
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
