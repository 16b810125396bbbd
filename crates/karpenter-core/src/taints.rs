//! Taints and tolerations, with Kubernetes' matching rules and Karpenter's startup/ephemeral taints.

use k8s_openapi::api::core::v1::{Taint, Toleration};
use karpenter_api::well_known;

pub const NO_SCHEDULE: &str = "NoSchedule";
pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
pub const NO_EXECUTE: &str = "NoExecute";

/// Taint keys the node lifecycle, the cloud controller and Karpenter put on nodes that are still
/// starting; pods are assumed to tolerate them on in-flight and uninitialized nodes.
pub const EPHEMERAL_TAINT_KEYS: [&str; 4] = [
    well_known::NODE_NOT_READY_TAINT_KEY,
    well_known::NODE_UNREACHABLE_TAINT_KEY,
    well_known::NODE_UNINITIALIZED_TAINT_KEY,
    well_known::UNREGISTERED_TAINT_KEY,
];

/// Whether the taint is one of [`EPHEMERAL_TAINT_KEYS`].
pub fn is_ephemeral(taint: &Taint) -> bool {
    EPHEMERAL_TAINT_KEYS.contains(&taint.key.as_str())
}

/// Kubernetes `ToleratesTaint`: effects match (an empty toleration effect matches all), keys
/// match (an empty key with `Exists` matches every key), and `Exists` or `Equal` values.
pub fn toleration_tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        return operator == "Exists";
    }
    if key != taint.key {
        return false;
    }
    match operator {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// Whether any toleration tolerates `taint`.
pub fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| toleration_tolerates(t, taint))
}

/// The first taint (of any effect, including `PreferNoSchedule`) not tolerated, as Karpenter
/// checks NodeClaim taints; `None` when all are tolerated.
pub fn first_untolerated<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Option<&'a Taint> {
    taints.iter().find(|taint| !tolerates(tolerations, taint))
}

/// `key=value:Effect` (or `key:Effect`).
pub fn taint_to_string(taint: &Taint) -> String {
    match taint.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={}:{}", taint.key, v, taint.effect),
        _ => format!("{}:{}", taint.key, taint.effect),
    }
}

/// The toleration relaxation adds when a NodePool has `PreferNoSchedule` taints.
pub fn prefer_no_schedule_toleration() -> Toleration {
    Toleration {
        operator: Some("Exists".to_string()),
        effect: Some(PREFER_NO_SCHEDULE.to_string()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }
    fn tol(
        key: Option<&str>,
        op: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn equal_and_exists_match_per_kubernetes() {
        let t = taint("gpu", Some("true"), NO_SCHEDULE);
        assert!(
            toleration_tolerates(&tol(Some("gpu"), None, Some("true"), None), &t),
            "Equal is default"
        );
        assert!(!toleration_tolerates(
            &tol(Some("gpu"), Some("Equal"), Some("false"), None),
            &t
        ));
        assert!(toleration_tolerates(
            &tol(Some("gpu"), Some("Exists"), None, None),
            &t
        ));
        assert!(toleration_tolerates(
            &tol(Some("gpu"), Some("Exists"), None, Some(NO_SCHEDULE)),
            &t
        ));
        assert!(!toleration_tolerates(
            &tol(Some("gpu"), Some("Exists"), None, Some(NO_EXECUTE)),
            &t
        ));
        assert!(
            toleration_tolerates(&tol(None, Some("Exists"), None, None), &t),
            "empty key + Exists"
        );
        assert!(!toleration_tolerates(
            &tol(None, Some("Equal"), None, None),
            &t
        ));
        assert!(!toleration_tolerates(
            &tol(Some("other"), Some("Exists"), None, None),
            &t
        ));
    }

    #[test]
    fn prefer_no_schedule_must_be_tolerated_until_relaxed() {
        let taints = [taint("soft", None, PREFER_NO_SCHEDULE)];
        assert!(first_untolerated(&[], &taints).is_some());
        assert!(first_untolerated(&[prefer_no_schedule_toleration()], &taints).is_none());
        assert_eq!(taint_to_string(&taints[0]), "soft:PreferNoSchedule");
    }

    #[test]
    fn ephemeral_taints_are_known() {
        assert!(is_ephemeral(&taint(
            "node.kubernetes.io/not-ready",
            None,
            NO_EXECUTE
        )));
        assert!(is_ephemeral(&taint(
            "karpenter.sh/unregistered",
            None,
            NO_EXECUTE
        )));
        assert!(!is_ephemeral(&taint("custom", None, NO_SCHEDULE)));
    }
}
