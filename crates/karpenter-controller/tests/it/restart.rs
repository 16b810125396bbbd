//! Restarts: nothing is left behind when the controller is killed during a teardown.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): kills at exact instants of a teardown, in
//! virtual time.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_controller::provisioning::solver::NoScheduler;
use karpenter_controller::run::{Options, ProviderTask, RunningController};
use karpenter_controller::{Context, Settings};
use karpenter_sim::SimCloudProvider;
use karpenter_sim::cluster::{SimCloud, SimKubeletOptions};
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use crate::sim_cluster::SimCluster;

/// A controller process with the sim cloud restored from its ledger ConfigMap, as
/// `karpenter controller --cloud-provider sim` starts.
async fn start_process(cluster: &SimCluster) -> (RunningController, SimCloudProvider) {
    let sim = cluster.another_process_cloud();
    let cloud = SimCloud::restore(
        cluster.client.clone(),
        sim.clone(),
        "kube-system",
        cluster.clock.clone(),
        SimKubeletOptions {
            emulate_node_lifecycle: true,
            ..SimKubeletOptions::default()
        },
    )
    .await
    .unwrap();
    let settings = Settings {
        disable_leader_election: true,
        ..Settings::default()
    };
    let (ctx, batcher) = Context::new(
        cluster.client.clone(),
        settings,
        cloud.cloud_provider(),
        Arc::new(NoScheduler),
        cluster.clock.clone(),
    );
    let running = RunningController::start(
        ctx,
        batcher,
        Options {
            provider_tasks: vec![sim_kubelet_task(cloud)],
            ..Options::default()
        },
    )
    .await
    .unwrap();
    (running, sim)
}

/// The sim cloud's task, wired as the binary wires it (`commands/controller.rs`).
fn sim_kubelet_task(cloud: SimCloud) -> ProviderTask {
    ProviderTask::new("sim kubelet", move |cx| {
        cloud.follow_leadership(cx.leadership.clone());
        cloud.run(cx.leadership, cx.shutdown)
    })
}

fn ledger_instances(cluster: &SimCluster) -> usize {
    crate::support::stored_sim_instances(&cluster.server, "kube-system").len()
}

#[tokio::test(start_paused = true)]
async fn killed_during_teardown_then_restarted_leaves_nothing_behind() {
    const CLAIMS: usize = 12;
    let mut cluster = SimCluster::new().await;
    cluster.stop_kubelet().await;
    cluster.put_default_nodepool();
    let (first, first_sim) = start_process(&cluster).await;
    for i in 0..CLAIMS {
        cluster
            .create_nodeclaim(&format!("claim-{i}"), serde_json::json!({}))
            .await;
    }
    cluster
        .eventually(
            "NodeClaims Ready, Leases heartbeating",
            Duration::from_secs(60),
            || {
                let claims = cluster.server.list::<NodeClaim>();
                (claims.len() == CLAIMS
                    && claims.iter().all(NodeClaim::is_ready)
                    && cluster.server.count::<Lease>() == CLAIMS)
                    .then_some(())
            },
        )
        .await;
    assert_eq!(ledger_instances(&cluster), CLAIMS);
    let leases = cluster.server.list::<Lease>();
    assert!(
        leases
            .iter()
            .all(|l| l.owner_references().iter().any(|o| o.kind == "Node")),
        "every node Lease is owned by its Node"
    );

    let api: Api<NodeClaim> = Api::all(cluster.client.clone());
    for i in 0..CLAIMS {
        api.delete(&format!("claim-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    // Kill the process as soon as the teardown is under way, before it finished.
    cluster
        .eventually("teardown under way", Duration::from_secs(60), || {
            let deleting_nodes = cluster
                .server
                .list::<Node>()
                .iter()
                .filter(|n| n.metadata.deletion_timestamp.is_some())
                .count();
            (deleting_nodes > 0 || first_sim.instances().len() < CLAIMS).then_some(())
        })
        .await;
    assert!(
        cluster.server.count::<NodeClaim>() > 0,
        "killed mid-teardown, not after it"
    );
    first.abort();

    let (second, second_sim) = start_process(&cluster).await;
    cluster
        .eventually("everything gone", Duration::from_secs(120), || {
            (cluster.server.count::<NodeClaim>() == 0
                && cluster.server.count::<Node>() == 0
                && cluster.server.count::<Lease>() == 0
                && second_sim.instances().is_empty()
                && ledger_instances(&cluster) == 0)
                .then_some(())
        })
        .await;
    // And it stays so: no Node re-registered for an instance that was being deleted.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        cluster.server.count::<Node>(),
        0,
        "{:?}",
        cluster
            .server
            .list::<Node>()
            .iter()
            .map(|n| n.name_any())
            .collect::<Vec<_>>()
    );
    assert_eq!(cluster.server.count::<Lease>(), 0);
    second.stop().await;
    cluster.shutdown().await;
}

/// A pass right after a restart knows no nominations: the NodeClaims created before it (not
/// launched yet) must count as the capacity they were created for, not be provisioned again.
#[tokio::test(start_paused = true)]
async fn a_restart_does_not_provision_again_for_unlaunched_nodeclaims() {
    let cluster = SimCluster::with_catalogue("us-east-1").await;
    cluster.put_default_nodepool();
    // Launches keep failing (retryable), so the NodeClaims stay unlaunched with no capacity.
    cluster.provider.fail_next_creates(
        10_000,
        karpenter_core::cloud_provider::CloudError::Create {
            reason: "RequestLimitExceeded".into(),
            message: "slow down".into(),
        },
    );
    let first = cluster
        .start_controller_with(Arc::new(karpenter_controller::provisioning::CoreScheduler))
        .await;
    for i in 0..6 {
        cluster
            .server
            .put(&crate::sim_cluster::inflate_pod(i))
            .unwrap();
    }
    let created = cluster
        .eventually("NodeClaims created", Duration::from_secs(15), || {
            let count = cluster.server.count::<NodeClaim>();
            (count > 0).then_some(count)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(cluster.server.count::<NodeClaim>(), created);
    first.abort();

    let second = cluster
        .start_controller_with(Arc::new(karpenter_controller::provisioning::CoreScheduler))
        .await;
    // Several passes: the first after sync, then the 10 s re-triggers.
    tokio::time::sleep(Duration::from_secs(45)).await;
    let claims = cluster.server.list::<NodeClaim>();
    assert_eq!(
        claims.len(),
        created,
        "no second NodeClaim for the same pods: {:?}",
        claims.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    assert!(
        claims
            .iter()
            .all(|c| c.status.as_ref().is_none_or(|s| s.provider_id.is_none()))
    );
    second.stop().await;
    cluster.shutdown().await;
}

/// Until the NodeClaim (and every other) cache has listed, a pass provisions nothing: it could
/// not see the in-flight NodeClaims that already cover the pods.
#[tokio::test(start_paused = true)]
async fn no_provisioning_before_the_nodeclaim_cache_synced() {
    use karpenter_core::state::Kind;
    let cluster = SimCluster::with_catalogue("us-east-1").await;
    cluster.put_default_nodepool();
    let settings = Settings {
        disable_leader_election: true,
        ..Settings::default()
    };
    let (ctx, _batcher) = Context::new(
        cluster.client.clone(),
        settings,
        Arc::new(cluster.provider.clone()),
        Arc::new(karpenter_controller::provisioning::CoreScheduler),
        cluster.clock.clone(),
    );
    {
        let mut state = ctx.state.write();
        state.reset(vec![crate::sim_cluster::inflate_pod(0)]);
        for kind in Kind::ALL.into_iter().filter(|k| *k != Kind::NodeClaim) {
            state.mark_listed(kind);
        }
    }
    let outcome = karpenter_controller::provisioning::provision(&ctx)
        .await
        .unwrap();
    assert!(outcome.waiting_for_sync);
    assert!(outcome.created.is_empty());
    assert_eq!(cluster.server.count::<NodeClaim>(), 0);
    cluster.shutdown().await;
}
