//! `karpenter-bench controller` (crates/karpenter-bench, a dev tool outside this binary) end to
//! end on a small workload and on the binary these tests build, so the harness cannot rot: the
//! API server, the controller child process and the harness's binder must still work together,
//! and the report must carry every field. Nothing here is timed.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use karpenter_bench::{ControllerOptions, to_yaml_documents, workload_manifests};
use serde_json::Value;

#[test]
fn bench_controller_binds_fifty_pods_and_reports_the_controllers_memory() {
    let options = ControllerOptions {
        pods: 50,
        seed: 42,
        timeout: Duration::from_secs(300),
        karpenter: PathBuf::from(env!("CARGO_BIN_EXE_karpenter")),
        controller_prefix: None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = runtime
        .block_on(karpenter_bench::measure(&options))
        .unwrap_or_else(|err| panic!("bench controller failed: {err:#}"));
    // The JSON shape `karpenter-bench controller -o json` prints (docs/benchmarks.md).
    let report = serde_json::to_value(&report).unwrap();
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

/// `karpenter-bench workload` prints the same mix as manifests that `simulate` plans in full.
#[test]
fn bench_workload_manifests_simulate_with_every_pod_placed() {
    let manifests = workload_manifests(60, 42);
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-workload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("workload.yaml");
    std::fs::write(&file, to_yaml_documents(&manifests).unwrap()).unwrap();
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
