//! The production [`Solver`]: `karpenter_core::scheduling` over the pass's snapshot. The input
//! conversions are the core's own adapters (`scheduling::input`), shared with `simulate`.

use karpenter_core::scheduling::{
    MinValuesPolicy, PreferencePolicy, Scheduler, SchedulerInput, SchedulerOptions,
    SchedulingResults, VolumeInput, input,
};

use super::solver::{
    ExistingPlacement, NodeInput, PlannedNodeClaim, SolveInput, SolveOutput, Solver, Unschedulable,
};

/// Upstream's scheduler, wired in as the provisioner's [`Solver`].
#[derive(Clone, Copy, Debug, Default)]
pub struct CoreScheduler;

impl Solver for CoreScheduler {
    fn solve(&self, mut input: SolveInput) -> SolveOutput {
        let pods = std::mem::take(&mut input.pods);
        let (scheduler_input, problems) = scheduler_input(input);
        for problem in &problems {
            tracing::warn!(%problem, "left out of scheduling");
        }
        let results = Scheduler::new(scheduler_input).solve(&pods);
        solve_output(results, &problems)
    }
}

fn preference_policy(value: &str) -> PreferencePolicy {
    match value {
        "Ignore" => PreferencePolicy::Ignore,
        // Settings are validated at start; anything else is the default.
        _ => PreferencePolicy::Respect,
    }
}

fn min_values_policy(value: &str) -> MinValuesPolicy {
    match value {
        "BestEffort" => MinValuesPolicy::BestEffort,
        _ => MinValuesPolicy::Strict,
    }
}

/// Converts the pass's snapshot. Objects that cannot be converted (a malformed quantity on a
/// NodePool or Node) are left out and described in the returned problems, which end up in the
/// explanation of every pod that could not be placed.
pub fn scheduler_input(input: SolveInput) -> (SchedulerInput, Vec<String>) {
    let mut problems = Vec::new();
    let mut node_pools = Vec::with_capacity(input.nodepools.len());
    for pool in input.nodepools {
        match input::node_pool(&pool.nodepool, pool.instance_types) {
            Ok(mut converted) => {
                // The controller's usage (nodes and in-flight NodeClaims from its state) is
                // fresher than `status.resources`, which the adapter reads.
                converted.usage = pool.usage;
                node_pools.push(converted);
            }
            Err(err) => problems.push(err.to_string()),
        }
    }
    let mut existing_nodes = Vec::with_capacity(input.nodes.len());
    for NodeInput {
        node,
        nodeclaim,
        pods,
    } in &input.nodes
    {
        let converted = match (node, nodeclaim) {
            (Some(node), claim) => input::existing_node(node, claim.as_ref(), pods),
            (None, Some(claim)) => input::in_flight_node_claim(claim, pods),
            (None, None) => continue,
        };
        match converted {
            Ok(node) => existing_nodes.push(node),
            Err(err) => problems.push(err.to_string()),
        }
    }
    let scheduler_input = SchedulerInput {
        node_pools,
        existing_nodes,
        daemonsets: input.daemonsets.iter().map(input::daemonset_pod).collect(),
        volumes: VolumeInput {
            claims: input.pvcs,
            volumes: input.pvs,
            storage_classes: input.storage_classes,
        },
        namespaces: Vec::new(),
        options: SchedulerOptions {
            preference_policy: preference_policy(&input.preference_policy),
            min_values_policy: min_values_policy(&input.min_values_policy),
            ..SchedulerOptions::default()
        },
    };
    (scheduler_input, problems)
}

/// The scheduler's decisions in the provisioner's terms.
pub fn solve_output(results: SchedulingResults, problems: &[String]) -> SolveOutput {
    let new_nodeclaims = results
        .new_node_claims
        .iter()
        .map(|claim| PlannedNodeClaim {
            nodepool: claim.node_pool.clone(),
            requirements: claim.node_claim_requirements(),
            instance_types: claim
                .instance_types
                .iter()
                .map(|o| o.name.to_string())
                .collect(),
            pods: claim.pods.clone(),
            requests: claim.requests.clone(),
            labels: claim.labels.clone(),
            taints: claim.taints.clone(),
            startup_taints: claim.startup_taints.clone(),
            min_values_relaxed: claim.min_values_relaxed,
        })
        .collect();
    let existing = results
        .existing_nodes
        .into_iter()
        .map(|placement| ExistingPlacement {
            node: placement.node,
            pods: placement.pods,
        })
        .collect();
    let unschedulable = results
        .unschedulable
        .into_iter()
        .map(|pod| Unschedulable {
            pod: pod.pod,
            explanation: std::iter::once(pod.explanation)
                .chain(problems.iter().cloned())
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join("; "),
        })
        .collect();
    SolveOutput {
        new_nodeclaims,
        existing,
        unschedulable,
    }
}
