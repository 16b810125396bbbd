//! The cluster's cost view (`karpenter_cluster_cost_*` metrics): what the managed nodes cost now
//! at the provider's prices, the fractional lower bound on what their pods could cost
//! ([`crate::scheduling::bound`]) and their ratio. (A consolidation's hourly savings are its
//! command's `savings_per_hour`, see [`crate::disruption::command::Command`].)
//! Pure: the controller hands in its cached catalogue and the cluster state's pods.

use std::sync::Arc;

use crate::instance_type::InstanceType;
use crate::resources::{CPU, MEMORY, PODS, ResourceList};
use crate::scheduling::bound::{Column, RESOURCES, cheapest_mix};

/// USD/hour of the offering `instance_type` in `zone` with `capacity_type` among `types` (its
/// price whether or not it is available now: a running node keeps its price). `None` when the
/// catalogue has no such offering.
pub fn node_hourly_price(
    types: &[Arc<InstanceType>],
    instance_type: &str,
    zone: &str,
    capacity_type: &str,
) -> Option<f64> {
    types
        .iter()
        .find(|t| t.name == instance_type)?
        .offerings
        .iter()
        .filter(|o| o.zone == zone && o.capacity_type == capacity_type)
        .map(|o| o.price)
        .filter(|p| p.is_finite() && *p >= 0.0)
        .reduce(f64::min)
}

/// The bound's row of a resource list: cpu millicores, memory bytes, pod count.
pub fn demand_row(requests: &ResourceList) -> [f64; RESOURCES] {
    [
        requests.get(CPU).as_f64_units() * 1000.0,
        requests.get(MEMORY).as_f64_units(),
        requests.get(PODS).as_f64_units(),
    ]
}

/// The cheapest fractional mix of `types` (each at its cheapest available offering, with its
/// allocatable as room) covering `demand` (cpu millicores, memory bytes, pods): USD/hour. Pods
/// on the nodes include their daemonset pods, so room is the whole allocatable. Zero when no
/// mix covers the demand (a resource no type offers): the bound then claims nothing.
pub fn fractional_lower_bound(types: &[Arc<InstanceType>], demand: [f64; RESOURCES]) -> f64 {
    let columns: Vec<Column> = types
        .iter()
        .filter_map(|t| {
            let price = t.cheapest_available()?.price;
            if !price.is_finite() || price < 0.0 {
                return None;
            }
            Some(Column {
                price,
                room: demand_row(&t.allocatable()),
            })
        })
        .collect();
    cheapest_mix(&columns, demand).map_or(0.0, |mix| mix.cost)
}

/// How many times the bound the cluster costs (1 = optimal); `None` when the bound is zero
/// (no pods, or no priced type), where a ratio means nothing.
pub fn cost_ratio(cost: f64, lower_bound: f64) -> Option<f64> {
    (lower_bound > 0.0 && cost.is_finite()).then(|| cost / lower_bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance_type::{Offering, Overhead};

    fn ty(
        name: &str,
        cpu: &str,
        memory: &str,
        offerings: &[(&str, &str, f64, bool)],
    ) -> Arc<InstanceType> {
        Arc::new(InstanceType {
            name: name.into(),
            labels: Default::default(),
            capacity: ResourceList::parse([("cpu", cpu), ("memory", memory), ("pods", "110")])
                .expect("valid"),
            overhead: Overhead::default(),
            offerings: offerings
                .iter()
                .map(|(zone, ct, price, available)| Offering {
                    zone: (*zone).into(),
                    capacity_type: (*ct).into(),
                    price: *price,
                    available: *available,
                    reservation_id: None,
                    reservation_capacity: None,
                })
                .collect(),
        })
    }

    #[test]
    fn a_node_costs_its_offerings_price_even_when_unavailable_now() {
        let types = [ty(
            "m5.large",
            "2",
            "8Gi",
            &[("a", "on-demand", 0.096, true), ("a", "spot", 0.04, false)],
        )];
        assert_eq!(
            node_hourly_price(&types, "m5.large", "a", "spot"),
            Some(0.04)
        );
        assert_eq!(
            node_hourly_price(&types, "m5.large", "a", "on-demand"),
            Some(0.096)
        );
        assert_eq!(node_hourly_price(&types, "m5.large", "b", "spot"), None);
        assert_eq!(node_hourly_price(&types, "c5.large", "a", "spot"), None);
    }

    #[test]
    fn the_bound_buys_fractions_of_the_cheapest_type_per_resource() {
        // 2 cpu / 8Gi for 0.10 and 4 cpu / 8Gi for 0.12: 3 cpu and 4Gi is 0.75 of the larger.
        let types = [
            ty("m", "2", "8Gi", &[("a", "on-demand", 0.10, true)]),
            ty("c", "4", "8Gi", &[("a", "on-demand", 0.12, true)]),
        ];
        let demand = [3000.0, 4.0 * 1024.0 * 1024.0 * 1024.0, 3.0];
        let bound = fractional_lower_bound(&types, demand);
        assert!((bound - 0.09).abs() < 1e-9, "{bound}");
        // Nothing to place costs nothing; unavailable types are not bought.
        assert_eq!(fractional_lower_bound(&types, [0.0; RESOURCES]), 0.0);
        let unavailable = [ty("m", "2", "8Gi", &[("a", "on-demand", 0.10, false)])];
        assert_eq!(fractional_lower_bound(&unavailable, demand), 0.0);
    }

    #[test]
    fn the_ratio_needs_a_bound() {
        assert_eq!(cost_ratio(0.3, 0.1).map(|r| (r * 10.0).round()), Some(30.0));
        assert_eq!(cost_ratio(0.3, 0.0), None);
        assert_eq!(cost_ratio(f64::INFINITY, 0.1), None);
    }
}
