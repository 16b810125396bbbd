//! Upstream `test/suites/regression/expiration_test.go` (kwok's `expireAfter: 30s`).

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::drift::{eventually_gone, eventually_nodeclaims, eventually_nodes, patch_nodepool};
use super::env::{DISCOVERY_LABEL, Env, deployment};
use crate::real_cluster::objects::nodes;
use crate::real_cluster::{DISRUPT, LAUNCH, eventually};

/// Both tests: the node expires after 30 s and is replaced by a single node holding all the pods.
/// Drift is blocked by budget (removing `expireAfter` would drift the node); the NodePool's
/// `expireAfter` is removed once the first NodeClaim exists, so the replacement never expires;
/// the limit is then set to 0 CPU so that no further NodeClaims are made.
async fn expires_and_is_replaced(test: &str, replicas: i32, with_pdb: bool) {
    // Upstream's "single node" is its greedy plan: 5 pods with no requests on one t4g.small
    // ($0.0168/h); the default packs them on two t4g.nano for half that (docs/conformance.md).
    let options = crate::real_cluster::options().env("PACKING_POLICY", "Upstream");
    let Some(env) = Env::start(test, options).await else {
        return;
    };
    let mut pool = env.default_nodepool();
    // upstream `Disruption{Budgets: ...}`: the other fields at their zero values
    // (`consolidateAfter: Never`, the policy defaulted).
    pool["spec"]["disruption"] = json!({
        "consolidateAfter": "Never",
        "budgets": [{"nodes": "0", "reasons": ["Drifted"]}]
    });
    pool["spec"]["template"]["spec"]["expireAfter"] = json!("30s");
    let dep = deployment("my-app", replicas, json!({}));
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "my-app", "labels": {DISCOVERY_LABEL: "owned"}},
        "spec": {"minAvailable": replicas - 1, "selector": {"matchLabels": {"app": "my-app"}}}
    });
    let mut objects = vec![env.default_nodeclass(), pool];
    if with_pdb {
        objects.push(pdb);
    }
    objects.push(dep);
    env.apply(&objects.iter().collect::<Vec<_>>()).await;

    let claim = eventually_nodeclaims(&env, 1, LAUNCH).await.remove(0);
    // Expiration off, so that the replacement does not expire.
    patch_nodepool(
        &env,
        json!({"spec": {"template": {"spec": {"expireAfter": "Never"}}}}),
    )
    .await;
    let node = eventually_nodes(&env, 1, LAUNCH).await.remove(0);
    env.eventually_healthy_pods("app=my-app", replicas as usize, LAUNCH)
        .await;
    // `env.Monitor.Reset()`, then one node created since: the replacement of the expiring node.
    let at_reset = vec![node.name_any()];
    let started = tokio::time::Instant::now();
    created_since(&env, &at_reset, DISRUPT).await;
    eprintln!(
        "replacement created {:?} after the pods were healthy",
        started.elapsed()
    );
    // No more NodeClaims from here on: nothing leaks into the next test.
    patch_nodepool(&env, json!({"spec": {"limits": {"cpu": "0"}}})).await;

    // Once expired and drained, the node is gone.
    eventually_gone(
        &Api::<NodeClaim>::all(env.client.clone()),
        &[claim.name_any()],
        DISRUPT,
    )
    .await;
    eventually_gone(
        &Api::<Node>::all(env.client.clone()),
        &[node.name_any()],
        DISRUPT,
    )
    .await;

    eventually_nodeclaims(&env, 1, LAUNCH).await;
    created_since(&env, &at_reset, LAUNCH).await;
    env.eventually_healthy_pods("app=my-app", replicas as usize, LAUNCH)
        .await;
}

/// "should expire the node after the expiration is reached"
#[tokio::test]
async fn should_expire_the_node_after_the_expiration_is_reached() {
    expires_and_is_replaced("expiration-expire", 1, false).await;
}

/// "should replace expired node with a single node and schedule all pods"
#[tokio::test]
async fn should_replace_expired_node_with_a_single_node_and_schedule_all_pods() {
    expires_and_is_replaced("expiration-replace", 5, true).await;
}

/// `EventuallyExpectCreatedNodeCount("==", 1)` after `Monitor.Reset()`: exactly one Node that was
/// not there at the reset.
async fn created_since(env: &Env, at_reset: &[String], limit: std::time::Duration) {
    let client = env.client.clone();
    eventually("one node created since the reset", limit, || {
        let client = client.clone();
        async move {
            let created = nodes(&client)
                .await
                .iter()
                .filter(|n| !at_reset.contains(&n.name_any()))
                .count();
            (created == 1).then_some(())
        }
    })
    .await
    .unwrap();
}
