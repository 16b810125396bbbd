//! Small clusters for the disruption methods' tests: a catalogue of three sizes (on-demand and
//! spot), managed nodes of those sizes, pods bound to them, and the pass's input.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::pod::Pod;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::well_known::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL};
use karpenter_api::{NodeClaim, NodePool};
use serde_json::json;

use super::command::{DisruptionInput, DisruptionOptions, ProviderDrift};
use crate::instance_type::{InstanceType, Offering};
use crate::resources::ResourceList;
use crate::scheduling::SchedulerOptions;
use crate::state::{ClusterState, fixtures};

pub const ZONE: &str = "test-1a";

pub fn t0() -> Timestamp {
    Timestamp::from_second(1_704_067_200).unwrap()
}

/// (name, cpu, on-demand price); spot costs 30 % of on-demand.
pub const SIZES: [(&str, &str, f64); 3] = [
    ("small.2x", "2", 0.1),
    ("medium.4x", "4", 0.2),
    ("big.8x", "8", 0.4),
];

pub fn instance_type(name: &str, cpu: &str, price: f64) -> InstanceType {
    let offering = |capacity_type: &str, price: f64| Offering {
        zone: ZONE.into(),
        capacity_type: capacity_type.into(),
        price,
        available: true,
        ..Offering::default()
    };
    InstanceType {
        name: name.into(),
        labels: [(INSTANCE_TYPE_LABEL.to_string(), name.to_string())].into(),
        capacity: ResourceList::parse([("cpu", cpu), ("memory", "8Gi"), ("pods", "110")]).unwrap(),
        offerings: vec![offering("on-demand", price), offering("spot", price * 0.3)],
        ..InstanceType::default()
    }
}

pub fn sizes() -> Vec<Arc<InstanceType>> {
    SIZES
        .iter()
        .map(|(name, cpu, price)| Arc::new(instance_type(name, cpu, *price)))
        .collect()
}

/// A dynamic NodePool consolidating at once, budget `nodes: 100%` unless `extra` says otherwise
/// (merged over `spec`).
pub fn pool(name: &str, capacity_types: &[&str], extra: serde_json::Value) -> NodePool {
    let mut value = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {
            "template": {"spec": {
                "requirements": [{"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": capacity_types}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }},
            "disruption": {"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized",
                           "budgets": [{"nodes": "100%"}]}
        }
    });
    if let (Some(spec), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(value).unwrap()
}

/// A managed, initialized node `name` of `size` (one of [`SIZES`]) in `pool`, with its NodeClaim
/// `<name>-claim`.
pub fn node(name: &str, size: &str, capacity_type: &str, pool: &str) -> (NodeClaim, Node) {
    let cpu = SIZES
        .iter()
        .find(|(n, _, _)| *n == size)
        .map_or("2", |(_, cpu, _)| cpu);
    node_with_cpu(name, size, cpu, capacity_type, pool)
}

/// [`node`] of any instance type, `cpu` its allocatable cpu.
pub fn node_with_cpu(
    name: &str,
    size: &str,
    cpu: &str,
    capacity_type: &str,
    pool: &str,
) -> (NodeClaim, Node) {
    let provider_id = format!("sim://{name}");
    let mut claim = fixtures::nodeclaim(&format!("{name}-claim"), pool, Some(&provider_id), cpu);
    let mut node = fixtures::node(name, Some(pool), &provider_id, cpu);
    for labels in [
        node.metadata.labels.as_mut().unwrap(),
        claim.metadata.labels.as_mut().unwrap(),
    ] {
        labels.insert(INSTANCE_TYPE_LABEL.into(), size.into());
        labels.insert(ZONE_LABEL.into(), ZONE.into());
        labels.insert(CAPACITY_TYPE_LABEL.into(), capacity_type.into());
    }
    (claim, node)
}

/// A running pod requesting `cpu` (and 100Mi memory) on `node`.
pub fn pod(name: &str, node: &str, cpu: &str) -> Pod {
    let mut pod = fixtures::bound_pod(name, node, cpu);
    let containers = Arc::make_mut(&mut pod.spec.as_mut().unwrap().containers);
    containers[0].resources =
        Some(serde_json::from_value(json!({"requests": {"cpu": cpu, "memory": "100Mi"}})).unwrap());
    pod
}

/// Everything a pass reads, owned.
pub struct World {
    pub state: ClusterState,
    pub types: BTreeMap<String, Vec<Arc<InstanceType>>>,
    pub scheduler: SchedulerOptions,
    pub options: DisruptionOptions,
    pub drift: ProviderDrift,
    pub now: Timestamp,
}

impl World {
    /// Every pool gets the [`sizes`] catalogue; `now` is an hour after [`t0`].
    pub fn new(pools: Vec<NodePool>, nodes: Vec<(NodeClaim, Node)>, pods: Vec<Pod>) -> Self {
        let types = pools
            .iter()
            .map(|p| (p.metadata.name.clone().unwrap(), sizes()))
            .collect();
        let (claims, nodes) = nodes.into_iter().unzip();
        World {
            state: ClusterState::from_objects(pools, claims, nodes, pods),
            types,
            scheduler: SchedulerOptions::default(),
            options: DisruptionOptions::default(),
            drift: ProviderDrift::new(),
            now: t0().checked_add(SignedDuration::from_hours(1)).unwrap(),
        }
    }

    /// Every pool offers `types` instead of [`sizes`].
    pub fn with_types(mut self, types: &[Arc<InstanceType>]) -> Self {
        for offered in self.types.values_mut() {
            *offered = types.to_vec();
        }
        self
    }

    /// What the nodes cost per hour, by the catalogue's price of each node's offering.
    pub fn hourly_cost(&self) -> f64 {
        use super::candidates::OfferingCatalog;
        self.state
            .state_nodes()
            .into_iter()
            .filter_map(|n| {
                let it = n.label(INSTANCE_TYPE_LABEL)?;
                let zone = n.label(ZONE_LABEL)?;
                let ct = n.label(CAPACITY_TYPE_LABEL)?;
                self.types.price(n.nodepool()?, it, zone, ct)
            })
            .sum()
    }

    pub fn input(&self) -> DisruptionInput<'_> {
        DisruptionInput {
            state: &self.state,
            instance_types: &self.types,
            scheduler: &self.scheduler,
            options: &self.options,
            provider_drift: &self.drift,
            now: self.now,
        }
    }
}
