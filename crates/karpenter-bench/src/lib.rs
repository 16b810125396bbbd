//! The controller benchmark harness, a dev tool outside the shipped `karpenter` binary (so the
//! binary does not link the test API server). `karpenter-bench controller` measures a
//! `karpenter controller` child process on N pending pods; `karpenter-bench workload` prints the
//! same workload as manifests for `karpenter simulate`; `karpenter-bench perf` runs upstream's
//! performance suite on a real control plane; `karpenter-bench arrivals` scales Deployments in
//! steps on one under each packing policy and reports cost against the lower bound. See
//! docs/benchmarks.md.
//!
//! A library too, so `karpenter`'s integration tests run the harness on the binary they built.

pub mod arrivals;
mod binder;
pub mod controller;
pub mod perf;
mod process;
pub mod workload;

pub use controller::{ControllerOptions, ControllerReport, measure};
pub use process::memory_kib;
pub use workload::{to_json_list, to_yaml_documents, workload_manifests};
