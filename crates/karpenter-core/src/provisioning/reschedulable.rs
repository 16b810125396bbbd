//! Pods on nodes marked for deletion that the provisioner plans capacity for (upstream
//! `ReschedulablePods`, karpenter-core §3.1 step 3): they will need a new home once their node
//! drains, so the pass makes room for them before the eviction happens.

use crate::pod::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_core::{ResourceExt, Selector, SelectorExt};

use crate::pod::{self, has_do_not_disrupt};

/// Whether `pod` will be evicted from its deleting node and needs capacity elsewhere: active (or
/// a terminating StatefulSet pod, which must be gone before its replacement is created), not a
/// DaemonSet or static pod, not `karpenter.sh/do-not-disrupt`, and not held by a PDB that allows
/// no disruption at all (such a pod stays until the drain deadline, if ever).
pub fn is_reschedulable(pod: &Pod, pdbs: &[&PodDisruptionBudget]) -> bool {
    moves_with_its_node(pod)
        && !has_do_not_disrupt(pod)
        && !pdbs
            .iter()
            .any(|pdb| fully_blocking(pdb) && selects(pdb, pod))
}

/// Upstream `IsReschedulable`: a pod that needs a new home when its node goes — active, or a
/// terminating StatefulSet pod (its replacement is created only after it is gone); never a
/// DaemonSet or static pod, which live and die with their node.
pub fn moves_with_its_node(pod: &Pod) -> bool {
    let active = !pod::is_terminal(pod) && !pod::is_terminating(pod);
    let terminating_stateful_set =
        pod::is_terminating(pod) && !pod::is_terminal(pod) && pod::is_owned_by(pod, "StatefulSet");
    (active || terminating_stateful_set)
        && !pod::is_owned_by_daemonset(pod)
        && !pod::is_owned_by_node(pod)
}

/// `maxUnavailable: 0` / `"0%"` or `minAvailable: "100%"`: no voluntary eviction ever passes.
fn fully_blocking(pdb: &PodDisruptionBudget) -> bool {
    let Some(spec) = pdb.spec.as_ref() else {
        return false;
    };
    let max_unavailable_zero = match &spec.max_unavailable {
        Some(IntOrString::Int(0)) => true,
        Some(IntOrString::String(s)) => s.trim() == "0%" || s.trim() == "0",
        _ => false,
    };
    let min_available_all =
        matches!(&spec.min_available, Some(IntOrString::String(s)) if s.trim() == "100%");
    max_unavailable_zero || min_available_all
}

/// Same namespace and the PDB's selector matches (a missing selector selects nothing, an empty
/// one everything, as in `policy/v1`). An unparseable selector selects nothing.
pub(crate) fn selects(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    if pdb.namespace() != pod.namespace() {
        return false;
    }
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.clone()) else {
        return false;
    };
    Selector::try_from(selector).is_ok_and(|s| s.matches(pod.labels()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(extra: serde_json::Value) -> Pod {
        let mut value = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "pause"}]},
            "status": {"phase": "Running"}
        });
        merge(&mut value, extra);
        serde_json::from_value(value).unwrap()
    }

    fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
        match (base, extra) {
            (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    fn owned_by(kind: &str) -> serde_json::Value {
        json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": kind, "name": "x", "uid": "u"}]}})
    }

    fn pdb(spec: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": spec
        }))
        .unwrap()
    }

    const TERMINATING: &str = "2024-01-01T00:00:00Z";

    #[test]
    fn active_pods_are_reschedulable_and_daemon_static_terminal_ones_are_not() {
        assert!(is_reschedulable(&pod(json!({})), &[]));
        assert!(!is_reschedulable(&pod(owned_by("DaemonSet")), &[]));
        assert!(!is_reschedulable(&pod(owned_by("Node")), &[]));
        assert!(!is_reschedulable(
            &pod(json!({"status": {"phase": "Succeeded"}})),
            &[]
        ));
        let terminating = json!({"metadata": {"deletionTimestamp": TERMINATING}});
        assert!(!is_reschedulable(&pod(terminating.clone()), &[]));
        let mut stateful = owned_by("StatefulSet");
        merge(&mut stateful, terminating);
        assert!(
            is_reschedulable(&pod(stateful), &[]),
            "a terminating StatefulSet pod is replaced only after it is gone"
        );
        let do_not_disrupt =
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}});
        assert!(!is_reschedulable(&pod(do_not_disrupt), &[]));
    }

    #[test]
    fn only_fully_blocking_pdbs_that_select_the_pod_keep_it() {
        let web = json!({"matchLabels": {"app": "web"}});
        let blocking = [
            pdb(json!({"selector": web, "maxUnavailable": 0})),
            pdb(json!({"selector": web, "maxUnavailable": "0%"})),
            pdb(json!({"selector": web, "minAvailable": "100%"})),
            pdb(json!({"selector": {}, "maxUnavailable": 0})),
        ];
        for budget in &blocking {
            assert!(!is_reschedulable(&pod(json!({})), &[budget]), "{budget:?}");
        }
        let passing = [
            pdb(json!({"selector": web, "maxUnavailable": 1})),
            pdb(json!({"selector": web, "minAvailable": "50%"})),
            pdb(json!({"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 0})),
            pdb(json!({"maxUnavailable": 0})),
        ];
        for budget in &passing {
            assert!(is_reschedulable(&pod(json!({})), &[budget]), "{budget:?}");
        }
        let mut other_namespace = pdb(json!({"selector": web, "maxUnavailable": 0}));
        other_namespace.metadata.namespace = Some("other".into());
        assert!(is_reschedulable(&pod(json!({})), &[&other_namespace]));
    }
}
