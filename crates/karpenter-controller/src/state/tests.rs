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
