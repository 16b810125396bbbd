//! Termination: NodeClaim deleted → Node drained in tiers through the Eviction API (PDBs
//! respected) → instance terminated → finalizers released; do-not-disrupt pods waited for until
//! the terminationGracePeriod deadline.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): virtual time: `terminationGracePeriod` and do-
//! not-disrupt waits.

use std::time::Duration;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::well_known as wk;
use karpenter_core::pod::Pod;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;

use crate::sim_cluster::SimCluster;

fn evictions(cluster: &SimCluster, code_ok: bool) -> Vec<String> {
    cluster
        .server
        .requests()
        .into_iter()
        .filter(|r| r.subresource.as_deref() == Some("eviction") && (r.code < 300) == code_ok)
        .filter_map(|r| r.name)
        .collect()
}

/// A Running, Ready pod on a node nobody drains (a replacement elsewhere).
fn ready_pod_elsewhere(cluster: &SimCluster, name: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": "elsewhere", "containers": [{"name": "c", "image": "pause"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap();
    cluster.server.put(&pod).unwrap();
}

#[tokio::test(start_paused = true)]
async fn drains_in_tier_order_respecting_pdbs_then_terminates() {
    let cluster = SimCluster::new().await;
    let controller = cluster.start_controller().await;
    cluster.create_nodeclaim("default-drain", json!({})).await;
    let (_, node) = cluster.ready_nodeclaim("default-drain").await;

    let daemonset_owner = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds-uid"}]}});
    let critical = json!({"spec": {"priorityClassName": "system-cluster-critical"}});
    cluster.bound_pod("web-0", &node, json!({})).await;
    cluster.bound_pod("web-1", &node, json!({})).await;
    cluster.bound_pod("ds-0", &node, daemonset_owner).await;
    cluster.bound_pod("crit-0", &node, critical).await;
    // A pod that tolerates the disrupted taint is not drained (it would come straight back).
    cluster
        .bound_pod(
            "tolerant-0",
            &node,
            json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
        )
        .await;
    ready_pod_elsewhere(&cluster, "web-elsewhere");
    // At most one of the three web pods may be unavailable.
    let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    cluster.server.put(&pdb).unwrap();
    cluster
        .eventually("pods Running and Ready", Duration::from_secs(10), || {
            ["web-0", "web-1", "ds-0", "crit-0"]
                .iter()
                .all(|p| cluster.pod(p).and_then(|p| p.status?.phase).as_deref() == Some("Running"))
                .then_some(())
        })
        .await;

    Api::<NodeClaim>::all(cluster.client.clone())
        .delete("default-drain", &DeleteParams::default())
        .await
        .unwrap();

    // web-0 goes; web-1 is refused (429) while only two web pods are Ready.
    cluster
        .eventually("web-0 evicted", Duration::from_secs(10), || {
            cluster.pod("web-0").is_none().then_some(())
        })
        .await;
    cluster
        .eventually("a PDB refusal", Duration::from_secs(10), || {
            (!evictions(&cluster, false).is_empty()).then_some(())
        })
        .await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(cluster.pod("web-1").is_some(), "the PDB holds web-1");
    assert!(
        cluster.pod("ds-0").is_some() && cluster.pod("crit-0").is_some(),
        "later tiers wait"
    );
    let node_obj: Node = cluster.node(&node).unwrap();
    let taints = node_obj.spec.unwrap().taints.unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == wk::DISRUPTED_TAINT_KEY && t.effect == "NoSchedule")
    );
    assert!(
        !controller
            .ctx
            .events
            .with_reason("FailedDraining")
            .is_empty()
    );

    // The replacement becomes Ready elsewhere: the budget allows one more disruption.
    ready_pod_elsewhere(&cluster, "web-replacement");
    cluster
        .eventually("node gone", Duration::from_secs(120), || {
            cluster.node(&node).is_none().then_some(())
        })
        .await;
    cluster
        .eventually("nodeclaim gone", Duration::from_secs(30), || {
            cluster.nodeclaim("default-drain").is_none().then_some(())
        })
        .await;

    let evicted = evictions(&cluster, true);
    assert_eq!(evicted, ["web-0", "web-1", "ds-0", "crit-0"], "tier order");
    assert!(evictions(&cluster, false).iter().all(|p| p == "web-1"));
    assert!(
        cluster.provider.instances().is_empty(),
        "instance terminated"
    );
    let leftover: Vec<String> = cluster
        .server
        .list::<Pod>()
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(
        leftover,
        ["tolerant-0"],
        "only the pod that tolerates the taint was left alone"
    );
    assert_eq!(cluster.server.count::<NodeClaim>(), 0);
    let metrics = controller.ctx.metrics.encode();
    assert!(
        metrics.contains(
            "karpenter_nodes_terminated_total{nodepool=\"default\",zone=\"us-west-2a\"} 1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains(
        "karpenter_nodeclaims_terminated_total{nodepool=\"default\",capacity_type=\"on-demand\",zone=\"us-west-2a\"} 1"
    ));
    let refusals = evictions(&cluster, false).len();
    for line in [
        "karpenter_pods_drained_total{reason=\"Forceful Termination\"} 4".to_string(),
        "karpenter_pods_eviction_requests_total{code=\"200\"} 4".to_string(),
        format!("karpenter_pods_eviction_requests_total{{code=\"429\"}} {refusals}"),
        "karpenter_nodes_termination_duration_seconds_count{nodepool=\"default\"} 1".to_string(),
        "karpenter_nodes_lifetime_duration_seconds_count{nodepool=\"default\"} 1".to_string(),
        "karpenter_nodeclaims_termination_duration_seconds_count{nodepool=\"default\"} 1"
            .to_string(),
    ] {
        assert!(metrics.contains(&line), "missing {line} in\n{metrics}");
    }
    // The drain waited out the PDB for 20 s of virtual time: the NodeClaim took longer.
    let sum = |name: &str| -> f64 {
        let prefix = format!("{name}_sum{{nodepool=\"default\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in\n{metrics}"))
    };
    assert!(sum("karpenter_nodeclaims_termination_duration_seconds") >= 20.0);
    assert!(
        sum("karpenter_nodes_lifetime_duration_seconds")
            > sum("karpenter_nodes_termination_duration_seconds")
    );
    controller.stop().await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn do_not_disrupt_pods_are_waited_for_until_the_grace_deadline() {
    let cluster = SimCluster::new().await;
    let controller = cluster.start_controller().await;
    cluster
        .create_nodeclaim("default-tgp", json!({"terminationGracePeriod": "2m"}))
        .await;
    let (_, node) = cluster.ready_nodeclaim("default-tgp").await;
    cluster
        .bound_pod(
            "held-0",
            &node,
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                   "spec": {"terminationGracePeriodSeconds": 30}}),
        )
        .await;
    cluster.bound_pod("free-0", &node, json!({})).await;
    cluster
        .eventually("pods Running", Duration::from_secs(10), || {
            (cluster
                .pod("held-0")
                .and_then(|p| p.status?.phase)
                .as_deref()
                == Some("Running"))
            .then_some(())
        })
        .await;

    let deleted_at = cluster.now();
    Api::<NodeClaim>::all(cluster.client.clone())
        .delete("default-tgp", &DeleteParams::default())
        .await
        .unwrap();
    cluster
        .eventually("free-0 evicted", Duration::from_secs(10), || {
            cluster.pod("free-0").is_none().then_some(())
        })
        .await;
    let claim = cluster.nodeclaim("default-tgp").unwrap();
    let deadline: jiff::Timestamp = claim.metadata.annotations.unwrap()
        [wk::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION]
        .parse()
        .unwrap();
    // deletionTimestamp has whole seconds.
    let grace = deadline.duration_since(deleted_at);
    assert!(
        grace > SignedDuration::from_secs(119) && grace <= SignedDuration::from_mins(2),
        "{grace:?}"
    );

    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        cluster.pod("held-0").is_some(),
        "do-not-disrupt pod is not evicted before the deadline"
    );
    assert!(cluster.node(&node).is_some());

    let gone_at = cluster
        .eventually("held-0 deleted", Duration::from_secs(120), || {
            cluster.pod("held-0").is_none().then(|| cluster.now())
        })
        .await;
    // Deleted so that its own 30 s grace period ends at the deadline, not earlier.
    assert!(
        gone_at.duration_since(deleted_at) >= SignedDuration::from_secs(89),
        "{:?}",
        gone_at.duration_since(deleted_at)
    );
    assert!(
        evictions(&cluster, true).iter().all(|p| p != "held-0"),
        "force-deleted, never evicted"
    );
    assert!(!controller.ctx.events.with_reason("Disrupted").is_empty());
    cluster
        .eventually("node gone", Duration::from_secs(60), || {
            cluster.node(&node).is_none().then_some(())
        })
        .await;
    cluster
        .eventually("nodeclaim gone", Duration::from_secs(30), || {
            cluster.nodeclaim("default-tgp").is_none().then_some(())
        })
        .await;
    assert!(cluster.provider.instances().is_empty());
    controller.stop().await;
    cluster.shutdown().await;
}

/// Upstream's `awaitInstanceTermination`: once the Node is drained its instance is terminated and
/// the NodeClaim says `InstanceTerminating=True`, even while another finalizer keeps the Node
/// (upstream's regression suite holds Nodes so; budgets and its disruption checks then no
/// longer count that node as disrupting).
#[tokio::test(start_paused = true)]
async fn a_node_held_by_another_finalizer_still_has_its_instance_terminated() {
    let cluster = SimCluster::new().await;
    let controller = cluster.start_controller().await;
    cluster.create_nodeclaim("default-held", json!({})).await;
    let (_, node) = cluster.ready_nodeclaim("default-held").await;
    let mut held = cluster.node(&node).unwrap();
    held.metadata
        .finalizers
        .get_or_insert_default()
        .push("testing/finalizer".into());
    cluster.server.put(&held).unwrap();

    Api::<NodeClaim>::all(cluster.client.clone())
        .delete("default-held", &DeleteParams::default())
        .await
        .unwrap();
    cluster
        .eventually(
            "InstanceTerminating on the NodeClaim",
            Duration::from_secs(60),
            || {
                let claim = cluster.nodeclaim("default-held")?;
                claim
                    .status?
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "InstanceTerminating" && c.status == "True")
                    .then_some(())
            },
        )
        .await;
    assert!(
        cluster.provider.instances().is_empty(),
        "instance terminated"
    );
    assert!(
        cluster.node(&node).is_some(),
        "the other finalizer holds the Node"
    );

    let mut released = cluster.node(&node).unwrap();
    released.metadata.finalizers = None;
    cluster.server.put(&released).unwrap();
    cluster
        .eventually("nodeclaim gone", Duration::from_secs(60), || {
            cluster.nodeclaim("default-held").is_none().then_some(())
        })
        .await;
    controller.stop().await;
    cluster.shutdown().await;
}
