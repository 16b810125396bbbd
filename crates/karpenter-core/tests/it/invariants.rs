//! Property tests: whatever the pods, pools and instance types, the scheduler's output is sound.

use std::collections::BTreeMap;

use karpenter_core::instance_type::InstanceType;
use karpenter_core::resources::Quantity;
use karpenter_core::scheduling::{SchedulerInput, SchedulingNodePool};
use karpenter_core::taints;
use proptest::prelude::*;

use crate::fixtures::*;

#[derive(Clone, Debug)]
struct PodSpec {
    cpu_millis: i64,
    memory_mib: i64,
    zone: Option<usize>,
    tolerate: bool,
    spread: bool,
}

#[derive(Clone, Debug)]
struct PoolSpec {
    tainted: bool,
    cpu_limit: Option<i64>,
    types: Vec<(i64, i64)>,
}

fn arb_pod() -> impl Strategy<Value = PodSpec> {
    (
        1i64..40,
        1i64..64,
        prop::option::of(0usize..3),
        any::<bool>(),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(cpu, mem, zone, tolerate, spread)| PodSpec {
            cpu_millis: cpu * 100,
            memory_mib: mem * 128,
            zone: if spread { None } else { zone },
            tolerate,
            spread,
        })
}

fn arb_pool() -> impl Strategy<Value = PoolSpec> {
    (
        any::<bool>(),
        prop::option::of(2i64..40),
        prop::collection::vec((1i64..8, 1i64..16), 1..5),
    )
        .prop_map(|(tainted, cpu_limit, types)| PoolSpec {
            tainted,
            cpu_limit,
            types,
        })
}

fn build_pool(i: usize, spec: &PoolSpec) -> SchedulingNodePool {
    let types: Vec<InstanceType> = spec
        .types
        .iter()
        .enumerate()
        .map(|(t, (cpu, gib))| {
            instance_type(
                &format!("p{i}-t{t}"),
                "amd64",
                "linux",
                &[
                    ("cpu", &cpu.to_string()),
                    ("memory", &format!("{gib}Gi")),
                    ("pods", "8"),
                ],
            )
        })
        .collect();
    let mut pool = SchedulingNodePool {
        name: format!("pool-{i}"),
        weight: i as i32,
        instance_types: types.into_iter().map(std::sync::Arc::new).collect(),
        ..Default::default()
    };
    if spec.tainted {
        pool.taints = vec![taint("dedicated", Some("x"), "NoSchedule")];
    }
    if let Some(limit) = spec.cpu_limit {
        pool.limits = rl(&[("cpu", &limit.to_string())]);
    }
    pool
}

fn build_pod(spec: &PodSpec) -> karpenter_core::pod::Pod {
    let mut p = pod().requests(&[
        ("cpu", &format!("{}m", spec.cpu_millis)),
        ("memory", &format!("{}Mi", spec.memory_mib)),
    ]);
    if let Some(z) = spec.zone {
        p = p.node_selector(&[(ZONE, ZONES[z])]);
    }
    if spec.tolerate {
        p = p.tolerate(toleration(
            "dedicated",
            "Equal",
            Some("x"),
            Some("NoSchedule"),
        ));
    }
    if spec.spread {
        p = p.labels(&[("app", "spread")]).spread(
            ZONE,
            1,
            "DoNotSchedule",
            Some(selector(&[("app", "spread")])),
        );
    }
    p.build()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn placements_are_sound(pod_specs in prop::collection::vec(arb_pod(), 1..30), pool_specs in prop::collection::vec(arb_pool(), 1..3)) {
        let pools: Vec<SchedulingNodePool> = pool_specs.iter().enumerate().map(|(i, s)| build_pool(i, s)).collect();
        let pods: Vec<_> = pod_specs.iter().map(build_pod).collect();
        let r = solve_input(SchedulerInput { node_pools: pools.clone(), ..Default::default() }, &pods);

        // Every pod is either placed exactly once or explained.
        for p in 0..pods.len() {
            let placed = r.new_node_claims.iter().filter(|c| c.pods.contains(&p)).count();
            let failed = r.unschedulable.iter().filter(|u| u.pod == p).count();
            prop_assert_eq!(placed + failed, 1, "pod {}", p);
            if failed == 1 {
                prop_assert!(!r.unschedulable.iter().find(|u| u.pod == p).unwrap().explanation.is_empty());
            }
        }

        let mut limit_use: BTreeMap<String, Quantity> = BTreeMap::new();
        let mut spread_zone_counts: BTreeMap<String, usize> = ZONES.iter().map(|z| (z.to_string(), 0)).collect();
        for (ci, c) in r.new_node_claims.iter().enumerate() {
            let pool = pools.iter().find(|p| p.name == c.node_pool).unwrap();
            prop_assert!(!c.instance_types.is_empty());
            // Fits: the claim's requests fit every instance-type option's allocatable.
            for o in c.instance_types.iter() {
                let it = pool.instance_types.iter().find(|t| *t.name == *o.name).unwrap();
                prop_assert!(it.allocatable().fits(&c.requests), "{} requests {:?} on {}", ci, c.requests, o.name);
            }
            // Constraints hold: zone selectors within the claim's zones, taints tolerated.
            for &p in &c.pods {
                let spec = &pod_specs[p];
                if let Some(z) = spec.zone {
                    prop_assert!(claim_allows(&r, ci, ZONE, ZONES[z]));
                }
                let tolerations = pods[p].spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
                prop_assert!(taints::first_untolerated(&tolerations, &c.taints).is_none());
                if spec.spread {
                    let zone = claim_value(&r, ci, ZONE);
                    prop_assert!(zone.is_some(), "a DoNotSchedule zonal spread pins the zone");
                    *spread_zone_counts.get_mut(&zone.unwrap()).unwrap() += 1;
                }
            }
            // Worst case the largest option launches.
            let max_cpu = c.instance_types.iter()
                .map(|o| pool.instance_types.iter().find(|t| *t.name == *o.name).unwrap().capacity.get("cpu"))
                .max().unwrap();
            *limit_use.entry(c.node_pool.clone()).or_default() += max_cpu;
        }
        // NodePool limits are never exceeded.
        for pool in &pools {
            if pool.limits.contains("cpu") {
                let used = limit_use.get(&pool.name).copied().unwrap_or_default();
                prop_assert!(used <= pool.limits.get("cpu"), "{} used {} limit {}", pool.name, used, pool.limits.get("cpu"));
            }
        }
        // maxSkew 1 is never exceeded for DoNotSchedule.
        let max = spread_zone_counts.values().max().copied().unwrap_or(0);
        let min = spread_zone_counts.values().min().copied().unwrap_or(0);
        prop_assert!(max - min <= 1, "{:?}", spread_zone_counts);
    }
}
