//! The cluster's cost view (`karpenter_cluster_cost_*` metrics): what the managed nodes cost now
//! at the provider's prices, the fractional lower bound on what their pods could cost
//! ([`crate::scheduling::bound`]) and their ratio. (A consolidation's hourly savings are its
//! command's `savings_per_hour`, see [`crate::disruption::command::Command`].)
//! Pure: the controller hands in its cached catalogue and the cluster state's pods.

use std::sync::Arc;

use crate::instance_type::InstanceType;
use crate::requirements::Requirements;
use crate::resources::{CPU, MEMORY, PODS, ResourceList};
use crate::scheduling::bound::{Column, RESOURCES, cheapest_mix};
use karpenter_api::well_known::{CAPACITY_TYPE_LABEL, ZONE_LABEL};

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

/// What a NodePool with `requirements` can launch among `types`: the types whose labels meet
/// them, each with only the offerings in the zones and capacity types they allow. A key a type
/// does not define is not held against it (the pool's own labels), so the bound over the result
/// stays a lower bound. Without this, a pool restricted to on-demand or small types would be
/// measured against spot prices or types it cannot launch.
pub fn launchable(
    types: &[Arc<InstanceType>],
    requirements: &Requirements,
) -> Vec<Arc<InstanceType>> {
    let zone = requirements.get(&ZONE_LABEL.to_string());
    let capacity = requirements.get(&CAPACITY_TYPE_LABEL.to_string());
    types
        .iter()
        .filter(|t| {
            requirements.iter().all(|(key, requirement)| {
                t.labels.get(key).is_none_or(|value| requirement.has(value))
            })
        })
        .filter_map(|t| {
            let offerings: Vec<_> = t
                .offerings
                .iter()
                .filter(|o| zone.is_none_or(|r| r.has(&o.zone)))
                .filter(|o| capacity.is_none_or(|r| r.has(&o.capacity_type)))
                .cloned()
                .collect();
            if offerings.len() == t.offerings.len() {
                return Some(Arc::clone(t));
            }
            (!offerings.is_empty()).then(|| {
                Arc::new(InstanceType {
                    offerings,
                    ..(**t).clone()
                })
            })
        })
        .collect()
}

/// [`launchable`] for `pool`'s `spec.template.spec.requirements` (all of `types` when they do not
/// parse: the pool's status reports that, and a bound over more types is still a bound).
pub fn launchable_by(
    types: &[Arc<InstanceType>],
    pool: &karpenter_api::NodePool,
) -> Vec<Arc<InstanceType>> {
    match Requirements::from_node_selector_with_min_values(&pool.spec.template.spec.requirements) {
        Ok(requirements) => launchable(types, &requirements),
        Err(_) => types.to_vec(),
    }
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
            ..Default::default()
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
    fn a_pool_is_bounded_by_what_it_can_launch() {
        use crate::requirements::Requirement;
        let mut big = ty(
            "c.8x",
            "32",
            "64Gi",
            &[("a", "on-demand", 1.0, true), ("a", "spot", 0.3, true)],
        );
        Arc::make_mut(&mut big)
            .labels
            .insert("karpenter.k8s.aws/instance-cpu".into(), "32".into());
        let mut small = ty(
            "c.x",
            "4",
            "8Gi",
            &[("a", "on-demand", 0.2, true), ("b", "spot", 0.06, true)],
        );
        Arc::make_mut(&mut small)
            .labels
            .insert("karpenter.k8s.aws/instance-cpu".into(), "4".into());
        let types = [big, small];
        let mut on_demand_small = Requirements::new();
        on_demand_small.add_str(
            CAPACITY_TYPE_LABEL,
            Requirement::new(CAPACITY_TYPE_LABEL, "In", &["on-demand".to_string()]).unwrap(),
        );
        on_demand_small.add_str(
            "karpenter.k8s.aws/instance-cpu",
            Requirement::new("karpenter.k8s.aws/instance-cpu", "Lt", &["32".to_string()]).unwrap(),
        );
        // A key no type defines (the pool's own label) excludes nothing.
        on_demand_small.add_str(
            "team",
            Requirement::new("team", "In", &["x".to_string()]).unwrap(),
        );
        let launchable = launchable(&types, &on_demand_small);
        assert_eq!(launchable.len(), 1);
        assert_eq!(launchable[0].name, "c.x");
        assert_eq!(launchable[0].offerings.len(), 1);
        assert_eq!(launchable[0].offerings[0].capacity_type, "on-demand");
        // 8 cpu: two on-demand c.x (0.40), not a quarter of a spot c.8x (0.075).
        let demand = [8000.0, 0.0, 2.0];
        assert!((fractional_lower_bound(&launchable, demand) - 0.4).abs() < 1e-9);
        assert!(fractional_lower_bound(&types, demand) < 0.1);
        assert_eq!(launchable_all(&types).len(), 2);
    }

    fn launchable_all(types: &[Arc<InstanceType>]) -> Vec<Arc<InstanceType>> {
        launchable(types, &Requirements::new())
    }

    #[test]
    fn the_ratio_needs_a_bound() {
        assert_eq!(cost_ratio(0.3, 0.1).map(|r| (r * 10.0).round()), Some(30.0));
        assert_eq!(cost_ratio(0.3, 0.0), None);
        assert_eq!(cost_ratio(f64::INFINITY, 0.1), None);
    }
}
