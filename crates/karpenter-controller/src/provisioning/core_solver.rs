//! The production [`Solver`]: `karpenter_core::scheduling` over the pass's snapshot. The input
//! conversions are the core's own adapters (`scheduling::input`), shared with `simulate`.

use std::borrow::Cow;

use karpenter_api::NodeClaim;
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
            (None, Some(claim)) => input::in_flight_node_claim(&offered_capacity(claim), pods),
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

/// A NodeClaim not launched yet has no capacity in its status. Until it has, it offers what it
/// was created for (`spec.resources.requests`: its pods plus daemonsets), so a pass that does not
/// know its nominations (after a restart, or on a new leader) places those pods on it instead of
/// creating a second NodeClaim for them.
fn offered_capacity(claim: &NodeClaim) -> Cow<'_, NodeClaim> {
    let launched = claim
        .status
        .as_ref()
        .is_some_and(|s| !s.capacity.is_empty() || !s.allocatable.is_empty());
    let Some(requests) = claim.spec.resources.as_ref().map(|r| &r.requests) else {
        return Cow::Borrowed(claim);
    };
    if launched || requests.is_empty() {
        return Cow::Borrowed(claim);
    }
    let mut claim = claim.clone();
    let status = claim.status.get_or_insert_default();
    status.capacity = requests.clone();
    status.allocatable = requests.clone();
    Cow::Owned(claim)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provisioning::solver::PoolInput;
    use crate::state::fixtures::{nodeclaim, pending_pod};
    use karpenter_api::NodePool;
    use karpenter_core::instance_type::{InstanceType, Offering};
    use karpenter_core::resources::ResourceList;
    use serde_json::json;

    fn pool(name: &str, limits: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {
                "template": {"spec": {
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
                }},
                "limits": limits
            }
        }))
        .unwrap()
    }

    fn instance_type(name: &str, cpu: &str, price: f64) -> InstanceType {
        InstanceType {
            name: name.into(),
            labels: [("node.kubernetes.io/instance-type".into(), name.into())].into(),
            capacity: ResourceList::parse([("cpu", cpu), ("memory", "32Gi"), ("pods", "110")])
                .unwrap(),
            offerings: vec![Offering {
                zone: "test-1a".into(),
                capacity_type: "on-demand".into(),
                price,
                available: true,
                ..Offering::default()
            }],
            ..InstanceType::default()
        }
    }

    fn pool_input(pool: NodePool) -> PoolInput {
        PoolInput {
            nodepool: pool,
            instance_types: vec![
                instance_type("big.8x", "8", 0.4),
                instance_type("small.2x", "2", 0.1),
                instance_type("medium.4x", "4", 0.2),
            ],
            usage: ResourceList::new(),
        }
    }

    #[test]
    fn plans_cheapest_first_with_the_pools_requirements() {
        let output = CoreScheduler.solve(SolveInput {
            nodepools: vec![pool_input(pool("default", json!({"cpu": "100"})))],
            pods: vec![pending_pod("a", "1500m"), pending_pod("b", "1500m")],
            ..SolveInput::default()
        });
        assert!(output.unschedulable.is_empty(), "{output:?}");
        let [claim] = output.new_nodeclaims.as_slice() else {
            panic!("one NodeClaim for both pods: {output:?}");
        };
        assert_eq!(claim.nodepool, "default");
        assert_eq!(claim.pods, [0, 1]);
        assert_eq!(claim.instance_types, ["medium.4x", "big.8x"]);
        let keys: Vec<&str> = claim.requirements.iter().map(|r| r.key.as_str()).collect();
        assert!(keys.contains(&"karpenter.sh/capacity-type"), "{keys:?}");
        let types = claim
            .requirements
            .iter()
            .find(|r| r.key == "node.kubernetes.io/instance-type")
            .unwrap();
        assert_eq!(types.values, claim.instance_types);
        assert_eq!(claim.requests.get("cpu").millis(), 3000);
    }

    #[test]
    fn a_pool_that_cannot_be_converted_is_named_in_every_explanation() {
        let output = CoreScheduler.solve(SolveInput {
            nodepools: vec![pool_input(pool("broken", json!({"cpu": "lots"})))],
            pods: vec![pending_pod("a", "1")],
            ..SolveInput::default()
        });
        assert!(output.new_nodeclaims.is_empty());
        let [failure] = output.unschedulable.as_slice() else {
            panic!("{output:?}");
        };
        assert!(
            failure.explanation.contains("nodepool broken: spec.limits"),
            "{}",
            failure.explanation
        );
    }

    #[test]
    fn launched_in_flight_nodeclaims_take_pods_before_new_ones() {
        // 4 cpu launched, 1 cpu already nominated to it: a 2-cpu pod fits, a 3.5-cpu pod does not.
        let claim = nodeclaim("default-x", "default", Some("sim://x"), "4");
        let output = CoreScheduler.solve(SolveInput {
            nodepools: vec![pool_input(pool("default", json!({})))],
            nodes: vec![NodeInput {
                node: None,
                nodeclaim: Some(claim),
                pods: vec![pending_pod("nominated", "1")],
            }],
            pods: vec![pending_pod("fits", "2"), pending_pod("too-big", "3500m")],
            ..SolveInput::default()
        });
        assert_eq!(
            output.existing,
            [ExistingPlacement {
                node: "default-x".into(),
                pods: vec![0],
            }]
        );
        assert_eq!(output.new_nodeclaims.len(), 1);
        assert_eq!(output.new_nodeclaims[0].pods, [1]);
    }

    #[test]
    fn unlaunched_nodeclaims_offer_what_they_were_created_for() {
        // Created for 3 cpu / 2Gi / 2 pods, not launched (no status): after a restart its two pods
        // land on it again; a third pod needs new capacity.
        let mut claim = nodeclaim("default-x", "default", None, "4");
        claim.status = None;
        claim.spec.resources = Some(
            serde_json::from_value(json!({"requests": {"cpu": "3", "memory": "2Gi", "pods": "2"}}))
                .unwrap(),
        );
        let output = CoreScheduler.solve(SolveInput {
            nodepools: vec![pool_input(pool("default", json!({})))],
            nodes: vec![NodeInput {
                node: None,
                nodeclaim: Some(claim),
                pods: Vec::new(),
            }],
            pods: vec![
                pending_pod("a", "1500m"),
                pending_pod("b", "1500m"),
                pending_pod("c", "1"),
            ],
            ..SolveInput::default()
        });
        assert_eq!(
            output.existing,
            [ExistingPlacement {
                node: "default-x".into(),
                pods: vec![0, 1],
            }],
            "{output:?}"
        );
        assert_eq!(output.new_nodeclaims.len(), 1);
        assert_eq!(output.new_nodeclaims[0].pods, [2]);
    }

    #[test]
    fn policies_follow_the_settings() {
        assert_eq!(preference_policy("Ignore"), PreferencePolicy::Ignore);
        assert_eq!(preference_policy("Respect"), PreferencePolicy::Respect);
        assert_eq!(min_values_policy("BestEffort"), MinValuesPolicy::BestEffort);
        assert_eq!(min_values_policy("Strict"), MinValuesPolicy::Strict);
        let (input, problems) = scheduler_input(SolveInput {
            preference_policy: "Ignore".into(),
            min_values_policy: "BestEffort".into(),
            ..SolveInput::default()
        });
        assert!(problems.is_empty());
        assert_eq!(input.options.preference_policy, PreferencePolicy::Ignore);
        assert_eq!(input.options.min_values_policy, MinValuesPolicy::BestEffort);
    }
}
