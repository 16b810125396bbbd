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
    /// USD per hour; CreateFleet's `Priority`.
    pub price: f64,
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
    /// Cheapest first, then instance type name, then zone: moto takes the first, EC2 uses the
    /// allocation strategy with the prices as priorities.
    pub overrides: Vec<FleetOverride>,
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
                            reservation_id: o.reservation_id.clone(),
                            reservation_capacity: o.reservation_capacity.unwrap_or(0),
                        })
                    })
            })
            .collect();
        overrides.sort_by(|a, b| {
            a.price
                .total_cmp(&b.price)
                .then_with(|| a.instance_type.cmp(&b.instance_type))
                .then_with(|| a.zone.cmp(&b.zone))
        });
        // Keep the cheapest MAX_INSTANCE_TYPES types (all their zones).
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
            });
        }
        return Ok(FleetPlan {
            capacity_type: capacity_type.to_string(),
            reservation_type: None,
            overrides,
        });
    }
    Err(PlanError::NoOffering)
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
mod tests {
    use karpenter_api::v1::NodeSelectorRequirementWithMinValues;
    use karpenter_core::clock::FakeClock;
    use karpenter_core::instance_type::Overhead;
    use karpenter_core::resources::Quantity;

    use super::*;

    fn offering(zone: &str, capacity_type: &str, price: f64) -> Offering {
        Offering {
            zone: zone.into(),
            capacity_type: capacity_type.into(),
            price,
            available: true,
            ..Offering::default()
        }
    }

    fn instance_type(
        name: &str,
        arch: &str,
        cpu: i64,
        pods: i64,
        prices: (f64, f64),
    ) -> Arc<InstanceType> {
        let mut capacity = ResourceList::new();
        capacity.set(resources::CPU, Quantity::from_units(cpu));
        capacity.set(resources::MEMORY, Quantity::from_gibibytes(cpu * 4));
        capacity.set(resources::PODS, Quantity::from_units(pods));
        Arc::new(InstanceType {
            name: name.into(),
            labels: BTreeMap::from([
                (wk::INSTANCE_TYPE_LABEL.to_string(), name.to_string()),
                (wk::ARCH_LABEL.to_string(), arch.to_string()),
                (wk::OS_LABEL.to_string(), "linux".to_string()),
            ]),
            capacity,
            overhead: Overhead::default(),
            offerings: ["us-west-2a", "us-west-2b", "us-west-2c"]
                .iter()
                .flat_map(|z| {
                    [
                        offering(z, "spot", prices.0),
                        offering(z, "on-demand", prices.1),
                    ]
                })
                .collect(),
        })
    }

    fn ami(id: &str, arch: &str) -> AmiStatus {
        AmiStatus {
            id: id.into(),
            name: None,
            deprecated: None,
            requirements: vec![NodeSelectorRequirementWithMinValues {
                key: wk::ARCH_LABEL.into(),
                operator: "In".into(),
                values: vec![arch.into()],
                min_values: None,
            }],
        }
    }

    fn subnet(id: &str, zone: &str) -> SubnetStatus {
        SubnetStatus {
            id: id.into(),
            zone: zone.into(),
            zone_id: None,
        }
    }

    fn requirements(pairs: &[(&str, &[&str])]) -> Requirements {
        let list: Vec<NodeSelectorRequirementWithMinValues> = pairs
            .iter()
            .map(|(k, v)| NodeSelectorRequirementWithMinValues {
                key: (*k).into(),
                operator: "In".into(),
                values: v.iter().map(|s| (*s).to_string()).collect(),
                min_values: None,
            })
            .collect();
        Requirements::from_node_selector_with_min_values(&list).unwrap()
    }

    struct Fixture {
        types: Vec<Arc<InstanceType>>,
        subnets: Vec<SubnetStatus>,
        amis: Vec<AmiStatus>,
        unavailable: UnavailableOfferings,
        reservations: Vec<CapacityReservationStatus>,
    }

    fn fixture() -> Fixture {
        Fixture {
            types: vec![
                instance_type("m5.large", "amd64", 2, 29, (0.04, 0.096)),
                instance_type("m6g.large", "arm64", 2, 29, (0.03, 0.077)),
                instance_type("m5.xlarge", "amd64", 4, 58, (0.08, 0.192)),
            ],
            // Two subnets in 2a (the first has more free IPs), one in 2b, none in 2c.
            subnets: vec![
                subnet("subnet-a1", "us-west-2a"),
                subnet("subnet-b", "us-west-2b"),
                subnet("subnet-a2", "us-west-2a"),
            ],
            amis: vec![ami("ami-x86", "amd64"), ami("ami-arm", "arm64")],
            unavailable: UnavailableOfferings::new(Arc::new(FakeClock::default())),
            reservations: Vec::new(),
        }
    }

    fn plan_for(
        f: &Fixture,
        requirements: &Requirements,
        max_pods: Option<i32>,
    ) -> Result<FleetPlan, PlanError> {
        plan(&PlanInput {
            instance_types: &f.types,
            requirements,
            requests: &ResourceList::new(),
            subnets: &f.subnets,
            amis: &f.amis,
            max_pods,
            unavailable: &f.unavailable,
            reservations: &f.reservations,
        })
    }

    #[test]
    fn spot_first_cheapest_first_one_subnet_per_zone_with_its_ami() {
        let f = fixture();
        let plan = plan_for(&f, &Requirements::new(), None).unwrap();
        assert_eq!(plan.capacity_type, "spot");
        let summary: Vec<(&str, &str, &str, &str)> = plan
            .overrides
            .iter()
            .map(|o| {
                (
                    o.instance_type.as_str(),
                    o.zone.as_str(),
                    o.subnet_id.as_str(),
                    o.image_id.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("m6g.large", "us-west-2a", "subnet-a1", "ami-arm"),
                ("m6g.large", "us-west-2b", "subnet-b", "ami-arm"),
                ("m5.large", "us-west-2a", "subnet-a1", "ami-x86"),
                ("m5.large", "us-west-2b", "subnet-b", "ami-x86"),
                ("m5.xlarge", "us-west-2a", "subnet-a1", "ami-x86"),
                ("m5.xlarge", "us-west-2b", "subnet-b", "ami-x86"),
            ]
        );
        assert_eq!(plan.overrides[4].max_pods, 58);
        assert_eq!(plan.overrides[4].group(), ("ami-x86".to_string(), 58, None));
        assert_eq!(
            plan_for(&f, &Requirements::new(), Some(110))
                .unwrap()
                .overrides[4]
                .max_pods,
            110
        );
    }

    #[test]
    fn requirements_choose_capacity_type_zone_and_types() {
        let f = fixture();
        let on_demand = requirements(&[(wk::CAPACITY_TYPE_LABEL, &["on-demand"])]);
        assert_eq!(
            plan_for(&f, &on_demand, None).unwrap().capacity_type,
            "on-demand"
        );
        let narrow = requirements(&[
            (wk::INSTANCE_TYPE_LABEL, &["m5.large", "m5.xlarge"]),
            (wk::ZONE_LABEL, &["us-west-2b", "us-west-2c"]),
        ]);
        let plan = plan_for(&f, &narrow, None).unwrap();
        assert!(
            plan.overrides
                .iter()
                .all(|o| o.zone == "us-west-2b" && o.instance_type.starts_with("m5."))
        );
        assert_eq!(plan.overrides.len(), 2);
        let nowhere = requirements(&[(wk::ZONE_LABEL, &["us-west-2c"])]);
        assert_eq!(plan_for(&f, &nowhere, None), Err(PlanError::NoOffering));
        let unknown = requirements(&[(wk::INSTANCE_TYPE_LABEL, &["z9.huge"])]);
        assert_eq!(plan_for(&f, &unknown, None), Err(PlanError::NoInstanceType));
    }

    #[test]
    fn unavailable_offerings_are_skipped_and_spot_falls_back_to_on_demand() {
        let f = fixture();
        for it in ["m5.large", "m6g.large", "m5.xlarge"] {
            f.unavailable
                .mark(OfferingKey::new("spot", it, "us-west-2a"));
        }
        let plan = plan_for(&f, &Requirements::new(), None).unwrap();
        assert_eq!(plan.capacity_type, "spot");
        assert!(plan.overrides.iter().all(|o| o.zone == "us-west-2b"));
        for it in ["m5.large", "m6g.large", "m5.xlarge"] {
            f.unavailable
                .mark(OfferingKey::new("spot", it, "us-west-2b"));
        }
        assert_eq!(
            plan_for(&f, &Requirements::new(), None)
                .unwrap()
                .capacity_type,
            "on-demand"
        );
    }

    #[test]
    fn types_without_an_ami_are_not_launched() {
        let mut f = fixture();
        f.amis = vec![ami("ami-arm", "arm64")];
        let plan = plan_for(&f, &Requirements::new(), None).unwrap();
        assert!(
            plan.overrides
                .iter()
                .all(|o| o.instance_type == "m6g.large")
        );
        f.amis.clear();
        assert_eq!(
            plan_for(&f, &Requirements::new(), None),
            Err(PlanError::NoAmi)
        );
    }

    #[test]
    fn capacity_errors_become_unavailable_offerings() {
        let errors = vec![
            FleetError {
                code: "InsufficientInstanceCapacity".into(),
                message: "no m5.large".into(),
                instance_type: Some("m5.large".into()),
                zone: Some("us-west-2a".into()),
            },
            FleetError {
                code: "InvalidParameterValue".into(),
                message: "bad".into(),
                instance_type: Some("m5.xlarge".into()),
                zone: Some("us-west-2a".into()),
            },
        ];
        assert_eq!(
            unavailable_offerings("spot", &errors),
            vec![OfferingKey::new("spot", "m5.large", "us-west-2a")]
        );
        assert_eq!(
            describe_errors(&errors),
            "InsufficientInstanceCapacity: no m5.large; InvalidParameterValue: bad"
        );
    }

    /// Adds a reserved offering of `f.types[it]` in `zone` backed by reservation `id`.
    fn reserve(f: &mut Fixture, it: usize, zone: &str, id: &str, capacity: u32, kind: &str) {
        let t = Arc::make_mut(&mut f.types[it]);
        let on_demand = t
            .offerings
            .iter()
            .find(|o| o.capacity_type == "on-demand")
            .unwrap()
            .price;
        t.offerings.push(Offering {
            zone: zone.into(),
            capacity_type: "reserved".into(),
            price: on_demand / reservations::RESERVED_PRICE_DIVISOR,
            available: capacity > 0,
            reservation_id: Some(id.into()),
            reservation_capacity: Some(capacity),
        });
        f.reservations.push(CapacityReservationStatus {
            id: id.into(),
            availability_zone: zone.into(),
            instance_type: t.name.clone(),
            reservation_type: Some(kind.into()),
            ..CapacityReservationStatus::default()
        });
    }

    fn reserved_summary(plan: &FleetPlan) -> Vec<(&str, &str, Option<&str>)> {
        plan.overrides
            .iter()
            .map(|o| {
                (
                    o.instance_type.as_str(),
                    o.zone.as_str(),
                    o.reservation_id.as_deref(),
                )
            })
            .collect()
    }

    #[test]
    fn reserved_comes_first_with_one_reservation_per_type_and_zone() {
        let mut f = fixture();
        reserve(&mut f, 0, "us-west-2a", "cr-small", 1, "default");
        reserve(&mut f, 0, "us-west-2a", "cr-big", 5, "default");
        reserve(&mut f, 0, "us-west-2b", "cr-b", 1, "default");
        let plan = plan_for(&f, &Requirements::new(), None).unwrap();
        assert_eq!(plan.capacity_type, "reserved");
        assert_eq!(plan.reservation_type.as_deref(), Some("default"));
        assert_eq!(
            reserved_summary(&plan),
            vec![
                ("m5.large", "us-west-2a", Some("cr-big")),
                ("m5.large", "us-west-2b", Some("cr-b")),
            ]
        );
        // One launch template per reservation.
        assert_ne!(plan.overrides[0].group(), plan.overrides[1].group());

        // A NodeClaim that does not allow reserved goes to spot as before.
        let no_reserved = requirements(&[(wk::CAPACITY_TYPE_LABEL, &["spot", "on-demand"])]);
        let plan = plan_for(&f, &no_reserved, None).unwrap();
        assert_eq!(plan.capacity_type, "spot");
        assert!(plan.overrides.iter().all(|o| o.reservation_id.is_none()));

        // A reservation-id requirement picks its reservation.
        let pinned = requirements(&[(wk::AWS_CAPACITY_RESERVATION_ID_LABEL, &["cr-small"])]);
        assert_eq!(
            reserved_summary(&plan_for(&f, &pinned, None).unwrap()),
            vec![("m5.large", "us-west-2a", Some("cr-small"))]
        );

        // Every reservation used up: spot, then on-demand, as before.
        for t in &mut f.types {
            for o in &mut Arc::make_mut(t).offerings {
                if o.capacity_type == "reserved" {
                    o.available = false;
                }
            }
        }
        assert_eq!(
            plan_for(&f, &Requirements::new(), None)
                .unwrap()
                .capacity_type,
            "spot"
        );
        let reserved_or_on_demand =
            requirements(&[(wk::CAPACITY_TYPE_LABEL, &["reserved", "on-demand"])]);
        assert_eq!(
            plan_for(&f, &reserved_or_on_demand, None)
                .unwrap()
                .capacity_type,
            "on-demand"
        );
    }

    #[test]
    fn one_reservation_type_per_launch_and_a_single_capacity_block() {
        let mut f = fixture();
        // m6g.large is the cheapest type: its capacity blocks win over m5.large's reservation.
        reserve(&mut f, 1, "us-west-2a", "cr-block-a", 1, "capacity-block");
        reserve(&mut f, 1, "us-west-2b", "cr-block-b", 1, "capacity-block");
        reserve(&mut f, 0, "us-west-2a", "cr-default", 3, "default");
        let plan = plan_for(&f, &Requirements::new(), None).unwrap();
        assert_eq!(plan.reservation_type.as_deref(), Some("capacity-block"));
        assert_eq!(
            reserved_summary(&plan),
            vec![("m6g.large", "us-west-2a", Some("cr-block-a"))]
        );
        // Asking for default reservations only.
        let defaults = requirements(&[(wk::AWS_CAPACITY_RESERVATION_TYPE_LABEL, &["default"])]);
        let plan = plan_for(&f, &defaults, None).unwrap();
        assert_eq!(plan.reservation_type.as_deref(), Some("default"));
        assert_eq!(
            reserved_summary(&plan),
            vec![("m5.large", "us-west-2a", Some("cr-default"))]
        );
    }

    #[test]
    fn capacity_errors_of_a_reserved_launch_name_the_full_reservation() {
        let mut f = fixture();
        reserve(&mut f, 0, "us-west-2a", "cr-a", 1, "default");
        reserve(&mut f, 0, "us-west-2b", "cr-b", 1, "default");
        let plan = plan_for(&f, &Requirements::new(), None).unwrap();
        let errors = vec![
            FleetError {
                code: "ReservationCapacityExceeded".into(),
                message: "full".into(),
                instance_type: Some("m5.large".into()),
                zone: Some("us-west-2b".into()),
            },
            FleetError {
                code: "InvalidParameterValue".into(),
                message: "bad".into(),
                instance_type: Some("m5.large".into()),
                zone: Some("us-west-2a".into()),
            },
        ];
        assert_eq!(full_reservations(&plan, &errors), vec!["cr-b".to_string()]);
    }
}
