//! PodDisruptionBudget arithmetic: the status the disruption controller would publish, and
//! whether the eviction subresource lets a pod go.

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::selector::LabelSelector;

/// The numbers a PDB's status carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PdbStatus {
    pub expected_pods: i64,
    pub current_healthy: i64,
    pub desired_healthy: i64,
    pub disruptions_allowed: i64,
}

impl PdbStatus {
    /// Writes the numbers into a PDB's status, keeping other status fields.
    pub(crate) fn apply_to(&self, pdb: &mut Value) {
        let generation = pdb
            .pointer("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1));
        if !pdb.get("status").is_some_and(Value::is_object) {
            pdb["status"] = json!({});
        }
        if let Some(status) = pdb.get_mut("status").and_then(Value::as_object_mut) {
            status.insert("expectedPods".into(), json!(self.expected_pods));
            status.insert("currentHealthy".into(), json!(self.current_healthy));
            status.insert("desiredHealthy".into(), json!(self.desired_healthy));
            status.insert("disruptionsAllowed".into(), json!(self.disruptions_allowed));
            status.insert("observedGeneration".into(), generation);
        }
    }
}

pub(crate) fn is_terminating(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

pub(crate) fn is_terminal_pod(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c.get("type") == Some(&json!("Ready")) && c.get("status") == Some(&json!("True")))
}

/// A pod that counts towards `currentHealthy`: Ready and not being deleted.
fn is_healthy(pod: &Value) -> bool {
    is_ready(pod) && !is_terminating(pod)
}

/// Whether the PDB's selector picks this pod (a null selector picks none).
pub(crate) fn selects(pdb: &Value, pod: &Value) -> Result<bool, ApiError> {
    let selector = pdb
        .pointer("/spec/selector")
        .cloned()
        .unwrap_or(Value::Null);
    Ok(LabelSelector::from_object(&selector)?.is_some_and(|s| s.matches(pod)))
}

/// Resolves an int-or-percent against a total; percentages round up, as upstream does.
fn scaled(value: &Value, total: i64, field: &str) -> Result<i64, ApiError> {
    let invalid = || {
        ApiError::invalid(
            "poddisruptionbudgets",
            "",
            &format!("spec.{field}: {value} must be an integer or a percentage like \"50%\""),
        )
    };
    match value {
        Value::Number(n) => n.as_i64().ok_or_else(invalid),
        Value::String(s) => {
            let percent: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(invalid)?;
            Ok((percent * total + 99) / 100)
        }
        _ => Err(invalid()),
    }
}

/// Computes a PDB's status from the pods in its namespace. `controller_of` names a pod's
/// top-level controller and its desired replicas (a Deployment's, ReplicaSet's or StatefulSet's
/// `spec.replicas`), so the expected count stays put while a replacement pod is missing; pods
/// without a known controller count once each.
pub(crate) fn compute_status(
    pdb: &Value,
    pods: &[&Value],
    controller_of: impl Fn(&Value) -> Option<(String, i64)>,
) -> Result<PdbStatus, ApiError> {
    let mut matching = Vec::new();
    for pod in pods {
        if !is_terminal_pod(pod) && selects(pdb, pod)? {
            matching.push(*pod);
        }
    }
    let mut controllers: Vec<(String, i64)> = Vec::new();
    let mut uncontrolled = 0;
    for pod in &matching {
        match controller_of(pod) {
            Some((id, replicas)) if !controllers.iter().any(|(c, _)| *c == id) => {
                controllers.push((id, replicas));
            }
            Some(_) => {}
            None => uncontrolled += 1,
        }
    }
    let expected = controllers.iter().map(|(_, r)| r).sum::<i64>() + uncontrolled;
    let current_healthy = matching.iter().filter(|p| is_healthy(p)).count() as i64;
    let desired_healthy = if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        (expected - scaled(max, expected, "maxUnavailable")?).max(0)
    } else if let Some(min) = pdb.pointer("/spec/minAvailable") {
        scaled(min, expected, "minAvailable")?
    } else {
        0
    };
    Ok(PdbStatus {
        expected_pods: expected,
        current_healthy,
        desired_healthy,
        disruptions_allowed: (current_healthy - desired_healthy).max(0),
    })
}

/// Decides an eviction given the PDBs that select the pod, each with its current status.
/// The API server's rules (`pkg/registry/core/pod/storage/eviction.go`): a pod that is
/// finished, pending or already being deleted ignores its PDBs (`canIgnorePDB`); more than one PDB
/// is an error; a pod that is not Ready may go when its PDB says `AlwaysAllow`, or (the default
/// `IfHealthyBudget`) while the budget is otherwise met; else the budget must allow a disruption.
pub(crate) fn check_eviction(pod: &Value, budgets: &[(&Value, PdbStatus)]) -> Result<(), ApiError> {
    let pending = pod.pointer("/status/phase").and_then(Value::as_str) == Some("Pending");
    if is_terminating(pod) || is_terminal_pod(pod) || pending {
        return Ok(());
    }
    let (pdb, status) = match budgets {
        [] => return Ok(()),
        [one] => one,
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    if !is_healthy(pod) {
        let policy = pdb
            .pointer("/spec/unhealthyPodEvictionPolicy")
            .and_then(Value::as_str);
        let budget_healthy =
            status.current_healthy >= status.desired_healthy && status.desired_healthy > 0;
        if policy == Some("AlwaysAllow") || budget_healthy {
            return Ok(());
        }
    }
    if status.disruptions_allowed > 0 {
        return Ok(());
    }
    let name = pdb
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Err(ApiError::too_many_requests(format!(
        "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget {name} needs {} healthy pods and has {} currently",
        status.desired_healthy, status.current_healthy
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    fn pdb(spec: Value) -> Value {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "web"}});
        json!({"metadata": {"name": "web", "generation": 1}, "spec": spec})
    }

    fn status(pdb: &Value, pods: &[Value]) -> PdbStatus {
        let refs: Vec<&Value> = pods.iter().collect();
        compute_status(pdb, &refs, |_| None).unwrap()
    }

    #[test]
    fn min_available_and_max_unavailable() {
        let pods = [pod("a", true), pod("b", true), pod("c", false)];
        let s = status(&pdb(json!({"minAvailable": 2})), &pods);
        assert_eq!(
            (
                s.expected_pods,
                s.current_healthy,
                s.desired_healthy,
                s.disruptions_allowed
            ),
            (3, 2, 2, 0)
        );
        let s = status(&pdb(json!({"maxUnavailable": 1})), &pods);
        assert_eq!((s.desired_healthy, s.disruptions_allowed), (2, 0));
        // 34% of 3 rounds up to 2 unavailable, so 1 must stay healthy.
        let s = status(&pdb(json!({"maxUnavailable": "34%"})), &pods);
        assert_eq!((s.desired_healthy, s.disruptions_allowed), (1, 1));
        let s = status(&pdb(json!({"minAvailable": "50%"})), &pods);
        assert_eq!((s.desired_healthy, s.disruptions_allowed), (2, 0));
        let bad = compute_status(&pdb(json!({"minAvailable": "half"})), &[], |_| None);
        assert_eq!(bad.map_err(|e| e.code), Err(422));
    }

    #[test]
    fn controller_replicas_hold_expected_count() {
        let pods = [pod("a", true), pod("b", true)];
        let refs: Vec<&Value> = pods.iter().collect();
        let s = compute_status(&pdb(json!({"maxUnavailable": 1})), &refs, |_| {
            Some(("rs".into(), 3))
        })
        .unwrap();
        assert_eq!(
            (s.expected_pods, s.desired_healthy, s.disruptions_allowed),
            (3, 2, 0)
        );
    }

    #[test]
    fn eviction_verdicts() {
        let budget = pdb(json!({"minAvailable": 2}));
        let blocked = PdbStatus {
            expected_pods: 2,
            current_healthy: 2,
            desired_healthy: 2,
            disruptions_allowed: 0,
        };
        let healthy = pod("a", true);
        assert_eq!(
            check_eviction(&healthy, &[(&budget, blocked)]).map_err(|e| e.code),
            Err(429)
        );
        let open = PdbStatus {
            disruptions_allowed: 1,
            current_healthy: 3,
            ..blocked
        };
        assert!(check_eviction(&healthy, &[(&budget, open)]).is_ok());
        assert!(check_eviction(&healthy, &[]).is_ok());
        let two = [(&budget, open), (&budget, open)];
        assert_eq!(check_eviction(&healthy, &two).map_err(|e| e.code), Err(500));
        // An unready pod may go while the budget is otherwise met.
        assert!(check_eviction(&pod("c", false), &[(&budget, blocked)]).is_ok());
        let short = PdbStatus {
            current_healthy: 1,
            ..blocked
        };
        assert!(check_eviction(&pod("c", false), &[(&budget, short)]).is_err());
        let always = pdb(json!({"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow"}));
        assert!(check_eviction(&pod("c", false), &[(&always, short)]).is_ok());
        // AlwaysAllow lets only unready pods through a budget that allows nothing.
        assert_eq!(
            check_eviction(&healthy, &[(&always, blocked)]).map_err(|e| e.code),
            Err(429)
        );
        // A pending pod ignores its PDB, as the API server's `canIgnorePDB` says.
        let mut pending = pod("p", false);
        pending["status"]["phase"] = json!("Pending");
        assert!(check_eviction(&pending, &[(&budget, short)]).is_ok());
    }
}
