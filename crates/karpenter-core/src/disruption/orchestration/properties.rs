//! Invariants of the orchestration machine over random commands and nodes: a command never
//! deletes a candidate before every replacement is initialized and always ends (finished or
//! rolled back by its deadline); a drain never evicts past a PDB and always ends once a
//! deadline bounds it; no answer of either machine leaves the caller without progress (a step
//! to take or a later instant to look again). Budgets are the decision's
//! ([`crate::disruption::budgets`]); `simulate`'s property test checks them over whole runs of
//! this machine.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;
use serde_json::json;

use super::command::{self, CommandStep};
use super::pdb;
use super::termination::{self, MIN_DRAIN_TIME, TerminationStep};
use super::{
    CandidateView, CommandView, InstanceView, Marking, NodeView, ReplacementView,
    replacement_timeout,
};
use crate::drain::Action;
use crate::pod::{self, Pod};

fn t0() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

/// What happens to one replacement once created.
#[derive(Clone, Debug)]
enum Fate {
    InitializesAfter(i64),
    GoneAfter(i64),
    Never,
    LaunchFails,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        4 => (0i64..1_500).prop_map(Fate::InitializesAfter),
        1 => (0i64..900).prop_map(Fate::GoneAfter),
        1 => Just(Fate::Never),
        1 => Just(Fate::LaunchFails),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_command_never_deletes_before_its_replacements_initialize_and_always_ends(
        fates in prop::collection::vec(fate(), 0..4),
        mark_fails in prop::collection::vec(any::<bool>(), 1..4),
    ) {
        let mut view = CommandView {
            started_at: t0(),
            timeout: replacement_timeout(1),
            candidates: mark_fails
                .iter()
                .enumerate()
                .map(|(i, _)| CandidateView {
                    name: format!("n{i}"),
                    marking: Marking::NotYet,
                    deleting: false,
                })
                .collect(),
            replacements: vec![ReplacementView::NotCreated; fates.len()],
            committed: false,
        };
        let mut created_at: Option<Timestamp> = None;
        let mut now = t0();
        let mut ended = false;
        for _ in 0..200 {
            if let Some(created) = created_at {
                for (seen, fate) in view.replacements.iter_mut().zip(&fates) {
                    let since = now.duration_since(created).as_secs();
                    *seen = match (fate, &*seen) {
                        (_, ReplacementView::LaunchFailed(_)) => seen.clone(),
                        (Fate::InitializesAfter(t), _) if since >= *t => ReplacementView::Initialized,
                        (Fate::GoneAfter(t), _) if since >= *t => ReplacementView::Gone,
                        _ => ReplacementView::Launching,
                    };
                }
            }
            let plan = command::next(&view, now);
            prop_assert!(!plan.steps.is_empty(), "an answer without a step");
            for step in &plan.steps {
                match step {
                    CommandStep::Mark(names) => {
                        for (c, fails) in view.candidates.iter_mut().zip(&mark_fails) {
                            if names.contains(&c.name) {
                                c.marking = if *fails { Marking::Failed } else { Marking::Marked };
                            }
                        }
                    }
                    CommandStep::Drop(names) => view.candidates.retain(|c| !names.contains(&c.name)),
                    CommandStep::CreateReplacements => {
                        created_at = Some(now);
                        for (seen, fate) in view.replacements.iter_mut().zip(&fates) {
                            *seen = match fate {
                                Fate::LaunchFails => ReplacementView::LaunchFailed("ice".into()),
                                _ => ReplacementView::Launching,
                            };
                        }
                    }
                    CommandStep::Commit => view.committed = true,
                    CommandStep::WaitForInitialization { deadline } => {
                        prop_assert!(*deadline > now);
                    }
                    CommandStep::DeleteCandidates(_) => {
                        prop_assert!(view.replacements.iter().all(|r| *r == ReplacementView::Initialized));
                        // (Replacements seen initialized at the deadline itself succeed, as
                        // upstream's timeout only turns a wait's error unrecoverable.)
                        view.candidates.iter_mut().for_each(|c| c.deleting = true);
                    }
                    CommandStep::RollBack(_) | CommandStep::Finish => ended = true,
                }
            }
            if ended {
                break;
            }
            if let Some(at) = plan.look_again {
                prop_assert!(at > now, "looks again no later than now");
                // The executor polls; the fates change on whole seconds.
                now = (now + secs(30)).min(at);
            }
        }
        prop_assert!(ended, "the command did not end: {view:?}");
        prop_assert!(now <= command::deadline(&view), "ended at {now}");
    }
}

/// A pod of the `web` workload (under the PDB when `guarded`), with its grace period, tier and
/// do-not-disrupt.
#[derive(Clone, Debug)]
struct PodSpec {
    guarded: bool,
    grace: i64,
    critical: bool,
    do_not_disrupt: bool,
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        any::<bool>(),
        0i64..120,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(guarded, grace, critical, do_not_disrupt)| PodSpec {
            guarded,
            grace,
            critical,
            do_not_disrupt,
        })
}

fn make_pod(i: usize, spec: &PodSpec) -> Pod {
    let mut value = json!({
        "metadata": {"name": format!("p{i}"), "namespace": "default", "uid": format!("u{i}"),
                     "labels": {"app": if spec.guarded { "web" } else { "other" }},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs"}]},
        "spec": {"containers": [{"name": "c"}], "nodeName": "n1",
                 "terminationGracePeriodSeconds": spec.grace},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    });
    if spec.critical {
        value["spec"]["priorityClassName"] = json!("system-cluster-critical");
    }
    if spec.do_not_disrupt {
        value["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    }
    serde_json::from_value(value).unwrap()
}

/// A Ready copy of `web` elsewhere, as its controller re-creates an evicted pod.
fn elsewhere(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("elsewhere-{i}"), "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c"}], "nodeName": "n2"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_drain_never_evicts_past_a_pdb_and_always_ends_under_a_deadline(
        specs in prop::collection::vec(pod_spec(), 0..8),
        max_unavailable in 0i32..3,
        // How long a re-created pod takes to be Ready elsewhere.
        ready_after in 0i64..90,
        deadline_after in 60i64..1_800,
    ) {
        let budget: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap();
        let mut bound: Vec<Pod> = specs.iter().enumerate().map(|(i, s)| make_pod(i, s)).collect();
        let expected = pdb::matching(&budget, bound.iter());
        // Evicted pods: their terminating copy (gone at) and their re-created copy (Ready at).
        let mut terminating: Vec<(Pod, Timestamp)> = Vec::new();
        let mut recreated: Vec<(Pod, Timestamp)> = Vec::new();
        let deadline = t0() + secs(deadline_after);
        let mut drained_since = None;
        let mut instance = InstanceView::Running;
        let mut now = t0();
        let mut released = false;
        for _ in 0..400 {
            terminating.retain(|(_, gone)| *gone > now);
            let ready_elsewhere: Vec<Pod> = recreated
                .iter()
                .filter(|(_, at)| *at <= now)
                .map(|(p, _)| p.clone())
                .collect();
            let everyone: Vec<&Pod> = bound.iter().chain(&ready_elsewhere).collect();
            let counts = pdb::counts(&budget, everyone.iter().copied(), expected);
            let seen: Vec<&Pod> = bound.iter().chain(terminating.iter().map(|(p, _)| p)).collect();
            let view = NodeView {
                pods: seen,
                deadline: Some(deadline),
                pdbs: Some(vec![(&budget, counts)]),
                drained_since,
                min_drain_time: MIN_DRAIN_TIME,
                node_ready: true,
                instance,
            };
            let plan = termination::next(&view, now);
            prop_assert!(
                !plan.steps.is_empty() || plan.look_again.is_some_and(|at| at > now),
                "no step and nothing to wait for at {now}: {plan:?}"
            );
            let mut healthy = counts.healthy;
            for step in &plan.steps {
                match step {
                    TerminationStep::Remove(action) => {
                        let index = bound.iter().position(|p| pod::key(p) == action.key).unwrap();
                        let gone = bound.remove(index);
                        let grace = match action.action {
                            Action::ForceDelete { grace_seconds } => grace_seconds,
                            Action::Evict => {
                                if pdb::selects(&budget, &gone) {
                                    healthy -= 1;
                                    prop_assert!(
                                        healthy >= counts.desired,
                                        "eviction of {} takes {} below {}", action.key, healthy, counts.desired
                                    );
                                }
                                crate::drain::grace_seconds(&gone)
                            }
                        };
                        let gone_at = now + secs(grace.max(0));
                        let mut copy = gone.clone();
                        copy.metadata.deletion_timestamp = Some(Time(gone_at));
                        terminating.push((copy, gone_at));
                        if pdb::selects(&budget, &gone) {
                            recreated.push((elsewhere(index + recreated.len() * 100), now + secs(ready_after)));
                        }
                    }
                    TerminationStep::WaitForPods { .. } => {}
                    TerminationStep::Drained => drained_since = Some(now),
                    TerminationStep::TerminateInstance => instance = InstanceView::Gone,
                    TerminationStep::ReleaseNode => released = true,
                }
            }
            if released {
                break;
            }
            // Refused evictions are retried on the executor's poll.
            let poll = now + secs(10);
            now = plan.look_again.map_or(poll, |at| at.min(poll)).max(now + secs(1));
        }
        prop_assert!(released, "the node was never released");
        // Everything was gone by the deadline (plus the pods' own grace is bounded by it).
        prop_assert!(now <= deadline + MIN_DRAIN_TIME + secs(200), "released at {now}");
    }
}
