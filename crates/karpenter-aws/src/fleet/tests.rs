//! Unit tests of the launch planning.

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
        ..Default::default()
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
            values: vec![arch.to_string()].into(),
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
        launch_order: None,
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

#[test]
fn an_overlaid_launch_order_sets_the_priorities_and_asks_ec2_to_follow_them() {
    let f = fixture();
    // The overlay made m5.xlarge the cheapest, then m5.large; m6g.large stays dearest.
    let order = ["m5.xlarge", "m5.large", "m6g.large"].map(String::from);
    let plan = plan(&PlanInput {
        instance_types: &f.types,
        requirements: &Requirements::new(),
        requests: &ResourceList::new(),
        subnets: &f.subnets,
        amis: &f.amis,
        max_pods: None,
        unavailable: &f.unavailable,
        reservations: &f.reservations,
        launch_order: Some(&order),
    })
    .unwrap();
    assert!(plan.prioritized);
    let summary: Vec<(&str, &str, f64, f64)> = plan
        .overrides
        .iter()
        .map(|o| {
            (
                o.instance_type.as_str(),
                o.zone.as_str(),
                o.priority,
                o.price,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("m5.xlarge", "us-west-2a", 0.0, 0.08),
            ("m5.xlarge", "us-west-2b", 0.0, 0.08),
            ("m5.large", "us-west-2a", 1.0, 0.04),
            ("m5.large", "us-west-2b", 1.0, 0.04),
            ("m6g.large", "us-west-2a", 2.0, 0.03),
            ("m6g.large", "us-west-2b", 2.0, 0.03),
        ]
    );
    // Without the order the provider's prices are the priorities, EC2 picks by its prices.
    let by_price = plan_for(&f, &Requirements::new(), None).unwrap();
    assert!(!by_price.prioritized);
    assert!(by_price.overrides.iter().all(|o| o.priority == o.price));
}
