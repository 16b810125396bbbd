//! `karpenter explain`, `diff` and `simulate --from-cluster` against the test API server with
//! the sim controller running: the answers name the objects the issue asks for, and the three
//! commands never write (the server's request log).
//!
//! Stays on `karpenter-testapi` (docs/testing.md): every request recorded, to prove the read-only
//! commands never write.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::pod::Pod;
use karpenter_testapi::{TestApiServer, Verb};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use super::api_cli::karpenter;
use super::controller_e2e::{condition_true, eventually, free_port, spawn_controller};

fn node_class() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-explain",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "explain"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "explain"}}]
        }
    })
}

/// One m5.large per 1-cpu pod, never consolidated, drift one node at a time.
fn node_pool(team: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": "Never",
                "budgets": [{"nodes": "1"}]
            },
            "template": {
                "metadata": {"labels": {"team": team}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": "720h"
                }
            }
        }
    })
}

fn pod(name: &str, cpu: &str, annotations: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]
        },
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/0 nodes are available"
        }]}
    }))
    .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs the binary off the runtime's threads (the API server answers on them meanwhile).
async fn run(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        karpenter(&args, "")
    })
    .await
    .unwrap()
}

fn args(kubeconfig: &Path, words: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = words.iter().map(ToString::to_string).collect();
    out.push("--kubeconfig".into());
    out.push(kubeconfig.display().to_string());
    out
}

async fn install(server: &TestApiServer) {
    let client = server.client();
    let pp = PostParams::default();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in karpenter_api::crd::all().unwrap() {
        crds.create(&pp, &crd).await.unwrap();
    }
    let class: EC2NodeClass = serde_json::from_value(node_class()).unwrap();
    Api::<EC2NodeClass>::all(client.clone())
        .create(&pp, &class)
        .await
        .unwrap();
    let pool: NodePool = serde_json::from_value(node_pool("e2e")).unwrap();
    Api::<NodePool>::all(client)
        .create(&pp, &pool)
        .await
        .unwrap();
}

fn test_dir(name: &str, port: u16) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_diff_and_from_cluster_answer_on_a_live_cluster_and_never_write() {
    let server = TestApiServer::new();
    let tcp = server.serve_tcp().await.unwrap();
    let dir = test_dir("explain-live", tcp.addr().port());
    let kubeconfig = dir.join("kubeconfig");
    tcp.write_kubeconfig(&kubeconfig).unwrap();
    install(&server).await;
    let controller = spawn_controller(&kubeconfig, &dir, "explain", free_port());

    // Three 1-cpu pods: three m5.large nodes. The test binds them (there is no kube-scheduler).
    let client = server.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let protected = json!({"karpenter.sh/do-not-disrupt": "true"});
    for (name, annotations) in [
        ("web-0", protected),
        ("web-1", json!({})),
        ("web-2", json!({})),
    ] {
        pods.create(&pp, &pod(name, "1", annotations))
            .await
            .unwrap();
    }
    let limit = Duration::from_secs(90);
    let nodes: Vec<String> = eventually("three initialized nodes", limit, || {
        let claims = server.list::<NodeClaim>();
        let nodes = server.list::<Node>();
        (claims.len() == 3
            && nodes.len() == 3
            && claims.iter().all(|c| condition_true(c, "Initialized")))
        .then(|| {
            nodes
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect()
        })
    })
    .await;
    for (name, node) in ["web-0", "web-1", "web-2"].iter().zip(&nodes) {
        let mut value = server
            .get_value("v1", "Pod", Some("default"), name)
            .unwrap();
        value["spec"]["nodeName"] = json!(node);
        server.put_value(value).unwrap();
    }
    // A pod no m5.large can hold, created once the nodes are there.
    pods.create(&pp, &pod("huge", "1000", json!({})))
        .await
        .unwrap();

    // The huge pod: its NodePool and the resource it lacks.
    let out = run(args(&kubeconfig, &["explain", "pod", "default/huge"])).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{}", stdout, text(&out.stderr));
    assert!(stdout.contains("cannot be scheduled"), "{stdout}");
    assert!(
        stdout.contains("nodepool default") && stdout.contains("cpu"),
        "{stdout}"
    );

    // The do-not-disrupt pod's node names that pod.
    let out = run(args(
        &kubeconfig,
        &["explain", "node", &nodes[0], "-o", "json"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reasons = answer["reasons"].as_array().unwrap();
    assert!(
        reasons.iter().any(|r| r["object"] == "Pod/default/web-0"
            && r["reason"].as_str().unwrap().contains("do-not-disrupt")),
        "{answer:#}"
    );
    assert_eq!(answer["candidate"], false);

    // A template label change drifts every node; the budget of one serialises the rollout.
    let live_pool_before = server.get_value("karpenter.sh/v1", "NodePool", None, "default");
    let file = dir.join("nodepool.yaml");
    std::fs::write(&file, serde_json::to_string(&node_pool("blue")).unwrap()).unwrap();
    let out = run(args(
        &kubeconfig,
        &["diff", "-f", file.to_str().unwrap(), "-o", "json"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let drifted: Vec<&str> = report["drifted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["node"].as_str().unwrap())
        .collect();
    for node in &nodes {
        assert!(drifted.contains(&node.as_str()), "{node} not in {report:#}");
    }
    assert!(report["rolloutSeconds"].as_i64().unwrap() > 0, "{report:#}");
    // The node of the do-not-disrupt pod drifts too, but the rollout cannot take it.
    assert_eq!(report["held"][0]["node"], nodes[0].as_str(), "{report:#}");
    assert!(
        report["held"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("web-0"),
        "{report:#}"
    );
    assert_eq!(report["rolloutComplete"], false);
    for key in [
        "replacements",
        "hourlyCostBefore",
        "hourlyCostAfter",
        "unschedulable",
    ] {
        assert!(report.get(key).is_some(), "{key} missing: {report:#}");
    }
    assert_eq!(
        server.get_value("karpenter.sh/v1", "NodePool", None, "default"),
        live_pool_before,
        "diff changed the live NodePool"
    );

    // The snapshot as simulate's input: the disruption loop sees the cluster's nodes.
    let snapshot = dir.join("snapshot.yaml");
    let out = run(args(
        &kubeconfig,
        &[
            "simulate",
            "--from-cluster",
            "--disruption",
            "--until",
            "1h",
            "--snapshot-out",
            snapshot.to_str().unwrap(),
            "-o",
            "json",
        ],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["disruption"]["before"]["nodes"], 3, "{report:#}");
    // The snapshot is a reproducible input for `simulate -f`.
    let out = run(vec![
        "simulate".into(),
        "-f".into(),
        snapshot.display().to_string(),
        "-o".into(),
        "json".into(),
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["unschedulable"][0]["pod"], "default/huge", "{plan:#}");

    // Files on top of the snapshot: a new Deployment's pods are planned with the cluster's.
    let deployment = dir.join("deployment.yaml");
    std::fs::write(
        &deployment,
        serde_json::to_string(&json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "new", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "new"}},
                "template": {
                    "metadata": {"labels": {"app": "new"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx",
                        "resources": {"requests": {"cpu": "1"}}}]}
                }
            }
        }))
        .unwrap(),
    )
    .unwrap();
    let out = run(args(
        &kubeconfig,
        &[
            "simulate",
            "--from-cluster",
            "-f",
            deployment.to_str().unwrap(),
            "-o",
            "json",
        ],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["summary"]["pods"], 3, "{plan:#}");
    assert_eq!(plan["summary"]["scheduled"], 2, "{plan:#}");

    // Read-only: with the controller stopped, the three commands send lists and nothing else.
    drop(controller);
    server.clear_requests();
    for words in [
        vec!["explain", "nodepool", "default"],
        vec!["diff", "-f", file.to_str().unwrap()],
        vec![
            "simulate",
            "--from-cluster",
            "--disruption",
            "--until",
            "1h",
        ],
    ] {
        let out = run(args(&kubeconfig, &words)).await;
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "{words:?}: {}",
            text(&out.stderr)
        );
    }
    let requests = server.requests();
    assert!(requests.iter().any(|r| r.verb == Verb::List));
    let writes: Vec<_> = requests.iter().filter(|r| r.verb.is_write()).collect();
    assert!(writes.is_empty(), "writes: {writes:?}");
    assert!(
        requests.iter().all(|r| r.verb == Verb::List),
        "{:?}",
        requests.iter().map(|r| r.verb).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_one_line_errors_and_the_documented_exit_codes() {
    let server = TestApiServer::new();
    let tcp = server.serve_tcp().await.unwrap();
    let dir = test_dir("explain-bad", tcp.addr().port());
    let kubeconfig = dir.join("kubeconfig");
    tcp.write_kubeconfig(&kubeconfig).unwrap();
    install(&server).await;

    let one_line = |out: &std::process::Output| {
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    };

    // Unknown objects.
    for words in [
        ["explain", "node", "nope"],
        ["explain", "nodepool", "nope"],
        ["explain", "pod", "default/nope"],
    ] {
        let out = run(args(&kubeconfig, &words)).await;
        assert_eq!(out.status.code(), Some(1));
        let stderr = one_line(&out);
        assert!(stderr.contains("nope not found"), "{stderr}");
    }

    // Files that do not validate: validate's errors, exit 2, nothing read from the cluster.
    let invalid = dir.join("invalid.yaml");
    let mut pool = node_pool("e2e");
    pool["spec"]["disruption"]["consolidationPolicy"] = json!("Sometimes");
    std::fs::write(&invalid, serde_json::to_string(&pool).unwrap()).unwrap();
    server.clear_requests();
    let out = run(args(
        &kubeconfig,
        &["diff", "-f", invalid.to_str().unwrap()],
    ))
    .await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("consolidationPolicy"), "{stderr}");
    assert!(server.requests().is_empty(), "diff read the cluster");

    // The file as it was applied (the server added its defaults): nothing would change.
    let valid = dir.join("valid.yaml");
    std::fs::write(&valid, serde_json::to_string(&node_pool("e2e")).unwrap()).unwrap();
    let out = run(args(&kubeconfig, &["diff", "-f", valid.to_str().unwrap()])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("no change"));

    // An API server that does not answer.
    let port = free_port();
    let unreachable = dir.join("unreachable");
    std::fs::write(
        &unreachable,
        tcp.kubeconfig_yaml()
            .replace(&tcp.addr().port().to_string(), &port.to_string()),
    )
    .unwrap();
    let out = run(args(&unreachable, &["explain", "node", "n"])).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = one_line(&out);
    assert!(stderr.contains("cannot read"), "{stderr}");
    // `--context` picks another context of the same kubeconfig: the unreachable one is current.
    let two_contexts = dir.join("two-contexts");
    std::fs::write(
        &two_contexts,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: good\n  cluster:\n    server: {}\n\
             - name: gone\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             contexts:\n- name: good\n  context:\n    cluster: good\n    user: u\n\
             - name: gone\n  context:\n    cluster: gone\n    user: u\n\
             current-context: gone\nusers:\n- name: u\n  user: {{}}\n",
            tcp.url()
        ),
    )
    .unwrap();
    let out = run(args(&two_contexts, &["explain", "nodepool", "default"])).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let out = run(args(
        &two_contexts,
        &["explain", "nodepool", "default", "--context", "good"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("nodepool default: 0 node(s)"));
    let out = run(args(&unreachable, &["diff", "-f", valid.to_str().unwrap()])).await;
    assert_eq!(out.status.code(), Some(2));
    one_line(&out);
}

/// `docs/benchmarks.md`: reading a cluster of 10,000 pods on 100 nodes (the read, and the whole
/// command). Ignored by default (it measures; it asserts only what must hold at any speed):
/// `cargo test --release -p karpenter --test it explain_live::reading_ten_thousand_pods -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for docs/benchmarks.md"]
async fn reading_ten_thousand_pods() {
    let server = TestApiServer::new();
    let tcp = server.serve_tcp().await.unwrap();
    let dir = test_dir("explain-bench", tcp.addr().port());
    let kubeconfig = dir.join("kubeconfig");
    tcp.write_kubeconfig(&kubeconfig).unwrap();
    install(&server).await;
    for n in 0..100 {
        server
            .put_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("node-{n}"), "labels": {
                    "node.kubernetes.io/instance-type": "m5.24xlarge",
                    "topology.kubernetes.io/zone": "us-east-1a",
                    "kubernetes.io/hostname": format!("node-{n}")
                }},
                "status": {"allocatable": {"cpu": "96", "memory": "384Gi", "pods": "110"},
                           "capacity": {"cpu": "96", "memory": "384Gi", "pods": "110"}}
            }))
            .unwrap();
    }
    for i in 0..10_000 {
        let mut value = serde_json::to_value(pod(&format!("app-{i}"), "100m", json!({}))).unwrap();
        value["spec"]["nodeName"] = json!(format!("node-{}", i % 100));
        value["status"] = json!({"phase": "Running"});
        server.put_value(value).unwrap();
    }
    let started = std::time::Instant::now();
    let out = run(args(&kubeconfig, &["simulate", "--from-cluster"])).await;
    let wall = started.elapsed();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("10000 Pod"), "{stderr}");
    let started = std::time::Instant::now();
    let out = run(args(&kubeconfig, &["explain", "node", "node-7"])).await;
    let explain_wall = started.elapsed();
    assert!(out.status.success(), "{}", text(&out.stderr));
    eprintln!(
        "BENCH simulate --from-cluster: {wall:?} wall; explain node: {explain_wall:?} wall; {}",
        stderr.trim()
    );
}

/// A NodeOverlay that makes the m7i family nearly free: any plan that reads it picks m7i.
fn overlay() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": "m7i-nearly-free"},
        "spec": {
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m7i"]}
            ],
            "price": "0.0001"
        }
    })
}

/// `explain`, `simulate --from-cluster` and `diff` read the cluster's NodeOverlays (and `diff` the
/// files') as `simulate -f` does: applied with `--feature-gates NodeOverlay=true`, ignored with a
/// note without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_diff_and_from_cluster_read_node_overlays_behind_the_gate() {
    let server = TestApiServer::new();
    let tcp = server.serve_tcp().await.unwrap();
    let dir = test_dir("explain-overlay", tcp.addr().port());
    let kubeconfig = dir.join("kubeconfig");
    tcp.write_kubeconfig(&kubeconfig).unwrap();
    let client = server.client();
    let pp = PostParams::default();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in karpenter_api::crd::all().unwrap() {
        crds.create(&pp, &crd).await.unwrap();
    }
    let class: EC2NodeClass = serde_json::from_value(node_class()).unwrap();
    Api::<EC2NodeClass>::all(client.clone())
        .create(&pp, &class)
        .await
        .unwrap();
    // Any on-demand type: the catalogue's cheapest fit unless an overlay says otherwise.
    let mut pool = node_pool("e2e");
    pool["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ]);
    let pool: NodePool = serde_json::from_value(pool).unwrap();
    Api::<NodePool>::all(client.clone())
        .create(&pp, &pool)
        .await
        .unwrap();
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&pp, &pod("web", "1", json!({})))
        .await
        .unwrap();
    server
        .put_value(overlay())
        .unwrap_or_else(|e| panic!("NodeOverlay: {e:?}"));
    let gate = "--feature-gates=NodeOverlay=true";

    let planned_type = |out: &std::process::Output| -> String {
        assert!(out.status.success(), "{}", text(&out.stderr));
        let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
        plan["nodeClaims"][0]["instanceType"]
            .as_str()
            .unwrap_or_else(|| panic!("{plan:#}"))
            .to_string()
    };
    let from_cluster = ["simulate", "--from-cluster", "-o", "json"];
    let without = planned_type(&run(args(&kubeconfig, &from_cluster)).await);
    assert!(!without.starts_with("m7i."), "{without}");
    let with = planned_type(&run(args(&kubeconfig, &[&from_cluster[..], &[gate]].concat())).await);
    assert!(with.starts_with("m7i."), "{with}");
    let out = run(args(&kubeconfig, &["simulate", "--from-cluster"])).await;
    assert!(
        text(&out.stderr).contains("1 NodeOverlay(s) ignored"),
        "{}",
        text(&out.stderr)
    );

    let explained = |out: &std::process::Output| -> Value {
        assert!(out.status.success(), "{}", text(&out.stderr));
        // The facts are flattened into the answer.
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let explain = ["explain", "pod", "default/web", "-o", "json"];
    let facts = explained(&run(args(&kubeconfig, &explain)).await);
    assert_eq!(facts["instanceType"], without.as_str(), "{facts:#}");
    let facts = explained(&run(args(&kubeconfig, &[&explain[..], &[gate]].concat())).await);
    assert_eq!(facts["instanceType"], with.as_str(), "{facts:#}");
    assert_eq!(facts["price"], 0.0001, "the overlaid price: {facts:#}");

    // diff takes a NodeOverlay file: a change to the cluster (exit 1) with the gate.
    let file = dir.join("overlay.yaml");
    let mut changed = overlay();
    changed["spec"]["price"] = json!("0.0002");
    std::fs::write(&file, serde_json::to_string(&changed).unwrap()).unwrap();
    let out = run(args(
        &kubeconfig,
        &["diff", "-f", file.to_str().unwrap(), "-o", "json", gate],
    ))
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["changed"][0], "NodeOverlay/m7i-nearly-free (changed)",
        "{report:#}"
    );
}
