//! Upstream's termination controller tests (`pkg/controllers/node/termination/suite_test.go`),
//! as tests of the pure machine, named after upstream's `It`s. (Those about API objects only —
//! NodeClaim cascade, load-balancer label, metrics — stay with the controller.)

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

fn t0() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

fn at(seconds: i64) -> Timestamp {
    t0().checked_add(SignedDuration::from_secs(seconds))
        .unwrap()
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "labels": {"app": "web"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs"}]},
        "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn with_spec(mut p: Pod, spec: serde_json::Value) -> Pod {
    let mut value = serde_json::to_value(&p).unwrap();
    for (k, v) in spec.as_object().unwrap() {
        value["spec"][k] = v.clone();
    }
    p = serde_json::from_value(value).unwrap();
    p
}

fn owned_by(mut p: Pod, kind: &str) -> Pod {
    p.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({"apiVersion": "v1", "kind": kind, "name": "o", "uid": "o"}))
            .unwrap(),
    ]);
    p
}

fn deleted_at(mut p: Pod, when: Timestamp) -> Pod {
    p.metadata.deletion_timestamp = Some(Time(when));
    p
}

fn node<'a>(pods: &[&'a Pod]) -> NodeView<'a> {
    NodeView {
        pods: pods.to_vec(),
        deadline: None,
        pdbs: None,
        drained_since: None,
        min_drain_time: MIN_DRAIN_TIME,
        node_ready: true,
        instance: InstanceView::Running,
    }
}

fn removed(plan: &TerminationPlan) -> Vec<(&str, bool)> {
    plan.steps
        .iter()
        .filter_map(|s| match s {
            TerminationStep::Remove(a) => Some((
                a.name.as_str(),
                matches!(a.action, Action::ForceDelete { .. }),
            )),
            _ => None,
        })
        .collect()
}

fn waits(plan: &TerminationPlan) -> bool {
    plan.steps
        .iter()
        .any(|s| matches!(s, TerminationStep::WaitForPods { .. }))
}

#[test]
fn should_delete_nodes() {
    let mut view = node(&[]);
    let plan = next(&view, at(0));
    assert_eq!(plan.steps, [TerminationStep::Drained]);
    view.drained_since = Some(at(0));
    assert_eq!(
        next(&view, at(5)).steps,
        [TerminationStep::TerminateInstance]
    );
    view.instance = InstanceView::Terminating { gone_at: None };
    assert!(next(&view, at(6)).steps.is_empty());
    view.instance = InstanceView::Gone;
    assert!(next(&view, at(7)).is_final());
}

#[test]
fn should_not_evict_pods_that_tolerate_karpenter_disruption_taint_with_equal_operator() {
    let tolerating = with_spec(
        pod("t"),
        json!({"tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Equal", "value": "", "effect": "NoSchedule"}]}),
    );
    let plan = next(&node(&[&tolerating]), at(0));
    assert_eq!(plan.steps, [TerminationStep::Drained]);
}

#[test]
fn should_not_evict_pods_that_tolerate_karpenter_disruption_taint_with_exists_operator() {
    let tolerating = with_spec(
        pod("t"),
        json!({"tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists"}]}),
    );
    let plan = next(&node(&[&tolerating]), at(0));
    assert_eq!(plan.steps, [TerminationStep::Drained]);
}

#[test]
fn should_evict_pods_that_tolerate_the_node_kubernetes_io_unschedulable_taint() {
    let tolerating = with_spec(
        pod("t"),
        json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}),
    );
    assert_eq!(removed(&next(&node(&[&tolerating]), at(0))), [("t", false)]);
}

#[test]
fn should_delete_nodes_that_have_pods_without_an_ownerref() {
    let mut bare = pod("bare");
    bare.metadata.owner_references = None;
    assert_eq!(removed(&next(&node(&[&bare]), at(0))), [("bare", false)]);
}

#[test]
fn should_delete_nodes_with_terminal_pods() {
    let mut done = pod("done");
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    assert_eq!(
        next(&node(&[&done]), at(0)).steps,
        [TerminationStep::Drained]
    );
}

#[test]
fn should_fail_to_evict_pods_that_violate_a_pdb() {
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    let web = pod("web");
    let mut view = node(&[&web]);
    view.pdbs = Some(vec![(&budget, pdb::counts(&budget, [&web], 1))]);
    let plan = next(&view, at(0));
    assert!(removed(&plan).is_empty());
    assert!(plan.steps.contains(&TerminationStep::WaitForPods {
        waiting: 1,
        blocked_by_pdb: 1,
        do_not_disrupt: 0
    }));
}

#[test]
fn a_pdb_allowing_one_disruption_lets_one_of_two_pods_go_per_step() {
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    let (a, b) = (pod("a"), pod("b"));
    let mut view = node(&[&a, &b]);
    view.pdbs = Some(vec![(&budget, pdb::counts(&budget, [&a, &b], 2))]);
    assert_eq!(removed(&next(&view, at(0))), [("a", false)]);
}

#[test]
fn should_evict_pods_in_order_and_wait_until_pods_are_fully_deleted() {
    let app = pod("app");
    let daemon = owned_by(pod("ds"), "DaemonSet");
    let critical = with_spec(
        pod("crit"),
        json!({"priorityClassName": "system-cluster-critical"}),
    );
    let plan = next(&node(&[&app, &daemon, &critical]), at(0));
    assert_eq!(removed(&plan), [("app", false)]);
    // `app` is terminating: the next tier waits until it is fully deleted.
    let app_going = deleted_at(app.clone(), at(1));
    let plan = next(&node(&[&app_going, &daemon, &critical]), at(2));
    assert!(removed(&plan).is_empty() && waits(&plan));
    assert_eq!(
        removed(&next(&node(&[&daemon, &critical]), at(3))),
        [("ds", false)]
    );
    assert_eq!(
        removed(&next(&node(&[&critical]), at(4))),
        [("crit", false)]
    );
}

#[test]
fn should_evict_non_critical_pods_first() {
    let normal = pod("normal");
    let critical = with_spec(
        pod("crit"),
        json!({"priorityClassName": "system-node-critical"}),
    );
    assert_eq!(
        removed(&next(&node(&[&critical, &normal]), at(0))),
        [("normal", false)]
    );
}

#[test]
fn should_not_evict_static_pods() {
    let mirror = owned_by(pod("static"), "Node");
    assert_eq!(
        next(&node(&[&mirror]), at(0)).steps,
        [TerminationStep::Drained]
    );
}

#[test]
fn should_not_delete_nodes_until_all_pods_are_deleted() {
    let going = deleted_at(pod("p"), at(0));
    let plan = next(&node(&[&going]), at(10));
    assert!(waits(&plan));
    assert!(!plan.steps.contains(&TerminationStep::TerminateInstance));
}

#[test]
fn should_delete_nodes_with_no_underlying_instance_even_if_not_fully_drained() {
    let p = pod("p");
    let mut view = node(&[&p]);
    view.node_ready = false;
    view.instance = InstanceView::Gone;
    assert_eq!(next(&view, at(0)).steps, [TerminationStep::ReleaseNode]);
}

#[test]
fn should_not_delete_nodes_with_no_underlying_instance_if_the_node_is_still_ready() {
    let p = pod("p");
    let mut view = node(&[&p]);
    view.instance = InstanceView::Gone;
    let plan = next(&view, at(0));
    assert_eq!(removed(&plan), [("p", false)]);
    assert!(!plan.is_final());
}

#[test]
fn should_bypass_pods_which_are_stuck_terminating_past_their_grace_period() {
    let stuck = deleted_at(pod("stuck"), at(0));
    let plan = next(&node(&[&stuck]), at(30));
    assert!(waits(&plan));
    assert_eq!(
        plan.look_again,
        Some(at(61)),
        "looks again once the pod counts as stuck"
    );
    assert_eq!(
        next(&node(&[&stuck]), at(61)).steps,
        [TerminationStep::Drained]
    );
}

#[test]
fn should_preemptively_delete_pods_to_satisfy_their_termination_grace_period_seconds() {
    let slow = with_spec(pod("slow"), json!({"terminationGracePeriodSeconds": 300}));
    let dnd = {
        let mut p = pod("dnd");
        p.metadata.annotations = Some(
            [(
                karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION.to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        p
    };
    let mut view = node(&[&dnd]);
    view.deadline = Some(at(600));
    let plan = next(&view, at(0));
    assert!(
        removed(&plan).is_empty(),
        "do-not-disrupt waits for the deadline"
    );
    assert_eq!(plan.look_again, Some(at(600 - 30 + 1)));
    let mut view = node(&[&slow]);
    view.deadline = Some(at(200));
    assert_eq!(removed(&next(&view, at(0))), [("slow", true)]);
}

#[test]
fn should_not_gate_past_deadline_pods_behind_graceful_eviction_of_earlier_tiers() {
    let app = pod("app");
    let critical = with_spec(
        pod("crit"),
        json!({"priorityClassName": "system-cluster-critical", "terminationGracePeriodSeconds": 300}),
    );
    let mut view = node(&[&app, &critical]);
    view.deadline = Some(at(100));
    let plan = next(&view, at(0));
    let mut names = removed(&plan);
    names.sort();
    assert_eq!(names, [("app", false), ("crit", true)]);
}

#[test]
fn should_only_delete_pods_when_their_termination_grace_period_seconds_is_less_than_the_nodes_remaining_termination_grace_period()
 {
    let short = with_spec(pod("short"), json!({"terminationGracePeriodSeconds": 10}));
    let dnd_short = {
        let mut p = short.clone();
        p.metadata.annotations = Some(
            [(
                karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION.to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        p
    };
    let mut view = node(&[&dnd_short]);
    view.deadline = Some(at(100));
    assert!(removed(&next(&view, at(0))).is_empty());
    assert_eq!(removed(&next(&view, at(91))), [("short", true)]);
}

#[test]
fn should_not_finish_draining_until_min_drain_time_has_passed() {
    let mut view = node(&[]);
    view.drained_since = Some(at(0));
    let plan = next(&view, at(4));
    assert!(plan.steps.is_empty());
    assert_eq!(plan.look_again, Some(at(5)));
    assert_eq!(
        next(&view, at(5)).steps,
        [TerminationStep::TerminateInstance]
    );
}

#[test]
fn a_do_not_disrupt_duration_running_out_is_an_instant_to_look_again() {
    let mut p = pod("p");
    p.metadata.annotations = Some(
        [(
            karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION.to_string(),
            "2m".to_string(),
        )]
        .into(),
    );
    p.status.as_mut().unwrap().start_time = Some(Box::new(Time(t0())));
    let plan = next(&node(&[&p]), at(0));
    assert!(removed(&plan).is_empty());
    assert_eq!(plan.look_again, Some(at(120)));
    let later = next(&node(&[&p]), at(120));
    assert_eq!(removed(&later), [("p", false)]);
}
