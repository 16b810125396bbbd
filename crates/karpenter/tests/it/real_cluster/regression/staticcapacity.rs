//! Upstream `test/suites/regression/staticcapacity_test.go`: `StaticCapacity`, NodePools with
//! `spec.replicas` (static capacity) on the real control plane with the sim provider.
//!
//! Upstream adds an instance-type requirement only for its KWOK NodeClass; the sim provider reads
//! an EC2NodeClass, so the NodePools keep the default requirements, as upstream's do off KWOK.
//! Upstream's `Consistently` windows of minutes are shortened (each says to what and why).

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::env::{DISCOVERY_LABEL, Env};
use super::nodeclaim::{
    consistently_nodeclaims_at_most, eventually_initialized_nodes, eventually_nodeclaims,
    eventually_nodeclaims_ready, expect_template_details_on_node,
};
use crate::real_cluster::{DISRUPT, LAUNCH, SOON, eventually};

/// The default NodePool with `replicas` (and `extra` merged into its spec).
fn static_nodepool(env: &Env, replicas: i64) -> Value {
    let mut pool = env.default_nodepool();
    pool["spec"]["replicas"] = json!(replicas);
    pool
}

async fn patch_nodepool(client: &Client, name: &str, patch: Value) {
    Api::<karpenter_api::NodePool>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

fn names<K: ResourceExt>(objects: &[K]) -> Vec<String> {
    objects.iter().map(ResourceExt::name_any).collect()
}

/// Waits for `n` initialized nodes and `n` Ready NodeClaims, returning the nodes.
async fn eventually_static_nodes(client: &Client, n: usize, limit: Duration) -> Vec<Node> {
    let nodes = eventually_initialized_nodes(client, n, limit).await;
    let claims = eventually_nodeclaims(client, n, SOON).await;
    eventually_nodeclaims_ready(client, &names(&claims), SOON).await;
    nodes
}

// Context "Provisioning" (BeforeEach: replicas 1).

/// "should create static NodeClaims to meet desired replicas"
#[tokio::test]
async fn should_create_static_nodeclaims_to_meet_desired_replicas() {
    let Some(env) = Env::start("static-replicas", crate::real_cluster::options()).await else {
        return;
    };
    env.apply(&[&env.default_nodeclass(), &static_nodepool(&env, 10)])
        .await;
    eventually_static_nodes(&env.client, 10, LAUNCH).await;
    patch_nodepool(
        &env.client,
        &env.nodepool,
        json!({"spec": {"replicas": 15}}),
    )
    .await;
    let nodes = eventually_static_nodes(&env.client, 15, LAUNCH).await;
    for node in &nodes {
        assert_eq!(
            node.labels().get("karpenter.sh/nodepool"),
            Some(&env.nodepool),
            "{}",
            node.name_any()
        );
    }
}

/// "should create static NodeClaim propagating all the NodePool spec details"
#[tokio::test]
async fn should_create_static_nodeclaim_propagating_all_the_nodepool_spec_details() {
    let Some(env) = Env::start("static-propagate", crate::real_cluster::options()).await else {
        return;
    };
    let mut pool = static_nodepool(&env, 1);
    pool["spec"]["template"]["metadata"] = json!({
        "annotations": {"custom-annotation": "custom-value"},
        "labels": {"custom-label": "custom-value"}
    });
    pool["spec"]["template"]["spec"]["taints"] = json!([
        {"key": "custom-taint", "effect": "NoSchedule", "value": "custom-value"},
        {"key": "other-custom-taint", "effect": "NoExecute", "value": "other-custom-value"}
    ]);
    env.apply(&[&env.default_nodeclass(), &pool]).await;
    let node = eventually_initialized_nodes(&env.client, 1, LAUNCH)
        .await
        .remove(0);
    expect_template_details_on_node(&node);
    let claims = eventually_nodeclaims(&env.client, 1, SOON).await;
    eventually_nodeclaims_ready(&env.client, &names(&claims), SOON).await;
}

/// "should respect node limits when provisioning"
///
/// Upstream watches the count for 5 minutes; 20 s here covers the controller's passes (one
/// per NodePool or NodeClaim change, and a re-check every 10 s).
#[tokio::test]
async fn should_respect_node_limits_when_provisioning() {
    let Some(env) = Env::start("static-limits", crate::real_cluster::options()).await else {
        return;
    };
    let mut pool = static_nodepool(&env, 10);
    pool["spec"]["limits"] = json!({"nodes": "5"});
    env.apply(&[&env.default_nodeclass(), &pool]).await;
    consistently_nodeclaims_at_most(&env.client, 5, Duration::from_secs(20)).await;
    let claims = eventually_nodeclaims(&env.client, 5, LAUNCH).await;
    eventually_nodeclaims_ready(&env.client, &names(&claims), LAUNCH).await;
}

// Context "Deprovisioning" (BeforeEach: replicas 3, NodeClass and NodePool created).

async fn deprovisioning_env(test: &str) -> Option<Env> {
    let env = Env::start(test, crate::real_cluster::options()).await?;
    env.apply(&[&env.default_nodeclass(), &static_nodepool(&env, 3)])
        .await;
    Some(env)
}

/// "should scale down to zero"
#[tokio::test]
async fn should_scale_down_to_zero() {
    let Some(env) = deprovisioning_env("static-to-zero").await else {
        return;
    };
    eventually_static_nodes(&env.client, 3, LAUNCH).await;
    patch_nodepool(&env.client, &env.nodepool, json!({"spec": {"replicas": 0}})).await;
    eventually_initialized_nodes(&env.client, 0, DISRUPT).await;
    eventually_nodeclaims(&env.client, 0, DISRUPT).await;
}

/// A bare pod (upstream `test.Pod`) bound to `node` by name, optionally do-not-disrupt.
fn pod_on(name: &str, node: &str, do_not_disrupt: bool) -> Value {
    let annotations = if do_not_disrupt {
        json!({"karpenter.sh/do-not-disrupt": "true"})
    } else {
        json!({})
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {DISCOVERY_LABEL: "owned"}, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]
        }
    })
}

/// "should terminate empty nodes first, then nodes with least cost, then respect do-not-disrupt"
#[tokio::test]
async fn should_terminate_empty_nodes_first_then_nodes_with_least_cost_then_respect_do_not_disrupt()
{
    let Some(env) = deprovisioning_env("static-order").await else {
        return;
    };
    patch_nodepool(&env.client, &env.nodepool, json!({"spec": {"replicas": 5}})).await;
    let nodes = names(&eventually_static_nodes(&env.client, 5, LAUNCH).await);
    env.apply(&[
        &pod_on("pod-0", &nodes[0], false),
        &pod_on("pod-1", &nodes[1], false),
        &pod_on("do-not-disrupt", &nodes[2], true),
    ])
    .await;
    env.eventually_healthy_pods(DISCOVERY_LABEL, 3, SOON).await;

    patch_nodepool(&env.client, &env.nodepool, json!({"spec": {"replicas": 3}})).await;
    let remaining = names(&eventually_initialized_nodes(&env.client, 3, DISRUPT).await);
    eventually_nodeclaims(&env.client, 3, SOON).await;
    // The nodes with pods and do-not-disrupt remain.
    for kept in &nodes[..3] {
        assert!(remaining.contains(kept), "{kept} not among {remaining:?}");
    }

    patch_nodepool(&env.client, &env.nodepool, json!({"spec": {"replicas": 1}})).await;
    let last = names(&eventually_initialized_nodes(&env.client, 1, DISRUPT).await);
    eventually_nodeclaims(&env.client, 1, SOON).await;
    // The node with the do-not-disrupt pod is the one left.
    assert_eq!(last, [nodes[2].clone()]);
}

/// "should handle graceful pod eviction during scale down"
#[tokio::test]
async fn should_handle_graceful_pod_eviction_during_scale_down() {
    let Some(env) = deprovisioning_env("static-eviction").await else {
        return;
    };
    eventually_static_nodes(&env.client, 3, LAUNCH).await;
    // Upstream's Deployment: 2 replicas, no requests (in the test's namespace, not `default`).
    let mut deployment = super::env::deployment("test-deployment", 2, json!({}));
    deployment["spec"]["selector"] = json!({"matchLabels": {"app": "test"}});
    deployment["spec"]["template"]["metadata"]["labels"]["app"] = json!("test");
    env.apply(&[&deployment]).await;
    env.eventually_healthy_pods("app=test", 2, SOON).await;

    patch_nodepool(&env.client, &env.nodepool, json!({"spec": {"replicas": 1}})).await;
    eventually_initialized_nodes(&env.client, 1, DISRUPT).await;
    eventually_nodeclaims(&env.client, 1, SOON).await;
    env.eventually_healthy_pods("app=test", 2, LAUNCH).await;
}

// Context "Drift" (BeforeEach: replicas 10, NodeClass and NodePool created).

async fn drift_env(test: &str) -> Option<(Env, Vec<NodeClaim>)> {
    let env = Env::start(test, crate::real_cluster::options()).await?;
    env.apply(&[&env.default_nodeclass(), &static_nodepool(&env, 10)])
        .await;
    eventually_initialized_nodes(&env.client, 10, LAUNCH).await;
    let claims = eventually_nodeclaims(&env.client, 10, SOON).await;
    eventually_nodeclaims_ready(&env.client, &names(&claims), SOON).await;
    Some((env, claims))
}

/// `EventuallyExpectDrifted`: each NodeClaim has `Drifted=True`.
async fn eventually_drifted(client: &Client, claims: &[NodeClaim]) {
    let api = Api::<NodeClaim>::all(client.clone());
    let names = names(claims);
    // A NodeClaim seen drifted and then replaced (gone) still counts.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::<String>::new()));
    eventually(&format!("nodeclaims {names:?} Drifted"), DISRUPT, || {
        let (api, names, seen) = (api.clone(), names.clone(), seen.clone());
        async move {
            for name in &names {
                if seen.lock().unwrap().contains(name) {
                    continue;
                }
                let claim = api.get(name).await.ok()?;
                if !crate::real_cluster::objects::condition_true(&claim, "Drifted") {
                    return None;
                }
                seen.lock().unwrap().insert(name.clone());
            }
            Some(())
        }
    })
    .await
    .unwrap();
}

/// `ConsistentlyExpectDisruptionsUntilNoneLeft(nodesAtStart, maxNodesDisrupting, timeout)`: until
/// no node carries the `karpenter.sh/disrupted` taint, never more than `at_start +
/// max_disrupting` NodeClaims (not terminating) or Nodes, nor more than `max_disrupting` tainted
/// Nodes. Polled every 5 s, as upstream.
async fn consistently_disruptions_until_none_left(
    client: &Client,
    at_start: usize,
    max_disrupting: usize,
    timeout: Duration,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let claims = crate::real_cluster::objects::nodeclaims(client).await;
        let mut removed = BTreeSet::new();
        let claims: Vec<&NodeClaim> = claims
            .iter()
            .filter(|c| {
                let terminating =
                    crate::real_cluster::objects::condition_true(c, "InstanceTerminating");
                if terminating {
                    removed.insert(
                        c.status
                            .as_ref()
                            .and_then(|s| s.provider_id.clone())
                            .unwrap_or_default(),
                    );
                }
                !terminating
            })
            .collect();
        assert!(
            claims.len() <= at_start + max_disrupting,
            "too many nodeclaims: {} > {}",
            claims.len(),
            at_start + max_disrupting
        );
        let nodes: Vec<Node> = crate::real_cluster::objects::nodes(client)
            .await
            .into_iter()
            .filter(|n| {
                !removed.contains(
                    n.spec
                        .as_ref()
                        .and_then(|s| s.provider_id.as_deref())
                        .unwrap_or_default(),
                )
            })
            .collect();
        assert!(
            nodes.len() <= at_start + max_disrupting,
            "too many nodes: {} > {}",
            nodes.len(),
            at_start + max_disrupting
        );
        let tainted = nodes
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|taints| {
                        taints
                            .iter()
                            .any(|t| t.key == "karpenter.sh/disrupted" && t.effect == "NoSchedule")
                    })
            })
            .count();
        assert!(
            tainted <= max_disrupting,
            "too many disruptions: {tainted} > {max_disrupting}"
        );
        if tainted == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {tainted} node(s) disrupting after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Every one of `originals` is gone and `n` other NodeClaims are Ready: the drift replaced all.
async fn eventually_all_replaced(client: &Client, originals: &[NodeClaim], n: usize) {
    let originals = names(originals);
    eventually("every drifted nodeclaim replaced", DISRUPT, || {
        let client = client.clone();
        let originals = originals.clone();
        async move {
            let claims = crate::real_cluster::objects::nodeclaims(&client).await;
            let ready = claims
                .iter()
                .filter(|c| crate::real_cluster::objects::condition_true(c, "Ready"))
                .count();
            (claims.iter().all(|c| !originals.contains(&c.name_any()))
                && claims.len() == n
                && ready == n)
                .then_some(())
        }
    })
    .await
    .unwrap();
}

/// "should replace drifted nodes"
#[tokio::test]
async fn should_replace_drifted_nodes() {
    let Some((env, claims)) = drift_env("static-drift").await else {
        return;
    };
    patch_nodepool(
        &env.client,
        &env.nodepool,
        json!({"spec": {"template": {"metadata": {"annotations": {"test": "annotation"}}}}}),
    )
    .await;
    eventually_drifted(&env.client, &claims).await;
    consistently_disruptions_until_none_left(&env.client, 10, 10, DISRUPT).await;
    // Upstream stops at "no node disrupting"; the replacement's end is checked too.
    eventually_all_replaced(&env.client, &claims, 10).await;
}

/// "should handle drift with node limits when budget allows"
#[tokio::test]
async fn should_handle_drift_with_node_limits_when_budget_allows() {
    let Some((env, claims)) = drift_env("static-drift-limit").await else {
        return;
    };
    // A budget of 4 nodes; the node limit of 12 allows 2 drifts at a time.
    patch_nodepool(
        &env.client,
        &env.nodepool,
        json!({"spec": {
            "disruption": {"budgets": [{"nodes": "4"}]},
            "limits": {"nodes": "12"},
            "template": {"metadata": {"annotations": {"test": "annotation"}}}
        }}),
    )
    .await;
    eventually_drifted(&env.client, &claims).await;
    consistently_disruptions_until_none_left(&env.client, 10, 2, Duration::from_secs(300)).await;
    eventually_all_replaced(&env.client, &claims, 10).await;
}

/// "should handle drift with node limits when budget restricts"
#[tokio::test]
async fn should_handle_drift_with_node_limits_when_budget_restricts() {
    let Some((env, claims)) = drift_env("static-drift-budget").await else {
        return;
    };
    // A budget of 2 nodes; the node limit of 15 would allow 5 drifts at a time.
    patch_nodepool(
        &env.client,
        &env.nodepool,
        json!({"spec": {
            "disruption": {"budgets": [{"nodes": "2"}]},
            "limits": {"nodes": "15"},
            "template": {"metadata": {"annotations": {"test": "annotation"}}}
        }}),
    )
    .await;
    eventually_drifted(&env.client, &claims).await;
    consistently_disruptions_until_none_left(&env.client, 10, 2, Duration::from_secs(300)).await;
    eventually_all_replaced(&env.client, &claims, 10).await;
}

// Context "Dynamic NodeClaim Interaction".

/// "should provision dynamic nodeclaims when static nodeclaims cant satisfy pod constraints"
#[tokio::test]
async fn should_provision_dynamic_nodeclaims_when_static_nodeclaims_cant_satisfy_pod_constraints() {
    let Some(env) = Env::start("static-dynamic", crate::real_cluster::options()).await else {
        return;
    };
    // The dynamic pool: a copy of the default one before the static changes.
    let mut dynamic = env.default_nodepool();
    dynamic["metadata"]["name"] = json!("dynamic-nodepool");
    let mut fixed = static_nodepool(&env, 2);
    fixed["spec"]["template"]["spec"]["taints"] = json!([{"key": "static", "effect": "NoExecute"}]);
    env.apply(&[&env.default_nodeclass(), &fixed, &dynamic])
        .await;

    eventually_initialized_nodes(&env.client, 2, LAUNCH).await;
    let static_claims = eventually_nodeclaims(&env.client, 2, SOON).await;
    eventually_nodeclaims_ready(&env.client, &names(&static_claims), SOON).await;
    for claim in &static_claims {
        assert_eq!(
            claim.labels().get("karpenter.sh/nodepool"),
            Some(&env.nodepool)
        );
    }

    // Three pods that must each have a node of their own (hostname spread and anti-affinity).
    let selector = json!({"matchLabels": {"app": "large-app"}});
    for i in 0..3 {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("large-app-{i}"),
                "labels": {"app": "large-app", DISCOVERY_LABEL: "owned"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true"}
            },
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}],
                "topologySpreadConstraints": [{
                    "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector
                }],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "topologyKey": "kubernetes.io/hostname", "labelSelector": selector
                }]}}
            }
        });
        env.apply(&[&pod]).await;
    }
    env.eventually_healthy_pods("app=large-app", 3, LAUNCH)
        .await;

    eventually_initialized_nodes(&env.client, 5, LAUNCH).await;
    let all = eventually_nodeclaims(&env.client, 5, SOON).await;
    let in_pool = |pool: &str| {
        all.iter()
            .filter(|c| c.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some(pool))
            .count()
    };
    assert_eq!(in_pool("dynamic-nodepool"), 3);
    assert_eq!(in_pool(&env.nodepool), 2);
}

// Context "Edge Cases".

/// "should not go over limit during concurrent changes/executions"
///
/// Upstream watches the count for 3 minutes and then waits up to 10 for the end state; here the
/// watch runs until the end state (4 replaced nodes), which is when a burst past the limit could
/// still happen.
#[tokio::test]
async fn should_not_go_over_limit_during_concurrent_changes_executions() {
    let Some(env) = Env::start("static-concurrent", crate::real_cluster::options()).await else {
        return;
    };
    let mut pool = static_nodepool(&env, 3);
    pool["spec"]["limits"] = json!({"nodes": "5"});
    env.apply(&[&env.default_nodeclass(), &pool]).await;
    eventually_initialized_nodes(&env.client, 3, LAUNCH).await;
    let claims = eventually_nodeclaims(&env.client, 3, SOON).await;
    eventually_nodeclaims_ready(&env.client, &names(&claims), SOON).await;

    // Drift (a template annotation) and a scale-up to 4, in one update.
    patch_nodepool(
        &env.client,
        &env.nodepool,
        json!({"spec": {
            "replicas": 4,
            "template": {"metadata": {"annotations": {"drift-trigger": "test-value"}}}
        }}),
    )
    .await;
    eventually_drifted(&env.client, &claims).await;

    // Never more than 5 NodeClaims, until 4 initialized nodes all carry the new annotation.
    let deadline = tokio::time::Instant::now() + DISRUPT;
    loop {
        let count = crate::real_cluster::objects::nodeclaims(&env.client)
            .await
            .len();
        assert!(count <= 5, "{count} nodeclaims, over the node limit of 5");
        let nodes = super::nodeclaim::initialized_nodes(&env.client).await;
        if nodes.len() == 4
            && nodes.iter().all(|n| {
                n.annotations().get("drift-trigger").map(String::as_str) == Some("test-value")
            })
            && crate::real_cluster::objects::nodeclaims(&env.client)
                .await
                .len()
                == 4
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not 4 replaced nodes after {DISRUPT:?}: {:?}",
            names(&nodes)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let final_claims = eventually_nodeclaims(&env.client, 4, SOON).await;
    eventually_nodeclaims_ready(&env.client, &names(&final_claims), SOON).await;
}

/// "should handle NodePool deletion gracefully"
///
/// Upstream watches the count for 30 s after the deletion; 15 s here (the NodeClaims go with
/// their NodePool through the garbage collector within seconds, and a static pass runs at least
/// every 10 s).
#[tokio::test]
async fn should_handle_nodepool_deletion_gracefully() {
    let Some(env) = Env::start("static-delete-pool", crate::real_cluster::options()).await else {
        return;
    };
    env.apply(&[&env.default_nodeclass(), &static_nodepool(&env, 3)])
        .await;
    eventually_static_nodes(&env.client, 3, LAUNCH).await;
    Api::<karpenter_api::NodePool>::all(env.client.clone())
        .delete(&env.nodepool, &DeleteParams::default())
        .await
        .unwrap();
    consistently_nodeclaims_at_most(&env.client, 3, Duration::from_secs(15)).await;
    eventually_initialized_nodes(&env.client, 0, DISRUPT).await;
    eventually_nodeclaims(&env.client, 0, DISRUPT).await;
}
