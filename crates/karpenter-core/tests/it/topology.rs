//! §7.2 topology: spread, pod affinity and anti-affinity.

use k8s_openapi::api::core::v1::{PodAffinityTerm, TopologySpreadConstraint};
use karpenter_core::scheduling::SchedulerInput;

use crate::fixtures::*;

fn app(n: usize, builder: impl Fn() -> P) -> Vec<karpenter_core::pod::Pod> {
    pods((0..n).map(|_| builder()).collect())
}

#[test]
fn topology_ignores_unknown_topology_keys() {
    let r = solve(
        vec![pool("default")],
        &app(3, || {
            pod().labels(&[("app", "a")]).spread(
                "unknown",
                1,
                "DoNotSchedule",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    // No domain of the unknown key exists: the constraint cannot be met (upstream: not scheduled).
    assert_eq!(r.unschedulable.len(), 3);
    assert!(
        r.unschedulable[0]
            .explanation
            .contains("topology spread on unknown"),
        "{}",
        r.unschedulable[0].explanation
    );
}

#[test]
fn topology_zonal_spread_respects_max_skew() {
    let r = solve(
        vec![pool("default")],
        &app(9, || {
            pod().labels(&[("app", "a")]).spread(
                ZONE,
                1,
                "DoNotSchedule",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    let counts = zone_counts(&r, |_| true);
    assert_eq!(
        counts.values().copied().collect::<Vec<_>>(),
        vec![3, 3, 3],
        "{counts:?}"
    );
}

#[test]
fn topology_zonal_spread_respects_nodepool_zone_constraints() {
    let mut p = pool("default");
    p.requirements = vec![req(ZONE, "In", &["test-zone-1", "test-zone-2"])];
    let r = solve(
        vec![p],
        &app(4, || {
            pod().labels(&[("app", "a")]).spread(
                ZONE,
                1,
                "DoNotSchedule",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    let counts = zone_counts(&r, |_| true);
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(counts.values().all(|c| *c == 2));
}

#[test]
fn topology_does_not_violate_max_skew_with_existing_pods_when_do_not_schedule() {
    // Two matching pods already in zone 1: new pods must go to zones 2 and 3 first.
    let mut node = existing_node(
        "n1",
        &[(ZONE, "test-zone-1")],
        &[("cpu", "0"), ("pods", "10")],
    );
    node.pods = shared(app(2, || pod().labels(&[("app", "a")])));
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..Default::default()
    };
    let r = solve_input(
        input,
        &app(4, || {
            pod().labels(&[("app", "a")]).spread(
                ZONE,
                1,
                "DoNotSchedule",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    let counts = zone_counts(&r, |_| true);
    // totals per zone incl. existing: z1 = 2 + x, z2, z3; skew ≤ 1
    let z1 = 2 + counts.get("test-zone-1").copied().unwrap_or(0);
    let z2 = counts.get("test-zone-2").copied().unwrap_or(0);
    let z3 = counts.get("test-zone-3").copied().unwrap_or(0);
    let (max, min) = (z1.max(z2).max(z3), z1.min(z2).min(z3));
    assert!(max - min <= 1, "z1={z1} z2={z2} z3={z3}");
}

#[test]
fn topology_schedule_anyway_spread_is_relaxed_when_unsatisfiable() {
    let mut p = pool("default");
    p.requirements = vec![req(ZONE, "In", &["test-zone-1"])];
    let mut node = existing_node(
        "n1",
        &[(ZONE, "test-zone-2")],
        &[("cpu", "0"), ("pods", "10")],
    );
    node.pods = shared(app(1, || pod().labels(&[("app", "a")])));
    // zone-1 only; skew would be violated vs zone-2's existing count of 1 after 2 pods.
    let input = SchedulerInput {
        node_pools: vec![p],
        existing_nodes: vec![node],
        ..Default::default()
    };
    let r = solve_input(
        input,
        &app(4, || {
            pod().labels(&[("app", "a")]).spread(
                ZONE,
                1,
                "ScheduleAnyway",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
}

#[test]
fn topology_not_spread_with_nil_label_selector() {
    let r = solve(
        vec![pool("default")],
        &app(4, || {
            pod()
                .labels(&[("app", "a")])
                .spread(ZONE, 1, "DoNotSchedule", None)
        }),
    );
    // Selects nothing: no constraint between them; they pack onto one node.
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn topology_respects_min_domains() {
    let mut p = pool("default");
    p.requirements = vec![req(ZONE, "In", &["test-zone-1", "test-zone-2"])];
    let tsc = TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(selector(&[("app", "a")])),
        min_domains: Some(3),
        ..Default::default()
    };
    // With only 2 eligible domains and minDomains 3, the global minimum is 0: at most 1 per zone.
    let r = solve(
        vec![p],
        &app(4, || pod().labels(&[("app", "a")]).spread_with(tsc.clone())),
    );
    assert_eq!(r.unschedulable.len(), 2, "{:?}", zone_counts(&r, |_| true));
}

#[test]
fn topology_hostname_spread_balances_pods_across_nodes() {
    let r = solve(
        vec![pool("default")],
        &app(4, || {
            pod().labels(&[("app", "a")]).spread(
                HOSTNAME,
                1,
                "DoNotSchedule",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    assert_eq!(r.new_node_claims.len(), 4);
    let r = solve(
        vec![pool("default")],
        &app(4, || {
            pod().labels(&[("app", "a")]).spread(
                HOSTNAME,
                2,
                "DoNotSchedule",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    assert_eq!(
        r.new_node_claims.len(),
        2,
        "maxSkew 2 allows two per hostname"
    );
}

#[test]
fn topology_capacity_type_spread_balances() {
    let r = solve(
        vec![pool("default")],
        &app(4, || {
            pod().labels(&[("app", "a")]).spread(
                CT,
                1,
                "DoNotSchedule",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    let mut counts = std::collections::BTreeMap::new();
    for (ci, c) in r.new_node_claims.iter().enumerate() {
        *counts
            .entry(claim_value(&r, ci, CT).unwrap_or_default())
            .or_insert(0) += c.pods.len();
    }
    assert_eq!(counts.get("spot"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("on-demand"), Some(&2), "{counts:?}");
}

#[test]
fn topology_match_label_keys_spread_each_revision_independently() {
    let tsc = TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(selector(&[("app", "a")])),
        match_label_keys: Some(vec!["rev".into()]),
        ..Default::default()
    };
    let mut ps = app(3, || {
        pod()
            .labels(&[("app", "a"), ("rev", "1")])
            .spread_with(tsc.clone())
    });
    ps.extend(app(3, || {
        pod()
            .labels(&[("app", "a"), ("rev", "2")])
            .spread_with(tsc.clone())
    }));
    let r = solve(vec![pool("default")], &ps);
    let rev1 = zone_counts(&r, |p| p < 3);
    let rev2 = zone_counts(&r, |p| p >= 3);
    assert_eq!(
        rev1.values().copied().collect::<Vec<_>>(),
        vec![1, 1, 1],
        "{rev1:?}"
    );
    assert_eq!(
        rev2.values().copied().collect::<Vec<_>>(),
        vec![1, 1, 1],
        "{rev2:?}"
    );
}

#[test]
fn topology_node_taints_policy_honor_excludes_tainted_domains() {
    let mut tainted = pool("tainted");
    tainted.requirements = vec![req(ZONE, "In", &["test-zone-3"])];
    tainted.taints = vec![taint("t", None, "NoSchedule")];
    let mut plain = pool("plain");
    plain.requirements = vec![req(ZONE, "In", &["test-zone-1", "test-zone-2"])];
    let tsc = |policy: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(selector(&[("app", "a")])),
        node_taints_policy: Some(policy.into()),
        ..Default::default()
    };
    // Honor: zone-3 (only from the tainted pool) is not a domain → 2 zones, 2 pods each.
    let r = solve(
        vec![tainted.clone(), plain.clone()],
        &app(4, || {
            pod().labels(&[("app", "a")]).spread_with(tsc("Honor"))
        }),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    // Ignore: zone-3 counts as an (unreachable) domain with 0 → at most 1 per zone.
    let r = solve(
        vec![tainted, plain],
        &app(4, || {
            pod().labels(&[("app", "a")]).spread_with(tsc("Ignore"))
        }),
    );
    assert_eq!(r.unschedulable.len(), 2);
}

#[test]
fn topology_spread_limited_by_node_selector() {
    let r = solve(
        vec![pool("default")],
        &app(4, || {
            pod()
                .labels(&[("app", "a")])
                .node_selector(&[(ZONE, "test-zone-1")])
                .spread(ZONE, 1, "DoNotSchedule", Some(selector(&[("app", "a")])))
        }),
    );
    assert!(
        r.unschedulable.is_empty(),
        "node affinity limits the spread domains: {:?}",
        r.unschedulable
    );
    assert_eq!(zone_counts(&r, |_| true).get("test-zone-1"), Some(&4));
}

#[test]
fn pod_affinity_respects_hostname_affinity_to_another_pod() {
    let mut ps = pods(vec![
        pod()
            .labels(&[("security", "s2")])
            .requests(&[("cpu", "1")]),
    ]);
    ps.extend(pods(vec![
        pod().affinity_to(HOSTNAME, &[("security", "s2")]),
    ]));
    let r = solve(vec![pool("default")], &ps);
    assert_eq!(claim_of(&r, 0), claim_of(&r, 1));
}

#[test]
fn pod_affinity_respects_self_affinity_on_zone() {
    let r = solve(
        vec![pool("default")],
        &app(6, || {
            pod()
                .labels(&[("app", "a")])
                .host_port(80)
                .affinity_to(ZONE, &[("app", "a")])
        }),
    );
    // Host ports force 6 nodes, self-affinity keeps them in one zone.
    assert_eq!(r.new_node_claims.len(), 6);
    assert_eq!(zone_counts(&r, |_| true).len(), 1);
}

#[test]
fn pod_affinity_not_schedule_to_a_non_existent_pod() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().affinity_to(HOSTNAME, &[("security", "none")])]),
    );
    assert!(!scheduled(&r, 0));
    assert!(
        explanation(&r, 0).contains("pod affinity on kubernetes.io/hostname"),
        "{}",
        explanation(&r, 0)
    );
}

#[test]
fn pod_affinity_handles_dependencies_scheduled_later_in_the_queue() {
    // The dependent pod is larger (queued first) yet its target comes later: retried until it fits.
    let mut ps = pods(vec![
        pod()
            .requests(&[("cpu", "2")])
            .affinity_to(HOSTNAME, &[("app", "db")]),
    ]);
    ps.extend(pods(vec![
        pod().labels(&[("app", "db")]).requests(&[("cpu", "100m")]),
    ]));
    let r = solve(vec![pool("default")], &ps);
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    assert_eq!(claim_of(&r, 0), claim_of(&r, 1));
}

#[test]
fn pod_affinity_zone_to_unconstrained_target_waits_for_a_concrete_zone() {
    // Upstream: a target whose NodeClaim has no single zone yet is not counted in this pass.
    let mut ps = pods(vec![
        pod()
            .requests(&[("cpu", "2")])
            .affinity_to(ZONE, &[("app", "db")]),
    ]);
    ps.extend(pods(vec![
        pod().labels(&[("app", "db")]).requests(&[("cpu", "100m")]),
    ]));
    let r = solve(vec![pool("default")], &ps);
    assert!(!scheduled(&r, 0) && scheduled(&r, 1));
    // With the target's zone constrained, the affine pod follows it.
    let mut ps = pods(vec![
        pod()
            .requests(&[("cpu", "2")])
            .affinity_to(ZONE, &[("app", "db")]),
    ]);
    ps.extend(pods(vec![
        pod()
            .labels(&[("app", "db")])
            .node_selector(&[(ZONE, "test-zone-2")]),
    ]));
    let r = solve(vec![pool("default")], &ps);
    assert_eq!(
        claim_value(&r, claim_of(&r, 0).unwrap(), ZONE).as_deref(),
        Some("test-zone-2")
    );
}

#[test]
fn pod_affinity_filters_by_namespace() {
    let mut ps = pods(vec![pod().namespace("other").labels(&[("app", "db")])]);
    ps.extend(pods(vec![pod().affinity_to(HOSTNAME, &[("app", "db")])]));
    let r = solve(vec![pool("default")], &ps);
    assert!(!scheduled(&r, 1), "target is in another namespace");
    let mut ps = pods(vec![pod().namespace("other").labels(&[("app", "db")])]);
    ps.extend(pods(vec![pod().affinity_term(PodAffinityTerm {
        topology_key: HOSTNAME.into(),
        label_selector: Some(selector(&[("app", "db")])),
        namespaces: Some(vec!["other".into()]),
        ..Default::default()
    })]));
    let r = solve(vec![pool("default")], &ps);
    assert_eq!(claim_of(&r, 0), claim_of(&r, 1));
}

#[test]
fn pod_anti_affinity_separates_nodes_on_hostname() {
    let r = solve(
        vec![pool("default")],
        &app(5, || {
            pod()
                .labels(&[("app", "a")])
                .anti_affinity_to(HOSTNAME, &[("app", "a")])
        }),
    );
    assert_eq!(r.new_node_claims.len(), 5);
}

#[test]
fn pod_anti_affinity_does_not_violate_zone() {
    let mut ps = Vec::new();
    for z in ZONES {
        ps.push(
            pod()
                .labels(&[("app", "a")])
                .node_selector(&[(ZONE, z)])
                .anti_affinity_to(ZONE, &[("app", "a")]),
        );
    }
    ps.push(
        pod()
            .labels(&[("app", "a")])
            .anti_affinity_to(ZONE, &[("app", "a")]),
    );
    let r = solve(vec![pool("default")], &pods(ps));
    assert_eq!(r.unschedulable.len(), 1, "{:?}", r.unschedulable);
    assert!(zone_counts(&r, |_| true).values().all(|c| *c == 1));
}

#[test]
fn pod_anti_affinity_on_zone_schrodinger_blocks_every_possible_zone() {
    // An anti-affine pod on a claim whose zone is still open counts in every zone it may land in.
    let r = solve(
        vec![pool("default")],
        &app(3, || {
            pod()
                .labels(&[("app", "a")])
                .anti_affinity_to(ZONE, &[("app", "a")])
        }),
    );
    assert_eq!(r.unschedulable.len(), 2, "{:?}", r.unschedulable);
    assert!(
        r.unschedulable[0]
            .explanation
            .contains("pod anti-affinity on topology.kubernetes.io/zone")
    );
}

#[test]
fn pod_anti_affinity_inverse_with_existing_nodes() {
    // An existing pod anti-affine to app=web on zone-1 keeps new web pods out of zone-1.
    let mut node = existing_node(
        "n1",
        &[(ZONE, "test-zone-1")],
        &[("cpu", "0"), ("pods", "10")],
    );
    node.pods = shared(pods(vec![
        pod()
            .labels(&[("app", "guard")])
            .anti_affinity_to(ZONE, &[("app", "web")]),
    ]));
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..Default::default()
    };
    let r = solve_input(input, &app(3, || pod().labels(&[("app", "web")])));
    for (ci, _) in r.new_node_claims.iter().enumerate() {
        assert!(!claim_allows(&r, ci, ZONE, "test-zone-1"));
    }
}

#[test]
fn preferred_pod_anti_affinity_may_be_violated() {
    let r = solve(
        vec![pool("default")],
        &app(5, || {
            pod()
                .labels(&[("app", "a")])
                .preferred_anti_affinity_to(10, ZONE, &[("app", "a")])
        }),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
}

#[test]
fn preferred_pod_affinity_may_be_violated() {
    let r = solve(
        vec![pool("default")],
        &pods(vec![pod().preferred_affinity_to(
            10,
            HOSTNAME,
            &[("app", "ghost")],
        )]),
    );
    assert!(scheduled(&r, 0));
}

#[test]
fn taints_nodepool_taints_on_claims_and_startup_taints_do_not_block() {
    let mut p = pool("default");
    p.startup_taints = vec![taint("startup", None, "NoSchedule")];
    let r = solve(vec![p], &pods(vec![pod()]));
    assert!(scheduled(&r, 0));
    assert_eq!(r.new_node_claims[0].startup_taints.len(), 1);
}

fn zonal_a() -> P {
    pod()
        .labels(&[("app", "a")])
        .spread(ZONE, 1, "DoNotSchedule", Some(selector(&[("app", "a")])))
}

fn sorted_counts(counts: &std::collections::BTreeMap<String, usize>) -> Vec<usize> {
    let mut v: Vec<usize> = counts.values().copied().collect();
    v.sort();
    v
}

#[test]
fn topology_zonal_spread_with_match_expressions() {
    let sel = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_expressions: Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                key: "app".into(),
                operator: "In".into(),
                values: Some(vec!["a".into()]),
            },
        ]),
        ..Default::default()
    };
    let r = solve(
        vec![pool("default")],
        &app(6, || {
            pod()
                .labels(&[("app", "a")])
                .spread(ZONE, 1, "DoNotSchedule", Some(sel.clone()))
        }),
    );
    assert_eq!(sorted_counts(&zone_counts(&r, |_| true)), vec![2, 2, 2]);
}

#[test]
fn topology_zonal_spread_across_nodepools() {
    let mut a = pool("a");
    a.requirements = vec![req(ZONE, "In", &["test-zone-1"])];
    let mut b = pool("b");
    b.requirements = vec![req(ZONE, "In", &["test-zone-2"])];
    let r = solve(vec![a, b], &app(4, zonal_a));
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    let counts = zone_counts(&r, |_| true);
    assert_eq!(counts.get("test-zone-1"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("test-zone-2"), Some(&2), "{counts:?}");
}

#[test]
fn topology_only_counts_running_pods_with_matching_labels_on_nodes_with_the_domain() {
    let mut z1 = existing_node(
        "z1",
        &[(ZONE, "test-zone-1")],
        &[("cpu", "0"), ("pods", "10")],
    );
    z1.pods = shared(pods(vec![
        pod().labels(&[("app", "a")]).phase("Succeeded"),
        pod().labels(&[("app", "a")]).phase("Failed"),
        pod().labels(&[("app", "a")]).terminating(),
        pod().labels(&[("app", "other")]),
    ]));
    let mut no_zone = existing_node("no-zone", &[], &[("cpu", "0"), ("pods", "10")]);
    no_zone.pods = shared(pods(vec![pod().labels(&[("app", "a")])]));
    let mut z2 = existing_node(
        "z2",
        &[(ZONE, "test-zone-2")],
        &[("cpu", "0"), ("pods", "10")],
    );
    z2.pods = shared(pods(vec![pod().labels(&[("app", "a")])]));
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        existing_nodes: vec![z1, no_zone, z2],
        ..Default::default()
    };
    // Counted: only zone-2's running pod. Two new pods go to zones 1 and 3.
    let r = solve_input(input, &app(2, zonal_a));
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    let mut counts = zone_counts(&r, |_| true);
    for placement in &r.existing_nodes {
        let zone = if placement.node == "z1" {
            "test-zone-1"
        } else {
            "test-zone-2"
        };
        *counts.entry(zone.to_string()).or_insert(0) += placement.pods.len();
    }
    assert_eq!(counts.get("test-zone-1"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("test-zone-2"), None, "{counts:?}");
    assert_eq!(counts.get("test-zone-3"), Some(&1), "{counts:?}");
}

#[test]
fn topology_matches_all_pods_when_label_selector_is_empty() {
    let r = solve(
        vec![pool("default")],
        &app(3, || {
            pod().spread(ZONE, 1, "DoNotSchedule", Some(Default::default()))
        }),
    );
    assert_eq!(sorted_counts(&zone_counts(&r, |_| true)), vec![1, 1, 1]);
}

#[test]
fn topology_handles_interdependent_selectors() {
    // The pods' spread selects labels they do not carry: no constraint between them.
    let r = solve(
        vec![pool("default")],
        &app(5, || {
            pod().spread(
                HOSTNAME,
                1,
                "DoNotSchedule",
                Some(selector(&[("app", "nginx")])),
            )
        }),
    );
    assert!(r.unschedulable.is_empty());
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn topology_does_not_spread_an_invalid_label_selector() {
    let sel = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_expressions: Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                key: "app".into(),
                operator: "Sometimes".into(),
                values: None,
            },
        ]),
        ..Default::default()
    };
    let r = solve(
        vec![pool("default")],
        &app(2, || {
            pod()
                .labels(&[("app", "a")])
                .spread(ZONE, 1, "DoNotSchedule", Some(sel.clone()))
        }),
    );
    assert!(r.unschedulable.is_empty());
    assert_eq!(r.new_node_claims.len(), 1, "selects nothing: packed");
}

#[test]
fn topology_satisfied_min_domains_spread_normally() {
    for min_domains in [2, 1] {
        let mut p = pool("default");
        p.requirements = vec![req(ZONE, "In", &["test-zone-1", "test-zone-2"])];
        let tsc = TopologySpreadConstraint {
            max_skew: 1,
            topology_key: ZONE.into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(selector(&[("app", "a")])),
            min_domains: Some(min_domains),
            ..Default::default()
        };
        let r = solve(
            vec![p],
            &app(4, || pod().labels(&[("app", "a")]).spread_with(tsc.clone())),
        );
        assert!(r.unschedulable.is_empty(), "minDomains {min_domains}");
        assert_eq!(sorted_counts(&zone_counts(&r, |_| true)), vec![2, 2]);
    }
}

#[test]
fn topology_balances_multiple_deployments_with_hostname_spread() {
    let spread = |name: &'static str| {
        move || {
            pod().labels(&[("app", name)]).spread(
                HOSTNAME,
                1,
                "DoNotSchedule",
                Some(selector(&[("app", name)])),
            )
        }
    };
    let mut ps = app(2, spread("app1"));
    ps.extend(app(2, spread("app2")));
    let r = solve(vec![pool("default")], &ps);
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    assert_eq!(r.new_node_claims.len(), 2);
    assert_ne!(claim_of(&r, 0), claim_of(&r, 1));
    assert_ne!(claim_of(&r, 2), claim_of(&r, 3));
}

#[test]
fn topology_capacity_type_spread_respects_nodepool_capacity_type() {
    let mut p = pool("default");
    p.requirements = vec![req(CT, "In", &["spot"])];
    let r = solve(
        vec![p],
        &app(3, || {
            pod().labels(&[("app", "a")]).spread(
                CT,
                1,
                "DoNotSchedule",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    for ci in 0..r.new_node_claims.len() {
        assert_eq!(claim_value(&r, ci, CT).as_deref(), Some("spot"));
    }
}

#[test]
fn topology_capacity_type_spread_with_required_affinity_counts_only_the_pods_domains() {
    let r = solve(
        vec![pool("default")],
        &app(3, || {
            pod()
                .labels(&[("app", "a")])
                .node_selector(&[(CT, "on-demand")])
                .spread(CT, 1, "DoNotSchedule", Some(selector(&[("app", "a")])))
        }),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
}

#[test]
fn topology_arch_spread_balances() {
    let r = solve(
        vec![pool("default")],
        &app(4, || {
            pod().labels(&[("app", "a")]).spread(
                ARCH,
                1,
                "DoNotSchedule",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    let mut counts = std::collections::BTreeMap::new();
    for (ci, c) in r.new_node_claims.iter().enumerate() {
        *counts
            .entry(claim_value(&r, ci, ARCH).unwrap_or_default())
            .or_insert(0) += c.pods.len();
    }
    assert_eq!(counts.get("amd64"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("arm64"), Some(&2), "{counts:?}");
}

#[test]
fn topology_combined_hostname_and_zonal_spread() {
    let r = solve(
        vec![pool("default")],
        &app(6, || {
            zonal_a().spread(
                HOSTNAME,
                1,
                "DoNotSchedule",
                Some(selector(&[("app", "a")])),
            )
        }),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    assert_eq!(r.new_node_claims.len(), 6, "one per host");
    assert_eq!(sorted_counts(&zone_counts(&r, |_| true)), vec![2, 2, 2]);
}

#[test]
fn topology_match_label_keys_ignores_unknown_keys() {
    let tsc = TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(selector(&[("app", "a")])),
        match_label_keys: Some(vec!["not-on-the-pod".into()]),
        ..Default::default()
    };
    let r = solve(
        vec![pool("default")],
        &app(3, || pod().labels(&[("app", "a")]).spread_with(tsc.clone())),
    );
    assert_eq!(sorted_counts(&zone_counts(&r, |_| true)), vec![1, 1, 1]);
}

#[test]
fn topology_node_taints_policy_honor_with_mutually_exclusive_tainted_nodepools() {
    // Each zone comes from a pool with its own taint; the pods tolerate both: both zones count.
    let mut a = pool("a");
    a.requirements = vec![req(ZONE, "In", &["test-zone-1"])];
    a.taints = vec![taint("ta", None, "NoSchedule")];
    let mut b = pool("b");
    b.requirements = vec![req(ZONE, "In", &["test-zone-2"])];
    b.taints = vec![taint("tb", None, "NoSchedule")];
    let tsc = TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(selector(&[("app", "a")])),
        node_taints_policy: Some("Honor".into()),
        ..Default::default()
    };
    let r = solve(
        vec![a, b],
        &app(4, || {
            pod()
                .labels(&[("app", "a")])
                .tolerate(toleration("ta", "Exists", None, None))
                .tolerate(toleration("tb", "Exists", None, None))
                .spread_with(tsc.clone())
        }),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    assert_eq!(sorted_counts(&zone_counts(&r, |_| true)), vec![2, 2]);
}

#[test]
fn topology_node_affinity_policy_honor_vs_ignore() {
    // Two matching pods on a zone-1 node that lacks the label the new pods require.
    let mut node = existing_node(
        "n1",
        &[(ZONE, "test-zone-1")],
        &[("cpu", "0"), ("pods", "10")],
    );
    node.pods = shared(app(2, || pod().labels(&[("app", "a")])));
    let mut p = pool("default");
    p.labels.insert("tier".into(), "web".into());
    let input = SchedulerInput {
        node_pools: vec![p],
        existing_nodes: vec![node],
        ..Default::default()
    };
    let run = |policy: &str| {
        let tsc = TopologySpreadConstraint {
            max_skew: 1,
            topology_key: ZONE.into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(selector(&[("app", "a")])),
            node_affinity_policy: Some(policy.into()),
            ..Default::default()
        };
        let r = solve_input(
            input.clone(),
            &app(3, || {
                pod()
                    .labels(&[("app", "a")])
                    .node_selector(&[("tier", "web")])
                    .spread_with(tsc.clone())
            }),
        );
        assert!(
            r.unschedulable.is_empty(),
            "{policy}: {:?}",
            r.unschedulable
        );
        zone_counts(&r, |_| true)
    };
    // Honor: the node does not match the pods' selector, its pods are not counted.
    assert_eq!(run("Honor").get("test-zone-1"), Some(&1));
    // Ignore: zone-1 already has two, the new pods avoid it.
    assert_eq!(run("Ignore").get("test-zone-1"), None);
}

#[test]
fn topology_node_affinity_policy_honor_leaves_out_domains_of_nodes_the_pods_cannot_use() {
    // A foreign node in a third zone (no `tier: web`, no room) must not be a domain of the
    // pods' spread under Honor (the default): upstream counts only nodes passing the filter.
    let foreign = existing_node(
        "foreign",
        &[(ZONE, "test-zone-3")],
        &[("cpu", "0"), ("pods", "10")],
    );
    let mut p = pool("default");
    p.labels.insert("tier".into(), "web".into());
    p.requirements = vec![req(ZONE, "In", &["test-zone-1", "test-zone-2"])];
    let input = SchedulerInput {
        node_pools: vec![p],
        existing_nodes: vec![foreign],
        ..Default::default()
    };
    let run = |policy: Option<&str>| {
        let tsc = TopologySpreadConstraint {
            max_skew: 1,
            topology_key: ZONE.into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(selector(&[("app", "a")])),
            node_affinity_policy: policy.map(str::to_string),
            ..Default::default()
        };
        solve_input(
            input.clone(),
            &app(4, || {
                pod()
                    .labels(&[("app", "a")])
                    .node_selector(&[("tier", "web")])
                    .spread_with(tsc.clone())
            }),
        )
    };
    for policy in [None, Some("Honor")] {
        let r = run(policy);
        assert!(
            r.unschedulable.is_empty(),
            "{policy:?}: {:?}",
            r.unschedulable
        );
        assert_eq!(sorted_counts(&zone_counts(&r, |_| true)), vec![2, 2]);
    }
    // Ignore: the empty third zone holds the others to a skew of one each.
    let r = run(Some("Ignore"));
    assert_eq!(r.unschedulable.len(), 2, "{:?}", r.unschedulable);
}

#[test]
fn topology_spread_not_limited_by_preferred_node_affinity() {
    let r = solve(
        vec![pool("default")],
        &app(3, || {
            zonal_a().preferred_term(10, vec![nsr(ZONE, "In", &["test-zone-1"])])
        }),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    assert_eq!(sorted_counts(&zone_counts(&r, |_| true)), vec![1, 1, 1]);
}

#[test]
fn pod_affinity_respects_arch_affinity_and_self_affinity_on_hostname() {
    let mut ps = pods(vec![
        pod()
            .labels(&[("security", "s2")])
            .node_selector(&[(ARCH, "arm64")]),
    ]);
    ps.extend(pods(vec![pod().affinity_to(ARCH, &[("security", "s2")])]));
    let r = solve(vec![pool("default")], &ps);
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    let c1 = claim_of(&r, 1).unwrap();
    assert!(claim_allows(&r, c1, ARCH, "arm64") && !claim_allows(&r, c1, ARCH, "amd64"));
    // Self-affinity on hostname: all on the first node.
    let r = solve(
        vec![pool("default")],
        &app(3, || {
            pod()
                .labels(&[("app", "a")])
                .affinity_to(HOSTNAME, &[("app", "a")])
        }),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn pod_affinity_allows_two_nodes_when_matching_affinities_have_incompatible_selectors() {
    let mk = |zone: &str| {
        pod()
            .labels(&[("app", "a")])
            .node_selector(&[(ZONE, zone)])
            .affinity_to(ZONE, &[("app", "a")])
    };
    let r = solve(
        vec![pool("default")],
        &pods(vec![mk("test-zone-1"), mk("test-zone-2")]),
    );
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    assert_eq!(r.new_node_claims.len(), 2);
}

#[test]
fn pod_anti_affinity_does_not_violate_arch() {
    let r = solve(
        vec![pool("default")],
        &app(3, || {
            pod()
                .labels(&[("app", "a")])
                .node_selector(&[(ARCH, "arm64")])
                .anti_affinity_to(ARCH, &[("app", "a")])
        }),
    );
    assert_eq!(r.unschedulable.len(), 2, "one arm64 domain");
}

#[test]
fn preferred_pod_anti_affinity_of_existing_pods_is_not_enforced_inversely() {
    let mut node = existing_node(
        "n1",
        &[(ZONE, "test-zone-1")],
        &[("cpu", "0"), ("pods", "10")],
    );
    node.pods = shared(pods(vec![
        pod()
            .labels(&[("app", "guard")])
            .preferred_anti_affinity_to(10, ZONE, &[("app", "web")]),
    ]));
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        existing_nodes: vec![node],
        ..Default::default()
    };
    let r = solve_input(
        input,
        &pods(vec![
            pod()
                .labels(&[("app", "web")])
                .node_selector(&[(ZONE, "test-zone-1")]),
        ]),
    );
    assert!(scheduled(&r, 0), "{}", explanation(&r, 0));
}

#[test]
fn pod_affinity_handles_multiple_dependent_affinities() {
    // c → b → a by hostname; queued largest first (c), resolved over retries.
    let ps = pods(vec![
        pod().labels(&[("app", "a")]).requests(&[("cpu", "100m")]),
        pod()
            .labels(&[("app", "b")])
            .requests(&[("cpu", "200m")])
            .affinity_to(HOSTNAME, &[("app", "a")]),
        pod()
            .labels(&[("app", "c")])
            .requests(&[("cpu", "300m")])
            .affinity_to(HOSTNAME, &[("app", "b")]),
    ]);
    let r = solve(vec![pool("default")], &ps);
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn pod_affinity_fails_to_schedule_pods_with_unsatisfiable_dependencies() {
    // db keeps web off its host; web needs db's host.
    let ps = pods(vec![
        pod()
            .labels(&[("type", "db")])
            .anti_affinity_to(HOSTNAME, &[("type", "web")]),
        pod()
            .labels(&[("type", "web")])
            .affinity_to(HOSTNAME, &[("type", "db")]),
    ]);
    let r = solve(vec![pool("default")], &ps);
    assert!(scheduled(&r, 0));
    assert!(!scheduled(&r, 1));
}

#[test]
fn pod_affinity_with_empty_namespace_selector_matches_all_namespaces() {
    let mut ps = pods(vec![pod().namespace("other").labels(&[("app", "db")])]);
    ps.extend(pods(vec![pod().affinity_term(PodAffinityTerm {
        topology_key: HOSTNAME.into(),
        label_selector: Some(selector(&[("app", "db")])),
        namespace_selector: Some(Default::default()),
        ..Default::default()
    })]));
    let r = solve(vec![pool("default")], &ps);
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    assert_eq!(claim_of(&r, 0), claim_of(&r, 1));
}

#[test]
fn taints_nodepool_taints_on_claims_and_no_taints_from_tolerations() {
    let mut p = pool("default");
    p.taints = vec![taint("dedicated", Some("x"), "NoSchedule")];
    let r = solve(
        vec![p],
        &pods(vec![pod().tolerate(toleration("", "Exists", None, None))]),
    );
    assert!(scheduled(&r, 0));
    assert_eq!(
        r.new_node_claims[0].taints,
        vec![taint("dedicated", Some("x"), "NoSchedule")]
    );
}

#[test]
fn topology_pvc_with_min_domains_three_spreads_across_three_zones() {
    use karpenter_core::scheduling::VolumeInput;
    let tsc = TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(selector(&[("app", "a")])),
        min_domains: Some(3),
        ..Default::default()
    };
    let input = SchedulerInput {
        node_pools: vec![pool("default")],
        volumes: VolumeInput {
            claims: (0..3)
                .map(|i| claim(&format!("data-{i}"), Some("gp3"), None))
                .collect(),
            storage_classes: vec![storage_class(
                "gp3",
                "ebs.csi.aws.com",
                &ZONES,
                "WaitForFirstConsumer",
            )],
            ..Default::default()
        },
        ..Default::default()
    };
    let ps = pods(
        (0..3)
            .map(|i| {
                pod()
                    .labels(&[("app", "a")])
                    .pvc(&format!("data-{i}"))
                    .spread_with(tsc.clone())
            })
            .collect(),
    );
    let r = solve_input(input, &ps);
    assert!(r.unschedulable.is_empty(), "{:?}", r.unschedulable);
    assert_eq!(sorted_counts(&zone_counts(&r, |_| true)), vec![1, 1, 1]);
}
