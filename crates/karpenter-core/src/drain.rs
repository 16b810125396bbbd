//! What draining a node does next, as a pure function of its pods, the time and the
//! termination deadline (the controller's `termination` does the evictions) (upstream `Terminator.Drain` + the eviction queue's force-delete rule).
//!
//! Graceful evictions go in four tiers, mirroring kubelet graceful node shutdown: non-critical
//! non-DaemonSet pods, then non-critical DaemonSet pods, then critical non-DaemonSet, then
//! critical DaemonSet pods. A tier starts only once every pod of the earlier tiers is gone
//! (terminating pods still count). Pods that must go before the deadline regardless (so they
//! get their full `terminationGracePeriodSeconds`) are force-deleted whatever their tier.

use crate::pod::Pod;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Taint;
use karpenter_api::well_known::DISRUPTED_TAINT_KEY;
use kube_core::ResourceExt;

pub use crate::pod::has_do_not_disrupt;
use crate::pod::{is_owned_by_daemonset, is_owned_by_node, is_terminal, is_terminating, key};
use crate::taints::{NO_SCHEDULE, tolerates};

/// Pods deleted more than this long ago are treated as stuck and no longer block the drain.
pub const STUCK_TERMINATING_AFTER: SignedDuration = SignedDuration::from_mins(1);
/// Kubernetes' default `terminationGracePeriodSeconds`.
pub const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// Eviction order; lower goes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    NonCriticalNonDaemon,
    NonCriticalDaemon,
    CriticalNonDaemon,
    CriticalDaemon,
}

pub fn is_critical(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|p| CRITICAL_PRIORITY_CLASSES.contains(&p.as_str()))
}

pub fn tier(pod: &Pod) -> Tier {
    match (is_critical(pod), is_owned_by_daemonset(pod)) {
        (false, false) => Tier::NonCriticalNonDaemon,
        (false, true) => Tier::NonCriticalDaemon,
        (true, false) => Tier::CriticalNonDaemon,
        (true, true) => Tier::CriticalDaemon,
    }
}

fn disrupted_taint() -> Taint {
    Taint {
        key: DISRUPTED_TAINT_KEY.into(),
        effect: NO_SCHEDULE.into(),
        ..Taint::default()
    }
}

/// Pods that tolerate the disrupted taint would come straight back, so they are not drained.
pub fn tolerates_disruption(pod: &Pod) -> bool {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    tolerates(&tolerations, &disrupted_taint())
}

fn deletion_time(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.deletion_timestamp.as_ref().map(|t| t.0)
}

/// Deleted over a minute ago and still here: a kubelet that will not finish; ignored.
pub fn is_stuck_terminating(pod: &Pod, now: Timestamp) -> bool {
    deletion_time(pod).is_some_and(|at| now.duration_since(at) > STUCK_TERMINATING_AFTER)
}

/// A pod the drain waits for.
pub fn is_drainable(pod: &Pod, now: Timestamp) -> bool {
    !is_terminal(pod)
        && !tolerates_disruption(pod)
        && !is_stuck_terminating(pod, now)
        && !is_owned_by_node(pod)
}

/// A pod's `terminationGracePeriodSeconds`, Kubernetes' 30 s when unset, never negative.
pub fn grace_seconds(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
        .max(0)
}

/// Force-delete when the deadline leaves the pod no more than its own grace period, or when it
/// is already terminating with a deletion time past the deadline. Returns the grace period to
/// delete with: the time left, at least 1 s (never 0, so two copies never run at once).
pub fn force_delete_grace(pod: &Pod, now: Timestamp, deadline: Option<Timestamp>) -> Option<i64> {
    let deadline = deadline?;
    let latest_start = deadline
        .checked_sub(SignedDuration::from_secs(grace_seconds(pod)))
        .unwrap_or(deadline);
    let needed = match deletion_time(pod) {
        Some(deleted) => deleted > deadline,
        None => now > latest_start,
    };
    needed.then(|| deadline.duration_since(now).as_secs().max(1))
}

/// What to do with one pod now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Through the Eviction API (PDBs honoured).
    Evict,
    /// A DELETE with this grace period (PDBs and do-not-disrupt bypassed: the deadline is here).
    ForceDelete { grace_seconds: i64 },
}

/// One pod to act on, identified by `namespace/name` and UID (a re-created pod with the same
/// name is a different pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAction {
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub action: Action,
}

/// The drain's next step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainPlan {
    pub actions: Vec<PodAction>,
    /// Pods the drain still waits for (0 = drained).
    pub waiting: usize,
    /// Of those, pods held by `karpenter.sh/do-not-disrupt` until the deadline.
    pub do_not_disrupt: usize,
    /// The tier being evicted, if any.
    pub tier: Option<Tier>,
}

fn action(pod: &Pod, action: Action) -> PodAction {
    PodAction {
        key: key(pod),
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        action,
    }
}

/// Plans the next drain step for the pods bound to a node.
pub fn plan(pods: &[&Pod], now: Timestamp, deadline: Option<Timestamp>) -> DrainPlan {
    let waiting: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| is_drainable(p, now))
        .collect();
    let mut out = DrainPlan {
        waiting: waiting.len(),
        ..DrainPlan::default()
    };
    let mut graceful = Vec::new();
    for pod in waiting {
        match force_delete_grace(pod, now, deadline) {
            Some(grace_seconds) => out
                .actions
                .push(action(pod, Action::ForceDelete { grace_seconds })),
            None => graceful.push(pod),
        }
    }
    out.tier = graceful.iter().map(|p| tier(p)).min();
    for pod in graceful
        .into_iter()
        .filter(|p| Some(tier(p)) == out.tier && !is_terminating(p))
    {
        if has_do_not_disrupt(pod, now) {
            out.do_not_disrupt += 1;
        } else {
            out.actions.push(action(pod, Action::Evict));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION;
    use proptest::prelude::*;
    use serde_json::json;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_704_067_200).unwrap()
    }

    fn pod(name: &str, critical: bool, daemon: bool) -> Pod {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        if critical {
            p.spec.as_mut().unwrap().priority_class_name =
                Some(Box::new("system-node-critical".into()));
        }
        if daemon {
            p.metadata.owner_references = Some(vec![serde_json::from_value(
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds"}),
            )
            .unwrap()]);
        }
        p
    }

    fn names(plan: &DrainPlan) -> Vec<&str> {
        plan.actions.iter().map(|a| a.name.as_str()).collect()
    }

    #[test]
    fn evicts_one_tier_at_a_time() {
        let pods = [
            pod("cd", true, true),
            pod("c", true, false),
            pod("d", false, true),
            pod("a", false, false),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&refs, t0(), None);
        assert_eq!(
            (names(&p), p.waiting, p.tier),
            (vec!["a"], 4, Some(Tier::NonCriticalNonDaemon))
        );
        // `a` terminating still holds the next tier back.
        let mut terminating = pods[3].clone();
        terminating.metadata.deletion_timestamp = Some(Time(t0()));
        let refs = vec![&pods[0], &pods[1], &pods[2], &terminating];
        assert!(plan(&refs, t0(), None).actions.is_empty());
        let p = plan(&refs[..3], t0(), None);
        assert_eq!(names(&p), ["d"]);
        assert_eq!(names(&plan(&refs[..2], t0(), None)), ["c"]);
        assert_eq!(names(&plan(&refs[..1], t0(), None)), ["cd"]);
    }

    #[test]
    fn skips_tolerating_static_terminal_and_stuck_pods() {
        let mut tolerating = pod("t", false, false);
        tolerating.spec.as_mut().unwrap().tolerations = Some(
            vec![
                serde_json::from_value(json!({"key": DISRUPTED_TAINT_KEY, "operator": "Exists"}))
                    .unwrap(),
            ]
            .into(),
        );
        let mut mirror = pod("m", false, false);
        mirror.metadata.owner_references = Some(vec![
            serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "n"}),
            )
            .unwrap(),
        ]);
        let mut done = pod("s", false, false);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let mut stuck = pod("k", false, false);
        stuck.metadata.deletion_timestamp = Some(Time(t0()));
        let later = t0().checked_add(SignedDuration::from_secs(61)).unwrap();
        let p = plan(&[&tolerating, &mirror, &done, &stuck], later, None);
        assert_eq!((p.waiting, p.actions.len()), (0, 0));
    }

    #[test]
    fn do_not_disrupt_waits_until_the_deadline_then_force_deletes() {
        let mut held = pod("h", false, false);
        held.metadata.annotations =
            Some([(DO_NOT_DISRUPT_ANNOTATION.to_string(), "true".to_string())].into());
        held.spec.as_mut().unwrap().termination_grace_period_seconds = Some(10);
        let deadline = t0().checked_add(SignedDuration::from_secs(60)).unwrap();
        let p = plan(&[&held], t0(), Some(deadline));
        assert_eq!((p.actions.len(), p.waiting, p.do_not_disrupt), (0, 1, 1));
        // 51 s in, only 9 s remain: less than its 10 s grace period.
        let late = t0().checked_add(SignedDuration::from_secs(51)).unwrap();
        let p = plan(&[&held], late, Some(deadline));
        assert_eq!(
            p.actions[0].action,
            Action::ForceDelete { grace_seconds: 9 }
        );
        let past = t0().checked_add(SignedDuration::from_secs(90)).unwrap();
        assert_eq!(
            plan(&[&held], past, Some(deadline)).actions[0].action,
            Action::ForceDelete { grace_seconds: 1 }
        );
    }

    #[test]
    fn past_deadline_pods_are_not_gated_behind_earlier_tiers() {
        let normal = pod("a", false, false);
        let mut critical = pod("c", true, false);
        critical
            .spec
            .as_mut()
            .unwrap()
            .termination_grace_period_seconds = Some(120);
        let deadline = t0().checked_add(SignedDuration::from_secs(60)).unwrap();
        let p = plan(&[&normal, &critical], t0(), Some(deadline));
        assert_eq!(names(&p), ["c", "a"]);
        assert!(matches!(
            p.actions[0].action,
            Action::ForceDelete { grace_seconds: 60 }
        ));
        assert_eq!(p.actions[1].action, Action::Evict);
    }

    proptest! {
        /// Whatever the mix, only one tier is evicted per step, it is the lowest tier present,
        /// and every drainable pod is counted as waiting.
        #[test]
        fn one_tier_per_step(kinds in proptest::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 0..12)) {
            let pods: Vec<Pod> = kinds.iter().enumerate().map(|(i, (c, d, _))| pod(&format!("p{i}"), *c, *d)).collect();
            let refs: Vec<&Pod> = pods.iter().collect();
            let p = plan(&refs, t0(), None);
            prop_assert_eq!(p.waiting, pods.len());
            let lowest = pods.iter().map(tier).min();
            prop_assert_eq!(p.tier, lowest);
            for a in &p.actions {
                let evicted = pods.iter().find(|x| x.name_any() == a.name).map(tier);
                prop_assert_eq!(evicted, lowest);
            }
            prop_assert_eq!(p.actions.len(), pods.iter().filter(|x| Some(tier(x)) == lowest).count());
        }
    }
}
