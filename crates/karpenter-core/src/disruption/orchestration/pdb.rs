//! PodDisruptionBudget status over a set of pods, as Kubernetes' disruption controller keeps
//! it, and the Eviction API's decision on one pod. The termination machine
//! ([`super::termination`]) plans evictions through this check when it is given PDB facts
//! (`simulate` gives them; the controller leaves the check to the API server), and `simulate`
//! writes the status into the PDBs the disruption pass reads, so a PDB binds as pods move and
//! become Ready again, not by the number frozen in the input.
//!
//! The expected pod count of a PDB is fixed by the caller (the workload's replicas do not change
//! in a simulation): a pod that is evicted and not yet Ready elsewhere is missing from the
//! healthy count, not from the expected one.

use crate::pod::{self, Pod};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_core::ResourceExt;
use kube_core::{Selector, SelectorExt};

/// What the disruption controller writes into a PDB's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PdbCounts {
    pub expected: i32,
    pub healthy: i32,
    pub desired: i32,
}

impl PdbCounts {
    pub fn disruptions_allowed(&self) -> i32 {
        self.healthy.saturating_sub(self.desired).max(0)
    }

    pub fn status(&self) -> PodDisruptionBudgetStatus {
        PodDisruptionBudgetStatus {
            current_healthy: self.healthy,
            desired_healthy: self.desired,
            disruptions_allowed: self.disruptions_allowed(),
            expected_pods: self.expected,
            ..Default::default()
        }
    }
}

/// `namespace/name` of a PDB.
pub fn key(pdb: &PodDisruptionBudget) -> String {
    format!("{}/{}", pdb.namespace().unwrap_or_default(), pdb.name_any())
}

/// Same namespace and the selector matches (a missing selector selects nothing, an empty one
/// everything, as in `policy/v1`; an unparseable one nothing).
pub fn selects(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    let pod_namespace = pod.namespace().unwrap_or_else(|| "default".to_string());
    if pdb.namespace().unwrap_or_else(|| "default".to_string()) != pod_namespace {
        return false;
    }
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.clone()) else {
        return false;
    };
    Selector::try_from(selector).is_ok_and(|s| s.matches(pod.labels()))
}

/// Ready and not terminating: what the disruption controller counts as healthy.
pub fn is_healthy(pod: &Pod) -> bool {
    !pod::is_terminating(pod) && is_ready(pod)
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The active pods `pdb` selects among `pods`.
pub fn matching<'a>(pdb: &PodDisruptionBudget, pods: impl IntoIterator<Item = &'a Pod>) -> i32 {
    let count = pods
        .into_iter()
        .filter(|p| !pod::is_terminal(p) && selects(pdb, p))
        .count();
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// The counts of `pdb` over `pods`, with `expected` pods wanted.
pub fn counts<'a>(
    pdb: &PodDisruptionBudget,
    pods: impl IntoIterator<Item = &'a Pod>,
    expected: i32,
) -> PdbCounts {
    let healthy = pods
        .into_iter()
        .filter(|p| !pod::is_terminal(p) && selects(pdb, p) && is_healthy(p))
        .count();
    let healthy = i32::try_from(healthy).unwrap_or(i32::MAX);
    let spec = pdb.spec.as_ref();
    let desired = if let Some(max) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        expected.saturating_sub(scaled(max, expected)).max(0)
    } else if let Some(min) = spec.and_then(|s| s.min_available.as_ref()) {
        scaled(min, expected)
    } else {
        0
    };
    PdbCounts {
        expected,
        healthy,
        desired,
    }
}

/// An int-or-percent against `total`; percentages round up, as Kubernetes does. An unreadable
/// value counts as `total` for `minAvailable` and 0 for `maxUnavailable` (both fail closed
/// through the callers: nothing may be evicted).
fn scaled(value: &IntOrString, total: i32) -> i32 {
    match value {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => match s.trim().strip_suffix('%') {
            Some(percent) => percent.trim().parse::<i64>().map_or(0, |p| {
                let scaled = (p.saturating_mul(i64::from(total)) + 99).div_euclid(100);
                i32::try_from(scaled).unwrap_or(i32::MAX)
            }),
            None => s.trim().parse().unwrap_or(0),
        },
    }
}

/// Whether the Eviction API lets `pod` go now, given each PDB with its current counts: no PDB
/// selects it; or its one PDB allows a disruption; or the pod is not healthy and the PDB lets
/// unhealthy pods go (`unhealthyPodEvictionPolicy: AlwaysAllow`, or the default policy while
/// the budget is met). Several PDBs refuse, as the API server does.
pub fn eviction_allowed(pod: &Pod, budgets: &[(&PodDisruptionBudget, PdbCounts)]) -> bool {
    let selecting: Vec<&(&PodDisruptionBudget, PdbCounts)> = budgets
        .iter()
        .filter(|(pdb, _)| selects(pdb, pod))
        .collect();
    let [(pdb, counts)] = selecting.as_slice() else {
        return selecting.is_empty();
    };
    if !is_healthy(pod) {
        let always_allow = pdb
            .spec
            .as_ref()
            .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
            == Some("AlwaysAllow");
        let budget_met = counts.healthy >= counts.desired && counts.desired > 0;
        if always_allow || budget_met {
            return true;
        }
    }
    counts.disruptions_allowed() > 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn pdb(spec: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": spec
        }))
        .unwrap()
    }

    fn web(name: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    #[test]
    fn max_unavailable_one_allows_one_eviction_until_the_pod_is_ready_again() {
        let budget = pdb(json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}));
        let all_ready = [web("a", true), web("b", true), web("c", true)];
        let counts_ready = counts(&budget, &all_ready, 3);
        assert_eq!(counts_ready.desired, 2);
        assert_eq!(counts_ready.disruptions_allowed(), 1);
        assert!(eviction_allowed(&all_ready[0], &[(&budget, counts_ready)]));
        // One evicted and not Ready yet on its new node: the next eviction waits.
        let one_moving = [web("a", false), web("b", true), web("c", true)];
        let moving = counts(&budget, &one_moving, 3);
        assert_eq!(moving.disruptions_allowed(), 0);
        assert!(!eviction_allowed(&one_moving[1], &[(&budget, moving)]));
    }

    #[test]
    fn min_available_percentages_round_up_and_always_allow_lets_unhealthy_pods_go() {
        let budget = pdb(json!({
            "minAvailable": "50%",
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": {"app": "web"}}
        }));
        let pods = [web("a", true), web("b", false), web("c", false)];
        let c = counts(&budget, &pods, 3);
        assert_eq!((c.healthy, c.desired), (1, 2), "50% of 3 rounds up to 2");
        assert!(!eviction_allowed(&pods[0], &[(&budget, c)]));
        assert!(eviction_allowed(&pods[1], &[(&budget, c)]));
    }

    #[test]
    fn a_pod_under_two_pdbs_is_refused_and_one_under_none_goes() {
        let one = pdb(json!({"maxUnavailable": 3, "selector": {"matchLabels": {"app": "web"}}}));
        let two = pdb(json!({"maxUnavailable": 3, "selector": {}}));
        let pods = [web("a", true)];
        let c = counts(&one, &pods, 1);
        assert!(!eviction_allowed(&pods[0], &[(&one, c), (&two, c)]));
        assert!(eviction_allowed(&pods[0], &[]));
    }
}
