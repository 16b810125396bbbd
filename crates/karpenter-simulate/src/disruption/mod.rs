//! `simulate --disruption`: after the plan, the disruption loop in virtual time on the simulated
//! cluster (issue 10 item 3, issue 21 item 6). Each step: the nodes on their way out move on
//! ([`timeline`]: replacements initialize, pods are evicted within their PDBs and terminate,
//! instances shut down), expiration starts (forceful: expired NodeClaims drain at once), then
//! one pass of [`karpenter_core::disruption::decide`] over the cluster as it is, with every node
//! still on its way out counted against its budget; the pass's commands start (replacements
//! launch, initialized [`cluster::INITIALIZATION`] later; candidates are tainted and drain once
//! their replacements are initialized). Consolidation commands (multi- and single-node) first
//! wait upstream's 15 s validation delay and start only if core's `validate` still accepts them
//! then, as the controller's loop does. Commands run concurrently, as upstream's orchestration
//! queue runs them; a budget of one serialises a rollout because a candidate counts until its
//! instance is gone.
//!
//! Time then jumps to the next instant at which something can change (a node becoming
//! consolidatable, an expiry, a launched node initializing, a pod terminating, an instance gone,
//! a drain deadline, a budget schedule minute while a budget blocks a node), until nothing more
//! would happen or `until` has passed. What the orchestration does by itself (a replacement
//! initializing, a pod or an instance gone) happens at its instant; an instant that only a new
//! decision would act on is never closer than upstream's 10 s poll.

mod cluster;
mod polls;
pub mod report;
mod steps;
pub mod timeline;

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use karpenter_core::disruption::candidates::BlockReason;
use karpenter_core::disruption::emptiness::node_consolidatable_at;
use karpenter_core::disruption::validate::{VALIDATION_DELAY, needs_validation};
use karpenter_core::disruption::{
    Command, DisruptionInput, DisruptionOptions, Pass, ProviderDrift, decide, expiration, validate,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::scheduling::SchedulerOptions;
use karpenter_core::state::ClusterState;

use super::manifests::Manifests;
use super::plan::{PlanOutcome, SimulateError};
pub use cluster::INITIALIZATION;
use cluster::SimCluster;
use karpenter_sim::SimCloudProvider;
use polls::Polls;
use report::{
    After, Before, BlockedNode, CandidateReport, CommandReport, DisruptionReport, round6,
};
pub use report::{PlanWithDisruption, StepReport};
pub use timeline::{
    DEFAULT_INSTANCE_SHUTDOWN, DEFAULT_INSTANCE_SHUTDOWN_SECONDS, TimelineSettings,
};
use timeline::{Timeline, Trace};

pub use polls::{AFTER_ACTION, POLL};

/// Default bound on the loop's steps: far more than 24 h of real activity needs, small enough
/// that a decision that never settles ends with an error instead of spinning.
pub const MAX_STEPS: usize = 20_000;

/// Virtual time of the run.
#[derive(Clone, Copy, Debug)]
pub struct DisruptionSettings {
    /// Start: the instant pods of the input count as last bound.
    pub now: Timestamp,
    /// How much virtual time to run at most.
    pub until: SignedDuration,
    /// Step cap (see [`MAX_STEPS`]).
    pub max_steps: usize,
    /// `--feature-gates` (`SpotToSpotConsolidation` is the one the simulated methods read).
    pub feature_gates: karpenter_core::feature_gates::FeatureGates,
    /// How long pods and instances take to go (`--pod-termination-seconds`,
    /// `--instance-shutdown-seconds`).
    pub timeline: TimelineSettings,
}

#[derive(Debug, thiserror::Error)]
pub enum DisruptionSimError {
    #[error(transparent)]
    Plan(#[from] SimulateError),
    #[error(
        "the disruption loop did not settle: {steps} steps reached at {at} (commands so far: {commands}); this is a bug, please report it with the input"
    )]
    StepCap {
        steps: usize,
        at: Timestamp,
        commands: usize,
    },
    #[error("--until {0} goes past the end of time")]
    UntilOverflow(SignedDuration),
}

/// Runs the loop on the cluster of `manifests` plus the first plan's NodeClaims (`outcome`).
pub fn simulate_disruption(
    manifests: &Manifests,
    provider: &SimCloudProvider,
    options: SchedulerOptions,
    outcome: &PlanOutcome,
    settings: DisruptionSettings,
) -> Result<DisruptionReport, DisruptionSimError> {
    run(manifests, provider, options, outcome, settings).map(|(report, _)| report)
}

/// [`simulate_disruption`] with the [`Trace`] the property tests check.
pub(crate) fn run(
    manifests: &Manifests,
    provider: &SimCloudProvider,
    options: SchedulerOptions,
    outcome: &PlanOutcome,
    settings: DisruptionSettings,
) -> Result<(DisruptionReport, Trace), DisruptionSimError> {
    let start = settings.now;
    let end = start
        .checked_add(settings.until)
        .map_err(|_| DisruptionSimError::UntilOverflow(settings.until))?;
    let pool_types = pool_instance_types(manifests, provider)?;
    let mut cluster = SimCluster::new(manifests, provider, options, pool_types, start);
    cluster.apply_first_plan(manifests, outcome, start);
    let before = Before {
        nodes: cluster.node_count(),
        hourly_cost: round6(cluster.hourly_cost()),
    };
    let disruption_options = DisruptionOptions::from_gates(&settings.feature_gates);
    let provider_drift = ProviderDrift::new();
    let mut timeline = Timeline::new(settings.timeline);
    let mut commands: Vec<CommandReport> = Vec::new();
    let mut blocked: Vec<BlockedNode> = Vec::new();
    let mut scale_steps = steps::Steps::new(manifests, start);
    let mut now = start;
    let mut steps = 0usize;
    let mut polls = Polls::new(start);
    // Consolidation commands waiting for their validation: when they were decided, when the
    // validation is due.
    let mut validating: Option<(Timestamp, Timestamp, Vec<Command>)> = None;
    while now <= end {
        steps = steps.saturating_add(1);
        if steps > settings.max_steps {
            return Err(DisruptionSimError::StepCap {
                steps: settings.max_steps,
                at: now,
                commands: commands.len(),
            });
        }
        scale_steps.apply_due(&mut cluster, now, &commands)?;
        cluster.initialize_due(now);
        timeline.advance(&mut cluster, provider, now, &mut commands)?;
        let expired: Vec<String> = expiration::expired(&cluster.state(), now)
            .into_iter()
            .filter(|claim| {
                cluster
                    .node_of_claim(claim)
                    .is_none_or(|node| !timeline.is_retiring(&node))
            })
            .collect();
        if !expired.is_empty() {
            for claim in expired {
                expire(
                    &mut cluster,
                    &mut timeline,
                    provider,
                    &claim,
                    now,
                    &mut commands,
                );
            }
            timeline.advance(&mut cluster, provider, now, &mut commands)?;
        }
        polls.observe(cluster.changes(), now);
        let validation_due = validating.as_ref().is_some_and(|(_, due, _)| now >= *due);
        let pass_due = validating.is_none() && polls.next_pass(now) == Some(now);
        if !validation_due && !pass_due {
            match next_step(&timeline, &cluster, &scale_steps, &validating, &polls, now) {
                Some(next) => now = next,
                None => {
                    timeline.trace.converged = true;
                    break;
                }
            }
            continue;
        }
        let mut state = cluster.state();
        timeline.mark(&mut state, now);
        let input = DisruptionInput {
            state: &state,
            instance_types: &cluster.pool_types,
            scheduler: cluster.scheduler_options(),
            options: &disruption_options,
            provider_drift: &provider_drift,
            now,
        };
        let mut to_start: Vec<Command> = Vec::new();
        let mut validated = false;
        match validating.take() {
            // Upstream's validation: the consolidation decided `VALIDATION_DELAY` ago runs if
            // it still holds on the cluster as it is now. No pass meanwhile: the controller's
            // loop waits for the delay too.
            Some((_, due, decided)) if now >= due => {
                validated = true;
                to_start = decided
                    .into_iter()
                    .filter_map(|c| validate(&c, &input).ok())
                    .collect();
            }
            Some(waiting) => validating = Some(waiting),
            None => {
                let pass = decide(&input);
                timeline.trace.passes.push(now);
                blocked = pass
                    .blocked
                    .iter()
                    .map(|r| BlockedNode {
                        name: r.name.clone(),
                        node_pool: r.nodepool.clone(),
                        reason: r.reason.to_string(),
                    })
                    .collect();
                timeline.trace.last_blocked = pass.blocked.clone();
                timeline.trace.held_replacements.extend(
                    pass.blocked
                        .iter()
                        .filter(|r| matches!(r.reason, BlockReason::Replacing))
                        .map(|r| (now, r.name.clone())),
                );
                let validate_later =
                    pass.method.is_some_and(needs_validation) && !pass.commands.is_empty();
                polls.passed(
                    now,
                    cluster.changes(),
                    &pass,
                    expiration::next_expiry(&state, now),
                    undecided_instant(&state, &pass, now),
                    !validate_later && !pass.commands.is_empty(),
                );
                if validate_later {
                    let due = now.checked_add(VALIDATION_DELAY).unwrap_or(now);
                    validating = Some((now, due, pass.commands));
                } else {
                    to_start = pass.commands;
                }
            }
        }
        drop(state);
        let started = !to_start.is_empty();
        if validated {
            polls.validated(now, started);
        }
        if started {
            start_commands(
                &mut cluster,
                &mut timeline,
                provider,
                to_start,
                now,
                &mut commands,
            );
            // Deletes drain at once.
            timeline.advance(&mut cluster, provider, now, &mut commands)?;
        }
        polls.observe(cluster.changes(), now);
        match next_step(&timeline, &cluster, &scale_steps, &validating, &polls, now) {
            Some(next) => now = next,
            None => {
                timeline.trace.converged = true;
                break;
            }
        }
    }
    scale_steps.record(&cluster, &commands);
    let nodes = cluster.node_reports();
    blocked.retain(|b| nodes.iter().any(|n| n.name == b.name));
    let completed_at = commands
        .iter()
        .filter_map(|c| c.completed_at.as_deref()?.parse::<Timestamp>().ok())
        .max()
        .map(|at| at.to_string());
    let report = DisruptionReport {
        commands,
        blocked,
        before,
        completed_at,
        in_flight: timeline.retiring_nodes(),
        after: After {
            hourly_cost: round6(cluster.hourly_cost()),
            nodes,
            unschedulable: cluster.unschedulable.clone(),
        },
        steps: scale_steps.reports,
    };
    Ok((report, timeline.trace))
}

/// The next instant after `now` at which something happens: what the orchestration does by
/// itself (a replacement initialized, a pod gone, the minimum drain time over, an instance
/// gone, a replacement's timeout) at its own instant, as the controller's queue and
/// termination react within a second; a validation due; a scale step; or the next pass that
/// could decide otherwise ([`Polls`]). `None`: nothing more would happen.
fn next_step(
    timeline: &Timeline,
    cluster: &SimCluster<'_>,
    scale_steps: &steps::Steps,
    validating: &Option<(Timestamp, Timestamp, Vec<Command>)>,
    polls: &Polls,
    now: Timestamp,
) -> Option<Timestamp> {
    let after = |at: Timestamp| at > now;
    // No pass while a validation is waited for: the controller's tick sleeps through it.
    let pass = match validating {
        Some((_, due, _)) => Some(*due),
        None => polls.next_pass(now).filter(|at| after(*at)),
    };
    [
        timeline.next_event(cluster, now),
        cluster.next_initialization().filter(|at| after(*at)),
        // A scale step is the world changing at its own instant.
        scale_steps.next_at().filter(|at| after(*at)),
        pass,
    ]
    .into_iter()
    .flatten()
    .min()
}

/// The earliest instant after `now` from which the pass could decide otherwise that the
/// controller does not wake for (the instants a blocked node frees, and expiries, it does —
/// [`Polls::passed`] reads those from the pass): another node's `consolidateAfter` window
/// ending, a budget schedule's minute while a budget holds a node back.
fn undecided_instant(state: &ClusterState, pass: &Pass, now: Timestamp) -> Option<Timestamp> {
    // Budget windows open and close on cron minutes: while a budget holds a node back and some
    // budget has a schedule, look again at the next minute.
    let budget_blocked = pass
        .blocked
        .iter()
        .any(|r| matches!(r.reason, BlockReason::BudgetExhausted { .. }));
    let scheduled = state.nodepools().any(|p| {
        p.spec
            .disruption
            .as_ref()
            .and_then(|d| d.budgets.as_ref())
            .is_some_and(|b| b.iter().any(|b| b.schedule.is_some()))
    });
    let next_minute = (budget_blocked && scheduled)
        .then(|| {
            let minute = now.as_second().div_euclid(60).saturating_add(1);
            Timestamp::from_second(minute.saturating_mul(60)).ok()
        })
        .flatten();
    // Any node's window, not only the candidates': a node under its window takes no moved
    // pods, so another node's consolidation may become possible when it ends.
    let windows = state.state_nodes().into_iter().filter_map(|n| {
        let pool = state.nodepool(n.nodepool()?)?;
        node_consolidatable_at(pool, n.nodeclaim?, n.node, &n.pods).filter(|at| *at > now)
    });
    windows.chain(next_minute).min()
}

/// Expiration of NodeClaim `claim` at `now` (forceful: no budget, no replacement first): its
/// node drains at once, its pods are provisioned again as they are evicted.
fn expire(
    cluster: &mut SimCluster<'_>,
    timeline: &mut Timeline,
    provider: &SimCloudProvider,
    claim: &str,
    now: Timestamp,
    reports: &mut Vec<CommandReport>,
) {
    let node = cluster.node_of_claim(claim).filter(|n| cluster.has_node(n));
    let candidates: Vec<CandidateReport> = node
        .as_ref()
        .and_then(|node| cluster.node_reports().into_iter().find(|n| &n.name == node))
        .map(|n| CandidateReport {
            name: n.name,
            node_pool: n.node_pool.unwrap_or_default(),
            instance_type: n.instance_type,
            zone: n.zone,
            capacity_type: n.capacity_type,
            price: n.price,
        })
        .into_iter()
        .collect();
    let index = reports.len();
    reports.push(CommandReport {
        at: now.to_string(),
        completed_at: None,
        reason: "Expired".to_string(),
        decision: "delete".to_string(),
        method: "expiration".to_string(),
        savings_per_hour: savings(&candidates, &[]),
        candidates,
        replacements: Vec::new(),
        rolled_back: None,
    });
    let node: Vec<String> = node.into_iter().collect();
    if node.is_empty() {
        cluster.remove_claim(claim);
    }
    timeline.start(
        cluster,
        provider,
        index,
        &node,
        Vec::new(),
        None,
        now,
        reports,
    );
    timeline.complete_now(index, now, reports);
}

/// Starts the commands at `now`: the [`Timeline`] marks the candidates and launches
/// the replacements (initialized [`INITIALIZATION`] later), as the orchestration machine says.
fn start_commands(
    cluster: &mut SimCluster<'_>,
    timeline: &mut Timeline,
    provider: &SimCloudProvider,
    commands: Vec<Command>,
    now: Timestamp,
    reports: &mut Vec<CommandReport>,
) {
    for command in commands {
        let Command {
            method,
            reason,
            candidates,
            replacements,
            savings_per_hour: _,
            balanced_scores: _,
        } = command;
        let decision = if replacements.is_empty() {
            "delete"
        } else {
            "replace"
        };
        let names: Vec<String> = candidates.iter().map(|c| c.name.clone()).collect();
        let candidates: Vec<CandidateReport> = candidates
            .into_iter()
            .map(|c| CandidateReport {
                name: c.name,
                node_pool: c.node_pool,
                instance_type: c.instance_type,
                zone: c.zone,
                capacity_type: c.capacity_type,
                price: c.price,
            })
            .collect();
        let index = reports.len();
        reports.push(CommandReport {
            at: now.to_string(),
            completed_at: None,
            reason: reason.as_str().to_string(),
            decision: decision.to_string(),
            method: method.as_str().to_string(),
            savings_per_hour: savings(&candidates, &[]),
            candidates,
            replacements: Vec::new(),
            rolled_back: None,
        });
        timeline.start(
            cluster,
            provider,
            index,
            &names,
            replacements,
            Some(reason),
            now,
            reports,
        );
    }
}

fn savings(candidates: &[CandidateReport], replacements: &[report::ReplacementReport]) -> f64 {
    let removed: f64 = candidates.iter().filter_map(|c| c.price).sum();
    let added: f64 = replacements.iter().map(|r| r.price).sum();
    round6(removed - added)
}

/// Each NodePool's instance types, shaped by its EC2NodeClass as the plan shapes them.
pub(crate) fn pool_instance_types(
    manifests: &Manifests,
    provider: &SimCloudProvider,
) -> Result<BTreeMap<String, Vec<Arc<InstanceType>>>, SimulateError> {
    let mut types = BTreeMap::new();
    for pool in &manifests.node_pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let class = &pool.spec.template.spec.node_class_ref;
        let node_class = manifests
            .node_classes
            .iter()
            .filter(|_| class.kind == "EC2NodeClass")
            .find(|c| c.metadata.name.as_deref() == Some(class.name.as_str()));
        let resolved = provider.instance_types_for(pool, node_class).map_err(|e| {
            SimulateError::InstanceTypes {
                name: name.clone(),
                message: e.to_string(),
            }
        })?;
        types.insert(name, resolved);
    }
    Ok(crate::plan::apply_overlays(manifests, types))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties;
