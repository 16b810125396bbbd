use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

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

#[test]
fn synced_only_after_every_kind_is_listed() {
    let mut state = ClusterState::new();
    assert!(!state.synced());
    state.reset::<k8s_openapi::api::core::v1::Pod>(vec![]);
    assert!(state.unsynced_kinds().len() == Kind::ALL.len() - 1);
    for kind in Kind::ALL {
        state.mark_listed(kind);
    }
    assert!(state.synced());
}

fn with_rv<K: kube::Resource>(mut obj: K, rv: &str) -> K {
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
