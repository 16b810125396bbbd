//! Types shared by NodePool and NodeClaim.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A node selector requirement with Karpenter's `minValues` extension.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key the selector applies to.
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte.
    pub operator: String,
    /// Values for In/NotIn (any number) or Gt/Lt/Gte/Lte (exactly one integer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// The minimum number of distinct values the scheduler must keep flexible for this key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i32>,
}

/// Reference to the provider NodeClass that configures a node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    /// API group of the NodeClass, e.g. `karpenter.k8s.aws`.
    pub group: String,
    /// Kind of the NodeClass, e.g. `EC2NodeClass`.
    pub kind: String,
    /// Name of the NodeClass.
    pub name: String,
}

/// A status condition (upstream `metav1.Condition` shape).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 time of the last status change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
