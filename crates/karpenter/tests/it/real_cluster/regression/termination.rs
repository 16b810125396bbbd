//! Upstream `test/suites/regression/termination_test.go`.
//!
//! Pods with upstream's `PreStopSleep` carry its exec `preStop` hook; the sim kubelet keeps a
//! terminating pod with a hook running until its grace period ends (see
//! `karpenter_sim::cluster::kubelet`), as kwok's delayed `pod-delete` stage does.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::NodeClaim;
use karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::drift::{
    CONSISTENTLY, consistently_no_disruptions, disrupted, eventually_gone, eventually_nodeclaims,
    eventually_nodes, patch_nodepool, schedule_opened_15_minutes_ago,
};
use super::env::{DISCOVERY_LABEL, Env, deployment};
use crate::real_cluster::objects::{condition_true, pods, running};
use crate::real_cluster::{DISRUPT, LAUNCH, eventually};

/// The Emptiness context's NodePool: `WhenEmpty`, `consolidateAfter: 0s`.
fn when_empty(env: &Env) -> Value {
    let mut pool = env.default_nodepool();
    pool["spec"]["disruption"]["consolidationPolicy"] = json!("WhenEmpty");
    pool["spec"]["disruption"]["consolidateAfter"] = json!("0s");
    pool
}

/// `EventuallyExpectConsolidatable(claim)`.
async fn eventually_consolidatable(env: &Env, claim: &NodeClaim) {
    let api: Api<NodeClaim> = Api::all(env.client.clone());
    let name = claim.name_any();
    eventually(&format!("{name} Consolidatable"), LAUNCH, || {
        let (api, name) = (api.clone(), name.clone());
        async move {
            let claim = api.get_opt(&name).await.ok()??;
            condition_true(&claim, "Consolidatable").then_some(())
        }
    })
    .await
    .unwrap();
}

async fn emptiness_blocked_by_budget(test: &str, budget: Value) {
    let Some(env) = Env::start(test, crate::real_cluster::options()).await else {
        return;
    };
    let mut pool = when_empty(&env);
    pool["spec"]["disruption"]["budgets"] = json!([budget]);
    env.apply(&[
        &env.default_nodeclass(),
        &pool,
        &deployment("large-app", 1, json!({})),
    ])
    .await;
    let claim = eventually_nodeclaims(&env, 1, LAUNCH).await.remove(0);
    eventually_nodes(&env, 1, LAUNCH).await;
    env.eventually_healthy_pods("app=large-app", 1, LAUNCH)
        .await;

    // Nothing left running on the node.
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(env.client.clone(), &env.ns)
        .delete("large-app", &DeleteParams::default())
        .await
        .unwrap();
    eventually_consolidatable(&env, &claim).await;
    consistently_no_disruptions(&env, 1, CONSISTENTLY).await;
}

/// "should not allow emptiness if the budget is fully blocking"
#[tokio::test]
async fn should_not_allow_emptiness_if_the_budget_is_fully_blocking() {
    emptiness_blocked_by_budget("termination-budget-zero", json!({"nodes": "0"})).await;
}

/// "should not allow emptiness if the budget is fully blocking during a scheduled time"
#[tokio::test]
async fn should_not_allow_emptiness_if_the_budget_is_fully_blocking_during_a_scheduled_time() {
    emptiness_blocked_by_budget(
        "termination-budget-schedule",
        json!({"nodes": "0", "schedule": schedule_opened_15_minutes_ago(), "duration": "30m"}),
    )
    .await;
}

/// "should terminate an empty node"
#[tokio::test]
async fn should_terminate_an_empty_node() {
    let Some(env) = Env::start("termination-empty", crate::real_cluster::options()).await else {
        return;
    };
    let mut pool = when_empty(&env);
    pool["spec"]["disruption"]["consolidateAfter"] = json!("10s");
    env.apply(&[
        &env.default_nodeclass(),
        &pool,
        &deployment("app", 1, json!({})),
    ])
    .await;
    let claim = eventually_nodeclaims(&env, 1, LAUNCH).await.remove(0);
    let node = eventually_nodes(&env, 1, LAUNCH).await.remove(0);
    env.eventually_healthy_pods("app=app", 1, LAUNCH).await;

    // Making the NodeClaim empty.
    crate::real_cluster::objects::scale(&env.client, &env.ns, "app", 0).await;
    eventually_consolidatable(&env, &claim).await;
    // Past its consolidateAfter of 0 it goes.
    patch_nodepool(
        &env,
        json!({"spec": {"disruption": {"consolidateAfter": "0s"}}}),
    )
    .await;
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
}

/// upstream `test.Pod` / `test.UnschedulablePod`: a pause pod, labelled for discovery.
fn pod(name: &str, grace: Option<i64>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {DISCOVERY_LABEL: "owned"}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}
    });
    if let Some(grace) = grace {
        pod["spec"]["terminationGracePeriodSeconds"] = json!(grace);
    }
    pod
}

/// upstream `PodOptions.PreStopSleep`: an exec hook sleeping `seconds` on the first container
/// (and kwok's matching delete delay).
fn pre_stop_sleep(pod_spec_owner: &mut Value, seconds: i64) {
    pod_spec_owner["metadata"]["annotations"]["pod-delete.stage.kwok.x-k8s.io/delay"] =
        json!(format!("{seconds}s"));
    pod_spec_owner["spec"]["containers"][0]["lifecycle"] =
        json!({"preStop": {"exec": {"command": ["/bin/sh", "-c", format!("sleep {seconds}")]}}});
}

/// The TerminationGracePeriod context's NodePool: `terminationGracePeriod: 60s`.
fn with_termination_grace_period(env: &Env) -> Value {
    let mut pool = env.default_nodepool();
    pool["spec"]["template"]["spec"]["terminationGracePeriod"] = json!("60s");
    pool
}

/// Deletes the NodeClaim and expects its Node tainted `karpenter.sh/disrupted` within 3 s
/// (upstream's window).
async fn delete_and_expect_tainted(env: &Env, claim: &NodeClaim, node: &Node) {
    Api::<NodeClaim>::all(env.client.clone())
        .delete(&claim.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    let api: Api<Node> = Api::all(env.client.clone());
    let name = node.name_any();
    eventually("the node tainted", Duration::from_secs(3), || {
        let (api, name) = (api.clone(), name.clone());
        async move { api.get_opt(&name).await.ok()?.filter(disrupted).map(|_| ()) }
    })
    .await
    .unwrap();
}

/// `ConsistentlyExpectHealthyPods(duration, pod)`: Ready the whole time.
async fn consistently_ready(env: &Env, name: &str, duration: Duration) {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    let deadline = tokio::time::Instant::now() + duration;
    while tokio::time::Instant::now() < deadline {
        let pod = api.get(name).await.unwrap();
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        assert!(ready, "{name} stopped being Ready: {:?}", pod.status);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `EventuallyExpectHealthy(pod)`.
async fn eventually_running(env: &Env, name: &str) {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    eventually(&format!("{name} Running"), LAUNCH, || {
        let (api, name) = (api.clone(), name.to_string());
        async move { api.get_opt(&name).await.ok()?.filter(running).map(|_| ()) }
    })
    .await
    .unwrap();
}

/// "should delete pod with do-not-disrupt when it reaches its terminationGracePeriodSeconds"
#[tokio::test]
async fn should_delete_pod_with_do_not_disrupt_when_it_reaches_its_terminationgraceperiodseconds() {
    let Some(env) = Env::start(
        "termination-tgp-do-not-disrupt",
        crate::real_cluster::options(),
    )
    .await
    else {
        return;
    };
    let mut pod = pod("tgp", Some(30));
    pod["metadata"]["annotations"] = json!({DO_NOT_DISRUPT_ANNOTATION: "true"});
    env.apply(&[
        &env.default_nodeclass(),
        &with_termination_grace_period(&env),
        &pod,
    ])
    .await;
    let claim = eventually_nodeclaims(&env, 1, LAUNCH).await.remove(0);
    let node = eventually_nodes(&env, 1, LAUNCH).await.remove(0);
    eventually_running(&env, "tgp").await;

    let started = tokio::time::Instant::now();
    delete_and_expect_tainted(&env, &claim, &node).await;
    // Healthy until the pod's grace period before the node's (60 s − 30 s), less 5 s of slack.
    consistently_ready(&env, "tgp", Duration::from_secs(25)).await;
    eventually_gone(
        &Api::<NodeClaim>::all(env.client.clone()),
        &[claim.name_any()],
        LAUNCH,
    )
    .await;
    eventually_gone(
        &Api::<Node>::all(env.client.clone()),
        &[node.name_any()],
        LAUNCH,
    )
    .await;
    eventually_gone(
        &Api::<Pod>::namespaced(env.client.clone(), &env.ns),
        &["tgp".into()],
        LAUNCH,
    )
    .await;
    eprintln!(
        "node gone {:?} after the NodeClaim's deletion",
        started.elapsed()
    );
}

/// "should delete pod that has a pre-stop hook after termination grace period seconds"
#[tokio::test]
async fn should_delete_pod_that_has_a_pre_stop_hook_after_termination_grace_period_seconds() {
    let Some(env) = Env::start("termination-tgp-pre-stop", crate::real_cluster::options()).await
    else {
        return;
    };
    let mut pod = pod("pre-stop", Some(30));
    pre_stop_sleep(&mut pod, 300);
    pod["spec"]["containers"][0]["image"] = json!("alpine:3.20.2");
    pod["spec"]["containers"][0]["command"] = json!(["/bin/sh", "-c", "sleep 30"]);
    env.apply(&[
        &env.default_nodeclass(),
        &with_termination_grace_period(&env),
        &pod,
    ])
    .await;
    let claim = eventually_nodeclaims(&env, 1, LAUNCH).await.remove(0);
    let node = eventually_nodes(&env, 1, LAUNCH).await.remove(0);
    eventually_running(&env, "pre-stop").await;

    delete_and_expect_tainted(&env, &claim, &node).await;
    eventually_terminating(&env, &["pre-stop"]).await;
    // The hook keeps it running (and Ready) for its 30 s grace period, less 5 s of slack.
    consistently_ready(&env, "pre-stop", Duration::from_secs(25)).await;
    eventually_gone(
        &Api::<NodeClaim>::all(env.client.clone()),
        &[claim.name_any()],
        LAUNCH,
    )
    .await;
    eventually_gone(
        &Api::<Node>::all(env.client.clone()),
        &[node.name_any()],
        LAUNCH,
    )
    .await;
    eventually_gone(
        &Api::<Pod>::namespaced(env.client.clone(), &env.ns),
        &["pre-stop".into()],
        LAUNCH,
    )
    .await;
}

/// "should terminate the node and the instance on deletion"
#[tokio::test]
async fn should_terminate_the_node_and_the_instance_on_deletion() {
    let Some(env) = Env::start("termination-node-deletion", crate::real_cluster::options()).await
    else {
        return;
    };
    env.apply(&[
        &env.default_nodeclass(),
        &env.default_nodepool(),
        &pod("pod", None),
    ])
    .await;
    eventually_running(&env, "pod").await;
    let node = eventually_nodes(&env, 1, LAUNCH).await.remove(0);
    // The pod goes first, so that nothing is provisioned again after the node's deletion.
    Api::<Pod>::namespaced(env.client.clone(), &env.ns)
        .delete("pod", &DeleteParams::default())
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(env.client.clone());
    nodes
        .delete(&node.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    eventually_gone(&nodes, &[node.name_any()], DISRUPT).await;
}

/// `EventuallyExpectTerminating(pods...)`.
async fn eventually_terminating(env: &Env, names: &[&str]) {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    eventually(&format!("{names:?} terminating"), LAUNCH, || {
        let (api, names) = (api.clone(), names.clone());
        async move {
            for name in &names {
                api.get_opt(name)
                    .await
                    .ok()??
                    .metadata
                    .deletion_timestamp
                    .as_ref()?;
            }
            Some(())
        }
    })
    .await
    .unwrap();
}

/// `ConsistentlyExpectActivePods(duration, pods...)`: present and not terminating throughout.
async fn consistently_active(env: &Env, names: &[&str], duration: Duration) {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    let deadline = tokio::time::Instant::now() + duration;
    while tokio::time::Instant::now() < deadline {
        for name in names {
            let pod = api.get(name).await.unwrap();
            assert!(
                pod.metadata.deletion_timestamp.is_none(),
                "{name} is terminating too early"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A workload of the drain-order test: `app: APP`, `drain-test: "true"`, the given priority
/// class, a 1Gi memory limit, and `PreStopSleep` and grace period `stop` seconds.
fn drain_workload(kind: &str, app: &str, priority_class: Option<&str>, stop: i64) -> Value {
    let mut template = json!({
        "metadata": {"labels": {"drain-test": "true", "app": app, DISCOVERY_LABEL: "owned"}},
        "spec": {
            "terminationGracePeriodSeconds": stop,
            "containers": [{
                "name": "app", "image": "alpine:3.20.2", "command": ["/bin/sh", "-c", "sleep 1000"],
                "resources": {"limits": {"memory": "1Gi"}}
            }]
        }
    });
    pre_stop_sleep(&mut template, stop);
    if let Some(class) = priority_class {
        template["spec"]["priorityClassName"] = json!(class);
    }
    let mut object = json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": app, "labels": {DISCOVERY_LABEL: "owned"}},
        "spec": {"selector": {"matchLabels": {"app": app}}, "template": template}
    });
    if kind == "Deployment" {
        object["spec"]["replicas"] = json!(1);
    }
    object
}

/// The one pod of `app`.
async fn pod_of(env: &Env, app: &str) -> String {
    pods(&env.client, &env.ns, &format!("app={app}")).await[0].name_any()
}

/// "should drain pods on a node in order": non-critical pods, then non-critical DaemonSet pods,
/// then critical pods, then critical DaemonSet pods, each group gone before the next starts.
/// Upstream's 60 s grace periods and pre-stop sleeps are 12 s here (10 s → 4 s for the critical
/// DaemonSets) and its 30 s `Consistently` windows 6 s: the same order in a fifth of the time.
#[tokio::test]
async fn should_drain_pods_on_a_node_in_order() {
    let Some(env) = Env::start("termination-drain-order", crate::real_cluster::options()).await
    else {
        return;
    };
    const STOP: i64 = 12;
    const CRITICAL_DAEMONSET_STOP: i64 = 4;
    const ACTIVE: Duration = Duration::from_secs(6);
    let workloads = [
        drain_workload("DaemonSet", "daemonset", None, STOP),
        drain_workload(
            "DaemonSet",
            "node-critical-daemonset",
            Some("system-node-critical"),
            CRITICAL_DAEMONSET_STOP,
        ),
        drain_workload(
            "DaemonSet",
            "cluster-critical-daemonset",
            Some("system-cluster-critical"),
            CRITICAL_DAEMONSET_STOP,
        ),
        drain_workload("Deployment", "deployment", None, STOP),
        drain_workload(
            "Deployment",
            "node-critical-deployment",
            Some("system-node-critical"),
            STOP,
        ),
        drain_workload(
            "Deployment",
            "cluster-critical-deployment",
            Some("system-cluster-critical"),
            STOP,
        ),
    ];
    let mut objects: Vec<&Value> = Vec::new();
    let (class, pool) = (env.default_nodeclass(), env.default_nodepool());
    objects.push(&class);
    objects.push(&pool);
    objects.extend(workloads.iter());
    env.apply(&objects).await;

    let claim = eventually_nodeclaims(&env, 1, LAUNCH).await.remove(0);
    eventually_nodes(&env, 1, LAUNCH).await;
    env.eventually_healthy_pods("drain-test=true", 6, LAUNCH)
        .await;
    let daemonset = pod_of(&env, "daemonset").await;
    let node_critical_daemonset = pod_of(&env, "node-critical-daemonset").await;
    let cluster_critical_daemonset = pod_of(&env, "cluster-critical-daemonset").await;
    let deployment = pod_of(&env, "deployment").await;
    let node_critical_deployment = pod_of(&env, "node-critical-deployment").await;
    let cluster_critical_deployment = pod_of(&env, "cluster-critical-deployment").await;

    Api::<NodeClaim>::all(env.client.clone())
        .delete(&claim.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    let pod_api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    let gone_within = Duration::from_secs(STOP as u64 + 20);

    // Non-critical deployment pod.
    eventually_terminating(&env, &[&deployment]).await;
    consistently_active(
        &env,
        &[
            &daemonset,
            &node_critical_deployment,
            &node_critical_daemonset,
            &cluster_critical_deployment,
            &cluster_critical_daemonset,
        ],
        ACTIVE,
    )
    .await;
    eventually_gone(&pod_api, &[deployment], gone_within).await;

    // Non-critical DaemonSet pod.
    eventually_terminating(&env, &[&daemonset]).await;
    consistently_active(
        &env,
        &[
            &node_critical_deployment,
            &node_critical_daemonset,
            &cluster_critical_deployment,
            &cluster_critical_daemonset,
        ],
        ACTIVE,
    )
    .await;
    eventually_gone(&pod_api, &[daemonset], gone_within).await;

    // Critical deployment pods.
    eventually_terminating(
        &env,
        &[&node_critical_deployment, &cluster_critical_deployment],
    )
    .await;
    consistently_active(
        &env,
        &[&node_critical_daemonset, &cluster_critical_daemonset],
        ACTIVE,
    )
    .await;
    eventually_gone(
        &pod_api,
        &[node_critical_deployment, cluster_critical_deployment],
        gone_within,
    )
    .await;

    // Critical DaemonSet pods.
    eventually_terminating(
        &env,
        &[&node_critical_daemonset, &cluster_critical_daemonset],
    )
    .await;
    eventually_gone(
        &pod_api,
        &[node_critical_daemonset, cluster_critical_daemonset],
        gone_within,
    )
    .await;
}
