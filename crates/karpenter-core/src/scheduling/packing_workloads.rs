//! Generated workloads for measuring packing cost against the lower bound (`karpenter bench
//! packing`, the packing tests): Deployments of identical replicas, each Deployment drawing its
//! cpu request and its memory per cpu from the workload's profile, some spread across zones.
//! Pure data generation from a seed; callers build the NodePool (the real catalogue lives in
//! `karpenter-catalog`) and time the solves.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ResourceRequirements, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use karpenter_api::v1::NodeSelectorRequirementWithMinValues;
use karpenter_api::well_known;

use super::benchmark::Rng;
use super::{PackingPolicy, SchedulerInput, SchedulerOptions, SchedulingNodePool};
use crate::instance_type::InstanceType;
use crate::pod::{Container, Pod, PodSpec};

/// How a workload's Deployments are shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// 1–2 GiB per cpu.
    CpuHeavy,
    /// 6–16 GiB per cpu.
    MemoryHeavy,
    /// A third of each: cpu-heavy, 3–5 GiB per cpu, memory-heavy.
    Mixed,
}

/// One generated workload.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: &'static str,
    pub profile: Profile,
    pub pods: usize,
    /// Every `spread_every`-th Deployment spreads its replicas across zones (maxSkew 1,
    /// DoNotSchedule); 0: none.
    pub spread_every: usize,
    pub seed: u64,
}

/// The workloads `karpenter bench packing` reports and the packing tests hold to 1.05.
pub fn standard() -> Vec<Workload> {
    let w = |name, profile, pods, spread_every, seed| Workload {
        name,
        profile,
        pods,
        spread_every,
        seed,
    };
    vec![
        w("mixed-120", Profile::Mixed, 120, 0, 1),
        w("mixed-426", Profile::Mixed, 426, 0, 2),
        w("cpu-heavy-1500", Profile::CpuHeavy, 1500, 0, 3),
        w("memory-heavy-1000", Profile::MemoryHeavy, 1000, 0, 4),
        w("mixed-spread-3000", Profile::Mixed, 3000, 3, 5),
    ]
}

/// The NodePool the packing measurements use over `instance_types` (a catalogue's): on-demand
/// only, categories c, m and r, generation above 4 (as the issue measured).
pub fn node_pool(instance_types: Vec<Arc<InstanceType>>) -> SchedulingNodePool {
    let requirement =
        |key: &str, operator: &str, values: &[&str]| NodeSelectorRequirementWithMinValues {
            key: key.to_string(),
            operator: operator.to_string(),
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        };
    SchedulingNodePool {
        name: "default".to_string(),
        requirements: vec![
            requirement(well_known::CAPACITY_TYPE_LABEL, "In", &["on-demand"]),
            requirement(
                well_known::AWS_INSTANCE_CATEGORY_LABEL,
                "In",
                &["c", "m", "r"],
            ),
            requirement(well_known::AWS_INSTANCE_GENERATION_LABEL, "Gt", &["4"]),
        ],
        instance_types,
        ..Default::default()
    }
}

/// The scheduler input of a measurement: [`node_pool`] and one DaemonSet (a node agent asking
/// 100m and 128Mi) whose overhead every node pays.
pub fn scheduler_input(
    instance_types: Vec<Arc<InstanceType>>,
    packing_policy: PackingPolicy,
) -> SchedulerInput {
    let mut agent = deployment_pod("node-agent", 100, 128, false);
    agent.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".to_string(),
        kind: "DaemonSet".to_string(),
        name: "node-agent".to_string(),
        uid: "node-agent".to_string(),
        ..Default::default()
    }]);
    SchedulerInput {
        node_pools: vec![node_pool(instance_types)],
        daemonsets: vec![agent],
        options: SchedulerOptions {
            packing_policy,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Cpu requests a Deployment may take (millicores).
const CPU_MILLIS: [i64; 8] = [100, 250, 500, 750, 1000, 1500, 2000, 4000];

impl Workload {
    /// The pods: Deployments of 2–40 replicas until `pods` are made. Replicas of one Deployment
    /// share one `Arc<Pod>` (as `simulate` gives them).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        let mut rng = Rng::new(self.seed);
        let mut out = Vec::with_capacity(self.pods);
        let mut deployment = 0usize;
        while out.len() < self.pods {
            let replicas = (2 + rng.below(39)).min(self.pods - out.len());
            let cpu = CPU_MILLIS[rng.below(CPU_MILLIS.len())];
            let profile = match self.profile {
                Profile::Mixed => {
                    [Profile::CpuHeavy, Profile::Mixed, Profile::MemoryHeavy][deployment % 3]
                }
                other => other,
            };
            // Memory per cpu in MiB per core.
            let mib_per_cpu = match profile {
                Profile::CpuHeavy => 1024 + rng.below(1025) as i64,
                Profile::Mixed => 3072 + rng.below(2049) as i64,
                Profile::MemoryHeavy => 6144 + rng.below(10241) as i64,
            };
            let memory_mib = (cpu * mib_per_cpu / 1000).max(64);
            let spread = self.spread_every > 0 && deployment.is_multiple_of(self.spread_every);
            let pod = Arc::new(deployment_pod(
                &format!("{}-{deployment}", self.name),
                cpu,
                memory_mib,
                spread,
            ));
            out.extend(std::iter::repeat_n(pod, replicas));
            deployment += 1;
        }
        out
    }
}

pub(crate) fn deployment_pod(app: &str, cpu_millis: i64, memory_mib: i64, spread: bool) -> Pod {
    let labels = BTreeMap::from([("app".to_string(), app.to_string())]);
    Pod {
        metadata: ObjectMeta {
            name: Some(app.to_string()),
            namespace: Some("default".to_string()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".to_string(),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([
                        ("cpu".to_string(), K8sQuantity(format!("{cpu_millis}m"))),
                        ("memory".to_string(), K8sQuantity(format!("{memory_mib}Mi"))),
                    ])),
                    ..Default::default()
                }),
                ..Default::default()
            }]
            .into(),
            topology_spread_constraints: spread.then(|| {
                vec![TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: well_known::ZONE_LABEL.to_string(),
                    when_unsatisfiable: "DoNotSchedule".to_string(),
                    label_selector: Some(LabelSelector {
                        match_labels: Some(labels),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]
                .into()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_have_their_size_and_share_a_pod_per_deployment() {
        for w in standard() {
            let pods = w.pods();
            assert_eq!(pods.len(), w.pods, "{}", w.name);
            let distinct = pods
                .windows(2)
                .filter(|p| !Arc::ptr_eq(&p[0], &p[1]))
                .count();
            assert!(distinct < w.pods / 2, "{}: replicas share pods", w.name);
        }
        let again = standard()[0].pods();
        assert_eq!(again, standard()[0].pods(), "seeded: the same every time");
    }
}
