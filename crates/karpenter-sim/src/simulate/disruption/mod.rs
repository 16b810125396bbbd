//! `simulate --disruption`: after the plan, the disruption loop in virtual time on the simulated
//! cluster (issue 10 item 3). Each step: expiration (forceful: expired NodeClaims go, their pods
//! are provisioned again), then one pass of [`karpenter_core::disruption::decide`]; a command
//! launches its replacements (initialized [`cluster::INITIALIZATION`] later), then removes its
//! candidates and provisions their pods with the pipeline of the first plan. Time then jumps to
//! the next instant at which something can change (a node becoming consolidatable, an expiry,
//! a launched node initializing, a budget schedule minute while a budget blocks a node), never
//! closer than upstream's 10 s poll, until nothing can happen or `until` has passed.
//!
//! Commands run one after another: the loop waits for a command to complete before the next
//! pass, as upstream's single orchestration queue does for consolidation.

mod cluster;
pub mod report;

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use karpenter_core::disruption::candidates::BlockReason;
use karpenter_core::disruption::{
    Command, DisruptionInput, DisruptionOptions, Pass, ProviderDrift, decide, expiration,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::scheduling::SchedulerOptions;
use karpenter_core::state::ClusterState;

use super::manifests::Manifests;
use super::plan::{PlanOutcome, SimulateError};
use crate::SimCloudProvider;
pub use cluster::INITIALIZATION;
use cluster::{SimCluster, replacement_report};
pub use report::PlanWithDisruption;
use report::{
    After, Before, BlockedNode, CandidateReport, CommandReport, DisruptionReport, round6,
};

/// Upstream polls the disruption loop every 10 s; virtual time never steps closer than that
/// unless a command just changed the cluster.
pub const POLL: SignedDuration = SignedDuration::from_secs(10);

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
    #[error("replacement for command at {at} could not launch: {message}")]
    Launch { at: Timestamp, message: String },
}

/// Runs the loop on the cluster of `manifests` plus the first plan's NodeClaims (`outcome`).
pub fn simulate_disruption(
    manifests: &Manifests,
    provider: &SimCloudProvider,
    options: SchedulerOptions,
    outcome: &PlanOutcome,
    settings: DisruptionSettings,
) -> Result<DisruptionReport, DisruptionSimError> {
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
    let mut commands: Vec<CommandReport> = Vec::new();
    let mut blocked: Vec<BlockedNode> = Vec::new();
    let mut now = start;
    let mut steps = 0usize;
    while now <= end {
        steps = steps.saturating_add(1);
        if steps > settings.max_steps {
            return Err(DisruptionSimError::StepCap {
                steps: settings.max_steps,
                at: now,
                commands: commands.len(),
            });
        }
        cluster.initialize_due(now);
        let state = cluster.state();
        let expired = expiration::expired(&state, now);
        if !expired.is_empty() {
            drop(state);
            for claim in expired {
                commands.push(expire(&mut cluster, &claim, now)?);
            }
            continue;
        }
        let pass = decide(&DisruptionInput {
            state: &state,
            instance_types: &cluster.pool_types,
            scheduler: cluster.scheduler_options(),
            options: &disruption_options,
            provider_drift: &provider_drift,
            now,
        });
        let next = next_instant(&state, &pass, &cluster, now);
        drop(state);
        blocked = pass
            .blocked
            .iter()
            .map(|r| BlockedNode {
                name: r.name.clone(),
                node_pool: r.nodepool.clone(),
                reason: r.reason.to_string(),
            })
            .collect();
        if !pass.commands.is_empty() {
            now = execute(&mut cluster, provider, pass, now, &mut commands)?;
            continue;
        }
        match next {
            Some(next) => now = next.max(now.checked_add(POLL).unwrap_or(next)),
            None => break,
        }
    }
    let nodes = cluster.node_reports();
    blocked.retain(|b| nodes.iter().any(|n| n.name == b.name));
    Ok(DisruptionReport {
        commands,
        blocked,
        before,
        after: After {
            hourly_cost: round6(cluster.hourly_cost()),
            nodes,
            unschedulable: cluster.unschedulable.clone(),
        },
    })
}

/// The earliest instant after `now` at which the pass could decide otherwise.
fn next_instant(
    state: &ClusterState,
    pass: &Pass,
    cluster: &SimCluster<'_>,
    now: Timestamp,
) -> Option<Timestamp> {
    let consolidatable = pass.blocked.iter().filter_map(|r| match r.reason {
        BlockReason::ConsolidatableAt(at) if at > now => Some(at),
        _ => None,
    });
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
    consolidatable
        .chain(expiration::next_expiry(state, now))
        .chain(cluster.next_initialization().filter(|at| *at > now))
        .chain(next_minute)
        .min()
}

/// Expiration of NodeClaim `claim` at `now`: the node goes at once, its pods are provisioned
/// again.
fn expire(
    cluster: &mut SimCluster<'_>,
    claim: &str,
    now: Timestamp,
) -> Result<CommandReport, DisruptionSimError> {
    let (candidates, displaced) = match cluster.node_of_claim(claim) {
        Some(node) => {
            let report = cluster.node_reports().into_iter().find(|n| n.name == node);
            let candidate = report.map(|n| CandidateReport {
                name: n.name,
                node_pool: n.node_pool.unwrap_or_default(),
                instance_type: n.instance_type,
                zone: n.zone,
                capacity_type: n.capacity_type,
                price: n.price,
            });
            (candidate.into_iter().collect(), cluster.remove_node(&node))
        }
        None => {
            cluster.remove_claim(claim);
            (Vec::new(), Vec::new())
        }
    };
    let replacements = cluster.reprovision(displaced, now)?;
    let at = now.to_string();
    Ok(CommandReport {
        at: at.clone(),
        completed_at: at,
        reason: "Expired".to_string(),
        decision: if replacements.is_empty() {
            "delete"
        } else {
            "replace"
        }
        .to_string(),
        method: "expiration".to_string(),
        savings_per_hour: savings(&candidates, &replacements),
        candidates,
        replacements,
    })
}

/// Runs the pass's commands: replacements launch at `now`, candidates go once the replacements
/// are initialized (at once for deletes), their pods are provisioned again. Returns the instant
/// the last command completed.
fn execute(
    cluster: &mut SimCluster<'_>,
    provider: &SimCloudProvider,
    pass: Pass,
    now: Timestamp,
    reports: &mut Vec<CommandReport>,
) -> Result<Timestamp, DisruptionSimError> {
    let ready_at = now.checked_add(INITIALIZATION).unwrap_or(now);
    let mut started = Vec::new();
    for command in pass.commands {
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
        let mut launched = Vec::new();
        for claim in replacements {
            let choice =
                provider
                    .launch_choice(&claim)
                    .map_err(|e| DisruptionSimError::Launch {
                        at: now,
                        message: e.to_string(),
                    })?;
            let name = cluster.launch(claim, &choice, now, ready_at);
            launched.push(replacement_report(&name, &choice));
        }
        let completed_at = if launched.is_empty() { now } else { ready_at };
        started.push((method, reason, decision, candidates, launched, completed_at));
    }
    let mut done = now;
    for (method, reason, decision, candidates, mut launched, completed_at) in started {
        cluster.initialize_due(completed_at);
        let mut displaced = Vec::new();
        for candidate in &candidates {
            displaced.extend(cluster.remove_node(&candidate.name));
        }
        // Pods the replacements cannot hold get nodes of their own; they count against the
        // command's savings.
        launched.extend(cluster.reprovision(displaced, completed_at)?);
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
        reports.push(CommandReport {
            at: now.to_string(),
            completed_at: completed_at.to_string(),
            reason: reason.as_str().to_string(),
            decision: decision.to_string(),
            method: method.as_str().to_string(),
            savings_per_hour: savings(&candidates, &launched),
            candidates,
            replacements: launched,
        });
        done = done.max(completed_at);
    }
    Ok(done)
}

fn savings(candidates: &[CandidateReport], replacements: &[report::ReplacementReport]) -> f64 {
    let removed: f64 = candidates.iter().filter_map(|c| c.price).sum();
    let added: f64 = replacements.iter().map(|r| r.price).sum();
    round6(removed - added)
}

/// Each NodePool's instance types, shaped by its EC2NodeClass as the plan shapes them.
fn pool_instance_types(
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
    Ok(types)
}

#[cfg(test)]
mod tests;
