//! `karpenter bench disruption`: one full disruption pass (`karpenter_core::disruption::decide`)
//! over a large simulated cluster on the embedded catalogue — 1,000 nodes and 10,000 pods by
//! default, mixed instance sizes, zone spread and hostname anti-affinity as in the scheduling
//! benchmark, about 30 % of the nodes lightly used (consolidatable). Reports the time of the
//! candidate scan and of the pass, candidates evaluated, commands found and peak memory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::clock::SystemClock;
use karpenter_core::disruption::candidates::{DisruptionClass, Rejection, candidates};
use karpenter_core::disruption::{
    Command, DisruptionInput, DisruptionOptions, ProviderDrift, consolidation, decide,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::pod::Pod;
use karpenter_core::scheduling::SchedulerOptions;
use karpenter_core::scheduling::benchmark::Rng;
use karpenter_core::state::ClusterState;
use karpenter_sim::SimCloudProvider;
use serde::Serialize;
use serde_json::json;

use super::policies::PackingPolicyArg;
use crate::output::{self, Format};

#[derive(Debug, clap::Args)]
pub struct DisruptionBenchArgs {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Pods per node (10,000 pods on 1,000 nodes by default).
    #[arg(long, default_value_t = 10)]
    pub pods_per_node: usize,
    /// Share of lightly used (consolidatable) nodes, in percent.
    #[arg(long, default_value_t = 30)]
    pub consolidatable_percent: usize,
    /// Seed for the cluster generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Consolidate toward the cost lower bound (`CostOptimal`, the default: several
    /// replacements, the most wasteful nodes re-planned together) or as upstream does
    /// (`Upstream`, upstream Karpenter's choices, for comparison).
    #[arg(long, value_enum, default_value = "CostOptimal")]
    pub packing_policy: PackingPolicyArg,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// The former spelling of `-o json`, kept for scripts.
    #[arg(long, hide = true, conflicts_with = "output")]
    pub json: bool,
}

impl DisruptionBenchArgs {
    /// `-o`, or JSON for the hidden `--json`.
    pub fn format(&self) -> Format {
        if self.json { Format::Json } else { self.output }
    }
}

/// What `bench disruption -o json` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBenchReport {
    pub nodes: usize,
    pub pods: usize,
    /// Nodes generated lightly used.
    pub consolidatable_nodes: usize,
    /// Nodes that passed every candidate filter (the ones the methods evaluate).
    pub candidates_evaluated: usize,
    /// Seconds of the candidate scan alone.
    pub candidates_seconds: f64,
    /// Seconds of one full `decide` pass (every method in order until one finds work).
    pub pass_seconds: f64,
    /// Seconds of multi-node consolidation alone (its binary search over the best candidates).
    pub multi_node_seconds: f64,
    /// Seconds of single-node consolidation alone (it stops at the first candidate that works).
    pub single_node_seconds: f64,
    /// Seconds to judge every consolidation candidate on its own (single-node consolidation
    /// without stopping at the first command): the "evaluates every candidate" figure.
    pub every_candidate_seconds: f64,
    /// Candidates judged in that run (the consolidation candidates: not empty, past
    /// consolidateAfter, ...).
    pub every_candidate_judged: usize,
    /// How many of them could be deleted or replaced on their own.
    pub every_candidate_commands: usize,
    /// The method that found work, if any.
    pub method: Option<String>,
    pub commands: usize,
    /// Nodes the commands disrupt.
    pub disrupted_nodes: usize,
    pub blocked: usize,
    /// Peak resident memory of this process (`VmHWM`), KiB.
    pub peak_rss_kib: Option<u64>,
}

const TYPES: [&str; 6] = [
    "m5.large",
    "m5.xlarge",
    "m5.2xlarge",
    "c5.xlarge",
    "c5.2xlarge",
    "r5.xlarge",
];
const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

pub fn run(args: &DisruptionBenchArgs) -> anyhow::Result<std::process::ExitCode> {
    let report = measure(args)?;
    output::render(args.format(), &report, table)?;
    Ok(std::process::ExitCode::SUCCESS)
}

fn table(report: &DisruptionBenchReport) -> String {
    let seconds = |s: f64| format!("{s:.3} s");
    let rows = [
        ("nodes", report.nodes.to_string()),
        ("pods", report.pods.to_string()),
        (
            "consolidatable nodes",
            report.consolidatable_nodes.to_string(),
        ),
        (
            "candidates evaluated",
            report.candidates_evaluated.to_string(),
        ),
        ("candidate scan", seconds(report.candidates_seconds)),
        ("decide pass", seconds(report.pass_seconds)),
        ("multi-node alone", seconds(report.multi_node_seconds)),
        ("single-node alone", seconds(report.single_node_seconds)),
        (
            "every candidate",
            format!(
                "{} ({} judged, {} workable)",
                seconds(report.every_candidate_seconds),
                report.every_candidate_judged,
                report.every_candidate_commands
            ),
        ),
        (
            "method",
            report.method.clone().unwrap_or_else(|| "none".to_string()),
        ),
        ("commands", report.commands.to_string()),
        ("disrupted nodes", report.disrupted_nodes.to_string()),
        ("blocked nodes", report.blocked.to_string()),
        (
            "peak RSS",
            report.peak_rss_kib.map_or("n/a".to_string(), |k| {
                format!("{:.1} MiB", k as f64 / 1024.0)
            }),
        ),
    ];
    output::key_values(&rows)
}

pub fn measure(args: &DisruptionBenchArgs) -> anyhow::Result<DisruptionBenchReport> {
    let provider = SimCloudProvider::new(karpenter_catalog::DEFAULT_REGION, Arc::new(SystemClock))?;
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                           "consolidateAfter": "30s", "budgets": [{"nodes": "100%"}]},
            "template": {"spec": {
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5", "r5"]}
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }}
        }
    }))?;
    let types = provider.instance_types_for(&pool, None)?;
    let by_name: BTreeMap<&str, &Arc<InstanceType>> =
        types.iter().map(|t| (t.name.as_str(), t)).collect();
    let now = Timestamp::now();
    let started = now
        .checked_sub(SignedDuration::from_hours(2))
        .unwrap_or(now);
    let mut rng = Rng::new(args.seed);
    let mut claims: Vec<NodeClaim> = Vec::with_capacity(args.nodes);
    let mut nodes: Vec<Node> = Vec::with_capacity(args.nodes);
    let mut pods: Vec<Pod> = Vec::new();
    let mut consolidatable = 0usize;
    for i in 0..args.nodes {
        let type_name = TYPES[rng.below(TYPES.len())];
        let zone = ZONES[i % ZONES.len()];
        let Some(instance_type) = by_name.get(type_name) else {
            anyhow::bail!("instance type {type_name} is not in the catalogue");
        };
        let name = format!("node-{i:05}");
        let light = rng.below(100) < args.consolidatable_percent;
        consolidatable += usize::from(light);
        let (claim, node) = node_objects(&name, instance_type, zone, started)?;
        claims.push(claim);
        nodes.push(node);
        // Busy nodes are filled to ~80 % of their CPU; light ones carry tiny pods.
        let allocatable_cores = instance_type.allocatable().get("cpu").as_f64_units();
        let per_pod_milli = if light {
            10
        } else {
            // Bounded by the catalogue's largest type: no overflow.
            (allocatable_cores * 800.0 / args.pods_per_node.max(1) as f64) as i64
        };
        for j in 0..args.pods_per_node {
            pods.push(pod(&name, i, j, per_pod_milli.max(10), started, &mut rng)?);
        }
    }
    let pod_count = pods.len();
    let state = ClusterState::from_objects(vec![pool], claims, nodes, pods);
    let instance_types = BTreeMap::from([("default".to_string(), types)]);
    let scheduler = SchedulerOptions {
        packing_policy: args.packing_policy.into(),
        ..SchedulerOptions::default()
    };
    let options = DisruptionOptions::default();
    let drift = ProviderDrift::new();

    let scan = Instant::now();
    let (found, _) = candidates(&state, now, DisruptionClass::Graceful, &instance_types);
    let candidates_seconds = scan.elapsed().as_secs_f64();
    let candidates_evaluated = found.len();
    drop(found);

    let input = DisruptionInput {
        state: &state,
        instance_types: &instance_types,
        scheduler: &scheduler,
        options: &options,
        provider_drift: &drift,
        now,
    };
    let pass_start = Instant::now();
    let pass = decide(&input);
    let pass_seconds = pass_start.elapsed().as_secs_f64();
    let timed =
        |method: fn(&DisruptionInput<'_>, &mut BTreeMap<String, Rejection>) -> Vec<Command>| {
            let mut blocked = BTreeMap::new();
            let start = Instant::now();
            let commands = method(&input, &mut blocked);
            (start.elapsed().as_secs_f64(), commands, blocked)
        };
    let (multi_node_seconds, _, _) =
        timed(|input, blocked| consolidation::multi_node(input, blocked));
    let (single_node_seconds, _, _) =
        timed(|input, blocked| consolidation::single_node(input, blocked));
    let (every_candidate_seconds, workable, _) =
        timed(|input, blocked| consolidation::evaluate_each(input, blocked));
    let every_candidate_judged =
        consolidation::consolidation_candidates(&input, &mut BTreeMap::new()).len();
    Ok(DisruptionBenchReport {
        nodes: args.nodes,
        pods: pod_count,
        consolidatable_nodes: consolidatable,
        candidates_evaluated,
        candidates_seconds,
        pass_seconds,
        multi_node_seconds,
        single_node_seconds,
        every_candidate_seconds,
        every_candidate_judged,
        every_candidate_commands: workable.len(),
        method: pass.method.map(|m| m.as_str().to_string()),
        commands: pass.commands.len(),
        disrupted_nodes: pass.commands.iter().map(|c| c.candidates.len()).sum(),
        blocked: pass.blocked.len(),
        peak_rss_kib: peak_rss_kib(),
    })
}

/// This process's peak resident memory (`VmHWM` in `/proc/self/status`, KiB; Linux only).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let value = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    value.trim().trim_end_matches("kB").trim().parse().ok()
}

fn node_objects(
    name: &str,
    instance_type: &InstanceType,
    zone: &str,
    created: Timestamp,
) -> anyhow::Result<(NodeClaim, Node)> {
    let provider_id = format!("aws:///{zone}/i-{name}");
    let capacity = instance_type.capacity.to_k8s();
    let allocatable = instance_type.allocatable().to_k8s();
    let labels = json!({
        "karpenter.sh/nodepool": "default",
        "karpenter.sh/initialized": "true",
        "karpenter.sh/registered": "true",
        "node.kubernetes.io/instance-type": instance_type.name,
        "topology.kubernetes.io/zone": zone,
        "karpenter.sh/capacity-type": "on-demand",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
    });
    let created = created.to_string();
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "creationTimestamp": created, "labels": labels},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                              "values": [instance_type.name]}]
        },
        "status": {
            "providerID": provider_id, "nodeName": name,
            "capacity": capacity, "allocatable": allocatable,
            "conditions": [
                {"type": "Launched", "status": "True", "lastTransitionTime": created},
                {"type": "Registered", "status": "True", "lastTransitionTime": created},
                {"type": "Initialized", "status": "True", "lastTransitionTime": created}
            ]
        }
    }))?;
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": created, "labels": labels},
        "spec": {"providerID": provider_id},
        "status": {"capacity": capacity, "allocatable": allocatable,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))?;
    Ok((claim, node))
}

/// One pod bound to `node`: a third spread over zones, a tenth with hostname anti-affinity
/// within its app, the rest plain; requests `cpu_milli` and 256Mi.
fn pod(
    node: &str,
    node_index: usize,
    index: usize,
    cpu_milli: i64,
    bound: Timestamp,
    rng: &mut Rng,
) -> anyhow::Result<Pod> {
    let app = format!("app-{}", rng.below(50));
    let mut spec = json!({
        "nodeName": node,
        "containers": [{"name": "app", "image": "nginx",
                        "resources": {"requests": {"cpu": format!("{cpu_milli}m"), "memory": "256Mi"}}}]
    });
    match rng.below(10) {
        0..=2 => {
            spec["topologySpreadConstraints"] = json!([{
                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": app}}
            }]);
        }
        3 => {
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"anti": format!("{app}-{node_index}-{index}")}}
            }]}});
        }
        _ => {}
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{node}-{index}"), "namespace": "default",
                     "labels": {"app": app, "anti": format!("{app}-{node_index}-{index}")},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": app, "uid": app, "controller": true}]},
        "spec": spec,
        "status": {"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": bound.to_string()},
            {"type": "Ready", "status": "True", "lastTransitionTime": bound.to_string()}
        ]}
    }))?)
}
