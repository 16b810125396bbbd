//! The seed guide's flow end to end with the production scheduler (`CoreScheduler`) and the sim
//! provider's embedded us-east-1 catalogue: `inflate` scaled 0 → 5 → 12 → 0, then its NodeClaims
//! deleted. Pods are bound by the test binder (the test API server runs no kube-scheduler).
//!
//! Stays on `karpenter-testapi` (docs/testing.md): virtual time; its real-cluster counterpart is
//! `karpenter/tests/it/real_cluster/inflate.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::well_known as wk;
use karpenter_controller::provisioning::CoreScheduler;
use karpenter_core::pod::Pod;
use karpenter_core::pod::effective_requests as pod_requests;
use karpenter_core::pod::node_name;
use karpenter_core::resources::{Quantity, ResourceList};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};

use crate::sim_cluster::{SimCluster, bind_pending, inflate_pod};

/// One batch window: idle 1 s, at most 10 s, plus a poll.
const BATCH_WINDOW: Duration = Duration::from_secs(11);

fn catalogue_names(cluster: &SimCluster) -> BTreeSet<String> {
    cluster
        .provider
        .catalog_types()
        .map(|t| t.name.clone())
        .collect()
}

fn instance_type_options(claim: &NodeClaim) -> Vec<String> {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == wk::INSTANCE_TYPE_LABEL)
        .map(|r| r.values.to_vec())
        .unwrap_or_default()
}

fn requested_cpu_millis(claim: &NodeClaim) -> i64 {
    let requests = claim.spec.resources.as_ref().unwrap();
    Quantity::parse(&requests.requests["cpu"].0)
        .unwrap()
        .millis()
}

fn names<K: ResourceExt>(objects: &[K]) -> BTreeSet<String> {
    objects.iter().map(ResourceExt::name_any).collect()
}

/// Whole 1-cpu pods that still fit on the cluster's nodes, by allocatable minus bound requests.
fn free_one_cpu_slots(cluster: &SimCluster) -> i64 {
    let mut used: BTreeMap<String, i64> = BTreeMap::new();
    for pod in cluster.server.list::<Pod>() {
        if let Some(node) = node_name(&pod) {
            let cpu = pod_requests(&pod).map(|r| r.get("cpu").millis());
            *used.entry(node.to_string()).or_default() += cpu.unwrap_or(0);
        }
    }
    cluster
        .server
        .list::<Node>()
        .iter()
        .map(|node| {
            let allocatable = node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .map(|a| ResourceList::from_k8s(a).unwrap().get("cpu").millis())
                .unwrap_or(0);
            (allocatable - used.get(&node.name_any()).copied().unwrap_or(0)) / 1000
        })
        .sum()
}

/// Binds pending pods until every pod is Running on an initialized node.
async fn all_running_on_initialized_nodes(cluster: &SimCluster, expected: usize) {
    cluster
        .eventually(
            &format!("{expected} inflate pods bound and Running"),
            Duration::from_secs(120),
            || {
                bind_pending(cluster);
                let pods = cluster.server.list::<Pod>();
                (pods.len() == expected
                    && pods.iter().all(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    }))
                .then_some(())
            },
        )
        .await;
    for pod in cluster.server.list::<Pod>() {
        let node_name = node_name(&pod).unwrap().to_string();
        let node = cluster.node(&node_name).unwrap();
        assert_eq!(
            node.labels()
                .get(wk::NODE_INITIALIZED_LABEL)
                .map(String::as_str),
            Some("true"),
            "{} runs on uninitialized node {node_name}",
            pod.name_any()
        );
    }
}

/// Every claim offers only catalogue types, and its node and instance run one of them.
fn assert_catalogue_types(cluster: &SimCluster, claims: &[NodeClaim]) {
    let catalogue = catalogue_names(cluster);
    let instances = cluster.provider.instances();
    for claim in claims {
        let options = instance_type_options(claim);
        assert!(!options.is_empty(), "{} offers no types", claim.name_any());
        for option in &options {
            assert!(
                catalogue.contains(option),
                "{option} is not in the catalogue"
            );
        }
        let instance = instances
            .iter()
            .find(|i| i.node_claim == claim.name_any())
            .unwrap_or_else(|| panic!("no instance for {}", claim.name_any()));
        assert!(
            options.contains(&instance.instance_type),
            "launched {} outside {options:?}",
            instance.instance_type
        );
        let node = cluster.node(&instance.node_name).unwrap();
        assert_eq!(
            node.labels()[wk::INSTANCE_TYPE_LABEL],
            instance.instance_type
        );
    }
}

#[tokio::test(start_paused = true)]
async fn inflate_0_5_12_0_with_the_real_scheduler_and_catalogue() {
    let cluster = SimCluster::with_catalogue("us-east-1").await;
    cluster.put_default_nodepool();
    // Upstream's seed flow pins upstream's packing (the first nodes keep room for the fill-first
    // step); the default, CostOptimal, fills them exactly (docs/conformance.md).
    let settings = karpenter_controller::Settings {
        packing_policy: karpenter_core::scheduling::PackingPolicy::Upstream,
        ..karpenter_controller::Settings::default()
    };
    let controller = cluster
        .start_controller_with_settings(Arc::new(CoreScheduler), settings)
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 0 → 5: NodeClaims within one batch window, of real catalogue types.
    let scaled_at = tokio::time::Instant::now();
    for i in 0..5 {
        cluster.server.put(&inflate_pod(i)).unwrap();
    }
    cluster
        .eventually("NodeClaims for 5 pods", BATCH_WINDOW, || {
            (cluster.server.count::<NodeClaim>() > 0).then_some(())
        })
        .await;
    assert!(scaled_at.elapsed() <= BATCH_WINDOW);
    all_running_on_initialized_nodes(&cluster, 5).await;
    let first_claims = cluster.server.list::<NodeClaim>();
    let first_cpu: i64 = first_claims.iter().map(requested_cpu_millis).sum();
    assert!(
        first_cpu >= 5_000,
        "every pod's cpu is requested: {first_cpu}"
    );
    assert!(first_claims.iter().all(NodeClaim::is_ready));
    assert!(first_claims.iter().all(|c| {
        c.finalizers()
            .iter()
            .any(|f| f == wk::TERMINATION_FINALIZER)
    }));
    assert_eq!(cluster.server.count::<Node>(), first_claims.len());
    assert_eq!(cluster.provider.instances().len(), first_claims.len());
    assert_catalogue_types(&cluster, &first_claims);

    // 5 → 12: the scheduler fills the existing nodes first; only the rest get new NodeClaims.
    let free_slots = free_one_cpu_slots(&cluster);
    assert!(
        (1..7).contains(&free_slots),
        "the first nodes have some room left ({free_slots} cpu), so the fill-first rule is exercised"
    );
    let expected_new_pods = 7 - free_slots;
    let scaled_at = cluster.now();
    for i in 5..12 {
        cluster.server.put(&inflate_pod(i)).unwrap();
    }
    // Held binder: let one whole batch window pass so the scheduler sees all 7 pods pending.
    tokio::time::sleep(BATCH_WINDOW).await;
    let claims = cluster.server.list::<NodeClaim>();
    let first_names = names(&first_claims);
    let new_claims: Vec<NodeClaim> = claims
        .into_iter()
        .filter(|c| !first_names.contains(&c.name_any()))
        .collect();
    let new_cpu: i64 = new_claims.iter().map(requested_cpu_millis).sum();
    assert_eq!(
        new_cpu,
        expected_new_pods * 1000,
        "{free_slots} of the 7 pods fit on existing nodes; only the rest are provisioned for"
    );
    let created = new_claims
        .iter()
        .filter_map(|c| c.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
        .max()
        .unwrap();
    let within = created.duration_since(scaled_at);
    assert!(
        within <= jiff::SignedDuration::try_from(BATCH_WINDOW).unwrap(),
        "new NodeClaims after {within:?}, beyond one batch window"
    );
    all_running_on_initialized_nodes(&cluster, 12).await;
    let claims = cluster.server.list::<NodeClaim>();
    assert_eq!(
        claims.len(),
        first_claims.len() + new_claims.len(),
        "binding created no further NodeClaims"
    );
    assert!(claims.iter().all(NodeClaim::is_ready));
    assert_catalogue_types(&cluster, &claims);

    // 12 → 0, then delete the NodeClaims: everything drains away and the finalizers let go.
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=inflate"),
    )
    .await
    .unwrap();
    let claims_api: Api<NodeClaim> = Api::all(cluster.client.clone());
    for claim in &claims {
        claims_api
            .delete(&claim.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    }
    cluster
        .eventually(
            "NodeClaims, Nodes and instances gone",
            Duration::from_secs(300),
            || {
                (cluster.server.count::<NodeClaim>() == 0
                    && cluster.server.count::<Node>() == 0
                    && cluster.server.count::<Pod>() == 0
                    && cluster.provider.instances().is_empty())
                .then_some(())
            },
        )
        .await;
    // Gone from the server means no finalizer was left holding them.
    for claim in &claims {
        assert!(cluster.nodeclaim(&claim.name_any()).is_none());
        let node = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap();
        assert!(cluster.node(&node).is_none());
    }
    controller.stop().await;
    cluster.shutdown().await;
}
