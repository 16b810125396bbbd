//! Property tests of `simulate --disruption` on its timeline (issue 21 must-show): random small
//! clusters (1–5 m5 nodes, some drifted or expiring, pods with do-not-disrupt, grace periods
//! and a PDB, a random budget) run for 6 h of virtual time, and the run must keep:
//!
//! - no budget exceeded at any command's start, counting every node on its way out until its
//!   instance is gone;
//! - no do-not-disrupt pod evicted before the drain deadline forces it;
//! - no PDB below its desired healthy count (until a deadline forces pods out);
//! - no consolidation raising the cost (commands' savings, and the total when nothing drifts or
//!   expires);
//! - once converged, every node left has one true reason: never a budget that would allow a
//!   disruption, and "no cheaper option" checked by brute force over the pool's instance types
//!   (no cheaper type holds its pods, and its pods do not fit in the other nodes' free room).
//!
//! 64 cases by default; `PROPTEST_CASES=10000` for the recorded run (`docs/conformance.md`).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use karpenter_core::clock::FakeClock;
use karpenter_core::disruption::candidates::BlockReason;
use karpenter_core::resources::ResourceList;
use proptest::prelude::*;

use super::report::DisruptionReport;
use super::timeline::Trace;
use super::*;

const TYPES: [&str; 3] = ["m5.large", "m5.xlarge", "m5.2xlarge"];
const CPU_MILLIS: [i64; 4] = [250, 500, 1000, 1500];
const MEMORY_MIB: [i64; 3] = [512, 1024, 2048];
const NOW: &str = "2026-01-30T23:00:00Z";

#[derive(Clone, Debug)]
struct PodCase {
    cpu: usize,
    memory: usize,
    do_not_disrupt: bool,
    grace: Option<i64>,
}

#[derive(Clone, Debug)]
struct NodeCase {
    instance_type: usize,
    drifted: bool,
    expires: bool,
    pods: Vec<PodCase>,
}

#[derive(Clone, Debug)]
struct ClusterCase {
    consolidate_after: &'static str,
    budget: Option<&'static str>,
    termination_grace: Option<&'static str>,
    pdb_max_unavailable: Option<i32>,
    nodes: Vec<NodeCase>,
}

fn pod_case() -> impl Strategy<Value = PodCase> {
    (
        0..CPU_MILLIS.len(),
        0..MEMORY_MIB.len(),
        prop::bool::weighted(0.1),
        prop::option::of(prop::sample::select(vec![5i64, 120])),
    )
        .prop_map(|(cpu, memory, do_not_disrupt, grace)| PodCase {
            cpu,
            memory,
            do_not_disrupt,
            grace,
        })
}

fn node_case() -> impl Strategy<Value = NodeCase> {
    (
        0..TYPES.len(),
        prop::bool::weighted(0.25),
        prop::bool::weighted(0.1),
        prop::collection::vec(pod_case(), 0..4),
    )
        .prop_map(|(instance_type, drifted, expires, pods)| NodeCase {
            instance_type,
            drifted,
            expires,
            pods,
        })
}

fn cluster_case() -> impl Strategy<Value = ClusterCase> {
    (
        prop::sample::select(vec!["0s", "30s", "10m"]),
        prop::option::of(prop::sample::select(vec!["0", "1", "2", "50%"])),
        prop::option::of(prop::sample::select(vec!["2m", "15m"])),
        prop::option::of(1i32..3),
        prop::collection::vec(node_case(), 1..6),
    )
        .prop_map(
            |(consolidate_after, budget, termination_grace, pdb_max_unavailable, nodes)| {
                ClusterCase {
                    consolidate_after,
                    budget,
                    termination_grace,
                    pdb_max_unavailable,
                    nodes,
                }
            },
        )
}

/// Each type's allocatable and on-demand price in us-east-1a, from the catalogue.
struct Catalog {
    allocatable: BTreeMap<String, ResourceList>,
    price: BTreeMap<String, f64>,
}

/// One provider for every case, over the catalogue's three m5 types only (prices, capacities
/// and offerings as the catalogue has them): a case then schedules over 3 types, not 1,300.
fn provider() -> &'static SimCloudProvider {
    static PROVIDER: std::sync::LazyLock<SimCloudProvider> = std::sync::LazyLock::new(|| {
        let now: Timestamp = NOW.parse().unwrap();
        let clock = Arc::new(FakeClock::new(now));
        let full = SimCloudProvider::new("us-east-1", clock.clone()).unwrap();
        let mut pool_only = Manifests::new();
        pool_only
            .load_str("pool.yaml", &pool_yaml(&empty_case()))
            .unwrap();
        let types = pool_instance_types(&pool_only, &full).unwrap();
        let m5: Vec<_> = types
            .get("default")
            .into_iter()
            .flatten()
            .filter(|t| TYPES.contains(&t.name.as_str()))
            .map(|t| karpenter_core::instance_type::InstanceType::clone(t))
            .collect();
        SimCloudProvider::with_instance_types("us-east-1", m5, clock)
    });
    &PROVIDER
}

fn empty_case() -> ClusterCase {
    ClusterCase {
        consolidate_after: "0s",
        budget: None,
        termination_grace: None,
        pdb_max_unavailable: None,
        nodes: Vec::new(),
    }
}

/// The catalogue of the pool, computed once (every case has the same pool requirements).
fn shared_catalog() -> &'static Catalog {
    static CATALOG: std::sync::LazyLock<Catalog> = std::sync::LazyLock::new(|| {
        let mut pool_only = Manifests::new();
        pool_only
            .load_str("pool.yaml", &pool_yaml(&empty_case()))
            .unwrap();
        catalog(provider(), &pool_only)
    });
    &CATALOG
}

fn catalog(provider: &SimCloudProvider, manifests: &Manifests) -> Catalog {
    let types = pool_instance_types(manifests, provider).unwrap();
    let mut allocatable = BTreeMap::new();
    let mut price = BTreeMap::new();
    for t in types.get("default").into_iter().flatten() {
        allocatable.insert(t.name.clone(), t.allocatable());
        let offering = t
            .offerings
            .iter()
            .find(|o| o.zone == "us-east-1a" && o.capacity_type == "on-demand");
        if let Some(o) = offering {
            price.insert(t.name.clone(), o.price);
        }
    }
    Catalog { allocatable, price }
}

fn pool_yaml(case: &ClusterCase) -> String {
    let budgets = case
        .budget
        .map(|b| format!("    budgets:\n      - nodes: \"{b}\"\n"))
        .unwrap_or_default();
    let grace = case
        .termination_grace
        .map(|g| format!("      terminationGracePeriod: {g}\n"))
        .unwrap_or_default();
    format!(
        r#"apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: KarpenterNodeRole-my-cluster
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: my-cluster}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: my-cluster}}}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: {after}
{budgets}  template:
    spec:
      expireAfter: Never
{grace}      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}}
        - {{key: topology.kubernetes.io/zone, operator: In, values: ["us-east-1a"]}}
        - {{key: node.kubernetes.io/instance-type, operator: In, values: ["m5.large", "m5.xlarge", "m5.2xlarge"]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
"#,
        after = case.consolidate_after,
    )
}

fn quantity_list(list: &ResourceList) -> String {
    let cpu = list.get("cpu");
    let memory = list.get("memory");
    let pods = list.get("pods");
    format!("{{cpu: \"{cpu}\", memory: \"{memory}\", pods: \"{pods}\"}}")
}

fn node_yaml(index: usize, node: &NodeCase, case: &ClusterCase, catalog: &Catalog) -> String {
    let name = format!("node-{index}");
    let instance_type = TYPES[node.instance_type];
    let allocatable = quantity_list(&catalog.allocatable[instance_type]);
    let hash = if node.drifted {
        "  annotations: {karpenter.sh/nodepool-hash: stale, karpenter.sh/nodepool-hash-version: v3}\n"
    } else {
        ""
    };
    let expire = if node.expires { "720h" } else { "Never" };
    let grace = case
        .termination_grace
        .map(|g| format!("  terminationGracePeriod: {g}\n"))
        .unwrap_or_default();
    let mut out = format!(
        r#"---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {name}
  creationTimestamp: "2026-01-01T00:00:00Z"
  labels: {{karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: {instance_type}, topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand}}
{hash}spec:
  expireAfter: {expire}
{grace}  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  requirements:
    - {{key: node.kubernetes.io/instance-type, operator: In, values: ["{instance_type}"]}}
status:
  providerID: aws:///us-east-1a/i-{index}
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
  labels: {{karpenter.sh/nodepool: default, karpenter.sh/initialized: "true", karpenter.sh/registered: "true", node.kubernetes.io/instance-type: {instance_type}, topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand, kubernetes.io/arch: amd64, kubernetes.io/os: linux, kubernetes.io/hostname: {name}}}
spec:
  providerID: aws:///us-east-1a/i-{index}
status:
  capacity: {allocatable}
  allocatable: {allocatable}
  conditions:
    - {{type: Ready, status: "True"}}
"#
    );
    for (p, pod) in fitting_pods(node, catalog).into_iter().enumerate() {
        let annotations = if pod.do_not_disrupt {
            "  annotations: {karpenter.sh/do-not-disrupt: \"true\"}\n"
        } else {
            ""
        };
        let grace = pod
            .grace
            .map(|g| format!("  terminationGracePeriodSeconds: {g}\n"))
            .unwrap_or_default();
        out.push_str(&format!(
            r#"---
apiVersion: v1
kind: Pod
metadata:
  name: web-{index}-{p}
  namespace: default
  labels: {{app: web}}
{annotations}spec:
  nodeName: {name}
{grace}  containers:
    - name: app
      image: nginx
      resources:
        requests: {{cpu: {cpu}m, memory: {memory}Mi}}
"#,
            cpu = CPU_MILLIS[pod.cpu],
            memory = MEMORY_MIB[pod.memory],
        ));
    }
    out
}

/// The node's pods that fit on it, in order (the rest are dropped from the case).
fn fitting_pods<'a>(node: &'a NodeCase, catalog: &Catalog) -> Vec<&'a PodCase> {
    let (cpu_room, memory_room) = room(&catalog.allocatable[TYPES[node.instance_type]]);
    let (mut cpu, mut memory) = (0, 0);
    node.pods
        .iter()
        .filter(|p| {
            let (c, m) = (CPU_MILLIS[p.cpu], MEMORY_MIB[p.memory]);
            let fits = cpu + c <= cpu_room && memory + m <= memory_room;
            if fits {
                cpu += c;
                memory += m;
            }
            fits
        })
        .collect()
}

/// (millicores, MiB) of a resource list.
fn room(list: &ResourceList) -> (i64, i64) {
    let cpu = list.get("cpu").millis();
    let memory = list.get("memory").millis().div_euclid(1000 * 1024 * 1024);
    (cpu, memory)
}

fn cluster_yaml(case: &ClusterCase, catalog: &Catalog) -> String {
    let mut yaml = pool_yaml(case);
    for (i, node) in case.nodes.iter().enumerate() {
        yaml.push_str(&node_yaml(i, node, case, catalog));
    }
    if let Some(max) = case.pdb_max_unavailable {
        yaml.push_str(&format!(
            "---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: web, namespace: default}}\nspec:\n  maxUnavailable: {max}\n  selector: {{matchLabels: {{app: web}}}}\n"
        ));
    }
    yaml
}

/// Pod name → (millicores, MiB), as generated.
fn pod_sizes(case: &ClusterCase, catalog: &Catalog) -> BTreeMap<String, (i64, i64)> {
    let mut sizes = BTreeMap::new();
    for (i, node) in case.nodes.iter().enumerate() {
        for (p, pod) in fitting_pods(node, catalog).into_iter().enumerate() {
            sizes.insert(
                format!("default/web-{i}-{p}"),
                (CPU_MILLIS[pod.cpu], MEMORY_MIB[pod.memory]),
            );
        }
    }
    sizes
}

fn run_case(case: &ClusterCase) -> (DisruptionReport, Trace, &'static Catalog, String) {
    let provider = provider();
    let catalog = shared_catalog();
    let yaml = cluster_yaml(case, catalog);
    let mut manifests = Manifests::new();
    manifests.load_str("cluster.yaml", &yaml).unwrap();
    let outcome = crate::plan(&manifests, provider).unwrap();
    let (report, trace) = run(
        &manifests,
        provider,
        SchedulerOptions::default(),
        &outcome,
        DisruptionSettings {
            now: NOW.parse().unwrap(),
            until: SignedDuration::from_hours(6),
            max_steps: MAX_STEPS,
            feature_gates: Default::default(),
            timeline: TimelineSettings::default(),
        },
    )
    .unwrap();
    (report, trace, catalog, yaml)
}

/// Whether `pods` can be packed into `bins` (free millicores, MiB), trying every assignment.
fn packs(pods: &[(i64, i64)], bins: &mut [(i64, i64)]) -> bool {
    let Some((&(cpu, memory), rest)) = pods.split_first() else {
        return true;
    };
    for i in 0..bins.len() {
        if bins[i].0 >= cpu && bins[i].1 >= memory {
            bins[i].0 -= cpu;
            bins[i].1 -= memory;
            let ok = packs(rest, bins);
            bins[i].0 += cpu;
            bins[i].1 += memory;
            if ok {
                return true;
            }
        }
    }
    false
}

fn check(case: &ClusterCase) -> Result<(), TestCaseError> {
    let (report, trace, catalog, yaml) = run_case(case);
    let context = || format!("cluster:\n{yaml}\nreport: {report:#?}");
    for check in &trace.budget_checks {
        if let Some(limit) = check.limit {
            prop_assert!(
                check.in_flight <= limit,
                "budget exceeded at {}: {} in flight, limit {limit}\n{}",
                check.at,
                check.in_flight,
                context()
            );
        }
    }
    for eviction in trace.evictions.iter().filter(|e| e.do_not_disrupt) {
        prop_assert!(
            eviction.forced && eviction.forced_from.is_some_and(|from| eviction.at >= from),
            "do-not-disrupt pod {} evicted at {} before its time {:?}\n{}",
            eviction.pod,
            eviction.at,
            eviction.forced_from,
            context()
        );
    }
    let first_forced = trace
        .evictions
        .iter()
        .filter(|e| e.forced)
        .map(|e| e.at)
        .min();
    for sample in &trace.pdb_samples {
        if first_forced.is_some_and(|f| sample.at >= f) {
            continue;
        }
        prop_assert!(
            sample.healthy >= sample.desired,
            "PDB {} has {} healthy < {} desired at {}\n{}",
            sample.pdb,
            sample.healthy,
            sample.desired,
            sample.at,
            context()
        );
    }
    for command in &report.commands {
        if command.reason == "Underutilized" || command.reason == "Empty" {
            prop_assert!(
                command.savings_per_hour >= -1e-9,
                "consolidation raised the cost: {command:#?}\n{}",
                context()
            );
        }
    }
    let churn = case.nodes.iter().any(|n| n.drifted || n.expires);
    if !churn {
        prop_assert!(
            report.after.hourly_cost <= report.before.hourly_cost + 1e-9,
            "cost rose from {} to {}\n{}",
            report.before.hourly_cost,
            report.after.hourly_cost,
            context()
        );
    }
    if trace.converged {
        check_reasons(case, &report, &trace, catalog, &context)?;
    }
    Ok(())
}

/// After convergence: every node left has a reason, and the reason is true.
fn check_reasons(
    case: &ClusterCase,
    report: &DisruptionReport,
    trace: &Trace,
    catalog: &Catalog,
    context: &dyn Fn() -> String,
) -> Result<(), TestCaseError> {
    let sizes = pod_sizes(case, catalog);
    let used = |pods: &[String]| -> (i64, i64) {
        pods.iter()
            .filter_map(|p| sizes.get(p))
            .fold((0, 0), |(c, m), (pc, pm)| (c + pc, m + pm))
    };
    for node in &report.after.nodes {
        if report.in_flight.contains(&node.name) {
            continue;
        }
        let Some(rejection) = trace.last_blocked.iter().find(|r| r.name == node.name) else {
            return Err(TestCaseError::fail(format!(
                "node {} stays without a reason\n{}",
                node.name,
                context()
            )));
        };
        match &rejection.reason {
            // True only when the budget has no room: `nodes: "0"`, or a node still on its way
            // out (a drain held by a do-not-disrupt pod) holds it.
            BlockReason::BudgetExhausted { .. } => prop_assert!(
                case.budget == Some("0") || !report.in_flight.is_empty(),
                "node {} blocked by a budget that allows disruptions: {}\n{}",
                node.name,
                rejection.reason,
                context()
            ),
            BlockReason::NoCheaperReplacement { .. } | BlockReason::PodsWouldNotFit(_) => {
                let Some(price) = node.price else { continue };
                let pods: Vec<(i64, i64)> = node
                    .pods
                    .iter()
                    .filter_map(|p| sizes.get(p).copied())
                    .collect();
                let (cpu, memory) = used(&node.pods);
                for (name, allocatable) in &catalog.allocatable {
                    let (cpu_room, memory_room) = room(allocatable);
                    let cheaper = catalog.price.get(name).is_some_and(|p| *p < price - 1e-9);
                    prop_assert!(
                        !(cheaper && cpu <= cpu_room && memory <= memory_room),
                        "node {} ({}) stays ({}) but {name} is cheaper and holds its pods\n{}",
                        node.name,
                        rejection.reason,
                        node.instance_type.as_deref().unwrap_or("?"),
                        context()
                    );
                }
                let mut bins: Vec<(i64, i64)> = report
                    .after
                    .nodes
                    .iter()
                    // Nodes on their way out take no pods.
                    .filter(|other| {
                        other.name != node.name && !report.in_flight.contains(&other.name)
                    })
                    .filter_map(|other| {
                        let (cpu_room, memory_room) =
                            room(catalog.allocatable.get(other.instance_type.as_deref()?)?);
                        let (c, m) = used(&other.pods);
                        Some((cpu_room - c, memory_room - m))
                    })
                    .collect();
                prop_assert!(
                    pods.is_empty() || !packs(&pods, &mut bins),
                    "node {} stays ({}) but its pods fit on the other nodes\n{}",
                    node.name,
                    rejection.reason,
                    context()
                );
            }
            _ => {}
        }
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_timeline_keeps_budgets_pdbs_do_not_disrupt_and_cost(case in cluster_case()) {
        check(&case)?;
    }
}
