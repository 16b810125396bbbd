//! `karpenter explain pod NAMESPACE/NAME | node NAME | nodeclaim NAME | nodepool NAME`: reads
//! the cluster (read-only) and answers with the controller's own reasons. The answers are
//! computed by `karpenter_simulate::explain`; this file parses flags and prints.

use std::process::ExitCode;
use std::sync::Arc;

use jiff::Timestamp;
use karpenter_core::clock::SystemClock;
use karpenter_core::feature_gates::FeatureGates;
use karpenter_core::scheduling::SchedulerOptions;
use karpenter_sim::SimCloudProvider;
use karpenter_simulate::explain::{
    self, NodeExplanation, NodePoolExplanation, PodExplanation, PodStatus, Reason,
};
use karpenter_simulate::{ExplainError, ExplainInput, Manifests};

use super::live::{self, ClusterArgs};
use crate::output::{self, Format};

/// What to explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Where a pod runs, or where it would go / why it cannot be scheduled.
    Pod,
    /// Whether a node is a disruption candidate now, and each reason it is not.
    Node,
    /// The node of a NodeClaim (the NodeClaim itself before its Node registers).
    Nodeclaim,
    /// A NodePool's budgets, limits, drift, nodes and cost.
    Nodepool,
}

/// Flags of `karpenter explain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to explain: pod, node, nodeclaim or nodepool.
    #[arg(value_enum)]
    pub kind: Kind,
    /// Its name: NAMESPACE/NAME for a pod (NAME alone means namespace default).
    pub name: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Region of the embedded catalogue whose instance types and prices stand in for the
    /// cloud's (default: the nodes' topology.kubernetes.io/region label, else us-east-1).
    #[arg(long)]
    pub region: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// The controller's feature gates, e.g. `NodeOverlay=true` to apply the cluster's
    /// NodeOverlays (as `simulate --feature-gates`).
    #[arg(long, default_value = "", value_parser = super::controller::feature_gates)]
    pub feature_gates: FeatureGates,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (_, mut manifests) = live::read_manifests(&args.cluster, false)?;
    super::simulate::drop_overlays_unless_gated(
        &mut manifests,
        args.feature_gates,
        args.output == Format::Table,
    );
    let provider = provider_for(&manifests, args.region.as_deref())?;
    let input = ExplainInput {
        manifests: &manifests,
        provider: &provider,
        options: SchedulerOptions::default(),
        // The binary is the one place allowed to read the wall clock.
        now: Timestamp::now(),
    };
    let answered = match args.kind {
        Kind::Pod => explain::explain_pod(&input, &args.name)
            .map(|a| output::render(args.output, &a, render_pod)),
        Kind::Node => explain::explain_node(&input, &args.name)
            .map(|a| output::render(args.output, &a, render_node)),
        Kind::Nodeclaim => explain::explain_nodeclaim(&input, &args.name)
            .map(|a| output::render(args.output, &a, render_node)),
        Kind::Nodepool => explain::explain_nodepool(&input, &args.name)
            .map(|a| output::render(args.output, &a, render_nodepool)),
    };
    match answered {
        Ok(printed) => printed.map(|()| ExitCode::SUCCESS),
        Err(ExplainError::NotFound { kind, name }) => {
            output::error(format!("{kind} {name} not found in the cluster"));
            Ok(ExitCode::FAILURE)
        }
        Err(err) => Err(err.into()),
    }
}

/// The sim provider on the embedded catalogue of the cluster's region.
pub fn provider_for(
    manifests: &Manifests,
    region: Option<&str>,
) -> anyhow::Result<SimCloudProvider> {
    let region = region
        .map(str::to_string)
        .or_else(|| cluster_region(manifests))
        .unwrap_or_else(|| karpenter_catalog::DEFAULT_REGION.to_string());
    Ok(SimCloudProvider::new(&region, Arc::new(SystemClock))?)
}

/// The region the cluster's nodes say they are in.
fn cluster_region(manifests: &Manifests) -> Option<String> {
    manifests
        .nodes
        .iter()
        .filter_map(|n| {
            n.metadata
                .labels
                .as_ref()?
                .get(karpenter_api::well_known::REGION_LABEL)
        })
        .next()
        .cloned()
}

fn facts_line(facts: &explain::NodeFacts) -> String {
    let parts: Vec<String> = [
        facts.node_claim.as_ref().map(|c| format!("nodeclaim {c}")),
        facts.node_pool.as_ref().map(|p| format!("nodepool {p}")),
        facts.instance_type.clone(),
        facts.zone.clone(),
        facts.capacity_type.clone(),
        facts.price.map(|p| format!("${p:.4}/h")),
    ]
    .into_iter()
    .flatten()
    .collect();
    parts.join(", ")
}

fn render_pod(answer: &PodExplanation) -> String {
    let mut out = String::new();
    let facts = facts_line(&answer.facts);
    match answer.status {
        PodStatus::Running => out.push_str(&format!(
            "pod {} runs on node {} ({facts})\n",
            answer.pod,
            answer.node.as_deref().unwrap_or("?")
        )),
        PodStatus::WouldSchedule if answer.new_node_claim => out.push_str(&format!(
            "pod {} is pending; the provisioner would launch a new NodeClaim for it ({facts})\n",
            answer.pod
        )),
        PodStatus::WouldSchedule => out.push_str(&format!(
            "pod {} is pending; it fits on existing node {} ({facts})\n",
            answer.pod,
            answer.node.as_deref().unwrap_or("?")
        )),
        PodStatus::CannotSchedule => {
            out.push_str(&format!("pod {} cannot be scheduled:\n", answer.pod));
            for reason in &answer.reasons {
                out.push_str(&format!("  - {reason}\n"));
            }
        }
    }
    out
}

fn reasons_table(header: &str, reasons: &[Reason]) -> String {
    let mut table = output::table([header, "OBJECT", "UNTIL"]);
    for reason in reasons {
        table.add_row([
            reason.reason.as_str(),
            reason.object.as_deref().unwrap_or(""),
            reason.until.as_deref().unwrap_or(""),
        ]);
    }
    format!("{table}\n")
}

fn render_node(answer: &NodeExplanation) -> String {
    let mut out = format!(
        "node {} ({}), {} pod(s)\n",
        answer.node,
        facts_line(&answer.facts),
        answer.pods
    );
    match &answer.decision {
        Some(decision) => {
            out.push_str(&format!(
                "disruption: the next pass would {} it now (reason {}, method {}, saving ${:.4}/h)\n",
                decision.decision, decision.reason, decision.method, decision.savings_per_hour
            ));
            if !decision.replacement_options.is_empty() {
                out.push_str(&format!(
                    "replacement options: {}\n",
                    decision.replacement_options.join(", ")
                ));
            }
        }
        None if answer.candidate => {
            out.push_str("disruption: a candidate, but not disrupted now:\n");
        }
        None => out.push_str("disruption: not a candidate now:\n"),
    }
    if !answer.reasons.is_empty() {
        out.push_str(&reasons_table("REASON", &answer.reasons));
    }
    out.push_str(&match &answer.drifted {
        Some(reason) => format!("drift: drifted ({reason})\n"),
        None => "drift: not drifted\n".to_string(),
    });
    if let Some(at) = &answer.consolidatable_at {
        out.push_str(&format!("consolidatable from: {at}\n"));
    }
    out.push_str(&format!(
        "expires: {}\n",
        answer.expires_at.as_deref().unwrap_or("never")
    ));
    if !answer.budgets.is_empty() {
        out.push_str(&reasons_table("BUDGET", &answer.budgets));
    }
    out
}

fn render_nodepool(answer: &NodePoolExplanation) -> String {
    let mut out = format!(
        "nodepool {}: {} node(s), {} drifted, ${:.4}/h (${:.2}/month at 730 h)\n",
        answer.node_pool,
        answer.nodes.len(),
        answer.drifted,
        answer.hourly_cost,
        answer.monthly_cost
    );
    if !answer.nodes.is_empty() {
        let mut table = output::table([
            "NODE",
            "INSTANCE TYPE",
            "ZONE",
            "CAPACITY",
            "$/HOUR",
            "PODS",
            "DRIFT",
        ]);
        for node in &answer.nodes {
            table.add_row([
                node.name.clone(),
                node.facts.instance_type.clone().unwrap_or_default(),
                node.facts.zone.clone().unwrap_or_default(),
                node.facts.capacity_type.clone().unwrap_or_default(),
                node.facts
                    .price
                    .map_or_else(|| "?".into(), |p| format!("{p:.4}")),
                node.pods.to_string(),
                node.drifted.clone().unwrap_or_default(),
            ]);
        }
        out.push_str(&format!("{table}\n"));
    }
    if answer.limits.is_empty() {
        out.push_str("limits: none\n");
    } else {
        let mut table = output::table(["LIMIT", "USED", "OF"]);
        for limit in &answer.limits {
            table.add_row([&limit.resource, &limit.used, &limit.limit]);
        }
        out.push_str(&format!("{table}\n"));
    }
    let mut table = output::table(["BUDGET", "ALLOWED NOW", "CHANGES AT"]);
    for budget in &answer.budgets {
        table.add_row([
            budget.explanation.clone(),
            budget
                .allowed
                .map_or_else(|| "unlimited".into(), |n| n.to_string()),
            budget.changes_at.clone().unwrap_or_default(),
        ]);
    }
    out.push_str(&format!("{table}\n"));
    out
}
