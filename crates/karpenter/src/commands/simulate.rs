//! `karpenter simulate`: plan the nodes for a set of manifests on the `sim` provider, offline.
//! The work happens in `karpenter_simulate`; this file parses flags and prints.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use comfy_table::{Cell, CellAlignment};
use karpenter_catalog::pricing::SPOT_MODEL_NOTE;
use karpenter_catalog::{Catalog, DEFAULT_REGION};
use karpenter_core::clock::SystemClock;
use karpenter_core::resources::{CPU, MEMORY, Quantity, ResourceList};
use karpenter_sim::SimCloudProvider;
use karpenter_simulate::{self as simulate, ManifestError, Manifests, Plan};

use super::input::read_inputs;
use super::policies::PolicyArgs;
use crate::output::{self, Format};

/// Above this many pending pods, show a progress spinner on stderr (when it is a terminal).
const LARGE_INPUT_PODS: usize = 1000;

/// Flags of `karpenter simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifests to read: a YAML/JSON file, a directory (read recursively) or `-` for stdin.
    /// Repeat to read several.
    #[arg(
        short = 'f',
        long = "filename",
        required_unless_present = "from_cluster",
        value_name = "FILE|DIR|-"
    )]
    pub files: Vec<PathBuf>,
    /// Start from a snapshot of the live cluster (read-only; see docs/explain.md); `-f` files
    /// are added on top.
    #[arg(long)]
    pub from_cluster: bool,
    /// With --from-cluster: also write the snapshot as YAML that `simulate -f` reads again.
    #[arg(long, value_name = "FILE", requires = "from_cluster")]
    pub snapshot_out: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: super::live::ClusterArgs,
    /// Replace the embedded AWS catalogue with custom instance types (see docs/simulate.md).
    #[arg(long, value_name = "FILE")]
    pub instance_types: Option<PathBuf>,
    /// Region whose zones and offerings the embedded catalogue uses (30 regions; all but
    /// us-east-1 use us-east-1's prices as an approximation, and the output says so).
    #[arg(long, default_value = DEFAULT_REGION)]
    pub region: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    #[command(flatten)]
    pub policies: PolicyArgs,
    #[command(flatten)]
    pub disruption: super::simulate_disruption::DisruptionArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.from_cluster && (args.cluster.kubeconfig.is_some() || args.cluster.context.is_some()) {
        anyhow::bail!("--kubeconfig and --context read a live cluster: add --from-cluster");
    }
    let mut manifests = if args.from_cluster {
        super::live::snapshot_manifests(
            &args.cluster,
            args.snapshot_out.as_deref(),
            args.output == Format::Table,
        )?
    } else {
        Manifests::new()
    };
    let inputs = if args.files.is_empty() {
        karpenter_input::Sources::default()
    } else {
        read_inputs(&args.files)?
    };
    match manifests.load_sources(inputs) {
        Ok(()) => {}
        // Every problem on its own line, each naming its document and field.
        Err(ManifestError::Invalid(problems)) => {
            for problem in &problems {
                output::error(problem);
            }
            output::say(format!(
                "simulate: {} problem(s) in the input; nothing planned",
                problems.len()
            ));
            return Ok(ExitCode::FAILURE);
        }
        Err(err) => return Err(err.into()),
    }
    drop_overlays_unless_gated(
        &mut manifests,
        args.disruption.feature_gates,
        args.output == Format::Table,
    );
    if args.disruption.feature_gates.capacity_buffer {
        let now = karpenter_core::clock::Clock::now(&SystemClock).to_string();
        for line in manifests.add_capacity_buffers(&now) {
            if args.output == Format::Table {
                output::note(line);
            }
        }
    } else if !manifests.capacity_buffers.is_empty() {
        // The controller does not read CapacityBuffers with the gate off; neither does the plan.
        if args.output == Format::Table {
            output::note(format!(
                "{} CapacityBuffer(s) ignored: the CapacityBuffer feature gate is off (add --feature-gates CapacityBuffer=true)",
                manifests.capacity_buffers.len()
            ));
        }
        manifests.capacity_buffers.clear();
    }
    if args.output == Format::Table {
        for ignored in &manifests.ignored {
            output::note(format!(
                "{}: {}/{}: ignored: {}",
                ignored.document, ignored.kind, ignored.name, ignored.reason
            ));
        }
    }

    let clock = Arc::new(SystemClock);
    let custom = args.instance_types.is_some();
    let provider = match &args.instance_types {
        Some(path) => {
            let read = read_inputs(std::slice::from_ref(path))
                .with_context(|| format!("failed to read --instance-types {}", path.display()))?;
            let text = read.sources.first().map_or("", |s| s.text.as_str());
            let types = simulate::parse_instance_types(text, &args.region)
                .with_context(|| format!("--instance-types {}", path.display()))?;
            SimCloudProvider::with_instance_types(&args.region, types, clock)
        }
        None => SimCloudProvider::new(&args.region, clock)?,
    };

    let progress = (manifests.pending_pods.len() >= LARGE_INPUT_PODS)
        .then(|| output::spinner(format!("scheduling {} pods", manifests.pending_pods.len())));
    // With --disruption the planned NodeClaims join the simulated cluster; otherwise only the
    // plan is printed and the objects need not be kept.
    let outcome = if args.disruption.disruption {
        simulate::plan_with(&manifests, &provider, args.policies.scheduler_options())
    } else {
        simulate::plan_only(&manifests, &provider, args.policies.scheduler_options())
    };
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let outcome = outcome?;
    for warning in &outcome.warnings {
        output::warning(warning);
    }
    let approximated =
        !custom && Catalog::embedded().is_ok_and(|c| c.prices_are_approximated(&args.region));
    let footnotes = Footnotes {
        prices_approximated: approximated.then_some(args.region.as_str()),
        scaled_to_zero: &manifests.scaled_to_zero,
    };
    // The table carries its footnotes; JSON and YAML keep their stable shape, so the same
    // caveats go to stderr.
    if args.output != Format::Table {
        for note in footnotes.lines(&outcome.plan) {
            output::note(note);
        }
    }
    if args.disruption.disruption {
        let report = super::simulate_disruption::run(
            &args.disruption,
            &manifests,
            &provider,
            args.policies.scheduler_options(),
            &outcome,
        )?;
        output::render(args.output, &report, |report| {
            let mut out = render_table(&report.plan, &footnotes);
            out.push_str(&super::simulate_disruption::render_table(
                &report.disruption,
            ));
            out
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    output::render(args.output, &outcome.plan, |plan| {
        render_table(plan, &footnotes)
    })?;
    Ok(ExitCode::SUCCESS)
}

/// What a reader of the plan must know beside its numbers.
struct Footnotes<'a> {
    /// The region, when it has no price table of its own.
    prices_approximated: Option<&'a str>,
    /// Workloads asking for no pods (see `Manifests::scaled_to_zero`).
    scaled_to_zero: &'a [String],
}

impl Footnotes<'_> {
    /// The notes, without the `note: ` prefix.
    fn lines(&self, plan: &Plan) -> Vec<String> {
        let mut lines = Vec::new();
        if plan.summary.pods == 0 {
            lines.push(if self.scaled_to_zero.is_empty() {
                "no pending pods in the input: give it a Pod, Deployment, ReplicaSet, StatefulSet or Job whose pods have no spec.nodeName".to_string()
            } else {
                format!(
                    "no pending pods: {} (scale up to see the nodes the pods need)",
                    self.scaled_to_zero.join(", ")
                )
            });
        }
        if let Some(region) = self.prices_approximated {
            lines.push(format!("{region} has no price table of its own; us-east-1 on-demand prices are used as an approximation"));
        }
        lines
    }
}

fn percent(used: Quantity, total: Quantity) -> String {
    if total.is_zero() {
        return "-".to_string();
    }
    format!("{:.0}%", 100.0 * used.as_f64_units() / total.as_f64_units())
}

fn utilisation(requests: &ResourceList, allocatable: &ResourceList, resource: &str) -> String {
    percent(requests.get(resource), allocatable.get(resource))
}

/// The plan for people: NodeClaims, totals, pods placed on existing nodes, unschedulable pods.
fn render_table(plan: &Plan, footnotes: &Footnotes<'_>) -> String {
    let mut out = String::new();
    let any_spot = plan.node_claims.iter().any(|c| c.capacity_type == "spot");
    if !plan.node_claims.is_empty() {
        let mut table = output::table([
            "NODECLAIM",
            "NODEPOOL",
            "INSTANCE TYPE",
            "ZONE",
            "CAPACITY",
            "$/HOUR",
            "PODS",
            "CPU",
            "MEMORY",
        ]);
        for claim in &plan.node_claims {
            let marker = if claim.capacity_type == "spot" {
                "*"
            } else {
                ""
            };
            table.add_row(vec![
                Cell::new(&claim.name),
                Cell::new(&claim.node_pool),
                Cell::new(&claim.instance_type),
                Cell::new(&claim.zone),
                Cell::new(&claim.capacity_type),
                Cell::new(format!("{:.4}{marker}", claim.price))
                    .set_alignment(CellAlignment::Right),
                Cell::new(claim.pods.len()).set_alignment(CellAlignment::Right),
                Cell::new(utilisation(&claim.requests, &claim.allocatable, CPU))
                    .set_alignment(CellAlignment::Right),
                Cell::new(utilisation(&claim.requests, &claim.allocatable, MEMORY))
                    .set_alignment(CellAlignment::Right),
            ]);
        }
        let placed: usize = plan.node_claims.iter().map(|c| c.pods.len()).sum();
        table.add_row(vec![
            Cell::new("TOTAL"),
            Cell::new(""),
            Cell::new(format!("{} nodes", plan.node_claims.len())),
            Cell::new(""),
            Cell::new(""),
            Cell::new(format!("{:.4}", plan.summary.hourly_cost))
                .set_alignment(CellAlignment::Right),
            Cell::new(placed).set_alignment(CellAlignment::Right),
            Cell::new(""),
            Cell::new(""),
        ]);
        out.push_str(&format!("{table}\n"));
    }
    for node in &plan.existing_nodes {
        out.push_str(&format!(
            "existing node {}: {} pod(s)\n",
            node.name,
            node.pods.len()
        ));
    }
    if !plan.unschedulable.is_empty() {
        let mut table = output::table(["UNSCHEDULABLE POD", "REASON"]);
        for pod in &plan.unschedulable {
            table.add_row([&pod.pod, &pod.reason]);
        }
        out.push_str(&format!("{table}\n"));
    }
    let s = &plan.summary;
    out.push_str(&format!(
        "{} of {} pods scheduled, {} new node(s), hourly cost ${:.4}/h (${:.2}/month at 730 h)\n",
        s.scheduled,
        s.pods,
        s.new_node_claims,
        s.hourly_cost,
        s.hourly_cost * 730.0
    ));
    if s.cost_lower_bound > 0.0 {
        out.push_str(&format!(
            "cost {:.4}, lower bound {:.4} (ratio {:.3})\n",
            s.hourly_cost,
            s.cost_lower_bound,
            s.hourly_cost / s.cost_lower_bound
        ));
    }
    if any_spot {
        out.push_str(&format!("* {SPOT_MODEL_NOTE}\n"));
    }
    for note in footnotes.lines(plan) {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// The controller does not read NodeOverlays with the `NodeOverlay` gate off; neither do
/// `simulate`, `explain` and `diff` (from files or the cluster): they are dropped, with a note
/// when `announce`.
pub fn drop_overlays_unless_gated(
    manifests: &mut Manifests,
    gates: karpenter_core::feature_gates::FeatureGates,
    announce: bool,
) {
    if gates.node_overlay || manifests.node_overlays.is_empty() {
        return;
    }
    if announce {
        output::note(format!(
            "{} NodeOverlay(s) ignored: the NodeOverlay feature gate is off (add --feature-gates NodeOverlay=true)",
            manifests.node_overlays.len()
        ));
    }
    manifests.node_overlays.clear();
}
