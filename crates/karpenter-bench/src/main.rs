//! `karpenter-bench`: the dev tool around the `karpenter` binary (see the library's docs).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use karpenter_bench::{ControllerOptions, ControllerReport};

/// Benchmarks that need a cluster around the `karpenter` binary (the in-process test API server).
#[derive(Debug, Parser)]
#[command(name = "karpenter-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Target,
}

#[derive(Debug, Subcommand)]
enum Target {
    /// Run the sim controller (a child process) on the test API server with N pending pods in
    /// Deployments; report nodes, time to all bound and the controller's peak memory.
    Controller(ControllerArgs),
    /// Print `controller`'s workload (Deployments, NodePool, EC2NodeClass) as YAML, for
    /// `karpenter simulate -f -`.
    Workload(WorkloadArgs),
}

/// `-o` of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
    Yaml,
}

/// `-o` of the manifests: YAML documents or a JSON `kind: List`, as `karpenter convert` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ManifestFormat {
    Yaml,
    Json,
}

#[derive(Debug, clap::Args)]
struct ControllerArgs {
    /// Pending pods to create.
    #[arg(long, default_value_t = 2000, value_parser = pod_count)]
    pods: usize,
    /// Seed for the Deployment mix.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Give up when not every pod is bound after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// The `karpenter` binary to run (default: the one beside this tool, as `cargo build`
    /// leaves them: `cargo build --release -p karpenter -p karpenter-bench`).
    #[arg(long, value_name = "PATH")]
    karpenter: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
    /// The former spelling of `-o json`, kept for scripts.
    #[arg(long, hide = true, conflicts_with = "output")]
    json: bool,
    /// Start the controller under this command (e.g. `heaptrack -o /tmp/controller`), to see
    /// where its memory goes; the reported RSS is then the wrapper's.
    #[arg(long, hide = true)]
    controller_prefix: Option<String>,
}

#[derive(Debug, clap::Args)]
struct WorkloadArgs {
    /// Pods in all (replicas of the Deployments).
    #[arg(long, default_value_t = 2000, value_parser = pod_count)]
    pods: usize,
    /// Seed for the Deployment mix.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Output format: multi-document YAML, or a JSON list (`kind: List`), as `convert` prints.
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    output: ManifestFormat,
}

/// A pod count of at least one: a benchmark of nothing measures nothing.
fn pod_count(raw: &str) -> Result<usize, String> {
    match raw.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1 (a run of no pods measures nothing)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{raw:?} is not a whole number of pods")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Target::Controller(args) => controller(&args),
        Target::Workload(args) => workload(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn controller(args: &ControllerArgs) -> anyhow::Result<()> {
    let karpenter = match &args.karpenter {
        Some(path) => path.clone(),
        None => beside_this_tool()?,
    };
    let options = ControllerOptions {
        pods: args.pods,
        seed: args.seed,
        timeout: Duration::from_secs(args.timeout),
        karpenter,
        controller_prefix: args.controller_prefix.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(karpenter_bench::measure(&options))?;
    let format = if args.json { Format::Json } else { args.output };
    match format {
        Format::Table => print!("{}", controller_table(&report)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Yaml => print!("{}", serde_saphyr::to_string(&report)?),
    }
    Ok(())
}

/// The `karpenter` binary that cargo built beside this one.
fn beside_this_tool() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating karpenter-bench")?;
    let karpenter = exe
        .with_file_name("karpenter")
        .with_extension(std::env::consts::EXE_EXTENSION);
    if !karpenter.is_file() {
        anyhow::bail!(
            "no karpenter binary at {}: build it beside this tool (`cargo build --release -p karpenter -p karpenter-bench`) or name one with --karpenter",
            karpenter.display()
        );
    }
    Ok(karpenter)
}

fn controller_table(report: &ControllerReport) -> String {
    let kib = |v: Option<u64>| {
        v.map_or("n/a".to_string(), |k| {
            format!("{:.1} MiB", k as f64 / 1024.0)
        })
    };
    [
        format!("pods                 {}", report.pods),
        format!("deployments          {}", report.deployments),
        format!("nodes                {}", report.nodes),
        format!("nodeclaims           {}", report.node_claims),
        format!("all bound after      {:.1} s", report.seconds_to_all_bound),
        format!("controller idle RSS  {}", kib(report.idle_rss_kib)),
        format!("controller peak RSS  {} (VmHWM)", kib(report.peak_rss_kib)),
        format!("controller final RSS {}", kib(report.final_rss_kib)),
    ]
    .iter()
    .map(|line| format!("{line}\n"))
    .collect()
}

fn workload(args: &WorkloadArgs) -> anyhow::Result<()> {
    let manifests = karpenter_bench::workload_manifests(args.pods, args.seed);
    match args.output {
        ManifestFormat::Yaml => print!("{}", karpenter_bench::to_yaml_documents(&manifests)?),
        ManifestFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&karpenter_bench::to_json_list(manifests))?
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_benchmark_of_no_pods_is_refused() {
        assert!(pod_count("0").is_err());
        assert!(pod_count("x").is_err());
        assert_eq!(pod_count(" 12 "), Ok(12));
    }

    #[test]
    fn the_table_names_every_measure_and_says_na_without_proc() {
        let report = ControllerReport {
            pods: 50,
            deployments: 4,
            nodes: 5,
            node_claims: 5,
            seconds_to_all_bound: 12.34,
            idle_rss_kib: Some(2048),
            peak_rss_kib: None,
            final_rss_kib: Some(3072),
        };
        let table = controller_table(&report);
        assert!(table.contains("all bound after      12.3 s\n"), "{table}");
        assert!(table.contains("controller idle RSS  2.0 MiB\n"), "{table}");
        assert!(
            table.contains("controller peak RSS  n/a (VmHWM)\n"),
            "{table}"
        );
        assert_eq!(table.lines().count(), 8);
    }
}
