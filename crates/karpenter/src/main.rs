//! `karpenter`: one binary, many subcommands (see `cli.rs`).

mod aws_iam;
mod cli;
mod commands;
mod output;

use std::process::ExitCode;

use clap::Parser;

/// jemalloc instead of the system allocator: with glibc's per-thread arenas the controller's
/// resident memory stayed far above its live heap after bursts (10,000 pods: 266 MB peak RSS
/// with glibc, 218 MB with jemalloc returning freed pages at once; see docs/benchmarks.md).
/// Its options are compiled in (`.cargo/config.toml`, `JEMALLOC_SYS_WITH_MALLOC_CONF`). Without
/// the `jemalloc` feature (on by default) the system allocator serves, for heap profilers.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli.command) {
        Ok(code) => code,
        Err(err) => {
            output::error(output::error_chain(&err));
            ExitCode::FAILURE
        }
    }
}
