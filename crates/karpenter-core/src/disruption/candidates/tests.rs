//! One test per candidate filter of karpenter-core §4.2 / §4.14 (upstream disruption
//! suite_test.go, §7.10 items 8–16).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::pod::Pod;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_api::{NodeClaim, NodePool};
use serde_json::json;

use super::*;
use crate::instance_type::{InstanceType, Offering};
use crate::state::fixtures;

pub(crate) fn t0() -> Timestamp {
    Timestamp::from_second(1_704_067_200).unwrap()
}

/// A managed, initialized node `name` in pool `default`, labelled m5.large / us-west-2a /
/// on-demand, with its NodeClaim `<name>-claim`.
pub(crate) fn managed(name: &str) -> (NodeClaim, Node) {
    let provider_id = format!("sim://{name}");
    let claim = fixtures::nodeclaim(&format!("{name}-claim"), "default", Some(&provider_id), "4");
    let mut node = fixtures::node(name, Some("default"), &provider_id, "4");
    let labels = node.metadata.labels.as_mut().unwrap();
    labels.insert(INSTANCE_TYPE_LABEL.into(), "m5.large".into());
    labels.insert(ZONE_LABEL.into(), "us-west-2a".into());
    labels.insert(CAPACITY_TYPE_LABEL.into(), "on-demand".into());
    (claim, node)
}

pub(crate) fn catalog() -> BTreeMap<String, Vec<InstanceType>> {
    let m5 = InstanceType {
        name: "m5.large".into(),
        offerings: vec![Offering {
            zone: "us-west-2a".into(),
            capacity_type: "on-demand".into(),
            price: 0.096,
            available: true,
            ..Offering::default()
        }],
        ..InstanceType::default()
    };
    BTreeMap::from([("default".to_string(), vec![m5])])
}

/// A pod from JSON merged over a running pod `name` bound to `node`.
pub(crate) fn pod_on(name: &str, node: &str, extra: serde_json::Value) -> Pod {
    let mut value = serde_json::to_value(fixtures::bound_pod(name, node, "100m")).unwrap();
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

pub(crate) fn owned_by(kind: &str) -> serde_json::Value {
    json!({"metadata": {"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": kind, "name": "owner", "uid": "u"}]}})
}

pub(crate) fn do_not_disrupt() -> serde_json::Value {
    json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}})
}

fn terminating() -> serde_json::Value {
    json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}})
}

fn terminal() -> serde_json::Value {
    json!({"status": {"phase": "Succeeded"}})
}

pub(crate) fn pdb(name: &str, allowed: i32, extra: serde_json::Value) -> PodDisruptionBudget {
    let mut value = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": allowed},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                   "expectedPods": 1}
    });
    merge(&mut value, extra);
    serde_json::from_value(value).unwrap()
}

pub(crate) fn web() -> serde_json::Value {
    json!({"metadata": {"labels": {"app": "web"}}})
}

fn state_of(pools: Vec<NodePool>, nodes: Vec<(NodeClaim, Node)>, pods: Vec<Pod>) -> ClusterState {
    let (claims, nodes) = nodes.into_iter().unzip();
    ClusterState::from_objects(pools, claims, nodes, pods)
}

fn one_node(pods: Vec<Pod>) -> ClusterState {
    state_of(
        vec![fixtures::nodepool("default")],
        vec![managed("n1")],
        pods,
    )
}

/// The only outcome for the cluster's only node.
fn verdict(state: &ClusterState, class: DisruptionClass) -> Result<Candidate<'_>, BlockReason> {
    let (mut accepted, mut rejected) = candidates(state, t0(), class, &catalog());
    assert_eq!(accepted.len() + rejected.len(), 1, "{rejected:?}");
    match accepted.pop() {
        Some(candidate) => Ok(candidate),
        None => Err(rejected.pop().unwrap().reason),
    }
}

fn rejected(state: &ClusterState) -> BlockReason {
    verdict(state, DisruptionClass::Graceful).unwrap_err()
}

#[test]
fn a_plain_managed_node_is_a_candidate_with_labels_price_and_reschedulable_pods() {
    let state = one_node(vec![
        pod_on("app", "n1", json!({})),
        pod_on("agent", "n1", owned_by("DaemonSet")),
    ]);
    let candidate = verdict(&state, DisruptionClass::Graceful).unwrap();
    assert_eq!(candidate.name(), "n1");
    assert_eq!(candidate.nodeclaim.name_any(), "n1-claim");
    assert_eq!(candidate.nodepool_name(), "default");
    assert_eq!(candidate.instance_type, Some("m5.large"));
    assert_eq!(candidate.zone, Some("us-west-2a"));
    assert_eq!(candidate.capacity_type, Some("on-demand"));
    assert_eq!(candidate.price, Some(0.096));
    assert_eq!(candidate.pods.len(), 2);
    let reschedulable: Vec<String> = candidate
        .reschedulable_pods
        .iter()
        .map(|p| pod::key(p))
        .collect();
    assert_eq!(reschedulable, ["default/app"]);
    assert!(!candidate.is_empty());
}

#[test]
fn missing_instance_type_zone_or_capacity_type_labels_still_make_a_candidate_without_price() {
    let (claim, mut node) = managed("n1");
    node.metadata.labels.as_mut().unwrap().remove(ZONE_LABEL);
    let state = state_of(
        vec![fixtures::nodepool("default")],
        vec![(claim, node)],
        vec![],
    );
    let candidate = verdict(&state, DisruptionClass::Graceful).unwrap();
    assert_eq!(candidate.zone, None);
    assert_eq!(candidate.price, None);
}

#[test]
fn a_node_already_in_a_disruption_command_is_rejected() {
    let mut state = one_node(vec![]);
    state.mark_being_disrupted("n1");
    assert_eq!(rejected(&state), BlockReason::BeingDisrupted);
}

#[test]
fn a_replacement_is_no_candidate_until_its_commands_candidates_are_gone() {
    // Two empty initialized nodes: with `consolidateAfter: 0s` emptiness would delete either.
    let mut state = state_of(
        vec![fixtures::nodepool("default")],
        vec![managed("n1"), managed("old")],
        vec![],
    );
    let block = |state: &ClusterState| {
        let (_, rejected) = candidates(state, t0(), DisruptionClass::Graceful, &catalog());
        rejected
            .into_iter()
            .find(|r| r.name == "n1")
            .map(|r| r.reason)
    };
    assert_eq!(block(&state), None);
    // n1 replaces "old", still in the state: held.
    state.mark_replacing("n1-claim", ["old"]);
    assert_eq!(block(&state), Some(BlockReason::Replacing));
    // A rolled-back command releases it at once.
    state.unmark_replacing("n1-claim");
    assert_eq!(block(&state), None);
    // Once the node it replaces is gone, it is a candidate again.
    state.mark_replacing("n1-claim", ["old"]);
    let old = state.node("old").unwrap().clone();
    state.delete(&old);
    assert_eq!(block(&state), None);
}

#[test]
fn a_node_whose_command_rolled_back_is_held_until_the_hold_ends_then_decided_again() {
    use crate::disruption::orchestration::command::{ROLLBACK_HOLD, hold_after_rollback};
    let mut state = one_node(vec![]);
    // Rolled back a minute before the pass: still held for two more minutes.
    let rolled_back = t0() - SignedDuration::from_mins(1);
    let until = hold_after_rollback(rolled_back);
    assert_eq!(until, rolled_back + ROLLBACK_HOLD);
    state.hold_after_rollback("n1", until, rolled_back);
    let reason = rejected(&state);
    assert_eq!(reason, BlockReason::RolledBack { until });
    // A loop looks again when the hold ends, not at its next poll.
    assert_eq!(reason.frees_at(), Some(until));
    // Once the hold has ended the same node is a candidate again.
    let (accepted, _) = candidates(&state, until, DisruptionClass::Graceful, &catalog());
    assert_eq!(accepted.len(), 1);
    // A later hold on another node forgets the ended one.
    state.hold_after_rollback(
        "n2",
        until + ROLLBACK_HOLD,
        until + SignedDuration::from_secs(1),
    );
    assert_eq!(state.rollback_hold("n1"), None);
}

#[test]
fn just_a_node_or_just_a_nodeclaim_is_rejected() {
    let unmanaged = fixtures::node("plain", None, "other://x", "2");
    let state = ClusterState::from_objects(vec![], vec![], vec![unmanaged], vec![]);
    assert_eq!(rejected(&state), BlockReason::NotManaged);

    let in_flight = fixtures::nodeclaim("c", "default", None, "2");
    let state = ClusterState::from_objects(
        vec![fixtures::nodepool("default")],
        vec![in_flight],
        vec![],
        vec![],
    );
    assert_eq!(rejected(&state), BlockReason::NoNode);
}

#[test]
fn a_node_that_is_not_initialized_is_rejected() {
    let (claim, mut node) = managed("n1");
    node.metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("karpenter.sh/initialized");
    let state = state_of(
        vec![fixtures::nodepool("default")],
        vec![(claim, node)],
        vec![],
    );
    assert_eq!(rejected(&state), BlockReason::NotInitialized);
}

#[test]
fn marked_deleting_or_instance_terminating_nodes_are_rejected() {
    let mut state = one_node(vec![]);
    state.mark_for_deletion("n1");
    assert_eq!(rejected(&state), BlockReason::MarkedForDeletion);

    let (mut claim, node) = managed("n1");
    claim.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t0()));
    let state = state_of(
        vec![fixtures::nodepool("default")],
        vec![(claim, node)],
        vec![],
    );
    assert_eq!(rejected(&state), BlockReason::MarkedForDeletion);

    let (mut claim, node) = managed("n1");
    claim.status.as_mut().unwrap().conditions = vec![
        serde_json::from_value(json!({"type": "InstanceTerminating", "status": "True"})).unwrap(),
    ];
    let state = state_of(
        vec![fixtures::nodepool("default")],
        vec![(claim, node)],
        vec![],
    );
    assert_eq!(rejected(&state), BlockReason::MarkedForDeletion);
}

#[test]
fn a_nominated_node_is_rejected_until_the_nomination_window_ends() {
    let mut state = one_node(vec![fixtures::pending_pod("p", "1")]);
    state.nominate(
        "default/p",
        "n1-claim",
        t0() + SignedDuration::from_secs(20),
    );
    assert_eq!(rejected(&state), BlockReason::Nominated);
    let (accepted, _) = candidates(
        &state,
        t0() + SignedDuration::from_secs(21),
        DisruptionClass::Graceful,
        &catalog(),
    );
    assert_eq!(accepted.len(), 1, "the nomination expired");
}

#[test]
fn the_node_do_not_disrupt_annotation_rejects_only_when_true() {
    for (value, blocked) in [("true", true), ("false", false)] {
        let (claim, mut node) = managed("n1");
        node.metadata.annotations = Some(BTreeMap::from([(
            DO_NOT_DISRUPT_ANNOTATION.to_string(),
            value.to_string(),
        )]));
        let state = state_of(
            vec![fixtures::nodepool("default")],
            vec![(claim, node)],
            vec![],
        );
        let outcome = verdict(&state, DisruptionClass::Graceful);
        assert_eq!(outcome.is_err(), blocked, "{value}");
        if blocked {
            assert_eq!(outcome.unwrap_err(), BlockReason::NodeDoNotDisrupt);
        }
    }
}

#[test]
fn a_node_without_the_nodepool_label_is_rejected() {
    let (mut claim, mut node) = managed("n1");
    claim
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("karpenter.sh/nodepool");
    node.metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("karpenter.sh/nodepool");
    let state = state_of(
        vec![fixtures::nodepool("default")],
        vec![(claim, node)],
        vec![],
    );
    assert_eq!(rejected(&state), BlockReason::NoNodePoolLabel);
}

#[test]
fn a_node_of_a_missing_nodepool_is_rejected() {
    let state = state_of(
        vec![fixtures::nodepool("other")],
        vec![managed("n1")],
        vec![],
    );
    assert_eq!(
        rejected(&state),
        BlockReason::NodePoolNotFound("default".into())
    );
}

#[test]
fn a_node_of_a_nodepool_without_instance_types_is_rejected() {
    let state = one_node(vec![]);
    let (accepted, rejected) = candidates(
        &state,
        t0(),
        DisruptionClass::Graceful,
        &BTreeMap::<String, Vec<InstanceType>>::new(),
    );
    assert!(accepted.is_empty());
    assert_eq!(
        rejected[0].reason,
        BlockReason::NoInstanceTypes("default".into())
    );
}

#[test]
fn an_active_do_not_disrupt_pod_rejects_its_node_even_daemonset_or_mirror() {
    for extra in [json!({}), owned_by("DaemonSet"), owned_by("Node")] {
        let mut pod = extra;
        merge(&mut pod, do_not_disrupt());
        let state = one_node(vec![pod_on("keep", "n1", pod)]);
        assert_eq!(
            rejected(&state),
            BlockReason::DoNotDisruptPod {
                pod: "default/keep".into(),
                until: None
            }
        );
    }
}

#[test]
fn terminal_or_terminating_do_not_disrupt_pods_do_not_block() {
    for state_of_pod in [terminal(), terminating()] {
        let mut pod = state_of_pod;
        merge(&mut pod, do_not_disrupt());
        let state = one_node(vec![pod_on("done", "n1", pod)]);
        assert!(verdict(&state, DisruptionClass::Graceful).is_ok());
    }
}

#[test]
fn a_pdb_that_allows_no_disruption_rejects_the_node_and_one_that_allows_does_not() {
    let mut state = one_node(vec![pod_on("w", "n1", web())]);
    state.apply(pdb("web-pdb", 0, json!({})));
    assert_eq!(
        rejected(&state),
        BlockReason::PdbBlocks {
            pod: "default/w".into(),
            pdb: "default/web-pdb".into()
        }
    );

    let mut state = one_node(vec![pod_on("w", "n1", web())]);
    state.apply(pdb("web-pdb", 1, json!({})));
    assert!(verdict(&state, DisruptionClass::Graceful).is_ok());
}

#[test]
fn a_pod_selected_by_several_pdbs_rejects_the_node() {
    let mut state = one_node(vec![pod_on("w", "n1", web())]);
    state.apply(pdb("a", 1, json!({})));
    state.apply(pdb("b", 1, json!({})));
    assert_eq!(
        rejected(&state),
        BlockReason::MultiplePdbs {
            pod: "default/w".into(),
            pdbs: vec!["default/a".into(), "default/b".into()]
        }
    );
}

#[test]
fn a_blocking_pdb_on_a_daemonset_pod_rejects_but_not_on_mirror_terminal_or_terminating_pods() {
    let mut daemon = web();
    merge(&mut daemon, owned_by("DaemonSet"));
    let mut state = one_node(vec![pod_on("d", "n1", daemon)]);
    state.apply(pdb("web-pdb", 0, json!({})));
    assert!(matches!(rejected(&state), BlockReason::PdbBlocks { .. }));

    for extra in [owned_by("Node"), terminal(), terminating()] {
        let mut pod = web();
        merge(&mut pod, extra);
        let mut state = one_node(vec![pod_on("p", "n1", pod)]);
        state.apply(pdb("web-pdb", 0, json!({})));
        assert!(verdict(&state, DisruptionClass::Graceful).is_ok());
    }
}

#[test]
fn always_allow_lets_a_not_ready_pod_through_a_blocking_pdb_but_not_a_ready_one() {
    let always_allow = json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}});
    let mut not_ready = web();
    merge(
        &mut not_ready,
        json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    );
    let mut state = one_node(vec![pod_on("w", "n1", not_ready)]);
    state.apply(pdb("web-pdb", 0, always_allow.clone()));
    assert!(verdict(&state, DisruptionClass::Graceful).is_ok());

    let mut ready = web();
    merge(
        &mut ready,
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let mut state = one_node(vec![pod_on("w", "n1", ready)]);
    state.apply(pdb("web-pdb", 0, always_allow));
    assert!(matches!(rejected(&state), BlockReason::PdbBlocks { .. }));
}

#[test]
fn a_pod_tolerating_the_disrupted_taint_is_not_held_by_its_pdb() {
    let mut tolerant = web();
    merge(
        &mut tolerant,
        json!({"spec": {"tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists"}]}}),
    );
    let mut state = one_node(vec![pod_on("w", "n1", tolerant)]);
    state.apply(pdb("web-pdb", 0, json!({})));
    assert!(verdict(&state, DisruptionClass::Graceful).is_ok());
}

#[test]
fn eventual_disruption_with_termination_grace_period_ignores_pod_blocks_graceful_does_not() {
    let (mut claim, node) = managed("n1");
    claim.spec.termination_grace_period = Some("1h".into());
    let blocked_pods = vec![
        pod_on("keep", "n1", do_not_disrupt()),
        pod_on("w", "n1", web()),
    ];
    let mut state = state_of(
        vec![fixtures::nodepool("default")],
        vec![(claim, node)],
        blocked_pods.clone(),
    );
    state.apply(pdb("web-pdb", 0, json!({})));
    assert!(verdict(&state, DisruptionClass::Eventual).is_ok());
    assert!(matches!(
        rejected(&state),
        BlockReason::DoNotDisruptPod { .. }
    ));

    let mut without_tgp = one_node(blocked_pods);
    without_tgp.apply(pdb("web-pdb", 0, json!({})));
    assert!(verdict(&without_tgp, DisruptionClass::Eventual).is_err());
}

#[test]
fn daemonset_pods_and_terminating_deployment_pods_leave_a_node_empty_a_terminating_statefulset_pod_does_not()
 {
    let mut deployment_pod = owned_by("ReplicaSet");
    merge(&mut deployment_pod, terminating());
    let state = one_node(vec![
        pod_on("agent", "n1", owned_by("DaemonSet")),
        pod_on("old", "n1", deployment_pod),
        pod_on("mirror", "n1", owned_by("Node")),
    ]);
    assert!(
        verdict(&state, DisruptionClass::Graceful)
            .unwrap()
            .is_empty()
    );

    let mut stateful_pod = owned_by("StatefulSet");
    merge(&mut stateful_pod, terminating());
    let state = one_node(vec![pod_on("db-0", "n1", stateful_pod)]);
    assert!(
        !verdict(&state, DisruptionClass::Graceful)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn eviction_cost_follows_deletion_cost_and_priority_and_is_clamped() {
    let standard = pod_on("a", "n1", json!({}));
    assert_eq!(eviction_cost(&standard), 1.0);
    let cheap = pod_on(
        "b",
        "n1",
        json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-2147483648"}}}),
    );
    assert!(eviction_cost(&cheap) < 1.0);
    let important = pod_on("c", "n1", json!({"spec": {"priority": 2_000_000_000}}));
    assert_eq!(eviction_cost(&important), 10.0, "clamped");
    let unwanted = pod_on("d", "n1", json!({"spec": {"priority": -2_000_000_000}}));
    assert_eq!(eviction_cost(&unwanted), -10.0, "clamped");

    // A pod with a non-positive eviction cost does not keep its node from being empty.
    let state = one_node(vec![unwanted]);
    assert!(
        verdict(&state, DisruptionClass::Graceful)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn reasons_read_as_sentences() {
    assert_eq!(
        BlockReason::DoNotDisruptPod {
            pod: "ns/p".into(),
            until: None
        }
        .to_string(),
        "pod ns/p has annotation karpenter.sh/do-not-disrupt=true"
    );
    assert_eq!(
        BlockReason::PdbBlocks {
            pod: "ns/p".into(),
            pdb: "ns/b".into()
        }
        .to_string(),
        "pdb ns/b prevents pod evictions (pod ns/p)"
    );
    assert_eq!(
        BlockReason::ConsolidatableAt(t0()).to_string(),
        "consolidatable at 2024-01-01T00:00:00Z"
    );
}
