//! §7.1 scheduling: constraints and bin-packing.

use karpenter_core::scheduling::{
    MinValuesPolicy, PreferencePolicy, SchedulerInput, SchedulerOptions, VolumeInput,
};

use crate::fixtures::*;

#[test]
fn schedule_unconstrained_pods() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().requests(&[("cpu", "1")])]),
    );
    assert!(scheduled(&r, 0));
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn not_schedule_conflicting_node_selectors() {
    let mut p = pool("default");
    p.requirements = vec![req(ZONE, "In", &["test-zone-1"])];
    let r = solve(
        vec![p],
        &pods(vec![pod().node_selector(&[(ZONE, "test-zone-2")])]),
    );
    assert!(!scheduled(&r, 0));
}

#[test]
fn not_schedule_node_selector_with_undefined_custom_key() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().node_selector(&[("foo", "bar")])]),
    );
    assert!(!scheduled(&r, 0));
    assert!(
        explanation(&r, 0).contains("does not define label \"foo\""),
        "{}",
        explanation(&r, 0)
    );
}

#[test]
fn use_nodepool_constraints_and_node_selectors() {
    let mut p = pool("default");
    p.requirements = vec![req(ZONE, "In", &["test-zone-1", "test-zone-2"])];
    let r = solve(
        vec![p],
        &pods(vec![pod().node_selector(&[(ZONE, "test-zone-2")]), pod()]),
    );
    assert_eq!(
        claim_value(&r, claim_of(&r, 0).unwrap(), ZONE).as_deref(),
        Some("test-zone-2")
    );
    let c1 = claim_of(&r, 1).unwrap();
    assert!(
        !claim_allows(&r, c1, ZONE, "test-zone-3"),
        "pool constraint kept"
    );
}

#[test]
fn not_schedule_nodes_with_a_hostname_selector() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().node_selector(&[(HOSTNAME, "red-node")])]),
    );
    assert!(!scheduled(&r, 0));
    assert!(
        explanation(&r, 0).contains("kubernetes.io/hostname"),
        "{}",
        explanation(&r, 0)
    );
}

#[test]
fn not_schedule_restricted_labels_and_domains_but_allow_kubernetes_domains() {
    let mut p = pool("default");
    p.labels.insert("kubernetes.io/team".into(), "a".into());
    let r = solve(
        vec![p],
        &pods(vec![
            pod().node_selector(&[("karpenter.sh/custom", "x")]),
            pod().node_selector(&[("kubernetes.io/team", "a")]),
        ]),
    );
    assert!(!scheduled(&r, 0));
    assert!(scheduled(&r, 1));
}

#[test]
fn schedule_compatible_requirements_with_every_operator() {
    let mut p = pool("default");
    p.labels.insert("tier".into(), "5".into());
    for (op, values, ok) in [
        ("In", vec!["5"], true),
        ("In", vec!["4"], false),
        ("NotIn", vec!["4"], true),
        ("NotIn", vec!["5"], false),
        ("Gt", vec!["4"], true),
        ("Gt", vec!["5"], false),
        ("Lt", vec!["6"], true),
        ("Gte", vec!["5"], true),
        ("Lte", vec!["4"], false),
        ("Exists", vec![], true),
        ("DoesNotExist", vec![], false),
    ] {
        let r = solve(
            vec![p.clone()],
            &pods(vec![pod().required_term(vec![nsr("tier", op, &values)])]),
        );
        assert_eq!(
            scheduled(&r, 0),
            ok,
            "tier {op} {values:?}: {}",
            explanation(&r, 0)
        );
    }
}

#[test]
fn undefined_key_operators_in_exists_fail_notin_doesnotexist_pass() {
    for (op, values, ok) in [
        ("In", vec!["x"], false),
        ("Exists", vec![], false),
        ("NotIn", vec!["x"], true),
        ("DoesNotExist", vec![], true),
    ] {
        let r = solve(
            vec![pool("default")],
            &pods(vec![pod().required_term(vec![nsr(
                "undefined",
                op,
                &values,
            )])]),
        );
        assert_eq!(scheduled(&r, 0), ok, "undefined {op}");
    }
}

#[test]
fn not_schedule_incompatible_preferences_and_requirements_strictly_but_relax_preferences() {
    let p = pod()
        .required_term(vec![nsr(ZONE, "In", &["test-zone-1"])])
        .preferred_term(10, vec![nsr(ZONE, "In", &["test-zone-2"])]);
    let r = solve(vec![pool("default")], &pods(vec![p]));
    assert!(scheduled(&r, 0), "preference relaxed");
    assert_eq!(claim_value(&r, 0, ZONE).as_deref(), Some("test-zone-1"));
}

#[test]
fn preferential_fallback_relaxes_terms_but_not_the_final_one() {
    // Two required terms: the first impossible, the second possible → relaxed to the second.
    let p = pod()
        .required_term(vec![nsr(ZONE, "In", &["invalid"])])
        .required_term(vec![nsr(ZONE, "In", &["test-zone-2"])]);
    let r = solve(vec![pool("default")], &pods(vec![p]));
    assert_eq!(claim_value(&r, 0, ZONE).as_deref(), Some("test-zone-2"));
    // The final term is never dropped.
    let p = pod().required_term(vec![nsr(ZONE, "In", &["invalid"])]);
    let r = solve(vec![pool("default")], &pods(vec![p]));
    assert!(!scheduled(&r, 0));
}

#[test]
fn relax_to_use_lighter_weight_preferences() {
    let p = pod()
        .preferred_term(100, vec![nsr(ZONE, "In", &["invalid"])])
        .preferred_term(50, vec![nsr(ZONE, "In", &["test-zone-3"])]);
    let r = solve(vec![pool("default")], &pods(vec![p]));
    assert_eq!(claim_value(&r, 0, ZONE).as_deref(), Some("test-zone-3"));
}

#[test]
fn ignore_preferences_policy_skips_preferred_affinity() {
    let p = pod().preferred_term(10, vec![nsr(ZONE, "In", &["test-zone-3"])]);
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        options: SchedulerOptions {
            preference_policy: PreferencePolicy::Ignore,
            ..Default::default()
        },
        ..Default::default()
    };
    let r = solve_input(input, &pods(vec![p]));
    assert!(scheduled(&r, 0));
    assert!(
        claim_allows(&r, 0, ZONE, "test-zone-1"),
        "zone not pinned by an ignored preference"
    );
}

#[test]
fn not_schedule_if_requesting_more_resources_than_any_instance_type() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().requests(&[("cpu", "512")])]),
    );
    assert!(!scheduled(&r, 0));
    let e = explanation(&r, 0);
    assert!(
        e.contains("nodepool default: no instance type has 512 cpu"),
        "{e}"
    );
    assert!(e.contains("largest allocatable: cpu=16"), "{e}");
}

#[test]
fn launch_pods_with_different_archs_on_different_instances() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![
            pod().node_selector(&[(ARCH, "amd64")]),
            pod().node_selector(&[(ARCH, "arm64")]),
        ]),
    );
    assert_eq!(r.new_node_claims.len(), 2);
    let arm = claim_of(&r, 1).unwrap();
    assert!(
        r.new_node_claims[arm]
            .instance_types
            .iter()
            .all(|o| &*o.name == "arm-instance-type")
    );
}

#[test]
fn fail_to_schedule_requests_not_on_a_single_instance_type() {
    // vendor-a GPU exists only on a 4-cpu type; asking for it plus 8 cpu fits nowhere.
    let r = solve(
        vec![pool("default")],
        &pods(vec![
            pod().requests(&[("cpu", "8"), ("fake.com/vendor-a", "1")]),
        ]),
    );
    assert!(!scheduled(&r, 0));
}

#[test]
fn schedule_small_pod_on_the_smallest_instance_type() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().requests(&[("cpu", "100m")])]),
    );
    assert_eq!(
        &*r.new_node_claims[0].instance_types[0].name,
        "small-instance-type"
    );
}

#[test]
fn take_pod_runtime_class_overhead_into_account() {
    // 3.5 cpu + 1 overhead exceeds the 4-cpu types; only arm (16) fits.
    let r = solve(
        vec![pool("default")],
        &pods(vec![
            pod().requests(&[("cpu", "3.5")]).overhead(&[("cpu", "1")]),
        ]),
    );
    assert!(
        r.new_node_claims[0]
            .instance_types
            .iter()
            .all(|o| &*o.name == "arm-instance-type")
    );
}

#[test]
fn create_new_nodes_when_a_node_is_at_capacity() {
    let p = vec![
        pod().requests(&[("cpu", "10")]),
        pod().requests(&[("cpu", "10")]),
    ];
    let r = solve(vec![pool("default")], &pods(p));
    assert_eq!(r.new_node_claims.len(), 2);
}

#[test]
fn create_new_nodes_due_to_pod_limits_per_node() {
    let mut p = pool("default");
    p.instance_types
        .retain(|it| it.name == "single-pod-instance-type");
    let r = solve(vec![p], &pods(vec![pod(), pod(), pod()]));
    assert_eq!(r.new_node_claims.len(), 3);
}

#[test]
fn pack_small_and_large_pods_together() {
    let p = vec![
        pod().requests(&[("cpu", "1")]),
        pod().requests(&[("cpu", "100m")]),
        pod().requests(&[("cpu", "12")]),
    ];
    let r = solve(vec![pool("default")], &pods(p));
    assert_eq!(r.new_node_claims.len(), 1, "{:?}", r.unschedulable);
}

#[test]
fn handle_zero_quantity_resource_requests() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![
            pod().requests(&[("foo.com/weird", "0"), ("cpu", "0")]),
        ]),
    );
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
}

#[test]
fn take_init_container_requests_into_account() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![
            pod()
                .requests(&[("cpu", "1")])
                .init_requests(&[("cpu", "6")]),
        ]),
    );
    assert!(
        r.new_node_claims[0]
            .instance_types
            .iter()
            .all(|o| &*o.name == "arm-instance-type")
    );
}

#[test]
fn in_flight_do_not_launch_a_second_node_if_the_in_flight_node_fits() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![
            pod().requests(&[("cpu", "1")]),
            pod().requests(&[("cpu", "1")]),
        ]),
    );
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn assume_pods_schedule_to_uninitialized_node_with_ephemeral_and_startup_taints() {
    let mut node = existing_node(
        "n1",
        &[("karpenter.sh/nodepool", "default")],
        &[("cpu", "4"), ("memory", "4Gi"), ("pods", "10")],
    );
    node.node_pool = Some("default".into());
    node.initialized = false;
    node.taints = vec![
        taint("node.kubernetes.io/not-ready", None, "NoExecute"),
        taint("custom-startup", None, "NoSchedule"),
    ];
    node.startup_taints = vec![taint("custom-startup", None, "NoSchedule")];
    let mut input = SchedulerInput {
        node_pools: vec![pool("default")],
        existing_nodes: vec![node.clone()],
        ..Default::default()
    };
    let r = solve_input(input.clone(), &pods(vec![pod().requests(&[("cpu", "1")])]));
    assert_eq!(r.existing_nodes.len(), 1, "{:?}", r);
    assert!(r.new_node_claims.is_empty());
    // Once initialized, the startup taint counts.
    node.initialized = true;
    node.taints = vec![taint("custom-startup", None, "NoSchedule")];
    input.existing_nodes = vec![node];
    let r = solve_input(input, &pods(vec![pod().requests(&[("cpu", "1")])]));
    assert!(r.existing_nodes.is_empty());
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn track_daemonset_usage_on_new_node_claims() {
    let ds = pod().requests(&[("cpu", "1")]).build();
    let mut input = SchedulerInput {
        node_pools: vec![pool("default")],
        daemonsets: vec![ds],
        ..Default::default()
    };
    // 3.5 cpu pod + 1 cpu daemonset > 4: needs the 16-cpu type.
    let r = solve_input(
        input.clone(),
        &pods(vec![pod().requests(&[("cpu", "3.5")])]),
    );
    assert!(
        r.new_node_claims[0]
            .instance_types
            .iter()
            .all(|o| &*o.name == "arm-instance-type")
    );
    assert_eq!(
        r.new_node_claims[0].requests.get("cpu"),
        q("4.5"),
        "pod + daemonset overhead"
    );
    // Daemonset overhead too large for every type.
    input.daemonsets = vec![pod().requests(&[("cpu", "20")]).build()];
    let r = solve_input(input, &pods(vec![pod().requests(&[("cpu", "1")])]));
    assert!(
        explanation(&r, 0).contains("after daemonset overhead"),
        "{}",
        explanation(&r, 0)
    );
}

#[test]
fn ignore_daemonsets_without_matching_tolerations() {
    let mut p = pool("default");
    p.taints = vec![taint("dedicated", Some("x"), "NoSchedule")];
    let input = SchedulerInput {
        node_pools: vec![p],
        daemonsets: vec![pod().requests(&[("cpu", "20")]).build()],
        ..Default::default()
    };
    let r = solve_input(
        input,
        &pods(vec![pod().requests(&[("cpu", "1")]).tolerate(toleration(
            "dedicated",
            "Exists",
            None,
            None,
        ))]),
    );
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
}

#[test]
fn a_node_under_its_consolidate_after_window_takes_pending_pods_but_not_moved_ones() {
    let mut node = existing_node(
        "n1",
        &[(ZONE, "test-zone-1")],
        &[("cpu", "4"), ("memory", "8Gi"), ("pods", "10")],
    );
    node.closed_to_moved_pods = true;
    // Pod 0 is pending; pod 1 is moved off a consolidation candidate.
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        moved_pods_from: Some(1),
        ..Default::default()
    };
    let both = pods(vec![
        pod().requests(&[("cpu", "1")]),
        pod().requests(&[("cpu", "1")]),
    ]);
    let r = solve_input(input.clone(), &both);
    assert_eq!(r.existing_nodes.len(), 1);
    assert_eq!(r.existing_nodes[0].pods, vec![0]);
    assert_eq!(
        claim_of(&r, 1),
        Some(0),
        "the moved pod gets a new NodeClaim"
    );
    // Outside consolidation simulations the window means nothing.
    let r = solve_input(
        SchedulerInput {
            moved_pods_from: None,
            ..input
        },
        &both,
    );
    assert_eq!(r.existing_nodes[0].pods, vec![0, 1]);
}

#[test]
fn pack_in_flight_and_existing_nodes_before_launching_new_ones() {
    let node = existing_node(
        "n1",
        &[(ZONE, "test-zone-1")],
        &[("cpu", "2"), ("memory", "4Gi"), ("pods", "10")],
    );
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..Default::default()
    };
    let r = solve_input(
        input,
        &pods(vec![
            pod().requests(&[("cpu", "1")]),
            pod().requests(&[("cpu", "1")]),
            pod().requests(&[("cpu", "1")]),
        ]),
    );
    assert_eq!(r.existing_nodes[0].pods.len(), 2);
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn order_initialized_nodes_before_uninitialized() {
    let mut a = existing_node("a-uninit", &[], &[("cpu", "4"), ("pods", "10")]);
    a.initialized = false;
    let b = existing_node("b-init", &[], &[("cpu", "4"), ("pods", "10")]);
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        existing_nodes: vec![a, b],
        ..Default::default()
    };
    let r = solve_input(input, &pods(vec![pod().requests(&[("cpu", "1")])]));
    assert_eq!(r.existing_nodes[0].node, "b-init");
}

#[test]
fn schedule_pods_with_the_same_host_port_to_different_nodes() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![
            pod().host_port(80),
            pod().host_port(80),
            pod().host_port(81),
        ]),
    );
    assert_eq!(r.new_node_claims.len(), 2);
}

#[test]
fn schedule_to_an_existing_node_unowned_by_karpenter() {
    let node = existing_node(
        "byo",
        &[],
        &[("cpu", "8"), ("memory", "8Gi"), ("pods", "10")],
    );
    let input = SchedulerInput {
        node_pools: vec![],
        existing_nodes: vec![node],
        ..Default::default()
    };
    let r = solve_input(input, &pods(vec![pod().requests(&[("cpu", "1")])]));
    assert_eq!(r.existing_nodes[0].node, "byo");
}

#[test]
fn not_schedule_when_no_nodepool_and_say_so() {
    let r = solve(vec![], &pods(vec![pod()]));
    assert!(
        explanation(&r, 0).contains("no NodePool"),
        "{}",
        explanation(&r, 0)
    );
}

#[test]
fn weighted_nodepools_schedule_to_highest_weight_unless_explicitly_selected() {
    let mut low = pool("low");
    low.weight = 1;
    let mut high = pool("high");
    high.weight = 50;
    let r = solve(
        vec![low.clone(), high.clone()],
        &pods(vec![
            pod(),
            pod().node_selector(&[("karpenter.sh/nodepool", "low")]),
        ]),
    );
    assert_eq!(
        r.new_node_claims[claim_of(&r, 0).unwrap()].node_pool,
        "high"
    );
    assert_eq!(r.new_node_claims[claim_of(&r, 1).unwrap()].node_pool, "low");
}

#[test]
fn not_match_nodepool_with_prefer_no_schedule_taint_when_another_matches() {
    let mut soft = pool("a-soft");
    soft.weight = 100;
    soft.taints = vec![taint("soft", None, "PreferNoSchedule")];
    let r = solve(vec![soft.clone(), pool("b-plain")], &pods(vec![pod()]));
    assert_eq!(r.new_node_claims[0].node_pool, "b-plain");
    // Only the soft pool: used after relaxation adds the toleration.
    let r = solve(vec![soft], &pods(vec![pod()]));
    assert_eq!(r.new_node_claims[0].node_pool, "a-soft");
}

#[test]
fn resource_limits_partially_schedule_when_limits_would_be_exceeded() {
    let mut p = pool("default");
    p.instance_types
        .retain(|it| it.name == "small-instance-type");
    p.limits = rl(&[("cpu", "3")]);
    let r = solve(
        vec![p],
        &pods(vec![
            pod().requests(&[("cpu", "1.5")]),
            pod().requests(&[("cpu", "1.5")]),
        ]),
    );
    // One 2-cpu node fits one 1.5-cpu pod; a second node would exceed 3 cpu.
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(r.unschedulable.len(), 1);
    let e = &r.unschedulable[0].explanation;
    assert!(
        e.contains("limit cpu=3 reached (used 2, pod needs 1500m)"),
        "{e}"
    );
}

#[test]
fn resource_limits_reserve_the_cheapest_option_and_narrow_the_options_at_the_end() {
    // Upstream reserves each claim's largest option (4 cpu): the third claim would not fit an
    // 8-cpu limit. Reserving the cheapest (2 cpu) places all three pods; at finalisation the
    // 2 cpu left over let the first claim keep its 4-cpu option and the others only the 2-cpu one,
    // so the pool stays within its limit whichever options launch.
    let mut p = pool("default");
    p.instance_types
        .retain(|it| it.name == "small-instance-type" || it.name == "default-instance-type");
    p.limits = rl(&[("cpu", "8")]);
    let r = solve(
        vec![p.clone()],
        &pods(vec![
            pod().requests(&[("cpu", "1")]).host_port(80),
            pod().requests(&[("cpu", "1")]).host_port(80),
            pod().requests(&[("cpu", "1")]).host_port(80),
        ]),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    let options: Vec<Vec<&str>> = r
        .new_node_claims
        .iter()
        .map(|c| c.instance_types.iter().map(|o| &*o.name).collect())
        .collect();
    assert_eq!(
        options,
        vec![
            vec!["small-instance-type", "default-instance-type"],
            vec!["small-instance-type"],
            vec!["small-instance-type"],
        ]
    );
    let worst_case: i64 = r
        .new_node_claims
        .iter()
        .map(|c| {
            c.instance_types
                .iter()
                .map(|o| {
                    let it = p
                        .instance_types
                        .iter()
                        .find(|t| *t.name == *o.name)
                        .unwrap();
                    it.capacity.get("cpu").millis()
                })
                .max()
                .unwrap()
        })
        .sum();
    assert_eq!(
        worst_case, 8_000,
        "every launch choice stays within the limit"
    );
}

#[test]
fn resource_limits_nodes_stops_new_node_claims() {
    let mut p = pool("default");
    p.limits = rl(&[("nodes", "1")]);
    let r = solve(
        vec![p],
        &pods(vec![pod().host_port(80), pod().host_port(80)]),
    );
    assert_eq!(r.new_node_claims.len(), 1);
    assert!(
        r.unschedulable[0]
            .explanation
            .contains("limit nodes=1 reached"),
        "{:?}",
        r.unschedulable
    );
}

#[test]
fn taint_not_tolerated_names_pool_and_taint() {
    let mut p = pool("gpu");
    p.taints = vec![taint("nvidia.com/gpu", Some("true"), "NoSchedule")];
    let r = solve(vec![p], &pods(vec![pod()]));
    assert_eq!(
        explanation(&r, 0),
        "nodepool gpu: taint nvidia.com/gpu=true:NoSchedule not tolerated"
    );
}

#[test]
fn requirement_matching_no_instance_type_is_explained() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().node_selector(&[(IT, "x9.huge")])]),
    );
    let e = explanation(&r, 0);
    assert!(
        e.starts_with("nodepool default: requirement node.kubernetes.io/instance-type In [x9.huge] matches no instance type (none of 6 types"),
        "{e}"
    );
}

#[test]
fn incompatible_zone_is_explained_with_both_sides() {
    let mut p = pool("default");
    p.requirements = vec![req(ZONE, "In", &["test-zone-1", "test-zone-2"])];
    let r = solve(
        vec![p],
        &pods(vec![pod().node_selector(&[(ZONE, "eu-west-1a")])]),
    );
    assert_eq!(
        explanation(&r, 0),
        "incompatible with nodepool default: pod requires topology.kubernetes.io/zone In [eu-west-1a] but the pool allows topology.kubernetes.io/zone In [test-zone-1, test-zone-2]"
    );
}

#[test]
fn invalid_pod_quantities_are_reported_not_panicked() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().requests(&[("cpu", "lots")])]),
    );
    assert!(
        explanation(&r, 0).contains("spec.containers[app].resources.requests[cpu]"),
        "{}",
        explanation(&r, 0)
    );
}

#[test]
fn min_values_strict_fails_and_best_effort_relaxes() {
    let mut p = pool("default");
    p.requirements = vec![{
        let mut r = req(IT, "Exists", &[]);
        r.min_values = Some(10);
        r
    }];
    let r = solve(vec![p.clone()], &pods(vec![pod()]));
    assert!(!scheduled(&r, 0));
    assert!(
        explanation(&r, 0).contains("minValues"),
        "{}",
        explanation(&r, 0)
    );
    let input = SchedulerInput {
        node_pools: vec![p],
        options: SchedulerOptions {
            min_values_policy: MinValuesPolicy::BestEffort,
            ..Default::default()
        },
        ..Default::default()
    };
    let r = solve_input(input, &pods(vec![pod()]));
    assert!(scheduled(&r, 0));
    assert!(r.new_node_claims[0].min_values_relaxed);
}

#[test]
fn results_are_deterministic() {
    let mk = || {
        pods(
            (0..50)
                .map(|i| {
                    pod()
                        .name(&format!("p{i}"))
                        .requests(&[("cpu", if i % 2 == 0 { "1" } else { "250m" })])
                })
                .collect(),
        )
    };
    let a = solve(vec![pool("default")], &mk());
    let b = solve(vec![pool("default")], &mk());
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
}

#[test]
fn not_schedule_incompatible_preferences_and_requirements_with_operator_in() {
    let p = pod()
        .required_term(vec![nsr(ZONE, "In", &["invalid"])])
        .preferred_term(10, vec![nsr(ZONE, "In", &["test-zone-1"])]);
    let r = solve(vec![pool("default")], &pods(vec![p]));
    assert!(!scheduled(&r, 0), "a preference never widens a requirement");
}

#[test]
fn schedule_even_if_preference_conflicts_with_requirement() {
    let p = pod()
        .required_term(vec![nsr(ZONE, "In", &["test-zone-3"])])
        .preferred_term(10, vec![nsr(ZONE, "NotIn", &["test-zone-3"])]);
    let r = solve(vec![pool("default")], &pods(vec![p]));
    assert_eq!(claim_value(&r, 0, ZONE).as_deref(), Some("test-zone-3"));
}

#[test]
fn combine_multidimensional_node_selectors_preferences_and_requirements() {
    let p = pod()
        .node_selector(&[(ZONE, "test-zone-3")])
        .required_term(vec![
            nsr(ZONE, "In", &["test-zone-1", "test-zone-3"]),
            nsr(IT, "In", &["default-instance-type", "arm-instance-type"]),
        ])
        .preferred_term(10, vec![nsr(IT, "In", &["arm-instance-type"])])
        .preferred_term(5, vec![nsr(ZONE, "NotIn", &["test-zone-3"])]);
    let r = solve(vec![pool("default")], &pods(vec![p]));
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
    assert_eq!(claim_value(&r, 0, ZONE).as_deref(), Some("test-zone-3"));
    let names: Vec<&str> = r.new_node_claims[0]
        .instance_types
        .iter()
        .map(|o| &*o.name)
        .collect();
    assert_eq!(names, ["arm-instance-type"], "heaviest preference honoured");
}

#[test]
fn schedule_compatible_pods_to_the_same_node_and_incompatible_to_different_nodes() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![
            pod().node_selector(&[(ZONE, "test-zone-1")]),
            pod().node_selector(&[(ZONE, "test-zone-1")]),
            pod().node_selector(&[(ZONE, "test-zone-2")]),
        ]),
    );
    assert_eq!(r.new_node_claims.len(), 2);
    assert_eq!(claim_of(&r, 0), claim_of(&r, 1));
    assert_ne!(claim_of(&r, 0), claim_of(&r, 2));
}

#[test]
fn exists_operator_does_not_overwrite_the_existing_value() {
    let p = pod().required_term(vec![
        nsr(ZONE, "In", &["non-existent-zone"]),
        nsr(ZONE, "Exists", &[]),
    ]);
    let r = solve(vec![pool("default")], &pods(vec![p]));
    assert!(!scheduled(&r, 0));
}

#[test]
fn preferential_fallback_relaxes_multiple_terms_and_all_preferences() {
    let p = pod()
        .required_term(vec![nsr(ZONE, "In", &["invalid"])])
        .required_term(vec![nsr(ZONE, "In", &["also-invalid"])])
        .required_term(vec![nsr(ZONE, "In", &["test-zone-2"])]);
    let r = solve(vec![pool("default")], &pods(vec![p]));
    assert_eq!(claim_value(&r, 0, ZONE).as_deref(), Some("test-zone-2"));
    let p = pod()
        .preferred_term(100, vec![nsr(ZONE, "In", &["invalid"])])
        .preferred_term(50, vec![nsr(IT, "In", &["invalid"])]);
    let r = solve(vec![pool("default")], &pods(vec![p]));
    assert!(scheduled(&r, 0), "every preference relaxed");
}

#[test]
fn launch_pods_with_different_os_instance_types_and_zones_on_different_instances() {
    for (key, a, b) in [
        (OS, "linux", "windows"),
        (IT, "small-instance-type", "default-instance-type"),
        (ZONE, "test-zone-1", "test-zone-2"),
    ] {
        let r = solve(
            vec![pool("default")],
            &pods(vec![
                pod().node_selector(&[(key, a)]),
                pod().node_selector(&[(key, b)]),
            ]),
        );
        assert_eq!(r.new_node_claims.len(), 2, "{key}");
        // What the NodeClaim objects say (incl. the instance-type list).
        let allows = |p: usize, value: &str| {
            r.new_node_claims[claim_of(&r, p).unwrap()]
                .node_claim_requirements()
                .iter()
                .filter(|q| q.key == key)
                .all(|q| q.operator != "In" || q.values.iter().any(|v| v == value))
        };
        assert!(allows(0, a) && !allows(0, b), "{key}");
        assert!(allows(1, b) && !allows(1, a), "{key}");
    }
}

#[test]
fn exclude_instance_types_not_supported_by_pod_node_affinity() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().required_term(vec![nsr(
            IT,
            "In",
            &["arm-instance-type", "windows-instance-type"],
        )])]),
    );
    let names: Vec<&str> = r.new_node_claims[0]
        .instance_types
        .iter()
        .map(|o| &*o.name)
        .collect();
    assert!(
        names
            .iter()
            .all(|n| ["arm-instance-type", "windows-instance-type"].contains(n)),
        "{names:?}"
    );
}

fn exotic_pool() -> karpenter_core::scheduling::SchedulingNodePool {
    let mut p = pool("default");
    let mut exotic = instance_type(
        "exotic-instance-type",
        "amd64",
        "linux",
        &[("cpu", "1"), ("memory", "1Gi"), ("pods", "10")],
    );
    exotic.labels.insert("special".into(), "optional".into());
    p.instance_types.push(std::sync::Arc::new(exotic));
    p
}

fn exotic_options() -> SchedulerOptions {
    SchedulerOptions {
        extra_well_known_labels: vec!["special".into()],
        ..Default::default()
    }
}

#[test]
fn schedule_optional_labels() {
    let input = SchedulerInput {
        node_pools: vec![exotic_pool()],
        options: exotic_options(),
        ..Default::default()
    };
    let r = solve_input(
        input,
        &pods(vec![pod().required_term(vec![nsr(
            "special",
            "Exists",
            &[],
        )])]),
    );
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
    let c = &r.new_node_claims[0];
    assert!(
        c.instance_types
            .iter()
            .all(|o| &*o.name == "exotic-instance-type")
    );
    // The label itself comes from the launched instance type (a registered well-known key is
    // not resolved onto the NodeClaim, as upstream).
}

#[test]
fn schedule_without_optional_labels_if_disallowed() {
    let mut p = exotic_pool();
    p.requirements = vec![req("special", "DoesNotExist", &[])];
    let input = SchedulerInput {
        node_pools: vec![p],
        options: exotic_options(),
        ..Default::default()
    };
    let r = solve_input(input, &pods(vec![pod()]));
    let c = &r.new_node_claims[0];
    assert!(
        c.instance_types
            .iter()
            .all(|o| &*o.name != "exotic-instance-type"),
        "{:?}",
        c.instance_types
    );
    assert!(!c.labels.contains_key("special"));
}

#[test]
fn pack_nodes_tightly() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![
            pod().requests(&[("cpu", "1.5")]),
            pod().requests(&[("cpu", "1.5")]),
        ]),
    );
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(
        &*r.new_node_claims[0].instance_types[0].name, "default-instance-type",
        "the cheapest type holding both"
    );
}

#[test]
fn select_valid_instance_types_regardless_of_price() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().requests(&[("fake.com/vendor-a", "1")])]),
    );
    let names: Vec<&str> = r.new_node_claims[0]
        .instance_types
        .iter()
        .map(|o| &*o.name)
        .collect();
    assert_eq!(names, ["gpu-vendor-instance-type"]);
}

#[test]
fn balance_pods_across_zones_and_hostnames_with_in_flight_nodes() {
    let mut node = existing_node(
        "in-flight",
        &[(ZONE, "test-zone-1"), ("karpenter.sh/nodepool", "default")],
        &[("cpu", "4"), ("memory", "4Gi"), ("pods", "10")],
    );
    node.node_pool = Some("default".into());
    node.initialized = false;
    node.pods = shared(pods(vec![pod().labels(&[("app", "a")])]));
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..Default::default()
    };
    let zonal = || {
        pod().labels(&[("app", "a")]).spread(
            ZONE,
            1,
            "DoNotSchedule",
            Some(selector(&[("app", "a")])),
        )
    };
    let r = solve_input(input.clone(), &pods(vec![zonal(), zonal()]));
    assert!(r.existing_nodes.is_empty(), "zone-1 already has one");
    let counts = zone_counts(&r, |_| true);
    assert_eq!(counts.get("test-zone-2"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("test-zone-3"), Some(&1), "{counts:?}");
    let by_host = || {
        pod().labels(&[("app", "a")]).spread(
            HOSTNAME,
            1,
            "DoNotSchedule",
            Some(selector(&[("app", "a")])),
        )
    };
    let r = solve_input(input, &pods(vec![by_host(), by_host()]));
    assert!(r.existing_nodes.is_empty());
    assert_eq!(r.new_node_claims.len(), 2);
}

#[test]
fn track_daemonset_usage_on_existing_nodes_and_unexpected_daemonset_pods() {
    let node = existing_node(
        "n1",
        &[],
        &[("cpu", "4"), ("memory", "4Gi"), ("pods", "10")],
    );
    let input = |bound: Vec<P>| SchedulerInput {
        node_pools: vec![],
        existing_nodes: vec![{
            let mut n = node.clone();
            n.pods = shared(pods(bound));
            n
        }],
        daemonsets: vec![pod().requests(&[("cpu", "1")]).build()],
        ..Default::default()
    };
    // The daemonset pod is not bound yet: its 1 cpu stays reserved.
    let r = solve_input(input(vec![]), &pods(vec![pod().requests(&[("cpu", "3")])]));
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
    let r = solve_input(
        input(vec![]),
        &pods(vec![pod().requests(&[("cpu", "3.5")])]),
    );
    assert!(!scheduled(&r, 0));
    // An unexpectedly large daemonset pod is bound: its real request counts, no more reservation.
    let ds = || pod().requests(&[("cpu", "2")]).owned_by("DaemonSet");
    let r = solve_input(
        input(vec![ds()]),
        &pods(vec![pod().requests(&[("cpu", "2")])]),
    );
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
    let r = solve_input(
        input(vec![ds()]),
        &pods(vec![pod().requests(&[("cpu", "2.5")])]),
    );
    assert!(!scheduled(&r, 0));
}

#[test]
fn daemonset_overhead_on_an_existing_node_needs_the_daemonset_strictly_compatible() {
    // Upstream's existing-node overhead uses `StrictlyCompatible`: a node lacking a label key the
    // DaemonSet requires (even a well-known one) will never run it, so it reserves nothing there.
    let with_labels = |labels: &[(&str, &str)]| SchedulerInput {
        node_pools: vec![],
        existing_nodes: vec![existing_node(
            "n1",
            labels,
            &[("cpu", "4"), ("memory", "4Gi"), ("pods", "10")],
        )],
        daemonsets: vec![
            pod()
                .requests(&[("cpu", "1")])
                .node_selector(&[(CT, "spot")])
                .build(),
        ],
        ..Default::default()
    };
    let three_and_a_half = || pods(vec![pod().requests(&[("cpu", "3.5")])]);
    let r = solve_input(with_labels(&[]), &three_and_a_half());
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
    // A node the DaemonSet does select keeps its 1 cpu for it.
    let r = solve_input(with_labels(&[(CT, "spot")]), &three_and_a_half());
    assert!(!scheduled(&r, 0));
}

#[test]
fn return_a_pod_error_when_no_available_instance_types_exist() {
    let mut p = pool("default");
    for it in p.instance_types.iter_mut().map(std::sync::Arc::make_mut) {
        for o in &mut it.offerings {
            o.available = false;
        }
    }
    let r = solve(vec![p], &pods(vec![pod()]));
    assert!(!scheduled(&r, 0));
    let e = explanation(&r, 0);
    assert!(e.contains("nodepool default"), "{e}");
    assert!(e.contains("offering"), "{e}");
}

// ---- volumes ----------------------------------------------------------------------------------

const DRIVER: &str = "ebs.csi.aws.com";

fn volume_input(
    claims: Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    volumes: Vec<k8s_openapi::api::core::v1::PersistentVolume>,
    classes: Vec<k8s_openapi::api::storage::v1::StorageClass>,
) -> SchedulerInput {
    SchedulerInput {
        node_pools: vec![pool("default")],
        volumes: VolumeInput {
            claims,
            volumes,
            storage_classes: classes,
        },
        ..Default::default()
    }
}

#[test]
fn volume_usage_launches_multiple_nodes_if_required_by_volume_limits() {
    let mut node = existing_node(
        "n1",
        &[(ZONE, "test-zone-1")],
        &[("cpu", "8"), ("memory", "8Gi"), ("pods", "10")],
    );
    node.volume_limits = std::collections::BTreeMap::from([(DRIVER.to_string(), 1)]);
    let sc = storage_class("gp3", DRIVER, &[], "WaitForFirstConsumer");
    let mut input = volume_input(
        vec![claim("a", Some("gp3"), None), claim("b", Some("gp3"), None)],
        vec![],
        vec![sc],
    );
    input.existing_nodes = vec![node];
    let r = solve_input(input.clone(), &pods(vec![pod().pvc("a"), pod().pvc("b")]));
    assert_eq!(r.existing_nodes.len(), 1);
    assert_eq!(r.existing_nodes[0].pods.len(), 1, "one volume fits");
    assert_eq!(r.new_node_claims.len(), 1);
    // The same claim twice counts once.
    let r = solve_input(input, &pods(vec![pod().pvc("a"), pod().pvc("a")]));
    assert_eq!(r.existing_nodes[0].pods.len(), 2);
    assert!(r.new_node_claims.is_empty());
}

#[test]
fn volume_usage_does_not_fail_for_nfs_volumes() {
    let mut p = pod().build();
    p.spec.as_mut().unwrap().volumes = Some(vec![
        k8s_openapi::api::core::v1::Volume {
            name: "nfs".into(),
            nfs: Some(k8s_openapi::api::core::v1::NFSVolumeSource {
                server: "fs".into(),
                path: "/".into(),
                read_only: None,
            }),
            ..Default::default()
        }
        .into(),
    ]);
    let r = solve(vec![pool("default")], &[p]);
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
}

#[test]
fn schedule_pods_using_a_pv_or_storage_class_with_multiple_zones() {
    let input = volume_input(
        vec![
            claim("bound", None, Some("pv")),
            claim("unbound", Some("zonal"), None),
        ],
        vec![zonal_volume("pv", DRIVER, &["test-zone-1", "test-zone-3"])],
        vec![storage_class(
            "zonal",
            DRIVER,
            &["test-zone-2", "test-zone-3"],
            "WaitForFirstConsumer",
        )],
    );
    let r = solve_input(
        input,
        &pods(vec![
            pod().pvc("bound").host_port(80),
            pod().pvc("unbound").host_port(80),
        ]),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    let c0 = claim_of(&r, 0).unwrap();
    assert!(!claim_allows(&r, c0, ZONE, "test-zone-2"));
    assert!(claim_allows(&r, c0, ZONE, "test-zone-1") || claim_allows(&r, c0, ZONE, "test-zone-3"));
    let c1 = claim_of(&r, 1).unwrap();
    assert!(!claim_allows(&r, c1, ZONE, "test-zone-1"));
}

#[test]
fn not_launch_nodes_for_invalid_volume_claims() {
    let mut deleting = claim("deleting", Some("gp3"), None);
    deleting.metadata.deletion_timestamp = pod().terminating().build().metadata.deletion_timestamp;
    let mut lost = claim("lost", None, Some("pv"));
    lost.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
        phase: Some("Lost".into()),
        ..Default::default()
    });
    let input = volume_input(
        vec![
            deleting,
            lost,
            claim("immediate", Some("now"), None),
            claim("missing-class", Some("nope"), None),
        ],
        vec![zonal_volume("pv", DRIVER, &["test-zone-1"])],
        vec![
            storage_class("gp3", DRIVER, &[], "WaitForFirstConsumer"),
            storage_class("now", DRIVER, &[], "Immediate"),
        ],
    );
    let ps = pods(vec![
        pod().pvc("deleting"),
        pod().pvc("lost"),
        pod().pvc("immediate"),
        pod().pvc("missing-class"),
        pod().pvc("absent"),
        pod(),
    ]);
    let r = solve_input(input, &ps);
    for i in 0..5 {
        assert!(!scheduled(&r, i), "pod {i} has an invalid claim");
        assert!(
            explanation(&r, i).contains("ignoring pod"),
            "{}",
            explanation(&r, i)
        );
    }
    assert!(scheduled(&r, 5), "valid pods still schedule");
}

/// A pod asking for a Dynamic Resource Allocation claim.
fn with_resource_claim(p: P) -> karpenter_core::pod::Pod {
    let mut pod = p.build();
    if let Some(spec) = pod.spec.as_mut() {
        spec.resource_claims = Some(
            vec![k8s_openapi::api::core::v1::PodResourceClaim {
                name: "gpu".into(),
                resource_claim_template_name: Some("one-gpu".into()),
                ..Default::default()
            }]
            .into(),
        );
    }
    pod
}

#[test]
fn pods_with_resource_claims_are_not_provisioned_for_and_say_why() {
    let node = existing_node(
        "n1",
        &[],
        &[("cpu", "4"), ("memory", "4Gi"), ("pods", "10")],
    );
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..Default::default()
    };
    let r = solve_input(
        input,
        &[
            with_resource_claim(pod().requests(&[("cpu", "1")])),
            pod().requests(&[("cpu", "1")]).build(),
        ],
    );
    assert!(
        !scheduled(&r, 0),
        "not on a new NodeClaim nor the existing node"
    );
    assert_eq!(
        explanation(&r, 0),
        "pod has Dynamic Resource Allocation requirements that are not yet supported by Karpenter"
    );
    assert!(scheduled(&r, 1), "the other pod is placed as usual");
    assert!(r.new_node_claims.is_empty());
}

#[test]
fn daemonsets_with_resource_claims_add_no_overhead() {
    // As upstream with DRA ignored: such a daemonset's pods are not expected on new nodes.
    let node = existing_node(
        "n1",
        &[],
        &[("cpu", "4"), ("memory", "4Gi"), ("pods", "10")],
    );
    let input = SchedulerInput {
        node_pools: vec![],
        existing_nodes: vec![node],
        daemonsets: vec![with_resource_claim(pod().requests(&[("cpu", "2")]))],
        ..Default::default()
    };
    let r = solve_input(input, &pods(vec![pod().requests(&[("cpu", "3.5")])]));
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
}
