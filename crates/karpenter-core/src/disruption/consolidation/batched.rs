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

/// The command for the group grown along `order` (upstream's: best savings ratio first, already
/// within budget; one simulation each, until the group holds [`MAX_MULTI_CANDIDATES`]). Every
/// candidate is looked at, not only the first hundred: candidates nothing improves may fill
/// the head of the order (in upstream's interference scale-in, two hundred nodes each holding a
/// large pod no cheaper node takes tie in savings ratio with the oversized nodes behind them).
/// The
/// first candidate that can be deleted or replaced on its own starts the group, as upstream's
/// single-node search would take it; a later one joins when the group's command with it (all
/// their pods re-planned together, a delete or cheaper replacements) saves at least
/// [`MIN_SAVINGS_FRACTION`] of its price more, and is skipped otherwise. `None` below two
/// nodes (single-node consolidation finds one node's move).
pub(super) fn batched_group<'c>(
    input: &DisruptionInput<'_>,
    simulator: &Simulator<'c>,
    order: &[&Candidate<'c>],
) -> Option<Command> {
    let mut group: Vec<&Candidate<'c>> = Vec::new();
    let mut saved = 0.0;
    let mut best: Option<Command> = None;
    for candidate in order {
        if group.len() == MAX_MULTI_CANDIDATES {
            break;
        }
        group.push(candidate);
        let needed = saved + candidate.price.unwrap_or(0.0) * MIN_SAVINGS_FRACTION;
        match compute_as_planned(input, simulator, &group, Method::MultiNodeConsolidation) {
            Ok(command) if command.savings_per_hour >= needed => {
                saved = command.savings_per_hour;
                if group.len() >= 2 {
                    best = Some(command);
                }
            }
            _ => {
                group.pop();
            }
        }
    }
    best
}
