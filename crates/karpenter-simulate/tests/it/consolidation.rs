//! Consolidation toward the cost lower bound (issue 24 part 3): a poorly packed cluster (a few
//! Deployment pods per node, on random c/m/r types of the embedded catalogue) run through
//! `simulate --disruption` under both packing policies until the loop converges; the final cost
//! is compared with the fractional lower bound of its pods (`summary.costLowerBound` of a plan
//! of the same pods from scratch).
//!
//! The 300-node run of the issue is `#[ignore]`d (minutes in a debug build):
//! `cargo test --release -p karpenter-simulate --test it consolidation -- --include-ignored --nocapture`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use karpenter_core::clock::FakeClock;
use karpenter_core::instance_type::InstanceType;
use karpenter_core::scheduling::benchmark::Rng;
use karpenter_core::scheduling::packing_workloads::{Profile, Workload};
use karpenter_core::scheduling::{PackingPolicy, SchedulerOptions};
use karpenter_sim::SimCloudProvider;
use karpenter_simulate::disruption::report::DisruptionReport;
use karpenter_simulate::disruption::{MAX_STEPS, TimelineSettings};
use karpenter_simulate::{DisruptionSettings, Manifests, plan_with, simulate_disruption};

const NOW: &str = "2026-01-30T23:00:00Z";
const ZONE: &str = "us-east-1a";
/// The sizes the poorly packed nodes are drawn from.
const SIZES: [&str; 4] = ["large", "xlarge", "2xlarge", "4xlarge"];

const POOL: &str = r#"apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-my-cluster
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: my-cluster}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: my-cluster}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 0s
  template:
    spec:
      expireAfter: Never
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
        - {key: topology.kubernetes.io/zone, operator: In, values: ["us-east-1a"]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m", "r"]}
        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["4"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#;

fn provider() -> SimCloudProvider {
    let now: Timestamp = NOW.parse().unwrap();
    SimCloudProvider::new("us-east-1", Arc::new(FakeClock::new(now))).unwrap()
}

/// A pod's (cpu millicores, memory MiB), as the workload generator wrote them.
fn requests(pod: &karpenter_core::pod::Pod) -> (i64, i64) {
    let requests = pod.spec.as_ref().unwrap().containers[0]
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap();
    let number = |key: &str, suffix: &str| -> i64 {
        requests[key].0.trim_end_matches(suffix).parse().unwrap()
    };
    (number("cpu", "m"), number("memory", "Mi"))
}

/// A node type the poorly packed cluster may use: c/m/r, generation > 4, one of [`SIZES`],
/// sold on demand in the zone; with its allocatable cpu (millicores) and memory (MiB).
struct NodeType {
    it: Arc<InstanceType>,
    cpu: i64,
    memory_mib: i64,
}

fn node_types(provider: &SimCloudProvider, manifests: &Manifests) -> Vec<NodeType> {
    let types = provider
        .instance_types_for(&manifests.node_pools[0], manifests.node_classes.first())
        .unwrap();
    let label = |it: &InstanceType, key: &str| it.labels.get(key).cloned().unwrap_or_default();
    types
        .into_iter()
        .filter(|it| {
            ["c", "m", "r"].contains(&label(it, "karpenter.k8s.aws/instance-category").as_str())
        })
        .filter(|it| {
            label(it, "karpenter.k8s.aws/instance-generation")
                .parse::<u32>()
                .is_ok_and(|g| g > 4)
        })
        .filter(|it| SIZES.contains(&label(it, "karpenter.k8s.aws/instance-size").as_str()))
        .filter(|it| {
            it.offerings
                .iter()
                .any(|o| o.available && o.zone == ZONE && o.capacity_type == "on-demand")
        })
        .map(|it| {
            let allocatable = it.allocatable();
            NodeType {
                cpu: (allocatable.get("cpu").as_f64_units() * 1000.0) as i64,
                memory_mib: (allocatable.get("memory").as_f64_units() / 1_048_576.0) as i64,
                it,
            }
        })
        .collect()
}

/// The generated cluster: manifests with the nodes and their bound pods, and the same pods
/// pending over the pool alone (for the bound).
struct Generated {
    cluster: String,
    pending: String,
    pods: usize,
    /// Each pod's (cpu millicores, memory MiB), by name.
    requests: std::collections::BTreeMap<String, (i64, i64)>,
    /// Each node type's allocatable (cpu millicores, memory MiB), by name.
    types: std::collections::BTreeMap<String, (i64, i64)>,
}

/// `nodes` nodes, each of a random type holding 1–3 consecutive pods of the workload (so the
/// pods of a Deployment spread over several nodes), the type drawn among those that hold them.
fn poorly_packed(nodes: usize, profile: Profile, seed: u64) -> Generated {
    let provider = provider();
    let mut pool_only = Manifests::new();
    pool_only.load_str("pool.yaml", POOL).unwrap();
    let types = node_types(&provider, &pool_only);
    assert!(types.len() > 20, "{} types", types.len());
    let workload = Workload {
        name: "app",
        profile,
        pods: nodes * 3,
        spread_every: 0,
        seed,
    };
    let pods = workload.pods();
    let mut rng = Rng::new(seed);
    let mut cluster = String::from(POOL);
    let mut pending = String::from(POOL);
    let mut next = 0;
    let mut pod_count = 0;
    let mut pod_requests = std::collections::BTreeMap::new();
    for index in 0..nodes {
        let mut take = 1 + rng.below(3);
        let fitting = loop {
            let group = &pods[next..(next + take).min(pods.len())];
            let (cpu, memory) = group
                .iter()
                .map(|p| requests(p))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            let fitting: Vec<&NodeType> = types
                .iter()
                .filter(|t| t.cpu >= cpu && t.memory_mib >= memory)
                .collect();
            if !fitting.is_empty() || take == 1 {
                break fitting;
            }
            take -= 1;
        };
        let node_type = fitting[rng.below(fitting.len())];
        let name = format!("node-{index}");
        node_yaml(&mut cluster, index, &name, node_type);
        for (p, pod) in pods[next..next + take].iter().enumerate() {
            let (cpu, memory) = requests(pod);
            let app = pod.metadata.name.as_deref().unwrap();
            let pod_name = format!("{app}-{index}-{p}");
            pod_yaml(&mut cluster, &pod_name, app, cpu, memory, Some(&name));
            pod_yaml(&mut pending, &pod_name, app, cpu, memory, None);
            pod_requests.insert(pod_name, (cpu, memory));
            pod_count += 1;
        }
        next += take;
    }
    Generated {
        cluster,
        pending,
        pods: pod_count,
        requests: pod_requests,
        types: provider
            .instance_types_for(&pool_only.node_pools[0], pool_only.node_classes.first())
            .unwrap()
            .iter()
            .map(|it| {
                let allocatable = it.allocatable();
                (
                    it.name.clone(),
                    (
                        (allocatable.get("cpu").as_f64_units() * 1000.0) as i64,
                        (allocatable.get("memory").as_f64_units() / 1_048_576.0) as i64,
                    ),
                )
            })
            .collect(),
    }
}

fn node_yaml(out: &mut String, index: usize, name: &str, node_type: &NodeType) {
    let it = &node_type.it;
    let mut labels = it.labels.clone();
    labels.insert("karpenter.sh/nodepool".into(), "default".into());
    labels.insert("topology.kubernetes.io/zone".into(), ZONE.into());
    labels.insert("karpenter.sh/capacity-type".into(), "on-demand".into());
    let claim_labels = labels
        .iter()
        .map(|(k, v)| format!("{k}: \"{v}\""))
        .collect::<Vec<_>>()
        .join(", ");
    labels.insert("karpenter.sh/initialized".into(), "true".into());
    labels.insert("karpenter.sh/registered".into(), "true".into());
    labels.insert("kubernetes.io/hostname".into(), name.into());
    let node_labels = labels
        .iter()
        .map(|(k, v)| format!("{k}: \"{v}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let allocatable = format!(
        "{{cpu: \"{}m\", memory: \"{}Mi\", pods: \"{}\"}}",
        node_type.cpu,
        node_type.memory_mib,
        it.allocatable().get("pods").as_f64_units() as i64
    );
    let instance_type = &it.name;
    writeln!(
        out,
        r#"---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {name}
  creationTimestamp: "2026-01-01T00:00:00Z"
  labels: {{{claim_labels}}}
spec:
  expireAfter: Never
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  requirements:
    - {{key: node.kubernetes.io/instance-type, operator: In, values: ["{instance_type}"]}}
status:
  providerID: aws:///{ZONE}/i-{index}
  nodeName: {name}
  capacity: {allocatable}
  allocatable: {allocatable}
  conditions:
    - {{type: Launched, status: "True", lastTransitionTime: "2026-01-01T00:00:00Z"}}
    - {{type: Registered, status: "True", lastTransitionTime: "2026-01-01T00:00:00Z"}}
    - {{type: Initialized, status: "True", lastTransitionTime: "2026-01-01T00:00:00Z"}}
---
apiVersion: v1
kind: Node
metadata:
  name: {name}
  creationTimestamp: "2026-01-01T00:00:00Z"
  labels: {{{node_labels}}}
spec:
  providerID: aws:///{ZONE}/i-{index}
status:
  capacity: {allocatable}
  allocatable: {allocatable}
  conditions:
    - {{type: Ready, status: "True"}}"#
    )
    .unwrap();
}

fn pod_yaml(out: &mut String, name: &str, app: &str, cpu: i64, memory: i64, node: Option<&str>) {
    let node_name = node
        .map(|n| format!("  nodeName: {n}\n"))
        .unwrap_or_default();
    let status = if node.is_some() { "Running" } else { "Pending" };
    writeln!(
        out,
        r#"---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels: {{app: {app}}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: {app}, uid: {app}, controller: true}}]
spec:
{node_name}  containers:
    - name: app
      image: app
      resources: {{requests: {{cpu: "{cpu}m", memory: "{memory}Mi"}}}}
status: {{phase: {status}}}"#
    )
    .unwrap();
}

/// What one run of the loop came to.
struct Converged {
    report: DisruptionReport,
    bound: f64,
    wall: Duration,
}

impl Converged {
    fn ratio(&self) -> f64 {
        self.report.after.hourly_cost / self.bound
    }

    fn virtual_minutes(&self) -> f64 {
        let now: Timestamp = NOW.parse().unwrap();
        self.report
            .completed_at
            .as_deref()
            .and_then(|at| at.parse::<Timestamp>().ok())
            .map_or(0.0, |at| at.duration_since(now).as_secs_f64() / 60.0)
    }
}

fn converge(generated: &Generated, policy: PackingPolicy) -> Converged {
    let provider = provider();
    let options = SchedulerOptions {
        packing_policy: policy,
        ..Default::default()
    };
    let mut pending = Manifests::new();
    pending
        .load_str("pending.yaml", &generated.pending)
        .unwrap();
    let bound = plan_with(&pending, &provider, options.clone())
        .unwrap()
        .plan
        .summary
        .cost_lower_bound;
    let mut manifests = Manifests::new();
    manifests
        .load_str("cluster.yaml", &generated.cluster)
        .unwrap();
    let outcome = plan_with(&manifests, &provider, options.clone()).unwrap();
    let started = Instant::now();
    let report = simulate_disruption(
        &manifests,
        &provider,
        options,
        &outcome,
        DisruptionSettings {
            now: NOW.parse().unwrap(),
            until: SignedDuration::from_hours(
                std::env::var("HOURS")
                    .ok()
                    .and_then(|h| h.parse().ok())
                    .unwrap_or(48),
            ),
            max_steps: MAX_STEPS,
            feature_gates: Default::default(),
            timeline: TimelineSettings::default(),
        },
    )
    .unwrap();
    Converged {
        report,
        bound,
        wall: started.elapsed(),
    }
}

/// Runs both policies on the cluster, prints what they came to, checks the invariants every run
/// keeps, and returns (Upstream, CostOptimal).
fn compare(nodes: usize, profile: Profile, seed: u64) -> (Converged, Converged) {
    let generated = poorly_packed(nodes, profile, seed);
    let upstream = converge(&generated, PackingPolicy::Upstream);
    let cost_optimal = converge(&generated, PackingPolicy::CostOptimal);
    for (policy, run) in [("Upstream", &upstream), ("CostOptimal", &cost_optimal)] {
        let report = &run.report;
        eprintln!(
            "{nodes} nodes, {} pods, {profile:?}, {policy}: ${:.2}/h -> ${:.2}/h, {} -> {} nodes, bound ${:.2}/h, ratio {:.3}, {} commands ({} launching several nodes), converged after {:.0} virtual minutes, wall {:.1?}",
            generated.pods,
            report.before.hourly_cost,
            report.after.hourly_cost,
            report.before.nodes,
            report.after.nodes.len(),
            run.bound,
            run.ratio(),
            report.commands.len(),
            report
                .commands
                .iter()
                .filter(|c| c.replacements.len() > 1)
                .count(),
            run.virtual_minutes(),
            run.wall,
        );
    }
    if std::env::var("DETAIL").is_ok() {
        for (policy, run) in [("Upstream", &upstream), ("CostOptimal", &cost_optimal)] {
            for command in run.report.commands.iter().rev().take(40).rev() {
                eprintln!(
                    "  {} {} {:?} -> {:?} saves {:.4}",
                    command.at,
                    command.decision,
                    command
                        .candidates
                        .iter()
                        .map(|c| format!(
                            "{}:{}",
                            c.name,
                            c.instance_type.clone().unwrap_or_default()
                        ))
                        .collect::<Vec<_>>(),
                    command
                        .replacements
                        .iter()
                        .map(|r| format!("{}:{}", r.name, r.instance_type))
                        .collect::<Vec<_>>(),
                    command.savings_per_hour
                );
            }
            eprintln!("{policy}: final nodes");
            for node in &run.report.after.nodes {
                let it = node.instance_type.clone().unwrap_or_default();
                let (cpu, memory) = generated.types.get(&it).copied().unwrap_or((1, 1));
                let (used_cpu, used_memory) = node
                    .pods
                    .iter()
                    .filter_map(|p| generated.requests.get(p.rsplit('/').next().unwrap_or(p)))
                    .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
                eprintln!(
                    "  {:<24} {:>8.3}  cpu {:>5.1} %  memory {:>5.1} %  {} pods",
                    it,
                    node.price.unwrap_or(0.0),
                    100.0 * used_cpu as f64 / cpu as f64,
                    100.0 * used_memory as f64 / memory as f64,
                    node.pods.len()
                );
            }
        }
    }
    for (policy, run) in [("Upstream", &upstream), ("CostOptimal", &cost_optimal)] {
        let report = &run.report;
        assert!(
            report.after.unschedulable.is_empty(),
            "{policy}: {:?}",
            report.after.unschedulable
        );
        assert!(
            report.in_flight.is_empty(),
            "{policy}: {:?}",
            report.in_flight
        );
        let placed: usize = report.after.nodes.iter().map(|n| n.pods.len()).sum();
        assert_eq!(placed, generated.pods, "{policy}: every pod has a node");
        assert!(
            report.after.hourly_cost <= report.before.hourly_cost,
            "{policy}"
        );
        // No churn: the loop stops within hours, not at the end of the 48 virtual hours.
        assert!(
            run.virtual_minutes() < 12.0 * 60.0,
            "{policy}: still issuing commands after {:.0} virtual minutes",
            run.virtual_minutes()
        );
    }
    (upstream, cost_optimal)
}

/// Always run (≈ 30 s in a debug build): 40 nodes of cpu-heavy Deployments.
#[test]
fn a_poorly_packed_cluster_converges_near_its_bound_under_cost_optimal() {
    let (upstream, cost_optimal) = compare(40, Profile::CpuHeavy, 11);
    assert!(
        cost_optimal.ratio() <= 1.05,
        "CostOptimal converged at {:.3} x the bound",
        cost_optimal.ratio()
    );
    assert!(cost_optimal.ratio() <= upstream.ratio());
}

/// `NODES=100 PROFILE=mixed|memory|cpu SEED=…`: the same comparison on another cluster, for
/// the measurements in docs/disruption.md (prints both runs; asserts only the invariants).
/// `DETAIL=1` also prints each run's last 40 commands and its final nodes with their use;
/// `HOURS=…` shortens the 48 virtual hours a run may take.
#[test]
#[ignore = "measurement"]
fn measure_convergence() {
    let profile = match std::env::var("PROFILE").as_deref() {
        Ok("mixed") => Profile::Mixed,
        Ok("memory") => Profile::MemoryHeavy,
        _ => Profile::CpuHeavy,
    };
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    compare(var("NODES", 100) as usize, profile, var("SEED", 11));
}

/// Always run (≈ 30 s in a debug build): 40 nodes of mixed Deployments. So few pods (≈ 80) on
/// so few nodes (the default budget moves 4 at a time) stay well above the bound under either
/// policy; the test pins that CostOptimal ends cheaper than Upstream. CostOptimal's re-plans of
/// the most wasteful nodes must pass their validation here (they were rejected at every pass,
/// and the run decided and rejected the same command every 25 s for 48 virtual hours).
#[test]
fn a_poorly_packed_mixed_cluster_ends_cheaper_under_cost_optimal_than_upstream() {
    let (upstream, cost_optimal) = compare(40, Profile::Mixed, 12);
    assert!(
        cost_optimal.report.after.hourly_cost < upstream.report.after.hourly_cost,
        "CostOptimal ${:.2}/h, Upstream ${:.2}/h",
        cost_optimal.report.after.hourly_cost,
        upstream.report.after.hourly_cost
    );
}

/// The issue's must-show: 300 nodes converge to ≤ 1.05 × the bound under CostOptimal.
#[test]
#[ignore = "minutes in a debug build; run with --release --include-ignored"]
fn three_hundred_poorly_packed_nodes_converge_within_five_percent_of_the_bound() {
    converges_within_five_percent(300, Profile::CpuHeavy);
}

/// The same with mixed Deployments (cpu-, memory-hungry and balanced pods): the case local
/// moves leave at 1.11 × the bound, which the re-plan of the most wasteful nodes closes.
#[test]
#[ignore = "minutes in a debug build; run with --release --include-ignored"]
fn three_hundred_poorly_packed_mixed_nodes_converge_within_five_percent_of_the_bound() {
    converges_within_five_percent(300, Profile::Mixed);
}

fn converges_within_five_percent(nodes: usize, profile: Profile) {
    let (upstream, cost_optimal) = compare(nodes, profile, 11);
    assert!(
        cost_optimal.ratio() <= 1.05,
        "CostOptimal converged at {:.3} x the bound",
        cost_optimal.ratio()
    );
    assert!(cost_optimal.ratio() < upstream.ratio());
}
