//! `karpenter controller --cloud-provider sim` end to end: the real binary against the test API
//! server over loopback TCP. Ten pending `inflate` pods → NodeClaims launched in the sim cloud →
//! Nodes registered by the sim kubelet → NodeClaims Initialized; then the NodeClaims are deleted
//! → drained, terminated, gone, and the sim ledger ConfigMap lists no instance.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): the binary's metrics and ledger checks over
//! loopback; its real-cluster counterpart is `real_cluster/inflate.rs`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::testapi_env::TestApiEnv;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::pod::Pod;
use karpenter_testapi::TestApiServer;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

const NAMESPACE: &str = "karpenter";
const LEDGER: &str = "karpenter-sim-ledger";

/// The controller process; killed (and its log shown when the test failed) on drop.
pub(crate) struct Controller {
    child: Child,
    log: PathBuf,
    metrics_port: u16,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- {} (last lines) ---", self.log.display());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn spawn_controller(
    kubeconfig: &Path,
    dir: &Path,
    name: &str,
    metrics_port: u16,
) -> Controller {
    let log = dir.join(format!("controller-{name}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["controller", "--cloud-provider", "sim", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--log-format", "text", "--log-level", "info"])
        .env_clear()
        .env("BATCH_IDLE_DURATION", "100ms")
        .env("BATCH_MAX_DURATION", "1s")
        .env("METRICS_PORT", metrics_port.to_string())
        .env("HEALTH_PROBE_PORT", free_port().to_string())
        .env("POD_NAMESPACE", NAMESPACE)
        .env("POD_NAME", format!("karpenter-{name}"))
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    Controller {
        child,
        log,
        metrics_port,
    }
}

/// Polls `check` every 100 ms until it returns `Some`, failing after `limit`.
pub(crate) async fn eventually<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn condition_true(claim: &NodeClaim, type_: &str) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

fn pending_pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("inflate-{i}"), "namespace": "default", "labels": {"app": "inflate"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "inflate", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
        },
        // What kube-scheduler reports for a pod no node can take.
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/0 nodes are available"
        }]}
    }))
    .unwrap()
}

fn ledger_field(server: &TestApiServer, field: &str) -> Option<Value> {
    let cm = server.get::<ConfigMap>(Some(NAMESPACE), LEDGER)?;
    let mut ledger: Value = serde_json::from_str(cm.data?.get("ledger.json")?).ok()?;
    Some(ledger[field].take())
}

/// Instances in the ledger: one ConfigMap each (`None` while the ledger has no head yet).
fn ledger_instances(server: &TestApiServer) -> Option<usize> {
    ledger_field(server, "region")?;
    Some(
        server
            .list::<ConfigMap>()
            .iter()
            .filter(|cm| cm.metadata.namespace.as_deref() == Some(NAMESPACE))
            .filter(|cm| {
                cm.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("karpenter-sim-instance-"))
            })
            .count(),
    )
}

/// `GET /metrics` over plain HTTP/1.0.
pub(crate) fn scrape(port: u16) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_controller_provisions_and_terminates_inflate_nodes() {
    let env = TestApiEnv::start("controller-e2e").await;
    let TestApiEnv {
        server,
        dir,
        kubeconfig,
        client,
        ..
    } = &env;
    let pp = PostParams::default();
    env.create_node_class(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-e2e",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "e2e"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "e2e"}}]
        }
    }))
    .await;
    let node_pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "e2e"}},
                "spec": {
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h"
                }
            },
            "limits": {"cpu": "1000"}
        }
    }))
    .unwrap();
    Api::<NodePool>::all(client.clone())
        .create(&pp, &node_pool)
        .await
        .unwrap();

    let controller = spawn_controller(kubeconfig, dir, "first", free_port());

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in 0..10 {
        pods.create(&pp, &pending_pod(i)).await.unwrap();
    }

    // NodeClaims launched, registered and initialized; their Nodes carry their labels.
    let limit = Duration::from_secs(60);
    let claims = eventually("initialized NodeClaims", limit, || {
        let claims = server.list::<NodeClaim>();
        (!claims.is_empty()
            && claims.iter().all(|c| {
                ["Launched", "Registered", "Initialized"]
                    .iter()
                    .all(|t| condition_true(c, t))
            }))
        .then_some(claims)
    })
    .await;
    let nodes: BTreeMap<String, Node> = server
        .list::<Node>()
        .into_iter()
        .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
        .collect();
    assert_eq!(nodes.len(), claims.len(), "one Node per NodeClaim");
    let mut cpu = 0;
    for claim in &claims {
        let node_name = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("status.nodeName");
        let node = &nodes[&node_name];
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        for (key, value) in claim.metadata.labels.iter().flatten() {
            assert_eq!(
                node_labels.get(key),
                Some(value),
                "node {node_name} label {key}"
            );
        }
        assert_eq!(node_labels.get("team").map(String::as_str), Some("e2e"));
        assert_eq!(
            node_labels
                .get("karpenter.sh/initialized")
                .map(String::as_str),
            Some("true")
        );
        let allocatable = claim.status.as_ref().unwrap().allocatable.get("cpu");
        cpu += allocatable.map_or(0, |q| {
            karpenter_core::resources::Quantity::parse(&q.0)
                .unwrap()
                .millis()
        });
    }
    assert!(cpu >= 10_000, "room for ten 1-cpu pods: {cpu}m allocatable");
    assert_eq!(ledger_instances(server), Some(claims.len()));

    let metrics = scrape(controller.metrics_port).unwrap();
    assert!(
        metrics.contains("karpenter_nodeclaims_created_total{"),
        "no nodeclaims_created in\n{metrics}"
    );

    // Crash and restart: the new process must find its instances in the ledger ConfigMap (else
    // it could not terminate them below). The crashed leader's Lease is removed so the test need
    // not wait out the 15 s lease duration.
    drop(controller);
    server
        .delete::<Lease>(Some(NAMESPACE), "karpenter-leader-election")
        .unwrap();
    let controller = spawn_controller(kubeconfig, dir, "second", free_port());
    eventually(
        "the restarted controller to restore the ledger",
        limit,
        || {
            let log = std::fs::read_to_string(&controller.log).unwrap_or_default();
            log.contains(&format!("restored=true instances={}", claims.len()))
                .then_some(())
        },
    )
    .await;
    // The ten pods are still pending (nothing binds them here): the restarted controller must
    // count its restored instances as room for them rather than launch more. Wait for its first
    // provisioning pass before scaling to zero, else that pass may see some pods deleted and the
    // NodeClaims going, and plan for the rest on new capacity (a race of the test, not a bug).
    eventually(
        "the restarted controller's first provisioning pass",
        limit,
        || {
            let metrics = scrape(controller.metrics_port).ok()?;
            metrics
                .lines()
                .any(|line| {
                    line.starts_with(
                        "karpenter_scheduler_scheduling_duration_seconds_count{controller=\"provisioner\"}",
                    )
                })
                .then_some(())
        },
    )
    .await;

    // Scale to zero (unbound pods go at once), then remove the capacity.
    for i in 0..10 {
        pods.delete(&format!("inflate-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    let node_claims: Api<NodeClaim> = Api::all(client.clone());
    for claim in &claims {
        node_claims
            .delete(
                claim.metadata.name.as_deref().unwrap(),
                &DeleteParams::default(),
            )
            .await
            .unwrap();
    }
    eventually("NodeClaims, Nodes and sim instances gone", limit, || {
        (server.count::<NodeClaim>() == 0
            && server.count::<Node>() == 0
            && ledger_instances(server) == Some(0))
        .then_some(())
    })
    .await;

    // Identity on the wire: the controller's requests (the test's own client sends no
    // User-Agent) carry `karpenter-rs/VERSION`, and its writes field manager `karpenter`.
    let own: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.user_agent.is_some())
        .collect();
    assert!(!own.is_empty(), "no request with a User-Agent");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        own.iter()
            .all(|r| r.user_agent.as_deref() == Some(format!("karpenter-rs/{version}").as_str())),
        "{:?}",
        own.iter()
            .map(|r| &r.user_agent)
            .collect::<std::collections::BTreeSet<_>>()
    );
    assert!(
        own.iter()
            .filter(|r| matches!(
                r.verb,
                karpenter_testapi::Verb::Create
                    | karpenter_testapi::Verb::Update
                    | karpenter_testapi::Verb::Patch
            ))
            .all(|r| r.field_manager.as_deref() == Some("karpenter"))
    );
    assert_eq!(
        ledger_field(server, "lastInstanceSeq")
            .as_ref()
            .and_then(Value::as_u64),
        Some(claims.len() as u64),
        "the restarted controller launched nothing new"
    );
    // The controller counts a termination right after its last write, which may land just after
    // this test saw the objects go: scrape until the counters show up.
    let names = [
        "karpenter_nodeclaims_terminated_total{",
        "karpenter_nodes_terminated_total{",
        "karpenter_nodes_lifetime_duration_seconds_count{",
        "karpenter_nodeclaims_termination_duration_seconds_count{",
    ];
    eventually("termination metrics", limit, || {
        let metrics = scrape(controller.metrics_port).ok()?;
        names
            .iter()
            .all(|name| metrics.contains(name))
            .then_some(())
    })
    .await;
}
