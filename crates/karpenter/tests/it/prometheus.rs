//! A real Prometheus (Debian's `prometheus` package; `./scripts/test.sh` installs it) scrapes
//! `karpenter controller --cloud-provider sim` every second while it provisions three nodes for a
//! workload, consolidates the two the workload leaves empty and terminates them. Then every
//! dashboard query the chart ships is evaluated through Prometheus's HTTP API (each must return
//! at least one series; the test prints each panel with its series count), and
//! `promtool check metrics` reads the controller's `/metrics`.
//!
//! Stays on `karpenter-testapi` (docs/testing.md) like `controller_e2e.rs`, whose helpers it uses;
//! the test plays kube-scheduler (binds the pods).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::pod::Pod;
use karpenter_testapi::TestApiServer;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::controller_e2e::{condition_true, eventually, free_port, spawn_controller};
use crate::dashboards::{concrete, queries};
use crate::testapi_env::TestApiEnv;

/// promtool's naming rules that upstream's own names break (a gauge named `*_count` or
/// `*_total`): a finding is accepted only for a name on upstream's list, which karpenter-rs keeps
/// for compatibility with upstream's dashboards and alerts.
const UPSTREAM_NAMING: &[&str] = &[
    "non-histogram and non-summary metrics should not have \"_count\" suffix",
    "non-counter metrics should not have \"_total\" suffix",
];

/// The names on upstream's metrics reference (the checked-in copy).
fn upstream_names() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../karpenter-controller/tests/data/upstream_metrics.tsv");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split('\t').next().map(str::to_string))
        .collect()
}

fn installed(binary: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "{binary} is not installed: run ./scripts/test.sh once (it installs Debian's prometheus package)"
            )
        })
}

/// A Prometheus server, killed (its log shown when the test failed) on drop.
struct Prometheus {
    child: Child,
    log: PathBuf,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- {} ---", self.log.display());
            for line in log.lines().rev().take(30).collect::<Vec<_>>().iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

impl Prometheus {
    fn start(dir: &Path, target_port: u16) -> Self {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: karpenter\n    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = dir.join("prometheus.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(installed("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        Prometheus { child, log, port }
    }

    /// `GET /api/v1/query`: the result vector, `None` while Prometheus is not answering.
    fn query(&self, promql: &str) -> Option<Vec<Value>> {
        let body = http_get(
            self.port,
            &format!("/api/v1/query?query={}", percent_encode(promql)),
            None,
        )
        .ok()?;
        let answer: Value = serde_json::from_str(&body).ok()?;
        assert_eq!(answer["status"], "success", "{promql}: {answer}");
        answer["data"]["result"].as_array().cloned()
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A plain HTTP/1.0 GET; the body.
fn http_get(port: u16, path: &str, accept: Option<&str>) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n{accept}\r\n").as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default())
}

/// One inflate pod of 1 cpu that wants a node of its own (hostname anti-affinity), so the
/// workload gets three nodes and leaves two empty when it shrinks.
fn spread_pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("spread-{i}"), "namespace": "default", "labels": {"app": "spread"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "spread", "uid": "spread-rs", "controller": true}]},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
            ]}},
            "containers": [{"name": "spread", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}}]
        },
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/0 nodes are available"
        }]}
    }))
    .unwrap()
}

/// The test's kube-scheduler: each unbound pod to an initialized node no other pod is on.
fn bind_one_per_node(server: &TestApiServer) {
    let pods = server.list::<Pod>();
    let mut taken: Vec<String> = pods
        .iter()
        .filter_map(|p| karpenter_core::pod::node_name(p).map(str::to_string))
        .collect();
    let nodes: Vec<Node> = server
        .list::<Node>()
        .into_iter()
        .filter(|n| {
            n.labels()
                .get("karpenter.sh/initialized")
                .map(String::as_str)
                == Some("true")
                && n.metadata.deletion_timestamp.is_none()
        })
        .collect();
    for pod in pods
        .iter()
        .filter(|p| karpenter_core::pod::node_name(p).is_none())
    {
        if let Some(node) = nodes.iter().find(|n| !taken.contains(&n.name_any())) {
            let mut bound = pod.clone();
            bound.spec.get_or_insert_default().node_name = Some(node.name_any());
            server.put(&bound).unwrap();
            taken.push(node.name_any());
        }
    }
}

/// The value of the first series `line` starts in a scrape.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_controller_and_every_panel_has_data() {
    let env = TestApiEnv::start("prometheus").await;
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
            "template": {"spec": {
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]}
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"},
            "limits": {"cpu": "1000"}
        }
    }))
    .unwrap();
    Api::<NodePool>::all(client.clone())
        .create(&pp, &node_pool)
        .await
        .unwrap();

    let metrics_port = free_port();
    let controller = spawn_controller(kubeconfig, dir, "prometheus", metrics_port);
    let prometheus = Prometheus::start(dir, metrics_port);

    // Provision: three pods, three nodes; bound and running.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        pods.create(&pp, &spread_pod(i)).await.unwrap();
    }
    let limit = Duration::from_secs(60);
    eventually("three pods running on their own nodes", limit, || {
        bind_one_per_node(server);
        let running = server
            .list::<Pod>()
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == 3).then_some(())
    })
    .await;
    let claims = server.list::<NodeClaim>();
    assert!(
        claims.len() >= 3 && claims.iter().all(|c| condition_true(c, "Initialized")),
        "{} nodeclaims",
        claims.len()
    );

    // Consolidate: the workload shrinks to one pod; the two empty nodes go.
    for i in 1..3 {
        pods.delete(&format!("spread-{i}"), &Default::default())
            .await
            .unwrap();
    }
    let scraped = eventually(
        "two empty nodes consolidated and terminated",
        Duration::from_secs(90),
        || {
            let metrics = http_get(metrics_port, "/metrics", None).ok()?;
            let terminated = sample(&metrics, "karpenter_nodes_terminated_total{")?;
            let saved = sample(&metrics, "karpenter_consolidation_savings_per_hour_total")?;
            (terminated >= 2.0 && saved > 0.0).then_some(metrics)
        },
    )
    .await;
    assert!(
        scraped
            .contains("karpenter_nodes_termination_duration_seconds_count{nodepool=\"default\"} 2")
    );

    // Prometheus has scraped the terminations (its last scrape is at most a second old).
    eventually("Prometheus to see the terminations", Duration::from_secs(30), || {
        let result = prometheus.query("karpenter_consolidation_savings_per_hour_total > 0 and on () karpenter_nodes_termination_duration_seconds_count >= 2")?;
        (!result.is_empty()).then_some(())
    })
    .await;
    // Rates need two samples in their window after the changes.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut empty = Vec::new();
    let queries = queries();
    println!("{:<40} {:<44} series", "dashboard", "panel");
    for q in &queries {
        let promql = concrete(&q.expr);
        let series = prometheus
            .query(&promql)
            .unwrap_or_else(|| panic!("Prometheus did not answer {promql}"));
        println!("{:<40} {:<44} {}", q.dashboard, q.panel, series.len());
        if series.is_empty() {
            empty.push(format!("{} / {}: {promql}", q.dashboard, q.panel));
        }
    }
    println!("{} queries evaluated, {} empty", queries.len(), empty.len());
    assert!(
        empty.is_empty(),
        "queries without data:\n{}",
        empty.join("\n")
    );

    // promtool's lint of the classic text format the controller serves to non-OpenMetrics
    // clients (the same families and samples).
    let text = http_get(metrics_port, "/metrics", Some("text/plain; version=0.0.4")).unwrap();
    let path = dir.join("metrics.txt");
    std::fs::write(&path, &text).unwrap();
    let output = Command::new(installed("promtool"))
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!(
        "promtool check metrics ({} lines of /metrics):\n{report}",
        text.lines().count()
    );
    let upstream = upstream_names();
    let unexpected: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| {
            let (name, finding) = l.trim().split_once(' ').unwrap_or((l, ""));
            !(upstream.iter().any(|u| u == name) && UPSTREAM_NAMING.contains(&finding))
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "promtool check metrics reports more than upstream's own names:\n{}",
        unexpected.join("\n")
    );
    drop(controller);
}
