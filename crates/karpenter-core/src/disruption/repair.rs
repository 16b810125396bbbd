//! Node repair (upstream `node.health`, karpenter-core §1.2 and §7.12 item 16; feature gate
//! `NodeRepair`): a managed Node whose condition matches one of the provider's
//! [`RepairPolicy`]s for longer than the policy's toleration is replaced by forcefully deleting
//! its NodeClaim — no budgets, no do-not-disrupt, no drain wait — unless too many nodes of its
//! NodePool are unhealthy at once (more than [`MAX_UNHEALTHY_PERCENT`] %, rounded up), which
//! points at a cause that replacing nodes will not cure (a bad AMI, a network outage).
//!
//! Pure: the controller acts on the [`RepairPlan`].

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::well_known::NODEPOOL_LABEL;
use kube_core::ResourceExt;

use crate::cloud_provider::RepairPolicy;
use crate::state::ClusterState;

/// Upstream's cap on unhealthy nodes per NodePool (cluster-wide for nodes without one) above
/// which repair stops.
pub const MAX_UNHEALTHY_PERCENT: usize = 20;

/// How long upstream waits before looking again at a NodePool whose repair was blocked.
pub const BLOCKED_RECHECK: SignedDuration = SignedDuration::from_mins(5);

/// A node to repair now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    pub node: String,
    pub nodeclaim: String,
    pub nodepool: Option<String>,
    /// The matching condition, e.g. `Ready=Unknown`.
    pub condition: String,
    /// When the condition started (its `lastTransitionTime`).
    pub since: Timestamp,
}

/// A node due for repair that the unhealthy cap holds back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairBlocked {
    pub node: String,
    pub nodeclaim: String,
    pub nodepool: Option<String>,
    /// Unhealthy nodes of the NodePool (or the cluster) right now.
    pub unhealthy: usize,
    /// All nodes of the NodePool (or the cluster).
    pub nodes: usize,
    /// How many may be unhealthy for repair to go on: ⌈20 % × nodes⌉.
    pub allowed: usize,
}

impl RepairBlocked {
    /// Upstream's event message, with the numbers.
    pub fn message(&self) -> String {
        let scope = match &self.nodepool {
            Some(pool) => format!("NodePool {pool:?}"),
            None => "the cluster".to_string(),
        };
        format!(
            "Cannot repair node {}: more than {MAX_UNHEALTHY_PERCENT}% of the nodes of {scope} are unhealthy ({} of {}, at most {} allowed)",
            self.node, self.unhealthy, self.nodes, self.allowed
        )
    }
}

/// What the health check found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairPlan {
    pub repair: Vec<Repair>,
    pub blocked: Vec<RepairBlocked>,
    /// The earliest instant a node not yet due becomes due (when to look again).
    pub next_due: Option<Timestamp>,
}

/// The policy `node` matches now and when its toleration runs out: of every matching condition,
/// the one due first (upstream). A condition without a transition time is ignored: how long it
/// has held is unknown, and a forceful delete needs to know.
fn due(node: &Node, policies: &[RepairPolicy]) -> Option<(String, Timestamp, Timestamp)> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    policies
        .iter()
        .filter_map(|policy| {
            let condition = conditions.iter().find(|c| {
                c.type_ == policy.condition_type && c.status == policy.condition_status
            })?;
            let since = condition.last_transition_time.as_ref()?.0;
            let toleration = SignedDuration::from_secs(policy.toleration_seconds.max(0));
            let at = since.checked_add(toleration).unwrap_or(Timestamp::MAX);
            Some((
                format!("{}={}", condition.type_, condition.status),
                since,
                at,
            ))
        })
        .min_by_key(|(_, _, at)| *at)
}

/// Whether any policy's condition matches, however briefly (what the cap counts).
fn unhealthy(node: &Node, policies: &[RepairPolicy]) -> bool {
    let Some(conditions) = node.status.as_ref().and_then(|s| s.conditions.as_ref()) else {
        return false;
    };
    policies.iter().any(|policy| {
        conditions
            .iter()
            .any(|c| c.type_ == policy.condition_type && c.status == policy.condition_status)
    })
}

/// ⌈percent × nodes / 100⌉ without overflow.
fn percent_rounded_up(nodes: usize, percent: usize) -> usize {
    nodes.saturating_mul(percent).div_ceil(100)
}

/// Which managed nodes to repair now, which the cap holds, and when to look again. Nodes
/// without a NodeClaim (not Karpenter's) and nodes already being deleted are never repaired.
pub fn plan_repairs(state: &ClusterState, policies: &[RepairPolicy], now: Timestamp) -> RepairPlan {
    let mut plan = RepairPlan::default();
    if policies.is_empty() {
        return plan;
    }
    // (nodes, unhealthy) per NodePool label; `None` is the whole cluster.
    let mut counts: BTreeMap<Option<&str>, (usize, usize)> = BTreeMap::new();
    for node in state.nodes() {
        let sick = usize::from(unhealthy(node, policies));
        let pool = node.labels().get(NODEPOOL_LABEL).map(String::as_str);
        // Every node counts for the cluster, and for its pool when it has one.
        let keys = if pool.is_some() {
            vec![pool, None]
        } else {
            vec![None]
        };
        for key in keys {
            let entry = counts.entry(key).or_default();
            entry.0 = entry.0.saturating_add(1);
            entry.1 = entry.1.saturating_add(sick);
        }
    }
    for joined in state.state_nodes() {
        let (Some(node), Some(claim)) = (joined.node, joined.nodeclaim) else {
            continue;
        };
        if joined.marked_for_deletion() {
            continue;
        }
        let Some((condition, since, at)) = due(node, policies) else {
            continue;
        };
        if at > now {
            plan.next_due = Some(plan.next_due.map_or(at, |next| next.min(at)));
            continue;
        }
        let nodepool = node.labels().get(NODEPOOL_LABEL).cloned();
        let (nodes, sick) = counts
            .get(&nodepool.as_deref())
            .copied()
            .unwrap_or_default();
        let allowed = percent_rounded_up(nodes, MAX_UNHEALTHY_PERCENT);
        if sick > allowed {
            plan.blocked.push(RepairBlocked {
                node: node.name_any(),
                nodeclaim: claim.name_any(),
                nodepool,
                unhealthy: sick,
                nodes,
                allowed,
            });
            continue;
        }
        plan.repair.push(Repair {
            node: node.name_any(),
            nodeclaim: claim.name_any(),
            nodepool,
            condition,
            since,
        });
    }
    plan
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::api::core::v1::NodeCondition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::cloud_provider::node_not_ready_repair_policies;
    use crate::disruption::testkit::{node, t0};
    use crate::state::fixtures;

    fn set_ready(node: &mut Node, status: &str, since: Timestamp) {
        let conditions = node
            .status
            .get_or_insert_default()
            .conditions
            .get_or_insert_default();
        conditions.retain(|c| c.type_ != "Ready");
        conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: status.into(),
            last_transition_time: Some(Time(since)),
            ..NodeCondition::default()
        });
    }

    /// `n` managed nodes of pool `default`; the first `sick` have been `Ready=Unknown` since
    /// `since`, the others are Ready.
    fn cluster(n: usize, sick: usize, since: Timestamp) -> ClusterState {
        let (mut claims, mut nodes) = (Vec::new(), Vec::new());
        for i in 0..n {
            let (claim, mut node) = node(&format!("n{i}"), "small.2x", "on-demand", "default");
            set_ready(&mut node, if i < sick { "Unknown" } else { "True" }, since);
            claims.push(claim);
            nodes.push(node);
        }
        ClusterState::from_objects(vec![fixtures::nodepool("default")], claims, nodes, vec![])
    }

    fn minutes(m: i64) -> Timestamp {
        t0().checked_add(SignedDuration::from_mins(m)).unwrap()
    }

    #[test]
    fn a_node_is_repaired_once_the_toleration_has_passed_and_not_before() {
        let policies = node_not_ready_repair_policies();
        let state = cluster(10, 1, t0());
        let early = plan_repairs(&state, &policies, minutes(29));
        assert!(early.repair.is_empty() && early.blocked.is_empty());
        assert_eq!(early.next_due, Some(minutes(30)), "requeue at the due time");
        let due = plan_repairs(&state, &policies, minutes(30));
        assert_eq!(due.repair.len(), 1);
        let repair = &due.repair[0];
        assert_eq!(
            (repair.node.as_str(), repair.nodeclaim.as_str()),
            ("n0", "n0-claim")
        );
        assert_eq!(repair.condition, "Ready=Unknown");
        assert_eq!(repair.nodepool.as_deref(), Some("default"));
        assert_eq!(repair.since, t0());
    }

    #[test]
    fn conditions_no_policy_names_are_ignored() {
        let policies = node_not_ready_repair_policies();
        let mut state = cluster(5, 0, t0());
        let (claim, mut other) = node("disk", "small.2x", "on-demand", "default");
        other
            .status
            .get_or_insert_default()
            .conditions
            .get_or_insert_default()
            .push(NodeCondition {
                type_: "DiskPressure".into(),
                status: "True".into(),
                last_transition_time: Some(Time(t0())),
                ..NodeCondition::default()
            });
        state.apply(claim);
        state.apply(other);
        let plan = plan_repairs(&state, &policies, minutes(600));
        assert_eq!(plan, RepairPlan::default());
        // Ready=True is healthy whatever its age; no policies, no repair.
        let sick = cluster(5, 1, t0());
        assert_eq!(
            plan_repairs(&sick, &[], minutes(600)),
            RepairPlan::default()
        );
    }

    #[test]
    fn more_than_twenty_percent_unhealthy_blocks_repair_with_the_numbers() {
        let policies = node_not_ready_repair_policies();
        // 2 of 4: ⌈20 % × 4⌉ = 1 allowed.
        let plan = plan_repairs(&cluster(4, 2, t0()), &policies, minutes(31));
        assert!(plan.repair.is_empty(), "{plan:?}");
        assert_eq!(plan.blocked.len(), 2);
        let blocked = &plan.blocked[0];
        assert_eq!(
            (blocked.unhealthy, blocked.nodes, blocked.allowed),
            (2, 4, 1)
        );
        assert_eq!(
            blocked.message(),
            "Cannot repair node n0: more than 20% of the nodes of NodePool \"default\" are unhealthy (2 of 4, at most 1 allowed)"
        );
        // 2 of 10 is exactly 20 %: allowed.
        let plan = plan_repairs(&cluster(10, 2, t0()), &policies, minutes(31));
        assert_eq!(plan.repair.len(), 2);
        // Small pools round up: 1 of 1 may be repaired.
        let plan = plan_repairs(&cluster(1, 1, t0()), &policies, minutes(31));
        assert_eq!(plan.repair.len(), 1);
    }

    #[test]
    fn unmanaged_and_deleting_nodes_are_left_alone() {
        let policies = node_not_ready_repair_policies();
        let mut unmanaged = fixtures::node("theirs", None, "aws:///i-theirs", "2");
        set_ready(&mut unmanaged, "False", t0());
        let mut state = cluster(10, 0, t0());
        state.apply(unmanaged);
        assert!(
            plan_repairs(&state, &policies, minutes(90))
                .repair
                .is_empty()
        );

        let mut state = cluster(10, 1, t0());
        state.mark_for_deletion("n0");
        assert!(
            plan_repairs(&state, &policies, minutes(90))
                .repair
                .is_empty()
        );
    }

    #[test]
    fn the_percentage_rounds_up_without_overflow() {
        assert_eq!(percent_rounded_up(0, 20), 0);
        assert_eq!(percent_rounded_up(1, 20), 1);
        assert_eq!(percent_rounded_up(5, 20), 1);
        assert_eq!(percent_rounded_up(6, 20), 2);
        assert!(percent_rounded_up(usize::MAX, 20) > 0);
    }
}
