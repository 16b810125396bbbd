//! `karpenter bench packing`: plan cost against the fractional lower bound, and planning time,
//! for both packing policies on the generated workloads of
//! `karpenter_core::scheduling::packing_workloads` over the embedded catalogue.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use karpenter_catalog::{Catalog, DEFAULT_REGION};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::scheduling::packing_workloads::{self, Workload};
use karpenter_core::scheduling::{PackingPolicy, Scheduler};
use serde::Serialize;

use crate::output::{self, Format};

#[derive(Debug, clap::Args)]
pub struct PackingArgs {
    /// Repetitions per workload and policy (a fresh scheduler each); the fastest is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// One workload under one policy.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Run {
    hourly_cost: f64,
    cost_lower_bound: f64,
    ratio: f64,
    node_claims: usize,
    unschedulable: usize,
    seconds: f64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    workload: String,
    pods: usize,
    upstream: Run,
    cost_optimal: Run,
}

fn measure(
    types: &[Arc<InstanceType>],
    workload: &Workload,
    policy: PackingPolicy,
    repeat: usize,
) -> Run {
    let pods = workload.pods();
    let input = packing_workloads::scheduler_input(types.to_vec(), policy);
    let mut seconds = f64::INFINITY;
    let mut results = None;
    for _ in 0..repeat.max(1) {
        let scheduler = Scheduler::new(input.clone());
        let started = Instant::now();
        let solved = scheduler.solve(&pods);
        seconds = seconds.min(started.elapsed().as_secs_f64());
        results = Some(solved);
    }
    let results = results.unwrap_or_default();
    let bound = Scheduler::new(input)
        .cost_lower_bound(&pods, &results)
        .total;
    let cost = results.new_node_claims_cost();
    Run {
        hourly_cost: cost,
        cost_lower_bound: bound,
        ratio: if bound > 0.0 { cost / bound } else { 0.0 },
        node_claims: results.new_node_claims.len(),
        unschedulable: results.unschedulable.len(),
        seconds,
    }
}

pub fn run(args: &PackingArgs) -> anyhow::Result<ExitCode> {
    let types: Vec<Arc<InstanceType>> = Catalog::embedded()?
        .instance_types(DEFAULT_REGION)?
        .into_iter()
        .map(Arc::new)
        .collect();
    let rows: Vec<Row> = packing_workloads::standard()
        .iter()
        .map(|w| Row {
            workload: w.name.to_string(),
            pods: w.pods,
            upstream: measure(&types, w, PackingPolicy::Upstream, args.repeat),
            cost_optimal: measure(&types, w, PackingPolicy::CostOptimal, args.repeat),
        })
        .collect();
    output::render(args.output, &rows, |rows| {
        let mut table = output::table([
            "WORKLOAD",
            "PODS",
            "BOUND $/H",
            "UPSTREAM $/H",
            "RATIO",
            "TIME",
            "COSTOPTIMAL $/H",
            "RATIO",
            "TIME",
        ]);
        for r in rows {
            table.add_row(vec![
                r.workload.clone(),
                r.pods.to_string(),
                format!("{:.2}", r.upstream.cost_lower_bound),
                format!("{:.2}", r.upstream.hourly_cost),
                format!("{:.3}", r.upstream.ratio),
                format!("{:.3}s", r.upstream.seconds),
                format!("{:.2}", r.cost_optimal.hourly_cost),
                format!("{:.3}", r.cost_optimal.ratio),
                format!("{:.3}s", r.cost_optimal.seconds),
            ]);
        }
        format!("{table}\n")
    })?;
    let unplaced = rows
        .iter()
        .any(|r| r.upstream.unschedulable > 0 || r.cost_optimal.unschedulable > 0);
    Ok(if unplaced {
        output::say("some pods were left unschedulable");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
