//! `karpenter diff -f FILE|DIR|-`: what applying NodePools and EC2NodeClasses would do to the
//! live cluster (drift, replacements, cost, rollout time, unschedulable pods), read-only. Exit
//! codes as `kubectl diff`: 0 nothing would change, 1 something would, 2 an error.

use std::path::PathBuf;
use std::process::ExitCode;

use comfy_table::{Cell, CellAlignment};
use jiff::{SignedDuration, Timestamp};
use karpenter_core::feature_gates::FeatureGates;
use karpenter_core::scheduling::SchedulerOptions;
use karpenter_simulate::disruption::{MAX_STEPS, TimelineSettings};
use karpenter_simulate::{DiffReport, DisruptionSettings, ManifestError, Manifests};

use super::input::read_inputs;
use super::live::{self, ClusterArgs};
use crate::output::{self, Format};

/// `kubectl diff`'s exit code for an error.
const EXIT_ERROR: u8 = 2;

/// Flags of `karpenter diff`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// NodePools and EC2NodeClasses to compare: a YAML/JSON file, a directory (read
    /// recursively) or `-` for stdin. Repeat to read several.
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        value_name = "FILE|DIR|-"
    )]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// How much virtual time the rollout may take at most (Go duration, e.g. 24h, 7d).
    #[arg(long, value_name = "DURATION", default_value = "168h", value_parser = super::simulate_disruption::parse_duration)]
    pub until: SignedDuration,
    /// Region of the embedded catalogue whose instance types and prices stand in for the
    /// cloud's (default: the nodes' topology.kubernetes.io/region label, else us-east-1).
    #[arg(long)]
    pub region: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// The controller's feature gates, e.g. `NodeOverlay=true` to apply NodeOverlays (the
    /// cluster's and the files') as `simulate --feature-gates` does.
    #[arg(long, default_value = "", value_parser = super::controller::feature_gates)]
    pub feature_gates: FeatureGates,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match compare(&args) {
        Ok(Some(report)) => {
            output::render(args.output, &report, render_table)?;
            Ok(ExitCode::from(u8::from(report.changes_anything())))
        }
        // Problems already printed.
        Ok(None) => Ok(ExitCode::from(EXIT_ERROR)),
        Err(err) => {
            output::error(output::error_chain(&err));
            Ok(ExitCode::from(EXIT_ERROR))
        }
    }
}

/// The report, or `None` when the files did not validate (their problems printed).
fn compare(args: &Args) -> anyhow::Result<Option<DiffReport>> {
    let mut changes = Manifests::new();
    match changes.load_sources(read_inputs(&args.files)?) {
        Ok(()) => {}
        Err(ManifestError::Invalid(problems)) => {
            for problem in &problems {
                output::error(problem);
            }
            output::say(format!(
                "diff: {} problem(s) in the input; nothing compared",
                problems.len()
            ));
            return Ok(None);
        }
        Err(err) => return Err(err.into()),
    }
    let table = args.output == Format::Table;
    super::simulate::drop_overlays_unless_gated(&mut changes, args.feature_gates, table);
    if changes.node_pools.is_empty()
        && changes.node_classes.is_empty()
        && changes.node_overlays.is_empty()
    {
        anyhow::bail!("no NodePool, EC2NodeClass or NodeOverlay in the input: diff compares those");
    }
    let (_, mut live) = live::read_manifests(&args.cluster, table)?;
    super::simulate::drop_overlays_unless_gated(&mut live, args.feature_gates, table);
    let provider = super::explain::provider_for(&live, args.region.as_deref())?;
    let settings = DisruptionSettings {
        // The binary is the one place allowed to read the wall clock.
        now: Timestamp::now(),
        until: args.until,
        max_steps: MAX_STEPS,
        feature_gates: args.feature_gates,
        timeline: TimelineSettings::default(),
    };
    let report = karpenter_simulate::diff(
        &live,
        &changes,
        &provider,
        SchedulerOptions::default(),
        settings,
    )?;
    Ok(Some(report))
}

fn render_table(report: &DiffReport) -> String {
    let mut out = String::new();
    if report.changed.is_empty() {
        out.push_str("no change: the files match the cluster\n");
        return out;
    }
    for changed in &report.changed {
        out.push_str(&format!("{changed}\n"));
    }
    if report.drifted.is_empty() {
        out.push_str("no node would drift\n");
    } else {
        let mut table = output::table(["DRIFTED NODE", "NODECLAIM", "NODEPOOL", "REASON"]);
        for node in &report.drifted {
            table.add_row([&node.node, &node.node_claim, &node.node_pool, &node.reason]);
        }
        out.push_str(&format!("{table}\n"));
    }
    if !report.replacements.is_empty() {
        let mut table =
            output::table(["REPLACEMENT", "INSTANCE TYPE", "ZONE", "CAPACITY", "$/HOUR"]);
        for r in &report.replacements {
            table.add_row(vec![
                Cell::new(&r.name),
                Cell::new(&r.instance_type),
                Cell::new(&r.zone),
                Cell::new(&r.capacity_type),
                Cell::new(format!("{:.4}", r.price)).set_alignment(CellAlignment::Right),
            ]);
        }
        out.push_str(&format!("{table}\n"));
    }
    out.push_str(&format!(
        "cost: ${:.4}/h (${:.2}/month) now, ${:.4}/h (${:.2}/month) after\n",
        report.hourly_cost_before,
        report.monthly_cost_before,
        report.hourly_cost_after,
        report.monthly_cost_after
    ));
    if !report.drifted.is_empty() {
        let took = super::simulate_disruption::human_duration(SignedDuration::from_secs(
            report.rollout_seconds,
        ));
        let state = if report.rollout_complete {
            "completes"
        } else {
            "is not complete"
        };
        out.push_str(&format!(
            "rollout: {} replacement(s) under the budgets; it {state} after {took}\n",
            report.replacements.len()
        ));
    }
    if !report.held.is_empty() {
        let mut table = output::table(["DRIFTED NODE NOT REPLACED", "REASON"]);
        for held in &report.held {
            table.add_row([&held.node, &held.reason]);
        }
        out.push_str(&format!("{table}\n"));
    }
    if !report.unschedulable.is_empty() {
        let mut table = output::table(["UNSCHEDULABLE POD", "REASON"]);
        for pod in &report.unschedulable {
            table.add_row([&pod.pod, &pod.reason]);
        }
        out.push_str(&format!("{table}\n"));
    }
    out
}
