//! `karpenter`: one binary, many subcommands (see `cli.rs`).

mod cli;
mod commands;
mod output;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli.command) {
        Ok(code) => code,
        Err(err) => {
            output::error(format!("{err:#}"));
            ExitCode::FAILURE
        }
    }
}
