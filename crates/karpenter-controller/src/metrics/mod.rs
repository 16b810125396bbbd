//! Prometheus metrics with upstream Karpenter's names (`karpenter_*`, and the framework families
//! `controller_runtime_*`, `workqueue_*`, `leader_election_*`, `operator_*`), served in the
//! OpenMetrics text format on `/metrics`. Every family is registered here at start, so its
//! `# HELP`/`# TYPE` lines are on the first scrape; [`Metrics::catalog`] lists them (name, type,
//! labels) for the comparison with upstream's list (`upstream.rs`). See `docs/metrics.md`.

mod client;
mod cost;
mod extra;
mod labels;
mod record;
pub mod scrape;
mod status;
pub mod summary;
#[cfg(test)]
mod upstream;

pub use client::ApiCall;
pub use cost::{PoolCost, cost_view};
pub use extra::*;
pub use labels::*;
pub use record::SolveGuard;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Every metric the controller exports. Cloned handles are cheap (`Arc` inside).
#[derive(Debug)]
pub struct Metrics {
    /// Behind a lock so a cloud provider can add its own metrics after start
    /// ([`Metrics::register_provider_metrics`]); `/metrics` encodes everything registered.
    registry: std::sync::Mutex<Registry>,
    /// Every family registered at start: exported name, type, label names.
    catalog: Vec<FamilyInfo>,
    /// The families beyond the first set (upstream's other metrics, the framework families and
    /// the cost view): see `extra.rs`.
    pub x: Extra,
    /// The instance types the last pass resolved per NodePool (see `scrape.rs`).
    offered: scrape::Offered,
    scrape_memory: std::sync::Mutex<scrape::ScrapeMemory>,
    pub nodeclaims_created: Family<NodeClaimCreatedLabels, Counter>,
    pub nodeclaims_terminated: Family<NodeClaimLabels, Counter>,
    pub nodeclaims_disrupted: Family<NodeClaimDisruptedLabels, Counter>,
    pub nodes_created: Family<NodePoolZoneLabels, Counter>,
    pub nodes_terminated: Family<NodePoolZoneLabels, Counter>,
    /// From the NodeClaim's deletion to its finalizer's removal.
    pub nodeclaims_termination_duration: Family<NodePoolLabels, Histogram>,
    /// From the Node's deletion to its finalizer's removal (a summary, as upstream's).
    pub nodes_termination_duration: summary::Summary,
    /// From the Node's creation to its finalizer's removal.
    pub nodes_lifetime_duration: Family<NodePoolLabels, Histogram>,
    pub pods_drained: Family<PodsDrainedLabels, Counter>,
    pub pods_eviction_requests: Family<EvictionRequestLabels, Counter>,
    pub pods_state: Family<PodStateLabels, Gauge>,
    pub provisioner_scheduling_duration: Histogram,
    pub scheduler_scheduling_duration: Family<ControllerLabels, Histogram>,
    pub scheduler_unschedulable_pods: Family<ControllerLabels, Gauge>,
    pub nodepools_usage: Family<NodePoolResourceLabels, FloatGauge>,
    pub nodepools_limit: Family<NodePoolResourceLabels, FloatGauge>,
    pub cluster_state_node_count: Gauge,
    pub cluster_state_synced: Gauge,
    /// Objects skipped because they cannot be decoded, by kind.
    pub cluster_state_ignored_objects: Family<KindLabels, Gauge>,
    pub leader: Gauge,
    /// Events not written because the event queue was full (slow events API).
    pub events_dropped: Counter,
    pub disruption_decisions: Family<DisruptionDecisionLabels, Counter>,
    pub disruption_eligible_nodes: Family<DisruptionReasonLabels, Gauge>,
    pub disruption_evaluation_duration: Family<DisruptionMethodLabels, Histogram>,
    pub disruption_queue_failures: Family<DisruptionDecisionLabels, Counter>,
    /// Consolidation commands abandoned by the validation after the delay.
    pub disruption_failed_validations: Family<ConsolidationTypeLabels, Counter>,
    pub nodepools_allowed_disruptions: Family<NodePoolReasonLabels, Gauge>,
    /// `karpenter_consolidation_score`: Balanced scores of judged moves (no subsystem).
    pub consolidation_score: Family<ConsolidationMoveLabels, Histogram>,
    /// `karpenter_consolidation_moves_total`: judged consolidation moves (no subsystem).
    pub consolidation_moves: Family<ConsolidationMoveLabels, Counter>,
}

/// Upstream's `karpenter_consolidation_score` buckets (around the 0.5 threshold).
pub const CONSOLIDATION_SCORE_BUCKETS: [f64; 8] = [0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0];

fn duration_buckets() -> impl Iterator<Item = f64> {
    // 1 ms .. ~65 s, doubling; scheduling passes span that range.
    exponential_buckets(0.001, 2.0, 17)
}

/// Seconds from `then` to `now` for a duration histogram (`None` without a start; never
/// negative, whatever the clocks' skew).
pub fn seconds_since(
    then: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    now: jiff::Timestamp,
) -> Option<f64> {
    then.map(|t| now.duration_since(t.0).as_secs_f64().max(0.0))
}

fn termination_buckets() -> impl Iterator<Item = f64> {
    // 0.5 s .. ~2.3 h, doubling (upstream's status-condition buckets): drains take seconds to
    // a termination grace period.
    exponential_buckets(0.5, 2.0, 15)
}

fn lifetime_buckets() -> impl Iterator<Item = f64> {
    // 1 min .. ~11 days, doubling: nodes live minutes (consolidation) to weeks (expiry).
    exponential_buckets(60.0, 2.0, 15)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut root = Registry::default();
        let mut catalog = Vec::new();
        let x = Extra::new();
        x.register(&mut Reg {
            registry: &mut root,
            catalog: &mut catalog,
        });
        let registry = root.sub_registry_with_prefix("karpenter");
        let m = Metrics {
            catalog: Vec::new(),
            x,
            offered: scrape::Offered::default(),
            scrape_memory: std::sync::Mutex::default(),
            nodeclaims_created: Family::default(),
            nodeclaims_terminated: Family::default(),
            nodeclaims_disrupted: Family::default(),
            nodes_created: Family::default(),
            nodes_terminated: Family::default(),
            nodeclaims_termination_duration: Family::new_with_constructor(|| {
                Histogram::new(termination_buckets())
            }),
            nodes_termination_duration: summary::Summary::new(
                "karpenter_nodes_termination_duration_seconds",
                "The time taken between a node's deletion request and the removal of its finalizer.",
                &["nodepool"],
            ),
            nodes_lifetime_duration: Family::new_with_constructor(|| {
                Histogram::new(lifetime_buckets())
            }),
            pods_drained: Family::default(),
            pods_eviction_requests: Family::default(),
            pods_state: Family::default(),
            provisioner_scheduling_duration: Histogram::new(duration_buckets()),
            scheduler_scheduling_duration: Family::new_with_constructor(|| {
                Histogram::new(duration_buckets())
            }),
            scheduler_unschedulable_pods: Family::default(),
            nodepools_usage: Family::default(),
            nodepools_limit: Family::default(),
            cluster_state_node_count: Gauge::default(),
            cluster_state_synced: Gauge::default(),
            cluster_state_ignored_objects: Family::default(),
            leader: Gauge::default(),
            events_dropped: Counter::default(),
            disruption_decisions: Family::default(),
            disruption_eligible_nodes: Family::default(),
            disruption_evaluation_duration: Family::new_with_constructor(|| {
                Histogram::new(duration_buckets())
            }),
            disruption_queue_failures: Family::default(),
            disruption_failed_validations: Family::default(),
            nodepools_allowed_disruptions: Family::default(),
            consolidation_score: Family::new_with_constructor(|| {
                Histogram::new(CONSOLIDATION_SCORE_BUCKETS)
            }),
            consolidation_moves: Family::default(),
            registry: std::sync::Mutex::default(),
        };
        // prometheus-client appends `_total` to counters.
        registry.register(
            "events_dropped",
            "Kubernetes events dropped because the event queue was full",
            Always(m.events_dropped.clone()),
        );
        registry.register(
            "nodeclaims_created",
            "Number of nodeclaims created",
            Always(m.nodeclaims_created.clone()),
        );
        registry.register(
            "nodeclaims_terminated",
            "Number of nodeclaims terminated",
            Always(m.nodeclaims_terminated.clone()),
        );
        registry.register(
            "nodeclaims_disrupted",
            "Number of nodeclaims disrupted, by reason",
            Always(m.nodeclaims_disrupted.clone()),
        );
        registry.register(
            "nodes_created",
            "Number of nodes created",
            Always(m.nodes_created.clone()),
        );
        registry.register(
            "nodes_terminated",
            "Number of nodes terminated",
            Always(m.nodes_terminated.clone()),
        );
        registry.register_with_unit(
            "nodeclaims_termination_duration",
            "Time from a nodeclaim's deletion to the removal of its finalizer",
            prometheus_client::registry::Unit::Seconds,
            Always(m.nodeclaims_termination_duration.clone()),
        );
        registry.register_with_unit(
            "nodes_lifetime_duration",
            "Time from a node's creation to the removal of its finalizer",
            prometheus_client::registry::Unit::Seconds,
            Always(m.nodes_lifetime_duration.clone()),
        );
        registry.register(
            "pods_drained",
            "Pods evicted from nodes being terminated, by reason",
            Always(m.pods_drained.clone()),
        );
        registry.register(
            "pods_eviction_requests",
            "Eviction requests sent while draining nodes, by response code",
            Always(m.pods_eviction_requests.clone()),
        );
        registry.register(
            "pods_state",
            "Pod state: 1 per pod, labelled with its node, nodepool and phase",
            Always(m.pods_state.clone()),
        );
        registry.register_with_unit(
            "provisioner_scheduling_duration",
            "Duration of one provisioning scheduling pass",
            prometheus_client::registry::Unit::Seconds,
            Always(m.provisioner_scheduling_duration.clone()),
        );
        registry.register_with_unit(
            "scheduler_scheduling_duration",
            "Duration of scheduling simulations, by controller",
            prometheus_client::registry::Unit::Seconds,
            Always(m.scheduler_scheduling_duration.clone()),
        );
        registry.register(
            "scheduler_unschedulable_pods_count",
            "Pods the last scheduling pass could not place",
            Always(m.scheduler_unschedulable_pods.clone()),
        );
        registry.register(
            "nodepools_usage",
            "Resources provisioned by a nodepool",
            Always(m.nodepools_usage.clone()),
        );
        registry.register(
            "nodepools_limit",
            "Resource limits of a nodepool",
            Always(m.nodepools_limit.clone()),
        );
        registry.register(
            "cluster_state_node_count",
            "Nodes tracked in cluster state",
            Always(m.cluster_state_node_count.clone()),
        );
        registry.register(
            "cluster_state_synced",
            "1 when cluster state has listed every kind",
            Always(m.cluster_state_synced.clone()),
        );
        registry.register(
            "cluster_state_ignored_objects",
            "Objects the API server holds that karpenter-rs cannot decode and skips, by kind",
            Always(m.cluster_state_ignored_objects.clone()),
        );
        registry.register(
            "leader",
            "1 when this replica holds the leader lease",
            Always(m.leader.clone()),
        );
        registry.register(
            "voluntary_disruption_decisions",
            "Disruption commands started, by decision (delete/replace), reason and method",
            Always(m.disruption_decisions.clone()),
        );
        registry.register(
            "voluntary_disruption_eligible_nodes",
            "Nodes eligible for voluntary disruption in the last pass, by reason",
            Always(m.disruption_eligible_nodes.clone()),
        );
        registry.register_with_unit(
            "voluntary_disruption_decision_evaluation_duration",
            "Duration of one disruption pass (every method tried), by the method that acted",
            prometheus_client::registry::Unit::Seconds,
            Always(m.disruption_evaluation_duration.clone()),
        );
        registry.register(
            "voluntary_disruption_queue_failures",
            "Disruption commands rolled back (a replacement failed or timed out)",
            Always(m.disruption_queue_failures.clone()),
        );
        registry.register(
            "voluntary_disruption_failed_validations",
            "Consolidation commands abandoned because the validation after the delay failed",
            Always(m.disruption_failed_validations.clone()),
        );
        registry.register(
            "nodepools_allowed_disruptions",
            "Nodes of a nodepool its budgets allow to be disrupted now, by reason",
            Always(m.nodepools_allowed_disruptions.clone()),
        );
        registry.register(
            "consolidation_score",
            "Balanced consolidation scores of judged moves (approved at >= 0.5), by decision, nodepool and policy",
            Always(m.consolidation_score.clone()),
        );
        registry.register(
            "consolidation_moves",
            "Consolidation moves judged, by decision (approved/rejected), nodepool and consolidation policy",
            Always(m.consolidation_moves.clone()),
        );
        catalog.extend(first_set_catalog());
        catalog.push(FamilyInfo {
            name: m.nodes_termination_duration.name.to_string(),
            kind: "summary",
            labels: m.nodes_termination_duration.labels.to_vec(),
        });
        catalog.push(FamilyInfo {
            name: m.x.pods_startup_duration.name.to_string(),
            kind: "summary",
            labels: Vec::new(),
        });
        Metrics {
            registry: std::sync::Mutex::new(root),
            catalog,
            ..m
        }
    }

    /// Every family registered at start (the provider's are not here).
    pub fn catalog(&self) -> &[FamilyInfo] {
        &self.catalog
    }

    /// Lets a cloud provider add its own metrics (upstream's provider metrics, such as
    /// `karpenter_interruption_*`) to the controller's registry: `register` gets the registry,
    /// prefixed `karpenter` like every other metric. Provider tasks call it from
    /// [`crate::run::ProviderTaskContext::metrics`] while the replica starts, so the metrics are
    /// on `/metrics` from the first scrape.
    pub fn register_provider_metrics(&self, register: impl FnOnce(&mut Registry)) {
        register(self.lock_registry().sub_registry_with_prefix("karpenter"));
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.lock_registry());
        // prometheus-client has no summaries: they go before the closing `# EOF`.
        let body_end = out.strip_suffix("# EOF\n").map_or(out.len(), str::len);
        out.truncate(body_end);
        self.nodes_termination_duration.encode(&mut out);
        self.x.pods_startup_duration.encode(&mut out);
        out.push_str("# EOF\n");
        out
    }

    /// The same in Prometheus's classic text format (0.0.4), for clients that do not ask for
    /// OpenMetrics (`promtool check metrics`, older scrapers): a counter family is named with
    /// its `_total`, and there are no `# UNIT` or `# EOF` lines.
    pub fn encode_text(&self) -> String {
        openmetrics_to_text(&self.encode())
    }

    fn lock_registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A panic while registering or encoding leaves the registry usable: recover it.
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// See [`Metrics::encode_text`].
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// A metric whose `# HELP` and `# TYPE` lines are encoded even without a series
/// (prometheus-client leaves out empty families; upstream's families are on the first scrape).
#[derive(Debug)]
pub(crate) struct Always<M>(pub M);

impl<M: prometheus_client::encoding::EncodeMetric> prometheus_client::encoding::EncodeMetric
    for Always<M>
{
    fn encode(
        &self,
        encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        self.0.metric_type()
    }
}

/// One family as registered: its exported name (with `_total`/unit suffixes), its type and its
/// label names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyInfo {
    pub name: String,
    pub kind: &'static str,
    pub labels: Vec<&'static str>,
}

/// The families [`Metrics::new`] registers itself (the first set, before `extra.rs`).
fn first_set_catalog() -> Vec<FamilyInfo> {
    const FIRST_SET: &[(&str, &str, &[&str])] = &[
        ("karpenter_events_dropped_total", "counter", &[]),
        (
            "karpenter_nodeclaims_created_total",
            "counter",
            &["reason", "nodepool", "min_values_relaxed"],
        ),
        (
            "karpenter_nodeclaims_terminated_total",
            "counter",
            &["nodepool", "capacity_type", "zone"],
        ),
        (
            "karpenter_nodeclaims_disrupted_total",
            "counter",
            &[
                "reason",
                "nodepool",
                "capacity_type",
                "consolidation_policy",
                "termination_mode",
            ],
        ),
        (
            "karpenter_nodes_created_total",
            "counter",
            &["nodepool", "zone"],
        ),
        (
            "karpenter_nodes_terminated_total",
            "counter",
            &["nodepool", "zone"],
        ),
        (
            "karpenter_nodeclaims_termination_duration_seconds",
            "histogram",
            &["nodepool"],
        ),
        (
            "karpenter_nodes_lifetime_duration_seconds",
            "histogram",
            &["nodepool"],
        ),
        ("karpenter_pods_drained_total", "counter", &["reason"]),
        (
            "karpenter_pods_eviction_requests_total",
            "counter",
            &["code"],
        ),
        (
            "karpenter_pods_state",
            "gauge",
            &[
                "name",
                "namespace",
                "owner",
                "node",
                "scheduled",
                "nodepool",
                "zone",
                "arch",
                "capacity_type",
                "instance_type",
                "phase",
                "ready",
                "managed",
            ],
        ),
        (
            "karpenter_provisioner_scheduling_duration_seconds",
            "histogram",
            &[],
        ),
        (
            "karpenter_scheduler_scheduling_duration_seconds",
            "histogram",
            &["controller"],
        ),
        (
            "karpenter_scheduler_unschedulable_pods_count",
            "gauge",
            &["controller"],
        ),
        (
            "karpenter_nodepools_usage",
            "gauge",
            &["nodepool", "resource_type"],
        ),
        (
            "karpenter_nodepools_limit",
            "gauge",
            &["nodepool", "resource_type"],
        ),
        ("karpenter_cluster_state_node_count", "gauge", &[]),
        ("karpenter_cluster_state_synced", "gauge", &[]),
        (
            "karpenter_cluster_state_ignored_objects",
            "gauge",
            &["kind"],
        ),
        ("karpenter_leader", "gauge", &[]),
        (
            "karpenter_voluntary_disruption_decisions_total",
            "counter",
            &["decision", "reason", "consolidation_type"],
        ),
        (
            "karpenter_voluntary_disruption_eligible_nodes",
            "gauge",
            &["reason"],
        ),
        (
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            "histogram",
            &["reason", "consolidation_type"],
        ),
        (
            "karpenter_voluntary_disruption_queue_failures_total",
            "counter",
            &["decision", "reason", "consolidation_type"],
        ),
        (
            "karpenter_voluntary_disruption_failed_validations_total",
            "counter",
            &["consolidation_type"],
        ),
        (
            "karpenter_nodepools_allowed_disruptions",
            "gauge",
            &["nodepool", "reason"],
        ),
        (
            "karpenter_consolidation_score",
            "histogram",
            &["decision", "nodepool", "policy"],
        ),
        (
            "karpenter_consolidation_moves_total",
            "counter",
            &["decision", "nodepool", "policy"],
        ),
    ];
    FIRST_SET
        .iter()
        .map(|(name, kind, labels)| FamilyInfo {
            name: (*name).to_string(),
            kind,
            labels: labels.to_vec(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_upstream_names() {
        let m = Metrics::new();
        m.nodeclaims_created
            .get_or_create(&NodeClaimCreatedLabels {
                reason: "provisioned".into(),
                nodepool: "default".into(),
                min_values_relaxed: "false".into(),
            })
            .inc();
        m.nodepools_limit
            .get_or_create(&NodePoolResourceLabels {
                nodepool: "default".into(),
                resource_type: "cpu".into(),
            })
            .set(1000.0);
        m.provisioner_scheduling_duration.observe(0.25);
        m.pods_state
            .get_or_create(&PodStateLabels {
                name: "a".into(),
                namespace: "default".into(),
                phase: "Pending".into(),
                ..PodStateLabels::default()
            })
            .set(1);
        m.cluster_state_synced.set(1);
        let _ = m.nodes_created.get_or_create(&NodePoolZoneLabels {
            nodepool: "default".into(),
            zone: "a".into(),
        });
        let pool = NodePoolLabels {
            nodepool: "default".into(),
        };
        m.nodeclaims_termination_duration
            .get_or_create(&pool)
            .observe(12.0);
        m.nodes_termination_duration.observe(&["default"], 7.0);
        m.nodes_lifetime_duration
            .get_or_create(&pool)
            .observe(3600.0);
        m.pods_drained
            .get_or_create(&PodsDrainedLabels {
                reason: "Forceful Termination".into(),
            })
            .inc();
        m.pods_eviction_requests
            .get_or_create(&EvictionRequestLabels { code: "429".into() })
            .inc();
        let text = m.encode();
        for name in [
            "karpenter_nodeclaims_termination_duration_seconds_count{nodepool=\"default\"} 1",
            "karpenter_nodes_termination_duration_seconds_sum{nodepool=\"default\"} 7.0",
            "karpenter_nodes_lifetime_duration_seconds_count{nodepool=\"default\"} 1",
            "karpenter_pods_drained_total{reason=\"Forceful Termination\"} 1",
            "karpenter_pods_eviction_requests_total{code=\"429\"} 1",
            "karpenter_nodeclaims_created_total{reason=\"provisioned\",nodepool=\"default\",min_values_relaxed=\"false\"} 1",
            "karpenter_nodepools_limit{nodepool=\"default\",resource_type=\"cpu\"} 1000.0",
            "karpenter_provisioner_scheduling_duration_seconds_count 1",
            "karpenter_nodes_created_total{nodepool=\"default\",zone=\"a\"} 0",
            "# TYPE karpenter_pods_state gauge",
            "karpenter_cluster_state_synced 1",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }

    #[test]
    fn the_classic_text_format_names_counters_with_their_total() {
        let text = openmetrics_to_text(
            "# HELP a_seconds A.\n# TYPE a_seconds histogram\n# UNIT a_seconds seconds\n# HELP b B.\n# TYPE b counter\nb_total 1\n# EOF\n",
        );
        assert_eq!(
            text,
            "# HELP a_seconds A.\n# TYPE a_seconds histogram\n# HELP b_total B.\n# TYPE b_total counter\nb_total 1\n"
        );
    }

    #[test]
    fn a_provider_registers_its_own_metrics_after_start() {
        let m = Metrics::new();
        let provider_counter = Counter::<u64>::default();
        assert!(!m.encode().contains("karpenter_provider_things"));
        m.register_provider_metrics(|registry| {
            registry.register(
                "provider_things",
                "Things a provider counts",
                provider_counter.clone(),
            );
        });
        provider_counter.inc();
        let text = m.encode();
        // Prefixed like the controller's own, and still beside them.
        assert!(text.contains("karpenter_provider_things_total 1"), "{text}");
        assert!(text.contains("# TYPE karpenter_leader gauge"), "{text}");
    }
}
