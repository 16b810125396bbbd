//! `karpenter simulate` end to end: the real binary on the examples.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn karpenter(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

// The documented JSON shape (docs/simulate.md); unknown keys are errors.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Plan {
    node_claims: Vec<NodeClaim>,
    existing_nodes: Vec<ExistingNode>,
    unschedulable: Vec<Unschedulable>,
    summary: Summary,
    ignored: Vec<Ignored>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Ignored {
    document: String,
    kind: String,
    name: String,
    reason: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeClaim {
    name: String,
    node_pool: String,
    instance_type: String,
    instance_type_options: Vec<String>,
    zone: String,
    capacity_type: String,
    price: f64,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    pods: Vec<String>,
    requests: BTreeMap<String, String>,
    allocatable: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Taint {
    key: String,
    #[allow(dead_code)]
    value: Option<String>,
    effect: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExistingNode {
    name: String,
    pods: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Unschedulable {
    pod: String,
    reason: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Summary {
    pods: usize,
    scheduled: usize,
    new_node_claims: usize,
    hourly_cost: f64,
    cost_lower_bound: f64,
    node_pools: BTreeMap<String, NodePoolCost>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodePoolCost {
    hourly_cost: f64,
    cost_lower_bound: f64,
}

#[test]
fn inflate_example_prints_the_plan_and_hourly_cost_in_seconds() {
    let started = Instant::now();
    let out = stdout(&karpenter(&["simulate", "-f", "examples/inflate"], None));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert!(out.contains("NODECLAIM"), "{out}");
    assert!(out.contains("default-00001"), "{out}");
    assert!(out.contains("on-demand"), "{out}");
    assert!(out.contains("5 of 5 pods scheduled"), "{out}");
    assert!(out.contains("hourly cost $"), "{out}");
}

#[test]
fn json_output_matches_the_documented_shape() {
    let out = stdout(&karpenter(
        &["simulate", "-f", "examples/spot-tainted", "-o", "json"],
        None,
    ));
    let plan: Plan = serde_json::from_str(&out).unwrap();
    assert!(
        plan.ignored.is_empty(),
        "every document of the example is used"
    );
    assert_eq!(plan.summary.pods, 7);
    assert_eq!(plan.summary.scheduled, 6);
    assert_eq!(plan.summary.new_node_claims, plan.node_claims.len());
    let total: f64 = plan.node_claims.iter().map(|c| c.price).sum();
    assert!((plan.summary.hourly_cost - total).abs() < 1e-6);
    let spot = &plan.summary.node_pools["spot"];
    assert!((spot.hourly_cost - plan.summary.hourly_cost).abs() < 1e-6);
    assert!(plan.summary.cost_lower_bound > 0.0);
    assert!((spot.cost_lower_bound - plan.summary.cost_lower_bound).abs() < 1e-6);
    assert!(plan.summary.cost_lower_bound <= plan.summary.hourly_cost + 1e-6);
    for claim in &plan.node_claims {
        assert_eq!(claim.node_pool, "spot");
        assert!(claim.name.starts_with("spot-"));
        assert_eq!(
            (claim.instance_type.as_str(), claim.capacity_type.as_str()),
            ("t3a.large", "spot")
        );
        assert!(claim.instance_type_options.contains(&claim.instance_type));
        assert!(claim.zone.starts_with("us-east-1"));
        assert!(
            claim.price > 0.0 && claim.price < 0.0752,
            "modelled spot is below on-demand"
        );
        assert_eq!(claim.labels["node-group-type"], "spot");
        assert_eq!(claim.labels["karpenter.sh/capacity-type"], "spot");
        assert!(
            claim
                .taints
                .iter()
                .any(|t| t.key == "spot" && t.effect == "NoSchedule")
        );
        assert!(claim.pods.iter().all(|p| p.starts_with("default/web-")));
        assert!(claim.requests.contains_key("cpu") && claim.allocatable.contains_key("memory"));
    }
    assert!(
        plan.existing_nodes
            .iter()
            .all(|n| !n.name.is_empty() && !n.pods.is_empty())
    );
    assert_eq!(plan.unschedulable.len(), 1);
    assert_eq!(plan.unschedulable[0].pod, "default/batch");
    assert!(!plan.unschedulable[0].reason.is_empty());
}

#[test]
fn yaml_output_and_stdin_input() {
    let manifests =
        std::fs::read_to_string(repo().join("examples/workshop-inflate/all.yaml")).unwrap();
    let out = stdout(&karpenter(
        &["simulate", "-f", "-", "-o", "yaml"],
        Some(&manifests),
    ));
    assert!(out.contains("instanceType: m5.large"), "{out}");
    assert!(out.contains("hourlyCost: 0.096"), "{out}");
}

#[test]
fn custom_instance_types_replace_the_catalogue() {
    let args = [
        "simulate",
        "-f",
        "examples/inflate",
        "--instance-types",
        "examples/custom-instance-types.yaml",
        "--region",
        "test-1",
        "-o",
        "json",
    ];
    let plan: Plan = serde_json::from_str(&stdout(&karpenter(&args, None))).unwrap();
    assert!(!plan.node_claims.is_empty());
    for claim in &plan.node_claims {
        assert!(
            ["c-small", "m-large"].contains(&claim.instance_type.as_str()),
            "{}",
            claim.instance_type
        );
        assert!(claim.zone.starts_with("test-1"));
    }
}

#[test]
fn spot_prices_are_marked_as_modelled_in_the_table() {
    let out = stdout(&karpenter(
        &["simulate", "-f", "examples/spot-tainted"],
        None,
    ));
    assert!(out.contains("*"), "{out}");
    assert!(out.contains("spot prices are modelled"), "{out}");
    assert!(out.contains("UNSCHEDULABLE POD"), "{out}");
}

#[test]
fn missing_nodepool_fails_with_a_clear_message() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: x}]}\n";
    let output = karpenter(&["simulate", "-f", "-"], Some(pod));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no NodePool in the input"), "{stderr}");
}

#[test]
fn unknown_region_names_the_known_ones() {
    let output = karpenter(
        &["simulate", "-f", "examples/inflate", "--region", "mars-1"],
        None,
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("ap-northeast-2, ap-northeast-3"),
        "{stderr}"
    );
    assert!(stderr.contains("us-west-1, us-west-2"), "{stderr}");
}

/// `examples/statefulset-zonal`: replicas with bound claims land in their volumes' zones; the
/// others get claims from the default StorageClass, confined to its allowed zones.
#[test]
fn statefulset_example_lands_in_its_volumes_zones() {
    let out = stdout(&karpenter(
        &["simulate", "-f", "examples/statefulset-zonal", "-o", "json"],
        None,
    ));
    let plan: Plan = serde_json::from_str(&out).unwrap();
    assert!(plan.unschedulable.is_empty(), "{out}");
    let zone_of = |pod: &str| {
        plan.node_claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p == pod))
            .map(|c| c.zone.clone())
            .unwrap_or_else(|| panic!("{pod} not placed: {out}"))
    };
    assert_eq!(zone_of("data/db-0"), "us-east-1a");
    assert_eq!(zone_of("data/db-1"), "us-east-1b");
    assert_eq!(zone_of("data/db-2"), "us-east-1c");
    for pod in ["data/db-3", "data/db-4"] {
        let zone = zone_of(pod);
        assert!(
            zone == "us-east-1a" || zone == "us-east-1b",
            "{pod}: {zone}"
        );
    }
}

/// A pod preferring an expensive instance type, planned with the example NodePool.
fn preferring_pod_input() -> String {
    let read =
        |name: &str| std::fs::read_to_string(repo().join("examples/inflate").join(name)).unwrap();
    let pod = r#"apiVersion: v1
kind: Pod
metadata: {name: picky, namespace: default}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: "1", memory: 1Gi}}}]
  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 1
          preference:
            matchExpressions:
              - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.8xlarge]}
"#;
    format!(
        "{}\n---\n{}\n---\n{pod}",
        read("nodepool.yaml"),
        read("ec2nodeclass.yaml")
    )
}

fn planned_types(args: &[&str]) -> Vec<String> {
    let input = preferring_pod_input();
    let mut all = vec!["simulate", "-f", "-", "-o", "json"];
    all.extend_from_slice(args);
    let plan: Plan = serde_json::from_str(&stdout(&karpenter(&all, Some(&input)))).unwrap();
    assert_eq!(plan.summary.scheduled, 1);
    plan.node_claims
        .iter()
        .map(|c| c.instance_type.clone())
        .collect()
}

#[test]
fn preference_policy_ignore_drops_a_preferred_node_affinity() {
    assert_eq!(
        planned_types(&[]),
        vec!["m5.8xlarge"],
        "Respect is the default"
    );
    assert_eq!(
        planned_types(&["--preference-policy", "Respect"]),
        vec!["m5.8xlarge"]
    );
    let ignored = planned_types(&[
        "--preference-policy",
        "Ignore",
        "--min-values-policy",
        "BestEffort",
    ]);
    assert_eq!(ignored.len(), 1);
    assert_ne!(ignored[0], "m5.8xlarge", "the preference was honoured");
}

#[test]
fn a_bad_policy_value_is_refused_naming_the_flag() {
    for flag in ["--preference-policy", "--min-values-policy"] {
        let output = karpenter(
            &["simulate", "-f", "examples/inflate", flag, "Sometimes"],
            None,
        );
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(flag) && stderr.contains("Sometimes"),
            "{stderr}"
        );
    }
}

#[test]
fn packing_policy_flag_is_accepted_and_the_table_names_the_bound() {
    for policy in ["Upstream", "CostOptimal"] {
        let out = stdout(&karpenter(
            &[
                "simulate",
                "-f",
                "examples/inflate",
                "--packing-policy",
                policy,
            ],
            None,
        ));
        let line = out
            .lines()
            .find(|l| l.starts_with("cost ") && l.contains(", lower bound "))
            .unwrap_or_else(|| panic!("{policy}: no bound line in {out}"));
        assert!(line.contains("(ratio "), "{line}");
    }
}

/// `examples/node-overlay`: the overlay's 40% discount on m7i changes the plan's choice only with
/// the `NodeOverlay` gate on; with it off the overlay is ignored with a note.
#[test]
fn a_node_overlay_discounting_a_family_changes_the_choice_with_its_gate_only() {
    let plan = |gates: &[&str]| {
        let args = [
            &["simulate", "-f", "examples/node-overlay", "-o", "json"][..],
            gates,
        ]
        .concat();
        let out = karpenter(&args, None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let claims = value["nodeClaims"].as_array().unwrap().clone();
        assert_eq!(claims.len(), 1, "{value}");
        (
            claims[0]["instanceType"].as_str().unwrap().to_string(),
            claims[0]["price"].as_f64().unwrap(),
        )
    };
    let (before, before_price) = plan(&[]);
    let (after, after_price) = plan(&["--feature-gates", "NodeOverlay=true"]);
    assert!(!before.starts_with("m7i."), "{before}");
    assert!(after.starts_with("m7i."), "{after}");
    assert!(
        after_price < before_price,
        "{after_price} vs {before_price}"
    );

    let table = karpenter(&["simulate", "-f", "examples/node-overlay"], None);
    assert!(
        String::from_utf8_lossy(&table.stderr).contains("1 NodeOverlay(s) ignored"),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
}

/// `examples/capacity-buffer`: with the `CapacityBuffer` gate the buffer's 4 chunks are planned as
/// pods (capacity for 4 CPU) though the input has no pod; with it off the buffer is ignored with a
/// note.
#[test]
fn a_capacity_buffer_of_n_chunks_plans_capacity_with_its_gate_only() {
    let out = karpenter(
        &[
            "simulate",
            "--feature-gates",
            "CapacityBuffer=true",
            "-f",
            "examples/capacity-buffer",
            "-o",
            "json",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let claims = value["nodeClaims"].as_array().unwrap();
    assert!(!claims.is_empty(), "{value}");
    let text = value.to_string();
    for i in 1..=4 {
        assert!(
            text.contains(&format!("capacity-buffer-web-headroom-{i}")),
            "chunk {i}: {value}"
        );
    }
    assert!(!text.contains("capacity-buffer-web-headroom-5"), "{value}");

    let off = karpenter(
        &["simulate", "-f", "examples/capacity-buffer", "-o", "json"],
        None,
    );
    let value: serde_json::Value = serde_json::from_slice(&off.stdout).unwrap();
    assert!(
        value["nodeClaims"].as_array().is_none_or(Vec::is_empty),
        "{value}"
    );
    let table = karpenter(&["simulate", "-f", "examples/capacity-buffer"], None);
    assert!(
        String::from_utf8_lossy(&table.stderr).contains("1 CapacityBuffer(s) ignored"),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
}
