//! Timed scale steps in the disruption loop (the workloads' `simulate.karpenter-rs.dev/scale-steps`):
//! at each step's instant the workload's replicas go to the step's count (new replicas provisioned
//! as displaced pods are, the newest replicas deleted on a scale-down), and the cluster as the
//! previous step left it is recorded: nodes, cost, the fractional lower bound, commands.

use jiff::Timestamp;
use karpenter_core::pod::Pod;

use super::cluster::SimCluster;
use super::report::{CommandReport, StepReport, round6};
use crate::manifests::Manifests;
use crate::plan::SimulateError;
use crate::workloads::ScaleSchedule;

/// The steps still to apply and what the run has recorded so far.
pub(super) struct Steps {
    schedules: Vec<ScaleSchedule>,
    /// (instant, schedule, replicas), in time order (input order within an instant).
    events: Vec<(Timestamp, usize, u32)>,
    applied: usize,
    /// Per schedule: the next replica ordinal (replicas are never renamed).
    next_ordinal: Vec<u32>,
    /// When the current period began, and the commands started before it.
    period_start: Timestamp,
    commands_before: usize,
    pub reports: Vec<StepReport>,
}

impl Steps {
    pub fn new(manifests: &Manifests, start: Timestamp) -> Self {
        let schedules = manifests.scale_steps.clone();
        let mut events: Vec<(Timestamp, usize, u32)> = schedules
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                s.steps.iter().filter_map(move |(after, replicas)| {
                    Some((start.checked_add(*after).ok()?, i, *replicas))
                })
            })
            .collect();
        events.sort_by_key(|(at, i, _)| (*at, *i));
        Steps {
            next_ordinal: schedules.iter().map(|s| s.initial).collect(),
            schedules,
            events,
            applied: 0,
            period_start: start,
            commands_before: 0,
            reports: Vec::new(),
        }
    }

    /// Whether the input has any step (the report then lists the periods).
    pub fn any(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next step's instant.
    pub fn next_at(&self) -> Option<Timestamp> {
        self.events.get(self.applied).map(|(at, _, _)| *at)
    }

    /// Applies every step due at `now`, after recording the period they end.
    pub fn apply_due(
        &mut self,
        cluster: &mut SimCluster<'_>,
        now: Timestamp,
        commands: &[CommandReport],
    ) -> Result<(), SimulateError> {
        if self.next_at().is_none_or(|at| at > now) {
            return Ok(());
        }
        self.record(cluster, commands);
        self.period_start = now;
        let mut new_pods: Vec<Pod> = Vec::new();
        while let Some(&(at, schedule, replicas)) = self.events.get(self.applied)
            && at <= now
        {
            self.applied += 1;
            let template = &self.schedules[schedule].template;
            let mut ordinals = cluster.replica_ordinals(template);
            ordinals.sort_unstable();
            let have = u32::try_from(ordinals.len()).unwrap_or(u32::MAX);
            let name = template.metadata.name.clone().unwrap_or_default();
            let namespace = karpenter_core::pod::namespace(template).to_string();
            if replicas < have {
                // A ReplicaSet scaled down deletes its newest pods first.
                let excess = usize::try_from(have - replicas).unwrap_or(usize::MAX);
                for ordinal in ordinals.iter().rev().take(excess) {
                    cluster.delete_pod(&format!("{namespace}/{name}-{ordinal}"));
                }
            }
            for _ in have..replicas {
                let ordinal = self.next_ordinal[schedule];
                self.next_ordinal[schedule] = ordinal.saturating_add(1);
                let mut pod = (**template).clone();
                pod.metadata.name = Some(format!("{name}-{ordinal}"));
                new_pods.push(pod);
            }
        }
        cluster.reprovision(new_pods, now)?;
        Ok(())
    }

    /// Records the period that ends now (or the run's last one).
    pub fn record(&mut self, cluster: &SimCluster<'_>, commands: &[CommandReport]) {
        if !self.any() {
            return;
        }
        let started = commands.get(self.commands_before..).unwrap_or_default();
        let hourly_cost = round6(cluster.hourly_cost());
        let cost_lower_bound = round6(cluster.cost_lower_bound());
        self.reports.push(StepReport {
            at: self.period_start.to_string(),
            pods: cluster.pod_count(),
            nodes: cluster.node_count(),
            hourly_cost,
            cost_lower_bound,
            ratio: karpenter_core::cost::cost_ratio(hourly_cost, cost_lower_bound)
                .map(|r| (r * 1000.0).round() / 1000.0),
            commands: started.len(),
            disrupted_nodes: started.iter().map(|c| c.candidates.len()).sum(),
        });
        self.commands_before = commands.len();
    }
}
