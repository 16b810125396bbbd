//! The disruption loop on the test API server with the sim provider (issue 10 item 2): budgets,
//! do-not-disrupt, emptiness after `consolidateAfter`, expiration, the queue's rollback and the
//! clean-up of leftovers. Virtual time throughout.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): virtual time: budgets, `consolidateAfter` and
//! expiry over hours.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_DISRUPTION_REASON};
use karpenter_controller::disruption::queue::{self, CommandError, has_disrupted_taint};
use karpenter_controller::events::{
    REASON_CONSOLIDATION_APPROVED, REASON_CONSOLIDATION_REJECTED, REASON_DISRUPTION_BLOCKED,
    REASON_DISRUPTION_TERMINATING, REASON_INVALID_DO_NOT_DISRUPT,
};
use karpenter_controller::provisioning::CoreScheduler;
use karpenter_core::disruption::{Command, DisruptedNode, DisruptionReason, Method};
use karpenter_core::pod::Pod;
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::sim_cluster::{SimCluster, bind_pending, inflate_pod};

/// The `default` NodePool with this `disruption` block (and its NodeClass).
fn put_pool(cluster: &SimCluster, disruption: Value) {
    cluster.put_default_nodeclass();
    cluster
        .server
        .put_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "uid": "pool-uid", "generation": 1},
            "spec": {
                "template": {"spec": {
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h"
                }},
                "disruption": disruption
            }
        }))
        .unwrap();
}

fn exists<K>(cluster: &SimCluster, name: &str) -> bool
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + serde::de::DeserializeOwned
        + Clone,
{
    cluster.server.get::<K>(None, name).is_some()
}

/// A Ready NodeClaim from the default pool without the helper's test taint, and its Node.
async fn ready_node(cluster: &SimCluster, name: &str, extra_spec: Value) -> String {
    let mut spec = json!({"taints": []});
    crate::sim_cluster::merge(&mut spec, extra_spec);
    cluster.create_nodeclaim(name, spec).await;
    cluster.ready_nodeclaim(name).await.1
}

#[tokio::test(start_paused = true)]
async fn an_empty_node_is_removed_once_consolidate_after_has_passed() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "2m"}),
    );
    let controller = cluster.start_controller().await;
    let node = ready_node(&cluster, "empty", json!({})).await;
    let ready_at = cluster.now();

    // Before consolidateAfter it stays, and says until when (once, not every pass).
    tokio::time::sleep(Duration::from_secs(90)).await;
    assert!(exists::<NodeClaim>(&cluster, "empty"), "removed too early");
    let blocked = controller.ctx.events.with_reason(REASON_DISRUPTION_BLOCKED);
    let waiting = events_on(&blocked, "NodeClaim", "empty");
    assert_eq!(waiting.len(), 1, "{blocked:?}");
    // Two minutes after the node's initialization (just before the test saw it Ready).
    let until: jiff::Timestamp = waiting[0]
        .message
        .strip_prefix("not consolidatable before ")
        .and_then(|rest| {
            rest.split(':')
                .take(3)
                .collect::<Vec<_>>()
                .join(":")
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{}", waiting[0].message));
    let after_ready = until.duration_since(ready_at);
    assert!(
        after_ready <= jiff::SignedDuration::from_mins(2)
            && after_ready > jiff::SignedDuration::from_secs(100),
        "{until} vs ready at {ready_at}"
    );
    cluster
        .eventually("empty node removed", Duration::from_secs(120), || {
            (!exists::<NodeClaim>(&cluster, "empty") && !exists::<Node>(&cluster, &node))
                .then_some(())
        })
        .await;
    let after = cluster.now().duration_since(ready_at);
    assert!(
        after >= jiff::SignedDuration::from_mins(2),
        "gone after {after:?}"
    );
    assert!(
        !controller
            .ctx
            .events
            .with_reason(REASON_DISRUPTION_TERMINATING)
            .is_empty(),
        "the deletion is explained on the node"
    );
    let metrics = controller.ctx.metrics.encode();
    assert!(
        metrics.contains(
            r#"karpenter_voluntary_disruption_decisions_total{decision="delete",reason="empty",consolidation_type="empty"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"karpenter_nodeclaims_disrupted_total{reason="empty",nodepool="default",capacity_type="on-demand",consolidation_policy="when_empty_or_underutilized",termination_mode="graceful"} 1"#
        ),
        "{metrics}"
    );
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_zero_budget_blocks_voluntary_disruption_and_says_so() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
               "budgets": [{"nodes": "0"}]}),
    );
    let controller = cluster.start_controller().await;
    let node_a = ready_node(&cluster, "empty-a", json!({})).await;
    let node_b = ready_node(&cluster, "empty-b", json!({})).await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(exists::<NodeClaim>(&cluster, "empty-a") && exists::<NodeClaim>(&cluster, "empty-b"));
    let blocked = controller.ctx.events.with_reason(REASON_DISRUPTION_BLOCKED);
    for node in [&node_a, &node_b] {
        let on_node: Vec<_> = blocked
            .iter()
            .filter(|e| e.involved.kind.as_deref() == Some("Node"))
            .filter(|e| e.involved.name.as_deref() == Some(node.as_str()))
            .collect();
        assert_eq!(on_node.len(), 1, "one event per reason, not one per pass");
        assert!(
            on_node[0].message.contains("disruption budget")
                && on_node[0].message.contains("default"),
            "{}",
            on_node[0].message
        );
    }
    assert!(
        blocked
            .iter()
            .any(|e| e.involved.kind.as_deref() == Some("NodeClaim")),
        "the NodeClaim carries it too"
    );
    // The NodePool says why as a whole (upstream's budget-blocked event), once per reason.
    let on_pool: Vec<_> = blocked
        .iter()
        .filter(|e| e.involved.kind.as_deref() == Some("NodePool"))
        .collect();
    for reason in ["Empty", "Drifted", "Underutilized"] {
        assert!(
            on_pool.iter().any(|e| e.message.starts_with(&format!(
                "No allowed disruptions for disruption reason {reason} due to blocking budget"
            )) && e.message.contains("nodes: 0")),
            "{on_pool:?}"
        );
    }
    assert!(controller.ctx.metrics.encode().contains(
        r#"karpenter_nodepools_allowed_disruptions{nodepool="default",reason="empty"} 0"#
    ));
    // Past consolidateAfter (0s): consolidatable, only the budget holds them.
    for claim in ["empty-a", "empty-b"] {
        let consolidatable = cluster
            .nodeclaim(claim)
            .and_then(|c| c.status)
            .is_some_and(|s| s.is_condition_true("Consolidatable"));
        assert!(consolidatable, "{claim} has Consolidatable=True");
    }
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_do_not_disrupt_pod_holds_its_node() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}),
    );
    let controller = cluster.start_controller().await;
    let held = ready_node(&cluster, "held", json!({})).await;
    // A DaemonSet-less, controller-less pod counts for nothing to reschedule (like a mirror or
    // terminal pod would not); the annotation alone must hold the node.
    cluster
        .bound_pod(
            "precious",
            &held,
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                   "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]}}),
        )
        .await;
    let free = ready_node(&cluster, "free", json!({})).await;
    cluster
        .eventually(
            "the free empty node removed",
            Duration::from_secs(60),
            || (!exists::<Node>(&cluster, &free)).then_some(()),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(exists::<NodeClaim>(&cluster, "held"));
    assert!(
        cluster
            .node(&held)
            .is_some_and(|n| !has_disrupted_taint(&n))
    );
    let blocked = controller.ctx.events.with_reason(REASON_DISRUPTION_BLOCKED);
    assert!(
        blocked
            .iter()
            .any(|e| e.involved.name.as_deref() == Some(held.as_str())
                && e.message.contains("default/precious")
                && e.message.contains("do-not-disrupt")),
        "{blocked:?}"
    );
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_do_not_disrupt_duration_holds_its_node_until_it_runs_out() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}),
    );
    let controller = cluster.start_controller().await;
    let held = ready_node(&cluster, "held", json!({})).await;
    cluster
        .bound_pod(
            "precious",
            &held,
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "2m"}},
                   "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]}}),
        )
        .await;
    let started = cluster.now();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(exists::<NodeClaim>(&cluster, "held"));
    let names_the_pod_and_instant = |e: &&karpenter_controller::events::EventRecord| {
        e.message.contains("default/precious") && e.message.contains("frees the node at")
    };
    let blocked = controller.ctx.events.with_reason(REASON_DISRUPTION_BLOCKED);
    assert!(
        events_on(&blocked, "Node", &held)
            .iter()
            .any(names_the_pod_and_instant),
        "{blocked:?}"
    );
    // Once the two minutes from the pod's start have passed, the annotation no longer holds the
    // node: it is disrupted, or held for another reason.
    cluster
        .eventually(
            "the duration no longer holds the node",
            Duration::from_secs(120),
            || {
                let blocked = controller.ctx.events.with_reason(REASON_DISRUPTION_BLOCKED);
                let other_reason = events_on(&blocked, "Node", &held)
                    .last()
                    .is_some_and(|e| !e.message.contains("do-not-disrupt"));
                (other_reason || !exists::<NodeClaim>(&cluster, "held")).then_some(())
            },
        )
        .await;
    assert!(cluster.now().duration_since(started) >= jiff::SignedDuration::from_secs(110));
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_invalid_do_not_disrupt_value_is_ignored_and_said_on_the_pod() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}),
    );
    let controller = cluster.start_controller().await;
    let node = ready_node(&cluster, "careless", json!({})).await;
    cluster
        .bound_pod(
            "sloppy",
            &node,
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "soon"}},
                   "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]}}),
        )
        .await;
    cluster
        .eventually("a warning on the pod", Duration::from_secs(60), || {
            let warned = controller
                .ctx
                .events
                .with_reason(REASON_INVALID_DO_NOT_DISRUPT);
            events_on(&warned, "Pod", "sloppy")
                .iter()
                .any(|e| e.message.contains("\"soon\""))
                .then_some(())
        })
        .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let warned = controller
        .ctx
        .events
        .with_reason(REASON_INVALID_DO_NOT_DISRUPT);
    assert_eq!(events_on(&warned, "Pod", "sloppy").len(), 1, "said once");
    let blocked = controller.ctx.events.with_reason(REASON_DISRUPTION_BLOCKED);
    assert!(
        !events_on(&blocked, "Node", &node)
            .iter()
            .any(|e| e.message.contains("do-not-disrupt")),
        "an invalid value holds nothing: {blocked:?}"
    );
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn expire_after_recycles_a_node_and_its_pod_gets_a_new_one() {
    let cluster = SimCluster::new().await;
    put_pool(&cluster, json!({"consolidateAfter": "Never"}));
    let controller = cluster.start_controller_with(Arc::new(CoreScheduler)).await;
    let old = ready_node(&cluster, "short-lived", json!({"expireAfter": "5m"})).await;
    let mut pod = inflate_pod(0);
    pod.spec.get_or_insert_default().node_name = Some(old.clone());
    cluster.server.put(&pod).unwrap();

    // Forceful: no budget or consolidateAfter applies; the pod's node is gone after ~5 min and
    // the provisioner launched another for the pod (it plans for pods on deleting nodes).
    cluster
        .eventually(
            "expired nodeclaim gone",
            Duration::from_secs(6 * 60),
            || {
                (!exists::<NodeClaim>(&cluster, "short-lived") && !exists::<Node>(&cluster, &old))
                    .then_some(())
            },
        )
        .await;
    let claims = cluster.server.list::<NodeClaim>();
    assert_eq!(claims.len(), 1, "one replacement for the pod: {claims:?}");
    let new_claim = claims[0].name_any();
    let (_, new_node) = cluster.ready_nodeclaim(&new_claim).await;
    // The drain evicted the pod (no ReplicaSet here to recreate it): recreate it as one would,
    // and it lands on the new node.
    if cluster
        .pod("inflate-0")
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    {
        cluster
            .eventually("evicted pod gone", Duration::from_secs(30), || {
                cluster.pod("inflate-0").is_none().then_some(())
            })
            .await;
        cluster.server.put(&inflate_pod(0)).unwrap();
    }
    cluster
        .eventually("pod bound to the new node", Duration::from_secs(30), || {
            bind_pending(&cluster);
            cluster
                .pod("inflate-0")
                .and_then(|p| p.spec.and_then(|s| s.node_name))
                .filter(|n| *n == new_node)
        })
        .await;
    assert!(
        controller
            .ctx
            .metrics
            .encode()
            .contains(r#"karpenter_nodeclaims_disrupted_total{reason="expired",nodepool="default",capacity_type="on-demand",consolidation_policy="",termination_mode="graceful"} 1"#)
    );
    controller.stop().await;
    cluster.shutdown().await;
}

/// A replacement the command waits for: with a startup taint nobody removes it never
/// initializes.
fn replacement_that_never_initializes() -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"generateName": "default-", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "resources": {"requests": {"cpu": "1", "pods": "1"}},
            "startupTaints": [{"key": "example.com/never-ready", "effect": "NoSchedule"}]
        }
    }))
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_replacement_that_never_initializes_is_rolled_back() {
    let cluster = SimCluster::new().await;
    // The loop itself leaves the node alone: this test drives the queue.
    put_pool(&cluster, json!({"consolidateAfter": "Never"}));
    let controller = cluster.start_controller().await;
    let node = ready_node(&cluster, "candidate", json!({})).await;
    let command = Command {
        method: Method::SingleNodeConsolidation,
        reason: DisruptionReason::Underutilized,
        candidates: vec![DisruptedNode {
            name: node.clone(),
            nodeclaim: "candidate".into(),
            node_pool: "default".into(),
            instance_type: None,
            zone: None,
            capacity_type: Some("on-demand".into()),
            price: None,
            reschedulable_pods: Vec::new(),
        }],
        replacements: vec![replacement_that_never_initializes()],
        savings_per_hour: 0.0,
        balanced_scores: Vec::new(),
    };
    let ctx = controller.ctx.clone();
    let running = tokio::spawn(async move { queue::run_command(&ctx, command).await });

    // While it waits: tainted, condition set, replacement launched.
    cluster
        .eventually("candidate marked", Duration::from_secs(30), || {
            let tainted = cluster.node(&node).is_some_and(|n| has_disrupted_taint(&n));
            let reason = cluster.nodeclaim("candidate").and_then(|c| {
                c.status?
                    .condition(NODECLAIM_CONDITION_DISRUPTION_REASON)
                    .and_then(|c| c.reason.clone())
            });
            (tainted && reason.as_deref() == Some("Underutilized")).then_some(())
        })
        .await;
    assert_eq!(cluster.server.count::<NodeClaim>(), 2, "the replacement");
    // Until the candidate is gone, no pass may take its replacement (empty until the
    // candidate's pods move: emptiness would delete it).
    let replacement = controller
        .ctx
        .state
        .read()
        .nodeclaims()
        .map(|c| c.name_any())
        .find(|n| n != "candidate")
        .unwrap();
    assert!(controller.ctx.state.read().is_replacing(&replacement));

    let result = running.await.unwrap();
    assert!(
        matches!(result, Err(CommandError::ReplacementTimeout(_))),
        "{result:?}"
    );
    assert!(
        !controller.ctx.state.read().is_replacing(&replacement),
        "released by the rollback"
    );
    let candidate = cluster.nodeclaim("candidate").unwrap();
    assert!(candidate.metadata.deletion_timestamp.is_none(), "kept");
    assert!(
        candidate
            .status
            .unwrap()
            .condition(NODECLAIM_CONDITION_DISRUPTION_REASON)
            .is_none()
    );
    assert!(
        !has_disrupted_taint(&cluster.node(&node).unwrap()),
        "untainted"
    );
    // Held out of the next passes' decisions for the rollback hold (3 minutes), so the same
    // command is not decided again at once.
    let held = controller.ctx.state.read().rollback_hold(&node);
    assert!(
        held.is_some_and(|until| until > controller.ctx.clock.now()),
        "{held:?}"
    );
    // Upstream's queue leaves the replacement (drift_test.go "should not disrupt a drifted node
    // if the replacement node registers but never initialized" counts it): it is capacity if it
    // initializes later, and the registration TTL removes it if it never registers.
    assert_eq!(
        cluster.server.count::<NodeClaim>(),
        2,
        "the replacement is kept"
    );
    assert!(
        !controller.ctx.state.read().is_being_disrupted(&node),
        "released in the state"
    );
    assert!(controller.ctx.metrics.encode().contains(
        r#"karpenter_voluntary_disruption_queue_failures_total{decision="replace",reason="underutilized",consolidation_type="single"} 1"#
    ));
    controller.stop().await;
    cluster.shutdown().await;
}

/// A consolidation under `PackingPolicy::CostOptimal` may launch several replacements: every one
/// is created before anything is deleted, and the candidate waits for all of them: one that
/// never initializes holds it even though the other did; the rollback keeps both (upstream).
#[tokio::test(start_paused = true)]
async fn a_command_with_two_replacements_deletes_nothing_until_both_initialize() {
    let cluster = SimCluster::new().await;
    put_pool(&cluster, json!({"consolidateAfter": "Never"}));
    let controller = cluster.start_controller().await;
    let node = ready_node(&cluster, "candidate", json!({})).await;
    let mut initializes = replacement_that_never_initializes();
    initializes.spec.startup_taints.clear();
    let command = Command {
        method: Method::SingleNodeConsolidation,
        reason: DisruptionReason::Underutilized,
        candidates: vec![DisruptedNode {
            name: node.clone(),
            nodeclaim: "candidate".into(),
            node_pool: "default".into(),
            instance_type: None,
            zone: None,
            capacity_type: Some("on-demand".into()),
            price: None,
            reschedulable_pods: Vec::new(),
        }],
        replacements: vec![initializes, replacement_that_never_initializes()],
        savings_per_hour: 0.0,
        balanced_scores: Vec::new(),
    };
    let ctx = controller.ctx.clone();
    let running = tokio::spawn(async move { queue::run_command(&ctx, command).await });
    cluster
        .eventually(
            "both replacements launched",
            Duration::from_secs(30),
            || (cluster.server.count::<NodeClaim>() == 3).then_some(()),
        )
        .await;
    let result = running.await.unwrap();
    assert!(
        matches!(result, Err(CommandError::ReplacementTimeout(_))),
        "{result:?}"
    );
    let candidate = cluster.nodeclaim("candidate").unwrap();
    assert!(
        candidate.metadata.deletion_timestamp.is_none(),
        "kept while a replacement is not initialized"
    );
    assert_eq!(
        cluster.server.count::<NodeClaim>(),
        3,
        "both replacements kept, as upstream's queue keeps them"
    );
    assert!(exists::<NodeClaim>(&cluster, "candidate"));
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_disrupted_taint_left_by_a_crash_is_cleaned_up() {
    let cluster = SimCluster::new().await;
    put_pool(&cluster, json!({"consolidateAfter": "Never"}));
    let controller = cluster.start_controller().await;
    let node = ready_node(&cluster, "leftover", json!({})).await;
    // What a replica that crashed mid-command leaves: the taint, no command in flight.
    let api: Api<Node> = Api::all(cluster.client.clone());
    let mut tainted = cluster.node(&node).unwrap();
    tainted
        .spec
        .get_or_insert_default()
        .taints
        .get_or_insert_default()
        .push(k8s_openapi::api::core::v1::Taint {
            key: "karpenter.sh/disrupted".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
    api.replace(&node, &PostParams::default(), &tainted)
        .await
        .unwrap();
    cluster
        .eventually("taint removed", Duration::from_secs(30), || {
            cluster
                .node(&node)
                .filter(|n| !has_disrupted_taint(n))
                .map(|_| ())
        })
        .await;
    assert!(exists::<NodeClaim>(&cluster, "leftover"));
    controller.stop().await;
    cluster.shutdown().await;
}

async fn scale_inflate(client: &Client, cluster: &SimCluster, replicas: usize) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let existing = cluster.server.list::<Pod>().len();
    for i in replicas..existing {
        let _ = pods
            .delete(&format!("inflate-{i}"), &DeleteParams::default())
            .await;
    }
}

/// Today the nine emptied nodes go by emptiness; once consolidation lands the survivor may also
/// be replaced by a cheaper one — the count stays one.
#[tokio::test(start_paused = true)]
async fn inflate_ten_to_one_consolidates_to_one_node() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
               "budgets": [{"nodes": "100%"}]}),
    );
    let controller = cluster.start_controller_with(Arc::new(CoreScheduler)).await;
    for i in 0..10 {
        cluster.server.put(&inflate_pod(i)).unwrap();
    }
    cluster
        .eventually("all pods bound", Duration::from_secs(120), || {
            bind_pending(&cluster);
            cluster
                .server
                .list::<Pod>()
                .iter()
                .all(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                .then_some(())
        })
        .await;
    scale_inflate(&cluster.client, &cluster, 1).await;
    cluster
        .eventually("one node left", Duration::from_secs(10 * 60), || {
            bind_pending(&cluster);
            let live = cluster
                .server
                .list::<NodeClaim>()
                .into_iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .count();
            (live == 1 && cluster.server.count::<Node>() == 1).then_some(())
        })
        .await;
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn changing_the_nodepool_template_replaces_every_node_within_budget() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}),
    );
    let controller = cluster.start_controller_with(Arc::new(CoreScheduler)).await;
    for i in 0..3 {
        let mut pod = inflate_pod(i);
        Arc::make_mut(&mut pod.spec.get_or_insert_default().containers)[0]
            .resources
            .get_or_insert_default()
            .requests = Some(
            [(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("3".into()),
            )]
            .into(),
        );
        cluster.server.put(&pod).unwrap();
    }
    cluster
        .eventually("three nodes", Duration::from_secs(120), || {
            bind_pending(&cluster);
            (cluster.server.count::<Node>() == 3).then_some(())
        })
        .await;
    let before: Vec<String> = cluster
        .server
        .list::<NodeClaim>()
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    // A template change: every NodeClaim's hash no longer matches.
    let mut pool: Value = serde_json::to_value(
        cluster
            .server
            .get::<karpenter_api::NodePool>(None, "default")
            .unwrap(),
    )
    .unwrap();
    pool["spec"]["template"]["metadata"] = json!({"labels": {"team": "b"}});
    pool["metadata"]["generation"] = json!(2);
    cluster.server.put_value(pool).unwrap();
    let mut most_disrupting = 0;
    cluster
        .eventually("every node replaced", Duration::from_secs(20 * 60), || {
            bind_pending(&cluster);
            let claims = cluster.server.list::<NodeClaim>();
            let deleting = claims
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_some())
                .count();
            most_disrupting = most_disrupting.max(deleting);
            claims
                .iter()
                .all(|c| !before.contains(&c.name_any()))
                .then_some(())
        })
        .await;
    assert!(most_disrupting <= 1, "budget nodes: 1 ({most_disrupting})");
    controller.stop().await;
    cluster.shutdown().await;
}

/// A pod of `cpu` bound to `node`, optionally do-not-disrupt.
async fn small_pod(cluster: &SimCluster, name: &str, node: &str, cpu: &str, do_not_disrupt: bool) {
    let annotations = if do_not_disrupt {
        json!({"karpenter.sh/do-not-disrupt": "true"})
    } else {
        json!({})
    };
    cluster
        .bound_pod(
            name,
            node,
            json!({"metadata": {"annotations": annotations},
                   "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]}}),
        )
        .await;
}

fn events_on<'e>(
    events: &'e [karpenter_controller::events::EventRecord],
    kind: &str,
    name: &str,
) -> Vec<&'e karpenter_controller::events::EventRecord> {
    events
        .iter()
        .filter(|e| e.involved.kind.as_deref() == Some(kind))
        .filter(|e| e.involved.name.as_deref() == Some(name))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_balanced_pool_scores_the_move_it_approves_in_metrics_and_events() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "Balanced", "consolidateAfter": "0s",
               "budgets": [{"nodes": "100%"}]}),
    );
    let controller = cluster.start_controller().await;
    // Two equal nodes with one small pod each: deleting either saves 50 % of the pool's cost
    // for 50 % of its disruption (1 + 1 pod each): score 1.00.
    let node_a = ready_node(&cluster, "a", json!({})).await;
    let node_b = ready_node(&cluster, "b", json!({})).await;
    small_pod(&cluster, "web-a", &node_a, "100m", false).await;
    small_pod(&cluster, "web-b", &node_b, "100m", false).await;
    cluster
        .eventually(
            "one node consolidated away",
            Duration::from_secs(5 * 60),
            || {
                (exists::<NodeClaim>(&cluster, "a") != exists::<NodeClaim>(&cluster, "b"))
                    .then_some(())
            },
        )
        .await;
    let (gone_claim, gone_node) = if exists::<NodeClaim>(&cluster, "a") {
        ("b", node_b)
    } else {
        ("a", node_a)
    };
    let approved = controller
        .ctx
        .events
        .with_reason(REASON_CONSOLIDATION_APPROVED);
    let want = "score 1.00 >= threshold 0.50 (savings 50.0%, disruption 50.0%)";
    for (kind, name) in [("Node", gone_node.as_str()), ("NodeClaim", gone_claim)] {
        let on = events_on(&approved, kind, name);
        assert_eq!(on.len(), 1, "{kind} {name}: {approved:?}");
        assert_eq!(on[0].message, want);
    }
    let metrics = controller.ctx.metrics.encode();
    let labels = r#"decision="approved",nodepool="default",policy="Balanced""#;
    for line in [
        format!("karpenter_consolidation_moves_total{{{labels}}} 1"),
        format!("karpenter_consolidation_score_count{{{labels}}} 1"),
        format!("karpenter_consolidation_score_sum{{{labels}}} 1.0"),
        // 1.00 falls in the le="1.0" bucket, not in le="0.5".
        format!(r#"karpenter_consolidation_score_bucket{{le="0.5",{labels}}} 0"#),
        format!(r#"karpenter_consolidation_score_bucket{{le="1.0",{labels}}} 1"#),
    ] {
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    assert!(
        !metrics.contains(r#"karpenter_consolidation_moves_total{decision="rejected""#),
        "{metrics}"
    );
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_balanced_pool_rejects_a_node_too_disruptive_to_move_and_says_so() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "Balanced", "consolidateAfter": "0s",
               "budgets": [{"nodes": "100%"}]}),
    );
    let controller = cluster.start_controller().await;
    // Three equal nodes: `busy` runs ten pods, the two others one do-not-disrupt pod each
    // (they are no candidates, but count in the pool's totals). Deleting `busy` saves a third
    // of the cost for 11 of the pool's 15 disruption: 0.45 < 0.5, so not even a delete passes.
    let busy = ready_node(&cluster, "busy", json!({})).await;
    for i in 0..10 {
        small_pod(&cluster, &format!("web-{i}"), &busy, "10m", false).await;
    }
    for name in ["held-a", "held-b"] {
        let node = ready_node(&cluster, name, json!({})).await;
        small_pod(&cluster, &format!("{name}-pod"), &node, "10m", true).await;
    }
    let rejected = cluster
        .eventually(
            "a ConsolidationRejected event",
            Duration::from_secs(120),
            || {
                let events = controller
                    .ctx
                    .events
                    .with_reason(REASON_CONSOLIDATION_REJECTED);
                (!events_on(&events, "NodeClaim", "busy").is_empty()).then_some(events)
            },
        )
        .await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(exists::<NodeClaim>(&cluster, "busy"));
    let on_node = events_on(&rejected, "Node", &busy);
    assert_eq!(on_node.len(), 1, "once, not once per pass: {rejected:?}");
    assert!(
        on_node[0]
            .message
            .starts_with("score 0.45 < threshold 0.50 (savings 33.3%, disruption 73.3%)"),
        "{}",
        on_node[0].message
    );
    assert!(
        controller
            .ctx
            .events
            .with_reason(REASON_CONSOLIDATION_APPROVED)
            .is_empty()
    );
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_balanced_multi_node_move_is_announced_on_the_nodepool() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "Balanced", "consolidateAfter": "0s",
               "budgets": [{"nodes": "100%"}]}),
    );
    let controller = cluster.start_controller().await;
    // Three equal nodes with one small pod each: deleting two (their pods fit on the third)
    // saves two thirds of the cost for two thirds of the disruption: score 1.00. Replacing all
    // three by one larger node would save only a third for all of it (0.33, refused).
    let mut nodes = Vec::new();
    for name in ["a", "b", "c"] {
        let node = ready_node(&cluster, name, json!({})).await;
        small_pod(&cluster, &format!("web-{name}"), &node, "100m", false).await;
        nodes.push(node);
    }
    cluster
        .eventually(
            "two nodes consolidated away",
            Duration::from_secs(5 * 60),
            || {
                let left = ["a", "b", "c"]
                    .iter()
                    .filter(|n| exists::<NodeClaim>(&cluster, n))
                    .count();
                (left == 1).then_some(())
            },
        )
        .await;
    let approved = controller
        .ctx
        .events
        .with_reason(REASON_CONSOLIDATION_APPROVED);
    let on_pool = events_on(&approved, "NodePool", "default");
    assert_eq!(on_pool.len(), 1, "{approved:?}");
    assert_eq!(
        on_pool[0].message,
        "score 1.00 >= threshold 0.50 (savings 66.7%, disruption 66.7%)"
    );
    for node in &nodes {
        assert!(
            events_on(&approved, "Node", node).is_empty(),
            "a multi-node move is the pool's, not a node's"
        );
    }
    let metrics = controller.ctx.metrics.encode();
    let line = r#"karpenter_consolidation_moves_total{decision="approved",nodepool="default",policy="Balanced"} 1"#;
    assert!(metrics.contains(line), "{metrics}");
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_pass_runs_as_soon_as_the_provisioner_is_done_not_a_poll_period_later() {
    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
               "budgets": [{"nodes": "100%"}]}),
    );
    let controller = cluster.start_controller().await;
    // A NodeClaim held uninitialized by a startup taint: the provisioner has work, so the loop
    // leaves voluntary disruption alone.
    cluster
        .create_nodeclaim(
            "held",
            json!({"taints": [], "startupTaints": [{"key": "example.com/held", "effect": "NoSchedule"}]}),
        )
        .await;
    let held = cluster
        .eventually("the held claim's node", Duration::from_secs(60), || {
            let node = cluster.nodeclaim("held")?.status?.node_name?;
            cluster.node(&node).map(|_| node)
        })
        .await;
    ready_node(&cluster, "empty", json!({})).await;
    tokio::time::sleep(Duration::from_secs(63)).await;
    assert!(
        exists::<NodeClaim>(&cluster, "empty"),
        "disrupted while provisioning"
    );
    assert!(
        cluster
            .nodeclaim("empty")
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "disrupted while provisioning"
    );

    // The startup taint goes: the claim initializes and the empty node is seen at the next look,
    // which is within a second or two, not the 10 s poll period; it goes after upstream's 15 s
    // validation finds it still empty (emptiness_test.go "should wait for the node TTL for empty
    // nodes before consolidating").
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    nodes
        .patch(
            &held,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"taints": []}})),
        )
        .await
        .unwrap();
    let freed = cluster.now();
    cluster
        .eventually("the empty node deleted", Duration::from_secs(30), || {
            cluster
                .nodeclaim("empty")
                .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
                .then_some(())
        })
        .await;
    let after = cluster.now().duration_since(freed);
    assert!(
        after >= jiff::SignedDuration::from_secs(15)
            && after <= jiff::SignedDuration::from_secs(18),
        "deleted {after:?} after the provisioner was done"
    );
    controller.stop().await;
    cluster.shutdown().await;
}

/// A clock that counts how often it was read while the cluster state's lock was held.
struct LockProbe {
    clock: Arc<dyn karpenter_core::clock::Clock>,
    state: std::sync::OnceLock<Arc<karpenter_controller::state::SharedState>>,
    reads: std::sync::atomic::AtomicUsize,
    reads_under_lock: std::sync::atomic::AtomicUsize,
}

impl karpenter_core::clock::Clock for LockProbe {
    fn now(&self) -> jiff::Timestamp {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(state) = self.state.get() {
            self.reads.fetch_add(1, Relaxed);
            if state.is_held() {
                self.reads_under_lock.fetch_add(1, Relaxed);
            }
        }
        self.clock.now()
    }
}

/// A pass decides on a copy of the state, not under its lock: a decision takes seconds at
/// hundreds of nodes, and holding the lock that long stopped every watcher's write and every
/// reader behind it (docs/controller.md). The decision's input is built after the copy is
/// taken, reading the clock; the probe sees whether the lock was still held then.
#[tokio::test(start_paused = true)]
async fn a_pass_and_its_validation_decide_without_holding_the_state_lock() {
    use karpenter_controller::context::Context;
    use karpenter_controller::disruption::pass;
    use karpenter_controller::settings::Settings;
    use std::sync::atomic::Ordering::Relaxed;

    let cluster = SimCluster::new().await;
    put_pool(
        &cluster,
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}),
    );
    let probe = Arc::new(LockProbe {
        clock: cluster.clock.clone(),
        state: std::sync::OnceLock::new(),
        reads: Default::default(),
        reads_under_lock: Default::default(),
    });
    let (ctx, _batcher) = Context::new(
        cluster.client.clone(),
        Settings {
            disable_leader_election: true,
            ..Settings::default()
        },
        Arc::new(cluster.provider.clone()),
        Arc::new(CoreScheduler),
        probe.clone(),
    );
    let _ = probe.state.set(ctx.state.clone());

    let types = pass::instance_types(&ctx).await;
    let drift = Default::default();
    let decided = pass::decide_now(&ctx, &types, &drift);
    let command = Command {
        reason: DisruptionReason::Empty,
        method: Method::Emptiness,
        candidates: Vec::new(),
        replacements: Vec::new(),
        savings_per_hour: 0.0,
        balanced_scores: Vec::new(),
    };
    let _ = pass::validate_now(&ctx, &types, &drift, &command);
    assert!(probe.reads.load(Relaxed) >= 2, "{decided:?}");
    assert_eq!(
        probe.reads_under_lock.load(Relaxed),
        0,
        "a decision's input was built while the state's lock was held"
    );
}
