//! `autoscaling.x-k8s.io/v1beta1` CapacityBuffer: spare capacity, in chunks the shape of a pod
//! template (`podTemplateRef`) or of a workload's pods (`scalableRef`), that the autoscaler keeps
//! provisioned ahead of demand. Karpenter schedules the chunks as virtual pods: no Pod is created.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::v1::Condition;

/// The only strategy, and the default: the buffer actively scales the cluster up.
pub const ACTIVE_PROVISIONING_STRATEGY: &str = "buffer.x-k8s.io/active-capacity";
/// Written by the buffer controller: the buffer's pod shape and replicas are resolved.
pub const CONDITION_READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// Written by the provisioner: whether the buffer's chunks fit on capacity that exists.
pub const CONDITION_PROVISIONING: &str = "Provisioning";

/// `ReadyForProvisioning=True`: the template and replicas are resolved.
pub const REASON_RESOLVED: &str = "Resolved";
/// `ReadyForProvisioning=False`: the `scalableRef` workload does not exist.
pub const REASON_SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
/// `ReadyForProvisioning=False`: the `podTemplateRef` PodTemplate does not exist.
pub const REASON_POD_TEMPLATE_NOT_FOUND: &str = "PodTemplateNotFound";
/// `ReadyForProvisioning=False`: anything else (no ref, an unsupported kind or group).
pub const REASON_RESOLUTION_FAILED: &str = "ResolutionFailed";
/// `Provisioning=True`: every chunk fits on existing (or in-flight) capacity.
pub const REASON_FITS_EXISTING_CAPACITY: &str = "FitsExistingCapacity";
/// `Provisioning=False`: some chunks needed new NodeClaims or could not be placed.
pub const REASON_REQUIRES_NEW_CAPACITY: &str = "RequiresNewCapacity";
/// `Provisioning=False`: the buffer is not `ReadyForProvisioning`.
pub const REASON_NOT_READY_FOR_PROVISIONING: &str = "NotReadyForProvisioning";
/// `Provisioning=False`: the buffer resolved to zero replicas.
pub const REASON_BUFFER_EMPTY: &str = "BufferEmpty";

/// Marks a virtual pod built from a CapacityBuffer (upstream's annotation).
pub const VIRTUAL_POD_ANNOTATION: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// The CapacityBuffer a virtual pod belongs to.
pub const BUFFER_NAME_ANNOTATION: &str = "karpenter.sh/capacity-buffer-name";
/// The namespace of the CapacityBuffer a virtual pod belongs to.
pub const BUFFER_NAMESPACE_ANNOTATION: &str = "karpenter.sh/capacity-buffer-namespace";

/// A reference to an object in the buffer's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalObjectRef {
    /// Name of the referent.
    pub name: String,
}

/// A reference to a workload with a scale subresource (Deployment, StatefulSet, ReplicaSet).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// API group of the referent; empty for the core group (`apps` is assumed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// Kind of the referent.
    pub kind: String,
    /// Name of the referent.
    pub name: String,
}

/// CapacityBuffer is the configuration an autoscaler uses to keep buffer capacity in a cluster:
/// placeholder chunks that are provisioned ahead of the workloads that will use them.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    plural = "capacitybuffers",
    singular = "capacitybuffer",
    shortname = "cb",
    namespaced,
    status = "CapacityBufferStatus",
    category = "autoscaling",
    printcolumn = r#"{"name":"Strategy","type":"string","jsonPath":".spec.provisioningStrategy","description":"The strategy to be used."}"#,
    printcolumn = r#"{"name":"PodTemplate","type":"string","jsonPath":".status.podTemplateRef.name","description":"The name of the PodTemplate used."}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.replicas","description":"The actual number of buffer chunks."}"#,
    printcolumn = r#"{"name":"ConditionsType","type":"string","jsonPath":".status.conditions[*].type","description":"List of all condition types."}"#,
    printcolumn = r#"{"name":"ConditionsStatus","type":"string","jsonPath":".status.conditions[*].status","description":"List of all condition statuses."}"#,
    printcolumn = r#"{"name":"ConditionsReason","type":"string","jsonPath":".status.conditions[*].reason","description":"List of all condition reasons."}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"The age of the CapacityBuffer."}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferSpec {
    /// How the buffer is used; `buffer.x-k8s.io/active-capacity` (the default) provisions it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    /// A PodTemplate in the same namespace: the shape of one chunk. Not with `scalableRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A workload whose pod template is the shape of one chunk. Not with `podTemplateRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// Chunks to provision. With `percentage` the larger wins; `limits` caps both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Chunks as a percentage of the `scalableRef` workload's replicas, rounded up (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<i32>,
    /// Total requests the chunks may add up to; alone, as many chunks as fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
}

/// Observed state of a CapacityBuffer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// The PodTemplate the chunks were built from (`podTemplateRef` buffers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// The chunks provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The `metadata.generation` of the PodTemplate the chunks were built from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    /// `ReadyForProvisioning` (the controller) and `Provisioning` (the provisioner).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The strategy observed in the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}

impl crate::v1::ConditionsExt for CapacityBufferStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}
