//! `karpenter.sh/v1alpha1` NodeOverlay: adjusts the price and extended-resource capacity of the
//! instance types its `requirements` select, before the scheduler reads them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::v1::Condition;

/// The condition the NodeOverlay controller writes: `False` with reason [`REASON_CONFLICT`] or
/// [`REASON_RUNTIME_VALIDATION`] when the overlay is not applied.
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// Reason of `ValidationSucceeded=False` when an overlay of the same weight already changes the
/// same price or capacity.
pub const REASON_CONFLICT: &str = "Conflict";
/// Message of `ValidationSucceeded=False` with reason [`REASON_CONFLICT`] (upstream's words).
pub const MESSAGE_CONFLICT: &str = "conflict with another overlay";
/// Reason of `ValidationSucceeded=False` when the runtime checks refuse the overlay.
pub const REASON_RUNTIME_VALIDATION: &str = "RuntimeValidation";
/// Annotation (`"true"`) on a NodeClaim one of whose instance-type options has a price an overlay
/// changed: the provider launches by the overlaid price (upstream's
/// `PriceOverlayAppliedAnnotationKey`).
pub const PRICE_OVERLAY_APPLIED_ANNOTATION: &str = "karpenter.sh/price-overlay-applied";
/// Annotation (`"true"`) on a NodeClaim one of whose instance-type options has capacity an
/// overlay added (upstream's `CapacityOverlayAppliedAnnotationKey`).
pub const CAPACITY_OVERLAY_APPLIED_ANNOTATION: &str = "karpenter.sh/capacity-overlay-applied";

/// A label selector term of a NodeOverlay (upstream's `v1alpha1.NodeSelectorRequirement`: no
/// `minValues`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverlayRequirement {
    /// The label key that the selector applies to.
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte.
    pub operator: String,
    /// Values for In/NotIn (non-empty) or Gt/Lt/Gte/Lte (one integer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A NodeOverlay changes what Karpenter believes about the instance types it selects: their price
/// (`price` or `priceAdjustment`) and extra extended resources (`capacity`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    singular = "nodeoverlay",
    shortname = "overlays",
    status = "NodeOverlayStatus",
    category = "karpenter",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlaySpec {
    /// Which instance types (and offerings) the overlay applies to: well-known labels such as
    /// `node.kubernetes.io/instance-type`, `karpenter.sh/capacity-type`, `karpenter.sh/nodepool`,
    /// and the NodePool's template labels.
    #[serde(default)]
    pub requirements: Vec<OverlayRequirement>,
    /// A price change: `+0.5`/`-0.5` (absolute) or `+10%`/`-15%` (relative; at least -100%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_adjustment: Option<String>,
    /// A replacement price (USD per hour), e.g. `0.05`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<String>,
    /// Extended resources added to the instance types' capacity (never cpu, memory,
    /// ephemeral-storage or pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<BTreeMap<String, Quantity>>,
    /// Priority (1..10000); absent means 0. Higher weights win; equal weights that change the
    /// same thing conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// Observed state of a NodeOverlay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    /// `ValidationSucceeded` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl NodeOverlaySpec {
    /// The weight, 0 when unset.
    pub fn effective_weight(&self) -> i32 {
        self.weight.unwrap_or(0)
    }

    /// `price` if set, else `priceAdjustment`.
    pub fn price_change(&self) -> Option<&str> {
        self.price.as_deref().or(self.price_adjustment.as_deref())
    }
}

impl crate::v1::ConditionsExt for NodeOverlayStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}
