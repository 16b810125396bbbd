//! Runs the arrival pattern under one packing policy on its own control plane: scale, wait for
//! convergence, read the controller's cost view and disruption counters, next step.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use karpenter_api::NodeClaim;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::pattern::deploys;
use super::report::{PolicyReport, StepReport, metric_sum};
use crate::perf::run::{
    OWNED, POLL, apply, deployment, draining, healthy_pods, managed_nodes, node_class,
};

/// What `karpenter-bench arrivals` runs.
#[derive(Clone, Debug)]
pub struct ArrivalOptions {
    /// The `karpenter` binary whose `controller` runs.
    pub karpenter: PathBuf,
    /// The CRDs to install (`deploy/crds`).
    pub crds: PathBuf,
    /// Pods in all after each step.
    pub steps: Vec<usize>,
    /// A step that has not converged after this long fails the run.
    pub timeout: Duration,
    /// Quiet time (no node or NodeClaim added or removed, none draining) that ends a step.
    pub settle: Duration,
    /// Where to write the cluster's snapshot after each step (`--snapshots`), if anywhere.
    pub snapshots: Option<PathBuf>,
}

const METRICS_TIMEOUT: Duration = Duration::from_secs(30);
const SCRAPE_ATTEMPTS: usize = 5;

/// The whole pattern under `policy` (`CostOptimal` or `Upstream`, the controller's
/// `PACKING_POLICY`), on a control plane of its own.
pub async fn run_policy(policy: &str, options: &ArrivalOptions) -> anyhow::Result<PolicyReport> {
    let setup = karpenter_envtest::Setup {
        crds: vec![options.crds.clone()],
    };
    let Some(cluster) = karpenter_envtest::cluster(&format!("arrivals-{policy}"), &setup).await
    else {
        bail!(
            "no control plane: set KUBEBUILDER_ASSETS to a directory holding etcd, kube-apiserver, \
             kube-controller-manager and kube-scheduler (e.g. `export KUBEBUILDER_ASSETS=$(../shared/k8s/unpack.sh)`)"
        );
    };
    let mut karpenter = cluster
        .start_karpenter(
            &options.karpenter,
            &karpenter_envtest::KarpenterOptions::default()
                .env("LOG_LEVEL", "info")
                .env("PACKING_POLICY", policy),
        )
        .context("starting the controller")?;
    let client = cluster.client();
    let ns = cluster.namespace().to_string();
    let port = karpenter.metrics_port();
    apply(&client, None, &node_class()).await?;
    apply(&client, None, &node_pool()).await?;

    let mut steps = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut counters = Counters::default();
    let mut result = Ok(());
    for (index, &total) in options.steps.iter().enumerate() {
        let step = index + 1;
        match run_step(&client, &ns, port, total, options, &mut seen, &mut counters).await {
            Ok(mut report) => {
                report.step = step;
                if let Some(dir) = &options.snapshots {
                    let out = dir.join(format!("{policy}-step-{step}.yaml"));
                    if let Err(err) =
                        snapshot(&options.karpenter, cluster.plane().kubeconfig(), &out)
                    {
                        eprintln!("  {policy} step {step}: no snapshot: {err:#}");
                    }
                }
                eprintln!(
                    "  {policy} step {step}: {} pods on {} nodes, ${:.4}/h, bound ${:.4}/h, {} disrupted, converged in {:.0} s",
                    report.pods,
                    report.nodes,
                    report.hourly_cost,
                    report.cost_lower_bound,
                    report.disrupted_nodes,
                    report.converged_seconds
                );
                steps.push(report);
            }
            Err(err) => {
                result = Err(err.context(format!("step {step} ({total} pods, {policy})")));
                break;
            }
        }
    }
    if let Err(err) = result {
        eprintln!("--- the controller's log (last 40 lines) ---");
        let log = karpenter.log();
        let lines: Vec<&str> = log.lines().collect();
        for line in &lines[lines.len().saturating_sub(40)..] {
            eprintln!("{line}");
        }
        return Err(err);
    }
    karpenter.kill();
    Ok(PolicyReport {
        policy: policy.to_string(),
        kubernetes: cluster.plane().version().to_string(),
        steps,
    })
}

/// The cluster as `karpenter simulate --from-cluster` reads it, written to `out` as YAML that
/// `simulate -f` takes.
fn snapshot(karpenter: &Path, kubeconfig: &Path, out: &Path) -> anyhow::Result<()> {
    // A file left by an earlier run must not pass for this one's.
    if out.exists() {
        std::fs::remove_file(out).with_context(|| format!("removing {}", out.display()))?;
    }
    let output = std::process::Command::new(karpenter)
        .arg("simulate")
        .arg("--from-cluster")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--snapshot-out")
        .arg(out)
        .arg("-o")
        .arg("json")
        .output()
        .with_context(|| format!("running {}", karpenter.display()))?;
    if !out.exists() {
        bail!(
            "{} simulate --from-cluster wrote no snapshot: {}",
            karpenter.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// The controller's counters at the end of the previous step.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    disrupted_nodes: f64,
    commands: f64,
}

async fn run_step(
    client: &Client,
    ns: &str,
    port: u16,
    total: usize,
    options: &ArrivalOptions,
    seen: &mut BTreeSet<String>,
    counters: &mut Counters,
) -> anyhow::Result<StepReport> {
    let started = Instant::now();
    for deploy in deploys(total) {
        apply(client, Some(ns), &deployment(&deploy)).await?;
    }
    let mut last_change = started;
    let mut last_objects: Option<BTreeSet<String>> = None;
    loop {
        if started.elapsed() > options.timeout {
            bail!(
                "not converged after {:?} (raise --timeout)",
                options.timeout
            );
        }
        let healthy = healthy_pods(client, ns).await?.len();
        let present = present_pods(client, ns).await?;
        let nodes = managed_nodes(client).await?;
        let claims = Api::<NodeClaim>::all(client.clone())
            .list(&ListParams::default())
            .await
            .context("listing NodeClaims")?;
        let objects: BTreeSet<String> = nodes
            .iter()
            .map(|n| format!("node/{}", n.name_any()))
            .chain(
                claims
                    .items
                    .iter()
                    .map(|c| format!("nodeclaim/{}", c.name_any())),
            )
            .collect();
        if nodes.iter().any(draining) || last_objects.as_ref() != Some(&objects) {
            last_change = Instant::now();
        }
        last_objects = Some(objects);
        if healthy == total && present.len() == total && last_change.elapsed() >= options.settle {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let converged_seconds = last_change.duration_since(started).as_secs_f64();
    let pods = healthy_pods(client, ns).await?;
    let nodes = managed_nodes(client).await?.len();
    let mut to_running: Vec<f64> = Vec::new();
    let mut current = BTreeSet::new();
    for pod in &pods {
        let uid = pod.uid().unwrap_or_else(|| pod.name_any());
        if !seen.contains(&uid)
            && let (Some(created), Some(started)) = (
                pod.metadata.creation_timestamp.as_ref(),
                pod.status.as_ref().and_then(|s| s.start_time.as_ref()),
            )
        {
            to_running.push(started.0.duration_since(created.0).as_secs_f64().max(0.0));
        }
        current.insert(uid);
    }
    let new_pods = current.difference(seen).count();
    *seen = current;
    to_running.sort_by(f64::total_cmp);

    let exposition = scrape_patiently(port).await?;
    let read = |name: &str| metric_sum(&exposition, name).unwrap_or(0.0);
    let hourly_cost = read("karpenter_cluster_cost_per_hour");
    let cost_lower_bound = read("karpenter_cluster_cost_lower_bound_per_hour");
    let now = Counters {
        disrupted_nodes: read("karpenter_nodeclaims_disrupted_total"),
        commands: read("karpenter_voluntary_disruption_decisions_total"),
    };
    let increase = |now: f64, before: f64| (now - before).max(0.0).round() as u64;
    let report = StepReport {
        step: 0,
        pods: pods.len(),
        nodes,
        hourly_cost,
        cost_lower_bound,
        ratio: karpenter_core::cost::cost_ratio(hourly_cost, cost_lower_bound),
        disrupted_nodes: increase(now.disrupted_nodes, counters.disrupted_nodes),
        disruption_commands: increase(now.commands, counters.commands),
        new_pods,
        to_running_p50_seconds: to_running.get(to_running.len() / 2).copied(),
        to_running_max_seconds: to_running.last().copied(),
        converged_seconds,
    };
    *counters = now;
    Ok(report)
}

/// The benchmark's pods not being deleted, scheduled or not.
async fn present_pods(client: &Client, ns: &str) -> anyhow::Result<Vec<Pod>> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{}={}", OWNED.0, OWNED.1)))
        .await
        .context("listing pods")?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

/// [`scrape`], tried again after a pause: on a loaded machine the controller can take longer
/// than the timeout to answer (it computes the cost view at scrape time).
async fn scrape_patiently(port: u16) -> anyhow::Result<String> {
    let mut last = None;
    for _ in 0..SCRAPE_ATTEMPTS {
        match scrape(port).await {
            Ok(body) => return Ok(body),
            Err(err) => {
                eprintln!("  metrics scrape failed ({err:#}); trying again");
                last = Some(err);
                tokio::time::sleep(POLL).await;
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no scrape attempted")))
}

/// `GET /metrics` from the controller over plain HTTP/1.0 (a blocking socket on the blocking
/// pool: the scrape is one small request per step).
async fn scrape(port: u16) -> anyhow::Result<String> {
    let response = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(METRICS_TIMEOUT))?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    })
    .await
    .context("the metrics scrape did not finish")?
    .with_context(|| format!("scraping the controller's metrics on port {port}"))?;
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
            Ok(body.to_string())
        }
        _ => bail!(
            "the controller's metrics answered {:?}",
            response.lines().next().unwrap_or_default()
        ),
    }
}

/// The NodePool of the benchmark: on-demand Linux instances of categories c, m, r, generations
/// after 4 (`karpenter bench packing`'s pool; with burstable types the fractional bound buys a
/// t4g.nano's cheap vCPUs no pod can use, and means little), consolidation as a user gets it
/// without saying more
/// (`WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`, the default budget of 10 % of the nodes).
fn node_pool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "0s"
            },
            "template": {
                "spec": {
                    "expireAfter": "Never",
                    "requirements": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]}
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_pool_keeps_the_default_budget() {
        let pool = node_pool();
        assert!(pool["spec"]["disruption"].get("budgets").is_none());
        assert_eq!(
            pool["spec"]["disruption"]["consolidationPolicy"],
            "WhenEmptyOrUnderutilized"
        );
    }
}
