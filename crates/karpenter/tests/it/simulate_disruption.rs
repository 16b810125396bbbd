//! `karpenter simulate --disruption` on the `examples/disruption-*` cases: the commands, the
//! documented `"disruption"` keys, budgets, and no churn over 24 h of virtual time.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const NOW: &str = "2026-01-30T23:00:00Z";

/// `simulate --disruption --now NOW -o json` on `example` (plus `extra` flags); the JSON.
fn simulate(example: &str, extra: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["simulate", "--disruption", "--now", NOW, "-o", "json", "-f"])
        .arg(example)
        .args(extra)
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn commands(json: &Value) -> &Vec<Value> {
    json["disruption"]["commands"].as_array().unwrap()
}

fn names(values: &Value) -> Vec<&str> {
    values
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect()
}

fn after_cost(json: &Value) -> f64 {
    json["disruption"]["after"]["hourlyCost"].as_f64().unwrap()
}

fn before_cost(json: &Value) -> f64 {
    json["disruption"]["before"]["hourlyCost"].as_f64().unwrap()
}

#[test]
fn the_disruption_object_has_the_documented_keys() {
    let json = simulate("examples/disruption-empty", &[]);
    assert!(json["nodeClaims"].is_array(), "the plan is still there");
    let disruption = json["disruption"].as_object().unwrap();
    let keys: Vec<&str> = disruption.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "after",
            "before",
            "blocked",
            "commands",
            "completedAt",
            "inFlight"
        ]
    );
    let command = commands(&json)[0].as_object().unwrap();
    for key in [
        "at",
        "completedAt",
        "reason",
        "decision",
        "candidates",
        "replacements",
        "savingsPerHour",
    ] {
        assert!(
            command.contains_key(key),
            "command lacks {key}: {command:?}"
        );
    }
    let candidate = command["candidates"][0].as_object().unwrap();
    for key in [
        "name",
        "nodePool",
        "instanceType",
        "zone",
        "capacityType",
        "price",
    ] {
        assert!(candidate.contains_key(key), "candidate lacks {key}");
    }
    let before = json["disruption"]["before"].as_object().unwrap();
    assert!(before.contains_key("nodes") && before.contains_key("hourlyCost"));
    let after = json["disruption"]["after"].as_object().unwrap();
    for key in ["nodes", "hourlyCost", "unschedulable"] {
        assert!(after.contains_key(key), "after lacks {key}");
    }
    let node = after["nodes"][0].as_object().unwrap();
    for key in [
        "name",
        "nodePool",
        "instanceType",
        "zone",
        "capacityType",
        "price",
        "pods",
    ] {
        assert!(node.contains_key(key), "after.nodes[] lacks {key}");
    }
}

#[test]
fn an_empty_node_is_deleted_once_consolidate_after_has_passed() {
    let json = simulate("examples/disruption-empty", &[]);
    let commands = commands(&json);
    assert_eq!(commands.len(), 1, "{commands:#?}");
    let command = &commands[0];
    assert_eq!(command["reason"], "Empty");
    assert_eq!(command["decision"], "delete");
    assert_eq!(
        command["at"], "2026-01-30T23:10:15Z",
        "--now + consolidateAfter + upstream's 15 s validation"
    );
    // No pod to drain: the instance shuts down (60 s by default) and the node is gone.
    assert_eq!(command["completedAt"], "2026-01-30T23:11:20Z");
    assert_eq!(json["disruption"]["completedAt"], "2026-01-30T23:11:20Z");
    assert_eq!(json["disruption"]["inFlight"], serde_json::json!([]));
    assert_eq!(names(&command["candidates"]), ["node-b"]);
    assert_eq!(command["candidates"][0]["price"], 0.096);
    assert_eq!(command["savingsPerHour"], 0.096);
    assert_eq!(json["disruption"]["before"]["nodes"], 2);
    assert_eq!(names(&json["disruption"]["after"]["nodes"]), ["node-a"]);
    assert_eq!(
        json["disruption"]["after"]["nodes"][0]["pods"],
        serde_json::json!(["default/web-1"])
    );
    assert!((before_cost(&json) - 0.192).abs() < 1e-9);
    assert!((after_cost(&json) - 0.096).abs() < 1e-9);
}

#[test]
fn until_stops_the_clock_before_consolidate_after() {
    let json = simulate("examples/disruption-empty", &["--until", "5m"]);
    assert!(commands(&json).is_empty());
    let blocked = &json["disruption"]["blocked"];
    let node_b = blocked
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "node-b")
        .unwrap();
    assert_eq!(
        node_b["reason"], "consolidatable at 2026-01-30T23:10:00Z",
        "the reason says when"
    );
}

#[test]
fn a_zero_node_budget_blocks_every_voluntary_command_and_says_so() {
    let json = simulate("examples/disruption-budget", &[]);
    assert!(commands(&json).is_empty(), "{json:#}");
    let blocked = json["disruption"]["blocked"].as_array().unwrap();
    let node_b = blocked.iter().find(|b| b["name"] == "node-b").unwrap();
    let reason = node_b["reason"].as_str().unwrap();
    assert!(
        reason.contains("budget") && reason.contains("default"),
        "{reason}"
    );
    assert_eq!(
        json["disruption"]["after"]["nodes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn an_expired_node_is_replaced_forcefully_and_its_pod_moves() {
    let json = simulate("examples/disruption-expired", &[]);
    let commands = commands(&json);
    assert_eq!(commands.len(), 1, "{commands:#?}");
    let command = &commands[0];
    assert_eq!(command["reason"], "Expired");
    assert_eq!(command["decision"], "replace");
    assert_eq!(
        command["at"], "2026-01-31T00:00:00Z",
        "creation + expireAfter"
    );
    assert_eq!(names(&command["candidates"]), ["node-old"]);
    // The drain starts at once (no replacement first): the pod is evicted and provisioned
    // again, terminates within its 30 s grace period, upstream's 5 s minimum drain time, then
    // the instance shuts down (60 s).
    assert_eq!(command["completedAt"], "2026-01-31T00:01:35Z");
    let replacement = names(&command["replacements"]);
    assert_eq!(replacement.len(), 1);
    let after = json["disruption"]["after"]["nodes"].as_array().unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0]["name"], replacement[0]);
    assert_eq!(after[0]["pods"], serde_json::json!(["default/web-1"]));
    assert!(
        json["disruption"]["after"]["unschedulable"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_constant_workload_causes_no_commands_over_a_day() {
    // Pending pods provisioned by the first plan, nothing else: 24 h of virtual time, no churn.
    let json = simulate("examples/inflate", &[]);
    assert!(commands(&json).is_empty(), "{:#}", json["disruption"]);
    let before = json["disruption"]["before"]["nodes"].as_u64().unwrap();
    assert!(before > 0);
    assert_eq!(
        json["disruption"]["after"]["nodes"]
            .as_array()
            .unwrap()
            .len() as u64,
        before
    );
    // After the first convergence (the empty node going), nothing more happens in 24 h.
    let json = simulate("examples/disruption-empty", &["--until", "24h"]);
    assert_eq!(commands(&json).len(), 1);
}

#[test]
fn the_table_lists_commands_costs_and_blocked_nodes() {
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["simulate", "--disruption", "--now", NOW, "-f"])
        .arg("examples/disruption-empty")
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(output.status.success());
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.contains("disruption:"), "{table}");
    assert!(
        table.contains("Empty") && table.contains("node-b"),
        "{table}"
    );
    assert!(
        table.contains("before: 2 node(s), $0.1920/h; after: 1 node(s), $0.0960/h"),
        "{table}"
    );
}

#[test]
fn a_drifted_node_is_replaced() {
    let json = simulate("examples/disruption-drifted", &[]);
    let commands = commands(&json);
    assert!(!commands.is_empty(), "{json:#}");
    assert_eq!(commands[0]["reason"], "Drifted");
    assert_eq!(commands[0]["decision"], "replace");
    assert_eq!(names(&commands[0]["candidates"]), ["node-drifted"]);
    // Replacement initialized at +60 s, pod gone at +90 s, upstream's 5 s minimum drain time,
    // instance gone at +155 s.
    assert_eq!(commands[0]["at"], "2026-01-30T23:00:00Z");
    assert_eq!(commands[0]["completedAt"], "2026-01-30T23:02:35Z");
    let after = json["disruption"]["after"]["nodes"].as_array().unwrap();
    assert!(after.iter().all(|n| n["name"] != "node-drifted"));
    assert_eq!(after.len(), 1);
    assert_eq!(after[0]["pods"], serde_json::json!(["default/web-1"]));
}

#[test]
fn underutilized_nodes_are_consolidated_then_left_alone() {
    let json = simulate("examples/disruption-underutilized", &[]);
    let commands = commands(&json);
    assert!(!commands.is_empty(), "{json:#}");
    assert!(commands.iter().all(|c| c["reason"] == "Underutilized"));
    assert!(after_cost(&json) < before_cost(&json));
    // Converged within the first hour; nothing in the other 23 (no churn).
    for command in commands {
        let at = command["at"].as_str().unwrap();
        assert!(at < "2026-01-31T00:00:00Z", "late command at {at}");
        let saved = command["savingsPerHour"].as_f64().unwrap();
        assert!(
            saved > 0.0,
            "never a replacement that is not strictly cheaper"
        );
    }
    let after = json["disruption"]["after"]["nodes"].as_array().unwrap();
    let pods: usize = after
        .iter()
        .map(|n| n["pods"].as_array().unwrap().len())
        .sum();
    assert_eq!(pods, 2, "every pod still has a place");
}

#[test]
fn bench_disruption_reports_a_pass_over_a_small_cluster() {
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["bench", "disruption", "--nodes", "20", "-o", "json"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["nodes"], 20);
    assert_eq!(report["pods"], 200);
    let candidates = report["candidatesEvaluated"].as_u64().unwrap();
    assert!(
        candidates > 0 && candidates <= 20,
        "every node is initialized and unblocked: {report:#}"
    );
    assert!(report["passSeconds"].as_f64().unwrap() >= 0.0);
    assert!(report["candidatesSeconds"].as_f64().unwrap() >= 0.0);
    assert!(report["commands"].is_u64());
    assert!(report["disruptedNodes"].is_u64());
    assert!(report["consolidatableNodes"].as_u64().unwrap() <= 20);
    assert!(report.get("peakRssKib").is_some());
}

/// The underutilized example with every node and requirement on spot instead of on-demand.
fn spot_example() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("disruption-spot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let yaml =
        std::fs::read_to_string(repo().join("examples/disruption-underutilized/cluster.yaml"))
            .unwrap()
            .replace("on-demand", "spot");
    std::fs::write(dir.join("cluster.yaml"), yaml).unwrap();
    dir
}

#[test]
fn spot_to_spot_consolidation_waits_for_its_feature_gate() {
    // Two spot m5.2xlarge: one goes (its pods fit on the other) either way; the last one could
    // only be replaced spot-to-spot, which needs the gate, then 15 cheaper options (the pool
    // allows 3 types).
    let example = spot_example();
    let example = example.to_str().unwrap();
    let reasons = |json: &Value| -> Vec<String> {
        json["disruption"]["blocked"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["reason"].as_str().unwrap().to_string())
            .collect()
    };
    let without = simulate(example, &[]);
    assert!(
        reasons(&without)
            .iter()
            .any(|r| r.contains("SpotToSpotConsolidation is disabled")),
        "{without:#}"
    );
    let with = simulate(
        example,
        &["--feature-gates", "SpotToSpotConsolidation=true"],
    );
    let with_reasons = reasons(&with);
    assert!(
        with_reasons.iter().any(
            |r| r.contains("SpotToSpotConsolidation requires 15 cheaper instance type options")
        ),
        "{with:#}"
    );
    assert!(
        !with_reasons.iter().any(|r| r.contains("is disabled")),
        "{with:#}"
    );

    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args([
            "simulate",
            "--disruption",
            "--feature-gates",
            "Spot=true",
            "-f",
            example,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unrecognized feature gate \"Spot\""),
        "{stderr}"
    );
}

#[test]
fn a_budget_of_one_serialises_a_drift_rollout_until_every_node_is_replaced() {
    // Three drifted nodes, `budgets: [{nodes: "1"}]`: each command starts only once the previous
    // candidate is gone (it counts against the budget until its instance is), and all three are
    // replaced.
    let json = simulate("examples/disruption-rollout", &[]);
    let commands = commands(&json);
    assert_eq!(commands.len(), 3, "{commands:#?}");
    let mut replaced = Vec::new();
    let mut previous_done = String::new();
    for command in commands {
        assert_eq!(command["reason"], "Drifted");
        assert_eq!(command["decision"], "replace");
        let at = command["at"].as_str().unwrap();
        let done = command["completedAt"].as_str().unwrap();
        assert!(at >= previous_done.as_str(), "{at} before {previous_done}");
        assert!(done > at);
        previous_done = done.to_string();
        replaced.extend(names(&command["candidates"]));
    }
    replaced.sort_unstable();
    assert_eq!(replaced, ["node-a", "node-b", "node-c"]);
    // 60 s initialization + 30 s pod grace + 5 s minimum drain time + 60 s shutdown, three
    // times in a row; the next command comes at the disruption loop's first tick after the
    // previous candidate is gone (ticks 1 s after a start, then every 10 s: 6 s later, twice).
    assert_eq!(commands[0]["at"], "2026-01-30T23:00:00Z");
    assert_eq!(commands[1]["at"], "2026-01-30T23:02:41Z");
    assert_eq!(json["disruption"]["completedAt"], "2026-01-30T23:07:57Z");
    let after = json["disruption"]["after"]["nodes"].as_array().unwrap();
    assert_eq!(after.len(), 3);
    assert!(
        after
            .iter()
            .all(|n| !n["name"].as_str().unwrap().starts_with("node-"))
    );
}

#[test]
fn the_flags_change_how_long_a_node_takes_to_go() {
    let json = simulate(
        "examples/disruption-drifted",
        &[
            "--pod-termination-seconds",
            "5",
            "--instance-shutdown-seconds",
            "120",
        ],
    );
    let command = &commands(&json)[0];
    // Initialized at +60 s, pod gone at +65 s, 5 s minimum drain time, instance gone at +190 s.
    assert_eq!(command["completedAt"], "2026-01-30T23:03:10Z");
}

#[test]
fn the_table_shows_when_commands_completed_and_the_rollout_duration() {
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["simulate", "--disruption", "--now", NOW, "-f"])
        .arg("examples/disruption-rollout")
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(output.status.success());
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.contains("COMPLETED"), "{table}");
    assert!(
        table.contains(
            "rollout: 3 command(s) from 2026-01-30T23:00:00Z to 2026-01-30T23:07:57Z (7m57s)"
        ),
        "{table}"
    );
}
