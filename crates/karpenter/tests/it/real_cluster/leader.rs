//! Leader election and restarts of `karpenter controller` processes on the real API server: two
//! replicas share the Lease, the standby takes over when the leader is killed and carries on; a
//! controller killed in the middle of a launch and started again leaves no instance behind (the sim
//! ledger's instances are exactly the NodeClaims').

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::{Api, Client};

use super::objects::{DEFAULT_NODECLASS, apply, nodeclaims, nodes, pods, running, scale};
use super::{LAUNCH, eventually, karpenter_binary, options, repo_root};

const LEASE: &str = "karpenter-leader-election";

async fn holder(client: &Client, ns: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(LEASE)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// The sim ledger's instance ConfigMaps (`karpenter-sim-instance-<id>`) in the controller's namespace.
async fn ledger_instances(client: &Client, ns: &str) -> usize {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("karpenter-sim/ledger=instance"))
        .await
        .unwrap()
        .items
        .len()
}

fn inflate(ns: &str, replicas: u32) -> String {
    std::fs::read_to_string(repo_root().join("examples/inflate/inflate.yaml"))
        .unwrap()
        .replace("namespace: default", &format!("namespace: {ns}"))
        .replace("replicas: 5", &format!("replicas: {replicas}"))
}

fn nodepool() -> String {
    std::fs::read_to_string(repo_root().join("examples/inflate/nodepool.yaml")).unwrap()
}

async fn running_count(client: &Client, ns: &str) -> usize {
    pods(client, ns, "app=inflate")
        .await
        .iter()
        .filter(|p| running(p))
        .count()
}

#[tokio::test]
async fn the_standby_replica_takes_over_when_the_leader_is_killed() {
    let Some(cluster) = super::cluster("leader-takeover").await else {
        return;
    };
    let client = cluster.client();
    let ns = cluster.namespace().to_string();
    let mut first = cluster
        .start_karpenter(karpenter_binary(), &options().name("replica-a"))
        .unwrap();
    let leader = eventually("replica-a to hold the Lease", LAUNCH, || {
        let (client, ns) = (client.clone(), ns.clone());
        async move { holder(&client, &ns).await }
    })
    .await
    .unwrap();
    assert_eq!(leader, "replica-a");
    let _second = cluster
        .start_karpenter(karpenter_binary(), &options().name("replica-b"))
        .unwrap();

    apply(&client, &ns, DEFAULT_NODECLASS).await;
    apply(&client, &ns, &nodepool()).await;
    apply(&client, &ns, &inflate(&ns, 3)).await;
    eventually("3 pods Running under replica-a", LAUNCH, || {
        let (client, ns) = (client.clone(), ns.clone());
        async move { (running_count(&client, &ns).await == 3).then_some(()) }
    })
    .await
    .unwrap();
    assert_eq!(holder(&client, &ns).await.as_deref(), Some("replica-a"));

    first.kill();
    // The Lease lasts 15 s (upstream's default); the standby retries every 2 s.
    eventually("replica-b to take the Lease", Duration::from_secs(40), || {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            (holder(&client, &ns).await.as_deref() == Some("replica-b")).then_some(())
        }
    })
    .await
    .unwrap();
    scale(&client, &ns, "inflate", 12).await;
    eventually("12 pods Running under replica-b", LAUNCH, || {
        let (client, ns) = (client.clone(), ns.clone());
        async move { (running_count(&client, &ns).await == 12).then_some(()) }
    })
    .await
    .unwrap();
    let claims = nodeclaims(&client).await.len();
    assert_eq!(claims, nodes(&client).await.len());
    assert_eq!(claims, ledger_instances(&client, &ns).await);
}

#[tokio::test]
async fn a_controller_killed_during_a_launch_leaves_no_instance_behind_after_its_restart() {
    let Some(cluster) = super::cluster("restart-mid-launch").await else {
        return;
    };
    let client = cluster.client();
    let ns = cluster.namespace().to_string();
    let mut first = cluster
        .start_karpenter(karpenter_binary(), &options())
        .unwrap();
    apply(&client, &ns, DEFAULT_NODECLASS).await;
    apply(&client, &ns, &nodepool()).await;
    apply(&client, &ns, &inflate(&ns, 20)).await;
    // Killed as soon as the first NodeClaim exists: its launch is in flight, its Node may not be.
    eventually("a first NodeClaim", LAUNCH, || {
        let client = client.clone();
        async move { (!nodeclaims(&client).await.is_empty()).then_some(()) }
    })
    .await
    .unwrap();
    first.kill();
    let _second = cluster
        .start_karpenter(karpenter_binary(), &options().name("karpenter-restarted"))
        .unwrap();
    eventually("20 pods Running after the restart", LAUNCH, || {
        let (client, ns) = (client.clone(), ns.clone());
        async move { (running_count(&client, &ns).await == 20).then_some(()) }
    })
    .await
    .unwrap();
    // Settled: every instance is a NodeClaim with its Node, and nothing else.
    eventually(
        "the ledger's instances to be the NodeClaims'",
        Duration::from_secs(30),
        || {
            let (client, ns) = (client.clone(), ns.clone());
            async move {
                let claims = nodeclaims(&client).await.len();
                (claims == nodes(&client).await.len()
                    && claims == ledger_instances(&client, &ns).await)
                    .then_some(())
            }
        },
    )
    .await
    .unwrap();
}
