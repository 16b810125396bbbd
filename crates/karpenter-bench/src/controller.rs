//! `karpenter-bench controller --pods N`: the controller's time and memory on N pending pods.
//!
//! The harness plays the cluster around the controller, in this process: the in-process test API
//! server on loopback TCP, and a tiny kube-scheduler (`binder`) that binds pending pods to
//! initialized Nodes. The controller runs as a **child process** (`karpenter controller
//! --cloud-provider sim`, its sim kubelet included), so its peak resident memory (`VmHWM` in
//! `/proc/<pid>/status`) excludes the API server's copy of every object.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::pod::Pod;
use karpenter_testapi::TestApiServer;
use kube::api::{Api, PostParams};
use serde::Serialize;
use serde_json::{Value, json};

use crate::binder::{BenchPod, Binder, requests};
use crate::process::{ControllerProcess, memory_kib};
use crate::workload::{
    POD_NAMESPACE, deployment_manifest, deployments, node_class, node_pool, pod_manifest,
};

/// Namespace of the controller's Lease and sim ledger.
pub(crate) const CONTROLLER_NAMESPACE: &str = "karpenter";
const LEADER_LEASE: &str = "karpenter-leader-election";
/// How often the harness's scheduler looks for pods to bind.
const BIND_PERIOD: Duration = Duration::from_millis(250);
/// Changes the API server keeps for watches to resume from: enough that no watcher of the
/// controller falls behind into a relist (10,000 pods make ≈ 4 changes each).
const WATCH_HISTORY: usize = 1_000_000;

/// What to run: the workload's size and seed, and the controller to measure.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Pending pods to create.
    pub pods: usize,
    /// Seed for the Deployment mix.
    pub seed: u64,
    /// Give up when not every pod is bound after this long.
    pub timeout: Duration,
    /// The `karpenter` binary whose `controller` runs as the child process.
    pub karpenter: PathBuf,
    /// Start the controller under this command (e.g. `heaptrack -o /tmp/controller`); the
    /// reported RSS is then the wrapper's.
    pub controller_prefix: Option<String>,
}

/// What one run measured. `*Kib` are kibibytes of the controller process, as `/proc` reports.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerReport {
    pub pods: usize,
    pub deployments: usize,
    pub nodes: usize,
    pub node_claims: usize,
    /// From the first pod written to the last pod bound.
    pub seconds_to_all_bound: f64,
    /// Resident memory once the controller leads and has listed the empty cluster.
    pub idle_rss_kib: Option<u64>,
    /// Peak resident memory of the controller over the whole run (`VmHWM`).
    pub peak_rss_kib: Option<u64>,
    /// Resident memory when the last pod was bound.
    pub final_rss_kib: Option<u64>,
}

/// Runs the benchmark; the caller prints the report.
pub async fn measure(args: &ControllerOptions) -> anyhow::Result<ControllerReport> {
    let server = TestApiServer::builder()
        .history_limit(WATCH_HISTORY)
        .build();
    let tcp = server
        .serve_tcp()
        .await
        .context("serving the test API server")?;
    let dir =
        std::env::temp_dir().join(format!("karpenter-bench-controller-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let kubeconfig = dir.join("kubeconfig");
    tcp.write_kubeconfig(&kubeconfig)?;
    for crd in karpenter_api::crd::all()? {
        server
            .register_crd(&crd)
            .map_err(|e| anyhow::anyhow!("registering CRD: {e}"))?;
    }
    let client = server.client();
    let pp = PostParams::default();
    Api::<karpenter_api::v1::EC2NodeClass>::all(client.clone())
        .create(&pp, &serde_json::from_value(node_class())?)
        .await
        .context("creating the EC2NodeClass")?;
    Api::<NodePool>::all(client.clone())
        .create(&pp, &serde_json::from_value(node_pool())?)
        .await
        .context("creating the NodePool")?;

    let mut controller = ControllerProcess::spawn(
        &args.karpenter,
        &kubeconfig,
        &dir,
        args.controller_prefix.as_deref(),
    )?;
    let deadline = Instant::now() + args.timeout;
    // Leading (its Lease held) means started, listed and running every loop.
    loop {
        controller.check_alive()?;
        let held = server
            .get::<Lease>(Some(CONTROLLER_NAMESPACE), LEADER_LEASE)
            .and_then(|l| l.spec?.holder_identity)
            .is_some();
        if held {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the controller did not take the leader Lease; its log: {}",
                controller.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, idle_rss_kib) = memory_kib(controller.pid());

    let deployments = deployments(args.pods, args.seed);
    let now = jiff::Timestamp::now().to_string();
    let started = Instant::now();
    let mut pods = Vec::with_capacity(args.pods);
    for (index, deployment) in deployments.iter().enumerate() {
        let requests = requests(deployment)?;
        for replica in 0..deployment.replicas {
            let manifest = pod_manifest(index, deployment, replica, &now);
            let name = manifest
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            server
                .put_value(manifest)
                .map_err(|e| anyhow::anyhow!("creating pod {name}: {e}"))?;
            pods.push(BenchPod {
                name,
                deployment: index,
                requests,
                node: None,
            });
        }
    }
    let deployment_count = deployments.len();
    let mut binder = Binder::new(deployments, pods);
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), POD_NAMESPACE);
    while binder.unbound > 0 {
        controller.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "{} of {} pods still unbound after {} s ({} NodeClaims, {} schedulable nodes); the controller's log: {}",
                binder.unbound,
                args.pods,
                args.timeout.as_secs(),
                server.count::<NodeClaim>(),
                binder.nodes.len(),
                controller.log.display()
            );
        }
        if binder.refresh_nodes(server.list::<Node>()) {
            for (pod, node) in binder.plan() {
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": binder.pods[pod].name, "namespace": POD_NAMESPACE},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}
                });
                pods_api
                    .create_subresource::<Value, Value>(
                        "binding",
                        &binder.pods[pod].name,
                        &pp,
                        &binding,
                    )
                    .await
                    .with_context(|| format!("binding {} to {node}", binder.pods[pod].name))?;
            }
        }
        if binder.unbound > 0 {
            tokio::time::sleep(BIND_PERIOD).await;
        }
    }
    let seconds_to_all_bound = started.elapsed().as_secs_f64();
    let (peak_rss_kib, final_rss_kib) = memory_kib(controller.pid());
    let report = ControllerReport {
        pods: args.pods,
        deployments: deployment_count,
        nodes: server.count::<Node>(),
        node_claims: server.count::<NodeClaim>(),
        seconds_to_all_bound,
        idle_rss_kib,
        peak_rss_kib,
        final_rss_kib,
    };
    drop(controller);
    drop(tcp);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

/// How often the real-control-plane run counts bound pods (a list of every pod: not too often).
const COUNT_PERIOD: Duration = Duration::from_secs(2);

/// The same workload on a real control plane (`KUBEBUILDER_ASSETS`, through `karpenter-envtest`):
/// the Deployments as manifests, the controller-manager making their pods (at its client's rate
/// limit, so creating 10,000 takes minutes) and kube-scheduler binding them, with every object as
/// a cluster writes it. The controller is the same child process; `crds` is `deploy/crds`.
pub async fn measure_on_control_plane(
    args: &ControllerOptions,
    crds: &Path,
) -> anyhow::Result<ControllerReport> {
    let setup = karpenter_envtest::Setup {
        crds: vec![crds.to_path_buf()],
    };
    let Some(cluster) = karpenter_envtest::cluster("bench-controller", &setup).await else {
        bail!(
            "no control plane: set KUBEBUILDER_ASSETS to a directory holding etcd, kube-apiserver, \
             kube-controller-manager and kube-scheduler (e.g. `export KUBEBUILDER_ASSETS=$(../shared/k8s/unpack.sh)`)"
        );
    };
    let client = cluster.client();
    let ns = cluster.namespace().to_string();
    crate::perf::run::apply(&client, None, &node_class()).await?;
    crate::perf::run::apply(&client, None, &node_pool()).await?;
    let mut controller = cluster
        .start_karpenter(
            &args.karpenter,
            &karpenter_envtest::KarpenterOptions::default().env("LOG_LEVEL", "info"),
        )
        .context("starting the controller")?;
    // Started, its caches listed (an empty cluster lists in well under a second).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, idle_rss_kib) = memory_kib(controller.pid());

    let deployments = deployments(args.pods, args.seed);
    let started = Instant::now();
    for deployment in &deployments {
        crate::perf::run::apply(&client, Some(&ns), &deployment_manifest(deployment)).await?;
    }
    let pods_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    let deadline = started + args.timeout;
    let mut reported = Instant::now();
    loop {
        if !controller.is_running() {
            bail!("the controller exited; its log:\n{}", controller.log());
        }
        let pods = pods_api
            .list(&kube::api::ListParams::default())
            .await
            .context("listing pods")?;
        let bound = pods
            .items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        if bound >= args.pods {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "{bound} of {} pods bound after {} s ({} exist)",
                args.pods,
                args.timeout.as_secs(),
                pods.items.len()
            );
        }
        if reported.elapsed() >= Duration::from_secs(30) {
            eprintln!(
                "  +{:.0} s: {} pods, {bound} bound",
                started.elapsed().as_secs_f64(),
                pods.items.len()
            );
            reported = Instant::now();
        }
        tokio::time::sleep(COUNT_PERIOD).await;
    }
    let seconds_to_all_bound = started.elapsed().as_secs_f64();
    let (peak_rss_kib, final_rss_kib) = memory_kib(controller.pid());
    let nodes = crate::perf::run::managed_nodes(&client).await?.len();
    let node_claims = Api::<NodeClaim>::all(client.clone())
        .list(&kube::api::ListParams::default())
        .await
        .context("listing NodeClaims")?
        .items
        .len();
    Ok(ControllerReport {
        pods: args.pods,
        deployments: deployments.len(),
        nodes,
        node_claims,
        seconds_to_all_bound,
        idle_rss_kib,
        peak_rss_kib,
        final_rss_kib,
    })
}
