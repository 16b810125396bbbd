//! What the controller's loops record as they work (outside the scrape): scheduling passes and
//! simulations, singleton reconciles, disruption commands, cloud provider calls, the catalogue.

use std::sync::{Arc, PoisonError};

use jiff::Timestamp;
use karpenter_core::instance_type::InstanceType;

use super::Metrics;
use super::extra::*;

fn secs(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

/// Updates the memory of the pod `key` with `update`, creating it empty the first time (the key
/// copied only then: passes look at the same pending pods again and again).
fn update_pod_memory(
    pods: &mut std::collections::HashMap<String, super::scrape::PodMemory>,
    key: &str,
    update: impl FnOnce(&mut super::scrape::PodMemory),
) {
    match pods.get_mut(key) {
        Some(pod) => update(pod),
        None => {
            let mut pod = super::scrape::PodMemory::default();
            update(&mut pod);
            pods.insert(key.to_string(), pod);
        }
    }
}

/// A scheduling simulation in progress (see [`Metrics::begin_solve`]).
#[derive(Debug)]
pub struct SolveGuard<'a> {
    metrics: &'a Metrics,
    labels: SchedulingIdLabels,
}

impl Drop for SolveGuard<'_> {
    fn drop(&mut self) {
        let x = &self.metrics.x;
        x.scheduler_queue_depth.remove(&self.labels);
        x.scheduler_unfinished_work.remove(&self.labels);
        self.metrics.memory().solving.remove(&self.labels);
    }
}

impl Metrics {
    /// Remembers the instance types a pass resolved for each pool (the cost view and the
    /// `karpenter_cloudprovider_instance_type_*` gauges read them at scrape time).
    pub fn remember_offered<'a>(
        &self,
        offered: impl IntoIterator<Item = (&'a str, &'a [Arc<InstanceType>])>,
    ) {
        let mut map = self.offered.lock().unwrap_or_else(PoisonError::into_inner);
        for (pool, types) in offered {
            map.insert(pool.to_string(), types.to_vec());
        }
    }

    /// A provisioning pass looked at `pending` pods at `started` and found a place for
    /// `scheduled` of them at `now` (the `karpenter_pods_*scheduling*` and
    /// `karpenter_pods_provisioning_*` metrics start from these moments).
    pub fn record_scheduling_pass(
        &self,
        pending: &[String],
        scheduled: &[String],
        started: Timestamp,
        now: Timestamp,
    ) {
        let mut mem = self.memory();
        for key in pending {
            update_pod_memory(&mut mem.pods, key, |pod| {
                let seen = *pod.seen.get_or_insert(started);
                if pod.decided.is_none() {
                    pod.decided = Some(now);
                    self.x
                        .pods_scheduling_decision_duration
                        .observe(secs(seen, now));
                }
            });
        }
        for key in scheduled {
            update_pod_memory(&mut mem.pods, key, |pod| {
                pod.schedulable.get_or_insert(now);
            });
        }
    }

    /// Marks a scheduling simulation of `pods` pods in progress for `controller`
    /// (`karpenter_scheduler_queue_depth`, `_unfinished_work_seconds`) until the guard drops.
    pub fn begin_solve(&self, controller: &str, pods: usize, now: Timestamp) -> SolveGuard<'_> {
        let labels = SchedulingIdLabels {
            controller: controller.into(),
            scheduling_id: {
                let mut mem = self.memory();
                mem.solves = mem.solves.wrapping_add(1);
                mem.solves.to_string()
            },
        };
        self.x
            .scheduler_queue_depth
            .get_or_create(&labels)
            .set(i64::try_from(pods).unwrap_or(i64::MAX));
        self.x
            .scheduler_unfinished_work
            .get_or_create(&labels)
            .set(0.0);
        self.memory().solving.insert(labels.clone(), now);
        SolveGuard {
            metrics: self,
            labels,
        }
    }

    /// One pass of a singleton controller (the provisioner, the disruption loop) as
    /// controller-runtime counts a reconcile.
    pub fn record_reconcile(&self, controller: &str, took: std::time::Duration, ok: bool) {
        let labels = ReconcilerLabels {
            controller: controller.into(),
        };
        let x = &self.x;
        x.reconcile_time
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        x.max_concurrent_reconciles.get_or_create(&labels).set(1);
        // controller-runtime exports the error counters from the start, at 0.
        let errors = x.reconcile_errors.get_or_create(&labels);
        if !ok {
            errors.inc();
        }
        x.reconcile_total
            .get_or_create(&ReconcileResultLabels {
                controller: controller.into(),
                result: if ok { "success" } else { "error" }.into(),
            })
            .inc();
    }

    /// A disruption command started: `karpenter_voluntary_disruption_decisions_by_nodepool_total`
    /// for each NodePool of its candidates, and a consolidation's savings.
    pub fn command_started(
        &self,
        command: &karpenter_core::disruption::command::Command,
        labels: &super::DisruptionDecisionLabels,
    ) {
        let pools: std::collections::BTreeSet<&str> = command
            .candidates
            .iter()
            .map(|c| c.node_pool.as_str())
            .collect();
        for pool in pools {
            self.x
                .disruption_decisions_by_nodepool
                .get_or_create(&NodePoolDecisionLabels {
                    nodepool: pool.into(),
                    decision: labels.decision.clone(),
                    reason: labels.reason.clone(),
                    consolidation_type: labels.consolidation_type.clone(),
                })
                .inc();
        }
        use karpenter_core::disruption::command::Method;
        let consolidation = matches!(
            command.method,
            Method::Emptiness | Method::SingleNodeConsolidation | Method::MultiNodeConsolidation
        );
        if consolidation && command.savings_per_hour.is_finite() && command.savings_per_hour > 0.0 {
            self.x
                .consolidation_savings_per_hour
                .inc_by(command.savings_per_hour);
        }
    }

    /// A cloud provider call, timed and its error counted as upstream's decorator does
    /// (`karpenter_cloudprovider_duration_seconds`, `_errors_total`; the `controller` label is
    /// empty: the calls do not carry their caller's name).
    pub async fn measure_cloud<T>(
        &self,
        provider: &str,
        method: &str,
        call: impl std::future::Future<Output = Result<T, karpenter_core::cloud_provider::CloudError>>,
    ) -> Result<T, karpenter_core::cloud_provider::CloudError> {
        let started = std::time::Instant::now();
        let result = call.await;
        self.x
            .cloudprovider_duration
            .get_or_create(&CloudMethodLabels {
                controller: String::new(),
                method: method.into(),
                provider: provider.into(),
            })
            .observe(started.elapsed().as_secs_f64());
        if let Err(err) = &result {
            self.x
                .cloudprovider_errors
                .get_or_create(&CloudErrorLabels {
                    controller: String::new(),
                    method: method.into(),
                    provider: provider.into(),
                    error: err.metric_label().into(),
                })
                .inc();
        }
        result
    }
}
