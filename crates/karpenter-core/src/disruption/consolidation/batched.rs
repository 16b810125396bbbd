//! `CostOptimal` multi-node consolidation's third search: as many of upstream's single-node
//! moves as can go in one command ([`batched_group`]).
//!
//! Upstream's prefix search stops at the first candidates that cannot go together: when the
//! two best candidates both need the same free room (their pods spread over one zone, say), or
//! each needs a replacement of its own (one pod per node by anti-affinity, which one
//! replacement cannot hold), no prefix of two works, and every later move waits for
//! single-node consolidation, one node per command. Each command waits out the 15 s
//! validation, so a cluster with a hundred removable or oversized nodes (upstream's
//! wide-deployments and interference scale-ins) takes half an hour to shrink. Skipping a
//! candidate that does not go with the group, instead of stopping there, makes the same moves
//! in one command.

use super::super::candidates::Candidate;
use super::super::command::{Command, DisruptionInput, Method};
use super::super::simulate::Simulator;
use super::replacements::MIN_SAVINGS_FRACTION;
use super::{MAX_MULTI_CANDIDATES, compute_as_planned};

/// Candidates in a row that can go on their own but not with the group, after which it stops
/// growing. Each such miss re-plans the whole group (up to a hundred nodes' pods, and the
/// kube-scheduler check of its replacements), so walking a thousand of them took 20 s at 1,000
/// nodes; when twenty in a row do not fit beside the group, the room they need is gone.
pub(super) const MAX_MISSES_IN_A_ROW: usize = 20;

/// The command for the group grown along `order` (upstream's: best savings ratio first, already
/// within budget), until it holds [`MAX_MULTI_CANDIDATES`]. Candidates nothing improves may
/// fill the head of the order (in upstream's interference scale-in, two hundred nodes each
/// holding a large pod no cheaper node takes tie in savings ratio with the oversized nodes
/// behind them), so the walk goes past them: a candidate joins only if it is one of upstream's
/// single-node moves (it can be deleted or replaced on its own, one simulation of its own pods,
/// as cheap as single-node consolidation's) and the group's command with it (all their pods
/// re-planned together, a delete or cheaper replacements) saves at least
/// [`MIN_SAVINGS_FRACTION`] of its price more. The first that can go alone starts the group, as
/// upstream's single-node search would take it. After [`MAX_MISSES_IN_A_ROW`] candidates in a
/// row that can go alone but not with the group, the group is final. `None` below two nodes
/// (single-node consolidation finds one node's move).
pub(super) fn batched_group<'c>(
    input: &DisruptionInput<'_>,
    simulator: &Simulator<'c>,
    order: &[&Candidate<'c>],
) -> Option<Command> {
    let mut group: Vec<&Candidate<'c>> = Vec::new();
    let mut saved = 0.0;
    let mut best: Option<Command> = None;
    let mut misses_in_a_row = 0;
    for candidate in order {
        if group.len() == MAX_MULTI_CANDIDATES || misses_in_a_row == MAX_MISSES_IN_A_ROW {
            break;
        }
        let planned = |candidates: &[&Candidate<'c>]| {
            compute_as_planned(input, simulator, candidates, Method::MultiNodeConsolidation)
        };
        let margin = candidate.price.unwrap_or(0.0) * MIN_SAVINGS_FRACTION;
        let alone = planned(&[*candidate]);
        if group.is_empty() {
            if let Ok(command) = alone
                && command.savings_per_hour >= margin
            {
                saved = command.savings_per_hour;
                group.push(candidate);
            }
            continue;
        }
        if alone.is_err() {
            continue;
        }
        group.push(candidate);
        match planned(&group) {
            Ok(command) if command.savings_per_hour >= saved + margin => {
                saved = command.savings_per_hour;
                best = Some(command);
                misses_in_a_row = 0;
            }
            _ => {
                group.pop();
                misses_in_a_row += 1;
            }
        }
    }
    best
}
