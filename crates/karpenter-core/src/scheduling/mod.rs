//! The provisioning scheduler: upstream Karpenter's scheduling simulation, deterministic and fast.
//!
//! Build a [`Scheduler`] from a [`SchedulerInput`] (NodePools with their instance types, existing
//! nodes, DaemonSets, volumes, options) and call [`Scheduler::solve`] with the pending pods. The
//! [`input`] module turns API objects into the input types. See `docs/scheduling.md`.
//! [`WhatIf`] answers many solves over one cluster without some of its nodes (consolidation).

pub mod benchmark;
pub mod bins;
pub mod bound;
mod compile;
mod engine;
pub mod input;
mod intern;
#[cfg(test)]
mod packing_properties;
pub mod packing_workloads;
mod topology;

pub use bound::CostLowerBound;
pub use engine::WhatIf;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::pod::Pod;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Taint};
use k8s_openapi::api::storage::v1::StorageClass;
use karpenter_api::v1::NodeSelectorRequirementWithMinValues;
use serde::Serialize;

use crate::instance_type::{InstanceType, OverlayApplied};
use crate::resources::ResourceList;

/// Everything the scheduler needs besides the pods.
#[derive(Clone, Debug, Default)]
pub struct SchedulerInput {
    pub node_pools: Vec<SchedulingNodePool>,
    pub existing_nodes: Vec<ExistingNode>,
    /// One representative pod per DaemonSet (its template as a pod).
    pub daemonsets: Vec<Pod>,
    pub volumes: VolumeInput,
    /// Namespaces with their labels, for pod-affinity `namespaceSelector`s.
    pub namespaces: Vec<Namespace>,
    pub options: SchedulerOptions,
    /// Consolidation simulations (upstream's `IsConsolidationSimulation`): the pods from this
    /// index on are moved off the candidates and may not land on existing nodes still under
    /// their NodePool's `consolidateAfter` window ([`ExistingNode::closed_to_moved_pods`]);
    /// the pods before it (pending, or from nodes already going away) may.
    pub moved_pods_from: Option<usize>,
}

/// A NodePool as the scheduler sees it.
#[derive(Clone, Debug, Default)]
pub struct SchedulingNodePool {
    pub name: String,
    /// Higher first; ties broken by name descending (as upstream).
    pub weight: i32,
    /// `spec.template.spec.requirements`.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// `spec.template.metadata.labels`.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// `spec.limits`; only listed resources are limited (`nodes` counts nodes).
    pub limits: ResourceList,
    /// What the pool already uses (its nodes' capacity, plus `nodes`).
    pub usage: ResourceList,
    /// Shared with the provider's catalogue and every other solve (no copy per solve).
    pub instance_types: Vec<Arc<InstanceType>>,
}

/// A node that exists (or is launching) in the cluster.
#[derive(Clone, Debug, Default)]
pub struct ExistingNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: ResourceList,
    pub capacity: ResourceList,
    /// Pods bound to the node (shared with the cluster state: the input holds no copies).
    pub pods: Vec<Arc<Pod>>,
    /// Set for Karpenter-managed nodes.
    pub node_pool: Option<String>,
    /// `false` for in-flight/uninitialized nodes: their ephemeral and startup taints are ignored.
    pub initialized: bool,
    /// The NodeClaim's `startupTaints`.
    pub startup_taints: Vec<Taint>,
    /// CSI driver → attachable volume count (from CSINode).
    pub volume_limits: BTreeMap<String, u32>,
    /// No destination for pods moved by a consolidation simulation (see
    /// [`SchedulerInput::moved_pods_from`]): the node is still within its NodePool's
    /// `consolidateAfter` window.
    pub closed_to_moved_pods: bool,
}

/// Volumes, for volume topology and per-node volume limits.
#[derive(Clone, Debug, Default)]
pub struct VolumeInput {
    pub claims: Vec<PersistentVolumeClaim>,
    pub volumes: Vec<PersistentVolume>,
    pub storage_classes: Vec<StorageClass>,
}

/// Whether soft constraints (preferred affinities, `ScheduleAnyway` spreads) are honoured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum PreferencePolicy {
    #[default]
    Respect,
    Ignore,
}

/// How new NodeClaims are sized (`--packing-policy`, `PACKING_POLICY`, `settings.packingPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum PackingPolicy {
    /// Upstream Karpenter's choices, for comparison: a NodeClaim grows until no instance type can
    /// hold more, then launches as the cheapest type that holds what it got.
    Upstream,
    /// The default (issue 35): the cheapest of a few greedy plans, each over a restricted set of
    /// instance types chosen from the fractional lower bound (see `docs/scheduling.md`). Never
    /// dearer than `Upstream`'s plan for the same input, places every pod it places, and among
    /// plans within 0.5 % of each other's cost takes the one with the fewest nodes.
    #[default]
    CostOptimal,
}

/// What happens when a NodeClaim cannot keep `minValues` distinct values open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum MinValuesPolicy {
    #[default]
    Strict,
    BestEffort,
}

#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    pub preference_policy: PreferencePolicy,
    pub min_values_policy: MinValuesPolicy,
    pub packing_policy: PackingPolicy,
    /// Instance-type options kept per NodeClaim (upstream: 600).
    pub max_instance_types: usize,
    /// Label keys treated as well-known besides `karpenter_api::well_known`'s (may be undefined on
    /// a NodePool and still be required by pods).
    pub extra_well_known_labels: Vec<String>,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            preference_policy: PreferencePolicy::Respect,
            min_values_policy: MinValuesPolicy::Strict,
            packing_policy: PackingPolicy::CostOptimal,
            max_instance_types: 600,
            extra_well_known_labels: Vec::new(),
        }
    }
}

/// What the scheduler decided.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingResults {
    pub new_node_claims: Vec<NewNodeClaim>,
    /// Existing nodes that received pods, in input order.
    pub existing_nodes: Vec<ExistingNodePlacement>,
    pub unschedulable: Vec<UnschedulablePod>,
}

/// A NodeClaim to launch.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewNodeClaim {
    pub node_pool: String,
    /// Placeholder hostname, unique within the solve.
    pub hostname: String,
    /// The NodeClaim's requirements, including `karpenter.sh/capacity-type In [...]` but not the
    /// (long) instance-type list: [`NewNodeClaim::node_claim_requirements`] adds it.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// `minValues` on `node.kubernetes.io/instance-type`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_type_min_values: Option<i32>,
    /// Cheapest first (ties by name), at most `max_instance_types`. Shared between NodeClaims with
    /// the same options (no copy per claim).
    #[serde(serialize_with = "serialize_options")]
    pub instance_types: Arc<[InstanceTypeOption]>,
    /// Indices into the pods given to [`Scheduler::solve`].
    pub pods: Vec<usize>,
    /// The pods' requests plus the smallest daemonset overhead (incl. `pods`).
    pub requests: ResourceList,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub min_values_relaxed: bool,
    /// The NodeOverlay changes carried by any of the options (the NodeClaim's
    /// `karpenter.sh/*-overlay-applied` annotations).
    #[serde(skip_serializing_if = "OverlayApplied::is_none")]
    pub overlay_applied: OverlayApplied,
}

/// One instance type a NodeClaim may launch as.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InstanceTypeOption {
    /// Shared with the other NodeClaims of the solve (no copy per claim).
    #[serde(serialize_with = "serialize_str")]
    pub name: Arc<str>,
    /// USD/hour of the cheapest available offering compatible with the NodeClaim.
    pub price: f64,
}

/// Pods placed on an existing node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExistingNodePlacement {
    pub node: String,
    pub pods: Vec<usize>,
}

/// A pod that could not be placed, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnschedulablePod {
    /// Index into the pods given to [`Scheduler::solve`].
    pub pod: usize,
    pub namespace: String,
    pub name: String,
    /// One line per NodePool (or cause), naming the blocking constraint.
    pub explanation: String,
}

fn serialize_options<S: serde::Serializer>(
    options: &Arc<[InstanceTypeOption]>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(options.iter())
}

fn serialize_str<S: serde::Serializer>(s: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(s)
}

impl NewNodeClaim {
    /// The requirements to write on the NodeClaim object: [`requirements`](Self::requirements)
    /// plus `node.kubernetes.io/instance-type In [the options' names]`, sorted by key.
    pub fn node_claim_requirements(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        let mut out = self.requirements.clone();
        out.push(NodeSelectorRequirementWithMinValues {
            key: karpenter_api::well_known::INSTANCE_TYPE_LABEL.to_string(),
            operator: "In".to_string(),
            values: self
                .instance_types
                .iter()
                .map(|o| o.name.to_string())
                .collect(),
            min_values: self.instance_type_min_values,
        });
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }
}

impl SchedulingResults {
    /// Pods placed on new NodeClaims.
    pub fn pods_on_new_node_claims(&self) -> usize {
        self.new_node_claims.iter().map(|c| c.pods.len()).sum()
    }

    /// USD/hour of the new NodeClaims, each at its cheapest option (what it launches as).
    pub fn new_node_claims_cost(&self) -> f64 {
        self.new_node_claims
            .iter()
            .filter_map(|c| c.instance_types.first())
            .map(|o| o.price)
            .sum()
    }
}

/// A scheduling simulation over one snapshot. Build it, then [`solve`](Scheduler::solve) once.
pub struct Scheduler {
    input: SchedulerInput,
}

impl Scheduler {
    pub fn new(input: SchedulerInput) -> Self {
        Scheduler { input }
    }

    /// Places `pods`: existing nodes first, then in-flight NodeClaims, then new NodeClaims from the
    /// highest-weight NodePool that can take each pod. `pods` may hold them any way that lends a
    /// `Pod` (`Pod`, `Arc<Pod>`, ...): the replicas of one workload can share one `Pod`. Results
    /// refer to pods by index; names (in [`UnschedulablePod`]) are read from the pods as given.
    ///
    /// Under [`PackingPolicy::CostOptimal`] it returns the cheapest of a few such plans (see
    /// [`PackingPolicy`]); under `Upstream` exactly upstream's plan.
    pub fn solve<P: std::borrow::Borrow<Pod>>(self, pods: &[P]) -> SchedulingResults {
        match self.input.options.packing_policy {
            PackingPolicy::Upstream => engine::solve(self.input, pods),
            PackingPolicy::CostOptimal => engine::solve_cost_optimal(&self.input, pods),
        }
    }

    /// The fractional lower bound on what the new NodeClaims of `results` (a plan for `pods`
    /// over this input) can cost: per NodePool, the cheapest fractional mix of its instance
    /// types (each at its cheapest offering, less its daemonset overhead) that covers the cpu,
    /// memory and pod count of the pods the plan puts on that pool's new NodeClaims.
    pub fn cost_lower_bound<P: std::borrow::Borrow<Pod>>(
        &self,
        pods: &[P],
        results: &SchedulingResults,
    ) -> CostLowerBound {
        engine::cost_lower_bound(&self.input, pods, results)
    }
}
