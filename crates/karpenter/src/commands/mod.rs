//! One module per subcommand.

pub mod controller;
pub mod crds;

use std::process::ExitCode;

use crate::cli::Command;

/// Runs a subcommand and returns the process exit code.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Crds(args) => crds::run(args),
        Command::Controller(args) => controller::run(*args),
    }
}
