//! What a disruption pass decides: commands (delete these nodes, maybe launch replacements first)
//! and, for every node left alone, the reason. The shared vocabulary of the pure methods
//! ([`super::decide`]), the controller's orchestration queue and `simulate --disruption`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use jiff::Timestamp;
use karpenter_api::NodeClaim;
use karpenter_api::v1::ConsolidationPolicy;
use serde::Serialize;

use super::budgets::DisruptionReason;
use super::candidates::{Candidate, Rejection};
use super::score::PoolScore;
use crate::instance_type::InstanceType;
use crate::scheduling::SchedulerOptions;
use crate::state::ClusterState;

/// A disruption method, in the order the loop tries them (upstream `NewMethods`): the first
/// method that finds work runs this loop, the others wait for the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Method {
    Emptiness,
    StaticDrift,
    Drift,
    MultiNodeConsolidation,
    SingleNodeConsolidation,
}

impl Method {
    pub const ORDER: [Self; 5] = [
        Self::Emptiness,
        Self::StaticDrift,
        Self::Drift,
        Self::MultiNodeConsolidation,
        Self::SingleNodeConsolidation,
    ];

    /// The budget reason the method is limited by.
    pub fn reason(self) -> DisruptionReason {
        match self {
            Self::Emptiness => DisruptionReason::Empty,
            Self::StaticDrift | Self::Drift => DisruptionReason::Drifted,
            Self::MultiNodeConsolidation | Self::SingleNodeConsolidation => {
                DisruptionReason::Underutilized
            }
        }
    }

    /// Upstream's `consolidation_type` / method label on metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Emptiness => "empty",
            Self::StaticDrift => "static-drift",
            Self::Drift => "drift",
            Self::MultiNodeConsolidation => "multi",
            Self::SingleNodeConsolidation => "single",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `delete` when a command launches nothing, `replace` when it launches replacements first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Delete,
    Replace,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Replace => "replace",
        }
    }
}

/// A node a command disrupts, owned (commands outlive the pass's borrows of the state).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptedNode {
    /// The Node's name.
    pub name: String,
    pub nodeclaim: String,
    pub node_pool: String,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// Hourly price of the node's offering, when the catalogue knows it.
    pub price: Option<f64>,
    /// `namespace/name` of the pods that need a new home.
    pub reschedulable_pods: Vec<String>,
}

impl DisruptedNode {
    pub fn from_candidate(candidate: &Candidate<'_>) -> Self {
        use kube_core::ResourceExt;
        DisruptedNode {
            name: candidate.name(),
            nodeclaim: candidate.nodeclaim.name_any(),
            node_pool: candidate.nodepool_name(),
            instance_type: candidate.instance_type.map(str::to_string),
            zone: candidate.zone.map(str::to_string),
            capacity_type: candidate.capacity_type.map(str::to_string),
            price: candidate.price,
            reschedulable_pods: candidate
                .reschedulable_pods
                .iter()
                .map(|p| crate::pod::key(p))
                .collect(),
        }
    }
}

/// One disruption command: launch `replacements` (and wait until they are initialized), then
/// delete `candidates`. The replacements are NodeClaim objects from the provisioning pipeline's
/// builder (`generateName`, no name yet), so the controller creates them as they are and
/// `simulate` launches them on its simulated cloud.
#[derive(Clone, Debug)]
pub struct Command {
    pub method: Method,
    pub reason: DisruptionReason,
    pub candidates: Vec<DisruptedNode>,
    pub replacements: Vec<NodeClaim>,
    /// Σ candidate prices − Σ cheapest replacement option prices (≥ 0 for consolidation).
    pub savings_per_hour: f64,
    /// The scores of the `Balanced` NodePools that approved this consolidation command (empty
    /// for other policies and methods), for the controller's metrics and events.
    pub balanced_scores: Vec<PoolScore>,
}

impl Command {
    pub fn decision(&self) -> Decision {
        if self.replacements.is_empty() {
            Decision::Delete
        } else {
            Decision::Replace
        }
    }
}

/// What the provider reports about drift, keyed by NodeClaim name: the reason string
/// (`AMIDrift`, `NodeClassDrift`, …). NodeClaims missing from the map are not drifted as far as
/// the provider knows (core still checks the NodePool hash and requirements itself).
pub type ProviderDrift = BTreeMap<String, String>;

/// Feature gates and knobs of the disruption methods.
#[derive(Clone, Debug, Default)]
pub struct DisruptionOptions {
    /// `--feature-gates SpotToSpotConsolidation=true`.
    pub spot_to_spot_consolidation: bool,
    /// Nodes (Node or NodeClaim names) the last provisioning pass placed CapacityBuffer virtual
    /// pods on: not consolidation candidates while they hold the buffer
    /// ([`crate::capacity_buffer`]). Empty without the `CapacityBuffer` gate.
    pub buffer_hosts: std::collections::BTreeSet<String>,
}

impl DisruptionOptions {
    /// The options the feature gates call for (the controller and `simulate` alike).
    pub fn from_gates(gates: &crate::feature_gates::FeatureGates) -> Self {
        DisruptionOptions {
            spot_to_spot_consolidation: gates.spot_to_spot_consolidation,
            buffer_hosts: std::collections::BTreeSet::new(),
        }
    }
}

/// Everything one pass reads. Pure: the caller brings the state, the instance types it
/// resolved per NodePool (as the provisioner does), the policies and the instant.
#[derive(Clone, Copy, Debug)]
pub struct DisruptionInput<'a> {
    pub state: &'a ClusterState,
    /// Instance types per NodePool name (the provider's answer for the pool and its NodeClass).
    pub instance_types: &'a BTreeMap<String, Vec<Arc<InstanceType>>>,
    pub scheduler: &'a SchedulerOptions,
    pub options: &'a DisruptionOptions,
    pub provider_drift: &'a ProviderDrift,
    pub now: Timestamp,
}

impl<'a> DisruptionInput<'a> {
    /// What drift of a node of `nodepool` is judged against in this pass.
    pub fn drift_context(&self, nodepool: &str) -> DriftContext<'a> {
        DriftContext {
            provider_drift: self.provider_drift,
            instance_types: self.instance_types.get(nodepool).map(Vec::as_slice),
            now: self.now,
        }
    }
}

/// What drift is judged against besides the NodeClaim and its NodePool.
#[derive(Clone, Copy, Debug)]
pub struct DriftContext<'a> {
    pub provider_drift: &'a ProviderDrift,
    /// The NodePool's instance types as the provider offers them now; `None` (or empty) when
    /// unknown, e.g. its NodeClass is not ready: then nothing is instance-type drifted.
    pub instance_types: Option<&'a [Arc<InstanceType>]>,
    pub now: Timestamp,
}

/// The outcome of one pass of the disruption loop.
#[derive(Clone, Debug, Default)]
pub struct Pass {
    /// The method that found work, if any.
    pub method: Option<Method>,
    /// Commands to run now (several for methods that batch, e.g. drift within budgets).
    pub commands: Vec<Command>,
    /// Every node not disrupted by this pass that some method looked at, with the reason a
    /// person reads (budget, do-not-disrupt pod, PDB, "pods would not fit", …). One entry per
    /// node: the reason from the latest method that considered it.
    pub blocked: Vec<Rejection>,
    /// The consolidation moves this pass judged, with their Balanced scores (see
    /// [`JudgedMove`]): approved commands and single-node Balanced rejections.
    pub moves: Vec<JudgedMove>,
}

/// One consolidation move a pass judged, for one NodePool of its candidates: what upstream
/// counts in `karpenter_consolidation_moves_total{decision,nodepool,policy}` and, for Balanced
/// pools, observes in `karpenter_consolidation_score` (and announces with
/// `ConsolidationApproved`). Single-node consolidation counts every candidate it simulated to a
/// delete or a replacement that was then scored (a Balanced rejection included); multi-node
/// consolidation counts the command it chose.
#[derive(Clone, Debug, PartialEq)]
pub struct JudgedMove {
    pub method: Method,
    /// The Node names of the move's candidates in this pool.
    pub candidates: Vec<String>,
    pub nodepool: String,
    pub policy: ConsolidationPolicy,
    /// The pool's score, when its policy is Balanced.
    pub score: Option<PoolScore>,
}

impl JudgedMove {
    /// Unscored moves (other policies) are approved by definition.
    pub fn approved(&self) -> bool {
        self.score.as_ref().is_none_or(PoolScore::approved)
    }

    /// Upstream's `decision` label.
    pub fn decision(&self) -> &'static str {
        if self.approved() {
            "approved"
        } else {
            "rejected"
        }
    }
}
