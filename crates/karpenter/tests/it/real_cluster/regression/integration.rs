//! Upstream `test/suites/regression/integration_test.go`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::env::{DISCOVERY_LABEL, Env};
use crate::real_cluster::objects::{nodes, pods, running};
use crate::real_cluster::{DISRUPT, LAUNCH, eventually, options};

// ---------------------------------------------------------------------------------------------
// Describe("DaemonSet")

/// upstream's `BeforeEach` of `Describe("DaemonSet")`: consolidation `WhenEmptyOrUnderutilized`
/// after 0s, the priority class, a DaemonSet whose container only limits memory (1Gi) at that
/// priority, and one `large-app` pod requesting 4 bytes of memory.
struct DaemonSetCase {
    nodepool: Value,
    priorityclass: Value,
    daemonset: Value,
    deployment: Value,
}

fn daemonset_case(env: &Env) -> DaemonSetCase {
    let mut nodepool = env.default_nodepool();
    nodepool["spec"]["disruption"]["consolidationPolicy"] = json!("WhenEmptyOrUnderutilized");
    nodepool["spec"]["disruption"]["consolidateAfter"] = json!("0s");
    let priorityclass = json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "high-priority-daemonsets"},
        "value": 10000000,
        "globalDefault": false,
        "description": "This priority class should be used for daemonsets."
    });
    let daemonset = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "daemonset", "labels": {DISCOVERY_LABEL: "owned"}},
        "spec": {
            "selector": {"matchLabels": {"app": "daemonset"}},
            "template": {
                "metadata": {"labels": {"app": "daemonset", DISCOVERY_LABEL: "owned"}},
                "spec": {
                    "priorityClassName": "high-priority-daemonsets",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "app",
                        "image": "registry.k8s.io/pause:3.9",
                        "resources": {"limits": {"memory": "1Gi"}}
                    }]
                }
            }
        }
    });
    let deployment = super::env::deployment("large-app", 1, json!({"memory": "4"}));
    DaemonSetCase {
        nodepool,
        priorityclass,
        daemonset,
        deployment,
    }
}

fn limitrange(item: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": "limitrange"},
        "spec": {"limits": [item]}
    })
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// The shared body of the two LimitRange specs: eventually a single node with both the
/// deployment's pod and the daemonset's pod running on it.
async fn expect_one_node_with_both_pods(test: &str, limit_item: Value) {
    let Some(env) = Env::start(test, options()).await else {
        return;
    };
    let case = daemonset_case(&env);
    env.apply(&[
        &env.default_nodeclass(),
        &case.nodepool,
        &limitrange(limit_item),
        &case.priorityclass,
        &case.daemonset,
        &case.deployment,
    ])
    .await;
    let (client, ns) = (env.client.clone(), env.ns.clone());
    let started = Instant::now();
    let result = eventually("a single node running the deployment and daemonset pods", LAUNCH, || {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            let nodes = nodes(&client).await;
            let [node] = nodes.as_slice() else {
                return None;
            };
            let deployment: Vec<Pod> = pods(&client, &ns, "app=large-app")
                .await
                .into_iter()
                .filter(running)
                .collect();
            let daemonset: Vec<Pod> = pods(&client, &ns, "app=daemonset")
                .await
                .into_iter()
                .filter(running)
                .collect();
            let ([dep], [ds]) = (deployment.as_slice(), daemonset.as_slice()) else {
                return None;
            };
            (node_of(dep).as_deref() == Some(&node.name_any())
                && node_of(ds).as_deref() == Some(&node.name_any()))
            .then_some(())
        }
    })
    .await;
    let (claims, node_count) = env.counts().await;
    eprintln!(
        "{test}: {claims} NodeClaim(s), {node_count} Node(s) after {:?}",
        started.elapsed()
    );
    result.unwrap();
}

/// upstream "should account for LimitRange Default on daemonSet pods for resources"
#[tokio::test]
async fn should_account_for_limitrange_default_on_daemonset_pods_for_resources() {
    expect_one_node_with_both_pods(
        "integration-limitrange-default",
        json!({"type": "Container", "default": {"cpu": "2", "memory": "1Gi"}}),
    )
    .await;
}

/// upstream "should account for LimitRange DefaultRequest on daemonSet pods for resources"
#[tokio::test]
async fn should_account_for_limitrange_defaultrequest_on_daemonset_pods_for_resources() {
    expect_one_node_with_both_pods(
        "integration-limitrange-defaultrequest",
        json!({"type": "Container", "defaultRequest": {"cpu": "2", "memory": "1Gi"}}),
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Describe("Validation") / Describe("Repair Policy")

/// The options of the repair specs: upstream's suite runs Karpenter with `NodeRepair=true`.
fn repair_options() -> karpenter_envtest::KarpenterOptions {
    options().env("FEATURE_GATES", "NodeRepair=true")
}

/// upstream's `BeforeEach` of "Repair Policy": one `my-app` pod, `do-not-disrupt` so that the
/// node's metadata can be checked before it goes, and a 0 s termination grace period.
fn repair_deployment() -> Value {
    let mut dep = super::env::deployment("my-app", 1, json!({}));
    dep["spec"]["template"]["metadata"]["annotations"] =
        json!({"karpenter.sh/do-not-disrupt": "true"});
    dep
}

/// A Ready condition in `status` whose `lastTransitionTime` is `ago` in the past: upstream's
/// tests backdate it past the provider's toleration (30 minutes for Ready) rather than wait.
fn ready_condition_since(status: &str, ago: Duration) -> Value {
    let since = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::try_from(ago).unwrap())
        .unwrap();
    json!({
        "type": "Ready",
        "status": status,
        "lastTransitionTime": since.to_string(),
        "lastHeartbeatTime": since.to_string(),
    })
}

/// upstream `env.ReplaceNodeConditions(node, cond)` then `env.ExpectStatusUpdated(node)`: the
/// node's conditions of that type are replaced by `condition`, through the status subresource.
async fn replace_node_condition(env: &Env, node: &str, condition: Value) {
    let api: Api<Node> = Api::all(env.client.clone());
    let mut current = api.get(node).await.unwrap();
    let mut status = serde_json::to_value(current.status.take().unwrap_or_default()).unwrap();
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let mut kept: Vec<Value> = conditions
        .into_iter()
        .filter(|c| c["type"] != condition["type"])
        .collect();
    kept.push(condition);
    status["conditions"] = Value::Array(kept);
    current.status = Some(serde_json::from_value(status).unwrap());
    api.replace_status(node, &Default::default(), &current)
        .await
        .unwrap();
}

/// The nodes carrying `karpenter.sh/initialized=true` (upstream
/// `EventuallyExpectInitializedNodeCount`).
async fn initialized_nodes(env: &Env) -> Vec<Node> {
    nodes(&env.client)
        .await
        .into_iter()
        .filter(|n| n.labels().get("karpenter.sh/initialized").map(String::as_str) == Some("true"))
        .collect()
}

/// The body every repair spec shares once its objects exist: the pod healthy on one
/// initialized node, the node annotated `do-not-disrupt` when a spec says so, marked with
/// `condition`, and eventually the pod and the node gone and the pod replaced elsewhere.
async fn expect_unhealthy_node_replaced(env: &Env, condition: Value, node_do_not_disrupt: bool) {
    let started = Instant::now();
    env.eventually_healthy_pods("app=my-app", 1, LAUNCH).await;
    let pod = pods(&env.client, &env.ns, "app=my-app")
        .await
        .into_iter()
        .find(running)
        .unwrap();
    let (_, node_count) = env.counts().await;
    assert_eq!(node_count, 1, "ExpectCreatedNodeCount(==, 1)");
    let client = env.client.clone();
    eventually("1 initialized node", LAUNCH, || {
        let env = &env;
        async move { (initialized_nodes(env).await.len() == 1).then_some(()) }
    })
    .await
    .unwrap();
    let node = node_of(&pod).unwrap();
    if node_do_not_disrupt {
        Api::<Node>::all(client.clone())
            .patch(
                &node,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}})),
            )
            .await
            .unwrap();
    }
    replace_node_condition(env, &node, condition).await;

    let (pod_name, pod_uid) = (pod.name_any(), pod.uid());
    let ns = env.ns.clone();
    eventually("the pod and the unhealthy node not found", DISRUPT, || {
        let (client, ns, node, pod_name, pod_uid) =
            (client.clone(), ns.clone(), node.clone(), pod_name.clone(), pod_uid.clone());
        async move {
            let pod_gone = Api::<Pod>::namespaced(client.clone(), &ns)
                .get_opt(&pod_name)
                .await
                .unwrap()
                .is_none_or(|p| p.uid() != pod_uid);
            let node_gone = Api::<Node>::all(client).get_opt(&node).await.unwrap().is_none();
            (pod_gone && node_gone).then_some(())
        }
    })
    .await
    .unwrap();
    env.eventually_healthy_pods("app=my-app", 1, LAUNCH).await;
    eprintln!("repaired in {:?}", started.elapsed());
}

async fn repair_spec(test: &str, nodepool: impl FnOnce(&mut Value), condition: Value, node_dnd: bool) {
    let Some(env) = Env::start(test, repair_options()).await else {
        return;
    };
    let mut pool = env.default_nodepool();
    nodepool(&mut pool);
    env.apply(&[&env.default_nodeclass(), &pool, &repair_deployment()])
        .await;
    expect_unhealthy_node_replaced(&env, condition, node_dnd).await;
}

/// upstream "Conditions" entry "Node Ready False"
#[tokio::test]
async fn conditions_node_ready_false() {
    repair_spec(
        "integration-repair-ready-false",
        |_| {},
        ready_condition_since("False", Duration::from_secs(31 * 3600)),
        false,
    )
    .await;
}

/// upstream "Conditions" entry "Node Ready Unknown"
#[tokio::test]
async fn conditions_node_ready_unknown() {
    repair_spec(
        "integration-repair-ready-unknown",
        |_| {},
        ready_condition_since("Unknown", Duration::from_secs(31 * 3600)),
        false,
    )
    .await;
}

/// upstream "should ignore disruption budgets"
#[tokio::test]
async fn should_ignore_disruption_budgets() {
    repair_spec(
        "integration-repair-budgets",
        |pool| pool["spec"]["disruption"]["budgets"] = json!([{"nodes": "0"}]),
        ready_condition_since("False", Duration::from_secs(31 * 60)),
        false,
    )
    .await;
}

/// upstream "should ignore do-not-disrupt annotation on node"
#[tokio::test]
async fn should_ignore_do_not_disrupt_annotation_on_node() {
    repair_spec(
        "integration-repair-node-dnd",
        |_| {},
        ready_condition_since("False", Duration::from_secs(31 * 60)),
        true,
    )
    .await;
}

/// upstream "should ignore terminationGracePeriod on the nodepool"
#[tokio::test]
async fn should_ignore_termination_grace_period_on_the_nodepool() {
    repair_spec(
        "integration-repair-tgp",
        |pool| pool["spec"]["template"]["spec"]["terminationGracePeriod"] = json!("1h"),
        ready_condition_since("False", Duration::from_secs(31 * 60)),
        false,
    )
    .await;
}
