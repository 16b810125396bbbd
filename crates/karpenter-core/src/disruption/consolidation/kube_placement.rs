//! Where the kube-scheduler will put the pods a command moves, as opposed to where the
//! simulation planned them.
//!
//! A command launches its replacements, waits for them to be Ready, then drains its candidates.
//! The evicted pods come back as new pods, and the kube-scheduler places each on the feasible
//! node it scores best. Its default scoring (`NodeResourcesFit` with `LeastAllocated`, plus
//! `NodeResourcesBalancedAllocation`) prefers the emptiest node, not the bin the plan made for the
//! pod. With one replacement (upstream's rule) that does not matter: it was sized for all the
//! moved pods. With several replacements of different sizes it does: a small pod takes the empty
//! memory-rich node planned for a large one, the large pod then fits nowhere and gets a node of
//! its own, and the cluster ends up dearer than the command promised (measured on the real
//! control plane: upstream's basic consolidation went on for ~55 commands, most of them repairs
//! of the previous one's misplaced pods).
//!
//! So a command that splits its pods over several replacements must also hold them when the
//! kube-scheduler places them. The pods' order in the scheduler's queue is not ours to choose
//! (eviction and the ReplicaSet controller's re-creation interleave), so the check places them
//! in the two orders that stress a spreading scorer most: largest first and smallest first. Pods
//! of one shape fit in any order (every slot holds any of them), so splits of identical pods
//! always pass; mixed splits pass only when their bins leave room for the scheduler's choices.
//!
//! Feasibility is resources, the pod's `nodeSelector` against the labels the node has, and its
//! tolerations against the node's `NoSchedule`/`NoExecute` taints: the simulation already chose
//! destinations that satisfy the rest (topology, affinity, volumes).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::pod::Pod;
use crate::resources::ResourceList;
use crate::taints;

const CPU: &str = "cpu";
const MEMORY: &str = "memory";

/// A node the moved pods may land on: a destination the simulation used, or a replacement.
#[derive(Clone, Debug)]
pub(super) struct Destination {
    pub allocatable: ResourceList,
    /// Allocatable minus the requests of the pods (and daemons) already there.
    pub free: ResourceList,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

/// A pod the command moves (or a pending pod it places), with what the scheduler needs of it.
#[derive(Clone, Debug)]
pub(super) struct MovedPod {
    pub name: String,
    pub requests: ResourceList,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
}

impl MovedPod {
    pub fn new(pod: &Pod, requests: ResourceList) -> Self {
        let spec = pod.spec.as_ref();
        MovedPod {
            name: format!(
                "{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or("default"),
                pod.metadata.name.as_deref().unwrap_or("")
            ),
            requests,
            node_selector: spec
                .and_then(|s| s.node_selector.as_deref().cloned())
                .unwrap_or_default(),
            tolerations: spec.map(|s| s.tolerations().to_vec()).unwrap_or_default(),
        }
    }

    /// Same requests, selector and tolerations: interchangeable for the check.
    pub fn alike(&self, other: &MovedPod) -> bool {
        self.requests == other.requests
            && self.node_selector == other.node_selector
            && self.tolerations == other.tolerations
    }

    fn may_use(&self, node: &Destination) -> bool {
        let selected = self
            .node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k).is_none_or(|l| l == v));
        let tolerated = node
            .taints
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .all(|t| taints::tolerates(&self.tolerations, t));
        selected && tolerated
    }
}

/// The first pod (`namespace/name`) the kube-scheduler would leave without a node, placing
/// `pods` on `destinations` largest first, then smallest first; `None` when both orders place
/// every pod.
pub(super) fn first_left_over(pods: &[MovedPod], destinations: &[Destination]) -> Option<String> {
    let dense = Dense::new(pods, destinations);
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|&a, &b| {
        by_size(&pods[b], &pods[a]).then_with(|| pods[a].name.cmp(&pods[b].name))
    });
    if let Some(i) = dense.left_over(&order) {
        return Some(pods[i].name.clone());
    }
    order.reverse();
    dense.left_over(&order).map(|i| pods[i].name.clone())
}

fn by_size(a: &MovedPod, b: &MovedPod) -> Ordering {
    let key = |p: &MovedPod| {
        (
            p.requests.get(CPU).millis(),
            p.requests.get(MEMORY).millis(),
        )
    };
    key(a).cmp(&key(b))
}

/// The pods and nodes as rows of milli-units over the resources the pods request (CPU and
/// memory first), so each of the pods × nodes checks is a few integer comparisons.
struct Dense {
    /// Per pod: its requests.
    requests: Vec<Vec<i64>>,
    /// Per pod: the destinations its selector and tolerations allow.
    allowed: Vec<Vec<usize>>,
    /// Per destination: allocatable CPU and memory (for the score).
    allocatable: Vec<[i64; 2]>,
    /// Per destination: what is free before the pods land.
    free: Vec<Vec<i64>>,
}

impl Dense {
    fn new(pods: &[MovedPod], destinations: &[Destination]) -> Self {
        let mut names: Vec<&str> = vec![CPU, MEMORY];
        for pod in pods {
            for (name, _) in pod.requests.iter() {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        let row = |list: &ResourceList| -> Vec<i64> {
            names.iter().map(|n| list.get(n).millis()).collect()
        };
        Dense {
            requests: pods.iter().map(|p| row(&p.requests)).collect(),
            allowed: pods
                .iter()
                .map(|p| {
                    (0..destinations.len())
                        .filter(|&d| p.may_use(&destinations[d]))
                        .collect()
                })
                .collect(),
            allocatable: destinations
                .iter()
                .map(|d| {
                    [
                        d.allocatable.get(CPU).millis(),
                        d.allocatable.get(MEMORY).millis(),
                    ]
                })
                .collect(),
            free: destinations.iter().map(|d| row(&d.free)).collect(),
        }
    }

    /// Places the pods in `order` one at a time on the best-scoring feasible node (ties: the
    /// first), as the kube-scheduler does; the first pod with no feasible node.
    fn left_over(&self, order: &[usize]) -> Option<usize> {
        let mut free = self.free.clone();
        for &pod in order {
            let requests = &self.requests[pod];
            let mut best: Option<(usize, f64)> = None;
            for &d in &self.allowed[pod] {
                if free[d].iter().zip(requests).any(|(f, r)| f < r) {
                    continue;
                }
                let s = score(self.allocatable[d], &free[d], requests);
                if best.is_none_or(|(_, b)| s > b) {
                    best = Some((d, s));
                }
            }
            let Some((d, _)) = best else {
                return Some(pod);
            };
            for (f, r) in free[d].iter_mut().zip(requests) {
                *f = f.saturating_sub(*r);
            }
        }
        None
    }
}

/// The kube-scheduler's default resource score of a node after placing the pod (each 0–100,
/// weight 1): `LeastAllocated` (the mean free fraction of CPU and memory) plus
/// `BalancedAllocation` (100 × (1 − the standard deviation of the used fractions)). `free` and
/// `requests` start with CPU and memory.
fn score(allocatable: [i64; 2], free: &[i64], requests: &[i64]) -> f64 {
    let used_fraction = |r: usize| {
        let total = allocatable[r];
        if total <= 0 {
            return 1.0;
        }
        let used = total.saturating_sub(free[r]).saturating_add(requests[r]);
        (used as f64 / total as f64).clamp(0.0, 1.0)
    };
    let (cpu, memory) = (used_fraction(0), used_fraction(1));
    let least_allocated = 100.0 * (2.0 - cpu - memory) / 2.0;
    let balanced = 100.0 * (1.0 - (cpu - memory).abs() / 2.0);
    least_allocated + balanced
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn resources(cpu: &str, memory: &str) -> ResourceList {
        ResourceList::parse([("cpu", cpu), ("memory", memory)]).unwrap()
    }

    fn empty_node(cpu: &str, memory: &str) -> Destination {
        Destination {
            allocatable: resources(cpu, memory),
            free: resources(cpu, memory),
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }

    fn pod(name: &str, cpu: &str, memory: &str) -> MovedPod {
        MovedPod {
            name: name.into(),
            requests: resources(cpu, memory),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
        }
    }

    /// Upstream's basic consolidation: a 3.5-cpu/28Gi pod planned alone on a 4-cpu/32Gi node and
    /// four 0.9-cpu/3.1Gi pods on a 4-cpu/16Gi node. Smallest first, a small pod scores the
    /// memory-rich node best and takes it; the large pod then fits nowhere.
    #[test]
    fn a_small_pod_takes_the_node_planned_for_a_large_one() {
        let nodes = [empty_node("4", "32Gi"), empty_node("4", "16Gi")];
        let mut pods = vec![pod("default/large", "3500m", "28Gi")];
        for i in 0..4 {
            pods.push(pod(&format!("default/small-{i}"), "900m", "3100Mi"));
        }
        assert_eq!(
            first_left_over(&pods, &nodes).as_deref(),
            Some("default/large")
        );
        // Largest first alone would have placed them all.
        let dense = Dense::new(&pods, &nodes);
        assert_eq!(dense.left_over(&[0, 1, 2, 3, 4]), None);
        assert_eq!(dense.left_over(&[1, 0, 2, 3, 4]), Some(0));
    }

    /// Pods of one shape fill any set of bins that holds them, whatever the scorer prefers.
    #[test]
    fn pods_of_one_shape_always_fit_their_bins() {
        let nodes = [
            empty_node("4", "16Gi"),
            empty_node("2", "8Gi"),
            empty_node("4", "32Gi"),
        ];
        let pods: Vec<MovedPod> = (0..10)
            .map(|i| pod(&format!("default/p-{i}"), "1", "3Gi"))
            .collect();
        assert_eq!(first_left_over(&pods, &nodes), None);
        let eleven: Vec<MovedPod> = (0..11)
            .map(|i| pod(&format!("default/p-{i}"), "1", "3Gi"))
            .collect();
        assert!(first_left_over(&eleven, &nodes).is_some());
    }

    /// The scheduler's score prefers the emptier node, and among equally empty ones the one the
    /// pod leaves balanced.
    #[test]
    fn the_score_prefers_the_emptiest_balanced_node() {
        const GI: i64 = 1 << 30;
        let requests = [1000, 4 * GI * 1000];
        let big = [8000, 32 * GI * 1000];
        let half_used = [4000, 16 * GI * 1000];
        assert!(score(big, &big, &requests) > score(big, &half_used, &requests));
        let cpu_heavy = [8000, 8 * GI * 1000];
        assert!(score(big, &big, &requests) > score(cpu_heavy, &cpu_heavy, &requests));
    }

    /// A pod goes only where its node selector and tolerations allow.
    #[test]
    fn selectors_and_taints_limit_where_a_pod_may_go() {
        let mut arm = empty_node("4", "16Gi");
        arm.labels
            .insert("kubernetes.io/arch".into(), "arm64".into());
        let mut tainted = empty_node("4", "16Gi");
        tainted.taints.push(Taint {
            key: "dedicated".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
        let mut amd = pod("default/amd", "1", "1Gi");
        amd.node_selector
            .insert("kubernetes.io/arch".into(), "amd64".into());
        assert_eq!(
            first_left_over(std::slice::from_ref(&amd), &[arm.clone(), tainted.clone()]).as_deref(),
            Some("default/amd")
        );
        amd.tolerations.push(Toleration {
            key: Some("dedicated".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        });
        assert_eq!(first_left_over(&[amd], &[arm, tainted]), None);
    }
}
