//! "What if these nodes were gone?" (upstream `SimulateScheduling`, karpenter-core §4.10) for
//! drift and consolidation.
//!
//! Upstream rebuilds the scheduler's whole view of the cluster for every simulation, which is
//! why it evaluates only a few dozen candidates per pass on large clusters. Here the snapshot is
//! converted to the scheduler's input **once per pass** ([`Simulator::new`]); each simulation
//! copies that input, drops the candidates' nodes from it and re-derives only the usage of the
//! NodePools concerned, then places the pass's pending pods plus the candidates' pods.
//!
//! Methods that run several commands per pass (drift) [`commit`](Simulator::commit) each one, so
//! the next simulation no longer counts the committed nodes and sees the capacity their pods
//! took on the remaining nodes.
//!
//! Consolidation asks the same question for every candidate of a pass; it first
//! [`prepare`](Simulator::prepare)s the candidates, which builds one scheduler engine over the
//! whole cluster and every pod that may move ([`WhatIf`]), so each simulation costs only its own
//! placements instead of a rebuild of the cluster.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use crate::pod::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube_core::ResourceExt;

use super::candidates::Candidate;
use super::command::DisruptionInput;
use super::emptiness;
use super::rebalance::SpotPool;
use crate::nodepool;
use crate::pod;
use crate::provisioning::{
    Prepared as ProvisioningInput, Snapshot, reschedulable::is_reschedulable, solve,
};
use crate::resources::ResourceList;
use crate::scheduling::{ExistingNode, NewNodeClaim, PackingPolicy, SchedulingResults, WhatIf};

/// The pass's scheduler input, built once, and what has been committed so far.
pub struct Simulator<'a> {
    input: &'a DisruptionInput<'a>,
    prepared: ProvisioningInput,
    /// Pods every simulation places first: pending pods and pods of nodes already going away.
    base_pods: Vec<&'a Pod>,
    pdbs: Vec<&'a PodDisruptionBudget>,
    /// Nodes removed by committed commands.
    committed: BTreeSet<String>,
    /// Nodes that received pods in a committed simulation.
    destinations: BTreeSet<String>,
    /// The engine built once for the prepared candidates (see [`Simulator::prepare`]).
    prepared_candidates: Option<RefCell<Prepared<'a>>>,
    /// [`free_on`](Self::free_on)'s answers so far (cleared by a commit, which adds pods).
    free_on_nodes: RefCell<HashMap<String, Option<ResourceList>>>,
}

/// One engine over the cluster and the pods of the prepared candidates: the base pods first,
/// then each candidate's pods, in the order the candidates were prepared.
struct Prepared<'a> {
    what_if: WhatIf<&'a Pod>,
    base: usize,
    /// Candidate (Node name) → its pods' range in the engine's pods.
    ranges: BTreeMap<String, Range<usize>>,
}

/// The outcome of one simulation.
#[derive(Debug)]
pub struct Simulation<'a> {
    pub results: SchedulingResults,
    /// Index of the first candidate pod in the pods given to the scheduler (pods before it are
    /// pending or from already deleting nodes).
    pub first_candidate_pod: usize,
    /// Candidate pods that were simulated, in the order given to the scheduler.
    pub candidate_pods: Vec<&'a Pod>,
    /// Existing nodes (by name) that are not initialized yet.
    uninitialized: BTreeSet<String>,
}

impl Simulation<'_> {
    /// The first candidate pod left without a place, with the scheduler's explanation.
    pub fn first_unplaced_candidate_pod(&self) -> Option<String> {
        self.results
            .unschedulable
            .iter()
            .find(|u| u.pod >= self.first_candidate_pod)
            .map(|u| {
                let reason = u.explanation.lines().next().unwrap_or("no reason given");
                format!("{}/{}: {reason}", u.namespace, u.name)
            })
    }

    /// The first uninitialized existing node receiving a candidate pod (upstream: don't
    /// consolidate onto capacity that is not proven yet).
    pub fn uninitialized_destination(&self) -> Option<String> {
        self.results
            .existing_nodes
            .iter()
            .filter(|p| self.uninitialized.contains(&p.node))
            .find(|p| p.pods.iter().any(|&i| i >= self.first_candidate_pod))
            .map(|p| p.node.clone())
    }

    pub fn new_node_claims(&self) -> &[NewNodeClaim] {
        &self.results.new_node_claims
    }
}

impl<'a> Simulator<'a> {
    /// Converts the pass's snapshot (every NodePool with instance types) once.
    pub fn new(input: &'a DisruptionInput<'a>) -> Self {
        let mut snapshot = Snapshot::new(input.state, input.scheduler.clone(), input.now);
        for pool in input.state.nodepools() {
            if pool.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Some(types) = input.instance_types.get(&pool.name_any()) {
                snapshot = snapshot.offer(pool, types);
            }
        }
        let prepared = snapshot.scheduler_input();
        let base_pods = snapshot.pods_to_place();
        Simulator {
            input,
            prepared,
            base_pods,
            pdbs: input.state.pdbs().collect(),
            committed: BTreeSet::new(),
            destinations: BTreeSet::new(),
            prepared_candidates: None,
            free_on_nodes: RefCell::default(),
        }
    }

    /// [`new`](Self::new) for consolidation (upstream's `IsConsolidationSimulation`): the pods
    /// moved off the candidates may not land on existing nodes still under their NodePool's
    /// `consolidateAfter` window (pending pods and pods of nodes already going away may). Pools
    /// with `0s` or `Never` impose nothing. Drift simulates with [`new`](Self::new): a drifted
    /// node's pods may go anywhere.
    pub fn for_consolidation(input: &'a DisruptionInput<'a>) -> Self {
        let mut simulator = Self::new(input);
        let in_window: BTreeSet<String> = input
            .state
            .state_nodes()
            .iter()
            .filter_map(|n| {
                let pool = input.state.nodepool(n.nodepool()?)?;
                let at = emptiness::node_consolidatable_at(pool, n.nodeclaim?, n.node, &n.pods)?;
                (at > input.now).then(|| n.name())
            })
            .collect();
        for node in &mut simulator.prepared.input.existing_nodes {
            node.closed_to_moved_pods = in_window.contains(&node.name);
        }
        simulator.prepared.input.moved_pods_from = Some(simulator.base_pods.len());
        simulator
    }

    /// Builds one engine for simulations of these candidates (alone or together, in this
    /// order): [`run`](Self::run) then places only their pods instead of rebuilding the
    /// cluster. Simulations of other candidates, of candidates out of this order, or after a
    /// [`commit`](Self::commit), are built from scratch as before.
    pub fn prepare(&mut self, candidates: &[&Candidate<'a>]) {
        let mut pods = self.base_pods.clone();
        let base = pods.len();
        let mut ranges = BTreeMap::new();
        for candidate in candidates {
            let start = pods.len();
            pods.extend(self.pods_of(candidate));
            ranges.insert(candidate.name(), start..pods.len());
        }
        self.prepared_candidates = Some(RefCell::new(Prepared {
            what_if: WhatIf::new(&self.prepared.input, pods),
            base,
            ranges,
        }));
    }

    /// The pods of `candidate` the simulation must find a place for: reschedulable now (no
    /// do-not-disrupt, no fully blocking PDB) and not already planned for by the provisioner.
    pub fn pods_of(&self, candidate: &Candidate<'a>) -> Vec<&'a Pod> {
        candidate
            .pods
            .iter()
            .copied()
            .filter(|p| is_reschedulable(p, &self.pdbs, self.input.now))
            .filter(|p| {
                self.input
                    .state
                    .nomination(&pod::key(p), self.input.now)
                    .is_none()
            })
            .collect()
    }

    /// Free capacity (allocatable minus the requests of the pods already there) of every
    /// existing node, by name; `None` for a node with a pod whose requests cannot be read. An
    /// upper bound of where moved pods can go (uninitialized nodes included: the simulation
    /// itself explains why they may not take pods).
    pub fn free_capacity(&self) -> BTreeMap<String, Option<ResourceList>> {
        self.prepared
            .input
            .existing_nodes
            .iter()
            .map(|n| {
                let mut used = ResourceList::new();
                let mut readable = true;
                for p in &n.pods {
                    match pod::effective_requests(p) {
                        Ok(requests) => used.add(&requests),
                        Err(_) => readable = false,
                    }
                }
                let mut free = n.allocatable.clone();
                free.sub_floor_zero(&used);
                (n.name.clone(), readable.then_some(free))
            })
            .collect()
    }

    /// An existing node of the simulations (not removed by a committed command), by name.
    pub fn existing_node(&self, name: &str) -> Option<&ExistingNode> {
        self.prepared
            .input
            .existing_nodes
            .iter()
            .find(|n| n.name == name)
    }

    /// [`free_capacity`](Self::free_capacity) of one node, remembered for the pass: every
    /// consolidation command of a pass asks it again of the nodes its pods land on.
    pub fn free_on(&self, node: &ExistingNode) -> Option<ResourceList> {
        if let Some(free) = self.free_on_nodes.borrow().get(&node.name) {
            return free.clone();
        }
        let mut free = Some(node.allocatable.clone());
        for p in &node.pods {
            match (pod::effective_requests(p), free.as_mut()) {
                (Ok(requests), Some(f)) => f.sub_floor_zero(&requests),
                _ => free = None,
            }
        }
        self.free_on_nodes
            .borrow_mut()
            .insert(node.name.clone(), free.clone());
        free
    }

    /// The pod at index `i` of the pods `simulation` gave the scheduler: a base pod (pending,
    /// or of a node already going away) before its first candidate pod, a candidate's after.
    pub fn pod_at(&self, simulation: &Simulation<'a>, i: usize) -> Option<&'a Pod> {
        match i.checked_sub(simulation.first_candidate_pod) {
            None => self.base_pods.get(i).copied(),
            Some(j) => simulation.candidate_pods.get(j).copied(),
        }
    }

    /// Whether a committed command counts on this node (by Node name) to take pods: it must
    /// not go away in the same pass.
    pub fn is_destination(&self, node: &str) -> bool {
        self.destinations.contains(node)
    }

    /// Simulates the cluster without `candidates` (and without the committed ones).
    pub fn run(&self, candidates: &[&Candidate<'a>]) -> Simulation<'a> {
        let removed = self.removed_with(candidates);
        if let Some(simulation) = self.run_prepared(candidates, &removed, None) {
            return simulation;
        }
        self.run_fresh(candidates, &removed, None, None)
    }

    /// [`run`](Self::run) under another packing policy than the pass's: what the same pods
    /// give when packed as upstream packs them.
    pub fn run_with_policy(
        &self,
        candidates: &[&Candidate<'a>],
        policy: PackingPolicy,
    ) -> Simulation<'a> {
        let removed = self.removed_with(candidates);
        if let Some(simulation) = self.run_prepared(candidates, &removed, Some(policy)) {
            return simulation;
        }
        self.run_fresh(candidates, &removed, None, Some(policy))
    }

    /// `candidates`' Nodes and NodeClaims, and the committed ones.
    fn removed_with(&self, candidates: &[&Candidate<'a>]) -> BTreeSet<String> {
        candidates
            .iter()
            .flat_map(|c| [c.name(), c.nodeclaim.name_any()])
            .chain(self.committed.iter().cloned())
            .collect()
    }

    /// [`run`](Self::run) with `spot_pool`'s offering unavailable in every NodePool: where a
    /// node replaced on a spot rebalance recommendation may go (not back into its pool).
    pub fn run_away_from(
        &self,
        candidates: &[&Candidate<'a>],
        spot_pool: &SpotPool,
    ) -> Simulation<'a> {
        let removed = self.removed_with(candidates);
        self.run_fresh(candidates, &removed, Some(spot_pool), None)
    }

    /// A simulation built from the pass's input (no prepared engine).
    fn run_fresh(
        &self,
        candidates: &[&Candidate<'a>],
        removed: &BTreeSet<String>,
        hidden: Option<&SpotPool>,
        policy: Option<PackingPolicy>,
    ) -> Simulation<'a> {
        let mut scheduler_input = self.prepared.input.clone();
        if let Some(policy) = policy {
            scheduler_input.options.packing_policy = policy;
        }
        if let Some(spot_pool) = hidden {
            for pool in &mut scheduler_input.node_pools {
                pool.instance_types = spot_pool.hide_in(&pool.instance_types);
            }
        }
        scheduler_input
            .existing_nodes
            .retain(|n| !removed.contains(&n.name));
        let pools: BTreeSet<String> = candidates.iter().map(|c| c.nodepool_name()).collect();
        for pool in scheduler_input
            .node_pools
            .iter_mut()
            .filter(|p| pools.contains(&p.name))
        {
            pool.usage = nodepool::usage_without(self.input.state, &pool.name, removed);
        }
        let uninitialized = scheduler_input
            .existing_nodes
            .iter()
            .filter(|n| !n.initialized)
            .map(|n| n.name.clone())
            .collect();
        let candidate_pods: Vec<&Pod> = candidates.iter().flat_map(|c| self.pods_of(c)).collect();
        let mut pods: Vec<&Pod> = self.base_pods.clone();
        let first_candidate_pod = pods.len();
        pods.extend(candidate_pods.iter().copied());
        let results = solve(scheduler_input, &pods);
        Simulation {
            results,
            first_candidate_pod,
            candidate_pods,
            uninitialized,
        }
    }

    /// [`run`](Self::run) on the prepared engine, when the candidates were prepared (in this
    /// order) and nothing was committed since.
    fn run_prepared(
        &self,
        candidates: &[&Candidate<'a>],
        removed: &BTreeSet<String>,
        policy: Option<PackingPolicy>,
    ) -> Option<Simulation<'a>> {
        if !self.committed.is_empty() {
            return None;
        }
        let mut prepared = self.prepared_candidates.as_ref()?.borrow_mut();
        let mut order: Vec<usize> = (0..prepared.base).collect();
        for candidate in candidates {
            let range = prepared.ranges.get(&candidate.name())?;
            if order.last().is_some_and(|&last| range.start <= last) && !range.is_empty() {
                return None; // out of the prepared order: positions would not ascend
            }
            order.extend(range.clone());
        }
        // Usage only matters against limits; summing it walks every node of the cluster.
        let pools: BTreeSet<String> = candidates
            .iter()
            .filter(|c| {
                c.nodepool
                    .spec
                    .limits
                    .as_ref()
                    .is_some_and(|l| !l.is_empty())
            })
            .map(|c| c.nodepool_name())
            .collect();
        let usage: Vec<(String, ResourceList)> = pools
            .into_iter()
            .map(|pool| {
                let usage = nodepool::usage_without(self.input.state, &pool, removed);
                (pool, usage)
            })
            .collect();
        let results = match policy {
            Some(policy) => prepared.what_if.solve_as(removed, &usage, &order, policy),
            None => prepared.what_if.solve(removed, &usage, &order),
        };
        let candidate_pods = order[prepared.base..]
            .iter()
            .filter_map(|&i| prepared.what_if.pods().get(i))
            .copied()
            .collect();
        let uninitialized = self
            .prepared
            .input
            .existing_nodes
            .iter()
            .filter(|n| !n.initialized && !removed.contains(&n.name))
            .map(|n| n.name.clone())
            .collect();
        Some(Simulation {
            results,
            first_candidate_pod: prepared.base,
            candidate_pods,
            uninitialized,
        })
    }

    /// Records a command: its candidates' nodes are gone for later simulations, and every pod
    /// the simulation placed (the candidates' and pending ones) now has its place: on an
    /// existing node, whose capacity it uses from now on, or on one of the command's
    /// replacements. Later simulations place only what is still without one.
    pub fn commit(&mut self, candidates: &[&Candidate<'a>], simulation: &Simulation) {
        let removed: BTreeSet<String> = candidates
            .iter()
            .flat_map(|c| [c.name(), c.nodeclaim.name_any()])
            .collect();
        self.committed.extend(removed.iter().cloned());
        self.free_on_nodes.borrow_mut().clear();
        self.prepared
            .input
            .existing_nodes
            .retain(|n| !removed.contains(&n.name));
        let first = simulation.first_candidate_pod;
        let pod_at = |i: usize| -> Option<Pod> {
            if i < first {
                self.base_pods.get(i).map(|p| (*p).clone())
            } else {
                simulation
                    .candidate_pods
                    .get(i - first)
                    .map(|p| (*p).clone())
            }
        };
        let placed: BTreeMap<&str, Vec<Pod>> = simulation
            .results
            .existing_nodes
            .iter()
            .map(|p| {
                (
                    p.node.as_str(),
                    p.pods.iter().filter_map(|&i| pod_at(i)).collect(),
                )
            })
            .collect();
        for node in &mut self.prepared.input.existing_nodes {
            if let Some(pods) = placed.get(node.name.as_str()) {
                node.pods.extend(pods.iter().map(|p| Arc::new(p.clone())));
                if !pods.is_empty() {
                    self.destinations.insert(node.name.clone());
                }
            }
        }
        let housed: BTreeSet<usize> = simulation
            .results
            .existing_nodes
            .iter()
            .flat_map(|p| p.pods.iter().copied())
            .chain(
                simulation
                    .results
                    .new_node_claims
                    .iter()
                    .flat_map(|c| c.pods.iter().copied()),
            )
            .filter(|&i| i < first)
            .collect();
        let mut index = 0;
        self.base_pods.retain(|_| {
            let keep = !housed.contains(&index);
            index += 1;
            keep
        });
    }
}

#[cfg(test)]
mod tests;
