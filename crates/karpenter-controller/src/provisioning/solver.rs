//! The seam between the provisioner and the scheduler. The provisioner hands a [`SolveInput`]
//! (plain API objects, owned) to a [`Solver`] and acts on the [`SolveOutput`]; the production
//! solver ([`CoreScheduler`](super::CoreScheduler)) wraps `karpenter_core::scheduling`, tests may
//! plug in their own.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Taint};
use k8s_openapi::api::storage::v1::StorageClass;
use karpenter_api::v1::NodeSelectorRequirementWithMinValues;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::resources::ResourceList;

/// A NodePool the scheduler may use, with its instance types and current usage.
#[derive(Clone, Debug)]
pub struct PoolInput {
    pub nodepool: NodePool,
    pub instance_types: Vec<InstanceType>,
    /// What the pool already uses (nodes and in-flight NodeClaims), incl. `nodes`.
    pub usage: ResourceList,
}

/// Existing or in-flight capacity: a Node, its NodeClaim, or both, with bound/nominated pods.
#[derive(Clone, Debug)]
pub struct NodeInput {
    pub node: Option<Node>,
    pub nodeclaim: Option<NodeClaim>,
    pub pods: Vec<Pod>,
}

/// Everything one scheduling pass sees.
#[derive(Clone, Debug, Default)]
pub struct SolveInput {
    /// Usable pools (ready, not deleting, not static).
    pub nodepools: Vec<PoolInput>,
    /// Nodes not marked for deletion, plus in-flight NodeClaims (with the pods nominated to them).
    pub nodes: Vec<NodeInput>,
    pub daemonsets: Vec<DaemonSet>,
    pub pvcs: Vec<PersistentVolumeClaim>,
    pub pvs: Vec<PersistentVolume>,
    pub storage_classes: Vec<StorageClass>,
    /// The pods to place: provisionable pods, then reschedulable pods of deleting nodes.
    pub pods: Vec<Pod>,
    /// `Respect` or `Ignore`.
    pub preference_policy: String,
    /// `Strict` or `BestEffort`.
    pub min_values_policy: String,
}

/// A NodeClaim the scheduler wants launched.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlannedNodeClaim {
    pub nodepool: String,
    /// Including `node.kubernetes.io/instance-type In [...]`.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Instance type names, cheapest first.
    pub instance_types: Vec<String>,
    /// Indices into [`SolveInput::pods`].
    pub pods: Vec<usize>,
    /// Pods plus daemonset overhead.
    pub requests: ResourceList,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub min_values_relaxed: bool,
}

/// Pods placed on an existing node or in-flight NodeClaim (by [`crate::state::StateNode::name`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExistingPlacement {
    pub node: String,
    pub pods: Vec<usize>,
}

/// A pod that cannot be placed, with the reason (one line per NodePool).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unschedulable {
    pub pod: usize,
    pub explanation: String,
}

/// What a scheduling pass decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SolveOutput {
    pub new_nodeclaims: Vec<PlannedNodeClaim>,
    pub existing: Vec<ExistingPlacement>,
    pub unschedulable: Vec<Unschedulable>,
}

/// A scheduling simulation. Synchronous and pure: it must not do I/O.
pub trait Solver: Send + Sync {
    fn solve(&self, input: SolveInput) -> SolveOutput;
}

/// A solver that places nothing and says so. The controller uses
/// [`CoreScheduler`](super::CoreScheduler); this one is for tests of everything around
/// provisioning that must not create NodeClaims.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoScheduler;

impl Solver for NoScheduler {
    fn solve(&self, input: SolveInput) -> SolveOutput {
        SolveOutput {
            unschedulable: (0..input.pods.len())
                .map(|pod| Unschedulable {
                    pod,
                    explanation: "no scheduler is configured (NoScheduler)".into(),
                })
                .collect(),
            ..SolveOutput::default()
        }
    }
}
