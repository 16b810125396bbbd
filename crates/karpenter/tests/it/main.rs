//! Integration tests of the `karpenter` command (one test binary, one module per subcommand).

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_cli;
mod architecture;
mod aws_iam;
mod bad_input;
mod bench_controller;
mod chart;
mod cli_conventions;
// The aws provider's tests need the `aws` feature (`./scripts/test.sh` enables it); the build
// without it is checked by `no_aws_feature` (`./scripts/test.sh` runs it in a second step).
#[cfg(feature = "aws")]
mod controller_aws;
mod controller_e2e;
mod controller_faults;
mod dashboards;
mod docs;
mod explain_live;
mod getting_started;
#[cfg(not(feature = "aws"))]
mod no_aws_feature;
mod prometheus;
mod readme_as_typed;
mod real_cluster;
mod simulate;
mod simulate_disruption;
mod snapshots;
mod testapi_env;
