//! Pure planning of a CreateFleet launch (reference §4.2–4.6): which capacity type, which
//! (instance type × zone) overrides in which order, which subnet per zone, which AMI and launch
//! template group per instance type, and which offerings a fleet's errors make unavailable.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use karpenter_api::v1::{AmiStatus, CapacityReservationStatus, SubnetStatus};
use karpenter_api::well_known as wk;
use karpenter_core::instance_type::{InstanceType, Offering};
use karpenter_core::requirements::{Requirement, Requirements};
use karpenter_core::resources::{self, ResourceList};

use crate::reservations::{self, RESERVATION_TYPE_CAPACITY_BLOCK, RESERVATION_TYPE_DEFAULT};
use crate::unavailable::{OfferingKey, UnavailableOfferings};

/// Upstream truncates the instance types of one launch to the 60 cheapest.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// Fleet error codes that mean "no capacity for this offering now" (upstream's unfulfillable
/// capacity set): the offering is marked unavailable and the launch goes elsewhere.
pub const INSUFFICIENT_CAPACITY_CODES: [&str; 8] = [
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "MaxFleetCountExceeded",
    "ReservationCapacityExceeded",
];

/// Whether an instance type's label value satisfies a requirement on `key`. A well-known label
/// missing on the type means "does not exist"; other keys are the node's own labels.
fn label_allows(key: &str, requirement: &Requirement, value: Option<&String>) -> bool {
    match value {
        Some(v) => requirement.has(v),
        None => !wk::is_well_known_label(key) || requirement.operator().tolerates_absence(),
    }
}

/// Labels an offering decides, not the instance type: zone (and zone ID), capacity type and the
/// capacity reservation's ID, type and interruptibility.
const OFFERING_LABELS: [&str; 6] = [
    wk::ZONE_LABEL,
    wk::AWS_ZONE_ID_LABEL,
    wk::CAPACITY_TYPE_LABEL,
    wk::AWS_CAPACITY_RESERVATION_ID_LABEL,
    wk::AWS_CAPACITY_RESERVATION_TYPE_LABEL,
    wk::AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL,
];

/// Whether `labels` satisfy every requirement except the offering's labels and the node pool
/// (the node's own).
pub fn labels_compatible(labels: &BTreeMap<String, String>, requirements: &Requirements) -> bool {
    requirements.iter().all(|(key, requirement)| {
        OFFERING_LABELS.contains(&key.as_str())
            || key == wk::NODEPOOL_LABEL
            || label_allows(key, requirement, labels.get(key))
    })
}

/// Whether the requirements allow `offering`: its zone, capacity type and, for a reserved one,
/// its reservation's ID, type and interruptibility (an offering without a reservation has none
/// of those labels).
fn offering_allowed(
    offering: &Offering,
    requirements: &Requirements,
    reservations: &[CapacityReservationStatus],
) -> bool {
    let allows = |key: &str, value: Option<&String>| {
        requirements
            .get(&key.to_string())
            .is_none_or(|r| match value {
                Some(v) => r.has(v),
                None => r.operator().tolerates_absence(),
            })
    };
    let reservation = offering
        .reservation_id
        .as_deref()
        .and_then(|id| reservations::reservation(reservations, id));
    let reservation_type = reservation.map(reservation_type_of);
    let interruptible = reservation.map(|r| r.interruptible.unwrap_or(false).to_string());
    allows(wk::ZONE_LABEL, Some(&offering.zone))
        && allows(wk::CAPACITY_TYPE_LABEL, Some(&offering.capacity_type))
        && allows(
            wk::AWS_CAPACITY_RESERVATION_ID_LABEL,
            offering.reservation_id.as_ref(),
        )
        && allows(
            wk::AWS_CAPACITY_RESERVATION_TYPE_LABEL,
            reservation_type.as_ref(),
        )
        && allows(
            wk::AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL,
            interruptible.as_ref(),
        )
}

/// `default` unless the status says otherwise.
pub fn reservation_type_of(reservation: &CapacityReservationStatus) -> String {
    reservation
        .reservation_type
        .clone()
        .unwrap_or_else(|| RESERVATION_TYPE_DEFAULT.to_string())
}

/// The zonal subnet of each zone: the status subnet with the most free IPs (the status is
/// already sorted that way, so the first one seen per zone).
pub fn zonal_subnets(subnets: &[SubnetStatus]) -> BTreeMap<String, SubnetStatus> {
    let mut by_zone = BTreeMap::new();
    for subnet in subnets {
        by_zone
            .entry(subnet.zone.clone())
            .or_insert_with(|| subnet.clone());
    }
    by_zone
}

/// The newest AMI (status order) whose requirements `instance_type` satisfies.
pub fn ami_for<'a>(amis: &'a [AmiStatus], instance_type: &InstanceType) -> Option<&'a AmiStatus> {
    amis.iter().find(|ami| {
        Requirements::from_node_selector_with_min_values(&ami.requirements)
            .is_ok_and(|r| labels_compatible_strict(&instance_type.labels, &r))
    })
}

/// Like [`labels_compatible`] but for AMI requirements, which name only instance-type labels.
fn labels_compatible_strict(
    labels: &BTreeMap<String, String>,
    requirements: &Requirements,
) -> bool {
    requirements
        .iter()
        .all(|(key, requirement)| match labels.get(key) {
            Some(v) => requirement.has(v),
            None => requirement.operator().tolerates_absence(),
        })
}

/// One (instance type × zone) a fleet may launch.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetOverride {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub image_id: String,
    /// Pods the kubelet is told to allow (`spec.kubelet.maxPods` or the type's pod capacity):
    /// part of the launch-template group, as in upstream.
    pub max_pods: i64,
    /// USD per hour, the provider's own price.
    pub price: f64,
    /// CreateFleet's `Priority` (lower launches first): the price, or for a NodeClaim planned
    /// with overlaid prices ([`PlanInput::launch_order`]) its type's rank in that order.
    pub priority: f64,
    /// The capacity reservation a reserved override launches into (its launch template targets it).
    pub reservation_id: Option<String>,
    /// Instances the reservation can still take (a reserved override).
    pub reservation_capacity: u32,
}

/// One launch template per (AMI, max pods, capacity reservation), as upstream groups them.
pub type TemplateGroup = (String, i64, Option<String>);

impl FleetOverride {
    /// The launch template group of this override.
    pub fn group(&self) -> TemplateGroup {
        (
            self.image_id.clone(),
            self.max_pods,
            self.reservation_id.clone(),
        )
    }
}

/// What one CreateFleet call asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetPlan {
    pub capacity_type: String,
    /// For `reserved`: the reservations' type (`default` or `capacity-block`; one per launch, as
    /// CreateFleet takes one market type).
    pub reservation_type: Option<String>,
    /// By priority (cheapest first, or the overlaid order), then instance type name, then zone:
    /// moto takes the first, EC2 uses the allocation strategy with the priorities.
    pub overrides: Vec<FleetOverride>,
    /// The NodeClaim was planned with overlaid prices: CreateFleet's allocation strategies are
    /// `capacity-optimized-prioritized` (spot) and `prioritized` (on-demand), so EC2 follows
    /// the overrides' priorities instead of its own prices (reference §4.5).
    pub prioritized: bool,
}

/// Why nothing can be launched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("no instance type satisfies the NodeClaim's requirements and requests")]
    NoInstanceType,
    #[error("no AMI of the EC2NodeClass serves the NodeClaim's instance types")]
    NoAmi,
    #[error(
        "no available offering of the NodeClaim's instance types in the EC2NodeClass's subnets' zones"
    )]
    NoOffering,
}

/// Inputs of [`plan`].
pub struct PlanInput<'a> {
    pub instance_types: &'a [Arc<InstanceType>],
    pub requirements: &'a Requirements,
    pub requests: &'a ResourceList,
    pub subnets: &'a [SubnetStatus],
    pub amis: &'a [AmiStatus],
    /// `spec.kubelet.maxPods` of the EC2NodeClass.
    pub max_pods: Option<i32>,
    pub unavailable: &'a UnavailableOfferings,
    /// `status.capacityReservations` of the EC2NodeClass (the reserved offerings' details).
    pub reservations: &'a [CapacityReservationStatus],
    /// The NodeClaim's instance types cheapest first at the NodeOverlay prices, when it carries
    /// the price-overlay annotation ([`karpenter_core::node_overlay::launch_order`]): the
    /// launch prefers them in this order, not by this provider's prices.
    pub launch_order: Option<&'a [String]>,
}

/// Capacity types in the order upstream prefers them (reference §4.2): reserved capacity is paid
/// for already, spot is cheaper than on-demand.
const CAPACITY_TYPE_PREFERENCE: [&str; 3] = [
    wk::CAPACITY_TYPE_RESERVED,
    wk::CAPACITY_TYPE_SPOT,
    wk::CAPACITY_TYPE_ON_DEMAND,
];

/// Plans the launch of one NodeClaim.
pub fn plan(input: &PlanInput<'_>) -> Result<FleetPlan, PlanError> {
    let zonal = zonal_subnets(input.subnets);
    let types: Vec<&Arc<InstanceType>> = input
        .instance_types
        .iter()
        .filter(|it| {
            labels_compatible(&it.labels, input.requirements)
                && it.allocatable().fits(input.requests)
        })
        .collect();
    if types.is_empty() {
        return Err(PlanError::NoInstanceType);
    }
    let with_ami: Vec<(&Arc<InstanceType>, &AmiStatus)> = types
        .iter()
        .filter_map(|it| ami_for(input.amis, it).map(|ami| (*it, ami)))
        .collect();
    if with_ami.is_empty() {
        return Err(PlanError::NoAmi);
    }
    let candidates = |capacity_type: &str| -> Vec<FleetOverride> {
        let mut overrides: Vec<FleetOverride> = with_ami
            .iter()
            .flat_map(|(it, ami)| {
                let zonal = &zonal;
                it.offerings
                    .iter()
                    .filter(move |o| {
                        o.available
                            && o.capacity_type == capacity_type
                            && offering_allowed(o, input.requirements, input.reservations)
                            && !input.unavailable.is_unavailable(&OfferingKey::new(
                                &o.capacity_type,
                                &it.name,
                                &o.zone,
                            ))
                    })
                    .filter_map(move |o| {
                        let subnet = zonal.get(&o.zone)?;
                        Some(FleetOverride {
                            instance_type: it.name.clone(),
                            zone: o.zone.clone(),
                            subnet_id: subnet.id.clone(),
                            image_id: ami.id.clone(),
                            max_pods: input.max_pods.map_or_else(
                                || it.capacity.get(resources::PODS).units_ceil(),
                                i64::from,
                            ),
                            price: o.price,
                            priority: match input.launch_order {
                                Some(order) => launch_rank(order, &it.name) as f64,
                                None => o.price,
                            },
                            reservation_id: o.reservation_id.clone(),
                            reservation_capacity: o.reservation_capacity.unwrap_or(0),
                        })
                    })
            })
            .collect();
        overrides.sort_by(|a, b| {
            a.priority
                .total_cmp(&b.priority)
                .then_with(|| a.price.total_cmp(&b.price))
                .then_with(|| a.instance_type.cmp(&b.instance_type))
                .then_with(|| a.zone.cmp(&b.zone))
        });
        // Keep the first MAX_INSTANCE_TYPES types (all their zones).
        let mut kept_types: Vec<String> = Vec::new();
        overrides.retain(|o| {
            if kept_types.contains(&o.instance_type) {
                return true;
            }
            if kept_types.len() < MAX_INSTANCE_TYPES {
                kept_types.push(o.instance_type.clone());
                return true;
            }
            false
        });
        overrides
    };
    let allowed = |capacity_type: &str| {
        input
            .requirements
            .get(&wk::CAPACITY_TYPE_LABEL.to_string())
            .is_none_or(|r| r.has(&capacity_type.to_string()))
    };
    for capacity_type in CAPACITY_TYPE_PREFERENCE {
        if !allowed(capacity_type) {
            continue;
        }
        let overrides = candidates(capacity_type);
        if overrides.is_empty() {
            continue;
        }
        if capacity_type == wk::CAPACITY_TYPE_RESERVED {
            let (reservation_type, overrides) = reserved_overrides(overrides, input.reservations);
            return Ok(FleetPlan {
                capacity_type: capacity_type.to_string(),
                reservation_type: Some(reservation_type),
                overrides,
                prioritized: input.launch_order.is_some(),
            });
        }
        return Ok(FleetPlan {
            capacity_type: capacity_type.to_string(),
            reservation_type: None,
            overrides,
            prioritized: input.launch_order.is_some(),
        });
    }
    Err(PlanError::NoOffering)
}

/// `name`'s position in the overlaid launch order; a type the order does not list (the NodeClaim's
/// requirements allow it otherwise) comes after every listed one.
fn launch_rank(order: &[String], name: &str) -> usize {
    order.iter().position(|n| n == name).unwrap_or(order.len())
}

/// Upstream's launch filters for reserved overrides (sorted cheapest first), in CreateFleet's
/// limits: one reservation per (instance type, zone) — the one with the most room —, one
/// reservation type (the cheapest's; `default` on a tie), and a single capacity block.
fn reserved_overrides(
    overrides: Vec<FleetOverride>,
    reservations: &[CapacityReservationStatus],
) -> (String, Vec<FleetOverride>) {
    let type_of = |o: &FleetOverride| {
        o.reservation_id
            .as_deref()
            .and_then(|id| reservations::reservation(reservations, id))
            .map_or_else(|| RESERVATION_TYPE_DEFAULT.to_string(), reservation_type_of)
    };
    let mut best: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (i, o) in overrides.iter().enumerate() {
        let key = (o.instance_type.clone(), o.zone.clone());
        match best.get(&key) {
            Some(&j) if overrides[j].reservation_capacity >= o.reservation_capacity => {}
            _ => {
                best.insert(key, i);
            }
        }
    }
    let kept: BTreeSet<usize> = best.into_values().collect();
    let overrides: Vec<FleetOverride> = overrides
        .into_iter()
        .enumerate()
        .filter(|(i, _)| kept.contains(i))
        .map(|(_, o)| o)
        .collect();
    // Cheapest first: the first override's type wins; on equal prices `default` goes first.
    let cheapest = overrides.first().map_or(f64::MAX, |o| o.price);
    let chosen = if overrides
        .iter()
        .any(|o| o.price <= cheapest && type_of(o) == RESERVATION_TYPE_DEFAULT)
    {
        RESERVATION_TYPE_DEFAULT.to_string()
    } else {
        overrides
            .first()
            .map_or_else(|| RESERVATION_TYPE_DEFAULT.to_string(), type_of)
    };
    let mut overrides: Vec<FleetOverride> = overrides
        .into_iter()
        .filter(|o| type_of(o) == chosen)
        .collect();
    if chosen == RESERVATION_TYPE_CAPACITY_BLOCK {
        overrides.truncate(1);
    }
    (chosen, overrides)
}

/// The reservations a reserved launch's capacity errors say are full: EC2 names the override
/// (type and zone), the plan knows its reservation.
pub fn full_reservations(plan: &FleetPlan, errors: &[FleetError]) -> Vec<String> {
    let mut ids: Vec<String> = errors
        .iter()
        .filter(|e| INSUFFICIENT_CAPACITY_CODES.contains(&e.code.as_str()))
        .filter_map(|e| {
            plan.overrides
                .iter()
                .find(|o| {
                    Some(&o.instance_type) == e.instance_type.as_ref()
                        && Some(&o.zone) == e.zone.as_ref()
                })
                .and_then(|o| o.reservation_id.clone())
        })
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// One entry of CreateFleet's `Errors`, reduced to what the provider acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetError {
    pub code: String,
    pub message: String,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
}

/// The offerings a fleet's errors make unavailable (capacity errors naming a type and zone).
pub fn unavailable_offerings(capacity_type: &str, errors: &[FleetError]) -> Vec<OfferingKey> {
    let mut keys: Vec<OfferingKey> = errors
        .iter()
        .filter(|e| INSUFFICIENT_CAPACITY_CODES.contains(&e.code.as_str()))
        .filter_map(|e| {
            Some(OfferingKey::new(
                capacity_type,
                e.instance_type.as_deref()?,
                e.zone.as_deref()?,
            ))
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// `code: message; code: message` of a fleet's errors, for the error the caller sees.
pub fn describe_errors(errors: &[FleetError]) -> String {
    if errors.is_empty() {
        return "CreateFleet launched nothing and reported no error".to_string();
    }
    let mut parts: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.code, e.message))
        .collect();
    parts.dedup();
    parts.join("; ")
}

#[cfg(test)]
mod tests;
