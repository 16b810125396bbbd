//! §7.2 topology: spread, pod affinity and anti-affinity.

use k8s_openapi::api::core::v1::{PodAffinityTerm, TopologySpreadConstraint};
use karpenter_core::scheduling::SchedulerInput;

use crate::fixtures::*;

fn app(n: usize, builder: impl Fn() -> P) -> Vec<k8s_openapi::api::core::v1::Pod> {
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
    node.pods = app(2, || pod().labels(&[("app", "a")]));
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
    node.pods = app(1, || pod().labels(&[("app", "a")]));
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
    node.pods = pods(vec![
        pod()
            .labels(&[("app", "guard")])
            .anti_affinity_to(ZONE, &[("app", "web")]),
    ]);
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
