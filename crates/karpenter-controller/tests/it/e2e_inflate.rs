//! End to end on the sim provider: the seed guide's `inflate` flow. Ten pending pods → one
//! provisioning batch → NodeClaims → Nodes registered and initialized by the sim kubelet → pods
//! bound (by a tiny test binder: the test API server runs no kube-scheduler) → scale to zero and
//! delete the NodeClaims → drained and gone.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): virtual time; its real-cluster counterpart is
//! `karpenter/tests/it/real_cluster/inflate.rs`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::v1::NodeSelectorRequirementWithMinValues;
use karpenter_api::well_known as wk;
use karpenter_controller::provisioning::Solver;
use karpenter_core::pod::Pod;
use karpenter_core::pod::effective_requests as pod_requests;
use karpenter_core::resources::{Quantity, ResourceList};
use karpenter_core::scheduling::{
    InstanceTypeOption, NewNodeClaim, SchedulerInput, SchedulingResults,
};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};

use crate::sim_cluster::{SimCluster, bind_pending, inflate_pod};

const PODS_PER_NODE: usize = 3;

/// A stand-in scheduler: packs the pods, in order, three to a `sim.xlarge` NodeClaim of the
/// first NodePool. (The real scheduler has its own tests; this one exercises the plumbing.)
struct PackThree;

impl Solver for PackThree {
    fn solve(&self, input: SchedulerInput, pods: &[Arc<Pod>]) -> SchedulingResults {
        let Some(pool) = input.node_pools.first() else {
            return SchedulingResults::default();
        };
        let mut out = SchedulingResults::default();
        let indices: Vec<usize> = (0..pods.len()).collect();
        for (n, chunk) in indices.chunks(PODS_PER_NODE).enumerate() {
            let mut requests = ResourceList::new();
            for &i in chunk {
                requests.add(&pod_requests(&pods[i]).unwrap_or_default());
            }
            requests.set(
                "pods",
                Quantity::from_units(i64::try_from(chunk.len()).unwrap_or(1)),
            );
            out.new_node_claims.push(NewNodeClaim {
                node_pool: pool.name.clone(),
                hostname: format!("hostname-placeholder-{n}"),
                requirements: vec![NodeSelectorRequirementWithMinValues {
                    key: wk::CAPACITY_TYPE_LABEL.into(),
                    operator: "In".into(),
                    values: vec!["on-demand".to_string()].into(),
                    min_values: None,
                }],
                instance_type_min_values: None,
                instance_types: Arc::from(vec![InstanceTypeOption {
                    name: Arc::from("sim.xlarge"),
                    price: 0.0,
                }]),
                pods: chunk.to_vec(),
                requests,
                labels: Default::default(),
                taints: Vec::new(),
                startup_taints: Vec::new(),
                min_values_relaxed: false,
                overlay_applied: Default::default(),
            });
        }
        out
    }
}

#[tokio::test(start_paused = true)]
async fn inflate_scale_up_and_down() {
    let cluster = SimCluster::new().await;
    cluster.put_default_nodepool();
    let controller = cluster.start_controller_with(Arc::new(PackThree)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let scaled_at = cluster.now();
    for i in 0..10 {
        cluster.server.put(&inflate_pod(i)).unwrap();
    }
    // One batch window (idle 1 s, at most 10 s) → ceil(10 / 3) NodeClaims.
    cluster
        .eventually("nodeclaims created", Duration::from_secs(11), || {
            (cluster.server.count::<NodeClaim>() == 4).then_some(())
        })
        .await;
    let within = cluster.now().duration_since(scaled_at);
    assert!(
        within <= jiff::SignedDuration::from_secs(11),
        "created after {within:?}"
    );

    cluster
        .eventually(
            "all pods bound and Running",
            Duration::from_secs(60),
            || {
                bind_pending(&cluster);
                let pods = cluster.server.list::<Pod>();
                pods.iter()
                    .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                    .then_some(())
            },
        )
        .await;
    let claims = cluster.server.list::<NodeClaim>();
    assert_eq!(claims.len(), 4, "no extra NodeClaims");
    assert!(claims.iter().all(NodeClaim::is_ready));
    assert_eq!(cluster.server.count::<Node>(), 4);
    assert_eq!(cluster.provider.instances().len(), 4);
    assert!(
        cluster
            .provider
            .instances()
            .iter()
            .all(|i| i.instance_type == "sim.xlarge")
    );

    // Scale to zero, then delete the NodeClaims.
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=inflate"),
    )
    .await
    .unwrap();
    let claims_api: Api<NodeClaim> = Api::all(cluster.client.clone());
    for claim in claims {
        claims_api
            .delete(&claim.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    }
    cluster
        .eventually("everything gone", Duration::from_secs(120), || {
            (cluster.server.count::<NodeClaim>() == 0
                && cluster.server.count::<Node>() == 0
                && cluster.server.count::<Pod>() == 0
                && cluster.provider.instances().is_empty())
            .then_some(())
        })
        .await;
    controller.stop().await;
    cluster.shutdown().await;
}
