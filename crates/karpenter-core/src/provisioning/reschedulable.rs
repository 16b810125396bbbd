//! Pods on nodes marked for deletion that the provisioner plans capacity for (upstream
//! `ReschedulablePods`, karpenter-core §3.1 step 3): they will need a new home once their node
//! drains, so the pass makes room for them before the eviction happens.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::pod::Pod;
use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_core::{ResourceExt, Selector, SelectorExt};

use crate::pod::{self, has_do_not_disrupt};

/// Whether `pod` will be evicted from its deleting node and needs capacity elsewhere: active (or
/// a terminating StatefulSet pod, which must be gone before its replacement is created), not a
/// DaemonSet or static pod, not protected by `karpenter.sh/do-not-disrupt` at `now`, and not
/// held by a PDB that allows no disruption at all (such a pod stays until the drain deadline, if
/// ever) — unless the pod is not Ready and that PDB lets unhealthy pods go (`AlwaysAllow`).
pub fn is_reschedulable(pod: &Pod, pdbs: &[&PodDisruptionBudget], now: Timestamp) -> bool {
    moves_with_its_node(pod)
        && !has_do_not_disrupt(pod, now)
        && !pdbs.iter().any(|pdb| {
            fully_blocking(pdb) && selects(pdb, pod) && !unhealthy_pod_always_evictable(pdb, pod)
        })
}

/// The Eviction API's rule for a PDB with `unhealthyPodEvictionPolicy: AlwaysAllow`: a pod whose
/// `Ready` condition is not `True` may be evicted whatever the budget says.
pub(crate) fn unhealthy_pod_always_evictable(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    let always_allow = pdb
        .spec
        .as_ref()
        .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
        == Some("AlwaysAllow");
    always_allow && !has_ready_condition(pod)
}

/// `Ready=True` among the pod's conditions (the API server's `IsPodReady`).
fn has_ready_condition(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
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

/// The controllers that replace an evicted pod with a new one as soon as it is terminating.
const REPLACING_CONTROLLERS: [&str; 2] = ["ReplicaSet", "ReplicationController"];

/// An evicted pod whose controller will replace it: terminating (not yet terminal) after the
/// Eviction API took it (its `DisruptionTarget` condition, reason `EvictionByEvictionAPI`), and
/// controlled by a ReplicaSet or ReplicationController. Returns the controller's UID and when
/// the eviction happened.
///
/// Why it matters: between the eviction and the replacement's creation (the controller-manager's
/// latency, seconds on a loaded control plane) neither pod counts as one to place, and a pass
/// that ran then planned its node one pod short, then a second node for the replacement.
pub fn evicted_for_replacement(pod: &Pod) -> Option<(&str, Timestamp)> {
    if !pod::is_terminating(pod) || pod::is_terminal(pod) {
        return None;
    }
    let evicted = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| {
        c.type_ == "DisruptionTarget"
            && c.status == "True"
            && c.reason.as_deref() == Some("EvictionByEvictionAPI")
    })?;
    let at = evicted
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| eviction_time_from_deletion(pod))?;
    let owner = controller(pod)?;
    REPLACING_CONTROLLERS
        .contains(&owner.kind.as_str())
        .then_some((owner.uid.as_str(), at))
}

/// The deletion timestamp minus the grace period: when the pod was deleted.
fn eviction_time_from_deletion(pod: &Pod) -> Option<Timestamp> {
    let deletion = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
    deletion
        .checked_sub(jiff::SignedDuration::from_secs(grace))
        .ok()
}

/// The owner reference marked `controller: true`.
fn controller(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// Of `candidates`, the pods for which [`evicted_for_replacement`] holds and whose replacement
/// is not among `pods` yet (`pods` is only read when there is such a pod). A replacement is a pod of the same controller, not terminating, created
/// at or after the earliest of those evictions (timestamps have whole seconds); per controller
/// the earliest evictions count as replaced first. A pod created by a scale-up meanwhile may be
/// taken for a replacement: the pass then plans as it would have without this rule.
pub fn awaiting_replacement<'a, 'p>(
    candidates: Vec<&'a Arc<Pod>>,
    pods: impl Iterator<Item = &'p Pod>,
) -> Vec<&'a Arc<Pod>> {
    // Per controller: its evicted pods (sorted below, earliest eviction first).
    let mut by_controller: BTreeMap<&str, Vec<(Timestamp, &'a Arc<Pod>)>> = BTreeMap::new();
    for pod in candidates {
        if let Some((owner, at)) = evicted_for_replacement(pod) {
            by_controller.entry(owner).or_default().push((at, pod));
        }
    }
    if by_controller.is_empty() {
        return Vec::new();
    }
    // Per controller: the second of its earliest eviction, and the replacements seen.
    let mut replacements: BTreeMap<&str, (i64, usize)> = by_controller
        .iter_mut()
        .map(|(owner, group)| {
            group.sort_by_key(|(at, pod)| (*at, pod.name_any()));
            let earliest = group.first().map_or(i64::MAX, |(at, _)| at.as_second());
            (*owner, (earliest, 0))
        })
        .collect();
    for pod in pods.filter(|p| !pod::is_terminating(p)) {
        let (Some(owner), Some(created)) =
            (controller(pod), pod.metadata.creation_timestamp.as_ref())
        else {
            continue;
        };
        // Whole seconds: the replacement's creation is at or after the eviction's second.
        if let Some((earliest, seen)) = replacements.get_mut(owner.uid.as_str())
            && created.0.as_second() >= *earliest
        {
            *seen += 1;
        }
    }
    by_controller
        .into_iter()
        .flat_map(|(owner, group)| {
            let replaced = replacements.get(owner).map_or(0, |&(_, seen)| seen);
            group.into_iter().skip(replaced).map(|(_, pod)| pod)
        })
        .collect()
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

    fn now() -> Timestamp {
        Timestamp::from_second(1_704_067_200).unwrap()
    }

    #[test]
    fn a_not_ready_pod_under_an_always_allow_pdb_moves_like_any_other() {
        let web = json!({"matchLabels": {"app": "web"}});
        let always = pdb(json!({"selector": web, "maxUnavailable": 0,
                                "unhealthyPodEvictionPolicy": "AlwaysAllow"}));
        let if_healthy = pdb(json!({"selector": web, "maxUnavailable": 0,
                                    "unhealthyPodEvictionPolicy": "IfHealthyBudget"}));
        let not_ready = pod(json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}]}}));
        let ready = pod(json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}}));
        assert!(is_reschedulable(&not_ready, &[&always], now()));
        assert!(!is_reschedulable(&ready, &[&always], now()));
        assert!(!is_reschedulable(&not_ready, &[&if_healthy], now()));
    }

    #[test]
    fn a_do_not_disrupt_duration_keeps_the_pod_only_until_it_runs_out() {
        let started = json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "2m"}},
                             "status": {"startTime": TERMINATING}});
        let p = pod(started);
        assert!(!is_reschedulable(&p, &[], now()));
        let later = now()
            .checked_add(jiff::SignedDuration::from_mins(2))
            .unwrap();
        assert!(is_reschedulable(&p, &[], later));
        let invalid = json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "soon"}}});
        assert!(is_reschedulable(&pod(invalid), &[], now()));
    }

    #[test]
    fn active_pods_are_reschedulable_and_daemon_static_terminal_ones_are_not() {
        assert!(is_reschedulable(&pod(json!({})), &[], now()));
        assert!(!is_reschedulable(&pod(owned_by("DaemonSet")), &[], now()));
        assert!(!is_reschedulable(&pod(owned_by("Node")), &[], now()));
        assert!(!is_reschedulable(
            &pod(json!({"status": {"phase": "Succeeded"}})),
            &[],
            now()
        ));
        let terminating = json!({"metadata": {"deletionTimestamp": TERMINATING}});
        assert!(!is_reschedulable(&pod(terminating.clone()), &[], now()));
        let mut stateful = owned_by("StatefulSet");
        merge(&mut stateful, terminating);
        assert!(
            is_reschedulable(&pod(stateful), &[], now()),
            "a terminating StatefulSet pod is replaced only after it is gone"
        );
        let do_not_disrupt =
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}});
        assert!(!is_reschedulable(&pod(do_not_disrupt), &[], now()));
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
            assert!(
                !is_reschedulable(&pod(json!({})), &[budget], now()),
                "{budget:?}"
            );
        }
        let passing = [
            pdb(json!({"selector": web, "maxUnavailable": 1})),
            pdb(json!({"selector": web, "minAvailable": "50%"})),
            pdb(json!({"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 0})),
            pdb(json!({"maxUnavailable": 0})),
        ];
        for budget in &passing {
            assert!(
                is_reschedulable(&pod(json!({})), &[budget], now()),
                "{budget:?}"
            );
        }
        let mut other_namespace = pdb(json!({"selector": web, "maxUnavailable": 0}));
        other_namespace.metadata.namespace = Some("other".into());
        assert!(is_reschedulable(
            &pod(json!({})),
            &[&other_namespace],
            now()
        ));
    }

    #[test]
    fn only_an_evicted_pod_of_a_replacing_controller_awaits_a_replacement() {
        let evicted = |kind: &str, controller: bool, reason: &str| {
            pod(json!({
                "metadata": {"deletionTimestamp": TERMINATING, "deletionGracePeriodSeconds": 30,
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": "x",
                                                  "uid": "u", "controller": controller}]},
                "status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                           "reason": reason}]}
            }))
        };
        let replica = evicted("ReplicaSet", true, "EvictionByEvictionAPI");
        let (owner, at) =
            evicted_for_replacement(&replica).expect("a ReplicaSet replaces its evicted pod");
        // No transition time: the deletion timestamp less the grace period.
        assert_eq!((owner, at.as_second()), ("u", 1_704_067_200 - 30));
        assert!(
            evicted_for_replacement(&evicted(
                "ReplicationController",
                true,
                "EvictionByEvictionAPI"
            ))
            .is_some()
        );
        // A StatefulSet pod is reschedulable while terminating already; a Job may not replace.
        assert!(
            evicted_for_replacement(&evicted("StatefulSet", true, "EvictionByEvictionAPI"))
                .is_none()
        );
        assert!(evicted_for_replacement(&evicted("Job", true, "EvictionByEvictionAPI")).is_none());
        assert!(
            evicted_for_replacement(&evicted("ReplicaSet", false, "EvictionByEvictionAPI"))
                .is_none()
        );
        // Preempted or deleted by the taint manager: not the drain's eviction.
        assert!(
            evicted_for_replacement(&evicted("ReplicaSet", true, "PreemptionByScheduler"))
                .is_none()
        );
        // Not terminating: not evicted yet.
        assert!(evicted_for_replacement(&pod(owned_by("ReplicaSet"))).is_none());
    }
}
