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
mod controller_aws;
mod controller_e2e;
mod controller_faults;
mod docs;
mod getting_started;
mod simulate;
mod simulate_disruption;
