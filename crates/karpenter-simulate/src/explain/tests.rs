//! Explanations and diffs on small clusters given as manifests (the examples of
//! `simulate --disruption`).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use karpenter_core::clock::FakeClock;
use karpenter_core::disruption::budgets::{DisruptionReason, PoolNodeCount};
use karpenter_core::scheduling::SchedulerOptions;
use karpenter_sim::SimCloudProvider;

use super::*;
use crate::disruption::{DisruptionSettings, MAX_STEPS, TimelineSettings};
use crate::manifests::Manifests;

const EMPTY: &str = include_str!("../../../../examples/disruption-empty/cluster.yaml");
const ROLLOUT: &str = include_str!("../../../../examples/disruption-rollout/cluster.yaml");

fn now() -> Timestamp {
    "2026-01-30T23:00:00Z".parse().unwrap()
}

fn load(yaml: &str) -> Manifests {
    let mut manifests = Manifests::new();
    manifests.load_str("cluster.yaml", yaml).unwrap();
    manifests
}

fn provider() -> SimCloudProvider {
    SimCloudProvider::new("us-east-1", Arc::new(FakeClock::new(now()))).unwrap()
}

fn input<'a>(manifests: &'a Manifests, provider: &'a SimCloudProvider) -> ExplainInput<'a> {
    ExplainInput {
        manifests,
        provider,
        options: SchedulerOptions::default(),
        now: now(),
    }
}

const HUGE_POD: &str = r#"
---
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  containers:
    - name: app
      image: nginx
      resources:
        requests: {cpu: "1000"}
"#;

#[test]
fn a_pod_larger_than_any_type_is_explained_by_its_nodepool_and_cpu() {
    let manifests = load(&format!("{EMPTY}{HUGE_POD}"));
    let provider = provider();
    let answer = explain_pod(&input(&manifests, &provider), "default/huge").unwrap();
    assert_eq!(answer.status, PodStatus::CannotSchedule);
    assert!(
        answer
            .reasons
            .iter()
            .any(|r| r.contains("nodepool default") && r.contains("cpu")),
        "{:?}",
        answer.reasons
    );
}

#[test]
fn a_pending_pod_that_fits_is_placed_and_a_bound_one_runs_where_it_is() {
    let small = HUGE_POD.replace("\"1000\"", "100m");
    let manifests = load(&format!("{EMPTY}{small}"));
    let provider = provider();
    let answer = explain_pod(&input(&manifests, &provider), "default/huge").unwrap();
    assert_eq!(answer.status, PodStatus::WouldSchedule);
    assert!(answer.node.is_some() || answer.new_node_claim, "{answer:?}");
    let running = explain_pod(&input(&manifests, &provider), "default/web-1").unwrap();
    assert_eq!(running.status, PodStatus::Running);
    assert_eq!(running.node.as_deref(), Some("node-a"));
    assert_eq!(running.facts.instance_type.as_deref(), Some("m5.large"));
    assert_eq!(running.facts.price, Some(0.096));
}

#[test]
fn unknown_objects_are_not_found() {
    let manifests = load(EMPTY);
    let provider = provider();
    let input = input(&manifests, &provider);
    for err in [
        explain_pod(&input, "default/nope").map(|_| ()),
        explain_node(&input, "nope").map(|_| ()),
        explain_nodeclaim(&input, "nope").map(|_| ()),
        explain_nodepool(&input, "nope").map(|_| ()),
    ] {
        let err = err.unwrap_err();
        assert!(matches!(err, ExplainError::NotFound { .. }), "{err}");
        assert!(err.to_string().ends_with("nope not found"), "{err}");
    }
}

#[test]
fn a_node_held_by_a_do_not_disrupt_pod_names_the_pod() {
    let yaml = EMPTY.replace(
        "  labels: {app: web}\n",
        "  labels: {app: web}\n  annotations: {karpenter.sh/do-not-disrupt: \"true\"}\n",
    );
    let manifests = load(&yaml);
    let provider = provider();
    let answer = explain_node(&input(&manifests, &provider), "node-a").unwrap();
    assert!(!answer.candidate);
    let reason = answer
        .reasons
        .iter()
        .find(|r| r.object.as_deref() == Some("Pod/default/web-1"))
        .unwrap_or_else(|| panic!("{:?}", answer.reasons));
    assert!(reason.reason.contains("do-not-disrupt"), "{reason:?}");
    assert_eq!(answer.facts.node_claim.as_deref(), Some("node-a"));
}

#[test]
fn an_empty_node_past_consolidate_after_would_be_deleted_and_says_when_it_became_so() {
    let manifests = load(EMPTY);
    let provider = provider();
    let answer = explain_node(&input(&manifests, &provider), "node-b").unwrap();
    assert!(answer.candidate);
    let decision = answer.decision.unwrap();
    assert_eq!(
        (decision.reason.as_str(), decision.decision.as_str()),
        ("Empty", "delete")
    );
    assert!(answer.consolidatable_at.is_some());
    assert_eq!(answer.expires_at, None, "expireAfter: Never");
    assert_eq!(answer.budgets.len(), 3);
}

#[test]
fn a_nodepool_reports_nodes_cost_budgets_and_limits() {
    let yaml = EMPTY.replace(
        "    consolidateAfter: 10m\n",
        "    consolidateAfter: 10m\n  limits: {cpu: \"100\"}\n",
    );
    let manifests = load(&yaml);
    let provider = provider();
    let answer = explain_nodepool(&input(&manifests, &provider), "default").unwrap();
    assert_eq!(answer.nodes.len(), 2);
    assert_eq!(answer.hourly_cost, 0.192);
    assert_eq!(answer.monthly_cost, round6(0.192 * 730.0));
    assert_eq!(answer.drifted, 0);
    assert_eq!(answer.limits.len(), 1);
    assert_eq!(
        (
            answer.limits[0].used.as_str(),
            answer.limits[0].limit.as_str()
        ),
        ("4", "100")
    );
    // The CRD default `nodes: 10%` of 2 nodes rounds up to 1.
    assert!(
        answer.budgets.iter().all(|b| b.allowed == Some(1)),
        "{:?}",
        answer.budgets
    );
}

#[test]
fn a_scheduled_budget_says_when_it_changes() {
    let yaml = ROLLOUT.replace(
        "      - nodes: \"1\"\n",
        "      - nodes: \"0\"\n        schedule: \"0 0 * * *\"\n        duration: 8h\n",
    );
    let manifests = load(&yaml);
    let pool = &manifests.node_pools[0];
    let count = PoolNodeCount {
        nodes: 3,
        disrupting: 0,
    };
    // At 23:00 the window (00:00-08:00) is closed; it opens at midnight.
    let at = budget_changes_at(pool, DisruptionReason::Drifted, count, now()).unwrap();
    assert_eq!(at.to_string(), "2026-01-31T00:00:00Z");
}

/// The rollout example with the NodeClaims' hash set to the NodePool's current template, so
/// nothing is drifted until the template changes.
fn rollout_in_sync() -> Manifests {
    let pool = load(ROLLOUT).node_pools.remove(0);
    let hash = karpenter_core::nodepool::hash::template_hash(&pool);
    load(&ROLLOUT.replace("an-older-template", &hash))
}

#[test]
fn a_template_label_change_drifts_every_node_and_rolls_out_one_at_a_time() {
    let live = rollout_in_sync();
    let provider = provider();
    let mut changes = Manifests::new();
    let mut pool = live.node_pools[0].clone();
    pool.spec
        .template
        .metadata
        .get_or_insert_default()
        .labels
        .insert("team".into(), "blue".into());
    changes.node_pools.push(pool);
    let settings = DisruptionSettings {
        now: now(),
        until: SignedDuration::from_hours(24),
        max_steps: MAX_STEPS,
        feature_gates: Default::default(),
        timeline: TimelineSettings::default(),
    };
    let report = crate::diff::diff(
        &live,
        &changes,
        &provider,
        SchedulerOptions::default(),
        settings,
    )
    .unwrap();
    assert_eq!(report.changed, ["NodePool/default (changed)"]);
    assert_eq!(report.drifted.len(), 3, "{:?}", report.drifted);
    assert!(report.drifted.iter().all(|d| d.reason == "NodePoolDrifted"));
    assert_eq!(report.replacements.len(), 3);
    assert!(report.rollout_complete);
    assert!(report.held.is_empty());
    // Three replacements one after another: each at least initialization + drain + shutdown.
    assert!(
        report.rollout_seconds >= 3 * 60,
        "{}",
        report.rollout_seconds
    );
    assert!(report.hourly_cost_before > 0.0);
    assert!(report.unschedulable.is_empty());

    // The same pool again changes nothing.
    let mut same = Manifests::new();
    same.node_pools = live.node_pools.clone();
    let report = crate::diff::diff(
        &live,
        &same,
        &provider,
        SchedulerOptions::default(),
        settings,
    )
    .unwrap();
    assert!(!report.changes_anything());
    assert!(report.drifted.is_empty());
    assert_eq!(report.rollout_seconds, 0);
}

#[test]
fn a_candidate_the_pass_did_not_reach_is_judged_on_its_own() {
    // Emptiness takes node-b first; node-a (one 1-cpu pod on an m5.large, the cheapest type the
    // pool allows) is then judged alone, as single-node consolidation would.
    let manifests = load(EMPTY);
    let provider = provider();
    let answer = explain_node(&input(&manifests, &provider), "node-a").unwrap();
    assert!(answer.candidate);
    assert!(answer.decision.is_none());
    assert!(!answer.reasons.is_empty(), "{answer:?}");
    let text: Vec<&str> = answer.reasons.iter().map(|r| r.reason.as_str()).collect();
    // Its pod fits on node-b once emptiness keeps node-b: alone, node-a would be deleted.
    assert!(
        text.iter().any(|t| t.contains("empty command goes first")
            && t.contains("on its own it would be deleted (reason Underutilized")),
        "{text:?}"
    );
}

#[test]
fn requirements_too_small_for_the_pods_leave_them_unschedulable_and_the_nodes_held() {
    let pending = r#"
---
apiVersion: v1
kind: Pod
metadata: {name: new-web, namespace: default}
spec:
  containers:
    - name: app
      image: nginx
      resources:
        requests: {cpu: "1", memory: 2Gi}
"#;
    let in_sync = rollout_in_sync();
    let pool = in_sync.node_pools[0].clone();
    let mut live = Manifests::new();
    let hash = karpenter_core::nodepool::hash::template_hash(&pool);
    live.load_str(
        "cluster.yaml",
        &format!("{}{pending}", ROLLOUT.replace("an-older-template", &hash)),
    )
    .unwrap();
    let mut small = pool;
    for requirement in &mut small.spec.template.spec.requirements {
        match requirement.key.as_str() {
            "karpenter.k8s.aws/instance-family" => requirement.values = ["t3"].into(),
            "node.kubernetes.io/instance-type" => requirement.values = ["t3.nano"].into(),
            _ => {}
        }
    }
    let mut changes = Manifests::new();
    changes.node_pools.push(small);
    let settings = DisruptionSettings {
        now: now(),
        until: SignedDuration::from_hours(24),
        max_steps: MAX_STEPS,
        feature_gates: Default::default(),
        timeline: TimelineSettings::default(),
    };
    let report = crate::diff::diff(
        &live,
        &changes,
        &provider(),
        SchedulerOptions::default(),
        settings,
    )
    .unwrap();
    assert_eq!(report.drifted.len(), 3, "{report:?}");
    assert!(
        report
            .drifted
            .iter()
            .all(|d| d.reason == "RequirementsDrifted")
    );
    let pods: Vec<&str> = report
        .unschedulable
        .iter()
        .map(|u| u.pod.as_str())
        .collect();
    assert_eq!(pods, ["default/new-web"], "{report:?}");
    assert!(report.unschedulable[0].reason.contains("nodepool default"));
    // No t3.nano holds the running pods: the drifted nodes stay, each with the reason.
    assert_eq!(report.held.len(), 3, "{report:?}");
    assert!(!report.rollout_complete);
    assert!(report.replacements.is_empty());
}
