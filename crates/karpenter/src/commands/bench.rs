//! `karpenter bench scheduling`: upstream's scheduling benchmark workload, timed.
//! `karpenter bench disruption`: one disruption pass over a large cluster (`bench_disruption`).
//! `karpenter bench packing`: plan cost against the lower bound per packing policy
//! (`bench_packing`).
//! All three need only the core; the controller benchmark, which needs a cluster (the test API
//! server), is the dev tool `karpenter-bench` (crates/karpenter-bench), not part of this binary.

use std::process::ExitCode;
use std::time::Instant;

use karpenter_core::scheduling::benchmark;
use karpenter_core::scheduling::{PackingPolicy, PreferencePolicy, Scheduler};

use super::policies::PackingPolicyArg;
use serde::Serialize;

use crate::output::{self, Align, Column, Format, StreamedTable};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub target: Target,
}

#[derive(Debug, clap::Subcommand)]
pub enum Target {
    /// Time the provisioning scheduler on upstream's benchmark workload (400 instance types).
    Scheduling(SchedulingArgs),
    /// Time one full disruption pass (`decide`) over a large simulated cluster (1,000 nodes,
    /// 10,000 pods by default): candidates evaluated, commands found, peak memory.
    Disruption(super::bench_disruption::DisruptionBenchArgs),
    /// Plan cost against the fractional lower bound, and planning time, for both packing
    /// policies on generated workloads over the embedded catalogue (docs/benchmarks.md).
    Packing(super::bench_packing::PackingArgs),
}

/// A pod count of at least one: a benchmark of nothing measures nothing.
pub fn pod_count(raw: &str) -> Result<usize, String> {
    match raw.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1 (a run of no pods measures nothing)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{raw:?} is not a whole number of pods")),
    }
}

#[derive(Debug, clap::Args)]
pub struct SchedulingArgs {
    /// Diverse-workload sizes to run, comma-separated (default: upstream's sweep, 1 to 20,000).
    /// Given sizes run alone: add --preferences for the 4,000-pod preference runs.
    #[arg(long = "pods", value_delimiter = ',', num_args = 1.., value_parser = pod_count)]
    pub pods: Vec<usize>,
    /// Repetitions per size (a fresh scheduler each); the fastest is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Also run the two 4,000-pod preference runs (respect and ignore preferences) after the
    /// sizes given with --pods (upstream's sweep runs them anyway).
    #[arg(long, conflicts_with = "no_preferences")]
    pub preferences: bool,
    /// Skip the two 4,000-pod preference runs of upstream's sweep.
    #[arg(long)]
    pub no_preferences: bool,
    /// Seed for the pod generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Size NodeClaims for cost (`CostOptimal`, the default) or as upstream Karpenter does
    /// (`Upstream`, for comparison; the diverse runs then also check upstream's pods / 5 nodes).
    #[arg(long, value_enum, default_value = "CostOptimal")]
    pub packing_policy: PackingPolicyArg,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

impl SchedulingArgs {
    /// The preference runs happen in upstream's full sweep, or when asked for.
    fn run_preferences(&self) -> bool {
        if self.pods.is_empty() {
            !self.no_preferences
        } else {
            self.preferences
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    workload: String,
    pods: usize,
    node_claims: usize,
    pods_on_node_claims: usize,
    unschedulable: usize,
    seconds: f64,
    pods_per_second: f64,
}

fn measure(
    workload: &str,
    pods: &[benchmark::Pod],
    policy: PreferencePolicy,
    packing: PackingPolicy,
    repeat: usize,
) -> Row {
    let mut best: Option<Row> = None;
    for _ in 0..repeat.max(1) {
        let mut input = benchmark::scheduler_input(policy);
        input.options.packing_policy = packing;
        let start = Instant::now();
        let results = Scheduler::new(input).solve(pods);
        let seconds = start.elapsed().as_secs_f64();
        let row = Row {
            workload: workload.to_string(),
            pods: pods.len(),
            node_claims: results.new_node_claims.len(),
            pods_on_node_claims: results.pods_on_new_node_claims(),
            unschedulable: results.unschedulable.len(),
            seconds,
            pods_per_second: pods.len() as f64 / seconds.max(1e-9),
        };
        if best.as_ref().is_none_or(|b| row.seconds < b.seconds) {
            best = Some(row);
        }
    }
    best.unwrap_or_else(|| unreachable_row(workload))
}

fn unreachable_row(workload: &str) -> Row {
    Row {
        workload: workload.to_string(),
        pods: 0,
        node_claims: 0,
        pods_on_node_claims: 0,
        unschedulable: 0,
        seconds: 0.0,
        pods_per_second: 0.0,
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.target {
        Target::Scheduling(args) => run_scheduling(args),
        Target::Disruption(args) => super::bench_disruption::run(&args),
        Target::Packing(args) => super::bench_packing::run(&args),
    }
}

fn run_scheduling(args: SchedulingArgs) -> anyhow::Result<ExitCode> {
    // The table streams a row per run as it ends (a full sweep takes minutes); JSON and YAML
    // print the rows at the end.
    let mut streamed = (args.output == Format::Table).then(scheduling_table);
    let sizes = if args.pods.is_empty() {
        vec![1, 50, 100, 500, 1000, 1500, 2000, 5000, 10000, 20000]
    } else {
        args.pods.clone()
    };
    let packing: PackingPolicy = args.packing_policy.into();
    // Upstream's pods / 5 holds for upstream's greedy only: the default plans for cost.
    let check_nodes = packing == PackingPolicy::Upstream;
    let mut rows = Vec::new();
    let mut record = |row: Row| {
        if let Some(table) = streamed.as_mut() {
            table.row(&row_cells(&row));
        }
        rows.push(row);
    };
    for &n in &sizes {
        let pods = benchmark::diverse_pods(n, args.seed);
        record(measure(
            "diverse",
            &pods,
            PreferencePolicy::Respect,
            packing,
            args.repeat,
        ));
    }
    if args.run_preferences() {
        let pods = benchmark::preference_pods(4000, args.seed);
        for (name, policy) in [
            ("respect-preferences", PreferencePolicy::Respect),
            ("ignore-preferences", PreferencePolicy::Ignore),
        ] {
            record(measure(name, &pods, policy, packing, args.repeat));
        }
    }
    // The table's rows are out already: its rendering is the total line.
    output::render(args.output, &rows, |rows| total_line(rows))?;
    let failed = rows
        .iter()
        .any(|r| r.unschedulable > 0 || (check_nodes && wrong_node_count(r).is_some()));
    for r in rows.iter().filter(|r| r.unschedulable > 0) {
        output::say(format!(
            "{} {} pods: {} unschedulable",
            r.workload, r.pods, r.unschedulable
        ));
    }
    for (r, expected) in rows
        .iter()
        .filter(|_| check_nodes)
        .filter_map(|r| Some((r, wrong_node_count(r)?)))
    {
        output::say(format!(
            "diverse {} pods: {} NodeClaims, expected {expected} (pods / 5)",
            r.pods, r.node_claims
        ));
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn scheduling_table() -> StreamedTable {
    StreamedTable::new(vec![
        Column::new("workload", 20, Align::Left),
        Column::new("pods", 7, Align::Right),
        Column::new("nodeclaims", 11, Align::Right),
        Column::new("unschedulable", 13, Align::Right),
        Column::new("seconds", 10, Align::Right),
        Column::new("pods/s", 12, Align::Right),
    ])
}

fn row_cells(row: &Row) -> [String; 6] {
    [
        row.workload.clone(),
        row.pods.to_string(),
        row.node_claims.to_string(),
        row.unschedulable.to_string(),
        format!("{:.4}", row.seconds),
        format!("{:.0}", row.pods_per_second),
    ]
}

fn total_line(rows: &[Row]) -> String {
    let pods: usize = rows.iter().map(|r| r.pods).sum();
    let seconds: f64 = rows.iter().map(|r| r.seconds).sum();
    format!(
        "total: {pods} pods in {seconds:.3}s ({:.0} pods/s)\n",
        pods as f64 / seconds.max(1e-9)
    )
}

/// Upstream's invariant for the diverse mix: one node per hostname anti-affinity pod (pods / 5;
/// fewer than five pods are all generic and share one node). The expected count when violated.
fn wrong_node_count(row: &Row) -> Option<usize> {
    let expected = (row.pods / 5).max(row.pods.min(1));
    (row.workload == "diverse" && row.node_claims != expected).then_some(expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, pods: usize, node_claims: usize) -> Row {
        Row {
            workload: workload.to_string(),
            pods,
            node_claims,
            pods_on_node_claims: pods,
            unschedulable: 0,
            seconds: 1.0,
            pods_per_second: pods as f64,
        }
    }

    #[test]
    fn diverse_rows_must_have_one_node_per_five_pods() {
        assert_eq!(wrong_node_count(&row("diverse", 100_000, 20_000)), None);
        assert_eq!(
            wrong_node_count(&row("diverse", 100_000, 20_017)),
            Some(20_000)
        );
        assert_eq!(wrong_node_count(&row("diverse", 1, 1)), None);
        assert_eq!(
            wrong_node_count(&row("respect-preferences", 4000, 4000)),
            None
        );
    }
}
