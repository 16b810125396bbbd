//! The families beyond the first set: the rest of upstream's `karpenter_*` metrics, the
//! framework families upstream inherits from controller-runtime, client-go and operatorpkg
//! (`controller_runtime_*`, `workqueue_*`, `leader_election_*`, `operator_*`), and the cost view
//! (`karpenter_cluster_cost_*`, not upstream). All registered at start by [`Extra::register`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry, Unit};
use std::sync::atomic::AtomicU64;

use super::summary::Summary;
use super::{Always, FamilyInfo, FloatGauge};

pub type FloatCounter = Counter<f64, AtomicU64>;

/// Upstream's `DurationBuckets` (controller-runtime's, extended to 10 min for singletons).
pub const UPSTREAM_DURATION_BUCKETS: [f64; 45] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

fn upstream_durations() -> Histogram {
    Histogram::new(UPSTREAM_DURATION_BUCKETS)
}

fn long_durations() -> Histogram {
    // 0.5 s .. ~2.3 h, doubling: terminations and condition transitions.
    Histogram::new(exponential_buckets(0.5, 2.0, 15))
}

macro_rules! label_set {
    ($(#[$doc:meta])* $name:ident { $($field:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub struct $name {
            $(pub $field: String,)*
        }
    };
}

label_set!(BuildInfoLabels {
    version,
    goversion,
    commit
});
label_set!(NodePoolOnlyLabels { nodepool });
label_set!(UnhealthyLabels {
    condition,
    nodepool,
    capacity_type,
    image_id
});
label_set!(
    /// A node's identity on the `karpenter_nodes_*` gauges: its name, phase, whether karpenter
    /// manages it, and its well-known labels (empty when the node has none).
    NodeLabels {
        node_name, phase, managed, nodepool, zone, region, arch, os, instance_type, capacity_type
    }
);
label_set!(NodeResourceLabels {
    node_name,
    phase,
    managed,
    nodepool,
    zone,
    region,
    arch,
    os,
    instance_type,
    capacity_type,
    resource_type
});
label_set!(ResourceTypeLabels { resource_type });
label_set!(PodLabels { name, namespace });
label_set!(SchedulingIdLabels {
    controller,
    scheduling_id
});
label_set!(ControllerZoneLabels { controller, zone });
label_set!(NodePoolDecisionLabels {
    nodepool,
    decision,
    reason,
    consolidation_type
});
label_set!(ConsolidationTypeOnlyLabels { consolidation_type });
label_set!(InstanceTypeLabels { instance_type });
label_set!(OfferingLabels {
    instance_type,
    capacity_type,
    zone
});
label_set!(CloudMethodLabels {
    controller,
    method,
    provider
});
label_set!(CloudErrorLabels {
    controller,
    method,
    provider,
    error
});
label_set!(ReconcileResultLabels { controller, result });
label_set!(ReconcilerLabels { controller });
label_set!(WorkqueueLabels { controller, name });
label_set!(WorkqueueDepthLabels {
    controller,
    name,
    priority
});
label_set!(LeaseLabels { name });
label_set!(ObjectLabels { namespace, name });
label_set!(ConditionLabels {
    r#type,
    status,
    reason
});
label_set!(ObjectConditionLabels {
    namespace,
    name,
    r#type,
    status,
    reason
});
label_set!(KindOnlyLabels { kind });
label_set!(KindObjectLabels {
    kind,
    namespace,
    name
});
label_set!(KindConditionLabels {
    kind,
    r#type,
    status,
    reason
});
label_set!(KindObjectConditionLabels {
    kind,
    namespace,
    name,
    r#type,
    status,
    reason
});
label_set!(NodePoolCapacityLabels {
    nodepool,
    capacity_type
});
label_set!(ApiResultLabels { code, method });
label_set!(ApiRequestLabels {
    verb,
    group,
    version,
    kind,
    subresource
});

/// Upstream's operatorpkg families of one kind (`operator_<kind>_*`): its objects' status
/// conditions and terminations.
#[derive(Debug)]
pub struct ObjectStatusMetrics {
    pub termination_duration: Histogram,
    pub termination_current_time: Family<ObjectLabels, FloatGauge>,
    pub transitions: Family<ConditionLabels, Counter>,
    pub transition_seconds: Family<ConditionLabels, Histogram, fn() -> Histogram>,
    pub current_status_seconds: Family<ObjectConditionLabels, FloatGauge>,
    pub count: Family<ObjectConditionLabels, Gauge>,
}

impl ObjectStatusMetrics {
    fn new() -> Self {
        ObjectStatusMetrics {
            termination_duration: long_durations(),
            termination_current_time: Family::default(),
            transitions: Family::default(),
            transition_seconds: Family::new_with_constructor(long_durations),
            current_status_seconds: Family::default(),
            count: Family::default(),
        }
    }
}

/// The deprecated kind-labelled versions (`operator_status_condition_*`,
/// `operator_termination_*`), still on upstream's page.
#[derive(Debug)]
pub struct KindStatusMetrics {
    pub termination_duration: Family<KindOnlyLabels, Histogram, fn() -> Histogram>,
    pub termination_current_time: Family<KindObjectLabels, FloatGauge>,
    pub transitions: Family<KindConditionLabels, Counter>,
    pub transition_seconds: Family<KindConditionLabels, Histogram, fn() -> Histogram>,
    pub current_status_seconds: Family<KindObjectConditionLabels, FloatGauge>,
    pub count: Family<KindObjectConditionLabels, Gauge>,
}

/// The kinds with `operator_<kind>_*` families, as upstream names them.
pub const STATUS_KINDS: [&str; 4] = ["nodeclaim", "node", "nodepool", "ec2nodeclass"];

/// The families of `extra.rs`. Cloned handles are cheap (`Arc` inside).
#[derive(Debug)]
pub struct Extra {
    pub build_info: Family<BuildInfoLabels, Gauge>,
    pub nodeclaims_unhealthy_disrupted: Family<UnhealthyLabels, Counter>,
    /// From the provider's delete call to its answer that the instance is gone.
    pub nodeclaims_instance_termination_duration:
        Family<NodePoolOnlyLabels, Histogram, fn() -> Histogram>,
    pub nodes_drained: Family<NodePoolOnlyLabels, Counter>,
    pub nodes_allocatable: Family<NodeResourceLabels, FloatGauge>,
    pub nodes_total_pod_requests: Family<NodeResourceLabels, FloatGauge>,
    pub nodes_total_pod_limits: Family<NodeResourceLabels, FloatGauge>,
    pub nodes_total_daemon_requests: Family<NodeResourceLabels, FloatGauge>,
    pub nodes_total_daemon_limits: Family<NodeResourceLabels, FloatGauge>,
    pub nodes_system_overhead: Family<NodeResourceLabels, FloatGauge>,
    pub nodes_current_lifetime: Family<NodeLabels, FloatGauge>,
    pub cluster_utilization: Family<ResourceTypeLabels, FloatGauge>,
    pub cluster_state_unsynced_time: FloatGauge,
    pub pods_startup_duration: Summary,
    pub pods_bound_duration: Histogram,
    pub pods_unstarted_time: Family<PodLabels, FloatGauge>,
    pub pods_unbound_time: Family<PodLabels, FloatGauge>,
    pub pods_scheduling_decision_duration: Histogram,
    pub pods_provisioning_bound_duration: Histogram,
    pub pods_provisioning_startup_duration: Histogram,
    pub pods_provisioning_unbound_time: Family<PodLabels, FloatGauge>,
    pub pods_provisioning_unstarted_time: Family<PodLabels, FloatGauge>,
    pub pods_provisioning_scheduling_undecided_time: Family<PodLabels, FloatGauge>,
    pub scheduler_queue_depth: Family<SchedulingIdLabels, Gauge>,
    pub scheduler_unfinished_work: Family<SchedulingIdLabels, FloatGauge>,
    pub scheduler_pending_pods_by_effective_zone: Family<ControllerZoneLabels, Gauge>,
    pub scheduler_ignored_pods: Gauge,
    pub disruption_decisions_by_nodepool: Family<NodePoolDecisionLabels, Counter>,
    pub consolidation_timeouts: Family<ConsolidationTypeOnlyLabels, Counter>,
    pub nodepools_nodes_consuming_budgets: Family<super::NodePoolReasonLabels, Gauge>,
    pub nodepools_cost: Family<NodePoolOnlyLabels, FloatGauge>,
    pub instance_type_cpu_cores: Family<InstanceTypeLabels, FloatGauge>,
    pub instance_type_memory_bytes: Family<InstanceTypeLabels, FloatGauge>,
    pub offering_available: Family<OfferingLabels, Gauge>,
    pub offering_price_estimate: Family<OfferingLabels, FloatGauge>,
    pub cloudprovider_duration: Family<CloudMethodLabels, Histogram, fn() -> Histogram>,
    pub cloudprovider_errors: Family<CloudErrorLabels, Counter>,
    pub reconcile_total: Family<ReconcileResultLabels, Counter>,
    pub reconcile_errors: Family<ReconcilerLabels, Counter>,
    pub terminal_reconcile_errors: Family<ReconcilerLabels, Counter>,
    pub reconcile_panics: Family<ReconcilerLabels, Counter>,
    pub reconcile_timeouts: Family<ReconcilerLabels, Counter>,
    pub reconcile_time: Family<ReconcilerLabels, Histogram, fn() -> Histogram>,
    pub max_concurrent_reconciles: Family<ReconcilerLabels, Gauge>,
    pub active_workers: Family<ReconcilerLabels, Gauge>,
    pub workqueue_adds: Family<WorkqueueLabels, Counter>,
    pub workqueue_retries: Family<WorkqueueLabels, Counter>,
    pub workqueue_depth: Family<WorkqueueDepthLabels, Gauge>,
    pub workqueue_queue_duration: Family<WorkqueueLabels, Histogram, fn() -> Histogram>,
    pub workqueue_work_duration: Family<WorkqueueLabels, Histogram, fn() -> Histogram>,
    pub workqueue_unfinished_work: Family<WorkqueueLabels, FloatGauge>,
    pub workqueue_longest_running_processor: Family<WorkqueueLabels, FloatGauge>,
    pub leader_election_master_status: Family<LeaseLabels, Gauge>,
    pub client_go_requests: Family<ApiResultLabels, Counter>,
    pub client_go_request_duration: Family<ApiRequestLabels, Histogram, fn() -> Histogram>,
    /// `operator_<kind>_*`, in [`STATUS_KINDS`] order.
    pub status: [ObjectStatusMetrics; 4],
    pub status_by_kind: KindStatusMetrics,
    pub cluster_cost_per_hour: Family<NodePoolCapacityLabels, FloatGauge>,
    pub cluster_cost_lower_bound_per_hour: Family<NodePoolOnlyLabels, FloatGauge>,
    pub cluster_cost_ratio_to_lower_bound: Family<NodePoolOnlyLabels, FloatGauge>,
    pub consolidation_savings_per_hour: FloatCounter,
}

/// Registers families and remembers each one's exported name, type and labels.
pub(super) struct Reg<'a> {
    pub registry: &'a mut Registry,
    pub catalog: &'a mut Vec<FamilyInfo>,
}

impl Reg<'_> {
    /// `name` without the `_total` prometheus-client appends to counters and without the unit
    /// suffix it appends for `unit`.
    fn add(
        &mut self,
        name: &str,
        help: &str,
        kind: &'static str,
        labels: &[&'static str],
        unit: Option<Unit>,
        metric: impl Metric,
    ) {
        let mut exported = name.to_string();
        if let Some(unit) = &unit {
            exported.push('_');
            exported.push_str(unit.as_str());
        }
        if kind == "counter" {
            exported.push_str("_total");
        }
        // prometheus-client ends every help text with a period.
        let help = help.trim_end_matches('.');
        self.catalog.push(FamilyInfo {
            name: exported,
            kind,
            labels: labels.to_vec(),
        });
        match unit {
            Some(unit) => self
                .registry
                .register_with_unit(name, help, unit, Always(metric)),
            None => self.registry.register(name, help, Always(metric)),
        }
    }
}

const NODE: &[&str] = &[
    "node_name",
    "phase",
    "managed",
    "nodepool",
    "zone",
    "region",
    "arch",
    "os",
    "instance_type",
    "capacity_type",
];
const NODE_RESOURCE: &[&str] = &[
    "node_name",
    "phase",
    "managed",
    "nodepool",
    "zone",
    "region",
    "arch",
    "os",
    "instance_type",
    "capacity_type",
    "resource_type",
];
const POD: &[&str] = &["name", "namespace"];
const S: Option<Unit> = Some(Unit::Seconds);

impl Extra {
    pub fn new() -> Self {
        Extra {
            build_info: Family::default(),
            nodeclaims_unhealthy_disrupted: Family::default(),
            nodeclaims_instance_termination_duration: Family::new_with_constructor(
                upstream_durations,
            ),
            nodes_drained: Family::default(),
            nodes_allocatable: Family::default(),
            nodes_total_pod_requests: Family::default(),
            nodes_total_pod_limits: Family::default(),
            nodes_total_daemon_requests: Family::default(),
            nodes_total_daemon_limits: Family::default(),
            nodes_system_overhead: Family::default(),
            nodes_current_lifetime: Family::default(),
            cluster_utilization: Family::default(),
            cluster_state_unsynced_time: FloatGauge::default(),
            pods_startup_duration: Summary::new(
                "karpenter_pods_startup_duration_seconds",
                "The time from pod creation until the pod is running.",
                &[],
            ),
            pods_bound_duration: upstream_durations(),
            pods_unstarted_time: Family::default(),
            pods_unbound_time: Family::default(),
            pods_scheduling_decision_duration: upstream_durations(),
            pods_provisioning_bound_duration: upstream_durations(),
            pods_provisioning_startup_duration: upstream_durations(),
            pods_provisioning_unbound_time: Family::default(),
            pods_provisioning_unstarted_time: Family::default(),
            pods_provisioning_scheduling_undecided_time: Family::default(),
            scheduler_queue_depth: Family::default(),
            scheduler_unfinished_work: Family::default(),
            scheduler_pending_pods_by_effective_zone: Family::default(),
            scheduler_ignored_pods: Gauge::default(),
            disruption_decisions_by_nodepool: Family::default(),
            consolidation_timeouts: Family::default(),
            nodepools_nodes_consuming_budgets: Family::default(),
            nodepools_cost: Family::default(),
            instance_type_cpu_cores: Family::default(),
            instance_type_memory_bytes: Family::default(),
            offering_available: Family::default(),
            offering_price_estimate: Family::default(),
            cloudprovider_duration: Family::new_with_constructor(upstream_durations),
            cloudprovider_errors: Family::default(),
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            terminal_reconcile_errors: Family::default(),
            reconcile_panics: Family::default(),
            reconcile_timeouts: Family::default(),
            reconcile_time: Family::new_with_constructor(upstream_durations),
            max_concurrent_reconciles: Family::default(),
            active_workers: Family::default(),
            workqueue_adds: Family::default(),
            workqueue_retries: Family::default(),
            workqueue_depth: Family::default(),
            workqueue_queue_duration: Family::new_with_constructor(upstream_durations),
            workqueue_work_duration: Family::new_with_constructor(upstream_durations),
            workqueue_unfinished_work: Family::default(),
            workqueue_longest_running_processor: Family::default(),
            leader_election_master_status: Family::default(),
            client_go_requests: Family::default(),
            client_go_request_duration: Family::new_with_constructor(upstream_durations),
            status: std::array::from_fn(|_| ObjectStatusMetrics::new()),
            status_by_kind: KindStatusMetrics {
                termination_duration: Family::new_with_constructor(long_durations),
                termination_current_time: Family::default(),
                transitions: Family::default(),
                transition_seconds: Family::new_with_constructor(long_durations),
                current_status_seconds: Family::default(),
                count: Family::default(),
            },
            cluster_cost_per_hour: Family::default(),
            cluster_cost_lower_bound_per_hour: Family::default(),
            cluster_cost_ratio_to_lower_bound: Family::default(),
            consolidation_savings_per_hour: FloatCounter::default(),
        }
    }

    pub(super) fn register(&self, r: &mut Reg<'_>) {
        self.build_info
            .get_or_create(&BuildInfoLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                goversion: "none (Rust)".into(),
                commit: option_env!("KARPENTER_COMMIT").unwrap_or("unknown").into(),
            })
            .set(1);
        for consolidation_type in ["single", "multi"] {
            // Upstream starts both at 0; ours stay there (see docs/metrics.md).
            let _ = self
                .consolidation_timeouts
                .get_or_create(&ConsolidationTypeOnlyLabels {
                    consolidation_type: consolidation_type.into(),
                });
        }
        r.add(
            "karpenter_build_info",
            "A metric with a constant '1' value labeled by version from which karpenter was built.",
            "gauge",
            &["version", "goversion", "commit"],
            None,
            self.build_info.clone(),
        );
        r.add("karpenter_nodeclaims_unhealthy_disrupted", "Number of unhealthy nodeclaims disrupted in total by Karpenter. Labeled by condition on the node was disrupted, the owning nodepool, and the image ID.", "counter", &["condition", "nodepool", "capacity_type", "image_id"], None, self.nodeclaims_unhealthy_disrupted.clone());
        r.add(
            "karpenter_nodeclaims_instance_termination_duration",
            "Duration of CloudProvider Instance termination in seconds.",
            "histogram",
            &["nodepool"],
            S,
            self.nodeclaims_instance_termination_duration.clone(),
        );
        r.add(
            "karpenter_nodes_drained",
            "The total number of nodes drained by Karpenter.",
            "counter",
            &["nodepool"],
            None,
            self.nodes_drained.clone(),
        );
        r.add(
            "karpenter_nodes_allocatable",
            "Node allocatable are the resources allocatable by nodes.",
            "gauge",
            NODE_RESOURCE,
            None,
            self.nodes_allocatable.clone(),
        );
        r.add("karpenter_nodes_total_pod_requests", "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.", "gauge", NODE_RESOURCE, None, self.nodes_total_pod_requests.clone());
        r.add("karpenter_nodes_total_pod_limits", "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods.", "gauge", NODE_RESOURCE, None, self.nodes_total_pod_limits.clone());
        r.add("karpenter_nodes_total_daemon_requests", "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.", "gauge", NODE_RESOURCE, None, self.nodes_total_daemon_requests.clone());
        r.add(
            "karpenter_nodes_total_daemon_limits",
            "Node total daemon limits are the resources specified by DaemonSet pod limits.",
            "gauge",
            NODE_RESOURCE,
            None,
            self.nodes_total_daemon_limits.clone(),
        );
        r.add("karpenter_nodes_system_overhead", "Node system daemon overhead are the resources reserved for system overhead, the difference between the node's capacity and allocatable values are reported by the status.", "gauge", NODE_RESOURCE, None, self.nodes_system_overhead.clone());
        r.add(
            "karpenter_nodes_current_lifetime",
            "Node age in seconds.",
            "gauge",
            NODE,
            S,
            self.nodes_current_lifetime.clone(),
        );
        r.add(
            "karpenter_cluster_utilization_percent",
            "Utilization of allocatable resources by pod requests.",
            "gauge",
            &["resource_type"],
            None,
            self.cluster_utilization.clone(),
        );
        r.add(
            "karpenter_cluster_state_unsynced_time",
            "The time for which cluster state is not synced.",
            "gauge",
            &[],
            S,
            self.cluster_state_unsynced_time.clone(),
        );
        r.add(
            "karpenter_pods_bound_duration",
            "The time from pod creation until the pod is bound.",
            "histogram",
            &[],
            S,
            self.pods_bound_duration.clone(),
        );
        r.add(
            "karpenter_pods_unstarted_time",
            "The time from pod creation until the pod is running.",
            "gauge",
            POD,
            S,
            self.pods_unstarted_time.clone(),
        );
        r.add(
            "karpenter_pods_unbound_time",
            "The time from pod creation until the pod is bound.",
            "gauge",
            POD,
            S,
            self.pods_unbound_time.clone(),
        );
        r.add(
            "karpenter_pods_scheduling_decision_duration",
            "The time it takes for Karpenter to first try to schedule a pod after it's been seen.",
            "histogram",
            &[],
            S,
            self.pods_scheduling_decision_duration.clone(),
        );
        r.add(
            "karpenter_pods_provisioning_bound_duration",
            "The time from when Karpenter first thinks the pod can schedule until it binds.",
            "histogram",
            &[],
            S,
            self.pods_provisioning_bound_duration.clone(),
        );
        r.add("karpenter_pods_provisioning_startup_duration", "The time from when Karpenter first thinks the pod can schedule until the pod is running.", "histogram", &[], S, self.pods_provisioning_startup_duration.clone());
        r.add(
            "karpenter_pods_provisioning_unbound_time",
            "The time from when Karpenter first thinks the pod can schedule until it binds.",
            "gauge",
            POD,
            S,
            self.pods_provisioning_unbound_time.clone(),
        );
        r.add("karpenter_pods_provisioning_unstarted_time", "The time from when Karpenter first thinks the pod can schedule until the pod is running.", "gauge", POD, S, self.pods_provisioning_unstarted_time.clone());
        r.add("karpenter_pods_provisioning_scheduling_undecided_time", "The time from when Karpenter has seen a pod without making a scheduling decision for the pod.", "gauge", POD, S, self.pods_provisioning_scheduling_undecided_time.clone());
        r.add(
            "karpenter_scheduler_queue_depth",
            "The number of pods currently waiting to be scheduled.",
            "gauge",
            &["controller", "scheduling_id"],
            None,
            self.scheduler_queue_depth.clone(),
        );
        r.add("karpenter_scheduler_unfinished_work", "Seconds a scheduling simulation still running has taken so far (not yet observed by scheduling_duration_seconds).", "gauge", &["controller", "scheduling_id"], S, self.scheduler_unfinished_work.clone());
        r.add("karpenter_scheduler_pending_pods_by_effective_zone_count", "Pending pods dimensioned by effective zone constraint: a zone name, 'flexible' (several zones) or 'none' (no zone allowed).", "gauge", &["controller", "zone"], None, self.scheduler_pending_pods_by_effective_zone.clone());
        r.add(
            "karpenter_scheduler_ignored_pods_count",
            "Number of pods ignored during scheduling by Karpenter.",
            "gauge",
            &[],
            None,
            self.scheduler_ignored_pods.clone(),
        );
        r.add("karpenter_voluntary_disruption_decisions_by_nodepool", "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, reason, and consolidation type.", "counter", &["nodepool", "decision", "reason", "consolidation_type"], None, self.disruption_decisions_by_nodepool.clone());
        r.add("karpenter_voluntary_disruption_consolidation_timeouts", "Number of times the Consolidation algorithm has reached a timeout. Labeled by consolidation type.", "counter", &["consolidation_type"], None, self.consolidation_timeouts.clone());
        r.add("karpenter_nodepools_nodes_consuming_budgets", "The number of nodes consuming the budget of a nodepool at a point in time. Labeled by NodePool.", "gauge", &["nodepool", "reason"], None, self.nodepools_nodes_consuming_budgets.clone());
        r.add("karpenter_nodepools_cost_total", "Total cost of the nodepool from Karpenter's perspective (USD/hour at the provider's prices). Not an authoritative source for billing.", "gauge", &["nodepool"], None, self.nodepools_cost.clone());
        r.add(
            "karpenter_cloudprovider_instance_type_cpu_cores",
            "VCPUs cores for a given instance type.",
            "gauge",
            &["instance_type"],
            None,
            self.instance_type_cpu_cores.clone(),
        );
        r.add(
            "karpenter_cloudprovider_instance_type_memory_bytes",
            "Memory, in bytes, for a given instance type.",
            "gauge",
            &["instance_type"],
            None,
            self.instance_type_memory_bytes.clone(),
        );
        r.add(
            "karpenter_cloudprovider_instance_type_offering_available",
            "Instance type offering availability, based on instance type, capacity type, and zone.",
            "gauge",
            &["instance_type", "capacity_type", "zone"],
            None,
            self.offering_available.clone(),
        );
        r.add("karpenter_cloudprovider_instance_type_offering_price_estimate", "Instance type offering estimated hourly price used when making informed decisions on node cost calculation, based on instance type, capacity type, and zone.", "gauge", &["instance_type", "capacity_type", "zone"], None, self.offering_price_estimate.clone());
        r.add("karpenter_cloudprovider_duration", "Duration of cloud provider method calls. Labeled by the controller, method name and provider.", "histogram", &["controller", "method", "provider"], S, self.cloudprovider_duration.clone());
        r.add(
            "karpenter_cloudprovider_errors",
            "Total number of errors returned from CloudProvider calls.",
            "counter",
            &["controller", "method", "provider", "error"],
            None,
            self.cloudprovider_errors.clone(),
        );
        r.add(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller.",
            "counter",
            &["controller", "result"],
            None,
            self.reconcile_total.clone(),
        );
        r.add(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller.",
            "counter",
            &["controller"],
            None,
            self.reconcile_errors.clone(),
        );
        r.add(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller.",
            "counter",
            &["controller"],
            None,
            self.terminal_reconcile_errors.clone(),
        );
        r.add(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller.",
            "counter",
            &["controller"],
            None,
            self.reconcile_panics.clone(),
        );
        r.add(
            "controller_runtime_reconcile_timeouts",
            "Total number of reconciliation timeouts per controller.",
            "counter",
            &["controller"],
            None,
            self.reconcile_timeouts.clone(),
        );
        r.add(
            "controller_runtime_reconcile_time",
            "Length of time per reconciliation per controller.",
            "histogram",
            &["controller"],
            S,
            self.reconcile_time.clone(),
        );
        r.add(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller.",
            "gauge",
            &["controller"],
            None,
            self.max_concurrent_reconciles.clone(),
        );
        r.add(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller.",
            "gauge",
            &["controller"],
            None,
            self.active_workers.clone(),
        );
        r.add(
            "workqueue_adds",
            "Total number of adds handled by workqueue.",
            "counter",
            &["controller", "name"],
            None,
            self.workqueue_adds.clone(),
        );
        r.add(
            "workqueue_retries",
            "Total number of retries handled by workqueue.",
            "counter",
            &["controller", "name"],
            None,
            self.workqueue_retries.clone(),
        );
        r.add(
            "workqueue_depth",
            "Current depth of workqueue by workqueue and priority.",
            "gauge",
            &["controller", "name", "priority"],
            None,
            self.workqueue_depth.clone(),
        );
        r.add(
            "workqueue_queue_duration",
            "How long in seconds an item stays in workqueue before being requested.",
            "histogram",
            &["controller", "name"],
            S,
            self.workqueue_queue_duration.clone(),
        );
        r.add(
            "workqueue_work_duration",
            "How long in seconds processing an item from workqueue takes.",
            "histogram",
            &["controller", "name"],
            S,
            self.workqueue_work_duration.clone(),
        );
        r.add("workqueue_unfinished_work", "Seconds of work the reconciles still running have done so far (not yet observed by work_duration).", "gauge", &["controller", "name"], S, self.workqueue_unfinished_work.clone());
        r.add(
            "workqueue_longest_running_processor",
            "How many seconds has the longest running processor for workqueue been running.",
            "gauge",
            &["controller", "name"],
            S,
            self.workqueue_longest_running_processor.clone(),
        );
        r.add("leader_election_master_status", "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.", "gauge", &["name"], None, self.leader_election_master_status.clone());
        r.add(
            "client_go_request",
            "Number of HTTP requests, partitioned by status code and method.",
            "counter",
            &["code", "method"],
            None,
            self.client_go_requests.clone(),
        );
        r.add("client_go_request_duration", "Request latency in seconds. Broken down by verb, group, version, kind, and subresource.", "histogram", &["verb", "group", "version", "kind", "subresource"], S, self.client_go_request_duration.clone());
        for (kind, m) in STATUS_KINDS.iter().zip(&self.status) {
            let p = format!("operator_{kind}");
            r.add(
                &format!("{p}_termination_duration"),
                "The amount of time taken by an object to terminate completely.",
                "histogram",
                &[],
                S,
                m.termination_duration.clone(),
            );
            r.add(&format!("{p}_termination_current_time"), "The current amount of time in seconds that an object has been in terminating state.", "gauge", &["namespace", "name"], S, m.termination_current_time.clone());
            r.add(
                &format!("{p}_status_condition_transitions"),
                "The count of transitions of a given object, type and status.",
                "counter",
                &["type", "status", "reason"],
                None,
                m.transitions.clone(),
            );
            r.add(
                &format!("{p}_status_condition_transition"),
                "The amount of time a condition was in a given state before transitioning.",
                "histogram",
                &["type", "status", "reason"],
                S,
                m.transition_seconds.clone(),
            );
            r.add(&format!("{p}_status_condition_current_status"), "The current amount of time in seconds that a status condition has been in a specific state.", "gauge", &["namespace", "name", "type", "status", "reason"], S, m.current_status_seconds.clone());
            r.add(
                &format!("{p}_status_condition_count"),
                "The number of a condition for a given object, type and status.",
                "gauge",
                &["namespace", "name", "type", "status", "reason"],
                None,
                m.count.clone(),
            );
        }
        let k = &self.status_by_kind;
        r.add(
            "operator_termination_duration",
            "Deprecated: operator_<kind>_termination_duration_seconds with a kind label.",
            "histogram",
            &["kind"],
            S,
            k.termination_duration.clone(),
        );
        r.add(
            "operator_termination_current_time",
            "Deprecated: operator_<kind>_termination_current_time_seconds with a kind label.",
            "gauge",
            &["kind", "namespace", "name"],
            S,
            k.termination_current_time.clone(),
        );
        r.add(
            "operator_status_condition_transitions",
            "Deprecated: operator_<kind>_status_condition_transitions_total with a kind label.",
            "counter",
            &["kind", "type", "status", "reason"],
            None,
            k.transitions.clone(),
        );
        r.add(
            "operator_status_condition_transition",
            "Deprecated: operator_<kind>_status_condition_transition_seconds with a kind label.",
            "histogram",
            &["kind", "type", "status", "reason"],
            S,
            k.transition_seconds.clone(),
        );
        r.add("operator_status_condition_current_status", "Deprecated: operator_<kind>_status_condition_current_status_seconds with a kind label.", "gauge", &["kind", "namespace", "name", "type", "status", "reason"], S, k.current_status_seconds.clone());
        r.add(
            "operator_status_condition_count",
            "Deprecated: operator_<kind>_status_condition_count with a kind label.",
            "gauge",
            &["kind", "namespace", "name", "type", "status", "reason"],
            None,
            k.count.clone(),
        );
        r.add("karpenter_cluster_cost_per_hour", "What the managed nodes cost now (USD/hour at the provider's prices), by nodepool and capacity type. Not upstream.", "gauge", &["nodepool", "capacity_type"], None, self.cluster_cost_per_hour.clone());
        r.add("karpenter_cluster_cost_lower_bound_per_hour", "The fractional lower bound (USD/hour) on what the pods on a nodepool's nodes could cost on its instance types. Not upstream.", "gauge", &["nodepool"], None, self.cluster_cost_lower_bound_per_hour.clone());
        r.add("karpenter_cluster_cost_ratio_to_lower_bound", "karpenter_cluster_cost_per_hour (all capacity types) over karpenter_cluster_cost_lower_bound_per_hour: 1 is optimal. Not upstream.", "gauge", &["nodepool"], None, self.cluster_cost_ratio_to_lower_bound.clone());
        r.add("karpenter_consolidation_savings_per_hour", "USD/hour saved by the consolidations started: their candidates' prices less their replacements'. Not upstream.", "counter", &[], None, self.consolidation_savings_per_hour.clone());
    }
}

impl Default for Extra {
    fn default() -> Self {
        Self::new()
    }
}
