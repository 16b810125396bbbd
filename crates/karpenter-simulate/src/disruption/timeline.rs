//! How a disrupted node leaves the simulated cluster, in the time a cluster takes (issue 21
//! item 6; issue 33): the steps of the orchestration machine
//! ([`karpenter_core::disruption::orchestration`]) the controller executes, applied to the
//! simulated cluster in virtual time. This module only performs them and keeps the clock:
//!
//! - a command's [`command::next`] marks (taints) the candidates, launches the replacements,
//!   waits for them to initialize until upstream's timeout, then deletes the candidates — or
//!   rolls back (untaints them; the command's report says when and why);
//! - a deleted candidate's [`termination::next`] evicts its pods in drain order with the PDB
//!   check, force-deletes what the `terminationGracePeriod` deadline demands, ignores pods
//!   stuck terminating, waits the minimum drain time, terminates the instance
//!   ([`TimelineSettings::instance_shutdown`]) and releases the Node. An evicted pod is
//!   provisioned again at once (its controller re-creates it) and its old copy terminates on
//!   the node after [`TimelineSettings::pod_termination`].
//!
//! A command is complete when its last candidate is gone. Several commands may be in flight;
//! each pass's budgets see every node still on its way out.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::NodeClaim;
use karpenter_core::disruption::candidates::Rejection;
use karpenter_core::disruption::orchestration::command::{self, CommandStep};
use karpenter_core::disruption::orchestration::termination::{self, MIN_DRAIN_TIME};
use karpenter_core::disruption::orchestration::{
    CandidateView, CommandView, InstanceView, Marking, NodeView, ReplacementView, TerminationStep,
    pdb, replacement_timeout,
};
use karpenter_core::disruption::{BudgetAllowance, DisruptionReason, PoolNodeCount};
use karpenter_core::drain::{self, Action, grace_seconds};
use karpenter_core::nodeclaim_lifecycle::termination_deadline;
use karpenter_core::pod::Pod;
use karpenter_core::provisioning::reschedulable::moves_with_its_node;
use karpenter_core::state::ClusterState;
use karpenter_sim::SimCloudProvider;

use super::cluster::{INITIALIZATION, SimCluster, replacement_report};
use super::report::{CommandReport, RolledBack, round6};
use crate::plan::SimulateError;

/// How long an instance takes from termination to gone by default: EC2 instances spend tens of
/// seconds to a few minutes in `shutting-down`; a round minute.
pub const DEFAULT_INSTANCE_SHUTDOWN_SECONDS: u32 = 60;
pub const DEFAULT_INSTANCE_SHUTDOWN: SignedDuration =
    SignedDuration::from_secs(DEFAULT_INSTANCE_SHUTDOWN_SECONDS as i64);

/// The durations of a node's way out (`--pod-termination-seconds`,
/// `--instance-shutdown-seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineSettings {
    /// How long an evicted pod takes to terminate, at most its own
    /// `terminationGracePeriodSeconds`. `None`: the whole grace period (Kubernetes' default
    /// 30 s when the pod sets none), the slowest a pod may be.
    pub pod_termination: Option<SignedDuration>,
    /// From the termination of the instance to the instance gone.
    pub instance_shutdown: SignedDuration,
    /// How long a replacement takes to initialize; `None`: it never does (the command then
    /// rolls back at upstream's timeout).
    pub initialization: Option<SignedDuration>,
}

impl Default for TimelineSettings {
    fn default() -> Self {
        TimelineSettings {
            pod_termination: None,
            instance_shutdown: DEFAULT_INSTANCE_SHUTDOWN,
            initialization: Some(INITIALIZATION),
        }
    }
}

/// A command between its start and the deletion of its candidates (or its rollback).
#[derive(Clone, Debug)]
struct InFlight {
    view: CommandView,
    /// The replacements to create, and the name of each once created.
    claims: Vec<NodeClaim>,
    launched: Vec<Option<String>>,
}

/// Where a node on its way out is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Tainted; its command has not deleted it yet.
    Marked,
    /// Its NodeClaim is deleting: the termination machine has it.
    Terminating {
        started: Timestamp,
        /// Drain start + the NodeClaim's `terminationGracePeriod`.
        deadline: Option<Timestamp>,
        drained_since: Option<Timestamp>,
        /// When the instance is gone, once its termination was asked for.
        gone_at: Option<Timestamp>,
    },
}

#[derive(Clone, Debug)]
struct Retiring {
    /// Index of the command's report.
    command: usize,
    pool: Option<String>,
    phase: Phase,
    /// Evicted pods still terminating on the node, each with the instant it is gone.
    terminating: Vec<(Pod, Timestamp)>,
    /// When the termination controller's next round of evictions is due: a round (pods
    /// evicted, or refused by a PDB) requeues [`super::POLL`] later; other steps of the loop in
    /// between (a pass, another node's event) do not evict.
    next_round: Option<Timestamp>,
}

/// What the property tests check the run against; recorded as the run goes.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Every voluntary command's start, per NodePool it touches.
    pub budget_checks: Vec<BudgetCheck>,
    pub evictions: Vec<Eviction>,
    /// Every PDB's counts after each step.
    pub pdb_samples: Vec<PdbSample>,
    /// The last pass's reasons for the nodes it left alone.
    pub last_blocked: Vec<Rejection>,
    /// The instants at which the loop ran a pass of `decide`.
    pub passes: Vec<Timestamp>,
    /// Each pass's instant and the replacements it held out because their command's candidates
    /// were still in the cluster (`BlockReason::Replacing`).
    pub held_replacements: Vec<(Timestamp, String)>,
    /// The loop stopped because nothing more would happen (not at `--until`).
    pub converged: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetCheck {
    pub at: Timestamp,
    pub pool: String,
    pub reason: DisruptionReason,
    /// The pool's nodes on their way out once the command started (counted until gone).
    pub in_flight: u32,
    /// What the binding budget allows for the reason (`None`: unlimited).
    pub limit: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub at: Timestamp,
    pub pod: String,
    pub node: String,
    /// Deleted at the drain deadline (PDB and do-not-disrupt bypassed).
    pub forced: bool,
    /// The pod carried `karpenter.sh/do-not-disrupt` when it went.
    pub do_not_disrupt: bool,
    /// The earliest instant the drain deadline may force this pod: the deadline minus the
    /// pod's grace period (`None`: no deadline, the pod is never forced).
    pub forced_from: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PdbSample {
    pub at: Timestamp,
    pub pdb: String,
    pub healthy: i32,
    pub desired: i32,
}

/// The nodes on their way out and the commands they belong to.
#[derive(Debug, Default)]
pub struct Timeline {
    settings: TimelineSettings,
    retiring: BTreeMap<String, Retiring>,
    /// Commands not past their candidates' deletion, by report index.
    in_flight: BTreeMap<usize, InFlight>,
    /// Per command report: its candidates not gone yet and the latest instant one went.
    open: BTreeMap<usize, (BTreeSet<String>, Option<Timestamp>)>,
    /// Something changed in the last [`Timeline::advance`] (an eviction, a phase, a node gone),
    /// so a refused eviction is worth retrying at the next poll.
    progressed: bool,
    /// Candidates of rolled-back commands and the end of their hold
    /// ([`command::hold_after_rollback`]), applied to each pass's state by [`Timeline::mark`].
    holds: BTreeMap<String, Timestamp>,
    /// Each launched replacement with its command's candidates, applied to each pass's state by
    /// [`Timeline::mark`] (`ClusterState::mark_replacing`: no command takes it while one of
    /// them is still in the cluster).
    replacing: BTreeMap<String, Vec<String>>,
    pub trace: Trace,
}

impl Timeline {
    pub fn new(settings: TimelineSettings) -> Self {
        Timeline {
            settings,
            ..Timeline::default()
        }
    }

    pub fn is_retiring(&self, node: &str) -> bool {
        self.retiring.contains_key(node)
    }

    /// The nodes still on their way out, by name.
    pub fn retiring_nodes(&self) -> Vec<String> {
        self.retiring.keys().cloned().collect()
    }

    /// The state a pass sees: every node on its way out is being disrupted (a candidate for no
    /// other command, counted by its budget) and marked for deletion (its pods need room
    /// elsewhere); a rolled-back command's candidates are held until their hold ends.
    pub fn mark(&self, state: &mut ClusterState, now: Timestamp) {
        for name in self.retiring.keys() {
            state.mark_being_disrupted(name);
            state.mark_for_deletion(name);
        }
        for (name, until) in self.holds.iter().filter(|(_, until)| **until > now) {
            state.hold_after_rollback(name, *until, now);
        }
        for (name, candidates) in &self.replacing {
            state.mark_replacing(name, candidates.iter().map(String::as_str));
        }
    }

    /// Registers command report `command` (already in `reports`) and runs it as far as it goes
    /// at `now`: `candidates` are marked, `replacements` launched. `reason` is the voluntary
    /// reason whose budget the command is within (`None` for expiration, which has none).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        cluster: &mut SimCluster<'_>,
        provider: &SimCloudProvider,
        command: usize,
        candidates: &[String],
        replacements: Vec<NodeClaim>,
        reason: Option<DisruptionReason>,
        now: Timestamp,
        reports: &mut [CommandReport],
    ) {
        let candidates: Vec<String> = candidates
            .iter()
            .filter(|name| cluster.has_node(name) && !self.retiring.contains_key(*name))
            .cloned()
            .collect();
        self.open
            .insert(command, (candidates.iter().cloned().collect(), None));
        let view = CommandView {
            started_at: now,
            timeout: replacement_timeout(self.in_flight.len().saturating_add(1)),
            candidates: candidates
                .iter()
                .map(|name| CandidateView {
                    name: name.clone(),
                    marking: Marking::NotYet,
                    deleting: false,
                })
                .collect(),
            replacements: vec![ReplacementView::NotCreated; replacements.len()],
            committed: false,
        };
        let launched = vec![None; replacements.len()];
        self.in_flight.insert(
            command,
            InFlight {
                view,
                claims: replacements,
                launched,
            },
        );
        self.drive(cluster, provider, command, now, reports);
        if let Some(reason) = reason {
            self.record_budgets(cluster, &candidates, reason, now);
        }
    }

    /// Applies command `index`'s steps at `now` until it waits or ends.
    fn drive(
        &mut self,
        cluster: &mut SimCluster<'_>,
        provider: &SimCloudProvider,
        index: usize,
        now: Timestamp,
        reports: &mut [CommandReport],
    ) {
        // Each step changes what the next observes; a command has at most five phases.
        for _ in 0..8 {
            let Some(flight) = self.in_flight.get_mut(&index) else {
                return;
            };
            for (seen, name) in flight.view.replacements.iter_mut().zip(&flight.launched) {
                if let Some(name) = name {
                    *seen = if !cluster.has_node(name) {
                        ReplacementView::Gone
                    } else if cluster.initialized_or_gone(name) {
                        ReplacementView::Initialized
                    } else {
                        ReplacementView::Launching
                    };
                }
            }
            let plan = command::next(&flight.view, now);
            for step in &plan.steps {
                self.apply_command_step(cluster, provider, index, step, now, reports);
            }
            if plan.is_final() || plan.look_again.is_some() {
                return;
            }
        }
    }

    fn apply_command_step(
        &mut self,
        cluster: &mut SimCluster<'_>,
        provider: &SimCloudProvider,
        index: usize,
        step: &CommandStep,
        now: Timestamp,
        reports: &mut [CommandReport],
    ) {
        let Some(flight) = self.in_flight.get_mut(&index) else {
            return;
        };
        match step {
            CommandStep::Mark(names) => {
                for name in names {
                    cluster.taint_disrupted(name, true);
                    self.retiring.insert(
                        name.clone(),
                        Retiring {
                            command: index,
                            pool: cluster.node_pool_of(name),
                            phase: Phase::Marked,
                            terminating: Vec::new(),
                            next_round: None,
                        },
                    );
                }
                for candidate in &mut flight.view.candidates {
                    candidate.marking = Marking::Marked;
                }
            }
            // Writes to the simulated cluster do not fail: nothing to drop.
            CommandStep::Drop(_) | CommandStep::WaitForInitialization { .. } => {}
            // Every node on its way out is marked for deletion in each pass's state (`mark`).
            CommandStep::Commit => flight.view.committed = true,
            CommandStep::CreateReplacements => {
                let ready_at = self
                    .settings
                    .initialization
                    .and_then(|d| now.checked_add(d).ok());
                let candidates: Vec<String> = flight
                    .view
                    .candidates
                    .iter()
                    .map(|c| c.name.clone())
                    .collect();
                // Marks that protect nothing any more (every candidate gone) go first.
                self.replacing
                    .retain(|_, of| of.iter().any(|c| cluster.has_node(c)));
                for ((claim, seen), launched) in flight
                    .claims
                    .iter()
                    .zip(flight.view.replacements.iter_mut())
                    .zip(flight.launched.iter_mut())
                {
                    match provider.launch_choice(claim) {
                        Ok(choice) => {
                            let name = cluster.launch(claim.clone(), &choice, now, ready_at);
                            if let Some(report) = reports.get_mut(index) {
                                report.replacements.push(replacement_report(&name, &choice));
                                refresh(report);
                            }
                            self.replacing.insert(name.clone(), candidates.clone());
                            *launched = Some(name);
                            *seen = ReplacementView::Launching;
                        }
                        Err(err) => *seen = ReplacementView::LaunchFailed(err.to_string()),
                    }
                }
            }
            CommandStep::DeleteCandidates(names) => {
                for name in names {
                    let phase = Self::terminating_phase(cluster, name, now);
                    if let Some(retiring) = self.retiring.get_mut(name) {
                        retiring.phase = phase;
                    }
                }
                for candidate in &mut flight.view.candidates {
                    candidate.deleting = true;
                }
            }
            CommandStep::RollBack(failure) => {
                let until = command::hold_after_rollback(now);
                for name in flight.launched.iter().flatten() {
                    self.replacing.remove(name);
                }
                for candidate in &flight.view.candidates {
                    cluster.taint_disrupted(&candidate.name, false);
                    self.retiring.remove(&candidate.name);
                    self.holds.insert(candidate.name.clone(), until);
                }
                self.open.remove(&index);
                self.in_flight.remove(&index);
                if let Some(report) = reports.get_mut(index) {
                    report.rolled_back = Some(RolledBack {
                        at: now.to_string(),
                        reason: failure.to_string(),
                    });
                }
            }
            CommandStep::Finish => {
                self.in_flight.remove(&index);
                self.complete_now(index, now, reports);
            }
        }
        self.progressed = true;
    }

    fn terminating_phase(cluster: &SimCluster<'_>, node: &str, now: Timestamp) -> Phase {
        let deadline = cluster.claim_of_node(node).and_then(|claim| {
            let mut deleted = claim.clone();
            deleted.metadata.deletion_timestamp = Some(Time(now));
            termination_deadline(&deleted)
        });
        Phase::Terminating {
            started: now,
            deadline,
            drained_since: None,
            gone_at: None,
        }
    }

    /// One [`BudgetCheck`] per NodePool of `candidates`, after they started.
    fn record_budgets(
        &mut self,
        cluster: &SimCluster<'_>,
        candidates: &[String],
        reason: DisruptionReason,
        now: Timestamp,
    ) {
        let mut state = cluster.state();
        self.mark(&mut state, now);
        let counts = PoolNodeCount::by_nodepool(&state);
        let pools: BTreeSet<String> = candidates
            .iter()
            .filter_map(|c| self.retiring.get(c)?.pool.clone())
            .collect();
        for pool in pools {
            let Some(node_pool) = state.nodepool(&pool) else {
                continue;
            };
            let count = counts.get(&pool).copied().unwrap_or_default();
            let allowance = BudgetAllowance::evaluate(node_pool, reason, count, now);
            let in_flight = self
                .retiring
                .values()
                .filter(|r| r.pool.as_deref() == Some(pool.as_str()))
                .count();
            self.trace.budget_checks.push(BudgetCheck {
                at: now,
                pool,
                reason,
                in_flight: u32::try_from(in_flight).unwrap_or(u32::MAX),
                limit: allowance.binding.as_ref().map(|b| b.limit),
            });
        }
    }

    /// Moves every command and every node on its way out as far as it gets by `now`.
    pub fn advance(
        &mut self,
        cluster: &mut SimCluster<'_>,
        provider: &SimCloudProvider,
        now: Timestamp,
        reports: &mut [CommandReport],
    ) -> Result<(), SimulateError> {
        self.progressed = false;
        let commands: Vec<usize> = self.in_flight.keys().copied().collect();
        for index in commands {
            self.drive(cluster, provider, index, now, reports);
        }
        let names: Vec<String> = self.retiring.keys().cloned().collect();
        for name in names {
            self.advance_node(cluster, &name, now, reports)?;
        }
        cluster.refresh_pdb_status();
        for (budget, counts) in cluster.pdb_counts() {
            self.trace.pdb_samples.push(PdbSample {
                at: now,
                pdb: pdb::key(budget),
                healthy: counts.healthy,
                desired: counts.desired,
            });
        }
        Ok(())
    }

    /// The pods the termination machine sees on `name`: those bound, and the evicted copies
    /// still terminating at `now`.
    fn pods_seen(&self, cluster: &SimCluster<'_>, name: &str, now: Timestamp) -> Vec<Pod> {
        let terminating = self
            .retiring
            .get(name)
            .into_iter()
            .flat_map(|r| &r.terminating)
            .filter(|(_, at)| *at > now)
            .map(|(p, _)| p.clone());
        cluster
            .pods_on(name)
            .into_iter()
            .cloned()
            .chain(terminating)
            .collect()
    }

    /// The termination machine's view of node `name` at `now`.
    fn node_plan(
        &self,
        cluster: &SimCluster<'_>,
        name: &str,
        now: Timestamp,
    ) -> Option<termination::TerminationPlan> {
        let Phase::Terminating {
            deadline,
            drained_since,
            gone_at,
            ..
        } = self.retiring.get(name)?.phase
        else {
            return None;
        };
        let pods = self.pods_seen(cluster, name, now);
        let view = NodeView {
            pods: pods.iter().collect(),
            deadline,
            pdbs: Some(cluster.pdb_counts()),
            drained_since,
            min_drain_time: MIN_DRAIN_TIME,
            node_ready: true,
            instance: match gone_at {
                None => InstanceView::Running,
                Some(at) if at > now => InstanceView::Terminating { gone_at: Some(at) },
                Some(_) => InstanceView::Gone,
            },
        };
        Some(termination::next(&view, now))
    }

    fn advance_node(
        &mut self,
        cluster: &mut SimCluster<'_>,
        name: &str,
        now: Timestamp,
        reports: &mut [CommandReport],
    ) -> Result<(), SimulateError> {
        // Drained → terminate → gone may all fall within one step of virtual time.
        for _ in 0..4 {
            cluster.refresh_pdb_status();
            let Some(plan) = self.node_plan(cluster, name, now) else {
                return Ok(());
            };
            let round_due = self
                .retiring
                .get(name)
                .and_then(|r| r.next_round)
                .is_none_or(|at| now >= at);
            let mut evicted = Vec::new();
            let mut held = false;
            for step in &plan.steps {
                match step {
                    // A deadline's forced deletion happens at its instant; evictions in rounds.
                    TerminationStep::Remove(action)
                        if round_due || matches!(action.action, Action::ForceDelete { .. }) =>
                    {
                        evicted.push(action.clone())
                    }
                    TerminationStep::Remove(_) => held = true,
                    TerminationStep::WaitForPods { .. } => {}
                    TerminationStep::Drained => self.drained(name, now),
                    TerminationStep::TerminateInstance => self.terminate_instance(name, now),
                    TerminationStep::ReleaseNode => return self.gone(cluster, name, reports),
                }
            }
            let round = plan.steps.iter().any(|s| match s {
                TerminationStep::Remove(action) => matches!(action.action, Action::Evict),
                TerminationStep::WaitForPods { blocked_by_pdb, .. } => *blocked_by_pdb > 0,
                _ => false,
            });
            if round
                && round_due
                && let Some(retiring) = self.retiring.get_mut(name)
            {
                retiring.next_round = now.checked_add(super::POLL).ok();
            }
            if !evicted.is_empty() {
                self.evict(cluster, name, &evicted, now, reports)?;
            }
            let waits = plan
                .steps
                .iter()
                .any(|s| matches!(s, TerminationStep::WaitForPods { .. }));
            if waits || held || plan.steps.is_empty() {
                return Ok(());
            }
        }
        Ok(())
    }

    /// The drain became complete: when its last pod went (virtual time may have stepped past).
    fn drained(&mut self, name: &str, now: Timestamp) {
        let Some(retiring) = self.retiring.get_mut(name) else {
            return;
        };
        let last_pod_gone = retiring.terminating.iter().map(|(_, at)| *at).max();
        retiring.terminating.clear();
        if let Phase::Terminating {
            started,
            drained_since,
            ..
        } = &mut retiring.phase
        {
            // The last evicted pod's instant when one went (the loop may wake after it),
            // else now (a pod counted as stuck from now on, say).
            *drained_since = Some(last_pod_gone.map_or(now, |gone| gone.max(*started).min(now)));
        }
        self.progressed = true;
    }

    /// The instance's termination is asked for once the minimum drain time has passed since the
    /// drain ended; it is gone [`TimelineSettings::instance_shutdown`] later.
    fn terminate_instance(&mut self, name: &str, now: Timestamp) {
        let shutdown = self.settings.instance_shutdown;
        if let Some(Retiring {
            phase:
                Phase::Terminating {
                    drained_since: Some(drained),
                    gone_at,
                    ..
                },
            ..
        }) = self.retiring.get_mut(name)
        {
            let asked = drained
                .checked_add(MIN_DRAIN_TIME)
                .unwrap_or(*drained)
                .min(now);
            *gone_at = Some(asked.checked_add(shutdown).unwrap_or(asked));
            self.progressed = true;
        }
    }

    /// Performs the machine's pod removals on `name` at `now`; the evicted pods are provisioned
    /// again.
    fn evict(
        &mut self,
        cluster: &mut SimCluster<'_>,
        name: &str,
        actions: &[drain::PodAction],
        now: Timestamp,
        reports: &mut [CommandReport],
    ) -> Result<(), SimulateError> {
        let Some(retiring) = self.retiring.get(name) else {
            return Ok(());
        };
        let command = retiring.command;
        let deadline = match retiring.phase {
            Phase::Terminating { deadline, .. } => deadline,
            Phase::Marked => None,
        };
        let mut moved = Vec::new();
        for action in actions {
            let (forced, grace) = match action.action {
                Action::ForceDelete { grace_seconds } => (true, grace_seconds),
                Action::Evict => (false, -1),
            };
            let Some(evicted) = cluster.evict(&action.key) else {
                continue;
            };
            let grace = if grace < 0 {
                grace_seconds(&evicted)
            } else {
                grace
            };
            self.progressed = true;
            self.trace.evictions.push(Eviction {
                at: now,
                pod: action.key.clone(),
                node: name.to_string(),
                forced,
                do_not_disrupt: drain::has_do_not_disrupt(&evicted, now),
                forced_from: deadline.map(|d| {
                    d.checked_sub(SignedDuration::from_secs(grace_seconds(&evicted)))
                        .unwrap_or(d)
                }),
            });
            let gone_at = self.terminated_at(grace, now, deadline);
            // As the API server does: the deletion timestamp is the request plus the grace.
            let mut old_copy = evicted.clone();
            let deletion = now
                .checked_add(SignedDuration::from_secs(grace.max(0)))
                .unwrap_or(now);
            old_copy.metadata.deletion_timestamp = Some(Time(deletion));
            if let Some(retiring) = self.retiring.get_mut(name) {
                retiring.terminating.push((old_copy, gone_at));
            }
            if moves_with_its_node(&evicted) {
                moved.push(evicted);
            }
        }
        if !moved.is_empty() {
            let launched = cluster.reprovision(moved, now)?;
            if let Some(report) = reports.get_mut(command) {
                report.replacements.extend(launched);
                refresh(report);
            }
        }
        Ok(())
    }

    /// When a pod deleted at `now` with `grace` seconds is gone: after
    /// [`TimelineSettings::pod_termination`], at most its grace period, never past the deadline.
    fn terminated_at(&self, grace: i64, now: Timestamp, deadline: Option<Timestamp>) -> Timestamp {
        let grace = SignedDuration::from_secs(grace.max(0));
        let takes = self
            .settings
            .pod_termination
            .map_or(grace, |t| t.min(grace));
        let at = now.checked_add(takes).unwrap_or(now);
        match deadline {
            Some(deadline) if deadline < at => deadline.max(now),
            _ => at,
        }
    }

    /// The node's instance is gone: its objects leave the cluster, pods still on it
    /// (DaemonSet, static, tolerating the disrupted taint) with it; movable ones are
    /// provisioned again.
    fn gone(
        &mut self,
        cluster: &mut SimCluster<'_>,
        name: &str,
        reports: &mut [CommandReport],
    ) -> Result<(), SimulateError> {
        let Some(retiring) = self.retiring.remove(name) else {
            return Ok(());
        };
        let Phase::Terminating {
            gone_at: Some(at), ..
        } = retiring.phase
        else {
            return Ok(());
        };
        self.progressed = true;
        let displaced = cluster.remove_node(name);
        let launched = cluster.reprovision(displaced, at)?;
        let report = reports.get_mut(retiring.command);
        if let Some((left, last)) = self.open.get_mut(&retiring.command) {
            left.remove(name);
            *last = Some(last.map_or(at, |l| l.max(at)));
            if left.is_empty()
                && let Some(report) = report
            {
                report.replacements.extend(launched);
                report.completed_at = last.map(|l| l.to_string());
                refresh(report);
                self.open.remove(&retiring.command);
            }
        }
        Ok(())
    }

    /// Closes a command with nothing to wait for (an expired NodeClaim without a Node).
    pub fn complete_now(&mut self, command: usize, now: Timestamp, reports: &mut [CommandReport]) {
        if let Some((left, _)) = self.open.get(&command)
            && left.is_empty()
        {
            self.open.remove(&command);
            if let Some(report) = reports.get_mut(command) {
                report.completed_at = Some(now.to_string());
            }
        }
    }

    /// The earliest instant after `now` at which the machine moves on by itself: a command's
    /// replacement deadline, and each deleting node's instant (a pod terminated or forced or
    /// stuck, a do-not-disrupt duration over, the minimum drain time over, an instance gone).
    /// A refused eviction is retried at the next poll only while the cluster still changes
    /// (PDBs count pods that become Ready as their nodes initialize; those instants come from
    /// the cluster).
    pub fn next_event(&self, cluster: &SimCluster<'_>, now: Timestamp) -> Option<Timestamp> {
        let mut instants: Vec<Timestamp> = self
            .in_flight
            .values()
            .map(|f| command::deadline(&f.view))
            .collect();
        for (name, retiring) in &self.retiring {
            let mut evictions_due = false;
            let mut refused = false;
            instants.extend(retiring.terminating.iter().map(|(_, at)| *at));
            let Some(plan) = self.node_plan(cluster, name, now) else {
                continue;
            };
            instants.extend(plan.look_again);
            for step in &plan.steps {
                match step {
                    // One round of evictions per poll, as upstream's requeue does.
                    TerminationStep::Remove(_) => evictions_due = true,
                    TerminationStep::WaitForPods { blocked_by_pdb, .. } => {
                        refused |= *blocked_by_pdb > 0
                    }
                    _ => {}
                }
            }
            if evictions_due || (refused && self.progressed) {
                instants.extend(
                    retiring
                        .next_round
                        .filter(|at| *at > now)
                        .or_else(|| now.checked_add(super::POLL).ok()),
                );
            }
        }
        instants.into_iter().filter(|at| *at > now).min()
    }
}

/// A command's decision and savings once its replacements change: an expiration that had to
/// launch nodes for its pods is a replace.
fn refresh(report: &mut CommandReport) {
    if report.method == "expiration" {
        report.decision = if report.replacements.is_empty() {
            "delete"
        } else {
            "replace"
        }
        .to_string();
    }
    let removed: f64 = report.candidates.iter().filter_map(|c| c.price).sum();
    let added: f64 = report.replacements.iter().map(|r| r.price).sum();
    report.savings_per_hour = round6(removed - added);
}
