//! Upstream's scheduling benchmark workload (karpenter-core reference §6), shared by
//! `karpenter bench scheduling` and the criterion benches. Pure data generation: callers time it.
//!
//! * 400 synthetic instance types `fake-it-0..399`: type i has cpu i+1, memory 2(i+1) Gi,
//!   pods 10(i+1), 100m/10Mi kube-reserved, five offerings (spot in zones 1–2, on-demand in 1–3)
//!   priced 0.1·cpu + 0.1·memory GB; labels `size` (large when cpu > 4 and memory > 8Gi),
//!   `special` (large only), `integer` (= cpu).
//! * One NodePool `default` with limits cpu 10,000,000 and memory 10,000,000Gi, label
//!   `testing/cluster: unspecified`.
//! * The "diverse" mix (five equal parts: generic, zonal spread, hostname spread, zonal
//!   self-affinity, hostname anti-affinity) and the 4,000 identical "preference" pods.
//!
//! Random choices use a seeded SplitMix64 rather than Go's `math/rand` stream, so the pod mix has
//! upstream's distribution but not its exact sequence; the invariant nodes = pods / 5 holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::pod::{Container, PodSpec};
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PodAffinity,
    PodAffinityTerm, PodAntiAffinity, PreferredSchedulingTerm, ResourceRequirements,
    TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use karpenter_api::well_known;

pub use crate::pod::Pod;

use super::{PreferencePolicy, SchedulerInput, SchedulerOptions, SchedulingNodePool};
use crate::instance_type::{InstanceType, Offering, Overhead};
use crate::resources::{Quantity, ResourceList};

/// Labels the fake instance types carry that the benchmark registers as well-known.
pub const FAKE_LABELS: [&str; 3] = ["size", "special", "integer"];
pub const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// SplitMix64: tiny, seeded, deterministic.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// `count` fake instance types as upstream's `fake.InstanceTypes(count)`.
pub fn instance_types(count: usize) -> Vec<InstanceType> {
    (0..count)
        .map(|i| {
            let cpu = (i + 1) as i64;
            let memory = Quantity::from_gibibytes(2 * cpu);
            let price = 0.1 * cpu as f64 + 0.1 * (memory.units_ceil() as f64) / 1e9;
            let large = cpu > 4 && memory > Quantity::from_gibibytes(8);
            let mut labels = BTreeMap::from([
                (
                    well_known::INSTANCE_TYPE_LABEL.to_string(),
                    format!("fake-it-{i}"),
                ),
                (well_known::ARCH_LABEL.to_string(), "amd64".to_string()),
                (well_known::OS_LABEL.to_string(), "linux".to_string()),
                (
                    "size".to_string(),
                    if large { "large" } else { "small" }.to_string(),
                ),
                ("integer".to_string(), cpu.to_string()),
            ]);
            if large {
                labels.insert("special".to_string(), "optional".to_string());
            }
            let offering = |zone: &str, capacity_type: &str| Offering {
                zone: zone.to_string(),
                capacity_type: capacity_type.to_string(),
                price,
                available: true,
                reservation_id: None,
                reservation_capacity: None,
            };
            let mut capacity = ResourceList::new();
            capacity.set("cpu", Quantity::from_units(cpu));
            capacity.set("memory", memory);
            capacity.set("pods", Quantity::from_units(10 * cpu));
            let mut kube_reserved = ResourceList::new();
            kube_reserved.set("cpu", Quantity::from_millis(100));
            kube_reserved.set("memory", Quantity::from_mebibytes(10));
            InstanceType {
                name: format!("fake-it-{i}"),
                labels,
                capacity,
                overhead: Overhead {
                    kube_reserved,
                    ..Default::default()
                },
                offerings: vec![
                    offering(ZONES[0], "spot"),
                    offering(ZONES[1], "spot"),
                    offering(ZONES[0], "on-demand"),
                    offering(ZONES[1], "on-demand"),
                    offering(ZONES[2], "on-demand"),
                ],
                ..Default::default()
            }
        })
        .collect()
}

/// The benchmark NodePool with `instance_types(400)`.
pub fn node_pool() -> SchedulingNodePool {
    let mut limits = ResourceList::new();
    limits.set("cpu", Quantity::from_units(10_000_000));
    limits.set("memory", Quantity::from_gibibytes(10_000_000));
    SchedulingNodePool {
        name: "default".to_string(),
        labels: BTreeMap::from([("testing/cluster".to_string(), "unspecified".to_string())]),
        limits,
        instance_types: instance_types(400).into_iter().map(Arc::new).collect(),
        ..Default::default()
    }
}

/// A fresh scheduler input for the benchmark (no existing nodes, no daemonsets).
pub fn scheduler_input(policy: PreferencePolicy) -> SchedulerInput {
    SchedulerInput {
        node_pools: vec![node_pool()],
        options: SchedulerOptions {
            preference_policy: policy,
            extra_well_known_labels: FAKE_LABELS.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Pod cpu requests of the mix (upstream's values).
pub const CPUS: [&str; 5] = ["100m", "250m", "500m", "1000m", "1500m"];
/// Pod memory requests of the mix (upstream's values).
pub const MEMORIES: [&str; 6] = ["100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi"];
const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];

fn pod(name: String, labels: &[(&str, &str)], cpu: &str, memory: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some("default".to_string()),
            uid: Some(name),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .chain([("testing/cluster".to_string(), "unspecified".to_string())])
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".to_string(),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([
                        ("cpu".to_string(), K8sQuantity(cpu.to_string())),
                        ("memory".to_string(), K8sQuantity(memory.to_string())),
                    ])),
                    ..Default::default()
                }),
                ..Default::default()
            }]
            .into(),
            ..Default::default()
        }),
        status: None,
    }
}

fn selector(key: &str, value: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        ..Default::default()
    })
}

fn spread(key: &str, value: &str) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.to_string(),
        when_unsatisfiable: "DoNotSchedule".to_string(),
        label_selector: selector("my-label", value),
        ..Default::default()
    }
}

fn affinity_term(key: &str, label: &str, value: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        topology_key: key.to_string(),
        label_selector: selector(label, value),
        ..Default::default()
    }
}

/// Upstream's `makeDiversePods(n)`: ⌊n/5⌋ of each kind in order, then the remainder generic.
pub fn diverse_pods(n: usize, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let k = n / 5;
    let mut pods = Vec::with_capacity(n);
    let next = |rng: &mut Rng, kind: usize, i: usize| -> Pod {
        let cpu = rng.pick(&CPUS);
        let memory = rng.pick(&MEMORIES);
        let name = format!("pod-{kind}-{i}");
        match kind {
            0 => {
                let v = rng.pick(&LABEL_VALUES);
                pod(name, &[("my-label", v)], cpu, memory)
            }
            1 | 2 => {
                let v = rng.pick(&LABEL_VALUES);
                let sel = rng.pick(&LABEL_VALUES);
                let key = if kind == 1 {
                    well_known::ZONE_LABEL
                } else {
                    well_known::HOSTNAME_LABEL
                };
                let mut p = pod(name, &[("my-label", v)], cpu, memory);
                if let Some(spec) = p.spec.as_mut() {
                    spec.topology_spread_constraints = Some(vec![spread(key, sel)].into());
                }
                p
            }
            3 => {
                let v = rng.pick(&LABEL_VALUES);
                let mut p = pod(name, &[("my-affininity", v)], cpu, memory);
                if let Some(spec) = p.spec.as_mut() {
                    spec.affinity = Some(Arc::new(Affinity {
                        pod_affinity: Some(PodAffinity {
                            required_during_scheduling_ignored_during_execution: Some(vec![
                                affinity_term(well_known::ZONE_LABEL, "my-affininity", v),
                            ]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }));
                }
                p
            }
            _ => {
                let mut p = pod(name, &[("app", "nginx")], cpu, memory);
                if let Some(spec) = p.spec.as_mut() {
                    spec.affinity = Some(Arc::new(Affinity {
                        pod_anti_affinity: Some(PodAntiAffinity {
                            required_during_scheduling_ignored_during_execution: Some(vec![
                                affinity_term(well_known::HOSTNAME_LABEL, "app", "nginx"),
                            ]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }));
                }
                p
            }
        }
    };
    for kind in 0..5 {
        for i in 0..k {
            pods.push(next(&mut rng, kind, i));
        }
    }
    for i in 0..(n - 5 * k) {
        pods.push(next(&mut rng, 0, k + i));
    }
    pods
}

/// Upstream's `makePreferencePods(n)`: identical pods (one random size) with a satisfiable
/// preferred zone, an unsatisfiable-beyond-3 preferred zonal anti-affinity (weight 10) and a
/// preferred hostname anti-affinity (weight 1).
pub fn preference_pods(n: usize, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let cpu = rng.pick(&CPUS);
    let memory = rng.pick(&MEMORIES);
    (0..n)
        .map(|i| {
            let mut p = pod(format!("pref-{i}"), &[("app", "nginx")], cpu, memory);
            if let Some(spec) = p.spec.as_mut() {
                spec.affinity = Some(Arc::new(Affinity {
                    node_affinity: Some(NodeAffinity {
                        preferred_during_scheduling_ignored_during_execution: Some(vec![
                            PreferredSchedulingTerm {
                                weight: 1,
                                preference: NodeSelectorTerm {
                                    match_expressions: Some(vec![NodeSelectorRequirement {
                                        key: well_known::ZONE_LABEL.to_string(),
                                        operator: "In".to_string(),
                                        values: Some(vec![ZONES[0].to_string()]),
                                    }]),
                                    ..Default::default()
                                },
                            },
                        ]),
                        ..Default::default()
                    }),
                    pod_anti_affinity: Some(PodAntiAffinity {
                        preferred_during_scheduling_ignored_during_execution: Some(vec![
                            WeightedPodAffinityTerm {
                                weight: 10,
                                pod_affinity_term: affinity_term(
                                    well_known::ZONE_LABEL,
                                    "app",
                                    "nginx",
                                ),
                            },
                            WeightedPodAffinityTerm {
                                weight: 1,
                                pod_affinity_term: affinity_term(
                                    well_known::HOSTNAME_LABEL,
                                    "app",
                                    "nginx",
                                ),
                            },
                        ]),
                        ..Default::default()
                    }),
                    ..Default::default()
                }));
            }
            p
        })
        .collect()
}
