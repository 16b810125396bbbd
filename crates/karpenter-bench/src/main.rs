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
    /// Upstream Karpenter's performance suite (`test/suites/performance`) on a real control
    /// plane (KUBEBUILDER_ASSETS) with the sim controller: each phase beside upstream's
    /// thresholds (time, controller memory and CPU, reserved utilization).
    Perf(PerfArgs),
    /// Pods arriving over time on a real control plane (KUBEBUILDER_ASSETS) with the sim
    /// controller: Deployments of mixed shapes scale 10 → 200 → 600 → 300 → 900 pods under each
    /// packing policy; after each step converges, the hourly cost against the fractional lower
    /// bound, the nodes disrupted and the pods' time to Running.
    Arrivals(ArrivalsArgs),
}

#[derive(Debug, clap::Args)]
struct ArrivalsArgs {
    /// Packing policies to run, each on its own control plane.
    #[arg(long = "packing-policy", value_delimiter = ',', value_enum,
          default_values_t = [Policy::CostOptimal, Policy::Upstream])]
    policies: Vec<Policy>,
    /// Multiply every step's pods (0.1: 1 → 20 → 60 → 30 → 90), at least one pod a step.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Quiet seconds (no node or NodeClaim added or removed, none draining) that end a step.
    #[arg(long, default_value_t = 45)]
    settle: u64,
    /// Give up on a step after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// Run only the first N steps.
    #[arg(long, value_name = "N")]
    steps: Option<usize>,
    /// The `karpenter` binary to run (default: the one beside this tool).
    #[arg(long, value_name = "PATH")]
    karpenter: Option<PathBuf>,
    /// The CRDs to install (default: this repository's deploy/crds).
    #[arg(long, value_name = "DIR")]
    crds: Option<PathBuf>,
    /// After each step, write the cluster as `karpenter simulate --from-cluster --snapshot-out`
    /// sees it to DIR/<policy>-step-<N>.yaml (for `simulate --disruption -f` from the live state).
    #[arg(long, value_name = "DIR")]
    snapshots: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// The controller's `--packing-policy`, spelled as it spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Policy {
    #[value(name = "CostOptimal")]
    CostOptimal,
    #[value(name = "Upstream")]
    Upstream,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::CostOptimal => "CostOptimal",
            Policy::Upstream => "Upstream",
        }
    }
}

#[derive(Debug, clap::Args)]
struct PerfArgs {
    /// Scenarios to run (upstream's tests): basic, do-not-disrupt, drift, hostname-spreading,
    /// hostname-spreading-xl, wide-deployments, interference, or all.
    #[arg(long = "scenario", value_delimiter = ',', default_value = "basic")]
    scenarios: Vec<String>,
    /// Multiply every replica count (0.05: the suite's shape in a minute; 10: 10,000 pods).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Quiet seconds (no node added, removed or draining) that end a consolidation (upstream
    /// waits 180).
    #[arg(long, default_value_t = 60)]
    settle: u64,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// Run only the first N phases of each scenario (1: the scale-out alone).
    #[arg(long, value_name = "N")]
    phases: Option<usize>,
    /// The `karpenter` binary to run (default: the one beside this tool).
    #[arg(long, value_name = "PATH")]
    karpenter: Option<PathBuf>,
    /// The CRDs to install (default: this repository's deploy/crds).
    #[arg(long, value_name = "DIR")]
    crds: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
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
    #[arg(long, hide = true, conflicts_with = "real_cluster")]
    controller_prefix: Option<String>,
    /// Run on a real control plane (KUBEBUILDER_ASSETS) instead of the test API server: the
    /// Deployments' pods made by the controller-manager and bound by kube-scheduler.
    #[arg(long)]
    real_cluster: bool,
    /// The CRDs to install with `--real-cluster` (default: this repository's deploy/crds).
    #[arg(long, value_name = "DIR", requires = "real_cluster")]
    crds: Option<PathBuf>,
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
        Target::Perf(args) => perf(&args),
        Target::Arrivals(args) => arrivals(&args),
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
    let report = if args.real_cluster {
        let crds = args
            .crds
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds"));
        runtime.block_on(karpenter_bench::controller::measure_on_control_plane(
            &options, &crds,
        ))?
    } else {
        runtime.block_on(karpenter_bench::measure(&options))?
    };
    let format = if args.json { Format::Json } else { args.output };
    match format {
        Format::Table => print!("{}", controller_table(&report)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Yaml => print!("{}", serde_saphyr::to_string(&report)?),
    }
    Ok(())
}

fn perf(args: &PerfArgs) -> anyhow::Result<()> {
    use karpenter_bench::perf::{self, scenarios};
    if !(args.scale > 0.0 && args.scale.is_finite()) {
        anyhow::bail!("--scale must be a positive number, not {}", args.scale);
    }
    let known = scenarios::all();
    let wanted: Vec<scenarios::Scenario> = if args.scenarios.iter().any(|s| s == "all") {
        known
    } else {
        let mut out = Vec::new();
        for name in &args.scenarios {
            match known.iter().find(|s| s.name == name) {
                Some(s) => out.push(s.clone()),
                None => anyhow::bail!(
                    "--scenario {name}: unknown; one of {}, or all",
                    known.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
                ),
            }
        }
        out
    };
    let options = perf::PerfOptions {
        karpenter: match &args.karpenter {
            Some(path) => path.clone(),
            None => beside_this_tool()?,
        },
        crds: args
            .crds
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")),
        timeout: Duration::from_secs(args.timeout),
        settle: Duration::from_secs(args.settle),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut reports = Vec::new();
    for scenario in wanted {
        let mut scenario = scenarios::scaled(scenario, args.scale);
        if let Some(n) = args.phases {
            scenario.phases.truncate(n.max(1));
        }
        eprintln!(
            "{} (scale {}): {}",
            scenario.name, args.scale, scenario.upstream
        );
        reports.push(runtime.block_on(perf::run_scenario(&scenario, &options))?);
    }
    match args.output {
        Format::Table => print!("{}", perf::table(&reports)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&reports)?),
        Format::Yaml => print!("{}", serde_saphyr::to_string(&reports)?),
    }
    Ok(())
}

fn arrivals(args: &ArrivalsArgs) -> anyhow::Result<()> {
    use karpenter_bench::arrivals;
    if !(args.scale > 0.0 && args.scale.is_finite()) {
        anyhow::bail!("--scale must be a positive number, not {}", args.scale);
    }
    let mut steps = arrivals::scaled_steps(args.scale);
    if let Some(n) = args.steps {
        steps.truncate(n.max(1));
    }
    let options = arrivals::ArrivalOptions {
        karpenter: match &args.karpenter {
            Some(path) => path.clone(),
            None => beside_this_tool()?,
        },
        crds: args
            .crds
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")),
        steps,
        timeout: Duration::from_secs(args.timeout),
        settle: Duration::from_secs(args.settle),
        snapshots: args.snapshots.clone(),
    };
    if let Some(dir) = &args.snapshots {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the snapshot directory {}", dir.display()))?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut reports = Vec::new();
    for policy in &args.policies {
        eprintln!(
            "{} (scale {}): steps {:?}",
            policy.name(),
            args.scale,
            options.steps
        );
        reports.push(runtime.block_on(arrivals::run_policy(policy.name(), &options))?);
    }
    match args.output {
        Format::Table => print!("{}", arrivals::table(&reports)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&reports)?),
        Format::Yaml => print!("{}", serde_saphyr::to_string(&reports)?),
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
