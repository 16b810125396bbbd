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
