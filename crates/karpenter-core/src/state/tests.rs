use jiff::{SignedDuration, Timestamp};
use kube_core::ResourceExt;

use super::fixtures::*;
use super::*;

fn t0() -> Timestamp {
    Timestamp::from_second(1_704_067_200).unwrap()
}

#[test]
fn joins_nodes_with_nodeclaims_and_pods() {
    let state = ClusterState::from_objects(
        vec![nodepool("default")],
        vec![
            nodeclaim("default-abc", "default", Some("sim://i-1"), "4"),
            nodeclaim("default-new", "default", None, "2"),
        ],
        vec![
            node("node-1", Some("default"), "sim://i-1", "4"),
            node("unmanaged", None, "other://x", "2"),
        ],
        vec![
            bound_pod("a", "node-1", "1"),
            bound_pod("b", "node-1", "500m"),
            pending_pod("c", "1"),
        ],
    );
    assert!(state.synced());
    let nodes = state.state_nodes();
    let names: Vec<String> = nodes.iter().map(StateNode::name).collect();
    assert_eq!(
        nodes.len(),
        3,
        "{names:?} {:?}",
        state.nodeclaim("default-abc").unwrap().status
    );

    let joined = nodes.iter().find(|n| n.name() == "node-1").unwrap();
    assert_eq!(joined.nodeclaim.unwrap().name_any(), "default-abc");
    assert_eq!(joined.nodepool(), Some("default"));
    assert!(joined.initialized());
    assert_eq!(joined.requested().get("cpu").millis(), 1500);
    assert_eq!(joined.available().get("cpu").millis(), 2500);

    let in_flight = nodes.iter().find(|n| n.name() == "default-new").unwrap();
    assert!(in_flight.in_flight() && in_flight.is_managed());
    assert_eq!(in_flight.allocatable().get("cpu").millis(), 2000);

    let unmanaged = nodes.iter().find(|n| n.name() == "unmanaged").unwrap();
    assert!(!unmanaged.is_managed() && unmanaged.initialized());
}

/// The disruption pass decides on a copy of the state; the copy shares the objects it reads
/// instead of duplicating every Node, NodeClaim and pod (~10 MB per pass at 1,000 nodes), and a
/// later write to the state leaves the copy as it was.
#[test]
fn nodeclaims_listing_the_same_instance_types_share_one_copy_of_the_list() {
    let with_types = |name: &str, types: &[&str]| {
        let mut claim = nodeclaim(name, "default", None, "2");
        claim.spec.requirements = serde_json::from_value(serde_json::json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
        ]))
        .unwrap();
        claim
    };
    let types = ["m5.large", "m5.xlarge", "c5.large", "r5.large"];
    let mut state = ClusterState::new();
    state.reset(vec![with_types("a", &types), with_types("b", &types)]);
    state.apply(with_types("c", &types));
    state.apply(with_types("d", &types[..2]));
    let list = |name: &str| {
        state.nodeclaim(name).unwrap().spec.requirements[0]
            .values
            .clone()
    };
    assert_eq!(list("a"), types);
    assert!(list("b").shares_storage_with(&list("a")));
    assert!(list("c").shares_storage_with(&list("a")));
    assert!(!list("d").shares_storage_with(&list("a")));
    assert_eq!(state.nodeclaim_values.len(), 2);

    let d = state.nodeclaim("d").unwrap().clone();
    state.delete(&d);
    drop(d);
    // The deleted NodeClaim's list may be held a little longer (a decision's copy of the
    // state); the next deletion forgets it.
    let c = state.nodeclaim("c").unwrap().clone();
    state.delete(&c);
    assert_eq!(
        state.nodeclaim_values.len(),
        1,
        "only the list a and b hold"
    );
}

#[test]
fn a_copy_of_the_state_shares_its_objects_and_keeps_its_view() {
    let mut state = ClusterState::from_objects(
        vec![nodepool("default")],
        vec![nodeclaim("default-abc", "default", Some("sim://i-1"), "4")],
        vec![node("node-1", Some("default"), "sim://i-1", "4")],
        vec![bound_pod("a", "node-1", "1")],
    );
    let copy = state.clone();
    assert!(std::ptr::eq(
        state.node("node-1").unwrap(),
        copy.node("node-1").unwrap()
    ));
    assert!(std::ptr::eq(
        state.nodeclaim("default-abc").unwrap(),
        copy.nodeclaim("default-abc").unwrap()
    ));
    assert!(std::ptr::eq(
        state.pods_on_node("node-1").next().unwrap(),
        copy.pods_on_node("node-1").next().unwrap()
    ));

    let mut relabelled = node("node-1", Some("default"), "sim://i-1", "4");
    relabelled
        .labels_mut()
        .insert("changed".into(), "yes".into());
    state.apply(relabelled);
    assert!(
        state
            .node("node-1")
            .unwrap()
            .labels()
            .contains_key("changed")
    );
    assert!(
        !copy
            .node("node-1")
            .unwrap()
            .labels()
            .contains_key("changed")
    );
}

#[test]
fn pod_rebinding_moves_the_index() {
    let mut state = ClusterState::new();
    state.apply(bound_pod("a", "node-1", "1"));
    assert_eq!(state.pods_on_node("node-1").count(), 1);
    state.apply(bound_pod("a", "node-2", "1"));
    assert_eq!(state.pods_on_node("node-1").count(), 0);
    assert_eq!(state.pods_on_node("node-2").count(), 1);
    state.delete(&bound_pod("a", "node-2", "1"));
    assert_eq!(state.pods_on_node("node-2").count(), 0);
    assert!(state.pod("default/a").is_none());
}

#[test]
fn nominated_pods_are_not_provisionable_until_the_window_ends() {
    let mut state = ClusterState::new();
    state.apply(pending_pod("a", "1"));
    state.apply(pending_pod("b", "1"));
    assert_eq!(state.provisionable_pods(t0()).len(), 2);

    state.nominate(
        "default/a",
        "default-xyz",
        t0() + SignedDuration::from_secs(20),
    );
    let names: Vec<_> = state
        .provisionable_pods(t0())
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(names, ["b"]);
    assert_eq!(state.nominated_pods("default-xyz", t0()).len(), 1);

    let later = t0() + SignedDuration::from_secs(21);
    assert_eq!(
        state.provisionable_pods(later).len(),
        2,
        "nomination expired"
    );

    // Binding clears the nomination.
    state.nominate(
        "default/b",
        "default-xyz",
        later + SignedDuration::from_secs(20),
    );
    state.apply(bound_pod("b", "node-1", "1"));
    assert!(state.nomination("default/b", later).is_none());
}

/// A pass nominates after its snapshot: a pod bound meanwhile holds its node's room, not the
/// nominated NodeClaim's too (it had made the provisioner launch extra nodes).
#[test]
fn a_pod_bound_before_its_nomination_is_written_reserves_nothing() {
    let mut state = ClusterState::new();
    state.apply(bound_pod("a", "node-1", "1"));
    let until = t0() + SignedDuration::from_secs(20);
    state.nominate("default/a", "default-xyz", until);
    assert!(state.nomination("default/a", t0()).is_none());
    assert_eq!(state.nominated_pods("default-xyz", t0()).len(), 0);
}

/// Upstream's late tail: the kube-scheduler binds other pods onto the node a pass planned for
/// nominated ones; the nominations it can no longer honour are released at once (they used to
/// wait out their 20 s window), those it can still honour stay.
#[test]
fn nominations_a_node_can_no_longer_honour_are_released() {
    let mut state = ClusterState::from_objects(
        vec![nodepool("default")],
        vec![
            nodeclaim("default-abc", "default", Some("sim://i-1"), "4"),
            nodeclaim("default-new", "default", None, "2"),
        ],
        vec![node("node-1", Some("default"), "sim://i-1", "4")],
        vec![
            pending_pod("a", "1"),
            pending_pod("b", "1"),
            pending_pod("c", "2"),
            pending_pod("d", "2"),
        ],
    );
    let until = t0() + SignedDuration::from_secs(20);
    for pod in ["default/a", "default/b", "default/c"] {
        state.nominate(pod, "default-abc", until);
    }
    // The in-flight NodeClaim has no Node: its nomination stays even if it looks overfull.
    state.nominate("default/d", "default-new", until);
    state.nominate("default/x", "default-new", until);
    assert!(
        state.release_displaced_nominations(t0()).is_empty(),
        "4 cpu hold a, b and c"
    );

    // Someone else's 2-cpu pod takes half the node: a (1) and b (1) still fit, c (2) does not;
    // judged only once the node is initialized.
    state.apply(bound_pod("other", "node-1", "2"));
    let mut registering = node("node-1", Some("default"), "sim://i-1", "4");
    registering.labels_mut().remove("karpenter.sh/initialized");
    state.apply(registering);
    assert!(
        state.release_displaced_nominations(t0()).is_empty(),
        "not initialized yet"
    );
    state.apply(node("node-1", Some("default"), "sim://i-1", "4"));
    assert_eq!(state.release_displaced_nominations(t0()), ["default/c"]);
    assert!(state.nomination("default/c", t0()).is_none());
    assert!(state.nomination("default/a", t0()).is_some());
    assert!(state.nomination("default/d", t0()).is_some());
    let provisionable: Vec<_> = state
        .provisionable_pods(t0())
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(provisionable, ["c"]);
}

/// A pass's placement on a registered node names the Node (the scheduler's existing nodes go by
/// their Node's name), not its NodeClaim. The nomination is kept under the NodeClaim all the
/// same: judged by the displacement check and counted against the node's room. Kept under the
/// Node's name it was neither, and the late-tail test's pod waited out its 20 s window on a node
/// the kube-scheduler had filled with others.
#[test]
fn a_nomination_to_a_nodes_name_is_kept_under_its_nodeclaim_and_released_when_displaced() {
    let mut state = ClusterState::from_objects(
        vec![nodepool("default")],
        vec![nodeclaim("default-abc", "default", Some("sim://i-1"), "4")],
        vec![
            node("node-1", Some("default"), "sim://i-1", "4"),
            node("unmanaged", None, "other://i-9", "4"),
        ],
        vec![
            pending_pod("a", "3"),
            pending_pod("u", "3"),
            bound_pod("other", "node-1", "2"),
            bound_pod("other-u", "unmanaged", "2"),
        ],
    );
    let until = t0() + SignedDuration::from_secs(20);
    state.nominate("default/a", "node-1", until);
    state.nominate("default/u", "unmanaged", until);
    assert_eq!(
        state
            .nomination("default/a", t0())
            .map(|n| n.nodeclaim.as_str()),
        Some("default-abc")
    );
    assert_eq!(state.nominated_pods("default-abc", t0()).len(), 1);
    assert_eq!(
        state
            .nomination("default/u", t0())
            .map(|n| n.nodeclaim.as_str()),
        Some("unmanaged")
    );
    // 2 of 4 cpu are bound on each: neither 3-cpu pod fits where it was nominated.
    assert_eq!(
        state.release_displaced_nominations(t0()),
        ["default/a", "default/u"]
    );
}

#[test]
fn synced_only_after_every_kind_is_listed() {
    let mut state = ClusterState::new();
    assert!(!state.synced());
    state.reset::<crate::pod::Pod>(vec![]);
    assert!(state.unsynced_kinds().len() == Kind::ALL.len() - 1);
    for kind in Kind::ALL {
        state.mark_listed(kind);
    }
    assert!(state.synced());
}

fn with_rv<K: kube_core::Resource>(mut obj: K, rv: &str) -> K {
    obj.meta_mut().resource_version = Some(rv.to_string());
    obj
}

#[test]
fn a_late_create_answer_never_replaces_the_newer_watched_copy() {
    let mut state = ClusterState::new();
    let launched = with_rv(
        nodeclaim("default-abc", "default", Some("sim://i-1"), "4"),
        "13",
    );
    state.apply(launched);
    // The provisioner's create answer (rv 10, no providerID yet) arrives after the watch.
    let created = with_rv(nodeclaim("default-abc", "default", None, "4"), "10");
    assert!(!state.remember(created.clone()));
    let held = state.nodeclaim("default-abc").unwrap();
    assert_eq!(held.resource_version().as_deref(), Some("13"));
    assert!(held.status.as_ref().unwrap().provider_id.is_some());
    // An older watched event (replayed) does not win either; a newer one does.
    state.apply(with_rv(created.clone(), "11"));
    assert_eq!(
        state
            .nodeclaim("default-abc")
            .unwrap()
            .resource_version()
            .as_deref(),
        Some("13")
    );
    state.apply(with_rv(created.clone(), "14"));
    assert_eq!(
        state
            .nodeclaim("default-abc")
            .unwrap()
            .resource_version()
            .as_deref(),
        Some("14")
    );
    // Deleted at 20: a late answer of rv 15 does not bring it back; a re-creation at 21 does.
    state.delete(&with_rv(created.clone(), "20"));
    assert!(!state.remember(with_rv(created.clone(), "15")));
    assert!(state.nodeclaim("default-abc").is_none());
    assert!(state.remember(with_rv(created, "21")));
    assert!(state.nodeclaim("default-abc").is_some());
}

#[test]
fn a_node_unregistered_past_the_grace_is_stuck() {
    let mut n = node("node-1", Some("default"), "sim://i-1", "4");
    n.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t0()));
    let at = |secs: i64| t0().checked_add(SignedDuration::from_secs(secs)).unwrap();
    let grace = SignedDuration::from_secs(30);
    let state = ClusterState::from_objects(vec![], vec![], vec![n.clone()], vec![]);
    assert!(
        !state.state_nodes()[0].stuck_unregistered(at(60), grace),
        "no taint"
    );
    n.spec.as_mut().unwrap().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
        key: "karpenter.sh/unregistered".into(),
        effect: "NoExecute".into(),
        ..Default::default()
    }]);
    let state = ClusterState::from_objects(vec![], vec![], vec![n], vec![]);
    let joined = &state.state_nodes()[0];
    assert!(
        !joined.stuck_unregistered(at(10), grace),
        "still registering"
    );
    assert!(joined.stuck_unregistered(at(31), grace));
}

#[test]
fn a_node_joins_its_nodeclaim_by_provider_id_only() {
    // Same name as the NodeClaim but another provider ID, and a Node with none: neither joins.
    let mut no_id = node("default-new", Some("default"), "", "2");
    no_id.spec.as_mut().unwrap().provider_id = None;
    let state = ClusterState::from_objects(
        vec![nodepool("default")],
        vec![
            nodeclaim("default-abc", "default", Some("sim://i-1"), "4"),
            nodeclaim("default-new", "default", Some("sim://i-2"), "2"),
        ],
        vec![
            node("default-abc", Some("default"), "sim://other", "4"),
            no_id,
        ],
        vec![],
    );
    let nodes = state.state_nodes();
    assert_eq!(
        nodes.len(),
        4,
        "two unjoined Nodes and two in-flight NodeClaims"
    );
    assert!(
        nodes
            .iter()
            .filter(|n| n.node.is_some())
            .all(|n| n.nodeclaim.is_none())
    );
    assert_eq!(nodes.iter().filter(|n| n.in_flight()).count(), 2);

    let joined = ClusterState::from_objects(
        vec![],
        vec![nodeclaim("default-abc", "default", Some("sim://i-1"), "4")],
        vec![node("ip-10-0-0-1", Some("default"), "sim://i-1", "4")],
        vec![],
    );
    let [only] = joined.state_nodes().try_into().unwrap();
    assert_eq!(only.name(), "ip-10-0-0-1");
    assert_eq!(only.nodeclaim.unwrap().name_any(), "default-abc");
}

#[test]
fn namespaces_are_tracked_by_name() {
    let mut state = ClusterState::new();
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "team-a", "labels": {"team": "a"}}
    }))
    .unwrap();
    state.apply(ns.clone());
    assert_eq!(state.namespace("team-a").unwrap().labels()["team"], "a");
    assert_eq!(state.namespaces().count(), 1);
    state.delete(&ns);
    assert!(state.namespace("team-a").is_none());
    assert!(
        Kind::ALL.contains(&Kind::Namespace),
        "synced waits for namespaces too"
    );
}

#[test]
fn marks_for_deletion_and_disruption_are_sets_of_names() {
    let mut state = ClusterState::from_objects(
        vec![],
        vec![nodeclaim("default-abc", "default", Some("sim://i-1"), "4")],
        vec![node("node-1", Some("default"), "sim://i-1", "4")],
        vec![],
    );
    assert!(!state.state_nodes()[0].marked_for_deletion());
    assert!(state.mark_for_deletion("default-abc"));
    assert!(!state.mark_for_deletion("default-abc"), "already marked");
    assert!(
        state.state_nodes()[0].marked_for_deletion(),
        "marking the NodeClaim marks the joined node"
    );
    assert!(state.unmark_for_deletion("default-abc"));
    assert!(state.mark_for_deletion("node-1"));
    assert!(state.state_nodes()[0].marked_for_deletion());

    assert!(!state.is_being_disrupted("node-1"));
    assert!(state.mark_being_disrupted("node-1"));
    assert!(state.is_being_disrupted("node-1"));
    assert!(state.unmark_being_disrupted("node-1"));
    assert!(!state.is_being_disrupted("node-1"));
}

/// A pod of `owner` (a ReplicaSet's UID) asking for `cpu`, tolerating what every pod does.
fn replica(name: &str, owner: &str, cpu: &str) -> Pod {
    let mut pod = pending_pod(name, cpu);
    pod.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: owner.into(),
            uid: owner.into(),
            controller: Some(true),
            ..Default::default()
        },
    ]);
    let toleration = serde_json::from_value(serde_json::json!(
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    ))
    .unwrap();
    pod.spec.as_mut().unwrap().tolerations = Some(vec![toleration].into());
    pod
}

fn spec_of<'a>(state: &'a ClusterState, key: &str) -> &'a crate::pod::PodSpec {
    state.pod(key).unwrap().spec.as_ref().unwrap()
}

#[test]
fn the_replicas_of_one_owner_share_their_equal_spec_parts() {
    let mut state = ClusterState::from_objects(
        vec![],
        vec![],
        vec![],
        vec![replica("a", "rs-1", "1"), replica("b", "rs-1", "1")],
    );
    state.apply(replica("c", "rs-1", "2"));
    state.apply(replica("d", "rs-2", "1"));
    state.apply(pending_pod("bare", "1"));
    let (a, b, c, d) = (
        spec_of(&state, "default/a"),
        spec_of(&state, "default/b"),
        spec_of(&state, "default/c"),
        spec_of(&state, "default/d"),
    );
    // Listed or watched, the replicas hold one copy of what they have alike.
    assert!(Arc::ptr_eq(&a.containers, &b.containers));
    assert!(Arc::ptr_eq(
        a.tolerations.as_ref().unwrap(),
        b.tolerations.as_ref().unwrap()
    ));
    // What differs stays its own, and the rest is still shared.
    assert!(!Arc::ptr_eq(&a.containers, &c.containers));
    assert_eq!(
        c.containers[0].resources,
        replica("c", "rs-1", "2").spec.unwrap().containers[0].resources
    );
    assert!(Arc::ptr_eq(
        a.tolerations.as_ref().unwrap(),
        c.tolerations.as_ref().unwrap()
    ));
    // Another owner's equal pod is not looked for (the index is by owner), and a pod without
    // an owner is kept as it came.
    assert!(!Arc::ptr_eq(&a.containers, &d.containers));
    assert_eq!(a.containers, d.containers);
    assert!(state.pod("default/bare").is_some());

    // The owner's first pod goes: the next replica becomes the one others share with.
    let gone = state.pod("default/a").unwrap().clone();
    state.delete(&gone);
    state.apply(replica("e", "rs-1", "1"));
    state.apply(replica("f", "rs-1", "1"));
    assert!(Arc::ptr_eq(
        &spec_of(&state, "default/e").containers,
        &spec_of(&state, "default/f").containers
    ));

    // A new version of a pod (bound now) shares with the version it replaces.
    let before = Arc::clone(&spec_of(&state, "default/b").containers);
    let mut bound = replica("b", "rs-1", "1");
    bound.spec.as_mut().unwrap().node_name = Some("node-1".into());
    state.apply(bound);
    assert!(Arc::ptr_eq(
        &before,
        &spec_of(&state, "default/b").containers
    ));
    assert_eq!(state.pods_on_node("node-1").count(), 1);
}
