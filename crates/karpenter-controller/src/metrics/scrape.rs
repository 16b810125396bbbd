//! The gauges derived from the cluster state the controller holds, refreshed at each scrape (no
//! API call: the state, the provider's catalogue as the last pass resolved it, and what earlier
//! scrapes remembered), and the histograms and counters observed from state changes between
//! scrapes (pod startup, condition transitions, terminations).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::well_known::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, REGION_LABEL, ZONE_LABEL,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::pod::Pod;
use karpenter_core::resources::{Quantity, ResourceList};
use karpenter_core::state::ClusterState;

use super::extra::*;
use super::{Metrics, NodePoolReasonLabels, PodStateLabels};

const OS_LABEL: &str = "kubernetes.io/os";

/// What scrapes remember between them. Bounded by the live objects: each map is pruned to
/// what the state still holds at every scrape.
#[derive(Debug, Default)]
pub struct ScrapeMemory {
    /// When cluster state was first seen unsynced, while it stays so.
    unsynced_since: Option<Timestamp>,
    /// Per pod key, what the pod metrics remember of it: one entry (one copy of the key) per
    /// pod, where five maps and sets each kept their own (10,000 pods: ~5 MB of keys).
    pub(crate) pods: HashMap<String, PodMemory>,
    /// Per (kind, namespace/name): its conditions (type -> status, reason, since) and deletion.
    pub(super) objects: HashMap<(usize, String), ObjectSnapshot>,
    /// Scheduling simulations in progress, since when; and how many started so far.
    pub(super) solving: HashMap<SchedulingIdLabels, Timestamp>,
    pub(super) solves: u64,
}

/// What the pod metrics remember of one pod between passes and scrapes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PodMemory {
    /// When karpenter first saw it pending, decided on it, and found it a place.
    pub(crate) seen: Option<Timestamp>,
    pub(crate) decided: Option<Timestamp>,
    pub(crate) schedulable: Option<Timestamp>,
    /// Whether its bound and startup durations were observed.
    bound_observed: bool,
    started_observed: bool,
}

/// An object's conditions (type -> status, reason, since) and deletion at the last scrape.
#[derive(Debug, Clone, Default)]
pub(super) struct ObjectSnapshot {
    pub(super) conditions: BTreeMap<String, (String, String, Option<Timestamp>)>,
    pub(super) deleted_at: Option<Timestamp>,
}

/// The instance types the latest pass resolved, per NodePool (the provider's cached catalogue).
pub type Offered = Arc<Mutex<BTreeMap<String, Vec<Arc<InstanceType>>>>>;

impl Metrics {
    pub(super) fn memory(&self) -> std::sync::MutexGuard<'_, ScrapeMemory> {
        self.scrape_memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn secs(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

fn time(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

pub(super) fn label<'a>(labels: Option<&'a BTreeMap<String, String>>, key: &str) -> &'a str {
    labels.and_then(|l| l.get(key)).map_or("", String::as_str)
}

/// Upstream's `resource_type` value: lower case, `-` as `_`.
fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// A quantity as the metric's number: cpu in cores, memory in bytes, counts as counts.
pub(super) fn amount(q: Quantity) -> f64 {
    q.as_f64_units()
}

fn parse_list(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> ResourceList {
    map.and_then(|m| ResourceList::from_k8s(m).ok())
        .unwrap_or_default()
}

/// The sum of a pod's containers' limits (init containers are transient; upstream's resource
/// helpers count the same way for limits).
fn pod_limits(pod: &Pod) -> ResourceList {
    let mut total = ResourceList::new();
    for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        total.add(&parse_list(
            c.resources.as_ref().and_then(|r| r.limits.as_ref()),
        ));
    }
    total
}

pub(super) fn pod_requests(pod: &Pod) -> ResourceList {
    karpenter_core::pod::effective_requests(pod).unwrap_or_default()
}

fn node_labels(node: &Node, managed: bool) -> NodeLabels {
    let l = node.metadata.labels.as_ref();
    NodeLabels {
        node_name: node.metadata.name.clone().unwrap_or_default(),
        phase: node
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
        managed: managed.to_string(),
        nodepool: label(l, NODEPOOL_LABEL).into(),
        zone: label(l, ZONE_LABEL).into(),
        region: label(l, REGION_LABEL).into(),
        arch: label(l, ARCH_LABEL).into(),
        os: label(l, OS_LABEL).into(),
        instance_type: label(l, INSTANCE_TYPE_LABEL).into(),
        capacity_type: label(l, CAPACITY_TYPE_LABEL).into(),
    }
}

fn with_resource(n: &NodeLabels, resource: &str) -> NodeResourceLabels {
    NodeResourceLabels {
        node_name: n.node_name.clone(),
        phase: n.phase.clone(),
        managed: n.managed.clone(),
        nodepool: n.nodepool.clone(),
        zone: n.zone.clone(),
        region: n.region.clone(),
        arch: n.arch.clone(),
        os: n.os.clone(),
        instance_type: n.instance_type.clone(),
        capacity_type: n.capacity_type.clone(),
        resource_type: resource_type(resource),
    }
}

/// Refreshes every state-derived family. Called by `/metrics` before encoding.
pub fn refresh(metrics: &Metrics, state: &ClusterState, now: Timestamp, leader: bool, lease: &str) {
    metrics.cluster_state_synced.set(i64::from(state.synced()));
    metrics
        .cluster_state_node_count
        .set(i64::try_from(state.nodes().count()).unwrap_or(i64::MAX));
    metrics
        .x
        .leader_election_master_status
        .get_or_create(&LeaseLabels { name: lease.into() })
        .set(i64::from(leader));
    {
        let mut mem = metrics.memory();
        for (labels, since) in &mem.solving {
            metrics
                .x
                .scheduler_unfinished_work
                .get_or_create(labels)
                .set(secs(*since, now));
        }
        if state.synced() {
            mem.unsynced_since = None;
            metrics.x.cluster_state_unsynced_time.set(0.0);
        } else {
            let since = *mem.unsynced_since.get_or_insert(now);
            metrics.x.cluster_state_unsynced_time.set(secs(since, now));
        }
    }
    refresh_nodes(metrics, state, now);
    refresh_pods(metrics, state, now);
    refresh_budgets(metrics, state);
    super::cost::refresh_catalogue_and_cost(metrics, state);
    super::status::refresh_status(metrics, state, now);
}

fn refresh_nodes(metrics: &Metrics, state: &ClusterState, now: Timestamp) {
    let x = &metrics.x;
    for family in [
        &x.nodes_allocatable,
        &x.nodes_total_pod_requests,
        &x.nodes_total_pod_limits,
        &x.nodes_total_daemon_requests,
        &x.nodes_total_daemon_limits,
        &x.nodes_system_overhead,
    ] {
        family.clear();
    }
    x.nodes_current_lifetime.clear();
    x.cluster_utilization.clear();
    let mut cluster_allocatable = ResourceList::new();
    let mut cluster_requests = ResourceList::new();
    for node in state.nodes() {
        let managed = !label(node.metadata.labels.as_ref(), NODEPOOL_LABEL).is_empty();
        let labels = node_labels(node, managed);
        let status = node.status.as_ref();
        let allocatable = parse_list(status.and_then(|s| s.allocatable.as_ref()));
        let capacity = parse_list(status.and_then(|s| s.capacity.as_ref()));
        let (mut requests, mut limits) = (ResourceList::new(), ResourceList::new());
        let (mut daemon_requests, mut daemon_limits) = (ResourceList::new(), ResourceList::new());
        let name = labels.node_name.clone();
        for pod in state
            .pods_on_node(&name)
            .filter(|p| !karpenter_core::pod::is_terminal(p))
        {
            let (r, l) = (pod_requests(pod), pod_limits(pod));
            if karpenter_core::pod::is_owned_by_daemonset(pod) {
                daemon_requests.add(&r);
                daemon_limits.add(&l);
            }
            requests.add(&r);
            limits.add(&l);
        }
        let mut overhead = capacity.clone();
        overhead.sub_floor_zero(&allocatable);
        // Every resource the node has, 0 where nothing requests it (a node without daemonsets
        // still has a daemon-requests series).
        let resources: BTreeSet<&str> = allocatable
            .iter()
            .chain(capacity.iter())
            .map(|(name, _)| name)
            .collect();
        for (family, list) in [
            (&x.nodes_allocatable, &allocatable),
            (&x.nodes_total_pod_requests, &requests),
            (&x.nodes_total_pod_limits, &limits),
            (&x.nodes_total_daemon_requests, &daemon_requests),
            (&x.nodes_total_daemon_limits, &daemon_limits),
            (&x.nodes_system_overhead, &overhead),
        ] {
            let mut names = resources.clone();
            names.extend(list.iter().map(|(name, _)| name));
            for resource in names {
                family
                    .get_or_create(&with_resource(&labels, resource))
                    .set(amount(list.get(resource)));
            }
        }
        if let Some(created) = time(node.metadata.creation_timestamp.as_ref()) {
            x.nodes_current_lifetime
                .get_or_create(&labels)
                .set(secs(created, now));
        }
        if managed {
            cluster_allocatable.add(&allocatable);
            cluster_requests.add(&requests);
        }
    }
    for (resource, total) in cluster_allocatable.iter() {
        let total = amount(total);
        if total > 0.0 {
            x.cluster_utilization
                .get_or_create(&ResourceTypeLabels {
                    resource_type: resource_type(resource),
                })
                .set(100.0 * amount(cluster_requests.get(resource)) / total);
        }
    }
}

fn pod_condition_time(pod: &Pod, type_: &str) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .and_then(|c| time(c.last_transition_time.as_ref()))
}

fn owner(pod: &Pod) -> String {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| {
            format!(
                "{}/{}/{}",
                o.kind,
                karpenter_core::pod::namespace(pod),
                o.name
            )
        })
        .unwrap_or_default()
}

fn refresh_pods(metrics: &Metrics, state: &ClusterState, now: Timestamp) {
    let x = &metrics.x;
    metrics.pods_state.clear();
    for family in [
        &x.pods_unstarted_time,
        &x.pods_unbound_time,
        &x.pods_provisioning_unbound_time,
        &x.pods_provisioning_unstarted_time,
        &x.pods_provisioning_scheduling_undecided_time,
    ] {
        family.clear();
    }
    x.scheduler_pending_pods_by_effective_zone.clear();
    let mut mem = metrics.memory();
    let mut live = HashSet::new();
    for pod in state.pods() {
        let key = karpenter_core::pod::key(pod);
        live.insert(key.clone());
        let node_name = karpenter_core::pod::node_name(pod).unwrap_or_default();
        let node_labels = state
            .node(node_name)
            .and_then(|n| n.metadata.labels.as_ref());
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let ready = karpenter_core::node::pod_is_ready(pod);
        let nodepool = label(node_labels, NODEPOOL_LABEL);
        metrics
            .pods_state
            .get_or_create(&PodStateLabels {
                name: karpenter_core::pod::name(pod).into(),
                namespace: karpenter_core::pod::namespace(pod).into(),
                owner: owner(pod),
                node: node_name.into(),
                scheduled: (!node_name.is_empty()).to_string(),
                nodepool: nodepool.into(),
                zone: label(node_labels, ZONE_LABEL).into(),
                arch: label(node_labels, ARCH_LABEL).into(),
                capacity_type: label(node_labels, CAPACITY_TYPE_LABEL).into(),
                instance_type: label(node_labels, INSTANCE_TYPE_LABEL).into(),
                phase: phase.clone(),
                ready: ready.to_string(),
                managed: (!nodepool.is_empty()).to_string(),
            })
            .set(1);
        if karpenter_core::pod::is_terminal(pod) {
            continue;
        }
        let Some(created) = time(pod.metadata.creation_timestamp.as_ref()) else {
            continue;
        };
        let ids = PodLabels {
            name: karpenter_core::pod::name(pod).into(),
            namespace: karpenter_core::pod::namespace(pod).into(),
        };
        if node_name.is_empty() {
            x.scheduler_pending_pods_by_effective_zone
                .get_or_create(&ControllerZoneLabels {
                    controller: "provisioner".into(),
                    zone: effective_zone(pod),
                })
                .inc();
        }
        let bound_at = pod_condition_time(pod, "PodScheduled").filter(|_| !node_name.is_empty());
        let started_at = pod_condition_time(pod, "Ready").filter(|_| phase == "Running");
        let remembered = mem.pods.get(&key).copied().unwrap_or_default();
        let schedulable = remembered.schedulable;
        match bound_at {
            Some(at) => {
                if !remembered.bound_observed {
                    mem.pods.entry(key.clone()).or_default().bound_observed = true;
                    x.pods_bound_duration.observe(secs(created, at));
                    if let Some(s) = schedulable {
                        x.pods_provisioning_bound_duration.observe(secs(s, at));
                    }
                }
            }
            None => {
                x.pods_unbound_time
                    .get_or_create(&ids)
                    .set(secs(created, now));
                if let Some(s) = schedulable {
                    x.pods_provisioning_unbound_time
                        .get_or_create(&ids)
                        .set(secs(s, now));
                }
                if let Some(seen) = remembered.seen
                    && remembered.decided.is_none()
                {
                    x.pods_provisioning_scheduling_undecided_time
                        .get_or_create(&ids)
                        .set(secs(seen, now));
                }
            }
        }
        match started_at {
            Some(at) => {
                if !remembered.started_observed {
                    mem.pods.entry(key.clone()).or_default().started_observed = true;
                    x.pods_startup_duration.observe(&[], secs(created, at));
                    if let Some(s) = schedulable {
                        x.pods_provisioning_startup_duration.observe(secs(s, at));
                    }
                }
            }
            None => {
                x.pods_unstarted_time
                    .get_or_create(&ids)
                    .set(secs(created, now));
                if let Some(s) = schedulable {
                    x.pods_provisioning_unstarted_time
                        .get_or_create(&ids)
                        .set(secs(s, now));
                }
            }
        }
    }
    mem.pods.retain(|k, _| live.contains(k));
}

/// Nodes consuming a pool's disruption budget: its nodes being deleted or disrupted now.
fn refresh_budgets(metrics: &Metrics, state: &ClusterState) {
    let family = &metrics.x.nodepools_nodes_consuming_budgets;
    family.clear();
    let mut per_pool: BTreeMap<&str, i64> = state
        .nodepools()
        .map(|p| (p.metadata.name.as_deref().unwrap_or_default(), 0))
        .collect();
    for claim in state.nodeclaims() {
        let pool = label(claim.metadata.labels.as_ref(), NODEPOOL_LABEL);
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        let disrupting = claim.metadata.deletion_timestamp.is_some()
            || state.is_marked_for_deletion(name)
            || state.is_being_disrupted(name);
        if disrupting && let Some(count) = per_pool.get_mut(pool) {
            *count = count.saturating_add(1);
        }
    }
    for (pool, count) in per_pool {
        family
            .get_or_create(&NodePoolReasonLabels {
                nodepool: pool.into(),
                reason: "all".into(),
            })
            .set(count);
    }
}

/// The zone a pending pod can only go to, `flexible` when it may go to several (or any), `none`
/// when its zone selector and required zone affinity allow none.
fn effective_zone(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    let mut allowed: Option<BTreeSet<String>> = spec
        .and_then(|s| s.node_selector.as_ref()?.get(ZONE_LABEL))
        .map(|zone| BTreeSet::from([zone.clone()]));
    let terms = spec
        .and_then(|s| s.affinity.as_ref()?.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| &r.node_selector_terms);
    if let Some(terms) = terms.filter(|t| !t.is_empty()) {
        // Terms are ORed: a term without a zone `In` allows every zone.
        let mut union = BTreeSet::new();
        let mut any_zone = false;
        for term in terms {
            let zones: Option<BTreeSet<String>> = term
                .match_expressions
                .iter()
                .flatten()
                .filter(|e| e.key == ZONE_LABEL && e.operator == "In")
                .map(|e| e.values.iter().flatten().cloned().collect::<BTreeSet<_>>())
                .reduce(|a, b| a.intersection(&b).cloned().collect());
            match zones {
                Some(zones) => union.extend(zones),
                None => any_zone = true,
            }
        }
        if !any_zone {
            allowed = Some(match allowed {
                Some(selected) => selected.intersection(&union).cloned().collect(),
                None => union,
            });
        }
    }
    match allowed {
        None => "flexible".into(),
        Some(zones) if zones.is_empty() => "none".into(),
        Some(zones) if zones.len() == 1 => zones.into_iter().next().unwrap_or_default(),
        Some(_) => "flexible".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::NodePool;
    use karpenter_core::instance_type::{Offering, Overhead};
    use serde_json::json;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn node() -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {
                "karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": "a", "karpenter.sh/capacity-type": "on-demand",
                "kubernetes.io/arch": "amd64"}},
            "spec": {"providerID": "sim:///n1"},
            "status": {"capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                       "allocatable": {"cpu": "1900m", "memory": "7Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    fn pod(name: &str, cpu: &str, node: Option<&str>, extra: serde_json::Value) -> Pod {
        let mut value = json!({
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"memory": "1Gi"}}}]},
            "status": {"phase": "Pending"}
        });
        if let Some(node) = node {
            value["spec"]["nodeName"] = json!(node);
            value["status"] = json!({"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:30Z"}]});
        }
        merge(&mut value, extra);
        serde_json::from_value(value).unwrap()
    }

    fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
        match (base, extra) {
            (serde_json::Value::Object(base), serde_json::Value::Object(extra)) => {
                for (key, value) in extra {
                    merge(base.entry(key).or_insert(serde_json::Value::Null), value);
                }
            }
            (base, extra) => *base = extra,
        }
    }

    fn m5_large() -> Arc<InstanceType> {
        Arc::new(InstanceType {
            name: "m5.large".into(),
            labels: Default::default(),
            capacity: ResourceList::parse([("cpu", "2"), ("memory", "8Gi"), ("pods", "110")])
                .unwrap(),
            overhead: Overhead::default(),
            offerings: vec![Offering {
                zone: "a".into(),
                capacity_type: "on-demand".into(),
                price: 0.096,
                available: true,
                reservation_id: None,
                reservation_capacity: None,
            }],
            ..Default::default()
        })
    }

    fn state() -> ClusterState {
        let daemon = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds", "controller": true}]}});
        ClusterState::from_objects(
            Vec::new(),
            Vec::new(),
            vec![node()],
            vec![
                pod("app", "1", Some("n1"), json!({})),
                pod("agent", "100m", Some("n1"), daemon),
                pod(
                    "waiting",
                    "1",
                    None,
                    json!({"spec": {"nodeSelector": {"topology.kubernetes.io/zone": "b"}}}),
                ),
            ],
        )
    }

    fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
    }

    fn value(text: &str, prefix: &str) -> f64 {
        line(text, prefix)
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn node_pod_and_cost_gauges_come_from_the_state() {
        let m = Metrics::new();
        m.remember_offered([("default", &[m5_large()][..])]);
        let now = t("2026-01-01T01:00:00Z");
        refresh(&m, &state(), now, true, "karpenter-leader-election");
        let text = m.encode();
        let node = r#"node_name="n1",phase="",managed="true",nodepool="default",zone="a",region="",arch="amd64",os="",instance_type="m5.large",capacity_type="on-demand""#;
        let cpu = |family: &str| value(&text, &format!("{family}{{{node},resource_type=\"cpu\"}}"));
        assert_eq!(cpu("karpenter_nodes_allocatable"), 1.9);
        assert_eq!(cpu("karpenter_nodes_total_pod_requests"), 1.1);
        assert_eq!(cpu("karpenter_nodes_total_daemon_requests"), 0.1);
        assert_eq!(cpu("karpenter_nodes_total_daemon_limits"), 0.0);
        assert!((cpu("karpenter_nodes_system_overhead") - 0.1).abs() < 1e-9);
        assert_eq!(
            value(
                &text,
                &format!("karpenter_nodes_current_lifetime_seconds{{{node}}}")
            ),
            3600.0
        );
        let utilization = value(
            &text,
            r#"karpenter_cluster_utilization_percent{resource_type="cpu"}"#,
        );
        assert!((utilization - 110.0 / 1.9).abs() < 1e-9, "{utilization}");
        // The node at its offering's price; the bound buys 0.55 of an m5.large (1.1 of 2 cpu).
        assert_eq!(
            value(
                &text,
                r#"karpenter_cluster_cost_per_hour{nodepool="default",capacity_type="on-demand"}"#
            ),
            0.096
        );
        let bound = value(
            &text,
            r#"karpenter_cluster_cost_lower_bound_per_hour{nodepool="default"}"#,
        );
        assert!((bound - 0.55 * 0.096).abs() < 1e-9, "{bound}");
        let ratio = value(
            &text,
            r#"karpenter_cluster_cost_ratio_to_lower_bound{nodepool="default"}"#,
        );
        assert!((ratio - 1.0 / 0.55).abs() < 1e-9, "{ratio}");
        assert_eq!(
            value(
                &text,
                r#"karpenter_nodepools_cost_total{nodepool="default"}"#
            ),
            0.096
        );
        assert_eq!(
            value(
                &text,
                r#"karpenter_cloudprovider_instance_type_offering_price_estimate{instance_type="m5.large",capacity_type="on-demand",zone="a"}"#
            ),
            0.096
        );
        // Pods: the pending one's zone and wait; the running ones' bound and startup times.
        assert_eq!(
            value(
                &text,
                r#"karpenter_scheduler_pending_pods_by_effective_zone_count{controller="provisioner",zone="b"}"#
            ),
            1.0
        );
        assert_eq!(
            value(
                &text,
                r#"karpenter_pods_unbound_time_seconds{name="waiting",namespace="default"}"#
            ),
            3600.0
        );
        assert_eq!(
            value(&text, "karpenter_pods_bound_duration_seconds_sum"),
            20.0
        );
        assert_eq!(
            value(&text, "karpenter_pods_startup_duration_seconds_count"),
            2.0
        );
        assert_eq!(
            value(
                &text,
                r#"karpenter_pods_startup_duration_seconds{quantile="0.5"}"#
            ),
            30.0
        );
        assert!(
            line(&text, "karpenter_pods_state{name=\"agent\"")
                .contains(r#"owner="DaemonSet/default/ds""#)
        );
        assert_eq!(
            value(
                &text,
                r#"leader_election_master_status{name="karpenter-leader-election"}"#
            ),
            1.0
        );
        // A second scrape observes nothing twice.
        refresh(&m, &state(), now, true, "karpenter-leader-election");
        assert_eq!(
            value(&m.encode(), "karpenter_pods_startup_duration_seconds_count"),
            2.0
        );
    }

    fn pool(status: &str, since: &str, deleting: bool) -> NodePool {
        let mut p = karpenter_core::state::fixtures::nodepool("default");
        p.status = serde_json::from_value(json!({"conditions": [{
            "type": "Ready", "status": status, "reason": status, "message": "",
            "lastTransitionTime": since}]}))
        .unwrap();
        if deleting {
            p.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t("2026-01-01T00:10:00Z")),
            );
        }
        p
    }

    #[test]
    fn condition_transitions_and_terminations_are_seen_between_scrapes() {
        let m = Metrics::new();
        let with =
            |p: Vec<NodePool>| ClusterState::from_objects(p, Vec::new(), Vec::new(), Vec::new());
        refresh(
            &m,
            &with(vec![pool("True", "2026-01-01T00:00:00Z", false)]),
            t("2026-01-01T00:01:00Z"),
            false,
            "l",
        );
        let text = m.encode();
        assert_eq!(
            value(
                &text,
                r#"operator_nodepool_status_condition_current_status_seconds{namespace="",name="default",type="Ready",status="True",reason="True"}"#
            ),
            60.0
        );
        assert!(
            !text.contains("operator_nodepool_status_condition_transitions_total{"),
            "{text}"
        );
        refresh(
            &m,
            &with(vec![pool("False", "2026-01-01T00:05:00Z", true)]),
            t("2026-01-01T00:11:00Z"),
            false,
            "l",
        );
        let text = m.encode();
        assert_eq!(
            value(
                &text,
                r#"operator_nodepool_status_condition_transitions_total{type="Ready",status="False",reason="False"}"#
            ),
            1.0
        );
        // True held 5 minutes before it turned False.
        assert_eq!(
            value(
                &text,
                r#"operator_nodepool_status_condition_transition_seconds_sum{type="Ready",status="True",reason="True"}"#
            ),
            300.0
        );
        assert_eq!(
            value(
                &text,
                r#"operator_nodepool_termination_current_time_seconds{namespace="",name="default"}"#
            ),
            60.0
        );
        assert_eq!(
            value(
                &text,
                r#"operator_status_condition_count{kind="nodepool",namespace="",name="default",type="Ready",status="False",reason="False"}"#
            ),
            1.0
        );
        // Gone: its termination took 2 minutes.
        refresh(&m, &with(Vec::new()), t("2026-01-01T00:12:00Z"), false, "l");
        let text = m.encode();
        assert_eq!(
            value(&text, "operator_nodepool_termination_duration_seconds_sum"),
            120.0
        );
        assert!(
            !text.contains("operator_nodepool_status_condition_count{"),
            "{text}"
        );
    }

    #[test]
    fn a_solve_in_progress_shows_its_queue_until_it_ends() {
        let m = Metrics::new();
        let guard = m.begin_solve("provisioner", 7, t("2026-01-01T00:00:00Z"));
        refresh(
            &m,
            &ClusterState::new(),
            t("2026-01-01T00:00:03Z"),
            false,
            "l",
        );
        let text = m.encode();
        assert_eq!(
            value(
                &text,
                r#"karpenter_scheduler_queue_depth{controller="provisioner",scheduling_id="1"}"#
            ),
            7.0
        );
        assert_eq!(
            value(
                &text,
                r#"karpenter_scheduler_unfinished_work_seconds{controller="provisioner",scheduling_id="1"}"#
            ),
            3.0
        );
        drop(guard);
        assert!(!m.encode().contains("karpenter_scheduler_queue_depth{"));
    }
}
