//! Which nodes a voluntary disruption method may consider (upstream `GetCandidates` /
//! `NewCandidate`, karpenter-core §4.2 and §4.14), and for every other node the one reason a
//! person reads in `simulate`, events and `kubectl describe`.
//!
//! Pure: the cluster state, the instant and the instance-type catalogue come in as arguments.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;

use crate::pod::Pod;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_INSTANCE_TERMINATING};
use karpenter_api::well_known::{
    CAPACITY_TYPE_LABEL, DO_NOT_DISRUPT_ANNOTATION, INSTANCE_TYPE_LABEL, ZONE_LABEL,
};
use karpenter_api::{NodeClaim, NodePool};
use kube_core::ResourceExt;

use crate::drain::tolerates_disruption;
use crate::instance_type::InstanceType;
use crate::pod;
use crate::provisioning::reschedulable::{
    moves_with_its_node, selects, unhealthy_pod_always_evictable,
};
use crate::state::{ClusterState, StateNode, object_key};

/// How a method disrupts, which decides whether pod-level blocks apply (upstream
/// `DisruptionClass`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisruptionClass {
    /// Emptiness and consolidation: never start while a pod forbids it.
    Graceful,
    /// Drift: a NodeClaim with `terminationGracePeriod` is disrupted anyway, because its drain
    /// forces the blocking pods out at the deadline.
    Eventual,
}

/// What the provider offers per NodePool: whether it returned instance types at all (a pool
/// without any cannot be simulated, so its nodes are not candidates) and offering prices.
pub trait OfferingCatalog {
    fn has_instance_types(&self, nodepool: &str) -> bool;
    /// Price per hour of the offering `instance_type` in `zone` with `capacity_type`.
    fn price(
        &self,
        nodepool: &str,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
    ) -> Option<f64>;
}

/// The instance types resolved per NodePool, as the provisioner builds them (owned or shared).
impl<T: Borrow<InstanceType>> OfferingCatalog for BTreeMap<String, Vec<T>> {
    fn has_instance_types(&self, nodepool: &str) -> bool {
        self.get(nodepool).is_some_and(|types| !types.is_empty())
    }

    fn price(
        &self,
        nodepool: &str,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
    ) -> Option<f64> {
        self.get(nodepool)?
            .iter()
            .map(Borrow::borrow)
            .find(|it: &&InstanceType| it.name == instance_type)?
            .offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == capacity_type)
            .map(|o| o.price)
    }
}

/// A node a voluntary method may disrupt.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub node: &'a Node,
    pub nodeclaim: &'a NodeClaim,
    pub nodepool: &'a NodePool,
    /// Labels of the node; any may be missing (drift and emptiness still work without them).
    pub instance_type: Option<&'a str>,
    pub zone: Option<&'a str>,
    pub capacity_type: Option<&'a str>,
    /// Hourly price of the node's offering, when the catalogue knows it.
    pub price: Option<f64>,
    /// Every pod bound to the node.
    pub pods: Vec<&'a Pod>,
    /// The pods that need a new home when the node goes (upstream `IsReschedulable`).
    pub reschedulable_pods: Vec<&'a Pod>,
}

impl<'a> Candidate<'a> {
    pub fn name(&self) -> String {
        self.node.name_any()
    }

    pub fn nodepool_name(&self) -> String {
        self.nodepool.name_any()
    }

    /// `1 + Σ max(0, EvictionCost)` over the reschedulable pods (upstream
    /// `RescheduleDisruptionCost`).
    pub fn reschedule_disruption_cost(&self) -> f64 {
        1.0 + self
            .reschedulable_pods
            .iter()
            .map(|p| eviction_cost(p).max(0.0))
            .sum::<f64>()
    }

    /// Nothing worth moving: no reschedulable pod with a positive eviction cost. DaemonSet,
    /// static and terminating non-StatefulSet pods never count.
    pub fn is_empty(&self) -> bool {
        self.reschedule_disruption_cost() <= 1.0
    }

    /// Price saved per unit of disruption; consolidation order, highest first. Unknown price = 0.
    pub fn savings_ratio(&self) -> f64 {
        self.price.unwrap_or(0.0) / self.reschedule_disruption_cost()
    }
}

/// Upstream `EvictionCost`: `1 + deletion-cost / 2^27 + priority / 2^25`, clamped to [-10, 10].
pub fn eviction_cost(pod: &Pod) -> f64 {
    let deletion_cost = pod
        .annotations()
        .get("controller.kubernetes.io/pod-deletion-cost")
        .and_then(|v| v.trim().parse::<i32>().ok())
        .unwrap_or(0);
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    let cost = 1.0 + f64::from(deletion_cost) / 2f64.powi(27) + f64::from(priority) / 2f64.powi(25);
    cost.clamp(-10.0, 10.0)
}

/// A node that is not a candidate, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    /// The Node's name (the NodeClaim's while no Node exists).
    pub name: String,
    pub nodepool: Option<String>,
    pub reason: BlockReason,
}

/// Why a node may not be disrupted now. `Display` is the sentence users read.
#[derive(Clone, Debug, PartialEq)]
pub enum BlockReason {
    /// A Node without a NodeClaim.
    NotManaged,
    /// A NodeClaim whose Node has not registered.
    NoNode,
    NotInitialized,
    MarkedForDeletion,
    /// A disruption command is already working on it.
    BeingDisrupted,
    /// It replaces the candidates of a disruption command, which are not gone yet: their pods
    /// are on their way to it.
    Replacing,
    /// A disruption command for it rolled back; it is not decided again until this instant
    /// ([`crate::disruption::orchestration::command::ROLLBACK_HOLD`]).
    RolledBack {
        until: Timestamp,
    },
    /// The provisioner just planned pods onto it.
    Nominated,
    /// It holds a CapacityBuffer's virtual pods (consolidation only; drift still replaces it).
    HostsCapacityBuffer,
    /// `karpenter.sh/do-not-disrupt: "true"` on the Node.
    NodeDoNotDisrupt,
    NoNodePoolLabel,
    NodePoolNotFound(String),
    NoInstanceTypes(String),
    /// An active pod whose `karpenter.sh/do-not-disrupt` protects the node now: `"true"` (or a
    /// duration on a pod not started yet: `until` is `None`), else the pod whose duration runs
    /// out last and the instant it does (the node is free of such pods from then on).
    DoNotDisruptPod {
        /// `namespace/name`.
        pod: String,
        until: Option<Timestamp>,
    },
    /// The pod's only PDB allows no disruption now.
    PdbBlocks {
        pod: String,
        pdb: String,
    },
    /// Eviction refuses pods selected by several PDBs.
    MultiplePdbs {
        pod: String,
        pdbs: Vec<String>,
    },
    /// Emptiness/consolidation: the NodePool's `consolidateAfter` is `Never`.
    ConsolidationDisabled(String),
    /// Emptiness/consolidation: `consolidateAfter` has not elapsed since the last pod event.
    ConsolidatableAt(Timestamp),
    /// Static NodePools keep their replica count; consolidation leaves them alone.
    StaticNodePool(String),
    /// The NodePool's budget for the reason is used up.
    BudgetExhausted {
        nodepool: String,
        reason: String,
    },
    /// Drift: the NodeClaim matches its NodePool and the provider reports no drift.
    NotDrifted,
    /// Consolidation: the NodePool's policy is `WhenEmpty` and the node has pods to move.
    WhenEmptyPolicy(String),
    /// Consolidation needs the node's instance type, zone and capacity type labels and the
    /// catalogue's price for them.
    UnknownPrice,
    /// The first of the node's pods that would have no place, with the scheduler's reason.
    PodsWouldNotFit(String),
    /// A pod would land on a node that has not initialized yet.
    UninitializedDestination(String),
    /// Consolidation replaces M nodes with at most one (under the `Upstream` packing policy).
    TooManyReplacements(usize),
    /// Under `CostOptimal`: the replacements hold the moved pods as planned, but not as the
    /// kube-scheduler would place them (it prefers the emptiest node); the pod it would leave
    /// without a node.
    StrandedByScheduler(String),
    /// Under `CostOptimal`: the replacements' cheapest options together do not save the
    /// required margin on the candidates' price.
    ReplacementsNotCheaper {
        replacements: usize,
        cost: f64,
        price: f64,
        margin: f64,
    },
    /// No replacement option is strictly cheaper than the candidates.
    NoCheaperReplacement {
        cheapest: Option<f64>,
        price: f64,
    },
    /// The cheaper options no longer satisfy `minValues` on the instance type.
    MinValuesAfterPriceFilter {
        kept: usize,
        min_values: i32,
    },
    /// Spot-to-spot replacement with the feature gate off.
    SpotToSpotDisabled,
    /// The `Balanced` policy of the NodePool finds the move not worth its disruption.
    BalancedScoreTooLow(super::score::PoolScore),
    /// The `Balanced` policy would refuse even deleting the node outright (the best any move
    /// of it can score), so single-node consolidation does not simulate it.
    BalancedDeleteWouldNotPass(super::score::PoolScore),
    /// Single-node spot-to-spot needs at least 15 cheaper spot options.
    SpotToSpotTooFewOptions(usize),
    /// Drift: an earlier command of the same pass moves pods onto this node; it waits for the
    /// next pass.
    DestinationOfAnotherCommand,
    /// Validation: the node is no longer a candidate (with the reason it is not).
    NoLongerCandidate(Box<BlockReason>),
    /// Validation: a fresh simulation decides differently.
    DecisionChanged(String),
}

impl BlockReason {
    /// The instant this reason stops holding by itself (a do-not-disrupt duration running out,
    /// `consolidateAfter` passing), so a loop can look again then instead of at its next poll.
    pub fn frees_at(&self) -> Option<Timestamp> {
        match self {
            Self::DoNotDisruptPod { until, .. } => *until,
            Self::ConsolidatableAt(at) => Some(*at),
            Self::RolledBack { until } => Some(*until),
            Self::NoLongerCandidate(inner) => inner.frees_at(),
            _ => None,
        }
    }
}

impl fmt::Display for BlockReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotManaged => write!(f, "node is not managed by Karpenter (no NodeClaim)"),
            Self::NoNode => write!(f, "NodeClaim has no registered Node yet"),
            Self::NotInitialized => write!(f, "node is not initialized"),
            Self::MarkedForDeletion => write!(f, "node is marked for deletion"),
            Self::BeingDisrupted => write!(f, "node is already being disrupted"),
            Self::Replacing => write!(
                f,
                "node replaces the nodes of a disruption command that are not gone yet"
            ),
            Self::RolledBack { until } => write!(
                f,
                "a disruption command for the node rolled back; it is not disrupted again before {until}"
            ),
            Self::Nominated => write!(f, "node is nominated for pending pods"),
            Self::HostsCapacityBuffer => write!(f, "node has buffer pods"),
            Self::NodeDoNotDisrupt => {
                write!(f, "node has annotation {DO_NOT_DISRUPT_ANNOTATION}=true")
            }
            Self::NoNodePoolLabel => write!(f, "node has no karpenter.sh/nodepool label"),
            Self::NodePoolNotFound(pool) => write!(f, "NodePool {pool:?} not found"),
            Self::NoInstanceTypes(pool) => {
                write!(f, "NodePool {pool:?} resolved no instance types")
            }
            Self::DoNotDisruptPod { pod, until: None } => {
                write!(
                    f,
                    "pod {pod} has annotation {DO_NOT_DISRUPT_ANNOTATION}=true"
                )
            }
            Self::DoNotDisruptPod {
                pod,
                until: Some(until),
            } => write!(
                f,
                "pod {pod} has annotation {DO_NOT_DISRUPT_ANNOTATION} with a duration: it frees the node at {until}"
            ),
            Self::PdbBlocks { pod, pdb } => {
                write!(f, "pdb {pdb} prevents pod evictions (pod {pod})")
            }
            Self::MultiplePdbs { pod, pdbs } => write!(
                f,
                "eviction does not support multiple PDBs: pod {pod} is selected by {}",
                pdbs.join(", ")
            ),
            Self::ConsolidationDisabled(pool) => {
                write!(f, "NodePool {pool:?} has consolidation disabled")
            }
            Self::ConsolidatableAt(at) => write!(f, "consolidatable at {at}"),
            Self::StaticNodePool(pool) => {
                write!(f, "NodePool {pool:?} is static and is not consolidated")
            }
            Self::BudgetExhausted { nodepool, reason } => write!(
                f,
                "disruption budget of NodePool {nodepool:?} allows no more {reason} disruptions now"
            ),
            Self::NotDrifted => write!(f, "node is not drifted"),
            Self::WhenEmptyPolicy(pool) => write!(
                f,
                "NodePool {pool:?} has consolidation policy WhenEmpty, but node is not empty"
            ),
            Self::UnknownPrice => write!(
                f,
                "node's offering (instance type, zone, capacity type) has no known price"
            ),
            Self::PodsWouldNotFit(first) => write!(f, "pods would not fit: {first}"),
            Self::UninitializedDestination(node) => {
                write!(f, "pods would schedule against uninitialized node {node}")
            }
            Self::TooManyReplacements(n) => {
                write!(f, "can't remove without creating {n} replacement nodes")
            }
            Self::StrandedByScheduler(pod) => write!(
                f,
                "the replacements hold the pods only as planned: the kube-scheduler, preferring the emptiest node, would leave {pod} without one"
            ),
            Self::ReplacementsNotCheaper {
                replacements,
                cost,
                price,
                margin,
            } => write!(
                f,
                "no cheaper replacement: {replacements} replacement nodes cost at least ${cost:.4}/h, not ${margin:.4}/h below ${price:.4}/h"
            ),
            Self::NoCheaperReplacement { cheapest, price } => match cheapest {
                Some(cheapest) => write!(
                    f,
                    "no cheaper replacement: cheapest option ${cheapest:.4}/h >= ${price:.4}/h"
                ),
                None => write!(
                    f,
                    "no cheaper replacement: no option other than the current instance types (${price:.4}/h)"
                ),
            },
            Self::MinValuesAfterPriceFilter { kept, min_values } => write!(
                f,
                "filtering by price leaves {kept} instance types, minValues needs {min_values}"
            ),
            Self::SpotToSpotDisabled => write!(
                f,
                "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
            ),
            Self::BalancedScoreTooLow(verdict) => write!(
                f,
                "{} scores {:.2} < {:.2}",
                verdict.rejection("saving"),
                verdict.score,
                super::score::BALANCED_THRESHOLD
            ),
            Self::BalancedDeleteWouldNotPass(verdict) => write!(
                f,
                "{}) scores {:.2} < {:.2}",
                verdict.rejection("even deleting the node (saving"),
                verdict.score,
                super::score::BALANCED_THRESHOLD
            ),
            Self::SpotToSpotTooFewOptions(n) => write!(
                f,
                "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate to consolidate, got {n}"
            ),
            Self::DestinationOfAnotherCommand => write!(
                f,
                "another command of this pass moves pods onto the node; it waits for the next pass"
            ),
            Self::NoLongerCandidate(reason) => write!(f, "no longer a candidate: {reason}"),
            Self::DecisionChanged(what) => {
                write!(f, "scheduling simulation produced new results: {what}")
            }
        }
    }
}

/// Splits the cluster's nodes into candidates and rejections, in node-name order. Every filter
/// of §4.2 in upstream's order: the first that fails is the reason.
pub fn candidates<'a>(
    state: &'a ClusterState,
    now: Timestamp,
    class: DisruptionClass,
    catalog: &dyn OfferingCatalog,
) -> (Vec<Candidate<'a>>, Vec<Rejection>) {
    let pdbs: Vec<&PodDisruptionBudget> = state.pdbs().collect();
    let mut accepted = Vec::new();
    let mut rejected = Vec::new();
    for state_node in state.state_nodes() {
        match candidate(state, &state_node, now, class, catalog, &pdbs) {
            Ok(candidate) => accepted.push(candidate),
            Err(reason) => rejected.push(Rejection {
                name: state_node.name(),
                nodepool: state_node.nodepool().map(str::to_string),
                reason,
            }),
        }
    }
    (accepted, rejected)
}

fn candidate<'a>(
    state: &'a ClusterState,
    state_node: &StateNode<'a>,
    now: Timestamp,
    class: DisruptionClass,
    catalog: &dyn OfferingCatalog,
    pdbs: &[&PodDisruptionBudget],
) -> Result<Candidate<'a>, BlockReason> {
    let name = state_node.name();
    if state.is_being_disrupted(&name) {
        return Err(BlockReason::BeingDisrupted);
    }
    if let Some(until) = state.rollback_hold(&name).filter(|until| *until > now) {
        return Err(BlockReason::RolledBack { until });
    }
    let (node, nodeclaim) = match (state_node.node, state_node.nodeclaim) {
        (Some(node), Some(claim)) => (node, claim),
        (Some(_), None) => return Err(BlockReason::NotManaged),
        (None, _) => return Err(BlockReason::NoNode),
    };
    if !state_node.initialized() {
        return Err(BlockReason::NotInitialized);
    }
    let instance_terminating = nodeclaim
        .status
        .as_ref()
        .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_INSTANCE_TERMINATING));
    if state_node.marked_for_deletion() || instance_terminating {
        return Err(BlockReason::MarkedForDeletion);
    }
    if state.is_replacing(&nodeclaim.name_any()) {
        return Err(BlockReason::Replacing);
    }
    // The provisioner nominates to the NodeClaim's name, or the Node's for nodes without one.
    if !state.nominated_pods(&nodeclaim.name_any(), now).is_empty()
        || !state.nominated_pods(&name, now).is_empty()
    {
        return Err(BlockReason::Nominated);
    }
    if node
        .annotations()
        .get(DO_NOT_DISRUPT_ANNOTATION)
        .is_some_and(|v| v == "true")
    {
        return Err(BlockReason::NodeDoNotDisrupt);
    }
    let pool_name = state_node.nodepool().ok_or(BlockReason::NoNodePoolLabel)?;
    let nodepool = state
        .nodepool(pool_name)
        .ok_or_else(|| BlockReason::NodePoolNotFound(pool_name.to_string()))?;
    if !catalog.has_instance_types(pool_name) {
        return Err(BlockReason::NoInstanceTypes(pool_name.to_string()));
    }
    let pods = state_node.pods.clone();
    let pod_blocks_apply =
        !(class == DisruptionClass::Eventual && nodeclaim.spec.termination_grace_period.is_some());
    if pod_blocks_apply {
        pod_blocks(&pods, pdbs, now)?;
    }
    let instance_type = state_node.label(INSTANCE_TYPE_LABEL);
    let zone = state_node.label(ZONE_LABEL);
    let capacity_type = state_node.label(CAPACITY_TYPE_LABEL);
    let price = match (instance_type, zone, capacity_type) {
        (Some(it), Some(zone), Some(ct)) => catalog.price(pool_name, it, zone, ct),
        _ => None,
    };
    let reschedulable_pods = pods
        .iter()
        .copied()
        .filter(|p| moves_with_its_node(p))
        .collect();
    Ok(Candidate {
        node,
        nodeclaim,
        nodepool,
        instance_type,
        zone,
        capacity_type,
        price,
        pods,
        reschedulable_pods,
    })
}

/// Neither finished nor being deleted.
fn is_active(pod: &Pod) -> bool {
    !pod::is_terminal(pod) && !pod::is_terminating(pod)
}

/// The first pod that forbids draining the node: an active do-not-disrupt pod (DaemonSet and
/// static pods included), else an evictable pod whose PDBs refuse its eviction now.
fn pod_blocks(
    pods: &[&Pod],
    pdbs: &[&PodDisruptionBudget],
    now: Timestamp,
) -> Result<(), BlockReason> {
    if let Some(reason) = do_not_disrupt_block(pods, now) {
        return Err(reason);
    }
    for pod in pods.iter().filter(|p| is_evictable(p, now)) {
        let matching: Vec<&&PodDisruptionBudget> =
            pdbs.iter().filter(|pdb| selects(pdb, pod)).collect();
        match matching.as_slice() {
            [] => {}
            [pdb] => {
                if !pdb_allows_eviction(pdb, pod) {
                    return Err(BlockReason::PdbBlocks {
                        pod: pod::key(pod),
                        pdb: object_key(**pdb),
                    });
                }
            }
            several => {
                return Err(BlockReason::MultiplePdbs {
                    pod: pod::key(pod),
                    pdbs: several.iter().map(|pdb| object_key(**pdb)).collect(),
                });
            }
        }
    }
    Ok(())
}

/// The do-not-disrupt pod that keeps the node longest: one protected for good (the first), else
/// the one whose duration runs out last, so a method that waits for it waits long enough.
fn do_not_disrupt_block(pods: &[&Pod], now: Timestamp) -> Option<BlockReason> {
    let mut latest: Option<(Timestamp, &Pod)> = None;
    for pod in pods.iter().copied().filter(|p| is_active(p)) {
        match pod::do_not_disrupt(pod) {
            pod::DoNotDisrupt::Forever => {
                return Some(BlockReason::DoNotDisruptPod {
                    pod: pod::key(pod),
                    until: None,
                });
            }
            pod::DoNotDisrupt::Until(until)
                if now < until && latest.is_none_or(|(t, _)| until > t) =>
            {
                latest = Some((until, pod));
            }
            _ => {}
        }
    }
    latest.map(|(until, pod)| BlockReason::DoNotDisruptPod {
        pod: pod::key(pod),
        until: Some(until),
    })
}

/// A pod the drain would evict through the Eviction API (and so a PDB can hold): active, not
/// tolerating the disrupted taint, not static, not do-not-disrupt.
fn is_evictable(pod: &Pod, now: Timestamp) -> bool {
    is_active(pod)
        && !tolerates_disruption(pod)
        && !pod::is_owned_by_node(pod)
        && !pod::has_do_not_disrupt(pod, now)
}

/// `disruptionsAllowed > 0`, or the pod is not Ready and the PDB lets unhealthy pods go
/// (`unhealthyPodEvictionPolicy: AlwaysAllow`).
fn pdb_allows_eviction(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    let allowed = pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed);
    allowed > 0 || unhealthy_pod_always_evictable(pdb, pod)
}

#[cfg(test)]
pub(crate) mod tests;
