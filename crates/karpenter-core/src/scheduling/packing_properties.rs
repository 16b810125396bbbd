//! Properties of both packing policies on random workloads over a synthetic c/m/r catalogue:
//! every plan passes a checker written here from the pods and types alone (not the scheduler's
//! own checks), `CostOptimal` never costs more than `Upstream`, places every pod `Upstream`
//! places, and no plan costs less than the lower bound.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Affinity, PodAffinityTerm, PodAntiAffinity};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use karpenter_api::well_known;
use proptest::prelude::*;

use super::packing_workloads::deployment_pod;
use super::{
    NewNodeClaim, PackingPolicy, Scheduler, SchedulerInput, SchedulerOptions, SchedulingNodePool,
    SchedulingResults,
};
use crate::instance_type::{InstanceType, Offering};
use crate::pod::Pod;
use crate::resources::{Quantity, ResourceList};

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// Families (name, GiB per cpu, USD per cpu-hour) × sizes × two architectures (arm 20 % cheaper).
fn catalogue() -> Vec<Arc<InstanceType>> {
    let mut out = Vec::new();
    for (family, gib_per_cpu, per_cpu) in [("c", 2, 0.0425), ("m", 4, 0.048), ("r", 8, 0.063)] {
        for (arch, discount) in [("amd64", 1.0), ("arm64", 0.8)] {
            for cpu in [2i64, 4, 8, 16, 32, 64] {
                let name = format!("{family}{}.{cpu}x", if arch == "arm64" { "g" } else { "" });
                let price = per_cpu * discount * cpu as f64;
                let mut capacity = ResourceList::new();
                capacity.set("cpu", Quantity::from_units(cpu));
                capacity.set("memory", Quantity::from_gibibytes(gib_per_cpu * cpu));
                capacity.set("pods", Quantity::from_units(8 * cpu + 10));
                out.push(Arc::new(InstanceType {
                    name: name.clone(),
                    labels: BTreeMap::from([
                        (well_known::INSTANCE_TYPE_LABEL.to_string(), name),
                        (well_known::ARCH_LABEL.to_string(), arch.to_string()),
                        (well_known::OS_LABEL.to_string(), "linux".to_string()),
                    ]),
                    capacity,
                    overhead: Default::default(),
                    offerings: ZONES
                        .iter()
                        .map(|zone| Offering {
                            zone: zone.to_string(),
                            capacity_type: "on-demand".to_string(),
                            price,
                            available: true,
                            reservation_id: None,
                            reservation_capacity: None,
                        })
                        .collect(),
                    ..Default::default()
                }));
            }
        }
    }
    out
}

/// A Deployment of the random workload.
#[derive(Clone, Debug)]
struct Deployment {
    cpu_millis: i64,
    memory_mib: i64,
    replicas: usize,
    amd64_only: bool,
    zone_spread: bool,
    one_per_node: bool,
}

fn deployment() -> impl Strategy<Value = Deployment> {
    (
        prop::sample::select(vec![100i64, 250, 500, 1000, 2000, 4000]),
        1i64..16,
        1usize..30,
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(cpu_millis, gib_per_cpu_x2, replicas, amd64_only, zone_spread, one_per_node)| {
                Deployment {
                    cpu_millis,
                    memory_mib: (cpu_millis * gib_per_cpu_x2 * 512 / 1000).max(64),
                    replicas,
                    amd64_only,
                    zone_spread,
                    one_per_node,
                }
            },
        )
}

fn pods_of(deployments: &[Deployment]) -> Vec<Arc<Pod>> {
    let mut out = Vec::new();
    for (i, d) in deployments.iter().enumerate() {
        let app = format!("app-{i}");
        // The generated workloads' pod (requests, zone spread), plus what this test adds.
        let mut pod = deployment_pod(&app, d.cpu_millis, d.memory_mib, d.zone_spread);
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_selector = d.amd64_only.then(|| {
                Arc::new(BTreeMap::from([(
                    well_known::ARCH_LABEL.to_string(),
                    "amd64".to_string(),
                )]))
            });
            spec.affinity = d
                .one_per_node
                .then(|| Affinity {
                    pod_anti_affinity: Some(PodAntiAffinity {
                        required_during_scheduling_ignored_during_execution: Some(vec![
                            PodAffinityTerm {
                                topology_key: well_known::HOSTNAME_LABEL.to_string(),
                                label_selector: Some(LabelSelector {
                                    match_labels: Some(BTreeMap::from([(
                                        "app".to_string(),
                                        app.clone(),
                                    )])),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            },
                        ]),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .map(Arc::new);
        }
        out.extend(std::iter::repeat_n(Arc::new(pod), d.replicas));
    }
    out
}

fn input(policy: PackingPolicy) -> SchedulerInput {
    SchedulerInput {
        node_pools: vec![SchedulingNodePool {
            name: "default".to_string(),
            instance_types: catalogue(),
            ..Default::default()
        }],
        options: SchedulerOptions {
            packing_policy: policy,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The single value a NodeClaim requires for `key`, if it pins one.
fn pinned<'a>(claim: &'a NewNodeClaim, key: &str) -> Option<&'a str> {
    claim
        .requirements
        .iter()
        .find(|r| r.key == key && r.operator == "In" && r.values.len() == 1)
        .map(|r| r.values.first().unwrap_or_default())
}

/// Checks `results` against the pods' and types' own numbers; returns what is violated.
fn violations(
    results: &SchedulingResults,
    deployments: &[Deployment],
    pods: &[Arc<Pod>],
) -> Vec<String> {
    let types: HashMap<String, Arc<InstanceType>> = catalogue()
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect();
    // Pod index → its deployment.
    let owner: Vec<usize> = deployments
        .iter()
        .enumerate()
        .flat_map(|(i, d)| std::iter::repeat_n(i, d.replicas))
        .collect();
    let mut problems = Vec::new();
    let mut placed = vec![0usize; pods.len()];
    let mut per_zone: HashMap<(usize, String), i64> = HashMap::new();
    for claim in &results.new_node_claims {
        let Some(option) = claim.instance_types.first() else {
            problems.push(format!("{}: no instance type", claim.hostname));
            continue;
        };
        let Some(ty) = types.get(&*option.name) else {
            problems.push(format!("{}: unknown type {}", claim.hostname, option.name));
            continue;
        };
        let (mut cpu, mut memory) = (0i64, 0i64);
        let mut apps_here: HashMap<usize, usize> = HashMap::new();
        for &p in &claim.pods {
            placed[p] += 1;
            let d = &deployments[owner[p]];
            cpu += d.cpu_millis;
            memory += d.memory_mib;
            *apps_here.entry(owner[p]).or_default() += 1;
            let arch = ty.labels.get(well_known::ARCH_LABEL).map(String::as_str);
            if d.amd64_only && arch != Some("amd64") {
                problems.push(format!("{}: amd64 pod on {}", claim.hostname, ty.name));
            }
            if d.zone_spread {
                match pinned(claim, well_known::ZONE_LABEL) {
                    Some(zone) => *per_zone.entry((owner[p], zone.to_string())).or_default() += 1,
                    None => problems.push(format!("{}: spread pod, zone open", claim.hostname)),
                }
            }
        }
        let capacity = ty.allocatable();
        if cpu > capacity.get("cpu").millis() {
            problems.push(format!("{}: cpu {cpu}m on {}", claim.hostname, ty.name));
        }
        if memory * 1024 * 1024 > capacity.get("memory").units_ceil() {
            problems.push(format!(
                "{}: memory {memory}Mi on {}",
                claim.hostname, ty.name
            ));
        }
        if claim.pods.len() as i64 > capacity.get("pods").units_ceil() {
            problems.push(format!(
                "{}: {} pods on {}",
                claim.hostname,
                claim.pods.len(),
                ty.name
            ));
        }
        for (app, count) in apps_here {
            if deployments[app].one_per_node && count > 1 {
                problems.push(format!("{}: {count} replicas of app-{app}", claim.hostname));
            }
        }
    }
    for (app, d) in deployments.iter().enumerate() {
        if !d.zone_spread {
            continue;
        }
        let counts: Vec<i64> = ZONES
            .iter()
            .map(|z| per_zone.get(&(app, z.to_string())).copied().unwrap_or(0))
            .collect();
        let (min, max) = (
            counts.iter().min().copied().unwrap_or(0),
            counts.iter().max().copied().unwrap_or(0),
        );
        if max - min > 1 {
            problems.push(format!("app-{app}: zones {counts:?} skew above 1"));
        }
    }
    if placed.iter().any(|&n| n > 1) {
        problems.push("a pod placed twice".to_string());
    }
    problems
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn both_policies_plan_within_every_constraint_and_cost_optimal_is_never_dearer(
        deployments in prop::collection::vec(deployment(), 1..12),
    ) {
        let pods = pods_of(&deployments);
        let upstream = Scheduler::new(input(PackingPolicy::Upstream)).solve(&pods);
        // The default policy (CostOptimal since issue 35) against upstream's greedy.
        let optimal = Scheduler::new(input(PackingPolicy::default())).solve(&pods);
        for (name, results) in [("Upstream", &upstream), ("default", &optimal)] {
            let problems = violations(results, &deployments, &pods);
            prop_assert!(problems.is_empty(), "{name}: {problems:?}");
        }
        // Every pod upstream places, the default places.
        for unplaced in &optimal.unschedulable {
            prop_assert!(
                upstream.unschedulable.iter().any(|u| u.pod == unplaced.pod),
                "pod {} placed by Upstream, not by the default", unplaced.pod
            );
        }
        prop_assert!(
            optimal.new_node_claims_cost() <= upstream.new_node_claims_cost() + 1e-9,
            "{} > {}",
            optimal.new_node_claims_cost(),
            upstream.new_node_claims_cost()
        );
        let bound = Scheduler::new(input(PackingPolicy::Upstream)).cost_lower_bound(&pods, &optimal);
        prop_assert!(bound.total <= optimal.new_node_claims_cost() + 1e-9);
    }
}

#[test]
fn cost_optimal_sizes_nodes_where_upstream_takes_the_largest() {
    // 40 pods of 1 cpu / 2 GiB: upstream grows one claim to a 64-cpu type; the bound buys c
    // capacity for 40 cpu, which CostOptimal matches within a few nodes' rounding.
    let deployments = vec![Deployment {
        cpu_millis: 1000,
        memory_mib: 1536,
        replicas: 40,
        amd64_only: false,
        zone_spread: false,
        one_per_node: false,
    }];
    let pods = pods_of(&deployments);
    let upstream = Scheduler::new(input(PackingPolicy::Upstream)).solve(&pods);
    let optimal = Scheduler::new(input(PackingPolicy::CostOptimal)).solve(&pods);
    let bound = Scheduler::new(input(PackingPolicy::Upstream))
        .cost_lower_bound(&pods, &optimal)
        .total;
    let ratio = optimal.new_node_claims_cost() / bound;
    assert!(optimal.unschedulable.is_empty());
    assert!(
        optimal.new_node_claims_cost() < upstream.new_node_claims_cost(),
        "{} vs {}",
        optimal.new_node_claims_cost(),
        upstream.new_node_claims_cost()
    );
    assert!(ratio <= 1.1, "ratio {ratio}");
    assert!(violations(&optimal, &deployments, &pods).is_empty());
}
