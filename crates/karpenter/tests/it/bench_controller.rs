//! `karpenter bench controller` end to end on a small workload, so the harness cannot rot: the
//! API server, the controller child process and the harness's binder must still work together,
//! and the report must carry every field. Nothing here is timed.

use std::process::Command;

use serde_json::Value;

#[test]
fn bench_controller_binds_fifty_pods_and_reports_the_controllers_memory() {
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args([
            "bench",
            "controller",
            "--pods",
            "50",
            "-o",
            "json",
            "--timeout",
            "300",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bench controller failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let number = |field: &str| {
        report[field]
            .as_f64()
            .unwrap_or_else(|| panic!("no number {field} in {report:#}"))
    };
    assert_eq!(number("pods"), 50.0);
    assert!(number("deployments") >= 3.0, "{report:#}");
    let nodes = number("nodes");
    assert!(nodes >= 1.0, "{report:#}");
    // Every Node has its NodeClaim. A NodeClaim may still be launching when the last pod binds
    // (on a loaded machine the binder can place pods on a Node that registered after the
    // provisioner planned one more), so a few more NodeClaims than Nodes are fine; many more
    // would mean a leak.
    let claims = number("nodeClaims");
    assert!(
        claims >= nodes && claims <= nodes + 3.0,
        "NodeClaims {claims} for {nodes} Nodes: {report:#}"
    );
    assert!(number("secondsToAllBound") > 0.0);
    if cfg!(target_os = "linux") {
        let (idle, peak, last) = (
            number("idleRssKib"),
            number("peakRssKib"),
            number("finalRssKib"),
        );
        assert!(idle > 0.0 && peak >= idle && peak >= last, "{report:#}");
    }
}

/// `bench workload` prints the same mix as manifests that `simulate` plans in full.
#[test]
fn bench_workload_manifests_simulate_with_every_pod_placed() {
    let workload = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["bench", "workload", "--pods", "60"])
        .output()
        .unwrap();
    assert!(workload.status.success());
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-workload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("workload.yaml");
    std::fs::write(&file, &workload.stdout).unwrap();
    let plan = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["simulate", "-o", "json", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let placed: usize = plan["nodeClaims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["pods"].as_array().unwrap().len())
        .sum();
    assert_eq!(placed, 60, "{:#}", plan["unschedulable"]);
    assert!(
        plan["nodeClaims"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["instanceType"].as_str().unwrap().ends_with(".2xlarge")),
        "the NodePool allows only 2xlarge"
    );
}
