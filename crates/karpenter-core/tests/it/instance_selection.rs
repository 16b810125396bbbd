//! §7.3 instance selection: the cheapest compatible type comes first, every option matches.

use karpenter_core::instance_type::InstanceType;

use crate::fixtures::*;

fn cheapest_compatible(types: &[InstanceType], ok: impl Fn(&InstanceType) -> bool) -> f64 {
    types
        .iter()
        .filter(|t| ok(t))
        .flat_map(|t| t.offerings.iter().map(|o| o.price))
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn schedule_on_one_of_the_cheapest_instances() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().requests(&[("cpu", "1")])]),
    );
    let c = &r.new_node_claims[0];
    let min = cheapest_compatible(&default_instance_types(), |t| {
        t.capacity.get("cpu") >= q("1")
    });
    assert_eq!(c.instance_types[0].price, min);
    assert!(
        c.instance_types
            .windows(2)
            .all(|w| w[0].price <= w[1].price),
        "sorted by price"
    );
}

#[test]
fn schedule_on_cheapest_instance_for_pod_arch_and_os() {
    for (key, value) in [(ARCH, "arm64"), (OS, "windows")] {
        let r = solve(
            vec![pool("default")],
            &pods(vec![pod().node_selector(&[(key, value)])]),
        );
        let types = default_instance_types();
        let min = cheapest_compatible(&types, |t| {
            t.labels.get(key).map(String::as_str) == Some(value)
        });
        let c = &r.new_node_claims[0];
        assert_eq!(c.instance_types[0].price, min, "{key}={value}");
        for o in c.instance_types.iter() {
            let t = types.iter().find(|t| *t.name == *o.name).unwrap();
            assert_eq!(
                t.labels.get(key).map(String::as_str),
                Some(value),
                "every option matches {key}"
            );
        }
    }
}

#[test]
fn schedule_on_cheapest_instance_for_nodepool_zone_and_capacity_type() {
    let mut p = pool("default");
    p.requirements = vec![
        req(CT, "In", &["on-demand"]),
        req(ZONE, "In", &["test-zone-3"]),
    ];
    let r = solve(vec![p], &pods(vec![pod()]));
    let c = &r.new_node_claims[0];
    assert!(claim_allows(&r, 0, ZONE, "test-zone-3") && !claim_allows(&r, 0, ZONE, "test-zone-1"));
    let ct = c.requirements.iter().find(|r| r.key == CT).unwrap();
    assert_eq!(ct.values, vec!["on-demand".to_string()]);
}

#[test]
fn not_schedule_if_no_instance_type_matches_selector() {
    let mut p = pool("default");
    p.requirements = vec![req(ARCH, "In", &["arm64"])];
    let r = solve(
        vec![p],
        &pods(vec![pod().node_selector(&[(OS, "windows")])]),
    );
    assert!(!scheduled(&r, 0));
    assert!(
        explanation(&r, 0)
            .contains("requirement kubernetes.io/os In [windows] matches no instance type"),
        "{}",
        explanation(&r, 0)
    );
}

#[test]
fn schedule_on_an_instance_with_enough_resources() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().requests(&[("cpu", "3"), ("memory", "3Gi")])]),
    );
    let types = default_instance_types();
    for o in r.new_node_claims[0].instance_types.iter() {
        let t = types.iter().find(|t| *t.name == *o.name).unwrap();
        assert!(t.allocatable().get("cpu") >= q("3") && t.allocatable().get("memory") >= q("3Gi"));
    }
}

#[test]
fn min_values_respected_from_instance_type_requirements() {
    let mut p = pool("default");
    let mut r0 = req(IT, "Exists", &[]);
    r0.min_values = Some(3);
    p.requirements = vec![r0];
    let r = solve(vec![p], &pods(vec![pod()]));
    let c = &r.new_node_claims[0];
    assert!(c.instance_types.len() >= 3);
    let full = c.node_claim_requirements();
    let it = full.iter().find(|r| r.key == IT).unwrap();
    assert_eq!(it.min_values, Some(3));
    assert_eq!(it.values.len(), c.instance_types.len());
}

#[test]
fn min_values_fail_after_truncation() {
    let mut p = pool("default");
    let mut r0 = req(IT, "Exists", &[]);
    r0.min_values = Some(2);
    p.requirements = vec![r0];
    let input = karpenter_core::scheduling::SchedulerInput {
        node_pools: vec![p],
        options: karpenter_core::scheduling::SchedulerOptions {
            max_instance_types: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let r = solve_input(input, &pods(vec![pod()]));
    assert!(!scheduled(&r, 0));
    assert!(
        explanation(&r, 0).contains("couldn't meet minValues"),
        "{}",
        explanation(&r, 0)
    );
}

#[test]
fn truncates_options_to_max_instance_types() {
    let input = karpenter_core::scheduling::SchedulerInput {
        node_pools: vec![pool("default")],
        options: karpenter_core::scheduling::SchedulerOptions {
            max_instance_types: 2,
            ..Default::default()
        },
        ..Default::default()
    };
    let r = solve_input(input, &pods(vec![pod()]));
    assert_eq!(r.new_node_claims[0].instance_types.len(), 2);
}

/// Every option of the single claim satisfies `ok`, and the first is the cheapest such type.
fn assert_cheapest_matching(
    r: &karpenter_core::scheduling::SchedulingResults,
    what: &str,
    ok: impl Fn(&InstanceType) -> bool,
) {
    let types = default_instance_types();
    let c = &r.new_node_claims[0];
    assert_eq!(
        c.instance_types[0].price,
        cheapest_compatible(&types, &ok),
        "{what}"
    );
    for o in c.instance_types.iter() {
        let t = types.iter().find(|t| *t.name == *o.name).unwrap();
        assert!(ok(t), "{what}: {} does not match", t.name);
    }
}

#[test]
fn schedule_on_cheapest_instance_for_nodepool_arch_and_os_and_pod_os_linux() {
    for (key, value, on_pool) in [
        (ARCH, "amd64", false),
        (ARCH, "amd64", true),
        (ARCH, "arm64", true),
        (OS, "windows", true),
        (OS, "linux", false),
    ] {
        let mut p = pool("default");
        let mut builder = pod();
        if on_pool {
            p.requirements = vec![req(key, "In", &[value])];
        } else {
            builder = builder.node_selector(&[(key, value)]);
        }
        let r = solve(vec![p], &pods(vec![builder]));
        assert_cheapest_matching(&r, &format!("{key}={value} pool={on_pool}"), |t| {
            t.labels.get(key).map(String::as_str) == Some(value)
        });
    }
}

/// (pool requirements, pod node selector, expected zone, expected capacity type).
type SelectionCase<'a> = (
    &'a [(&'a str, &'a str)],
    &'a [(&'a str, &'a str)],
    Option<&'a str>,
    Option<&'a str>,
);

#[test]
fn schedule_on_cheapest_instance_for_pod_zone_and_capacity_type_combinations() {
    let cases: &[SelectionCase] = &[
        (&[], &[(ZONE, "test-zone-2")], Some("test-zone-2"), None),
        (&[(ZONE, "test-zone-2")], &[], Some("test-zone-2"), None),
        (&[(CT, "spot")], &[], None, Some("spot")),
        (&[], &[(CT, "spot")], None, Some("spot")),
        (
            &[(CT, "on-demand"), (ZONE, "test-zone-1")],
            &[],
            Some("test-zone-1"),
            Some("on-demand"),
        ),
        (
            &[],
            &[(CT, "spot"), (ZONE, "test-zone-1")],
            Some("test-zone-1"),
            Some("spot"),
        ),
        (
            &[
                (CT, "on-demand"),
                (ZONE, "test-zone-1"),
                (ARCH, "arm64"),
                (OS, "linux"),
            ],
            &[],
            Some("test-zone-1"),
            Some("on-demand"),
        ),
        (
            &[(CT, "spot"), (ZONE, "test-zone-2")],
            &[(ARCH, "amd64"), (OS, "linux")],
            Some("test-zone-2"),
            Some("spot"),
        ),
    ];
    for (pool_reqs, selector, zone, ct) in cases {
        let mut p = pool("default");
        p.requirements = pool_reqs.iter().map(|(k, v)| req(k, "In", &[v])).collect();
        let r = solve(vec![p], &pods(vec![pod().node_selector(selector)]));
        let what = format!("pool {pool_reqs:?} pod {selector:?}");
        assert!(scheduled(&r, 0), "{what}: {}", explanation(&r, 0));
        if let Some(zone) = zone {
            assert_eq!(claim_value(&r, 0, ZONE).as_deref(), Some(*zone), "{what}");
        }
        if let Some(ct) = ct {
            assert_eq!(claim_value(&r, 0, CT).as_deref(), Some(*ct), "{what}");
        }
        let all: Vec<(&str, &str)> = pool_reqs.iter().chain(selector.iter()).copied().collect();
        assert_cheapest_matching(&r, &what, |t| {
            all.iter()
                .filter(|(k, _)| *k == ARCH || *k == OS)
                .all(|(k, v)| t.labels.get(*k).map(String::as_str) == Some(*v))
        });
    }
}

#[test]
fn not_schedule_if_no_offering_matches_zone_and_capacity_type() {
    // Spot is offered in zones 1 and 2 only.
    let r = solve(
        vec![pool("default")],
        &pods(vec![
            pod().node_selector(&[(CT, "spot"), (ZONE, "test-zone-3")]),
        ]),
    );
    assert!(!scheduled(&r, 0));
}

#[test]
fn schedule_on_cheaper_on_demand_even_when_spot_ordering_differs() {
    let mut p = pool("default");
    p.requirements = vec![req(CT, "In", &["on-demand"])];
    let mut a = instance_type(
        "a-cheap-spot",
        "amd64",
        "linux",
        &[("cpu", "2"), ("memory", "2Gi"), ("pods", "10")],
    );
    let mut b = instance_type(
        "b-cheap-on-demand",
        "amd64",
        "linux",
        &[("cpu", "2"), ("memory", "2Gi"), ("pods", "10")],
    );
    for o in &mut a.offerings {
        o.price = if o.capacity_type == "spot" { 0.01 } else { 1.0 };
    }
    for o in &mut b.offerings {
        o.price = if o.capacity_type == "spot" { 0.5 } else { 0.2 };
    }
    p.instance_types = vec![std::sync::Arc::new(a), std::sync::Arc::new(b)];
    let r = solve(vec![p], &pods(vec![pod()]));
    let c = &r.new_node_claims[0];
    assert_eq!(&*c.instance_types[0].name, "b-cheap-on-demand");
    assert_eq!(c.instance_types[0].price, 0.2);
}

/// Default types labelled `integer` = their cpu count (4, 2, 4, 16, 4, 4).
fn integer_pool(
    requirements: Vec<karpenter_api::v1::NodeSelectorRequirementWithMinValues>,
) -> karpenter_core::scheduling::SchedulingNodePool {
    let mut p = pool("default");
    for t in p.instance_types.iter_mut().map(std::sync::Arc::make_mut) {
        let cpu = t.capacity.get("cpu").as_f64_units() as i64;
        t.labels.insert("integer".into(), cpu.to_string());
    }
    p.requirements = requirements;
    p
}

fn with_min(
    mut r: karpenter_api::v1::NodeSelectorRequirementWithMinValues,
    min: i32,
) -> karpenter_api::v1::NodeSelectorRequirementWithMinValues {
    r.min_values = Some(min);
    r
}

fn distinct(r: &karpenter_core::scheduling::SchedulingResults, key: &str) -> usize {
    let types = integer_pool(vec![]).instance_types;
    let mut values: Vec<&String> = r.new_node_claims[0]
        .instance_types
        .iter()
        .filter_map(|o| types.iter().find(|t| *t.name == *o.name)?.labels.get(key))
        .collect();
    values.sort();
    values.dedup();
    values.len()
}

#[test]
fn min_values_with_gt_and_lt_operators() {
    // integer > 2 leaves values {4, 16}: minValues 2 is met, 3 is not.
    let r = solve(
        vec![integer_pool(vec![with_min(
            req("integer", "Gt", &["2"]),
            2,
        )])],
        &pods(vec![pod()]),
    );
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
    assert!(distinct(&r, "integer") >= 2);
    let r = solve(
        vec![integer_pool(vec![with_min(
            req("integer", "Gt", &["2"]),
            3,
        )])],
        &pods(vec![pod()]),
    );
    assert!(!scheduled(&r, 0));
    assert!(
        explanation(&r, 0).contains("minValues"),
        "{}",
        explanation(&r, 0)
    );
    // integer < 16 leaves {2, 4}.
    let r = solve(
        vec![integer_pool(vec![with_min(
            req("integer", "Lt", &["16"]),
            2,
        )])],
        &pods(vec![pod()]),
    );
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
    assert!(distinct(&r, "integer") >= 2);
}

#[test]
fn min_values_takes_the_max_over_operators_on_the_same_key() {
    // In (minValues 1) and NotIn (minValues 3) on the instance type: 3 distinct types needed.
    let reqs = vec![
        with_min(
            req(
                IT,
                "In",
                &[
                    "default-instance-type",
                    "small-instance-type",
                    "arm-instance-type",
                    "windows-instance-type",
                ],
            ),
            1,
        ),
        with_min(req(IT, "NotIn", &["gpu-vendor-instance-type"]), 3),
    ];
    let r = solve(vec![integer_pool(reqs)], &pods(vec![pod()]));
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
    let full = r.new_node_claims[0].node_claim_requirements();
    assert_eq!(
        full.iter().find(|q| q.key == IT).unwrap().min_values,
        Some(3)
    );
    assert!(r.new_node_claims[0].instance_types.len() >= 3);
    // Gt (minValues 1) and Lt (minValues 3) on an integer key: only {2, 4} remain → unmet.
    let reqs = vec![
        with_min(req("integer", "Gt", &["1"]), 1),
        with_min(req("integer", "Lt", &["16"]), 3),
    ];
    let r = solve(vec![integer_pool(reqs)], &pods(vec![pod()]));
    assert!(!scheduled(&r, 0), "max(1, 3) = 3 > 2 values");
}

#[test]
fn min_values_with_multiple_keys() {
    let reqs = vec![
        with_min(req(IT, "Exists", &[]), 3),
        with_min(req("integer", "Exists", &[]), 2),
    ];
    let r = solve(vec![integer_pool(reqs)], &pods(vec![pod()]));
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
    assert!(r.new_node_claims[0].instance_types.len() >= 3);
    assert!(distinct(&r, "integer") >= 2);
    // One key unmet fails the whole claim.
    let reqs = vec![
        with_min(req(IT, "Exists", &[]), 3),
        with_min(req("integer", "Exists", &[]), 4),
    ];
    let r = solve(vec![integer_pool(reqs)], &pods(vec![pod()]));
    assert!(!scheduled(&r, 0));
}
