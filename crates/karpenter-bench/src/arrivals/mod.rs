//! `karpenter-bench arrivals`: pods arriving over time on a real control plane
//! (`KUBEBUILDER_ASSETS`) with `karpenter controller --cloud-provider sim`, under each packing
//! policy. Several Deployments of mixed shapes (one zone-spread) scale in steps (10 → 200 → 600 →
//! 300 → 900 pods); consolidation is on (`WhenEmptyOrUnderutilized`, default budgets). After each
//! step converges the benchmark reads the controller's own cost view (`karpenter_cluster_cost_*`:
//! what the nodes cost and the fractional lower bound for the pods on them), the nodes disrupted
//! and the pods' time to Running. A benchmark, not a test: it asserts nothing; `docs/benchmarks.md`
//! records its runs.

mod pattern;
mod report;
mod run;

pub use pattern::{SHAPES, STEPS, Shape, deploys, replicas, scaled_steps};
pub use report::{PolicyReport, StepReport, metric_sum, table};
pub use run::{ArrivalOptions, run_policy};
