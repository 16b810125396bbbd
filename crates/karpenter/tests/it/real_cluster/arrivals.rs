//! `karpenter-bench arrivals` (crates/karpenter-bench) at a tiny scale on the real control plane,
//! so the benchmark's code path cannot rot: the steps converge, the controller's cost view is read
//! and every figure the table prints is there. The benchmark's figures are in docs/benchmarks.md.

use std::time::Duration;

use karpenter_bench::arrivals::{ArrivalOptions, run_policy, scaled_steps, table};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrivals_benchmark_runs_its_steps_on_the_real_control_plane() {
    if karpenter_envtest::assets_dir().ok().flatten().is_none() {
        // Prints the skip (or panics under CI=true) as every real-cluster test does.
        assert!(super::cluster("arrivals").await.is_none());
        return;
    }
    // 1 → 2 → 6 pods: up twice, the second step on top of the first's nodes.
    let steps: Vec<usize> = scaled_steps(0.01).into_iter().take(3).collect();
    assert_eq!(steps, [1, 2, 6]);
    let snapshots = std::env::temp_dir().join(format!("karpenter-arrivals-{}", std::process::id()));
    std::fs::create_dir_all(&snapshots).unwrap();
    let options = ArrivalOptions {
        karpenter: super::karpenter_binary().to_path_buf(),
        crds: super::repo_root().join("deploy/crds"),
        steps: steps.clone(),
        timeout: Duration::from_secs(40),
        settle: Duration::from_secs(3),
        snapshots: Some(snapshots.clone()),
    };
    let report = run_policy("CostOptimal", &options).await.unwrap();
    eprintln!("{}", table(std::slice::from_ref(&report)));
    assert_eq!(report.policy, "CostOptimal");
    assert_eq!(
        report.steps.iter().map(|s| s.pods).collect::<Vec<_>>(),
        steps
    );
    for step in &report.steps {
        assert!(step.nodes >= 1, "{step:?}");
        assert!(step.hourly_cost > 0.0, "{step:?}");
        assert!(step.cost_lower_bound > 0.0, "{step:?}");
        // The bound is a lower bound on what the nodes cost.
        assert!(step.ratio.is_some_and(|r| r >= 0.999), "{step:?}");
        assert!(step.to_running_max_seconds.is_some(), "{step:?}");
    }
    assert_eq!(report.steps[0].new_pods, 1);
    assert!(report.steps[2].new_pods >= 4, "{:?}", report.steps[2]);
    // `--snapshots`: the last step's cluster, as `simulate -f` reads it, holds its six pods
    // bound to the controller's nodes.
    let last = std::fs::read_to_string(snapshots.join("CostOptimal-step-3.yaml")).unwrap();
    let _ = std::fs::remove_dir_all(&snapshots);
    let docs: Vec<serde_json::Value> = last
        .split("\n---")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let bound = docs
        .iter()
        .filter(|d| d["kind"] == "Pod" && d["spec"]["nodeName"].is_string())
        .count();
    assert!(bound >= 6, "{bound} bound pods in the snapshot");
    assert!(docs.iter().any(|d| d["kind"] == "NodePool"));
}
