//! Voluntary disruption decisions (issue 10): which nodes Karpenter may take away, and why not.
//!
//! Pure (no I/O, `now` is an argument). The pieces:
//! - [`budgets`]: how many nodes of each NodePool may be disrupted now for a reason;
//! - [`candidates`]: every node that could be disrupted, or the reason it cannot;
//! - [`emptiness`]: empty candidates past `consolidateAfter`, within budgets;
//! - [`expiration`]: when a NodeClaim's `expireAfter` runs out (forceful, no budgets);
//! - [`repair`]: nodes unhealthy past the provider's toleration (forceful, capped at 20 %);
//! - [`drift`]: NodeClaims drifted from their NodePool or NodeClass, replaced within budgets;
//! - [`rebalance`]: spot nodes EC2 recommended rebalancing (aws `--spot-rebalance-replace`),
//!   drifted and replaced away from their spot pool;
//! - [`consolidation`]: single- and multi-node consolidation (delete, or replace by one cheaper
//!   node; under `PackingPolicy::CostOptimal` by M ≥ 1 nodes saving a margin, ranked by savings
//!   per disruption), over [`simulate`]'s one-conversion-per-pass scheduling simulation;
//! - [`balanced`]: the `Balanced` policy's score, which consolidation moves of such pools need
//!   (its vocabulary, [`score::PoolScore`], sits in [`score`] below the candidates and commands);
//! - [`validate`]: re-checks a command against a fresh state before it runs;
//! - [`facts`]: the candidates and budgets a pass computes once and hands to every method;
//! - [`command`]: the vocabulary shared with the controller's orchestration queue and
//!   `simulate --disruption` ([`Command`], [`Pass`], [`DisruptionInput`]);
//! - [`decide`]: one pass of the loop — the methods in upstream's order, the first that finds
//!   work wins;
//! - [`orchestration`]: carrying a command out (mark, replace, wait, roll back, delete, drain,
//!   terminate) as a pure phase machine the controller executes and `simulate` applies.

pub mod balanced;
pub mod budgets;
pub mod candidates;
pub mod command;
pub mod consolidation;
pub mod drift;
pub mod emptiness;
pub mod expiration;
pub mod facts;
pub mod orchestration;
pub mod rebalance;
pub mod repair;
pub mod score;
pub mod simulate;
pub mod validate;

#[cfg(test)]
pub(crate) mod testkit;

#[cfg(test)]
mod properties;

pub use budgets::{BudgetAllowance, BudgetMapping, DisruptionReason, PoolNodeCount};
pub use command::{
    Command, Decision, DisruptedNode, DisruptionInput, DisruptionOptions, Method, Pass,
    ProviderDrift,
};
pub use drift::drifted;
pub use validate::validate;

use std::collections::BTreeMap;

use candidates::DisruptionClass;
use facts::{Classified, PassCache, PassFacts};

/// One pass of the disruption loop over `input`: the methods of [`Method::ORDER`] in turn; the
/// first that produces commands ends the pass. `blocked` explains every node left alone.
///
/// Emptiness, static drift and drift may return several commands (one per node or one for all
/// empty nodes); consolidation returns at most one.
pub fn decide(input: &DisruptionInput<'_>) -> Pass {
    let mut pass = Pass::default();
    let mut blocked: BTreeMap<String, candidates::Rejection> = BTreeMap::new();
    let facts = PassCache::new(input);
    for method in Method::ORDER {
        let commands = match method {
            Method::Emptiness => run_emptiness(&facts, &mut blocked),
            Method::StaticDrift => drift::static_drift(&facts, &mut blocked),
            Method::Drift => drift::drift(&facts, &mut blocked),
            Method::MultiNodeConsolidation => consolidation::multi_node(&facts, &mut blocked),
            Method::SingleNodeConsolidation => consolidation::single_node(&facts, &mut blocked),
        };
        if !commands.is_empty() {
            pass.method = Some(method);
            pass.commands = commands;
            break;
        }
    }
    let disrupted: std::collections::BTreeSet<&str> = pass
        .commands
        .iter()
        .flat_map(|c| c.candidates.iter().map(|n| n.name.as_str()))
        .collect();
    pass.moves = balanced::judged_moves(input, &pass.commands, blocked.values());
    pass.blocked = blocked
        .into_values()
        .filter(|r| !disrupted.contains(r.name.as_str()))
        .collect();
    pass
}

fn run_emptiness<'a>(
    facts: &impl PassFacts<'a>,
    blocked: &mut BTreeMap<String, candidates::Rejection>,
) -> Vec<Command> {
    let input = facts.input();
    let Classified { found, rejected } = facts.candidates(DisruptionClass::Graceful).into_owned();
    for rejection in rejected {
        blocked.insert(rejection.name.clone(), rejection);
    }
    let budgets = facts.budgets(DisruptionReason::Empty);
    let allowed: BTreeMap<String, usize> = found
        .iter()
        .map(|c| c.nodepool_name())
        .map(|pool| {
            let n = usize::try_from(budgets.allowed(&pool)).unwrap_or(usize::MAX);
            (pool, n)
        })
        .collect();
    let decision = emptiness::emptiness(&found, input.now, &allowed);
    for rejection in decision.blocked {
        blocked.insert(rejection.name.clone(), rejection);
    }
    if decision.delete.is_empty() {
        return Vec::new();
    }
    let nodes: Vec<DisruptedNode> = decision
        .delete
        .iter()
        .map(DisruptedNode::from_candidate)
        .collect();
    let savings_per_hour = nodes.iter().filter_map(|n| n.price).sum();
    vec![Command {
        method: Method::Emptiness,
        reason: DisruptionReason::Empty,
        candidates: nodes,
        replacements: Vec::new(),
        savings_per_hour,
        balanced_scores: Vec::new(),
    }]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::disruption::candidates::BlockReason;
    use crate::disruption::candidates::tests::{catalog, managed, pod_on, t0};
    use crate::scheduling::SchedulerOptions;
    use crate::state::{ClusterState, fixtures};

    #[test]
    fn a_pass_deletes_empty_nodes_and_explains_the_others() {
        let (claim_a, node_a) = managed("empty");
        let (claim_b, node_b) = managed("busy");
        let busy_pod = pod_on("web-1", "busy", serde_json::json!({}));
        let state = ClusterState::from_objects(
            vec![fixtures::nodepool("default")],
            vec![claim_a, claim_b],
            vec![node_a, node_b],
            vec![busy_pod],
        );
        let types: BTreeMap<String, Vec<Arc<crate::instance_type::InstanceType>>> = catalog()
            .into_iter()
            .map(|(pool, types)| (pool, types.into_iter().map(Arc::new).collect()))
            .collect();
        let scheduler = SchedulerOptions::default();
        let options = DisruptionOptions::default();
        let drift = ProviderDrift::new();
        let input = DisruptionInput {
            state: &state,
            instance_types: &types,
            scheduler: &scheduler,
            options: &options,
            provider_drift: &drift,
            now: t0()
                .checked_add(jiff::SignedDuration::from_hours(1))
                .unwrap(),
        };
        let pass = decide(&input);
        assert_eq!(pass.method, Some(Method::Emptiness));
        assert_eq!(pass.commands.len(), 1);
        let command = &pass.commands[0];
        assert_eq!(command.decision(), Decision::Delete);
        assert_eq!(command.reason, DisruptionReason::Empty);
        let names: Vec<&str> = command.candidates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["empty"]);
        assert_eq!(command.candidates[0].price, Some(0.096));
        assert!(
            pass.blocked.iter().all(|r| r.name != "empty"),
            "a disrupted node is not also blocked"
        );
        // `busy` fills no node of its own but emptiness ran first, so it waits for a later pass;
        // whatever explains other nodes must not be a budget (it allows the one empty node).
        assert!(
            pass.blocked
                .iter()
                .all(|r| !matches!(r.reason, BlockReason::BudgetExhausted { .. }))
        );
    }
}
