//! `karpenter-bench controller --real-cluster` (crates/karpenter-bench) at a tiny scale: the
//! workload's Deployments on the real control plane, their pods made by the controller-manager
//! and bound by kube-scheduler onto the controller's nodes, so the code path the 10,000-pod
//! figure of docs/benchmarks.md comes from cannot rot. Nothing here is timed.

use std::time::Duration;

use karpenter_bench::ControllerOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_controller_binds_its_workload_on_the_real_control_plane() {
    if karpenter_envtest::assets_dir().ok().flatten().is_none() {
        // Prints the skip (or panics under CI=true) as every real-cluster test does.
        assert!(super::cluster("bench-controller").await.is_none());
        return;
    }
    let options = ControllerOptions {
        pods: 30,
        seed: 42,
        timeout: Duration::from_secs(240),
        karpenter: super::karpenter_binary().to_path_buf(),
        controller_prefix: None,
    };
    let crds = super::repo_root().join("deploy/crds");
    let report = karpenter_bench::controller::measure_on_control_plane(&options, &crds)
        .await
        .unwrap_or_else(|err| panic!("bench controller --real-cluster failed: {err:#}"));
    eprintln!("{report:?}");
    assert_eq!(report.pods, 30);
    assert!(report.deployments >= 2, "{report:?}");
    // Every pod is bound, so there are nodes, each with its NodeClaim (a claim may still be
    // launching when the last pod binds).
    assert!(report.nodes >= 1, "{report:?}");
    assert!(report.node_claims >= report.nodes, "{report:?}");
    assert!(report.seconds_to_all_bound > 0.0, "{report:?}");
    if cfg!(target_os = "linux") {
        let (idle, peak, last) = (
            report.idle_rss_kib.unwrap_or_default(),
            report.peak_rss_kib.unwrap_or_default(),
            report.final_rss_kib.unwrap_or_default(),
        );
        assert!(idle > 0 && peak >= idle && peak >= last, "{report:?}");
    }
}
