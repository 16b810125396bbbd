//! `karpenter simulate --disruption`: the flags, the run in virtual time
//! (`karpenter_simulate::disruption`) and the table for people.

use anyhow::Context;
use comfy_table::{Cell, CellAlignment};
use jiff::{SignedDuration, Timestamp};
use karpenter_api::v1::NillableDuration;
use karpenter_core::feature_gates::FeatureGates;
use karpenter_core::scheduling::SchedulerOptions;
use karpenter_sim::SimCloudProvider;
use karpenter_simulate::disruption::report::DisruptionReport;
use karpenter_simulate::disruption::{DEFAULT_INSTANCE_SHUTDOWN_SECONDS, TimelineSettings};
use karpenter_simulate::{
    DisruptionSettings, Manifests, PlanOutcome, PlanWithDisruption, simulate_disruption,
};

use crate::output;

/// Flags of `simulate --disruption`.
#[derive(Debug, clap::Args)]
pub struct DisruptionArgs {
    /// After provisioning the pending pods, run the disruption loop (emptiness, drift,
    /// consolidation, expiration, budgets) in virtual time and report its commands.
    #[arg(long)]
    pub disruption: bool,
    /// With --disruption: virtual start time (RFC 3339); pods of the input count as last bound
    /// then. Default: now.
    #[arg(long, value_name = "RFC3339", requires = "disruption")]
    pub now: Option<Timestamp>,
    /// With --disruption: how much virtual time to run (Go duration, e.g. 24h, 90m).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration, requires = "disruption")]
    pub until: SignedDuration,
    /// Upstream's feature gates, as `karpenter controller` takes them (e.g.
    /// `NodeOverlay=true`, or with --disruption `SpotToSpotConsolidation=true`).
    #[arg(long, default_value = "", value_parser = super::controller::feature_gates)]
    pub feature_gates: FeatureGates,
    /// How long an evicted pod takes to terminate, at most its own
    /// terminationGracePeriodSeconds. Default: the whole grace period (30 s when unset).
    #[arg(long, value_name = "SECONDS", requires = "disruption")]
    pub pod_termination_seconds: Option<u32>,
    /// How long an instance takes to shut down once its last pod is gone.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_INSTANCE_SHUTDOWN_SECONDS, requires = "disruption")]
    pub instance_shutdown_seconds: u32,
}

pub(crate) fn parse_duration(raw: &str) -> Result<SignedDuration, String> {
    NillableDuration::parse(raw)
        .map_err(|err| err.to_string())?
        .duration()
        .filter(|d| !d.is_negative())
        .ok_or_else(|| format!("{raw:?} is not a duration (use e.g. 24h or 90m)"))
}

pub fn run(
    args: &DisruptionArgs,
    manifests: &Manifests,
    provider: &SimCloudProvider,
    options: SchedulerOptions,
    outcome: &PlanOutcome,
) -> anyhow::Result<PlanWithDisruption> {
    let settings = DisruptionSettings {
        // The binary is the one place allowed to read the wall clock.
        now: args.now.unwrap_or_else(Timestamp::now),
        until: args.until,
        max_steps: karpenter_simulate::disruption::MAX_STEPS,
        feature_gates: args.feature_gates,
        timeline: TimelineSettings {
            pod_termination: args
                .pod_termination_seconds
                .map(|s| SignedDuration::from_secs(i64::from(s))),
            instance_shutdown: SignedDuration::from_secs(i64::from(args.instance_shutdown_seconds)),
            ..TimelineSettings::default()
        },
    };
    let disruption = simulate_disruption(manifests, provider, options, outcome, settings)
        .context("simulate --disruption")?;
    Ok(PlanWithDisruption {
        plan: outcome.plan.clone(),
        disruption,
    })
}

/// `rollout: N command(s) from FIRST to LAST (DURATION)`, and the nodes still on their way out.
fn rollout_line(report: &DisruptionReport) -> String {
    let first = report
        .commands
        .iter()
        .filter_map(|c| c.at.parse::<Timestamp>().ok())
        .min();
    let last = report
        .completed_at
        .as_deref()
        .and_then(|at| at.parse::<Timestamp>().ok());
    let mut line = format!("rollout: {} command(s)", report.commands.len());
    if let (Some(first), Some(last)) = (first, last) {
        let took = last.duration_since(first);
        line.push_str(&format!(
            " from {first} to {last} ({})",
            human_duration(took)
        ));
    }
    if !report.in_flight.is_empty() {
        line.push_str(&format!(
            "; still on their way out: {}",
            report.in_flight.join(", ")
        ));
    }
    line.push('\n');
    line
}

/// `1h2m3s`, `4m30s`, `50s`.
pub(crate) fn human_duration(d: SignedDuration) -> String {
    let total = d.as_secs().max(0);
    let (h, m, s) = (total / 3600, total % 3600 / 60, total % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

fn price(price: Option<f64>) -> String {
    price.map_or_else(|| "?".to_string(), |p| format!("{p:.4}"))
}

/// The commands in order, before/after, and the nodes left alone with their reasons.
pub fn render_table(report: &DisruptionReport) -> String {
    let mut out = String::from("\ndisruption:\n");
    if report.commands.is_empty() {
        out.push_str("no disruption commands\n");
    } else {
        let mut table = output::table([
            "AT",
            "COMPLETED",
            "REASON",
            "DECISION",
            "NODES",
            "REPLACEMENTS",
            "SAVINGS $/HOUR",
        ]);
        for command in &report.commands {
            let nodes: Vec<String> = command
                .candidates
                .iter()
                .map(|c| {
                    format!(
                        "{} ({}, {})",
                        c.name,
                        c.instance_type.as_deref().unwrap_or("?"),
                        price(c.price)
                    )
                })
                .collect();
            let replacements: Vec<String> = command
                .replacements
                .iter()
                .map(|r| format!("{} ({}, {:.4})", r.name, r.instance_type, r.price))
                .collect();
            let completed = match (&command.completed_at, &command.rolled_back) {
                (Some(at), _) => at.clone(),
                (None, Some(rolled_back)) => {
                    format!("rolled back {} ({})", rolled_back.at, rolled_back.reason)
                }
                (None, None) => "in flight".to_string(),
            };
            table.add_row(vec![
                Cell::new(&command.at),
                Cell::new(completed),
                Cell::new(&command.reason),
                Cell::new(&command.decision),
                Cell::new(nodes.join("\n")),
                Cell::new(replacements.join("\n")),
                Cell::new(format!("{:.4}", command.savings_per_hour))
                    .set_alignment(CellAlignment::Right),
            ]);
        }
        out.push_str(&format!("{table}\n"));
        out.push_str(&rollout_line(report));
    }
    out.push_str(&format!(
        "before: {} node(s), ${:.4}/h; after: {} node(s), ${:.4}/h\n",
        report.before.nodes,
        report.before.hourly_cost,
        report.after.nodes.len(),
        report.after.hourly_cost
    ));
    if !report.steps.is_empty() {
        let mut table = output::table([
            "PERIOD FROM",
            "PODS",
            "NODES",
            "$/HOUR",
            "BOUND $/HOUR",
            "× BOUND",
            "COMMANDS",
            "DISRUPTED",
        ]);
        for step in &report.steps {
            table.add_row(vec![
                Cell::new(&step.at),
                Cell::new(step.pods).set_alignment(CellAlignment::Right),
                Cell::new(step.nodes).set_alignment(CellAlignment::Right),
                Cell::new(format!("{:.4}", step.hourly_cost)).set_alignment(CellAlignment::Right),
                Cell::new(format!("{:.4}", step.cost_lower_bound))
                    .set_alignment(CellAlignment::Right),
                Cell::new(step.ratio.map_or("—".to_string(), |r| format!("{r:.3}")))
                    .set_alignment(CellAlignment::Right),
                Cell::new(step.commands).set_alignment(CellAlignment::Right),
                Cell::new(step.disrupted_nodes).set_alignment(CellAlignment::Right),
            ]);
        }
        out.push_str(&format!("{table}\n"));
    }
    if !report.blocked.is_empty() {
        let mut table = output::table(["NODE NOT DISRUPTED", "REASON"]);
        for blocked in &report.blocked {
            table.add_row([&blocked.name, &blocked.reason]);
        }
        out.push_str(&format!("{table}\n"));
    }
    if !report.after.unschedulable.is_empty() {
        let mut table = output::table(["UNSCHEDULABLE POD", "REASON"]);
        for pod in &report.after.unschedulable {
            table.add_row([
                format!("{}/{}", pod.namespace, pod.name),
                pod.reason.clone(),
            ]);
        }
        out.push_str(&format!("{table}\n"));
    }
    out
}
