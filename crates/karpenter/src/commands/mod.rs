//! One module per subcommand.

pub mod aws;
pub mod bench;
mod bench_disruption;
mod bench_packing;
pub mod controller;
mod controller_aws;
pub mod convert;
pub mod crds;
pub mod diff;
pub mod explain;
mod input;
mod live;
pub mod policies;
pub mod simulate;
mod simulate_disruption;
pub mod validate;

use std::process::ExitCode;

use crate::cli::Command;

/// Runs a subcommand and returns the process exit code.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Aws(args) => aws::run(args),
        Command::Crds(args) => crds::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Controller(args) => controller::run(*args),
    }
}
