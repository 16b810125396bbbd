//! Types shared by NodePool, NodeClaim and EC2NodeClass.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Values;

/// A node selector requirement with Karpenter's `minValues` extension.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key the selector applies to.
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte.
    pub operator: String,
    /// Values for In/NotIn (any number) or Gt/Lt/Gte/Lte (exactly one integer).
    #[serde(default, skip_serializing_if = "Values::is_empty")]
    pub values: Values,
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
    /// CamelCase condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason for the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 time of the last status change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The `.metadata.generation` the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// `True` condition status.
pub const CONDITION_TRUE: &str = "True";
/// `False` condition status.
pub const CONDITION_FALSE: &str = "False";
/// `Unknown` condition status.
pub const CONDITION_UNKNOWN: &str = "Unknown";
/// The summary condition every Karpenter object carries.
pub const CONDITION_READY: &str = "Ready";

/// Condition getters and setters over a status's condition list. Times are passed in (RFC 3339)
/// because this crate never reads a clock.
pub trait ConditionsExt {
    fn conditions(&self) -> &[Condition];
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;

    /// The condition of type `type_`, if present.
    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions().iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition is present with status `True`.
    fn is_condition_true(&self, type_: &str) -> bool {
        self.condition(type_)
            .is_some_and(|c| c.status == CONDITION_TRUE)
    }

    /// Sets a condition; `last_transition_time` only moves when the status changes, like upstream.
    /// Returns whether anything changed.
    fn set_condition(
        &mut self,
        type_: &str,
        status: &str,
        reason: &str,
        message: &str,
        now_rfc3339: &str,
        observed_generation: Option<i64>,
    ) -> bool {
        let conditions = self.conditions_mut();
        let new = Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            last_transition_time: Some(now_rfc3339.to_string()),
            observed_generation,
        };
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(existing) => {
                let mut updated = new;
                if existing.status == updated.status {
                    updated.last_transition_time = existing.last_transition_time.clone();
                }
                let changed = *existing != updated;
                *existing = updated;
                changed
            }
            None => {
                conditions.push(new);
                true
            }
        }
    }

    /// Removes a condition; returns whether it was present.
    fn clear_condition(&mut self, type_: &str) -> bool {
        let conditions = self.conditions_mut();
        let before = conditions.len();
        conditions.retain(|c| c.type_ != type_);
        conditions.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Status(Vec<Condition>);
    impl ConditionsExt for Status {
        fn conditions(&self) -> &[Condition] {
            &self.0
        }
        fn conditions_mut(&mut self) -> &mut Vec<Condition> {
            &mut self.0
        }
    }

    #[test]
    fn transition_time_only_moves_on_status_change() {
        let mut status = Status::default();
        assert!(status.set_condition("Ready", "False", "A", "m", "t1", Some(1)));
        assert!(status.set_condition("Ready", "False", "B", "m", "t2", Some(1)));
        assert_eq!(
            status
                .condition("Ready")
                .unwrap()
                .last_transition_time
                .as_deref(),
            Some("t1")
        );
        assert!(!status.set_condition("Ready", "False", "B", "m", "t3", Some(1)));
        assert!(status.set_condition("Ready", "True", "B", "m", "t4", Some(1)));
        assert!(status.is_condition_true("Ready"));
        assert_eq!(
            status
                .condition("Ready")
                .unwrap()
                .last_transition_time
                .as_deref(),
            Some("t4")
        );
        assert!(status.clear_condition("Ready"));
        assert!(status.condition("Ready").is_none());
    }
}
