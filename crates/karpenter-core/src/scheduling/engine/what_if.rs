//! One engine reused for many "what if these nodes were gone?" solves.
//!
//! Consolidation asks, for every candidate of a pass, whether its pods fit elsewhere. Building
//! the engine (compiling every bound pod, counting it in every topology group) costs as much as
//! the cluster is large, so a fresh solve per question makes a pass over 1,000 nodes quadratic.
//! A [`WhatIf`] builds the engine once, over every node and every pod any question may move;
//! then, per question, it takes the named nodes away (with the topology counts of their bound
//! pods and the domains only they provide), sets the pools' usage, places the pods asked for,
//! and takes all of that back: placements on nodes, topology counts (a journal), pool limits,
//! NodeClaims. The answer is the one a fresh solve over the same cluster without those nodes
//! gives (a property test in `disruption::simulate` compares them).

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap};

use crate::pod::Pod;

use super::solve::build;
use super::{Engine, PendingPod};
use crate::resources::ResourceList;
use crate::scheduling::{PackingPolicy, SchedulerInput, SchedulingResults};

/// An engine over a cluster and the pods that may have to move, answering many solves.
pub struct WhatIf<P> {
    engine: Engine,
    infos: Vec<PendingPod>,
    pods: Vec<P>,
    node_at: HashMap<String, usize>,
}

impl<P: Borrow<Pod>> WhatIf<P> {
    /// Builds the engine over `input` for `pods` (every pod a later [`solve`](Self::solve) may
    /// place, in the order solves will list them).
    pub fn new(input: &SchedulerInput, pods: Vec<P>) -> Self {
        let (engine, infos) = build(input, &pods);
        let node_at = engine
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        WhatIf {
            engine,
            infos,
            pods,
            node_at,
        }
    }

    /// The pods given to [`new`](Self::new).
    pub fn pods(&self) -> &[P] {
        &self.pods
    }

    /// Places the pods at `order` (ascending indices into [`pods`](Self::pods)) on the cluster
    /// without the nodes named in `without` (unknown names are ignored), with `usage` as the
    /// named NodePools' usage. The results refer to pods by their position in `order`. The
    /// engine is left as it was built.
    pub fn solve(
        &mut self,
        without: &BTreeSet<String>,
        usage: &[(String, ResourceList)],
        order: &[usize],
    ) -> SchedulingResults {
        // The policy the scheduler input names, as a fresh solve would take it.
        let policy = self.engine.options.packing_policy;
        self.solve_as(without, usage, order, policy)
    }

    /// [`solve`](Self::solve) under `policy` instead of the input's (the engine's build does
    /// not depend on it, only the trial does).
    pub fn solve_as(
        &mut self,
        without: &BTreeSet<String>,
        usage: &[(String, ResourceList)],
        order: &[usize],
        policy: PackingPolicy,
    ) -> SchedulingResults {
        debug_assert!(order.windows(2).all(|w| w[0] < w[1]), "order ascends");
        let gone: Vec<usize> = without
            .iter()
            .filter_map(|n| self.node_at.get(n).copied())
            .collect();
        let engine = &mut self.engine;
        for &ni in &gone {
            engine.take_away(ni);
        }
        let limits = engine.save_limits();
        for (pool, usage) in usage {
            engine.set_usage(pool, usage);
        }
        let results = match policy {
            PackingPolicy::Upstream => engine.trial(&self.infos, &self.pods, order),
            PackingPolicy::CostOptimal => engine.cost_optimal_trial(&self.infos, &self.pods, order),
        };
        engine.restore_limits(limits);
        for &ni in &gone {
            engine.give_back(ni);
        }
        results
    }
}

/// Each pool's limits' remaining amounts (and the `nodes` limit's), to restore after a solve.
type SavedLimits = Vec<(Vec<i64>, Option<i64>)>;

impl Engine {
    /// Node `ni` leaves the cluster: nothing lands on it, its bound pods no longer count in
    /// any topology group, and the domains its labels name lose it as a provider.
    fn take_away(&mut self, ni: usize) {
        let node = &mut self.nodes[ni];
        if node.gone {
            return;
        }
        node.gone = true;
        self.room.set(ni, None);
        for &(gid, d) in &node.bound_counts {
            if let Some(g) = self.topology.groups.get_mut(gid) {
                g.unrecord(d);
            }
        }
        for (k, r) in node.reqs.iter() {
            if let [v] = r.values() {
                self.topology.remove_provider(*k, *v, node.taint_set);
            }
        }
    }

    /// Undoes [`take_away`](Self::take_away).
    fn give_back(&mut self, ni: usize) {
        let node = &mut self.nodes[ni];
        if !node.gone {
            return;
        }
        node.gone = false;
        self.room.set(ni, Some(&node.remaining));
        for &(gid, d) in &node.bound_counts {
            if let Some(g) = self.topology.groups.get_mut(gid) {
                g.record(d);
            }
        }
        for (k, r) in node.reqs.iter() {
            if let [v] = r.values() {
                self.topology.add_domain(*k, *v, node.taint_set);
            }
        }
    }

    pub(super) fn save_limits(&self) -> SavedLimits {
        self.pools
            .iter()
            .map(|p| {
                (
                    p.limits.iter().map(|l| l.remaining).collect(),
                    p.nodes_limit.as_ref().map(|l| l.remaining),
                )
            })
            .collect()
    }

    pub(super) fn restore_limits(&mut self, saved: SavedLimits) {
        for (pool, (limits, nodes)) in self.pools.iter_mut().zip(saved) {
            for (l, remaining) in pool.limits.iter_mut().zip(limits) {
                l.remaining = remaining;
            }
            if let (Some(l), Some(remaining)) = (pool.nodes_limit.as_mut(), nodes) {
                l.remaining = remaining;
            }
        }
    }

    /// What is left of `pool`'s limits when it uses `usage` (as the engine's setup derives it).
    fn set_usage(&mut self, pool: &str, usage: &ResourceList) {
        for p in self.pools.iter_mut().filter(|p| p.name == pool) {
            for l in p.limits.iter_mut().chain(p.nodes_limit.as_mut()) {
                l.remaining = l.limit.saturating_sub(usage.get(&l.name).millis());
            }
        }
    }
}
