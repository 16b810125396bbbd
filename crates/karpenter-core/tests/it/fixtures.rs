//! Builders mirroring upstream's test fixtures (fake instance types, `test.Pod`, `test.NodePool`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, CSIPersistentVolumeSource, ContainerPort, NodeAffinity, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PersistentVolumeSpec,
    PodAffinity, PodAffinityTerm, PodAntiAffinity, PreferredSchedulingTerm, ResourceRequirements,
    Taint, Toleration, TopologySelectorLabelRequirement, TopologySelectorTerm,
    TopologySpreadConstraint, VolumeNodeAffinity, WeightedPodAffinityTerm,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use karpenter_api::v1::NodeSelectorRequirementWithMinValues;
use karpenter_core::instance_type::{InstanceType, Offering, Overhead};
use karpenter_core::pod::{Container, Pod, PodSpec, PodStatus, Volume, append_shared};
use karpenter_core::resources::{Quantity, ResourceList};
use karpenter_core::scheduling::{
    ExistingNode, Scheduler, SchedulerInput, SchedulingNodePool, SchedulingResults,
};

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const CT: &str = "karpenter.sh/capacity-type";
pub const IT: &str = "node.kubernetes.io/instance-type";
pub const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

pub fn rl(pairs: &[(&str, &str)]) -> ResourceList {
    ResourceList::parse(pairs.iter().copied()).unwrap()
}

/// An instance type with upstream's five default offerings (spot z1,z2; on-demand z1,z2,z3),
/// priced 0.1/cpu + 0.1/GB (+1 per GPU).
pub fn instance_type(name: &str, arch: &str, os: &str, capacity: &[(&str, &str)]) -> InstanceType {
    let capacity = rl(capacity);
    let gpus = capacity
        .iter()
        .filter(|(k, _)| k.contains('/'))
        .map(|(_, q)| q.as_f64_units())
        .sum::<f64>();
    let price = 0.1 * capacity.get("cpu").as_f64_units()
        + 0.1 * capacity.get("memory").as_f64_units() / 1e9
        + gpus;
    let offerings = [
        ("spot", ZONES[0]),
        ("spot", ZONES[1]),
        ("on-demand", ZONES[0]),
        ("on-demand", ZONES[1]),
        ("on-demand", ZONES[2]),
    ]
    .iter()
    .map(|(ct, z)| Offering {
        zone: z.to_string(),
        capacity_type: ct.to_string(),
        price,
        available: true,
        ..Default::default()
    })
    .collect();
    InstanceType {
        name: name.to_string(),
        labels: BTreeMap::from([
            (IT.to_string(), name.to_string()),
            (ARCH.to_string(), arch.to_string()),
            (OS.to_string(), os.to_string()),
        ]),
        capacity,
        overhead: Overhead::default(),
        offerings,
        ..Default::default()
    }
}

/// Upstream's default fake instance types.
pub fn default_instance_types() -> Vec<InstanceType> {
    vec![
        instance_type(
            "default-instance-type",
            "amd64",
            "linux",
            &[("cpu", "4"), ("memory", "4Gi"), ("pods", "5")],
        ),
        instance_type(
            "small-instance-type",
            "amd64",
            "linux",
            &[("cpu", "2"), ("memory", "2Gi"), ("pods", "32")],
        ),
        instance_type(
            "gpu-vendor-instance-type",
            "amd64",
            "linux",
            &[
                ("cpu", "4"),
                ("memory", "4Gi"),
                ("pods", "32"),
                ("fake.com/vendor-a", "2"),
            ],
        ),
        instance_type(
            "arm-instance-type",
            "arm64",
            "linux",
            &[("cpu", "16"), ("memory", "128Gi"), ("pods", "32")],
        ),
        instance_type(
            "windows-instance-type",
            "amd64",
            "windows",
            &[("cpu", "4"), ("memory", "4Gi"), ("pods", "32")],
        ),
        instance_type(
            "single-pod-instance-type",
            "amd64",
            "linux",
            &[("cpu", "4"), ("memory", "4Gi"), ("pods", "1")],
        ),
    ]
}

pub fn pool(name: &str) -> SchedulingNodePool {
    SchedulingNodePool {
        name: name.to_string(),
        instance_types: default_instance_types()
            .into_iter()
            .map(std::sync::Arc::new)
            .collect(),
        ..Default::default()
    }
}

pub fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: op.to_string(),
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

pub fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(Into::into),
        effect: effect.into(),
        time_added: None,
    }
}

pub fn toleration(key: &str, op: &str, value: Option<&str>, effect: Option<&str>) -> Toleration {
    Toleration {
        key: (!key.is_empty()).then(|| key.to_string()),
        operator: Some(op.to_string()),
        value: value.map(Into::into),
        effect: effect.map(Into::into),
        toleration_seconds: None,
    }
}

pub fn nsr(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

pub fn selector(labels: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// A pod builder.
#[derive(Clone)]
pub struct P(pub Pod);

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub fn pod() -> P {
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    P(Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{n}")),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ..Default::default()
            }]
            .into(),
            ..Default::default()
        }),
        status: None,
    })
}

impl P {
    fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.get_or_insert_with(Default::default)
    }
    fn affinity(&mut self) -> &mut Affinity {
        Arc::make_mut(self.spec().affinity.get_or_insert_with(Default::default))
    }
    pub fn name(mut self, name: &str) -> Self {
        self.0.metadata.name = Some(name.into());
        self
    }
    pub fn namespace(mut self, ns: &str) -> Self {
        self.0.metadata.namespace = Some(ns.into());
        self
    }
    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        let map = self.0.metadata.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in labels {
            map.insert(k.to_string(), v.to_string());
        }
        self
    }
    pub fn requests(mut self, requests: &[(&str, &str)]) -> Self {
        let map: BTreeMap<String, K8sQuantity> = requests
            .iter()
            .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
            .collect();
        Arc::make_mut(&mut self.spec().containers)[0].resources = Some(ResourceRequirements {
            requests: Some(map),
            ..Default::default()
        });
        self
    }
    pub fn init_requests(mut self, requests: &[(&str, &str)]) -> Self {
        let map: BTreeMap<String, K8sQuantity> = requests
            .iter()
            .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
            .collect();
        append_shared(
            &mut self.spec().init_containers,
            Container {
                name: "init".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(map),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        self
    }
    pub fn overhead(mut self, overhead: &[(&str, &str)]) -> Self {
        self.spec().overhead = Some(
            overhead
                .iter()
                .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
                .collect(),
        );
        self
    }
    pub fn node_selector(mut self, labels: &[(&str, &str)]) -> Self {
        let map = Arc::make_mut(
            self.spec()
                .node_selector
                .get_or_insert_with(Default::default),
        );
        for (k, v) in labels {
            map.insert(k.to_string(), v.to_string());
        }
        self
    }
    /// Adds a required node-affinity term (terms are ORed).
    pub fn required_term(mut self, exprs: Vec<NodeSelectorRequirement>) -> Self {
        let na = self
            .affinity()
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        na.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector {
                node_selector_terms: Vec::new(),
            })
            .node_selector_terms
            .push(NodeSelectorTerm {
                match_expressions: Some(exprs),
                ..Default::default()
            });
        self
    }
    pub fn preferred_term(mut self, weight: i32, exprs: Vec<NodeSelectorRequirement>) -> Self {
        let na = self
            .affinity()
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        na.preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PreferredSchedulingTerm {
                weight,
                preference: NodeSelectorTerm {
                    match_expressions: Some(exprs),
                    ..Default::default()
                },
            });
        self
    }
    pub fn tolerate(mut self, t: Toleration) -> Self {
        append_shared(&mut self.spec().tolerations, t);
        self
    }
    pub fn spread(
        mut self,
        key: &str,
        max_skew: i32,
        unsat: &str,
        sel: Option<LabelSelector>,
    ) -> Self {
        append_shared(
            &mut self.spec().topology_spread_constraints,
            TopologySpreadConstraint {
                max_skew,
                topology_key: key.into(),
                when_unsatisfiable: unsat.into(),
                label_selector: sel,
                ..Default::default()
            },
        );
        self
    }
    pub fn spread_with(mut self, tsc: TopologySpreadConstraint) -> Self {
        append_shared(&mut self.spec().topology_spread_constraints, tsc);
        self
    }
    pub fn affinity_to(mut self, key: &str, sel: &[(&str, &str)]) -> Self {
        let pa = self
            .affinity()
            .pod_affinity
            .get_or_insert_with(PodAffinity::default);
        pa.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PodAffinityTerm {
                topology_key: key.into(),
                label_selector: Some(selector(sel)),
                ..Default::default()
            });
        self
    }
    pub fn affinity_term(mut self, term: PodAffinityTerm) -> Self {
        let pa = self
            .affinity()
            .pod_affinity
            .get_or_insert_with(PodAffinity::default);
        pa.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }
    pub fn preferred_affinity_to(mut self, weight: i32, key: &str, sel: &[(&str, &str)]) -> Self {
        let pa = self
            .affinity()
            .pod_affinity
            .get_or_insert_with(PodAffinity::default);
        pa.preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm {
                weight,
                pod_affinity_term: PodAffinityTerm {
                    topology_key: key.into(),
                    label_selector: Some(selector(sel)),
                    ..Default::default()
                },
            });
        self
    }
    pub fn anti_affinity_to(mut self, key: &str, sel: &[(&str, &str)]) -> Self {
        let pa = self
            .affinity()
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default);
        pa.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PodAffinityTerm {
                topology_key: key.into(),
                label_selector: Some(selector(sel)),
                ..Default::default()
            });
        self
    }
    pub fn preferred_anti_affinity_to(
        mut self,
        weight: i32,
        key: &str,
        sel: &[(&str, &str)],
    ) -> Self {
        let pa = self
            .affinity()
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default);
        pa.preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm {
                weight,
                pod_affinity_term: PodAffinityTerm {
                    topology_key: key.into(),
                    label_selector: Some(selector(sel)),
                    ..Default::default()
                },
            });
        self
    }
    pub fn host_port(mut self, port: i32) -> Self {
        Arc::make_mut(&mut self.spec().containers)[0]
            .ports
            .get_or_insert_with(Vec::new)
            .push(ContainerPort {
                container_port: port,
                host_port: Some(port),
                ..Default::default()
            });
        self
    }
    pub fn owned_by(mut self, kind: &str) -> Self {
        self.0
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(OwnerReference {
                api_version: "apps/v1".into(),
                kind: kind.into(),
                name: "owner".into(),
                uid: "owner-uid".into(),
                ..Default::default()
            });
        self
    }
    /// Mounts the persistent volume claim `claim` (in the pod's namespace).
    pub fn pvc(mut self, claim: &str) -> Self {
        let n = self.spec().volumes.as_ref().map_or(0, Vec::len);
        self.spec()
            .volumes
            .get_or_insert_with(Vec::new)
            .push(Volume {
                name: format!("vol-{n}"),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.into(),
                    read_only: None,
                }),
                ..Default::default()
            });
        self
    }
    pub fn phase(mut self, phase: &str) -> Self {
        self.0.status = Some(PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        self
    }
    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        self
    }
    pub fn build(self) -> Pod {
        self.0
    }
}

/// A PVC in `default`, bound to `volume` when given, else using `storage_class`.
pub fn claim(
    name: &str,
    storage_class: Option<&str>,
    volume: Option<&str>,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            annotations: volume.map(|_| {
                BTreeMap::from([(
                    "pv.kubernetes.io/bind-completed".to_string(),
                    "yes".to_string(),
                )])
            }),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            storage_class_name: storage_class.map(Into::into),
            volume_name: volume.map(Into::into),
            ..Default::default()
        }),
        status: None,
    }
}

/// A CSI persistent volume whose node affinity requires `zone In zones`.
pub fn zonal_volume(name: &str, driver: &str, zones: &[&str]) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: driver.into(),
                volume_handle: name.into(),
                ..Default::default()
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![nsr(ZONE, "In", zones)]),
                        ..Default::default()
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// A storage class of `provisioner` whose allowed topologies are `zone In zones` (none if empty).
pub fn storage_class(name: &str, provisioner: &str, zones: &[&str], binding: &str) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        provisioner: provisioner.into(),
        volume_binding_mode: Some(binding.into()),
        allowed_topologies: (!zones.is_empty()).then(|| {
            vec![TopologySelectorTerm {
                match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
                    key: ZONE.into(),
                    values: zones.iter().map(|z| z.to_string()).collect(),
                }]),
            }]
        }),
        ..Default::default()
    }
}

pub fn pods(builders: Vec<P>) -> Vec<Pod> {
    builders.into_iter().map(P::build).collect()
}

/// Bound pods as the cluster state shares them with the scheduler's input.
pub fn shared(pods: Vec<Pod>) -> Vec<std::sync::Arc<Pod>> {
    pods.into_iter().map(std::sync::Arc::new).collect()
}

pub fn solve(pools: Vec<SchedulingNodePool>, pods: &[Pod]) -> SchedulingResults {
    solve_input(
        SchedulerInput {
            node_pools: pools,
            ..Default::default()
        },
        pods,
    )
}

pub fn solve_input(input: SchedulerInput, pods: &[Pod]) -> SchedulingResults {
    Scheduler::new(input).solve(pods)
}

/// The NodeClaim index holding pod `p`, if any.
pub fn claim_of(results: &SchedulingResults, p: usize) -> Option<usize> {
    results
        .new_node_claims
        .iter()
        .position(|c| c.pods.contains(&p))
}

pub fn scheduled(results: &SchedulingResults, p: usize) -> bool {
    claim_of(results, p).is_some() || results.existing_nodes.iter().any(|n| n.pods.contains(&p))
}

/// The single value a claim's requirement pins for `key`, if pinned.
pub fn claim_value(results: &SchedulingResults, claim: usize, key: &str) -> Option<String> {
    let reqs = &results.new_node_claims[claim].requirements;
    let r = reqs.iter().find(|r| r.key == key && r.operator == "In")?;
    (r.values.len() == 1).then(|| r.values[0].to_string())
}

pub fn claim_allows(results: &SchedulingResults, claim: usize, key: &str, value: &str) -> bool {
    results.new_node_claims[claim]
        .requirements
        .iter()
        .filter(|r| r.key == key)
        .all(|r| match r.operator.as_str() {
            "In" => r.values.iter().any(|v| v == value),
            "NotIn" => r.values.iter().all(|v| v != value),
            "DoesNotExist" => false,
            _ => true,
        })
}

pub fn explanation(results: &SchedulingResults, p: usize) -> String {
    results
        .unschedulable
        .iter()
        .find(|u| u.pod == p)
        .map(|u| u.explanation.clone())
        .unwrap_or_default()
}

pub fn existing_node(
    name: &str,
    labels: &[(&str, &str)],
    allocatable: &[(&str, &str)],
) -> ExistingNode {
    let mut l: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    l.entry(HOSTNAME.to_string())
        .or_insert_with(|| name.to_string());
    ExistingNode {
        name: name.into(),
        labels: l,
        allocatable: rl(allocatable),
        capacity: rl(allocatable),
        initialized: true,
        ..Default::default()
    }
}

pub fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

/// Number of claims whose zone resolves to each zone.
pub fn zone_counts(
    results: &SchedulingResults,
    selected: impl Fn(usize) -> bool,
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (ci, c) in results.new_node_claims.iter().enumerate() {
        let n = c.pods.iter().filter(|p| selected(**p)).count();
        if n == 0 {
            continue;
        }
        let zone = claim_value(results, ci, ZONE).unwrap_or_else(|| "?".into());
        *counts.entry(zone).or_insert(0) += n;
    }
    counts
}
