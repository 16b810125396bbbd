//! `karpenter.sh/v1` NodePool.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    Condition, ConditionsExt, NillableDuration, NodeClassReference,
    NodeSelectorRequirementWithMinValues,
};

/// CRD default of `spec.template.spec.expireAfter`.
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";
/// CRD default of `spec.disruption.consolidateAfter`.
pub const DEFAULT_CONSOLIDATE_AFTER: &str = "0s";
/// CRD default budget: `nodes: 10%`.
pub const DEFAULT_BUDGET_NODES: &str = "10%";

/// A NodePool describes the nodes Karpenter may launch and how it may disrupt them.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    singular = "nodepool",
    shortname = "np",
    shortname = "nps",
    status = "NodePoolStatus",
    category = "karpenter",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    ),
    printcolumn = r#"{"name":"NodeClass","type":"string","jsonPath":".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name":"Nodes","type":"string","jsonPath":".status.resources.nodes"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight","priority":1}"#,
    printcolumn = r#"{"name":"CPU","type":"string","jsonPath":".status.resources.cpu","priority":1}"#,
    printcolumn = r#"{"name":"Memory","type":"string","jsonPath":".status.resources.memory","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// Template for the NodeClaims this pool creates.
    pub template: NodeClaimTemplate,
    /// How and when Karpenter may disrupt the pool's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<Disruption>,
    /// Upper bounds on the pool's total capacity (`cpu`, `memory`, `nodes`, extended resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
    /// Priority among pools (1..100, higher first); absent means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Static pools: the fixed number of nodes to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

/// Template for NodeClaims.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    /// Labels and annotations added to the NodeClaims and Nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The NodeClaim spec.
    pub spec: NodeClaimTemplateSpec,
}

/// Labels and annotations copied to NodeClaims and their Nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels for the Nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the Nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The NodeClaim spec a NodePool stamps out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints the node gets at registration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints that other components remove once the node is up; ignored for scheduling.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Constraints on the nodes (instance types, zones, capacity types, custom labels).
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The provider NodeClass.
    pub node_class_ref: NodeClassReference,
    /// Maximum drain time once a node is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
    /// Node lifetime before it is replaced (`Never` to disable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<NillableDuration>,
}

impl NodeClaimTemplateSpec {
    /// `expireAfter` with the CRD default (720h) applied.
    pub fn effective_expire_after(&self) -> NillableDuration {
        self.expire_after
            .clone()
            .unwrap_or_else(|| NillableDuration::from_secs(720 * 3600))
    }
}

/// Disruption settings of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// Time a node must be consolidatable before it is consolidated (`Never` to disable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidate_after: Option<NillableDuration>,
    /// `WhenEmpty`, `WhenEmptyOrUnderutilized` or `Balanced`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation_policy: Option<String>,
    /// Rate limits on voluntary disruption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<Vec<Budget>>,
}

/// A disruption budget.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// A count (`5`) or a percentage of the pool's nodes (`10%`).
    pub nodes: String,
    /// Cron schedule (UTC) at which the budget becomes active; needs `duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit (hours/minutes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// Disruption reasons the budget applies to (`Underutilized`, `Empty`, `Drifted`); absent = all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<String>>,
}

/// Observed state of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Capacity the pool's nodes provide (includes `nodes`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
    /// Number of nodes in the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    /// The NodeClass generation last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// `ValidationSucceeded`, `NodeClassReady`, `NodeRegistrationHealthy`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl ConditionsExt for NodePoolStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

/// NodePool condition types.
pub const NODEPOOL_CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
pub const NODEPOOL_CONDITION_NODECLASS_READY: &str = "NodeClassReady";
pub const NODEPOOL_CONDITION_NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";

/// How eagerly a NodePool consolidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConsolidationPolicy {
    /// Only nodes without workload pods.
    WhenEmpty,
    /// Empty nodes and nodes whose pods fit elsewhere (the default).
    WhenEmptyOrUnderutilized,
    /// Like `WhenEmptyOrUnderutilized`, weighing savings against disruption.
    Balanced,
}

impl ConsolidationPolicy {
    /// The policy names the CRD accepts.
    pub const NAMES: [&'static str; 3] = ["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"];

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "WhenEmpty" => Some(Self::WhenEmpty),
            "WhenEmptyOrUnderutilized" => Some(Self::WhenEmptyOrUnderutilized),
            "Balanced" => Some(Self::Balanced),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::WhenEmpty => "WhenEmpty",
            Self::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
            Self::Balanced => "Balanced",
        }
    }
}

impl NodePool {
    /// Scheduling priority: `spec.weight`, absent = 0.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// Static NodePools keep a fixed replica count instead of reacting to pods.
    pub fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }

    /// The consolidation policy with the CRD default applied. An unknown policy (rejected by
    /// validation) is treated as the most conservative one, `WhenEmpty`.
    pub fn consolidation_policy(&self) -> ConsolidationPolicy {
        match self
            .spec
            .disruption
            .as_ref()
            .and_then(|d| d.consolidation_policy.as_deref())
        {
            None => ConsolidationPolicy::WhenEmptyOrUnderutilized,
            Some(raw) => ConsolidationPolicy::parse(raw).unwrap_or(ConsolidationPolicy::WhenEmpty),
        }
    }

    /// `consolidateAfter` with the CRD default (`0s`) applied.
    pub fn consolidate_after(&self) -> NillableDuration {
        self.spec
            .disruption
            .as_ref()
            .and_then(|d| d.consolidate_after.clone())
            .unwrap_or_else(|| NillableDuration::from_secs(0))
    }

    /// `expireAfter` with the CRD default (`720h`) applied.
    pub fn expire_after(&self) -> NillableDuration {
        self.spec.template.spec.effective_expire_after()
    }

    /// Budgets with the CRD default (`[{nodes: 10%}]`) applied.
    pub fn budgets(&self) -> Vec<Budget> {
        match self
            .spec
            .disruption
            .as_ref()
            .and_then(|d| d.budgets.clone())
        {
            Some(budgets) => budgets,
            None => vec![Budget {
                nodes: DEFAULT_BUDGET_NODES.into(),
                ..Budget::default()
            }],
        }
    }

    /// Template labels (empty when the template has no metadata).
    pub fn template_labels(&self) -> BTreeMap<String, String> {
        self.spec
            .template
            .metadata
            .as_ref()
            .map(|m| m.labels.clone())
            .unwrap_or_default()
    }

    /// `Ready` condition status is `True`.
    pub fn is_ready(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.is_condition_true(super::CONDITION_READY))
    }
}
