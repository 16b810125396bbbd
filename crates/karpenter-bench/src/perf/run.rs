//! Runs a scenario on a real control plane (`karpenter-envtest`, `KUBEBUILDER_ASSETS`) with
//! `karpenter controller --cloud-provider sim` as a child process, phase after phase, sampling the
//! controller's memory and CPU from `/proc` as upstream's profiler samples its pod.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::resources::ResourceList;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::report::{PhaseReport, ScenarioReport};
use super::scenarios::{Deploy, Phase, PhaseKind, Scenario};
use crate::process::memory_kib;

/// What `karpenter-bench perf` runs.
#[derive(Clone, Debug)]
pub struct PerfOptions {
    /// The `karpenter` binary whose `controller` is measured.
    pub karpenter: PathBuf,
    /// The CRDs to install (`deploy/crds`).
    pub crds: PathBuf,
    /// A phase that has not finished after this long fails the run.
    pub timeout: Duration,
    /// Quiet time (no node added, removed or draining) that ends a consolidation.
    pub settle: Duration,
}

const FIELD_MANAGER: &str = "karpenter-bench";
/// Every object the benchmark makes carries it (upstream's `test.DiscoveryLabel`).
pub(crate) const OWNED: (&str, &str) = ("karpenter-bench/perf", "owned");
pub(crate) const POLL: Duration = Duration::from_secs(1);
const SAMPLE: Duration = Duration::from_millis(500);
/// `/proc/<pid>/stat` counts CPU in clock ticks: 100 per second on Linux (`USER_HZ`).
const TICKS_PER_SECOND: f64 = 100.0;

/// One sample of the controller process.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    rss_kib: u64,
    cpu_ticks: u64,
}

pub async fn run_scenario(
    scenario: &Scenario,
    options: &PerfOptions,
) -> anyhow::Result<ScenarioReport> {
    let setup = karpenter_envtest::Setup {
        crds: vec![options.crds.clone()],
    };
    let Some(cluster) = karpenter_envtest::cluster(scenario.name, &setup).await else {
        bail!(
            "no control plane: set KUBEBUILDER_ASSETS to a directory holding etcd, kube-apiserver, \
             kube-controller-manager and kube-scheduler (e.g. `export KUBEBUILDER_ASSETS=$(../shared/k8s/unpack.sh)`)"
        );
    };
    let karpenter = cluster
        .start_karpenter(
            &options.karpenter,
            &karpenter_envtest::KarpenterOptions::default().env("LOG_LEVEL", "info"),
        )
        .context("starting the controller")?;
    let client = cluster.client();
    let ns = cluster.namespace().to_string();
    apply(&client, None, &node_class()).await?;
    apply(&client, None, &node_pool()).await?;

    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let sampler = tokio::spawn(sample(karpenter.pid(), samples.clone()));
    let mut phases = Vec::new();
    let mut result = Ok(());
    for phase in &scenario.phases {
        match run_phase(&client, &ns, phase, options, &samples).await {
            Ok(report) => {
                eprintln!("  {}: {}", phase.key, report.summary());
                phases.push(report);
            }
            Err(err) => {
                result = Err(err.context(format!("{} ({})", phase.key, scenario.name)));
                break;
            }
        }
    }
    sampler.abort();
    let peak_rss_kib = memory_kib(karpenter.pid()).0;
    if let Err(err) = result {
        eprintln!("--- the controller's log (last 40 lines) ---");
        let log = karpenter.log();
        let lines: Vec<&str> = log.lines().collect();
        for line in &lines[lines.len().saturating_sub(40)..] {
            eprintln!("{line}");
        }
        return Err(err);
    }
    Ok(ScenarioReport {
        scenario: scenario.name.to_string(),
        upstream: scenario.upstream.to_string(),
        kubernetes: cluster.plane().version().to_string(),
        peak_rss_mib: peak_rss_kib.map(|k| k as f64 / 1024.0),
        phases,
    })
}

async fn run_phase(
    client: &Client,
    ns: &str,
    phase: &Phase,
    options: &PerfOptions,
    samples: &Arc<Mutex<Vec<Sample>>>,
) -> anyhow::Result<PhaseReport> {
    let nodes_before = managed_nodes(client).await?.len();
    let claims_before: BTreeSet<String> = list::<NodeClaim>(client)
        .await?
        .iter()
        .map(|c| c.name_any())
        .collect();
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    for deploy in &phase.create {
        apply(client, Some(ns), &deployment(deploy)).await?;
    }
    for (name, replicas) in &phase.scale {
        Api::<Deployment>::namespaced(client.clone(), ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .with_context(|| format!("scaling {name} to {replicas}"))?;
    }
    if phase.kind == PhaseKind::Drift {
        // A merge patch: an applied configuration must hold the whole template.
        let trigger = format!("drift-{}", started_at.as_second());
        Api::<NodePool>::all(client.clone())
            .patch(
                "default",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"test-drift-trigger": trigger}}}}})),
            )
            .await
            .context("changing the NodePool's template")?;
    }

    let mut last_change = started;
    let mut last_nodes: Option<BTreeSet<String>> = None;
    let finished = loop {
        if started.elapsed() > options.timeout {
            bail!("not finished after {:?} (raise --timeout)", options.timeout);
        }
        let healthy = healthy_pods(client, ns).await?;
        let nodes = managed_nodes(client).await?;
        let names: BTreeSet<String> = nodes.iter().map(|n| n.name_any()).collect();
        let draining = nodes.iter().any(draining);
        if draining || last_nodes.as_ref() != Some(&names) {
            last_change = Instant::now();
        }
        last_nodes = Some(names);
        let done = healthy.len() == phase.expect_pods
            && match phase.kind {
                PhaseKind::ScaleOut => true,
                PhaseKind::Consolidation => last_change.elapsed() >= options.settle,
                PhaseKind::Drift => {
                    let claims = list::<NodeClaim>(client).await?;
                    !draining
                        && claims
                            .iter()
                            .all(|c| !claims_before.contains(&c.name_any()))
                }
            };
        if done {
            let at = match phase.kind {
                PhaseKind::Consolidation => last_change,
                _ => Instant::now(),
            };
            // The pods and nodes of the sample that ended the phase: a second list taken after
            // it can differ (a 10,000-pod scale-out ended on 10,000 healthy pods and reported
            // 9,992).
            break (at, healthy, nodes);
        }
        tokio::time::sleep(POLL).await;
    };
    let (finished, pods, nodes) = finished;
    let last_bound = pods
        .iter()
        .filter_map(pod_scheduled)
        .max()
        .map(|at| at.duration_since(started_at).as_secs_f64().max(0.0));
    let last_created = pods
        .iter()
        .filter_map(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .max()
        .map(|at| at.duration_since(started_at).as_secs_f64().max(0.0));
    let window: Vec<Sample> = samples
        .lock()
        .map(|s| s.iter().filter(|s| s.at >= started).copied().collect())
        .unwrap_or_default();
    let (cpu_util, memory_util) = utilization(&pods, &nodes);
    Ok(PhaseReport {
        key: phase.key.to_string(),
        kind: format!("{:?}", phase.kind),
        pods: pods.len(),
        nodes_before,
        nodes_after: nodes.len(),
        seconds: finished.duration_since(started).as_secs_f64(),
        last_bound_seconds: last_bound,
        last_created_seconds: last_created,
        memory_p95_mib: percentile(
            window.iter().map(|s| s.rss_kib as f64 / 1024.0).collect(),
            0.95,
        ),
        cpu_avg_cores: average_cores(&window),
        cpu_util,
        memory_util,
        limits: phase.limits.into(),
    })
}

/// Samples the controller's resident memory and CPU ticks until aborted.
async fn sample(pid: u32, samples: Arc<Mutex<Vec<Sample>>>) {
    loop {
        let rss = memory_kib(pid).1;
        let ticks = cpu_ticks(pid);
        if let (Some(rss_kib), Some(cpu_ticks)) = (rss, ticks)
            && let Ok(mut samples) = samples.lock()
        {
            samples.push(Sample {
                at: Instant::now(),
                rss_kib,
                cpu_ticks,
            });
        }
        tokio::time::sleep(SAMPLE).await;
    }
}

/// User plus system CPU of a process, in clock ticks (`/proc/<pid>/stat` fields 14 and 15).
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&stat)
}

fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis,
    // where field 3 (state) is the first.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    utime.checked_add(stime)
}

fn average_cores(window: &[Sample]) -> Option<f64> {
    let (first, last) = (window.first()?, window.last()?);
    let seconds = last.at.duration_since(first.at).as_secs_f64();
    (seconds > 0.0)
        .then(|| last.cpu_ticks.saturating_sub(first.cpu_ticks) as f64 / TICKS_PER_SECOND / seconds)
}

fn percentile(mut values: Vec<f64>, q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64 - 1.0) * q).round() as usize;
    values.get(rank.min(values.len() - 1)).copied()
}

/// The pods' requests over the managed nodes' allocatable (upstream's reserved utilization).
pub(crate) fn utilization(pods: &[Pod], nodes: &[Node]) -> (Option<f64>, Option<f64>) {
    let mut requested = ResourceList::new();
    // The benchmark's pods are single-container pause pods: their requests are the container's.
    let containers = pods
        .iter()
        .filter_map(|p| p.spec.as_ref())
        .flat_map(|s| &s.containers);
    for container in containers {
        if let Some(r) = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            && let Ok(r) = ResourceList::from_k8s(r)
        {
            requested.add(&r);
        }
    }
    let mut allocatable = ResourceList::new();
    for node in nodes {
        if let Some(a) = node.status.as_ref().and_then(|s| s.allocatable.as_ref())
            && let Ok(a) = ResourceList::from_k8s(a)
        {
            allocatable.add(&a);
        }
    }
    let ratio = |name: &str| {
        let total = allocatable.get(name).as_f64_units();
        (total > 0.0).then(|| requested.get(name).as_f64_units() / total)
    };
    (ratio("cpu"), ratio("memory"))
}

pub(crate) fn draining(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_some()
        || node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"))
}

pub(crate) fn pod_scheduled(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

pub(crate) async fn healthy_pods(client: &Client, ns: &str) -> anyhow::Result<Vec<Pod>> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{}={}", OWNED.0, OWNED.1)))
        .await
        .context("listing pods")?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .collect())
}

pub(crate) async fn managed_nodes(client: &Client) -> anyhow::Result<Vec<Node>> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("karpenter.sh/nodepool"))
        .await
        .context("listing nodes")?;
    Ok(nodes.items)
}

async fn list<K>(client: &Client) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Ok(Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {}", K::kind(&())))?
        .items)
}

/// Server-side apply of a NodePool, EC2NodeClass or Deployment (by its `kind`).
pub(crate) async fn apply(client: &Client, ns: Option<&str>, object: &Value) -> anyhow::Result<()> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let patch = Patch::Apply(object);
    let result = match object["kind"].as_str() {
        Some("NodePool") => Api::<NodePool>::all(client.clone())
            .patch(&name, &params, &patch)
            .await
            .map(drop),
        Some("EC2NodeClass") => Api::<karpenter_api::v1::EC2NodeClass>::all(client.clone())
            .patch(&name, &params, &patch)
            .await
            .map(drop),
        Some("Deployment") => {
            Api::<Deployment>::namespaced(client.clone(), ns.unwrap_or("default"))
                .patch(&name, &params, &patch)
                .await
                .map(drop)
        }
        other => bail!("the benchmark does not apply {other:?}"),
    };
    result.with_context(|| format!("applying {} {name}", object["kind"]))
}

pub(crate) fn node_class() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-perf",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "perf"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "perf"}}]
        }
    })
}

/// Upstream's performance suite NodePool (`suite_test.go`): on-demand, instances below 32 vCPUs
/// (kwok's `instance-size Lt 32`), no limits, `WhenEmptyOrUnderutilized` after 30 s, a 100 %
/// budget.
fn node_pool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "30s",
                "budgets": [{"nodes": "100%"}]
            },
            "template": {
                "spec": {
                    "expireAfter": "Never",
                    "requirements": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["32"]}
                    ],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
                }
            }
        }
    })
}

/// A Deployment as upstream's `test.Deployment` makes it: pause pods with the requests, the
/// modifiers as constraints over `app: NAME`.
pub(crate) fn deployment(d: &Deploy) -> Value {
    let selector = json!({"matchLabels": {"app": d.name}});
    let mut spreads = Vec::new();
    if d.zone_spread {
        spreads.push(
            json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}),
        );
    }
    if d.hostname_spread {
        spreads.push(
            json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}),
        );
    }
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                        "resources": {"requests": {"cpu": d.cpu, "memory": d.memory}}}]
    });
    if !spreads.is_empty() {
        spec["topologySpreadConstraints"] = json!(spreads);
    }
    if d.anti_affinity {
        spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}]}});
    }
    let mut template_meta = json!({"labels": {"app": d.name, OWNED.0: OWNED.1}});
    if d.do_not_disrupt {
        template_meta["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": d.name, "labels": {OWNED.0: OWNED.1}},
        "spec": {
            "replicas": d.replicas,
            "selector": selector,
            "template": {"metadata": template_meta, "spec": spec}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_past_a_command_with_spaces() {
        let stat = "4242 (karpenter ctl) S 1 4242 4242 0 -1 4194560 100 0 0 0 350 150 0 0 20 0 9 0 123 456 789";
        assert_eq!(parse_cpu_ticks(stat), Some(500));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn the_p95_of_samples() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(values, 0.95), Some(95.0));
        assert_eq!(percentile(Vec::new(), 0.95), None);
    }

    #[test]
    fn deployments_carry_upstreams_modifiers() {
        let mut d = Deploy {
            name: "x".into(),
            replicas: 3,
            cpu: "1".into(),
            memory: "1Gi".into(),
            hostname_spread: true,
            zone_spread: true,
            anti_affinity: true,
            do_not_disrupt: true,
        };
        let v = deployment(&d);
        let spec = &v["spec"]["template"]["spec"];
        assert_eq!(
            spec["topologySpreadConstraints"].as_array().map(Vec::len),
            Some(2)
        );
        assert!(spec["affinity"]["podAntiAffinity"].is_object());
        assert_eq!(
            v["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"],
            "true"
        );
        d.hostname_spread = false;
        d.zone_spread = false;
        d.anti_affinity = false;
        d.do_not_disrupt = false;
        let v = deployment(&d);
        assert!(
            v["spec"]["template"]["spec"]
                .get("topologySpreadConstraints")
                .is_none()
        );
        assert!(
            v["spec"]["template"]["metadata"]
                .get("annotations")
                .is_none()
        );
    }
}
