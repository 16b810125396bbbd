//! The catalogue gauges (`karpenter_cloudprovider_instance_type_*`), upstream's
//! `karpenter_nodepools_cost_total` and the cost view (`karpenter_cluster_cost_*`), from the
//! instance types the last pass resolved and the nodes and pods in the state.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use karpenter_api::well_known::{
    CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::resources::ResourceList;
use karpenter_core::state::ClusterState;

use super::Metrics;
use super::extra::*;
use super::scrape::{amount, label, pod_requests};

/// The catalogue gauges, `karpenter_nodepools_cost_total` and the cost view.
pub(super) fn refresh_catalogue_and_cost(metrics: &Metrics, state: &ClusterState) {
    let x = &metrics.x;
    let offered = metrics
        .offered
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for family in [&x.instance_type_cpu_cores, &x.instance_type_memory_bytes] {
        family.clear();
    }
    x.offering_available.clear();
    x.offering_price_estimate.clear();
    x.nodepools_cost.clear();
    x.cluster_cost_per_hour.clear();
    x.cluster_cost_lower_bound_per_hour.clear();
    x.cluster_cost_ratio_to_lower_bound.clear();
    for ty in offered.values().flatten() {
        let it = InstanceTypeLabels {
            instance_type: ty.name.clone(),
        };
        x.instance_type_cpu_cores
            .get_or_create(&it)
            .set(amount(ty.capacity.get(karpenter_core::resources::CPU)));
        x.instance_type_memory_bytes
            .get_or_create(&it)
            .set(amount(ty.capacity.get(karpenter_core::resources::MEMORY)));
        for o in &ty.offerings {
            let labels = OfferingLabels {
                instance_type: ty.name.clone(),
                capacity_type: o.capacity_type.clone(),
                zone: o.zone.clone(),
            };
            x.offering_available
                .get_or_create(&labels)
                .set(i64::from(o.available));
            x.offering_price_estimate
                .get_or_create(&labels)
                .set(o.price);
        }
    }
    let view = cost_view(state, &offered);
    for (pool, row) in &view {
        x.nodepools_cost
            .get_or_create(&NodePoolOnlyLabels {
                nodepool: pool.clone(),
            })
            .set(row.cost.values().sum());
        for (capacity_type, cost) in &row.cost {
            x.cluster_cost_per_hour
                .get_or_create(&NodePoolCapacityLabels {
                    nodepool: pool.clone(),
                    capacity_type: capacity_type.clone(),
                })
                .set(*cost);
        }
        let pool_labels = NodePoolOnlyLabels {
            nodepool: pool.clone(),
        };
        x.cluster_cost_lower_bound_per_hour
            .get_or_create(&pool_labels)
            .set(row.lower_bound);
        if let Some(ratio) =
            karpenter_core::cost::cost_ratio(row.cost.values().sum(), row.lower_bound)
        {
            x.cluster_cost_ratio_to_lower_bound
                .get_or_create(&pool_labels)
                .set(ratio);
        }
    }
}

/// One NodePool's cost view.
#[derive(Debug, Default, PartialEq)]
pub struct PoolCost {
    /// USD/hour of its nodes by capacity type.
    pub cost: BTreeMap<String, f64>,
    /// The fractional bound for the pods on its nodes (USD/hour).
    pub lower_bound: f64,
}

/// Per NodePool with nodes: what its nodes cost (each at its offering's price in the pool's
/// catalogue) and the bound for the pods on them over what the pool can launch.
pub fn cost_view(
    state: &ClusterState,
    offered: &BTreeMap<String, Vec<Arc<InstanceType>>>,
) -> BTreeMap<String, PoolCost> {
    let mut view: BTreeMap<String, PoolCost> = BTreeMap::new();
    let mut demand: BTreeMap<String, ResourceList> = BTreeMap::new();
    for node in state.nodes() {
        let l = node.metadata.labels.as_ref();
        let pool = label(l, NODEPOOL_LABEL);
        if pool.is_empty() {
            continue;
        }
        let Some(types) = offered.get(pool) else {
            continue;
        };
        let capacity_type = label(l, CAPACITY_TYPE_LABEL);
        let price = karpenter_core::cost::node_hourly_price(
            types,
            label(l, INSTANCE_TYPE_LABEL),
            label(l, ZONE_LABEL),
            capacity_type,
        );
        let row = view.entry(pool.to_string()).or_default();
        *row.cost.entry(capacity_type.to_string()).or_default() += price.unwrap_or(0.0);
        let pods = demand.entry(pool.to_string()).or_default();
        for pod in state
            .pods_on_node(node.metadata.name.as_deref().unwrap_or_default())
            .filter(|p| !karpenter_core::pod::is_terminal(p))
        {
            pods.add(&pod_requests(pod));
        }
    }
    for (pool, row) in view.iter_mut() {
        if let (Some(types), Some(pods)) = (offered.get(pool), demand.get(pool)) {
            // Bounded by what the pool can launch (its capacity types, zones, type filters).
            let types = match state.nodepool(pool) {
                Some(p) => karpenter_core::cost::launchable_by(types, p),
                None => types.clone(),
            };
            row.lower_bound = karpenter_core::cost::fractional_lower_bound(
                &types,
                karpenter_core::cost::demand_row(pods),
            );
        }
    }
    view
}
