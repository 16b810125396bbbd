//! Static NodePools (`spec.replicas`), upstream's `static.provisioning` and
//! `static.deprovisioning` controllers as decisions on the cluster state: how many NodeClaims a
//! pool misses (never past its `limits.nodes`), and which NodeClaims go when it holds more than
//! its replicas (unlaunched first, then empty nodes, then the cheapest to disrupt, nodes with a
//! `karpenter.sh/do-not-disrupt` pod last).
//!
//! A pool's NodeClaims fall in three groups, as upstream's `NodePoolState` counts them:
//! - deleting: the NodeClaim or its Node has a deletion timestamp, or Karpenter marked it;
//! - pending disruption: a disruption command is replacing it (its replacement is already one of
//!   the pool's NodeClaims);
//! - active: the others.

use std::cmp::Ordering;

use jiff::Timestamp;
use karpenter_api::NodePool;
use karpenter_api::well_known::NODES_RESOURCE;
use kube_core::ResourceExt;

use crate::disruption::candidates::eviction_cost;
use crate::pod::{self, Pod, has_do_not_disrupt};
use crate::state::ClusterState;
use crate::state::node::StateNode;

use super::static_replicas;

/// A static pool's NodeClaims by group (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StaticCounts {
    pub active: i64,
    pub pending_disruption: i64,
    pub deleting: i64,
}

impl StaticCounts {
    /// Every NodeClaim of the pool: what `limits.nodes` is checked against (a deleting node still
    /// runs until it is gone, so it still counts).
    pub fn total(&self) -> i64 {
        self.active + self.pending_disruption + self.deleting
    }
}

fn in_pool(node: &StateNode<'_>, pool: &str) -> bool {
    node.nodeclaim
        .is_some_and(|c| c.nodepool_name() == Some(pool))
}

fn is_pending_disruption(state: &ClusterState, node: &StateNode<'_>) -> bool {
    state.is_being_disrupted(&node.name())
        || node
            .nodeclaim
            .is_some_and(|c| state.is_being_disrupted(&c.name_any()))
}

/// The pool's NodeClaims by group.
pub fn counts(state: &ClusterState, pool: &str) -> StaticCounts {
    let mut counts = StaticCounts::default();
    for node in state.state_nodes().iter().filter(|n| in_pool(n, pool)) {
        if node.marked_for_deletion() {
            counts.deleting += 1;
        } else if is_pending_disruption(state, node) {
            counts.pending_disruption += 1;
        } else {
            counts.active += 1;
        }
    }
    counts
}

/// The pool's `limits.nodes` (whole nodes, rounded down), or `None` without one. An unparsable
/// limit is the NodePool validation's to report; here it means no node limit.
pub fn node_limit(pool: &NodePool) -> Option<i64> {
    let limits = super::limits(pool).ok()?;
    limits
        .contains(NODES_RESOURCE)
        .then(|| limits.get(NODES_RESOURCE).millis().div_euclid(1000))
}

/// How many NodeClaims may still be added to the pool before `limits.nodes` (every NodeClaim of
/// the pool counts, deleting ones included); `i64::MAX` without a limit.
pub fn room_under_node_limit(pool: &NodePool, counts: &StaticCounts) -> i64 {
    node_limit(pool).map_or(i64::MAX, |limit| (limit - counts.total()).max(0))
}

/// How many NodeClaims the static `pool` should get now (0 for a dynamic or deleting pool):
/// none while its active and pending-disruption NodeClaims reach `replicas` (scaling down is
/// [`surplus`]'s), else the difference, cut to the room under `limits.nodes` with one more node
/// reserved per pending disruption.
///
/// Upstream reserves its launches against the limit in one counter shared with static drift;
/// here the disruption loop and the provisioner decide apart, so a node being replaced is
/// counted twice until its command is done: once itself, once for its replacement, which may not
/// be in the state yet. (Upstream also asks for `replicas - active`; the replacements of the
/// pending nodes are on their way, so asking for them again would only overshoot the replicas.)
pub fn to_provision(state: &ClusterState, pool: &NodePool) -> usize {
    let Some(replicas) = static_replicas(pool) else {
        return 0;
    };
    if pool.metadata.deletion_timestamp.is_some() {
        return 0;
    }
    let counts = counts(state, &pool.name_any());
    let held = counts.active + counts.pending_disruption;
    if held >= replicas {
        return 0;
    }
    let room = room_under_node_limit(pool, &counts).saturating_sub(counts.pending_disruption);
    usize::try_from((replicas - held).min(room).max(0)).unwrap_or(0)
}

/// A node's place in the scale-down order: lower goes first.
#[derive(Debug)]
struct Ranked {
    name: String,
    has_do_not_disrupt: bool,
    cost: f64,
}

/// Upstream `LifetimeRemaining`: the share of `expireAfter` still ahead of the NodeClaim, in
/// [0, 1]; 1 without `expireAfter` (or without a creation time).
fn lifetime_remaining(node: &StateNode<'_>, now: Timestamp) -> f64 {
    let Some(claim) = node.nodeclaim else {
        return 1.0;
    };
    let (Some(after), Some(created)) = (
        claim.spec.expire_after.as_ref().and_then(|d| d.duration()),
        claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
    ) else {
        return 1.0;
    };
    let total = after.as_secs_f64();
    if total <= 0.0 {
        return 1.0;
    }
    let age = now.duration_since(created).as_secs_f64();
    ((total - age) / total).clamp(0.0, 1.0)
}

/// The NodeClaims to delete so the static `pool` holds `replicas` active ones, in upstream's
/// order: NodeClaims not launched yet, then empty nodes (no pods, or only DaemonSet pods none
/// of which has an active do-not-disrupt), then the others, those without a do-not-disrupt pod
/// first, each group by rescheduling cost times the share of lifetime left (cheapest first).
/// NodeClaims being deleted or replaced by a disruption command are left alone. Ties by name.
pub fn surplus(state: &ClusterState, pool: &NodePool, now: Timestamp) -> Vec<String> {
    let Some(replicas) = static_replicas(pool) else {
        return Vec::new();
    };
    if pool.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let name = pool.name_any();
    let counts = counts(state, &name);
    let Ok(count) = usize::try_from(counts.active - replicas) else {
        return Vec::new();
    };
    if count == 0 {
        return Vec::new();
    }
    let nodes = state.state_nodes();
    let active: Vec<&StateNode<'_>> = nodes
        .iter()
        .filter(|n| in_pool(n, &name))
        .filter(|n| !n.marked_for_deletion() && !is_pending_disruption(state, n))
        .collect();
    let claim_name = |n: &StateNode<'_>| n.nodeclaim.map(|c| c.name_any()).unwrap_or_default();

    let mut unlaunched: Vec<String> = active
        .iter()
        .filter(|n| {
            n.nodeclaim.is_some_and(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_none_or(str::is_empty)
            })
        })
        .map(|n| claim_name(n))
        .collect();
    unlaunched.sort();

    let mut empty = Vec::new();
    let mut occupied = Vec::new();
    for node in active
        .iter()
        .filter(|n| !unlaunched.contains(&claim_name(n)))
    {
        let pods: Vec<&Pod> = node
            .pods
            .iter()
            .copied()
            .filter(|p| !pod::is_terminal(p))
            .collect();
        let has_do_not_disrupt = pods.iter().any(|p| has_do_not_disrupt(p, now));
        if pods.iter().all(|p| pod::is_owned_by_daemonset(p)) && !has_do_not_disrupt {
            empty.push(claim_name(node));
        } else {
            let rescheduling: f64 = pods.iter().map(|p| eviction_cost(p)).sum();
            occupied.push(Ranked {
                name: claim_name(node),
                has_do_not_disrupt,
                cost: rescheduling * lifetime_remaining(node, now),
            });
        }
    }
    empty.sort();
    occupied.sort_by(|a, b| {
        a.has_do_not_disrupt
            .cmp(&b.has_do_not_disrupt)
            .then_with(|| a.cost.partial_cmp(&b.cost).unwrap_or(Ordering::Equal))
            .then_with(|| a.name.cmp(&b.name))
    });
    unlaunched
        .into_iter()
        .chain(empty)
        .chain(occupied.into_iter().map(|r| r.name))
        .take(count)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::{bound_pod, node, nodeclaim, nodepool};
    use serde_json::json;

    fn t0() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    fn static_pool(replicas: i64, node_limit: Option<&str>) -> NodePool {
        let mut pool = nodepool("fixed");
        pool.spec.replicas = Some(replicas);
        if let Some(limit) = node_limit {
            pool.spec.limits = Some(serde_json::from_value(json!({"nodes": limit})).unwrap());
        }
        pool
    }

    /// `n` launched, registered NodeClaims `fixed-0..n` with Nodes `node-0..n`.
    fn held(
        n: usize,
    ) -> (
        Vec<karpenter_api::NodeClaim>,
        Vec<k8s_openapi::api::core::v1::Node>,
    ) {
        (0..n)
            .map(|i| {
                let id = format!("sim://{i}");
                (
                    nodeclaim(&format!("fixed-{i}"), "fixed", Some(&id), "4"),
                    node(&format!("node-{i}"), Some("fixed"), &id, "4"),
                )
            })
            .unzip()
    }

    #[test]
    fn provisions_up_to_replicas_but_never_past_the_node_limit() {
        let state = ClusterState::from_objects(vec![], vec![], vec![], vec![]);
        assert_eq!(to_provision(&state, &static_pool(10, None)), 10);
        assert_eq!(to_provision(&state, &static_pool(10, Some("5"))), 5);
        let (claims, nodes) = held(3);
        let pool = static_pool(10, Some("5"));
        let state = ClusterState::from_objects(vec![pool.clone()], claims, nodes, vec![]);
        assert_eq!(to_provision(&state, &pool), 2, "3 held, limit 5");
        let pool = static_pool(2, None);
        assert_eq!(
            to_provision(&state, &pool),
            0,
            "over replicas: scale-down's job"
        );
        assert!(nodepool("dynamic").spec.replicas.is_none());
        assert_eq!(to_provision(&state, &nodepool("dynamic")), 0);
    }

    #[test]
    fn deleting_nodeclaims_count_against_the_node_limit_but_not_as_replicas() {
        let (mut claims, nodes) = held(3);
        claims[0].metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t0()));
        let pool = static_pool(3, Some("3"));
        let state =
            ClusterState::from_objects(vec![pool.clone()], claims.clone(), nodes.clone(), vec![]);
        let counts = counts(&state, "fixed");
        assert_eq!(
            counts,
            StaticCounts {
                active: 2,
                pending_disruption: 0,
                deleting: 1
            }
        );
        assert_eq!(
            to_provision(&state, &pool),
            0,
            "the deleting one still holds the limit"
        );
        let pool = static_pool(3, Some("4"));
        assert_eq!(to_provision(&state, &pool), 1);
    }

    #[test]
    fn nodes_being_replaced_are_pending_disruption_not_active() {
        let (claims, nodes) = held(3);
        let pool = static_pool(2, None);
        let mut state = ClusterState::from_objects(vec![pool.clone()], claims, nodes, vec![]);
        state.mark_being_disrupted("node-0");
        assert_eq!(counts(&state, "fixed").pending_disruption, 1);
        assert_eq!(
            surplus(&state, &pool, t0()),
            Vec::<String>::new(),
            "2 active = replicas"
        );
        assert_eq!(
            to_provision(&state, &static_pool(3, None)),
            0,
            "active + pending reach 3"
        );
    }

    #[test]
    fn replacements_in_flight_are_reserved_against_the_node_limit() {
        // 3 nodes, 2 of them being replaced by static drift (replacements not seen yet), the
        // pool scaled to 4 under a limit of 5: the replacements take the room.
        let (claims, nodes) = held(3);
        let pool = static_pool(4, Some("5"));
        let mut state = ClusterState::from_objects(vec![pool.clone()], claims, nodes, vec![]);
        state.mark_being_disrupted("node-0");
        state.mark_being_disrupted("node-1");
        assert_eq!(to_provision(&state, &pool), 0);
        state.unmark_being_disrupted("node-1");
        assert_eq!(to_provision(&state, &pool), 1, "5 - 3 held - 1 replacement");
        assert_eq!(to_provision(&state, &static_pool(4, None)), 1, "4 - 3 held");
    }

    #[test]
    fn scale_down_removes_unlaunched_then_empty_then_cheapest_and_do_not_disrupt_last() {
        let (mut claims, nodes) = held(5);
        let mut unlaunched = nodeclaim("fixed-new", "fixed", None, "4");
        unlaunched.status = None;
        claims.push(unlaunched);
        let mut protected = bound_pod("protected", "node-2", "1");
        protected.metadata.annotations = Some(
            [(
                "karpenter.sh/do-not-disrupt".to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        let pods = vec![
            bound_pod("a", "node-0", "1"),
            bound_pod("b", "node-1", "1"),
            bound_pod("b2", "node-1", "1"),
            protected,
        ];
        let state = |replicas| {
            let pool = static_pool(replicas, None);
            let state = ClusterState::from_objects(
                vec![pool.clone()],
                claims.clone(),
                nodes.clone(),
                pods.clone(),
            );
            surplus(&state, &pool, t0())
        };
        assert_eq!(state(6), Vec::<String>::new());
        assert_eq!(state(5), ["fixed-new"]);
        assert_eq!(
            state(3),
            ["fixed-new", "fixed-3", "fixed-4"],
            "unlaunched, then empty"
        );
        assert_eq!(
            state(1),
            ["fixed-new", "fixed-3", "fixed-4", "fixed-0", "fixed-1"],
            "one pod before two; the do-not-disrupt node stays"
        );
        assert_eq!(state(0).last().map(String::as_str), Some("fixed-2"));
        assert_eq!(state(0).len(), 6);
    }

    #[test]
    fn daemonset_pods_leave_a_node_empty_unless_they_are_do_not_disrupt() {
        let (claims, nodes) = held(2);
        let mut daemon = bound_pod("ds", "node-0", "1");
        daemon.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds"
            }))
            .unwrap(),
        ]);
        let pool = static_pool(1, None);
        let state = ClusterState::from_objects(
            vec![pool.clone()],
            claims.clone(),
            nodes.clone(),
            vec![daemon.clone(), bound_pod("app", "node-1", "1")],
        );
        assert_eq!(surplus(&state, &pool, t0()), ["fixed-0"]);
        daemon.metadata.annotations = Some(
            [(
                "karpenter.sh/do-not-disrupt".to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        let state = ClusterState::from_objects(
            vec![pool.clone()],
            claims,
            nodes,
            vec![daemon, bound_pod("app", "node-1", "1")],
        );
        assert_eq!(surplus(&state, &pool, t0()), ["fixed-1"]);
    }

    #[test]
    fn older_nodes_cost_less_to_remove() {
        let (mut claims, nodes) = held(2);
        claims[0].metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t0()));
        claims[1].metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                t0().checked_add(jiff::SignedDuration::from_hours(100))
                    .unwrap(),
            ));
        for claim in &mut claims {
            claim.spec.expire_after =
                Some(karpenter_api::v1::NillableDuration::parse("720h").unwrap());
        }
        let pool = static_pool(1, None);
        let state = ClusterState::from_objects(
            vec![pool.clone()],
            claims,
            nodes,
            vec![bound_pod("a", "node-0", "1"), bound_pod("b", "node-1", "1")],
        );
        let now = t0()
            .checked_add(jiff::SignedDuration::from_hours(200))
            .unwrap();
        assert_eq!(
            surplus(&state, &pool, now),
            ["fixed-0"],
            "less lifetime left"
        );
    }
}
