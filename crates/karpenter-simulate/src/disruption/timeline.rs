//! How a disrupted node leaves the simulated cluster, in the time a cluster takes (issue 21
//! item 6), following upstream's orchestration queue and termination controller:
//!
//! 1. **Awaiting replacements.** The command taints its candidates
//!    (`karpenter.sh/disrupted:NoSchedule`) and launches its replacements; the candidates are
//!    marked as being disrupted, so they count against their NodePool's budget from now on.
//! 2. **Draining**, once every replacement is initialized (at once for a delete or an
//!    expiration): [`karpenter_core::drain::plan`] says which pods go next (tier by tier,
//!    do-not-disrupt pods held until the NodeClaim's `terminationGracePeriod` forces them); each
//!    eviction passes the Eviction API's PDB check ([`super::pdb`]) or is retried at the next
//!    step. An evicted pod is provisioned again at once (its controller re-creates it) and its old
//!    copy terminates on the node after [`TimelineSettings::pod_termination`].
//! 3. **Shutting down**, once no pod is left: the instance takes
//!    [`TimelineSettings::instance_shutdown`], then the Node and NodeClaim are gone and the node
//!    stops counting against its budget.
//!
//! A command is complete when its last candidate is gone. Several commands may be in flight;
//! each pass's budgets see every node still on its way out.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_core::disruption::candidates::Rejection;
use karpenter_core::disruption::{BudgetAllowance, DisruptionReason, PoolNodeCount};
use karpenter_core::drain::{self, Action, grace_seconds};
use karpenter_core::nodeclaim_lifecycle::termination_deadline;
use karpenter_core::pod::{self, Pod};
use karpenter_core::provisioning::reschedulable::moves_with_its_node;
use karpenter_core::state::ClusterState;

use super::cluster::SimCluster;
use super::report::{CommandReport, round6};
use crate::plan::SimulateError;
use karpenter_core::disruption::orchestration::pdb;

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
    /// From the last pod gone to the instance gone.
    pub instance_shutdown: SignedDuration,
}

impl Default for TimelineSettings {
    fn default() -> Self {
        TimelineSettings {
            pod_termination: None,
            instance_shutdown: DEFAULT_INSTANCE_SHUTDOWN,
        }
    }
}

/// Where a node on its way out is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Tainted; the drain waits for these replacements to initialize.
    AwaitingReplacements(Vec<String>),
    Draining {
        started: Timestamp,
        /// Drain start + the NodeClaim's `terminationGracePeriod`.
        deadline: Option<Timestamp>,
    },
    ShuttingDown {
        gone_at: Timestamp,
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
    /// Per command report: its candidates not gone yet and the latest instant one went.
    open: BTreeMap<usize, (BTreeSet<String>, Option<Timestamp>)>,
    /// Something changed in the last [`Timeline::advance`] (an eviction, a phase, a node gone),
    /// so a refused eviction is worth retrying at the next poll.
    progressed: bool,
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
    /// elsewhere).
    pub fn mark(&self, state: &mut ClusterState) {
        for name in self.retiring.keys() {
            state.mark_being_disrupted(name);
            state.mark_for_deletion(name);
        }
    }

    /// Registers command report `command` (already in `reports`) and starts its candidates:
    /// tainted now, drained once `replacements` are initialized. `reason` is the voluntary
    /// reason whose budget the command is within (`None` for expiration, which has none).
    pub fn start(
        &mut self,
        cluster: &mut SimCluster<'_>,
        command: usize,
        candidates: &[String],
        replacements: Vec<String>,
        reason: Option<DisruptionReason>,
        now: Timestamp,
    ) {
        let mut open = BTreeSet::new();
        for name in candidates {
            if !cluster.has_node(name) || self.retiring.contains_key(name) {
                continue;
            }
            cluster.taint_disrupted(name);
            let pool = cluster.node_pool_of(name);
            let phase = if replacements.is_empty() {
                self.drain_phase(cluster, name, now)
            } else {
                Phase::AwaitingReplacements(replacements.clone())
            };
            self.retiring.insert(
                name.clone(),
                Retiring {
                    command,
                    pool,
                    phase,
                    terminating: Vec::new(),
                },
            );
            open.insert(name.clone());
        }
        self.open.insert(command, (open, None));
        if let Some(reason) = reason {
            self.record_budgets(cluster, candidates, reason, now);
        }
    }

    fn drain_phase(&self, cluster: &SimCluster<'_>, node: &str, now: Timestamp) -> Phase {
        let deadline = cluster.claim_of_node(node).and_then(|claim| {
            let mut deleted = claim.clone();
            deleted.metadata.deletion_timestamp = Some(Time(now));
            termination_deadline(&deleted)
        });
        Phase::Draining {
            started: now,
            deadline,
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
        self.mark(&mut state);
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

    /// Moves every node on its way out as far as it gets by `now`.
    pub fn advance(
        &mut self,
        cluster: &mut SimCluster<'_>,
        now: Timestamp,
        reports: &mut [CommandReport],
    ) -> Result<(), SimulateError> {
        self.progressed = false;
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

    fn advance_node(
        &mut self,
        cluster: &mut SimCluster<'_>,
        name: &str,
        now: Timestamp,
        reports: &mut [CommandReport],
    ) -> Result<(), SimulateError> {
        loop {
            let Some(phase) = self.retiring.get(name).map(|r| r.phase.clone()) else {
                return Ok(());
            };
            let next = match phase {
                Phase::AwaitingReplacements(replacements) => {
                    if !replacements.iter().all(|r| cluster.initialized_or_gone(r)) {
                        return Ok(());
                    }
                    self.drain_phase(cluster, name, now)
                }
                Phase::Draining { started, deadline } => {
                    self.drain_step(cluster, name, now, deadline, reports)?;
                    let Some(retiring) = self.retiring.get_mut(name) else {
                        return Ok(());
                    };
                    let pods_left = cluster
                        .pods_on(name)
                        .iter()
                        .any(|p| drain::is_drainable(p, now));
                    let still_terminating = retiring.terminating.iter().any(|(_, at)| *at > now);
                    if pods_left || still_terminating {
                        return Ok(());
                    }
                    let last_pod_gone = retiring
                        .terminating
                        .iter()
                        .map(|(_, at)| *at)
                        .max()
                        .unwrap_or(started)
                        .max(started);
                    retiring.terminating.clear();
                    Phase::ShuttingDown {
                        gone_at: last_pod_gone
                            .checked_add(self.settings.instance_shutdown)
                            .unwrap_or(last_pod_gone),
                    }
                }
                Phase::ShuttingDown { gone_at } => {
                    if gone_at > now {
                        return Ok(());
                    }
                    self.gone(cluster, name, gone_at, reports)?;
                    return Ok(());
                }
            };
            if let Some(retiring) = self.retiring.get_mut(name) {
                retiring.phase = next;
                self.progressed = true;
            }
        }
    }

    /// One round of the drain of `name` at `now`: the evictions the drain plan asks for that
    /// the PDBs allow (or the deadline forces); the evicted pods are provisioned again.
    fn drain_step(
        &mut self,
        cluster: &mut SimCluster<'_>,
        name: &str,
        now: Timestamp,
        deadline: Option<Timestamp>,
        reports: &mut [CommandReport],
    ) -> Result<(), SimulateError> {
        let Some(retiring) = self.retiring.get(name) else {
            return Ok(());
        };
        let command = retiring.command;
        let terminating: Vec<Pod> = retiring
            .terminating
            .iter()
            .filter(|(_, at)| *at > now)
            .map(|(p, _)| p.clone())
            .collect();
        let bound: Vec<Pod> = cluster.pods_on(name).into_iter().cloned().collect();
        let everyone: Vec<&Pod> = bound.iter().chain(&terminating).collect();
        let plan = drain::plan(&everyone, now, deadline);
        let mut moved = Vec::new();
        for action in plan.actions {
            let Some(pod) = bound.iter().find(|p| pod::key(p) == action.key) else {
                continue;
            };
            let (forced, grace) = match action.action {
                Action::ForceDelete { grace_seconds } => (true, grace_seconds),
                Action::Evict => (false, grace_seconds(pod)),
            };
            if !forced {
                cluster.refresh_pdb_status();
                if !pdb::eviction_allowed(pod, &cluster.pdb_counts()) {
                    continue;
                }
            }
            let Some(evicted) = cluster.evict(&action.key) else {
                continue;
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
            let mut old_copy = evicted.clone();
            old_copy.metadata.deletion_timestamp = Some(Time(now));
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

    /// The node is gone at `at`: its objects leave the cluster, pods still on it (DaemonSet,
    /// static, tolerating the disrupted taint) with it; movable ones are provisioned again.
    fn gone(
        &mut self,
        cluster: &mut SimCluster<'_>,
        name: &str,
        at: Timestamp,
        reports: &mut [CommandReport],
    ) -> Result<(), SimulateError> {
        let Some(retiring) = self.retiring.remove(name) else {
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

    /// The earliest instant after `now` at which a node on its way out moves on by itself: a
    /// pod terminated, an instance gone, a drain deadline forcing a pod. A refused eviction is
    /// retried at the next poll only while the cluster still changes (PDBs count pods that
    /// become Ready as their nodes initialize; those instants come from the cluster).
    pub fn next_event(&self, cluster: &SimCluster<'_>, now: Timestamp) -> Option<Timestamp> {
        let mut next: Option<Timestamp> = None;
        let mut consider = |at: Timestamp| {
            if at > now {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        };
        let mut waiting_on_evictions = false;
        for (name, retiring) in &self.retiring {
            match &retiring.phase {
                Phase::AwaitingReplacements(_) => {}
                Phase::ShuttingDown { gone_at } => consider(*gone_at),
                Phase::Draining { deadline, .. } => {
                    for (_, at) in &retiring.terminating {
                        consider(*at);
                    }
                    for pod in cluster.pods_on(name) {
                        if !drain::is_drainable(pod, now) {
                            continue;
                        }
                        waiting_on_evictions = true;
                        if let Some(deadline) = deadline {
                            let latest = deadline
                                .checked_sub(SignedDuration::from_secs(grace_seconds(pod)))
                                .unwrap_or(*deadline);
                            // `force_delete_grace` forces once `now` is past the latest start.
                            consider(
                                latest
                                    .checked_add(SignedDuration::from_secs(1))
                                    .unwrap_or(latest),
                            );
                        }
                    }
                }
            }
        }
        if waiting_on_evictions && self.progressed {
            consider(now.checked_add(super::POLL).unwrap_or(now));
        }
        next
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
