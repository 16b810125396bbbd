//! The provisioning pipeline shared by the controller's provisioner and `simulate` (and next by
//! consolidation):
//!
//! ```text
//! ClusterState + instance types per NodePool + policies   (Snapshot)
//!   → SchedulerInput                                        (Snapshot::scheduler_input)
//!   → solve                                                 (solve)
//!   → NodeClaim objects                                     (nodeclaim::build, static_nodeclaims)
//! ```
//!
//! Both callers build the same [`ClusterState`] (the controller from its watchers, `simulate`
//! from its manifests), so Nodes are joined, requests computed and NodeClaims built one way.
//!
//! * [`reschedulable`]: pods of deleting nodes that the pass plans capacity for.
//! * [`nodeclaim`]: the one NodeClaim builder.

pub mod nodeclaim;
pub mod reschedulable;

use std::borrow::{Borrow, Cow};
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;

use crate::pod::Pod;
use jiff::{SignedDuration, Timestamp};
use karpenter_api::{NodeClaim, NodePool};
use kube_core::ResourceExt;

use crate::instance_type::InstanceType;
use crate::nodepool;
use crate::scheduling::input::{self, InputError};
use crate::scheduling::{
    Scheduler, SchedulerInput, SchedulerOptions, SchedulingResults, VolumeInput,
};
use crate::state::{ClusterState, StateNode};

pub use crate::scheduling::{MinValuesPolicy, PreferencePolicy};

/// Upstream orders pools by weight (descending), ties by name descending.
pub fn weight_order(a: &NodePool, b: &NodePool) -> Ordering {
    b.spec
        .weight
        .unwrap_or(0)
        .cmp(&a.spec.weight.unwrap_or(0))
        .then_with(|| b.name_any().cmp(&a.name_any()))
}

/// NodePools the dynamic scheduler may add NodeClaims to: not deleting, not static
/// (`spec.replicas`), in weight order. Callers may filter further (validation, NodeClass
/// readiness).
pub fn dynamic_pools(state: &ClusterState) -> Vec<&NodePool> {
    let mut pools: Vec<&NodePool> = state
        .nodepools()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| nodepool::static_replicas(p).is_none())
        .collect();
    pools.sort_by(|a, b| weight_order(a, b));
    pools
}

/// The NodeClaims static NodePools miss: each non-deleting pool with `spec.replicas` gets up to
/// `replicas` active NodeClaims, never past its `limits.nodes`
/// ([`nodepool::static_capacity::to_provision`]); the missing ones are built from its template
/// ([`nodeclaim::build_static`]). Surplus NodeClaims are [`static_surplus`]'s.
pub fn static_nodeclaims(state: &ClusterState) -> Vec<NodeClaim> {
    let mut out = Vec::new();
    let mut pools: Vec<&NodePool> = state.nodepools().collect();
    pools.sort_by_key(|p| p.name_any());
    for pool in pools {
        let missing = nodepool::static_capacity::to_provision(state, pool);
        out.extend(std::iter::repeat_n(nodeclaim::build_static(pool), missing));
    }
    out
}

/// The NodeClaims to delete so every static NodePool holds no more than its `replicas`, pool by
/// pool in name order, each pool's in upstream's scale-down order
/// ([`nodepool::static_capacity::surplus`]).
pub fn static_surplus(state: &ClusterState, now: Timestamp) -> Vec<String> {
    let mut pools: Vec<&NodePool> = state.nodepools().collect();
    pools.sort_by_key(|p| p.name_any());
    pools
        .into_iter()
        .flat_map(|pool| nodepool::static_capacity::surplus(state, pool, now))
        .collect()
}

/// A NodePool offered to the scheduler with its NodeClass's instance types (from the
/// `CloudProvider`, shared, not copied per caller).
#[derive(Clone, Debug)]
pub struct PoolOffer<'a> {
    pub pool: &'a NodePool,
    pub instance_types: &'a [Arc<InstanceType>],
}

/// One pass's view of the cluster: the state, the NodePools with their instance types, the
/// policies, the time; plus nodes to leave out ([`Snapshot::without`]), which is how consolidation
/// asks "what if these nodes were gone" without copying the state.
#[derive(Clone, Debug)]
pub struct Snapshot<'a> {
    state: &'a ClusterState,
    pools: Vec<PoolOffer<'a>>,
    options: SchedulerOptions,
    now: Timestamp,
    unregistered_grace: Option<SignedDuration>,
    registration_failed: BTreeSet<String>,
    without: BTreeSet<String>,
}

/// The scheduler's input for a snapshot, and what had to be left out of it.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    pub input: SchedulerInput,
    /// Objects that could not be converted (a malformed quantity on a NodePool, Node or
    /// NodeClaim); they are left out and belong in the explanation of every unplaced pod.
    pub problems: Vec<InputError>,
    /// Nodes not counted as capacity because their registration is stuck.
    pub stuck_unregistered: Vec<String>,
}

impl<'a> Snapshot<'a> {
    /// `options` carries the policies (preference, minValues) chosen on the command line or in
    /// the settings.
    pub fn new(state: &'a ClusterState, options: SchedulerOptions, now: Timestamp) -> Self {
        Snapshot {
            state,
            pools: Vec::new(),
            options,
            now,
            unregistered_grace: None,
            registration_failed: BTreeSet::new(),
            without: BTreeSet::new(),
        }
    }

    /// Offers `pool` with its instance types. Pools are tried in weight order whatever the order
    /// they are offered in; a static pool is never offered to the dynamic scheduler.
    pub fn offer(mut self, pool: &'a NodePool, instance_types: &'a [Arc<InstanceType>]) -> Self {
        if nodepool::static_replicas(pool).is_none() {
            self.pools.push(PoolOffer {
                pool,
                instance_types,
            });
            self.pools.sort_by(|a, b| weight_order(a.pool, b.pool));
        }
        self
    }

    /// Nodes that joined longer than `grace` ago but are still tainted unregistered, and whose
    /// NodeClaim's registration was tried and failed (`registration_failed`, NodeClaim names),
    /// are not counted as capacity (see [`StateNode::stuck_unregistered`]). A registration that
    /// has not been tried yet is not stuck: under load (a burst of a thousand Nodes joining) the
    /// registration controller can be a minute behind, and treating its backlog as stuck
    /// launched a second NodeClaim for every late one (2,195 NodeClaims where ~1,100 fit 10,000
    /// pods in `karpenter-bench perf --scale 10`). A Node without a NodeClaim never registers.
    pub fn unregistered_grace(
        mut self,
        grace: SignedDuration,
        registration_failed: BTreeSet<String>,
    ) -> Self {
        self.unregistered_grace = Some(grace);
        self.registration_failed = registration_failed;
        self
    }

    /// Whether `node` is left out as stuck in registration (see [`Self::unregistered_grace`]).
    fn stuck_unregistered(&self, node: &StateNode<'_>) -> bool {
        let Some(grace) = self.unregistered_grace else {
            return false;
        };
        node.stuck_unregistered(self.now, grace)
            && node
                .nodeclaim
                .is_none_or(|claim| self.registration_failed.contains(&claim.name_any()))
    }

    /// Leaves these nodes (Node or NodeClaim names) out, as if they were being deleted: they
    /// offer no capacity, count for no NodePool usage, and their pods are placed again. Cheap:
    /// a set of names, not a copy of the state.
    pub fn without<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.without.extend(names.into_iter().map(Into::into));
        self
    }

    pub fn state(&self) -> &'a ClusterState {
        self.state
    }

    pub fn pools(&self) -> &[PoolOffer<'a>] {
        &self.pools
    }

    fn left_out(&self, node: &StateNode<'_>) -> bool {
        node.marked_for_deletion()
            || self.without.contains(&node.name())
            || node
                .nodeclaim
                .is_some_and(|c| self.without.contains(&c.name_any()))
    }

    /// The pods a pass places: provisionable pods, then the pods of nodes marked for deletion
    /// (or left out by [`Snapshot::without`]) that will need capacity elsewhere (upstream appends
    /// them to the pass), unless an earlier pass already planned for them (a live nomination),
    /// and the evicted pods of those nodes whose replacement is not created yet
    /// ([`reschedulable::awaiting_replacement`]; upstream plans one pod short then).
    pub fn pods_to_place(&self) -> Vec<&'a Pod> {
        self.pods_to_place_shared()
            .into_iter()
            .map(|p| &**p)
            .collect()
    }

    /// [`Snapshot::pods_to_place`] as the state holds them, so a caller that keeps the pods
    /// beyond the snapshot (the provisioner hands them to the solver on another thread) shares
    /// them instead of copying every pending pod per pass.
    pub fn pods_to_place_shared(&self) -> Vec<&'a Arc<Pod>> {
        let state = self.state;
        let pdbs: Vec<_> = state.pdbs().collect();
        let mut pods = state.provisionable_pods_shared(self.now);
        let mut staying = Vec::new();
        for node in state.state_nodes() {
            if !self.left_out(&node) {
                continue;
            }
            // Only a Node holds pods (an in-flight NodeClaim has none bound yet).
            let Some(node_name) = node.node.map(ResourceExt::name_any) else {
                continue;
            };
            for pod in state
                .pods_on_node_shared(&node_name)
                .filter(|p| state.nomination(&crate::pod::key(p), self.now).is_none())
            {
                if reschedulable::is_reschedulable(pod, &pdbs, self.now) {
                    pods.push(pod);
                } else {
                    staying.push(pod);
                }
            }
        }
        // An evicted pod among the others stands in for its replacement until it exists.
        pods.extend(reschedulable::awaiting_replacement(staying, state.pods()));
        pods
    }

    /// Converts the snapshot into the scheduler's input (nodes before pods, as upstream, so
    /// capacity in use is over- rather than under-estimated).
    pub fn scheduler_input(&self) -> Prepared {
        let state = self.state;
        let mut prepared = Prepared::default();
        for offer in &self.pools {
            match input::node_pool(offer.pool, offer.instance_types.to_vec()) {
                Ok(mut converted) => {
                    // The state's usage (nodes and in-flight NodeClaims) is fresher than
                    // `status.resources`, which the adapter reads.
                    converted.usage =
                        nodepool::usage_without(state, &offer.pool.name_any(), &self.without);
                    prepared.input.node_pools.push(converted);
                }
                Err(err) => prepared.problems.push(err),
            }
        }
        for node in state.state_nodes() {
            if self.left_out(&node) {
                continue;
            }
            if self.stuck_unregistered(&node) {
                prepared.stuck_unregistered.push(node.name());
                continue;
            }
            let mut pods: Vec<Arc<Pod>> =
                state.pods_on_node_shared(&node.name()).cloned().collect();
            // Pods nominated here (to an in-flight NodeClaim, or to a node the kube-scheduler
            // has not bound them to yet) already use its capacity.
            pods.extend(
                state
                    .nominated_pods_shared(&node.nomination_key(), self.now)
                    .cloned(),
            );
            let converted = match (node.node, node.nodeclaim) {
                (Some(n), claim) => input::existing_node(n, claim, pods),
                (None, Some(claim)) => input::in_flight_node_claim(&offered_capacity(claim), pods),
                (None, None) => continue,
            };
            match converted {
                Ok(existing) => prepared.input.existing_nodes.push(existing),
                Err(err) => prepared.problems.push(err),
            }
        }
        // Each DaemonSet's pod as it will be created: its template after the LimitRange
        // admission of its namespace, which templates never go through.
        prepared.input.daemonsets = state
            .daemonsets()
            .map(|ds| {
                let namespace = ds.metadata.namespace.as_deref().unwrap_or("default");
                input::admitted_daemonset_pod(ds, state.limit_ranges(namespace))
            })
            .collect();
        prepared.input.volumes = VolumeInput {
            claims: state.pvcs().cloned().collect(),
            volumes: state.pvs().cloned().collect(),
            storage_classes: state.storage_classes().cloned().collect(),
        };
        prepared.input.namespaces = state.namespaces().cloned().collect();
        prepared.input.options = self.options.clone();
        prepared
    }
}

/// Runs the scheduler over `pods`. Pure and CPU-bound (callers with an async runtime run it on
/// a blocking thread).
pub fn solve<P: Borrow<Pod>>(input: SchedulerInput, pods: &[P]) -> SchedulingResults {
    Scheduler::new(input).solve(pods)
}

/// A NodeClaim not launched yet has no capacity in its status. Until it has, it offers what it
/// was created for (`spec.resources.requests`: its pods plus daemonsets), so a pass that does not
/// know its nominations (after a restart, or on a new leader) places those pods on it instead of
/// creating a second NodeClaim for them.
pub fn offered_capacity(claim: &NodeClaim) -> Cow<'_, NodeClaim> {
    let launched = claim
        .status
        .as_ref()
        .is_some_and(|s| !s.capacity.is_empty() || !s.allocatable.is_empty());
    let Some(requests) = claim.spec.resources.as_ref().map(|r| &r.requests) else {
        return Cow::Borrowed(claim);
    };
    if launched || requests.is_empty() {
        return Cow::Borrowed(claim);
    }
    let mut claim = claim.clone();
    let status = claim.status.get_or_insert_default();
    status.capacity = requests.clone();
    status.allocatable = requests.clone();
    Cow::Owned(claim)
}

#[cfg(test)]
mod tests;
