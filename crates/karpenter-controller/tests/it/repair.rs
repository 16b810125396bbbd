//! Node repair (`--feature-gates NodeRepair=true`, upstream `node.health`) and the `Drifted`
//! NodeClaim condition on the test API server with the sim provider, in virtual time.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): virtual time: repair's 30-minute tolerations.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodePool;
use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_DRIFTED};
use karpenter_controller::Settings;
use karpenter_controller::events::REASON_NODE_REPAIR_BLOCKED;
use karpenter_controller::provisioning::CoreScheduler;
use karpenter_core::feature_gates::FeatureGates;
use serde_json::{Value, json};

use crate::sim_cluster::SimCluster;

/// The `default` NodePool: never consolidates (so idle nodes stay), these extra requirements.
fn put_pool(cluster: &SimCluster, extra_requirements: Value, budgets: Value) {
    cluster.put_default_nodeclass();
    let mut requirements = vec![json!(
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    )];
    if let Value::Array(extra) = extra_requirements {
        requirements.extend(extra);
    }
    cluster
        .server
        .put_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "uid": "pool-uid", "generation": 1},
            "spec": {
                "template": {"spec": {
                    "requirements": requirements,
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h"
                }},
                "disruption": {"consolidateAfter": "Never", "budgets": budgets}
            }
        }))
        .unwrap();
}

fn repair_settings() -> Settings {
    Settings {
        feature_gates: FeatureGates {
            node_repair: true,
            ..FeatureGates::default()
        },
        ..Settings::default()
    }
}

async fn ready_node(cluster: &SimCluster, name: &str) -> String {
    cluster.create_nodeclaim(name, json!({"taints": []})).await;
    cluster.ready_nodeclaim(name).await.1
}

/// Waits until the Node's Ready condition is no longer True; returns when it turned.
async fn not_ready(cluster: &SimCluster, node: &str) -> jiff::Timestamp {
    cluster
        .eventually(
            &format!("{node} NotReady"),
            Duration::from_secs(120),
            || {
                let node = cluster.node(node)?;
                let ready = karpenter_core::node::node_ready_condition(&node)?;
                (ready.status != "True")
                    .then(|| ready.last_transition_time.as_ref().map(|t| t.0))
                    .flatten()
            },
        )
        .await
}

#[tokio::test(start_paused = true)]
async fn a_node_not_ready_for_thirty_minutes_is_replaced_forcefully() {
    let cluster = SimCluster::new().await;
    put_pool(&cluster, json!([]), json!([{"nodes": "0"}]));
    let controller = cluster
        .start_controller_with_settings(Arc::new(CoreScheduler), repair_settings())
        .await;
    let node = ready_node(&cluster, "sick").await;
    cluster.kubelet.stop_heartbeats(&node);
    let since = not_ready(&cluster, &node).await;

    // Tolerated for 30 minutes (a zero budget does not bind repair).
    let until_due = since
        .checked_add(jiff::SignedDuration::from_mins(29))
        .unwrap()
        .duration_since(cluster.now());
    tokio::time::sleep(until_due.unsigned_abs()).await;
    assert!(
        cluster
            .nodeclaim("sick")
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "repaired before the toleration ran out"
    );
    let deleted_at = cluster
        .eventually(
            "nodeclaim deleted",
            Duration::from_secs(3 * 60),
            || match cluster.nodeclaim("sick") {
                None => Some(cluster.now()),
                Some(c) => c.metadata.deletion_timestamp.map(|t| t.0),
            },
        )
        .await;
    assert!(
        deleted_at.duration_since(since) >= jiff::SignedDuration::from_mins(30),
        "deleted {:?} after turning NotReady",
        deleted_at.duration_since(since)
    );
    cluster
        .eventually("node and nodeclaim gone", Duration::from_secs(120), || {
            (cluster.nodeclaim("sick").is_none() && cluster.node(&node).is_none()).then_some(())
        })
        .await;
    let metrics = controller.ctx.metrics.encode();
    assert!(
        metrics.contains(
            r#"karpenter_nodeclaims_disrupted_total{reason="unhealthy",nodepool="default",capacity_type="on-demand",consolidation_policy="",termination_mode="graceful"} 1"#
        ),
        "{metrics}"
    );
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn repair_stops_when_more_than_twenty_percent_of_the_pool_is_unhealthy() {
    let cluster = SimCluster::new().await;
    put_pool(&cluster, json!([]), json!([{"nodes": "10%"}]));
    let controller = cluster
        .start_controller_with_settings(Arc::new(CoreScheduler), repair_settings())
        .await;
    let mut nodes = Vec::new();
    for i in 0..4 {
        nodes.push(ready_node(&cluster, &format!("n{i}")).await);
    }
    for node in &nodes[..2] {
        cluster.kubelet.stop_heartbeats(node);
    }
    for node in &nodes[..2] {
        not_ready(&cluster, node).await;
    }
    tokio::time::sleep(Duration::from_secs(40 * 60)).await;
    for i in 0..4 {
        let claim = cluster.nodeclaim(&format!("n{i}")).unwrap();
        assert!(claim.metadata.deletion_timestamp.is_none(), "n{i} deleted");
    }
    let blocked = controller
        .ctx
        .events
        .with_reason(REASON_NODE_REPAIR_BLOCKED);
    let on_pool: Vec<_> = blocked
        .iter()
        .filter(|e| e.involved.kind.as_deref() == Some("NodePool"))
        .collect();
    assert!(!on_pool.is_empty(), "{blocked:?}");
    assert!(
        on_pool[0].message.contains("more than 20%") && on_pool[0].message.contains("2 of 4"),
        "{}",
        on_pool[0].message
    );
    for node in &nodes[..2] {
        assert!(
            blocked
                .iter()
                .any(|e| e.involved.kind.as_deref() == Some("Node")
                    && e.involved.name.as_deref() == Some(node.as_str())),
            "{node}: {blocked:?}"
        );
    }
    // One node comes back: 1 of 4 is within the cap, the other is repaired at the next look
    // (at most 5 minutes later).
    cluster.kubelet.resume_heartbeats(&nodes[1]);
    cluster
        .eventually("n0 repaired", Duration::from_secs(7 * 60), || {
            cluster
                .nodeclaim("n0")
                .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
                .then_some(())
        })
        .await;
    assert!(
        cluster
            .nodeclaim("n1")
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none())
    );
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_the_gate_an_unhealthy_node_stays() {
    let cluster = SimCluster::new().await;
    put_pool(&cluster, json!([]), json!([{"nodes": "10%"}]));
    let controller = cluster.start_controller_with(Arc::new(CoreScheduler)).await;
    let node = ready_node(&cluster, "sick").await;
    cluster.kubelet.stop_heartbeats(&node);
    not_ready(&cluster, &node).await;
    tokio::time::sleep(Duration::from_secs(45 * 60)).await;
    assert!(
        cluster
            .nodeclaim("sick")
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none())
    );
    assert!(cluster.node(&node).is_some());
    controller.stop().await;
    cluster.shutdown().await;
}

fn drifted(cluster: &SimCluster, name: &str) -> Option<(String, String)> {
    let claim = cluster.nodeclaim(name)?;
    let condition = claim
        .status?
        .condition(NODECLAIM_CONDITION_DRIFTED)?
        .clone();
    Some((condition.status, condition.reason.unwrap_or_default()))
}

#[tokio::test(start_paused = true)]
async fn the_drifted_condition_follows_the_nodepool_requirements() {
    let cluster = SimCluster::new().await;
    // A zero budget: the node stays, so the condition can be watched going both ways.
    put_pool(&cluster, json!([]), json!([{"nodes": "0"}]));
    let controller = cluster.start_controller_with(Arc::new(CoreScheduler)).await;
    let node = ready_node(&cluster, "a").await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(drifted(&cluster, "a"), None, "not drifted yet");

    // The helper's NodeClaims carry `team: a`; the pool now wants team b.
    put_pool(
        &cluster,
        json!([{"key": "team", "operator": "In", "values": ["b"]}]),
        json!([{"nodes": "0"}]),
    );
    let drifted_at = cluster
        .eventually("Drifted=True", Duration::from_secs(60), || {
            (drifted(&cluster, "a")
                == Some(("True".to_string(), "RequirementsDrifted".to_string())))
            .then(|| cluster.now())
        })
        .await;
    // Written once: the transition time stays while the reason holds.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let condition = cluster
        .nodeclaim("a")
        .and_then(|c| c.status)
        .and_then(|s| s.condition(NODECLAIM_CONDITION_DRIFTED).cloned())
        .unwrap();
    let transition: jiff::Timestamp = condition.last_transition_time.unwrap().parse().unwrap();
    assert!(transition <= drifted_at, "{transition} > {drifted_at}");
    assert!(
        cluster.node(&node).is_some(),
        "the zero budget holds the node"
    );

    // Back to the original requirements: the condition goes.
    put_pool(&cluster, json!([]), json!([{"nodes": "0"}]));
    cluster
        .eventually("Drifted removed", Duration::from_secs(60), || {
            drifted(&cluster, "a").is_none().then_some(())
        })
        .await;
    assert!(cluster.server.get::<NodePool>(None, "default").is_some());
    assert!(cluster.server.get::<Node>(None, &node).is_some());
    controller.stop().await;
    cluster.shutdown().await;
}
