//! Upstream `test/suites/regression/drift_test.go`.
//!
//! Upstream's `Consistently` windows of a minute are 20 s here: two disruption passes (10 s
//! apart) at least, each of which would have acted on the drifted nodes.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::NodeClaim;
use karpenter_api::well_known::{
    DISRUPTED_TAINT_KEY, DO_NOT_DISRUPT_ANNOTATION, NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION_ANNOTATION,
};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::env::{Env, deployment};
use crate::real_cluster::objects::{condition_true, nodeclaims, nodepool, nodes, pods, running};
use crate::real_cluster::{DISRUPT, LAUNCH, SOON, eventually};

/// upstream `common.TestingFinalizer`: holds Nodes so that a test can watch their disruption.
pub(super) const TESTING_FINALIZER: &str = "testing/finalizer";

/// Upstream's one-minute `Consistently` windows, shortened (see the module's doc).
pub(super) const CONSISTENTLY: Duration = Duration::from_secs(20);

/// `dep` of upstream's `BeforeEach`: one pause pod labelled `app: large-app`, do-not-disrupt so
/// that node metadata can be checked before the node goes, `terminationGracePeriodSeconds: 0`.
fn large_app(replicas: i32) -> Value {
    let mut dep = deployment("large-app", replicas, json!({}));
    dep["spec"]["template"]["metadata"]["annotations"] = json!({DO_NOT_DISRUPT_ANNOTATION: "true"});
    dep
}

/// `PodAntiRequirements` on the hostname for the pods labelled `app: NAME`.
pub(super) fn anti_affine_on_hostname(dep: &mut Value, app: &str) {
    dep["spec"]["template"]["spec"]["affinity"] = json!({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": app}}
        }]
    }});
}

pub(super) fn disrupted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter()
                .any(|t| t.key == DISRUPTED_TAINT_KEY && t.effect == "NoSchedule")
        })
}

/// `EventuallyExpectCreatedNodeClaimCount("==", n)`.
pub(super) async fn eventually_nodeclaims(env: &Env, n: usize, limit: Duration) -> Vec<NodeClaim> {
    let client = env.client.clone();
    let found = eventually(&format!("{n} NodeClaims"), limit, || {
        let client = client.clone();
        async move {
            let claims = nodeclaims(&client).await;
            (claims.len() == n).then_some(claims)
        }
    })
    .await;
    match found {
        Ok(claims) => claims,
        Err(err) => panic!("{err}; there are:\n{}", describe_capacity(env).await),
    }
}

/// The NodeClaims and Nodes there are, one line each, for a count that never came.
async fn describe_capacity(env: &Env) -> String {
    let time = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.map_or("-".to_string(), |t| t.0.to_string())
    };
    let mut lines: Vec<String> = nodeclaims(&env.client)
        .await
        .iter()
        .map(|c| {
            let status = c.status.as_ref();
            format!(
                "NodeClaim {} created {} deleting {} node {} type {}",
                c.name_any(),
                time(c.metadata.creation_timestamp.as_ref()),
                time(c.metadata.deletion_timestamp.as_ref()),
                status.and_then(|s| s.node_name.as_deref()).unwrap_or("-"),
                c.labels()
                    .get("node.kubernetes.io/instance-type")
                    .map_or("-", String::as_str),
            )
        })
        .collect();
    lines.extend(nodes(&env.client).await.iter().map(|n| {
        format!(
            "Node {} created {} deleting {}",
            n.name_any(),
            time(n.metadata.creation_timestamp.as_ref()),
            time(n.metadata.deletion_timestamp.as_ref()),
        )
    }));
    // The controller's own account: every NodeClaim it made or removed, and why.
    let log = env.karpenter.log();
    lines.extend(
        log.lines()
            .filter(|l| {
                [
                    "created nodeclaim",
                    "computed new nodeclaim",
                    "deleting",
                    "deleted nodeclaim",
                ]
                .iter()
                .any(|what| l.contains(what))
            })
            .map(|l| format!("log: {}", l.chars().take(400).collect::<String>())),
    );
    lines.join("\n")
}

/// `EventuallyExpectCreatedNodeCount("==", n)`.
pub(super) async fn eventually_nodes(env: &Env, n: usize, limit: Duration) -> Vec<Node> {
    let client = env.client.clone();
    let found = eventually(&format!("{n} Nodes"), limit, || {
        let client = client.clone();
        async move {
            let nodes = nodes(&client).await;
            (nodes.len() == n).then_some(nodes)
        }
    })
    .await;
    match found {
        Ok(nodes) => nodes,
        Err(err) => panic!("{err}; there are:\n{}", describe_capacity(env).await),
    }
}

/// `EventuallyExpectDrifted(claims...)`.
async fn eventually_drifted(env: &Env, claims: &[NodeClaim]) {
    let api: Api<NodeClaim> = Api::all(env.client.clone());
    let names: Vec<String> = claims.iter().map(ResourceExt::name_any).collect();
    eventually(&format!("{names:?} Drifted"), DISRUPT, || {
        let (api, names) = (api.clone(), names.clone());
        async move {
            for name in &names {
                let claim = api.get_opt(name).await.ok()??;
                if !condition_true(&claim, "Drifted") {
                    return None;
                }
            }
            Some(())
        }
    })
    .await
    .unwrap();
}

/// `ConsistentlyExpectNoDisruptions(count, duration)`: exactly `count` NodeClaims and Nodes and
/// none tainted `karpenter.sh/disrupted`, the whole time.
pub(super) async fn consistently_no_disruptions(env: &Env, count: usize, duration: Duration) {
    let deadline = tokio::time::Instant::now() + duration;
    while tokio::time::Instant::now() < deadline {
        let claims = nodeclaims(&env.client).await;
        let nodes = nodes(&env.client).await;
        assert_eq!(claims.len(), count, "NodeClaims: {:?}", names(&claims));
        assert_eq!(nodes.len(), count, "Nodes: {:?}", names(&nodes));
        let tainted: Vec<String> = nodes
            .iter()
            .filter(|n| disrupted(n))
            .map(ResourceExt::name_any)
            .collect();
        assert!(tainted.is_empty(), "disrupted: {tainted:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `ConsistentlyExpectDisruptionsUntilNoneLeft(at_start, max, timeout)`: never more than `max`
/// nodes tainted at once, never more than `at_start + max` NodeClaims (those whose instance is
/// terminating aside) or Nodes (theirs aside), until no node is tainted. Returns the most seen
/// tainted at once.
async fn disruptions_until_none_left(
    env: &Env,
    at_start: usize,
    max: usize,
    timeout: Duration,
) -> usize {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut most = 0;
    loop {
        let claims = nodeclaims(&env.client).await;
        let removed: Vec<String> = claims
            .iter()
            .filter(|c| condition_true(c, "InstanceTerminating"))
            .filter_map(|c| c.status.as_ref()?.provider_id.clone())
            .collect();
        let live_claims = claims.len()
            - claims
                .iter()
                .filter(|c| condition_true(c, "InstanceTerminating"))
                .count();
        assert!(
            live_claims <= at_start + max,
            "too many NodeClaims: {:?}",
            names(&claims)
        );
        let nodes: Vec<Node> = nodes(&env.client)
            .await
            .into_iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_ref())
                    .is_none_or(|p| !removed.contains(p))
            })
            .collect();
        assert!(
            nodes.len() <= at_start + max,
            "too many Nodes: {:?}",
            names(&nodes)
        );
        let tainted = nodes.iter().filter(|n| disrupted(n)).count();
        assert!(
            tainted <= max,
            "{tainted} nodes disrupted at once, budget {max}"
        );
        most = most.max(tainted);
        if tainted == 0 && most > 0 {
            return most;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nodes still disrupting after {timeout:?} (most at once: {most})"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub(super) fn names<K: ResourceExt>(objects: &[K]) -> Vec<String> {
    objects.iter().map(ResourceExt::name_any).collect()
}

/// Adds (`add`) or removes the testing finalizer of a Node or NodeClaim.
pub(super) async fn testing_finalizer<K>(api: &Api<K>, name: &str, add: bool)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let Ok(Some(object)) = api.get_opt(name).await else {
        return;
    };
    let mut finalizers: Vec<String> = object.finalizers().to_vec();
    finalizers.retain(|f| f != TESTING_FINALIZER);
    if add {
        finalizers.push(TESTING_FINALIZER.to_string());
    }
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": object.resource_version()}});
    if let Err(err) = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        // A conflict: read again.
        eprintln!("finalizer of {name}: {err}; retrying");
        Box::pin(testing_finalizer(api, name, add)).await;
    }
}

/// A merge patch of the test's NodePool (`env.ExpectUpdated(nodePool)`).
pub(super) async fn patch_nodepool(env: &Env, patch: Value) {
    Api::<karpenter_api::NodePool>::all(env.client.clone())
        .patch(
            &env.nodepool,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

/// `nodePool.Spec.Template.Annotations = {"test": "annotation"}; env.ExpectUpdated(nodePool)`.
async fn drift_by_template_annotation(env: &Env) {
    patch_nodepool(
        env,
        json!({"spec": {"template": {"metadata": {"annotations": {"test": "annotation"}}}}}),
    )
    .await;
}

async fn delete_deployment(env: &Env, name: &str) {
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(env.client.clone(), &env.ns)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// Removes the do-not-disrupt annotation of a pod (`delete(pod.Annotations, ...); ExpectUpdated`).
pub(super) async fn allow_disruption(env: &Env, pod: &Pod) {
    Api::<Pod>::namespaced(env.client.clone(), &env.ns)
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {DO_NOT_DISRUPT_ANNOTATION: null}}})),
        )
        .await
        .unwrap();
}

/// The Running pods matching `selector` (`EventuallyExpectHealthyPodCount` returns them).
pub(super) async fn healthy_pods(env: &Env, selector: &str, n: usize) -> Vec<Pod> {
    env.eventually_healthy_pods(selector, n, LAUNCH).await;
    pods(&env.client, &env.ns, selector)
        .await
        .into_iter()
        .filter(running)
        .collect()
}

/// A budget's cron schedule whose 30-minute window opened 15 minutes ago (UTC), as upstream's
/// `fmt.Sprintf("%d %d * * *", windowStart.Minute(), windowStart.Hour())`.
pub(super) fn schedule_opened_15_minutes_ago() -> String {
    let start = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(15);
    let start = start.to_zoned(jiff::tz::TimeZone::UTC);
    format!("{} {} * * *", start.minute(), start.hour())
}

/// Waits until every named object is gone (`EventuallyExpectNotFound`).
pub(super) async fn eventually_gone<K>(api: &Api<K>, names: &[String], limit: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("{names:?} gone"), limit, || {
        let (api, names) = (api.clone(), names.to_vec());
        async move {
            for name in &names {
                if api.get_opt(name).await.ok()?.is_some() {
                    return None;
                }
            }
            Some(())
        }
    })
    .await
    .unwrap();
}

/// "should respect budgets for empty drift"
#[tokio::test]
async fn should_respect_budgets_for_empty_drift() {
    let Some(env) = Env::start("drift-budget-empty", crate::real_cluster::options()).await else {
        return;
    };
    let mut pool = env.default_nodepool();
    pool["spec"]["disruption"]["budgets"] = json!([{"nodes": "50%"}]);
    let mut dep = large_app(3);
    anti_affine_on_hostname(&mut dep, "large-app");
    env.apply(&[&env.default_nodeclass(), &pool, &dep]).await;

    let claims = eventually_nodeclaims(&env, 3, LAUNCH).await;
    let nodes = eventually_nodes(&env, 3, LAUNCH).await;
    env.eventually_healthy_pods("app=large-app", 3, LAUNCH)
        .await;

    let node_api: Api<Node> = Api::all(env.client.clone());
    for node in &nodes {
        testing_finalizer(&node_api, &node.name_any(), true).await;
    }
    // Making the nodes empty.
    delete_deployment(&env, "large-app").await;
    drift_by_template_annotation(&env).await;
    eventually_drifted(&env, &claims).await;

    let most = disruptions_until_none_left(&env, 3, 2, DISRUPT).await;
    eprintln!("empty drift: at most {most} nodes disrupted at once (budget 2)");
    for node in &nodes {
        testing_finalizer(&node_api, &node.name_any(), false).await;
    }
}

/// "should respect budgets for non-empty delete drift"
#[tokio::test]
async fn should_respect_budgets_for_non_empty_delete_drift() {
    let Some(env) = Env::start("drift-budget-delete", crate::real_cluster::options()).await else {
        return;
    };
    let mut pool = env.default_nodepool();
    pool["spec"]["disruption"]["budgets"] = json!([{"nodes": "50%"}]);
    let mut dep = large_app(9);
    dep["spec"]["template"]["spec"]["topologySpreadConstraints"] = json!([{
        "maxSkew": 3, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "large-app"}}
    }]);
    env.apply(&[&env.default_nodeclass(), &pool, &dep]).await;

    let claims = eventually_nodeclaims(&env, 3, LAUNCH).await;
    let nodes = eventually_nodes(&env, 3, LAUNCH).await;
    env.eventually_healthy_pods("app=large-app", 9, LAUNCH)
        .await;

    // Scaling down to a third, then spreading the pods one a node.
    crate::real_cluster::objects::scale(&env.client, &env.ns, "large-app", 3).await;
    env.eventually_healthy_pods("app=large-app", 3, LAUNCH)
        .await;
    force_pods_to_spread(&env, &nodes).await;
    env.eventually_healthy_pods("app=large-app", 3, LAUNCH)
        .await;

    let node_api: Api<Node> = Api::all(env.client.clone());
    for node in &nodes {
        testing_finalizer(&node_api, &node.name_any(), true).await;
    }
    drift_by_template_annotation(&env).await;
    eventually_drifted(&env, &claims).await;

    for pod in healthy_pods(&env, "app=large-app", 3).await {
        allow_disruption(&env, &pod).await;
    }
    let most = disruptions_until_none_left(&env, 3, 2, DISRUPT).await;
    eprintln!("non-empty delete drift: at most {most} nodes disrupted at once (budget 2)");
    for node in &nodes {
        testing_finalizer(&node_api, &node.name_any(), false).await;
    }
}

/// upstream `ForcePodsToSpread`: cordons a node holding more than its share of the pods and
/// deletes the surplus, until each node holds at most ceil(pods / nodes).
async fn force_pods_to_spread(env: &Env, nodes: &[Node]) {
    let pod_api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    let node_api: Api<Node> = Api::all(env.client.clone());
    let on = |pods: &[Pod], node: &str| -> Vec<Pod> {
        pods.iter()
            .filter(|p| {
                running(p) && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            })
            .cloned()
            .collect()
    };
    let all = pods(&env.client, &env.ns, "app=large-app").await;
    let total: usize = nodes.iter().map(|n| on(&all, &n.name_any()).len()).sum();
    let per_node = total.div_ceil(nodes.len());
    loop {
        let all = pods(&env.client, &env.ns, "app=large-app").await;
        let Some((node, surplus)) = nodes.iter().find_map(|n| {
            let held = on(&all, &n.name_any());
            (held.len() > per_node).then(|| (n.name_any(), held[per_node..].to_vec()))
        }) else {
            return;
        };
        node_api
            .patch(
                &node,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .unwrap();
        for pod in surplus {
            let _ = pod_api
                .delete(&pod.name_any(), &DeleteParams::default())
                .await;
        }
        let pods_api = env.client.clone();
        let ns = env.ns.clone();
        eventually("the surplus pods gone", SOON, || {
            let (client, ns, node) = (pods_api.clone(), ns.clone(), node.clone());
            async move {
                let all = pods(&client, &ns, "app=large-app").await;
                let held = all
                    .iter()
                    .filter(|p| {
                        p.metadata.deletion_timestamp.is_none()
                            && p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                                == Some(node.as_str())
                    })
                    .count();
                (held <= per_node).then_some(())
            }
        })
        .await
        .unwrap();
    }
}

/// "should respect budgets for non-empty replace drift"
#[tokio::test]
async fn should_respect_budgets_for_non_empty_replace_drift() {
    let Some(env) = Env::start("drift-budget-replace", crate::real_cluster::options()).await else {
        return;
    };
    let mut pool = env.default_nodepool();
    pool["metadata"]["labels"]["app"] = json!("large-app");
    pool["spec"]["disruption"]["budgets"] = json!([{"nodes": "3"}]);
    let mut dep = deployment("large-app", 5, json!({}));
    anti_affine_on_hostname(&mut dep, "large-app");
    env.apply(&[&env.default_nodeclass(), &pool, &dep]).await;

    let original_claims = eventually_nodeclaims(&env, 5, LAUNCH).await;
    let original_nodes = eventually_nodes(&env, 5, LAUNCH).await;
    env.eventually_healthy_pods("app=large-app", 5, LAUNCH)
        .await;

    let node_api: Api<Node> = Api::all(env.client.clone());
    for node in &original_nodes {
        testing_finalizer(&node_api, &node.name_any(), true).await;
    }
    patch_nodepool(
        &env,
        json!({"spec": {"template": {"metadata": {"annotations": {"test-annotation": "drift"}}}}}),
    )
    .await;
    let most = disruptions_until_none_left(&env, 5, 3, DISRUPT).await;
    eprintln!("non-empty replace drift: at most {most} nodes disrupted at once (budget 3)");

    let claim_api: Api<NodeClaim> = Api::all(env.client.clone());
    for node in &original_nodes {
        testing_finalizer(&node_api, &node.name_any(), false).await;
    }
    for claim in &original_claims {
        testing_finalizer(&claim_api, &claim.name_any(), false).await;
    }
    eventually_gone(&node_api, &names(&original_nodes), DISRUPT).await;
    eventually_gone(&claim_api, &names(&original_claims), DISRUPT).await;
    let (claims, nodes) = env.counts().await;
    assert_eq!((claims, nodes), (5, 5), "all five rolled, none leaked");
}

/// "should not allow drift if the budget is fully blocking"
#[tokio::test]
async fn should_not_allow_drift_if_the_budget_is_fully_blocking() {
    budget_blocks_drift("drift-budget-zero", json!({"nodes": "0"})).await;
}

/// "should not allow drift if the budget is fully blocking during a scheduled time"
#[tokio::test]
async fn should_not_allow_drift_if_the_budget_is_fully_blocking_during_a_scheduled_time() {
    budget_blocks_drift(
        "drift-budget-schedule",
        json!({"nodes": "0", "schedule": schedule_opened_15_minutes_ago(), "duration": "30m"}),
    )
    .await;
}

async fn budget_blocks_drift(test: &str, budget: Value) {
    let Some(env) = Env::start(test, crate::real_cluster::options()).await else {
        return;
    };
    let mut pool = env.default_nodepool();
    pool["spec"]["disruption"]["budgets"] = json!([budget]);
    let dep = deployment("large-app", 1, json!({}));
    env.apply(&[&env.default_nodeclass(), &pool, &dep]).await;

    let claim = eventually_nodeclaims(&env, 1, LAUNCH).await;
    eventually_nodes(&env, 1, LAUNCH).await;
    env.eventually_healthy_pods("app=large-app", 1, LAUNCH)
        .await;

    drift_by_template_annotation(&env).await;
    eventually_drifted(&env, &claim).await;
    consistently_no_disruptions(&env, 1, CONSISTENTLY).await;
}

/// One entry of upstream's `DescribeTable("NodePool Drift")`: the pool's template changed by
/// `change` (merged into it, as upstream's `test.NodePool(nodePool, ...)`), the node drifts and is
/// replaced once its pod may be disrupted.
async fn nodepool_drift(test: &str, change: impl FnOnce(&mut Value), startup_taint: bool) {
    let Some(env) = Env::start(test, crate::real_cluster::options()).await else {
        return;
    };
    env.apply(&[
        &large_app(1),
        &env.default_nodeclass(),
        &env.default_nodepool(),
    ])
    .await;
    let pod = healthy_pods(&env, "app=large-app", 1).await.remove(0);
    let claim = eventually_nodeclaims(&env, 1, LAUNCH).await;
    let node = eventually_nodes(&env, 1, LAUNCH).await.remove(0);

    let mut updated = env.default_nodepool();
    change(&mut updated);
    env.apply(&[&updated]).await;
    eventually_drifted(&env, &claim).await;
    allow_disruption(&env, &pod).await;

    let node_api: Api<Node> = Api::all(env.client.clone());
    if startup_taint {
        let mut nodes = eventually_nodes(&env, 2, LAUNCH).await;
        nodes.sort_by_key(|n| n.metadata.creation_timestamp.clone().map(|t| t.0));
        let new = nodes[1].name_any();
        // Remove the startup taint from the new node to initialize it.
        eventually(
            "the new node carries exactly the startup taint",
            SOON,
            || {
                let (api, new) = (node_api.clone(), new.clone());
                async move {
                    let node = api.get(&new).await.ok()?;
                    let taints = node.spec.as_ref()?.taints.clone().unwrap_or_default();
                    (taints.len() == 1
                        && taints[0].key == "example.com/another-taint-2"
                        && taints[0].effect == "PreferNoSchedule")
                        .then_some(())
                }
            },
        )
        .await
        .unwrap();
        node_api
            .patch(
                &new,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": []}})),
            )
            .await
            .unwrap();
    }
    let pod_api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    eventually_gone(&pod_api, &[pod.name_any()], DISRUPT).await;
    eventually_gone(&node_api, &[node.name_any()], DISRUPT).await;
    env.eventually_healthy_pods("app=large-app", 1, LAUNCH)
        .await;
}

/// "NodePool Drift" Entry "Annotations"
#[tokio::test]
async fn nodepool_drift_annotations() {
    nodepool_drift(
        "drift-table-annotations",
        |pool| {
            pool["spec"]["template"]["metadata"]["annotations"] =
                json!({"keyAnnotationTest": "valueAnnotationTest"})
        },
        false,
    )
    .await;
}

/// "NodePool Drift" Entry "Labels"
#[tokio::test]
async fn nodepool_drift_labels() {
    nodepool_drift(
        "drift-table-labels",
        |pool| {
            pool["spec"]["template"]["metadata"]["labels"]["keyLabelTest"] = json!("valueLabelTest")
        },
        false,
    )
    .await;
}

/// "NodePool Drift" Entry "Taints"
#[tokio::test]
async fn nodepool_drift_taints() {
    nodepool_drift(
        "drift-table-taints",
        |pool| {
            pool["spec"]["template"]["spec"]["taints"] =
                json!([{"key": "example.com/another-taint-2", "effect": "PreferNoSchedule"}])
        },
        false,
    )
    .await;
}

/// "NodePool Drift" Entry "Start-up Taints"
#[tokio::test]
async fn nodepool_drift_start_up_taints() {
    nodepool_drift(
        "drift-table-startup-taints",
        |pool| {
            pool["spec"]["template"]["spec"]["startupTaints"] =
                json!([{"key": "example.com/another-taint-2", "effect": "PreferNoSchedule"}])
        },
        true,
    )
    .await;
}

/// "NodePool Drift" Entry "NodeRequirements": the requirements replaced by `capacity-type In
/// [spot]` (upstream's merge overwrites the list).
#[tokio::test]
async fn nodepool_drift_node_requirements() {
    nodepool_drift(
        "drift-table-requirements",
        |pool| {
            pool["spec"]["template"]["spec"]["requirements"] =
                json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}])
        },
        false,
    )
    .await;
}

/// "should update the nodepool-hash annotation on the nodepool and nodeclaim when the nodepool's
/// nodepool-hash-version annotation does not match the controller hash version"
#[tokio::test]
async fn should_update_the_nodepool_hash_annotation_on_the_nodepool_and_nodeclaim_when_the_nodepools_nodepool_hash_version_annotation_does_not_match_the_controller_hash_version()
 {
    let Some(env) = Env::start("drift-hash-version", crate::real_cluster::options()).await else {
        return;
    };
    env.apply(&[
        &large_app(1),
        &env.default_nodeclass(),
        &env.default_nodepool(),
    ])
    .await;
    env.eventually_healthy_pods("app=large-app", 1, LAUNCH)
        .await;
    let claim = eventually_nodeclaims(&env, 1, LAUNCH).await.remove(0);
    let claim_name = claim.name_any();
    let pool = nodepool(&env.client, &env.nodepool).await;
    let expected = karpenter_core::nodepool::hash::template_hash(&pool);
    stamped_with(&env, &claim_name, &expected).await;

    // The pool and the claim stamped by other hash versions, and the template changed (which
    // would drift the claim were the versions equal).
    let claim_api: Api<NodeClaim> = Api::all(env.client.clone());
    claim_api
        .patch(
            &claim_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                NODEPOOL_HASH_ANNOTATION: "test-hash-2",
                NODEPOOL_HASH_VERSION_ANNOTATION: "test-hash-version-2"
            }}})),
        )
        .await
        .unwrap();
    patch_nodepool(
        &env,
        json!({
            "metadata": {"annotations": {
                NODEPOOL_HASH_ANNOTATION: "test-hash-1",
                NODEPOOL_HASH_VERSION_ANNOTATION: "test-hash-version-1"
            }},
            "spec": {"template": {"metadata": {"annotations": {"test-key": "test-value"}}}}
        }),
    )
    .await;
    let expected =
        karpenter_core::nodepool::hash::template_hash(&nodepool(&env.client, &env.nodepool).await);
    stamped_with(&env, &claim_name, &expected).await;
    let claim = claim_api.get(&claim_name).await.unwrap();
    assert!(
        !condition_true(&claim, "Drifted"),
        "re-stamped, not drifted: {:?}",
        claim.status
    );
}

/// Waits (30 s, as upstream) until the pool and the claim carry `hash` and the current version.
async fn stamped_with(env: &Env, claim: &str, hash: &str) {
    let claim_api: Api<NodeClaim> = Api::all(env.client.clone());
    let client = env.client.clone();
    let pool = env.nodepool.clone();
    let stamped = |annotations: &std::collections::BTreeMap<String, String>| {
        annotations
            .get(NODEPOOL_HASH_ANNOTATION)
            .map(String::as_str)
            == Some(hash)
            && annotations
                .get(NODEPOOL_HASH_VERSION_ANNOTATION)
                .map(String::as_str)
                == Some(NODEPOOL_HASH_VERSION)
    };
    let result = eventually(
        "nodepool and nodeclaim stamped with the current hash",
        SOON,
        || {
            let (claim_api, client, pool) = (claim_api.clone(), client.clone(), pool.clone());
            async move {
                let pool = nodepool(&client, &pool).await;
                let claim = claim_api.get(claim).await.ok()?;
                (stamped(pool.annotations()) && stamped(claim.annotations())).then_some(())
            }
        },
    )
    .await;
    if result.is_err() {
        let pool = nodepool(&env.client, &env.nodepool).await;
        let claim = claim_api.get(claim).await.unwrap();
        panic!(
            "expected hash {hash} version {NODEPOOL_HASH_VERSION}; nodepool {:?}, nodeclaim {:?}",
            pool.annotations(),
            claim.annotations()
        );
    }
}

/// The options of the "Failure" tests: a disruption command gives its replacements 20 s to
/// initialize (upstream's fixed 10 minutes; hidden `DISRUPTION_REPLACEMENT_TIMEOUT`), so that
/// the rollback is seen in seconds.
fn failure_options() -> karpenter_envtest::KarpenterOptions {
    crate::real_cluster::options().env("DISRUPTION_REPLACEMENT_TIMEOUT", "20s")
}

/// How long after the drift the rollback is awaited: the replacement timeout and a pass.
const ROLLBACK: Duration = Duration::from_secs(60);

/// `dep` of the "Failure" tests: two `app: inflate` pods, one a node.
fn inflate_one_a_node() -> Value {
    let mut dep = deployment("inflate", 2, json!({}));
    anti_affine_on_hostname(&mut dep, "inflate");
    dep
}

/// upstream `ExpectBlockNodeRegistration`: a ValidatingAdmissionPolicy refuses Nodes labelled
/// `registration: fail`; returns once a probe Node is refused (the policy is active).
async fn block_node_registration(env: &Env) {
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "admission-policy", "labels": {super::env::DISCOVERY_LABEL: "unspecified"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["nodes"]
            }]},
            "validations": [{"expression": "has(object.metadata.labels.registration) ? object.metadata.labels['registration'] != 'fail' : true"}]
        }
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "admission-policy-binding", "labels": {super::env::DISCOVERY_LABEL: "unspecified"}},
        "spec": {"policyName": "admission-policy", "validationActions": ["Deny"]}
    });
    env.apply(&[&policy, &binding]).await;
    let api: Api<Node> = Api::all(env.client.clone());
    let probe: Node = serde_json::from_value(json!({
        "metadata": {"name": "admission-probe", "labels": {"registration": "fail"}}
    }))
    .unwrap();
    eventually("the admission policy refuses a Node", SOON, || {
        let (api, probe) = (api.clone(), probe.clone());
        async move {
            match api.create(&kube::api::PostParams::default(), &probe).await {
                Err(_) => Some(()),
                Ok(_) => {
                    let _ = api
                        .delete("admission-probe", &DeleteParams::default())
                        .await;
                    None
                }
            }
        }
    })
    .await
    .unwrap();
}

/// Removes what [`block_node_registration`] made (cluster-scoped: the harness's clean-up does
/// not know these kinds).
async fn unblock_node_registration(env: &Env) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    for kind in [
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
    ] {
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let api: Api<DynamicObject> =
            Api::all_with(env.client.clone(), &ApiResource::from_gvk(&gvk));
        let name = if kind.ends_with("Binding") {
            "admission-policy-binding"
        } else {
            "admission-policy"
        };
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}

/// The drifted nodes: exactly one tainted (the default 10 % budget), then untainted again once
/// the replacement's timeout rolls the command back; the NodeClaims of the first launch all stay
/// throughout (upstream: 2 minutes; 20 s here, two disruption passes).
async fn drift_is_rolled_back(env: &Env, starting: &[NodeClaim]) {
    let client = env.client.clone();
    let tainted = eventually("exactly one node tainted", DISRUPT, || {
        let client = client.clone();
        async move {
            let tainted: Vec<String> = nodes(&client)
                .await
                .iter()
                .filter(|n| disrupted(n))
                .map(ResourceExt::name_any)
                .collect();
            (tainted.len() == 1).then_some(tainted)
        }
    })
    .await
    .unwrap();
    let start = tokio::time::Instant::now();
    eventually("the tainted node untainted", ROLLBACK, || {
        let (client, tainted) = (client.clone(), tainted.clone());
        async move {
            let still = nodes(&client)
                .await
                .iter()
                .any(|n| disrupted(n) && tainted.contains(&n.name_any()));
            (!still).then_some(())
        }
    })
    .await
    .unwrap();
    eprintln!("rolled back {:?} after the taint", start.elapsed());
    let uids: Vec<Option<String>> = starting.iter().map(|c| c.metadata.uid.clone()).collect();
    let deadline = tokio::time::Instant::now() + CONSISTENTLY;
    while tokio::time::Instant::now() < deadline {
        let now: Vec<Option<String>> = nodeclaims(&env.client)
            .await
            .iter()
            .map(|c| c.metadata.uid.clone())
            .collect();
        assert!(
            uids.iter().all(|u| now.contains(u)),
            "a NodeClaim of the first launch went: {uids:?} vs {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// "should not disrupt a drifted node if the replacement node never registers"
#[tokio::test]
async fn should_not_disrupt_a_drifted_node_if_the_replacement_node_never_registers() {
    let Some(env) = Env::start("drift-never-registers", failure_options()).await else {
        return;
    };
    block_node_registration(&env).await;
    let mut pool = env.default_nodepool();
    pool["spec"]["disruption"] = json!({});
    env.apply(&[&inflate_one_a_node(), &env.default_nodeclass(), &pool])
        .await;
    let starting = eventually_nodeclaims(&env, 2, LAUNCH).await;
    eventually_nodes(&env, 2, LAUNCH).await;

    patch_nodepool(
        &env,
        json!({"spec": {"template": {"metadata": {"labels": {"registration": "fail"}}}}}),
    )
    .await;
    eventually_drifted(&env, &starting).await;
    drift_is_rolled_back(&env, &starting).await;
    unblock_node_registration(&env).await;
}

/// "should not disrupt a drifted node if the replacement node registers but never initialized"
#[tokio::test]
async fn should_not_disrupt_a_drifted_node_if_the_replacement_node_registers_but_never_initialized()
{
    let Some(env) = Env::start("drift-never-initialized", failure_options()).await else {
        return;
    };
    let mut pool = env.default_nodepool();
    pool["spec"]["disruption"] = json!({});
    env.apply(&[&inflate_one_a_node(), &env.default_nodeclass(), &pool])
        .await;
    let starting = eventually_nodeclaims(&env, 2, LAUNCH).await;
    eventually_nodes(&env, 2, LAUNCH).await;

    // A startup taint nobody removes: the replacement never initializes.
    patch_nodepool(
        &env,
        json!({"spec": {"template": {"spec": {"startupTaints": [{"key": "example.com/taint", "effect": "PreferNoSchedule"}]}}}}),
    )
    .await;
    eventually_drifted(&env, &starting).await;

    let client = env.client.clone();
    let tainted = eventually("exactly one node tainted", DISRUPT, || {
        let client = client.clone();
        async move {
            let tainted: Vec<String> = nodes(&client)
                .await
                .iter()
                .filter(|n| disrupted(n))
                .map(ResourceExt::name_any)
                .collect();
            (tainted.len() == 1).then_some(tainted)
        }
    })
    .await
    .unwrap();
    eventually("the tainted node untainted", ROLLBACK, || {
        let (client, tainted) = (client.clone(), tainted.clone());
        async move {
            let still = nodes(&client)
                .await
                .iter()
                .any(|n| disrupted(n) && tainted.contains(&n.name_any()));
            (!still).then_some(())
        }
    })
    .await
    .unwrap();
    // The replacement is kept after the un-cordon.
    let (claims, nodes_now) = env.counts().await;
    assert_eq!(
        (claims, nodes_now),
        (3, 3),
        "the two first nodes and the replacement"
    );
    let uids: Vec<Option<String>> = starting.iter().map(|c| c.metadata.uid.clone()).collect();
    let deadline = tokio::time::Instant::now() + CONSISTENTLY;
    while tokio::time::Instant::now() < deadline {
        let now: Vec<Option<String>> = nodeclaims(&env.client)
            .await
            .iter()
            .map(|c| c.metadata.uid.clone())
            .collect();
        assert!(
            uids.iter().all(|u| now.contains(u)),
            "a NodeClaim of the first launch went: {uids:?} vs {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// "should not drift any nodes if their PodDisruptionBudgets are unhealthy": the pods run but
/// never turn Ready (kwok's `unhealthy` stage label, which the sim kubelet honours), so the PDB
/// (`minAvailable: 1`) allows no eviction.
#[tokio::test]
async fn should_not_drift_any_nodes_if_their_poddisruptionbudgets_are_unhealthy() {
    let Some(env) = Env::start("drift-pdb-unhealthy", crate::real_cluster::options()).await else {
        return;
    };
    let mut dep = inflate_one_a_node();
    dep["spec"]["template"]["metadata"]["labels"]["kwok.x-k8s.io/stage"] = json!("unhealthy");
    dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] =
        json!({"httpGet": {"port": 80}});
    let labels = dep["spec"]["template"]["metadata"]["labels"].clone();
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "pdb", "labels": {super::env::DISCOVERY_LABEL: "owned"}},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}
    });
    env.apply(&[
        &dep,
        &env.default_nodeclass(),
        &env.default_nodepool(),
        &pdb,
    ])
    .await;
    let claims = eventually_nodeclaims(&env, 2, LAUNCH).await;
    eventually_nodes(&env, 2, LAUNCH).await;
    // Bound (and started), never Ready.
    let client = env.client.clone();
    let ns = env.ns.clone();
    eventually("2 bound pods", LAUNCH, || {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            let pods = pods(&client, &ns, "app=inflate").await;
            let bound = pods
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            (bound == 2).then_some(())
        }
    })
    .await
    .unwrap();
    for pod in pods(&env.client, &env.ns, "app=inflate").await {
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        assert!(!ready, "an unhealthy pod turned Ready: {:?}", pod.status);
    }
    drift_by_template_annotation(&env).await;
    eventually_drifted(&env, &claims).await;
    consistently_no_disruptions(&env, 2, CONSISTENTLY).await;
}
