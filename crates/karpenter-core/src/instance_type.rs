//! Instance types and their offerings, as a cloud provider describes them to the scheduler.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::resources::{self, Quantity, ResourceList};

/// One kind of machine a cloud can launch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceType {
    /// e.g. `m5.large`.
    pub name: String,
    /// The single-valued labels a node of this type carries (`node.kubernetes.io/instance-type`,
    /// `kubernetes.io/arch`, `kubernetes.io/os`, `karpenter.k8s.aws/*`, ...). A well-known label
    /// missing here means the node will not have it (upstream's `DoesNotExist`). Zone and capacity
    /// type are not here: they vary per [`Offering`].
    pub labels: BTreeMap<String, String>,
    /// What the machine has (`cpu`, `memory`, `pods`, `ephemeral-storage`, extended resources).
    pub capacity: ResourceList,
    /// What the node keeps for itself.
    pub overhead: Overhead,
    /// Where and how it can be bought. Types with no available offering are still listed.
    pub offerings: Vec<Offering>,
    /// Which NodeOverlay changes this copy of the type carries (none as a provider describes it).
    #[serde(default, skip_serializing_if = "OverlayApplied::is_none")]
    pub overlay_applied: OverlayApplied,
}

/// Which kinds of NodeOverlay change were applied to an instance type (upstream's
/// `IsPricingOverlayApplied` / `IsCapacityOverlayApplied`): a NodeClaim whose options include such
/// a type is annotated, and a price-overlaid one is launched by the overlaid price.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverlayApplied {
    /// An overlay changed the price of at least one offering.
    pub price: bool,
    /// An overlay added or replaced capacity.
    pub capacity: bool,
}

impl OverlayApplied {
    /// No overlay changed anything.
    pub fn is_none(&self) -> bool {
        !self.price && !self.capacity
    }

    /// Either's changes: what a NodeClaim offering both types carries.
    pub fn union(self, other: OverlayApplied) -> OverlayApplied {
        OverlayApplied {
            price: self.price || other.price,
            capacity: self.capacity || other.capacity,
        }
    }
}

/// Resources a node reserves for the system (subtracted from capacity to get allocatable).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overhead {
    pub kube_reserved: ResourceList,
    pub system_reserved: ResourceList,
    pub eviction_threshold: ResourceList,
}

impl Overhead {
    /// kube-reserved + system-reserved + eviction threshold.
    pub fn total(&self) -> ResourceList {
        let mut total = self.kube_reserved.clone();
        total.add(&self.system_reserved);
        total.add(&self.eviction_threshold);
        total
    }
}

/// A (zone, capacity type) in which an instance type can be bought, and at what price.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Offering {
    /// `topology.kubernetes.io/zone` value.
    pub zone: String,
    /// `karpenter.sh/capacity-type` value: `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// USD per hour.
    pub price: f64,
    /// False when the cloud currently has no capacity (or no price) for it.
    pub available: bool,
    /// Capacity reservation backing a `reserved` offering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<String>,
    /// Instances still launchable in that reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_capacity: Option<u32>,
}

impl InstanceType {
    /// Capacity minus overhead, with memory further reduced by any `hugepages-*` capacity,
    /// each entry floored at zero.
    pub fn allocatable(&self) -> ResourceList {
        let mut allocatable = self.capacity.clone();
        allocatable.sub_floor_zero(&self.overhead.total());
        let hugepages = self
            .capacity
            .iter()
            .filter(|(name, _)| name.starts_with("hugepages-"))
            .fold(Quantity::ZERO, |acc, (_, q)| acc + q);
        if !hugepages.is_zero() {
            let memory = allocatable.get(resources::MEMORY).sub_floor_zero(hugepages);
            allocatable.set(resources::MEMORY, memory);
        }
        allocatable
    }

    /// Offerings that can be bought now.
    pub fn available_offerings(&self) -> impl Iterator<Item = &Offering> {
        self.offerings.iter().filter(|o| o.available)
    }

    /// The cheapest available offering, if any.
    pub fn cheapest_available(&self) -> Option<&Offering> {
        self.available_offerings()
            .min_by(|a, b| a.price.total_cmp(&b.price))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocatable_subtracts_overhead_and_hugepages() {
        let it = InstanceType {
            name: "test.large".into(),
            capacity: ResourceList::parse([
                ("cpu", "2"),
                ("memory", "8Gi"),
                ("hugepages-2Mi", "1Gi"),
            ])
            .unwrap(),
            overhead: Overhead {
                kube_reserved: ResourceList::parse([("cpu", "70m"), ("memory", "574Mi")]).unwrap(),
                system_reserved: ResourceList::new(),
                eviction_threshold: ResourceList::parse([("memory", "100Mi")]).unwrap(),
            },
            ..Default::default()
        };
        let a = it.allocatable();
        assert_eq!(a.get("cpu"), Quantity::parse("1930m").unwrap());
        assert_eq!(
            a.get("memory"),
            Quantity::parse("7518Mi").unwrap() - Quantity::parse("1Gi").unwrap()
        );
    }
}
