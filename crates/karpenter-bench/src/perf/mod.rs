//! `karpenter-bench perf`: upstream Karpenter's performance suite (`test/suites/performance`) on a
//! real control plane (`KUBEBUILDER_ASSETS`, as the real-cluster tests find it) with
//! `karpenter controller --cloud-provider sim`, each phase printed beside upstream's thresholds.
//! A benchmark, not a test: it asserts nothing; `docs/benchmarks.md` records its runs.

mod report;
pub(crate) mod run;
pub mod scenarios;

pub use report::{PhaseReport, ScenarioReport, table};
pub use run::{PerfOptions, run_scenario};
