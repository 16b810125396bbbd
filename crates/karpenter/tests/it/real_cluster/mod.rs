//! End to end on a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler v1.36 from `KUBEBUILDER_ASSETS`; `karpenter-envtest`): the `karpenter controller
//! --cloud-provider sim` binary users run, its Nodes registered by the sim kubelet, pods bound by
//! the real scheduler, evictions through the real Eviction API and PDBs, objects checked by the
//! real CRD schemas and CEL rules.
//!
//! Without `KUBEBUILDER_ASSETS` every test here prints `skipped: no control plane
//! (KUBEBUILDER_ASSETS)` and passes; `scripts/test.sh` sets it (and `CI=true` makes its absence a
//! failure).
//!
//! `regression/` is upstream Karpenter's kwok regression suite (`test/suites/regression`), one test
//! per upstream `It`, named after it.

mod alone;
mod arrivals;
mod bench_controller;
mod capacitybuffer;
mod harness;
mod inflate;
mod leader;
mod nodeoverlay;
pub(crate) mod objects;
mod regression;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use karpenter_envtest::eventually;
use karpenter_envtest::{Cluster, Karpenter, KarpenterOptions, Setup};

pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The CRDs the controller needs: the committed ones (`deploy/crds`), as users install them.
pub(crate) fn setup() -> Setup {
    Setup {
        crds: vec![repo_root().join("deploy/crds")],
    }
}

pub(crate) fn karpenter_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_karpenter"))
}

/// A control plane for `test` (None: skipped, see the module's doc).
pub(crate) async fn cluster(test: &str) -> Option<Cluster> {
    karpenter_envtest::cluster(test, &setup()).await
}

/// The options every test starts from: the sim provider, upstream's batch windows shortened as
/// upstream's own e2e settings do (`BATCH_IDLE_DURATION` 1s, `BATCH_MAX_DURATION` 10s are the
/// defaults; tests keep them unless they say why).
pub(crate) fn options() -> KarpenterOptions {
    KarpenterOptions::default().env("LOG_LEVEL", "info")
}

/// A control plane with the controller running on it.
pub(crate) async fn with_karpenter(
    test: &str,
    options: KarpenterOptions,
) -> Option<(Cluster, Karpenter)> {
    let cluster = cluster(test).await?;
    let karpenter = cluster
        .start_karpenter(karpenter_binary(), &options)
        .unwrap();
    Some((cluster, karpenter))
}

/// Short waits for what the cluster does at once, longer for what waits on a batch window and a
/// launch (`LAUNCH`), and for a disruption pass (10 s apart) with its drain (`DISRUPT`).
#[allow(dead_code)]
pub(crate) const SOON: Duration = Duration::from_secs(30);
pub(crate) const LAUNCH: Duration = Duration::from_secs(60);
pub(crate) const DISRUPT: Duration = Duration::from_secs(120);
