//! The sim kubelet: node registration, Lease heartbeats, dead nodes, pod start and deletion, and
//! the persisted ledger.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): virtual time: Lease heartbeats and dead nodes at
//! exact instants.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use karpenter_api::NodeClaim;
use karpenter_core::cloud_provider::CloudProvider;
use karpenter_core::pod::Pod;
use karpenter_sim::SimCloudProvider;
use karpenter_sim::cluster::{LEDGER_CONFIGMAP, LedgerStore, PersistentSimProvider};
use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;

use karpenter_testapi::Verb;

use crate::sim_cluster::{SIM_KUBELET_CLIENT, SimCluster};

fn ready_status(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

fn claim(name: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn registers_nodes_heartbeats_and_dies_when_stopped() {
    let cluster = SimCluster::new().await;
    let launched = cluster.provider.create(&claim("a")).await.unwrap();
    let provider_id = launched.status.unwrap().provider_id.unwrap();
    let name = cluster.provider.instances()[0].node_name.clone();
    let node = cluster
        .eventually("node registered", Duration::from_secs(5), || {
            cluster.node(&name)
        })
        .await;
    assert_eq!(
        node.spec.as_ref().unwrap().provider_id.as_deref(),
        Some(provider_id.as_str())
    );
    assert_eq!(ready_status(&node), "True");
    let lease: Lease = cluster
        .eventually("lease", Duration::from_secs(5), || {
            cluster.server.get::<Lease>(Some("kube-node-lease"), &name)
        })
        .await;
    let first_renewal = lease.spec.unwrap().renew_time.unwrap().0;

    tokio::time::sleep(Duration::from_secs(30)).await;
    let renewed = cluster
        .server
        .get::<Lease>(Some("kube-node-lease"), &name)
        .unwrap()
        .spec
        .unwrap()
        .renew_time
        .unwrap()
        .0;
    assert!(renewed > first_renewal, "heartbeats keep the lease fresh");
    assert_eq!(ready_status(&cluster.node(&name).unwrap()), "True");

    cluster.kubelet.stop_heartbeats(&name);
    let dead = cluster
        .eventually("node unreachable", Duration::from_secs(60), || {
            cluster.node(&name).filter(|n| ready_status(n) == "Unknown")
        })
        .await;
    let taints = dead.spec.unwrap().taints.unwrap();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute")
    );

    cluster.kubelet.resume_heartbeats(&name);
    let healed = cluster
        .eventually("node Ready again", Duration::from_secs(30), || {
            cluster.node(&name).filter(|n| ready_status(n) == "True")
        })
        .await;
    let taints = healed.spec.unwrap().taints.unwrap_or_default();
    assert!(
        !taints
            .iter()
            .any(|t| t.key == "node.kubernetes.io/unreachable"),
        "{taints:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn runs_pods_and_finishes_their_deletion() {
    let cluster = SimCluster::new().await;
    cluster.provider.create(&claim("a")).await.unwrap();
    let name = cluster.provider.instances()[0].node_name.clone();
    cluster
        .eventually("node registered", Duration::from_secs(5), || {
            cluster.node(&name)
        })
        .await;
    cluster
        .bound_pod(
            "app-0",
            &name,
            json!({"spec": {"terminationGracePeriodSeconds": 600}}),
        )
        .await;
    let pod: Pod = cluster
        .eventually("pod Running", Duration::from_secs(5), || {
            cluster
                .pod("app-0")
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        })
        .await;
    let conditions = pod.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );

    // A graceful delete would wait 10 minutes for a kubelet; the sim kubelet finishes it now.
    Api::<Pod>::namespaced(cluster.client.clone(), "default")
        .delete("app-0", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        cluster.pod("app-0").is_some(),
        "terminating, held for the kubelet"
    );
    cluster
        .eventually("pod gone", Duration::from_secs(5), || {
            cluster.pod("app-0").is_none().then_some(())
        })
        .await;
    cluster.shutdown().await;
}

/// The kubelet follows the cluster through watches: once a node runs its pods, a quiet cluster
/// costs it no LIST (it used to list every pod, Node, NodeClaim and Lease every second, holding
/// each whole decoded list) and no pod reads, only its Lease heartbeats, one request each.
#[tokio::test(start_paused = true)]
async fn steady_state_needs_no_lists() {
    let cluster = SimCluster::new().await;
    cluster.provider.create(&claim("a")).await.unwrap();
    let name = cluster.provider.instances()[0].node_name.clone();
    cluster
        .eventually("node registered", Duration::from_secs(5), || {
            cluster.node(&name)
        })
        .await;
    cluster.bound_pod("app-0", &name, json!({})).await;
    cluster
        .eventually("pod Running", Duration::from_secs(5), || {
            cluster
                .pod("app-0")
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    cluster.server.clear_requests();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let kubelet: Vec<_> = cluster
        .server
        .requests()
        .into_iter()
        .filter(|r| r.client.as_deref() == Some(SIM_KUBELET_CLIENT))
        .collect();
    let lists: Vec<_> = kubelet.iter().filter(|r| r.verb == Verb::List).collect();
    assert!(lists.is_empty(), "{lists:#?}");
    let pod_requests: Vec<_> = kubelet.iter().filter(|r| r.resource == "pods").collect();
    assert!(pod_requests.is_empty(), "{pod_requests:#?}");
    let lease_requests: Vec<_> = kubelet.iter().filter(|r| r.resource == "leases").collect();
    let heartbeats = lease_requests
        .iter()
        .filter(|r| r.verb == Verb::Patch)
        .count();
    assert!(
        (2..=4).contains(&heartbeats),
        "one Lease renewal per 10 s: {heartbeats}"
    );
    // One request per renewal (a patch, no read first): at 1,500 nodes every request counts.
    assert_eq!(lease_requests.len(), heartbeats, "{lease_requests:#?}");
    assert_eq!(ready_status(&cluster.node(&name).unwrap()), "True");
    cluster.shutdown().await;
}

/// Every node's kubelet works on its own: pods slow to start do not hold up the node's Lease
/// heartbeat. In one pass for everything, a 10,000-pod burst's pod starts kept 1,500 nodes'
/// Leases from being renewed for minutes, the node-lifecycle controller marked the nodes
/// unreachable, and nothing more was scheduled on them.
#[tokio::test(start_paused = true)]
async fn slow_pod_starts_do_not_hold_up_the_heartbeats() {
    let cluster = SimCluster::new().await;
    cluster.provider.create(&claim("a")).await.unwrap();
    let name = cluster.provider.instances()[0].node_name.clone();
    cluster
        .eventually("node registered", Duration::from_secs(5), || {
            cluster.node(&name)
        })
        .await;
    // Each pod's Running status is answered 8 s late: 256 pods take a minute to start.
    const PODS: usize = 256;
    cluster.server.delay_response(
        Some(Verb::Update),
        "pods/status",
        Duration::from_secs(8),
        PODS,
    );
    for i in 0..PODS {
        cluster
            .bound_pod(&format!("app-{i}"), &name, json!({}))
            .await;
    }
    let renew_time = || {
        cluster
            .server
            .get::<Lease>(Some("kube-node-lease"), &name)
            .and_then(|l| l.spec?.renew_time)
            .map(|t| t.0)
    };
    let mut renewals = std::collections::BTreeSet::new();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        renewals.insert(renew_time());
        assert_eq!(ready_status(&cluster.node(&name).unwrap()), "True");
    }
    assert!(
        renewals.len() >= 5,
        "the Lease is renewed every 10 s while the pods start: {renewals:?}"
    );
    cluster
        .eventually("every pod Running", Duration::from_secs(120), || {
            (0..PODS)
                .all(|i| {
                    cluster.pod(&format!("app-{i}")).is_some_and(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                })
                .then_some(())
        })
        .await;
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn ledger_survives_a_restart_through_the_configmap() {
    let cluster = SimCluster::new().await;
    let store = LedgerStore::new(cluster.client.clone(), "kube-system");
    let provider = PersistentSimProvider::new(cluster.provider.clone(), store);
    let launched = provider.create(&claim("a")).await.unwrap();
    let stored = crate::support::stored_sim_instances(&cluster.server, "kube-system");
    assert_eq!(stored.len(), 1, "one ConfigMap per instance");
    assert!(stored[0].contains("uid-a"));

    // A new process: an empty cloud, restored from the ConfigMap.
    let restarted = cluster.another_process_cloud();
    let store = LedgerStore::new(cluster.client.clone(), "kube-system");
    assert!(store.restore(&restarted).await.unwrap());
    assert_eq!(restarted.instances(), cluster.provider.instances());
    let again = PersistentSimProvider::new(restarted.clone(), store)
        .create(&claim("a"))
        .await
        .unwrap();
    assert_eq!(
        again.status.unwrap().provider_id,
        launched.status.unwrap().provider_id,
        "create stays idempotent"
    );
    assert_eq!(restarted.instances().len(), 1);

    // A corrupt ledger is a clear error naming the ConfigMap, not a panic.
    let mut cm: ConfigMap = cluster
        .server
        .get(Some("kube-system"), LEDGER_CONFIGMAP)
        .unwrap();
    cm.data = Some([("ledger.json".to_string(), "not json".to_string())].into());
    cluster.server.put(&cm).unwrap();
    let fresh = SimCloudProvider::with_instance_types(
        "us-west-2",
        Vec::new(),
        Arc::new(karpenter_core::clock::FakeClock::default()),
    );
    let err = LedgerStore::new(cluster.client.clone(), "kube-system")
        .restore(&fresh)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(LEDGER_CONFIGMAP), "{err}");
    cluster.shutdown().await;
}

/// Two replicas, each with its own in-memory sim: the follower reloads the ledger the leader
/// wrote when it takes over, so it can terminate the leader's instances (and does not reuse
/// their sequence numbers for new ones).
#[tokio::test(start_paused = true)]
async fn a_new_leader_reloads_the_ledger_its_predecessor_wrote() {
    let cluster = SimCluster::new().await;
    let replica = |sim: SimCloudProvider| {
        PersistentSimProvider::new(sim, LedgerStore::new(cluster.client.clone(), "kube-system"))
    };
    let leader = replica(cluster.provider.clone());
    let follower_sim = cluster.another_process_cloud();
    let follower = replica(follower_sim.clone());
    let (leadership, rx) = tokio::sync::watch::channel(false);
    follower.follow_leadership(rx);

    // Started before the leader launched anything: its in-memory cloud is empty.
    let launched = leader.create(&claim("a")).await.unwrap();
    assert!(follower_sim.instances().is_empty());

    leadership.send_replace(true);
    let provider_id = launched.status.unwrap().provider_id.unwrap();
    assert!(
        follower.get(&provider_id).await.is_ok(),
        "reloaded on takeover"
    );
    let second = follower.create(&claim("b")).await.unwrap();
    assert_ne!(second.status.unwrap().provider_id.unwrap(), provider_id);
    follower.delete(&claim("a")).await.unwrap();
    let ledger = crate::support::stored_sim_instances(&cluster.server, "kube-system").join("\n");
    assert!(
        !ledger.contains("uid-a") && ledger.contains("uid-b"),
        "{ledger}"
    );
    cluster.shutdown().await;
}

/// The ledger keeps one ConfigMap per instance besides a small head: a cloud of 400 instances
/// (over 1 MiB of instance JSON: more than the API server takes in one ConfigMap) is
/// stored, a launch writes only its own instance (and the head), and a restart reads it all.
#[tokio::test(start_paused = true)]
async fn a_large_cloud_fits_the_api_servers_configmap_limit_and_a_launch_writes_one_instance() {
    const INSTANCES: usize = 400;
    let cluster = SimCluster::new().await;
    let store = LedgerStore::new(cluster.client.clone(), "kube-system");
    let provider = PersistentSimProvider::new(cluster.provider.clone(), store);
    for i in 0..INSTANCES {
        // Labels as a NodePool template brings them (the instance keeps its node's labels).
        let mut c = claim(&format!("c{i}"));
        for l in 0..16 {
            c.metadata.labels.get_or_insert_default().insert(
                format!("example.com/team-label-{l}"),
                format!("{l}-{}", "v".repeat(100)),
            );
        }
        provider.create(&c).await.unwrap();
    }
    let stored = crate::support::stored_sim_instances(&cluster.server, "kube-system");
    assert_eq!(stored.len(), INSTANCES);
    let bytes: usize = stored.iter().map(String::len).sum();
    assert!(
        bytes > karpenter_testapi::MAX_CONFIG_MAP_BYTES,
        "the instances ({bytes} bytes) would not fit one ConfigMap"
    );

    cluster.server.clear_requests();
    provider.create(&claim("one-more")).await.unwrap();
    let writes: Vec<_> = cluster
        .server
        .requests()
        .into_iter()
        .filter(|r| r.resource == "configmaps" && !matches!(r.verb, Verb::Get | Verb::List))
        .map(|r| (r.verb, r.name))
        .collect();
    assert_eq!(
        writes.len(),
        2,
        "the new instance's ConfigMap and the head: {writes:?}"
    );

    // Terminating deletes the instance's ConfigMap.
    provider.delete(&claim("c0")).await.unwrap();
    assert_eq!(
        crate::support::stored_sim_instances(&cluster.server, "kube-system").len(),
        INSTANCES
    );

    // A restarted process finds every instance.
    let restarted = cluster.another_process_cloud();
    let store = LedgerStore::new(cluster.client.clone(), "kube-system");
    assert!(store.restore(&restarted).await.unwrap());
    assert_eq!(restarted.instances(), cluster.provider.instances());
    cluster.shutdown().await;
}

/// A burst of launches saved together writes its instances' ConfigMaps at once, not one after
/// the other: with every write answered 1 s late (virtual time), one save stores 32 instances
/// in seconds, where one at a time took 32 s and held every launch of the burst behind the
/// save (measured live: ~3 s per 64 launches on a busy API server). Deletions likewise.
#[tokio::test(start_paused = true)]
async fn a_burst_of_launches_writes_its_instances_configmaps_at_once() {
    const BURST: usize = 32;
    const LATE: Duration = Duration::from_secs(1);
    let cluster = SimCluster::new().await;
    for i in 0..BURST {
        cluster
            .provider
            .create(&claim(&format!("burst-{i}")))
            .await
            .unwrap();
    }
    let store = LedgerStore::new(cluster.client.clone(), "kube-system");
    cluster
        .server
        .delay_response(Some(Verb::Create), "configmaps", LATE, BURST);
    let started = tokio::time::Instant::now();
    store.save(&cluster.provider).await.unwrap();
    let took = started.elapsed();
    assert_eq!(
        crate::support::stored_sim_instances(&cluster.server, "kube-system").len(),
        BURST
    );
    assert!(
        took < LATE * 4,
        "{BURST} late creates took {took:?}: written one after the other"
    );

    for i in 0..BURST {
        cluster
            .provider
            .delete(&claim(&format!("burst-{i}")))
            .await
            .unwrap();
    }
    cluster
        .server
        .delay_response(Some(Verb::Delete), "configmaps", LATE, BURST);
    let started = tokio::time::Instant::now();
    store.save(&cluster.provider).await.unwrap();
    let took = started.elapsed();
    assert!(crate::support::stored_sim_instances(&cluster.server, "kube-system").is_empty());
    assert!(
        took < LATE * 4,
        "{BURST} late deletes took {took:?}: deleted one after the other"
    );
    cluster.shutdown().await;
}

/// A ledger written by an earlier version (every instance inside the head) is read, and the next
/// save moves its instances into their own ConfigMaps.
#[tokio::test(start_paused = true)]
async fn a_ledger_with_its_instances_in_the_head_is_read_and_split_on_the_next_save() {
    let cluster = SimCluster::new().await;
    cluster.provider.create(&claim("a")).await.unwrap();
    cluster.provider.create(&claim("b")).await.unwrap();
    let old_format = cluster.provider.snapshot().unwrap();
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": LEDGER_CONFIGMAP, "namespace": "kube-system"},
        "data": {"ledger.json": old_format},
    }))
    .unwrap();
    cluster.server.put(&cm).unwrap();

    let restarted = cluster.another_process_cloud();
    let store = LedgerStore::new(cluster.client.clone(), "kube-system");
    assert!(store.restore(&restarted).await.unwrap());
    assert_eq!(restarted.instances(), cluster.provider.instances());
    assert!(crate::support::stored_sim_instances(&cluster.server, "kube-system").is_empty());

    store.save(&restarted).await.unwrap();
    assert_eq!(
        crate::support::stored_sim_instances(&cluster.server, "kube-system").len(),
        2
    );
    let head: ConfigMap = cluster
        .server
        .get(Some("kube-system"), LEDGER_CONFIGMAP)
        .unwrap();
    let head = &head.data.unwrap()["ledger.json"];
    assert!(!head.contains("uid-a"), "{head}");
    // A launch after the split does not reuse an ID.
    let c = PersistentSimProvider::new(restarted.clone(), store)
        .create(&claim("c"))
        .await
        .unwrap();
    let ids: std::collections::BTreeSet<String> =
        restarted.instances().into_iter().map(|i| i.id).collect();
    assert_eq!(ids.len(), 3, "{ids:?} (new: {:?})", c.status);
    cluster.shutdown().await;
}
