//! `karpenter.sh/v1` NodeClaim.

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

/// A request for one node: Karpenter's unit of launch and termination.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    singular = "nodeclaim",
    shortname = "nc",
    shortname = "ncs",
    status = "NodeClaimStatus",
    category = "karpenter",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","jsonPath":".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"ImageID","type":"string","jsonPath":".status.imageID","priority":1}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".status.providerID","priority":1}"#,
    printcolumn = r#"{"name":"NodePool","type":"string","jsonPath":".metadata.labels.karpenter\\.sh/nodepool","priority":1}"#,
    printcolumn = r#"{"name":"NodeClass","type":"string","jsonPath":".spec.nodeClassRef.name","priority":1}"#,
    printcolumn = r#"{"name":"Drifted","type":"string","jsonPath":".status.conditions[?(@.type==\"Drifted\")].status","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimSpec {
    /// Taints the node gets at registration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints that other components remove once the node is up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Constraints the launched instance must satisfy.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Resources the node must provide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The provider NodeClass.
    pub node_class_ref: NodeClassReference,
    /// Maximum drain time once the node is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
    /// Node lifetime before it is replaced (`Never` to disable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<NillableDuration>,
}

/// Resources the NodeClaim must provide (summed pod requests plus daemonset overhead).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    /// Minimum resources the node must offer.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
}

/// Observed state of a NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// Name of the Node that registered for this claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Cloud provider ID of the instance.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Image the instance was launched from.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Instance capacity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Capacity minus kubelet/system reservations and eviction thresholds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// `Launched`, `Registered`, `Initialized`, `Ready`, `Drifted`, `Consolidatable`, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Last time a pod was scheduled to or removed from the node (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<String>,
}

impl ConditionsExt for NodeClaimStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

/// NodeClaim condition types.
pub const NODECLAIM_CONDITION_LAUNCHED: &str = "Launched";
pub const NODECLAIM_CONDITION_REGISTERED: &str = "Registered";
pub const NODECLAIM_CONDITION_INITIALIZED: &str = "Initialized";
pub const NODECLAIM_CONDITION_CONSOLIDATABLE: &str = "Consolidatable";
pub const NODECLAIM_CONDITION_DRIFTED: &str = "Drifted";
pub const NODECLAIM_CONDITION_DRAINED: &str = "Drained";
pub const NODECLAIM_CONDITION_VOLUMES_DETACHED: &str = "VolumesDetached";
pub const NODECLAIM_CONDITION_INSTANCE_TERMINATING: &str = "InstanceTerminating";
pub const NODECLAIM_CONDITION_CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
pub const NODECLAIM_CONDITION_DISRUPTION_REASON: &str = "DisruptionReason";

impl NodeClaim {
    /// `Ready` condition status is `True`.
    pub fn is_ready(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.is_condition_true(super::CONDITION_READY))
    }

    /// The owning NodePool, from the `karpenter.sh/nodepool` label.
    pub fn nodepool_name(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(crate::well_known::NODEPOOL_LABEL)
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodepool_name_reads_the_nodepool_label() {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "labels": {"karpenter.sh/nodepool": "general"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                     "requirements": []}
        }))
        .unwrap();
        assert_eq!(claim.nodepool_name(), Some("general"));
        claim.metadata.labels = None;
        assert_eq!(claim.nodepool_name(), None);
    }
}
