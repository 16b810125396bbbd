//! The harness's kube-scheduler: it binds the workload's pending pods to initialized Nodes,
//! keeping each kind's constraint, so the controller sees its pods bound as on a cluster.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use karpenter_api::well_known as wk;
use karpenter_core::resources::{Quantity, ResourceList};

use crate::workload::{Deployment, Kind};

/// Requests or free room: millicores, bytes (in millis, as [`Quantity`]) and pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Room {
    cpu: i64,
    memory: i64,
    pods: i64,
}

impl Room {
    fn from_list(list: &ResourceList) -> Self {
        Room {
            cpu: list.get("cpu").millis(),
            memory: list.get("memory").millis(),
            pods: list.get("pods").units_ceil(),
        }
    }

    fn fits(&self, requests: &Room) -> bool {
        requests.cpu <= self.cpu && requests.memory <= self.memory && requests.pods <= self.pods
    }

    fn take(&mut self, requests: &Room) {
        self.cpu = self.cpu.saturating_sub(requests.cpu);
        self.memory = self.memory.saturating_sub(requests.memory);
        self.pods = self.pods.saturating_sub(requests.pods);
    }
}

/// One pod as the harness's scheduler sees it.
pub(crate) struct BenchPod {
    pub(crate) name: String,
    pub(crate) deployment: usize,
    pub(crate) requests: Room,
    pub(crate) node: Option<String>,
}

/// An initialized, schedulable Node and what the harness bound to it.
pub(crate) struct BenchNode {
    zone: String,
    free: Room,
    /// Pods per deployment.
    pods_of: BTreeMap<usize, usize>,
}

impl BenchNode {
    fn count(&self, deployment: usize) -> usize {
        self.pods_of.get(&deployment).copied().unwrap_or(0)
    }
}

fn node_is_schedulable(node: &Node) -> bool {
    let initialized = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(wk::NODE_INITIALIZED_LABEL))
        .is_some_and(|v| v == "true");
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.effect != "PreferNoSchedule"));
    initialized && !tainted && node.metadata.deletion_timestamp.is_none()
}

/// Where one deployment's next pod may go, worked out once per pod rather than per node.
enum Allowed {
    Anywhere,
    /// At most this many pods of the deployment already on the node.
    AtMostHere(usize),
    InZones(BTreeSet<String>),
}

/// kube-scheduler, as far as this workload needs: resources, the five kinds' constraints
/// (maxSkew 1 over the domains of the known nodes), best fit by cpu.
pub(crate) struct Binder {
    deployments: Vec<Deployment>,
    pub(crate) pods: Vec<BenchPod>,
    pub(crate) nodes: BTreeMap<String, BenchNode>,
    /// The zone a zonal-affinity deployment landed in.
    affinity_zone: BTreeMap<usize, String>,
    pub(crate) unbound: usize,
}

impl Binder {
    pub(crate) fn new(deployments: Vec<Deployment>, pods: Vec<BenchPod>) -> Self {
        let unbound = pods.len();
        Binder {
            deployments,
            pods,
            nodes: BTreeMap::new(),
            affinity_zone: BTreeMap::new(),
            unbound,
        }
    }

    /// Adds Nodes that became schedulable; true when there are new ones.
    pub(crate) fn refresh_nodes(&mut self, nodes: Vec<Node>) -> bool {
        let mut added = false;
        for node in nodes.into_iter().filter(node_is_schedulable) {
            let Some(name) = node.metadata.name.clone() else {
                continue;
            };
            if self.nodes.contains_key(&name) {
                continue;
            }
            let zone = node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(wk::ZONE_LABEL))
                .cloned()
                .unwrap_or_default();
            let Some(free) = node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| ResourceList::from_k8s(a).ok())
            else {
                continue;
            };
            self.nodes.insert(
                name,
                BenchNode {
                    zone,
                    free: Room::from_list(&free),
                    pods_of: BTreeMap::new(),
                },
            );
            added = true;
        }
        added
    }

    #[cfg(test)]
    fn count_in_zone(&self, deployment: usize, zone: &str) -> usize {
        self.nodes
            .values()
            .filter(|n| n.zone == zone)
            .map(|n| n.count(deployment))
            .sum()
    }

    fn allowed(&self, deployment: usize) -> Allowed {
        match self.deployments[deployment].kind {
            Kind::Generic => Allowed::Anywhere,
            Kind::HostnameAntiAffinity => Allowed::AtMostHere(0),
            Kind::ZonalAffinity => match self.affinity_zone.get(&deployment) {
                Some(zone) => Allowed::InZones(BTreeSet::from([zone.clone()])),
                None => Allowed::Anywhere,
            },
            Kind::HostnameSpread => Allowed::AtMostHere(
                self.nodes
                    .values()
                    .map(|n| n.count(deployment))
                    .min()
                    .unwrap_or(0),
            ),
            Kind::ZonalSpread => {
                let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
                for node in self.nodes.values() {
                    *per_zone.entry(node.zone.as_str()).or_default() += node.count(deployment);
                }
                let min = per_zone.values().copied().min().unwrap_or(0);
                Allowed::InZones(
                    per_zone
                        .into_iter()
                        .filter(|(_, count)| *count <= min)
                        .map(|(zone, _)| zone.to_string())
                        .collect(),
                )
            }
        }
    }

    /// Chooses nodes for unbound pods (constrained deployments first, then the largest);
    /// returns (pod, node) for each pod placed.
    pub(crate) fn plan(&mut self) -> Vec<(usize, String)> {
        let mut order: Vec<usize> = (0..self.pods.len())
            .filter(|&i| self.pods[i].node.is_none())
            .collect();
        order.sort_by_key(|&i| {
            let kind = self.deployments[self.pods[i].deployment].kind;
            (
                kind == Kind::Generic,
                std::cmp::Reverse(self.pods[i].requests.cpu),
            )
        });
        let mut chosen = Vec::new();
        // Nodes only fill up during a plan: a deployment's pod that found no node means its
        // next replicas (same requests, same constraint) will not either.
        let mut stuck = BTreeSet::new();
        for i in order {
            let (d, requests) = (self.pods[i].deployment, self.pods[i].requests);
            if stuck.contains(&d) {
                continue;
            }
            let allowed = self.allowed(d);
            let best = self
                .nodes
                .iter()
                .filter(|(_, node)| {
                    node.free.fits(&requests)
                        && match &allowed {
                            Allowed::Anywhere => true,
                            Allowed::AtMostHere(max) => node.count(d) <= *max,
                            Allowed::InZones(zones) => zones.contains(&node.zone),
                        }
                })
                .min_by_key(|(_, node)| node.free.cpu)
                .map(|(name, _)| name.clone());
            let Some(name) = best else {
                stuck.insert(d);
                continue;
            };
            if let Some(node) = self.nodes.get_mut(&name) {
                node.free.take(&requests);
                *node.pods_of.entry(d).or_default() += 1;
                if self.deployments[d].kind == Kind::ZonalAffinity {
                    self.affinity_zone
                        .entry(d)
                        .or_insert_with(|| node.zone.clone());
                }
            }
            self.pods[i].node = Some(name.clone());
            self.unbound -= 1;
            chosen.push((i, name));
        }
        chosen
    }
}

/// A pod of the deployment's requests.
pub(crate) fn requests(deployment: &Deployment) -> anyhow::Result<Room> {
    Ok(Room {
        cpu: Quantity::parse(deployment.cpu)?.millis(),
        memory: Quantity::parse(deployment.memory)?.millis(),
        pods: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(zone: &str, cpu: i64) -> BenchNode {
        BenchNode {
            zone: zone.to_string(),
            free: Room {
                cpu: cpu * 1000,
                memory: Quantity::from_gibibytes(64).millis(),
                pods: 100,
            },
            pods_of: BTreeMap::new(),
        }
    }

    fn binder(kind: Kind, replicas: usize) -> Binder {
        let deployment = Deployment {
            name: "d".into(),
            kind,
            replicas,
            cpu: "1",
            memory: "1Gi",
        };
        let requests = requests(&deployment).unwrap();
        let pods = (0..replicas)
            .map(|i| BenchPod {
                name: format!("p{i}"),
                deployment: 0,
                requests,
                node: None,
            })
            .collect();
        let mut binder = Binder::new(vec![deployment], pods);
        for (name, zone) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
            binder.nodes.insert(name.into(), node(zone, 8));
        }
        binder
    }

    #[test]
    fn the_binder_keeps_each_kinds_constraint() {
        let mut anti = binder(Kind::HostnameAntiAffinity, 4);
        let placed = anti.plan();
        let nodes: BTreeSet<&str> = placed.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!((placed.len(), nodes.len(), anti.unbound), (3, 3, 1));

        let mut affinity = binder(Kind::ZonalAffinity, 6);
        let placed = affinity.plan();
        let zones: BTreeSet<String> = placed
            .iter()
            .map(|(_, n)| affinity.nodes[n].zone.clone())
            .collect();
        assert_eq!(zones.len(), 1);
        assert_eq!(placed.len(), 6);

        let mut spread = binder(Kind::ZonalSpread, 4);
        spread.plan();
        assert_eq!(spread.count_in_zone(0, "a"), 2);
        assert_eq!(spread.count_in_zone(0, "b"), 2);
    }
}
