//! The `simulate` plan: schedule the pending pods with the core scheduler, then run every new
//! NodeClaim through the sim provider's launch choice to say what would be bought, where, and for
//! how much. The JSON shape is documented in `docs/simulate.md` and is stable.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Taint;
use karpenter_api::validation;
use karpenter_api::well_known as wk;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_catalog::{NodeClassShape, ProviderSettings};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::pod;
use karpenter_core::provisioning::{self as pipeline, Snapshot, nodeclaim};
use karpenter_core::requirements::Requirements;
use karpenter_core::resources::ResourceList;
use karpenter_core::scheduling::{CostLowerBound, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};

use super::manifests::{IgnoredDocument, Manifests};
use super::pending::PendingPod;
use karpenter_sim::SimCloudProvider;

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(
        "no NodePool in the input: add a karpenter.sh/v1 NodePool (see examples/inflate/nodepool.yaml)"
    )]
    NoNodePool,
    #[error("invalid NodePool {name}: {message}")]
    InvalidNodePool { name: String, message: String },
    /// A field of an EC2NodeClass that cannot shape instance types (named in the message).
    #[error("invalid {0}")]
    InvalidNodeClass(#[from] karpenter_catalog::NodeClassError),
    #[error("NodePool {name}: {message}")]
    InstanceTypes { name: String, message: String },
    #[error("invalid Node {name}: {message}")]
    InvalidNode { name: String, message: String },
    #[error("invalid NodeClaim {name}: {message}")]
    InvalidNodeClaim { name: String, message: String },
    #[error(
        "pod {pod} is bound to node {node}, which is not in the input: add the Node or remove spec.nodeName"
    )]
    UnknownNode { pod: String, node: String },
}

/// The plan, exactly as `simulate -o json` prints it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub node_claims: Vec<PlannedNodeClaim>,
    pub existing_nodes: Vec<ExistingNodePods>,
    pub unschedulable: Vec<UnschedulablePod>,
    pub summary: Summary,
    /// Documents of the input `simulate` does not use (e.g. a misspelt `kind: Deploymnet`).
    #[serde(default)]
    pub ignored: Vec<IgnoredDocument>,
}

/// A NodeClaim the provisioner would create, and what the sim provider would launch for it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedNodeClaim {
    pub name: String,
    pub node_pool: String,
    /// What the provider would launch (cheapest available offering of the options).
    pub instance_type: String,
    /// Every type the NodeClaim allows, cheapest first.
    pub instance_type_options: Vec<String>,
    pub zone: String,
    pub capacity_type: String,
    /// USD per hour; spot prices are modelled (see docs/catalog.md).
    pub price: f64,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// `namespace/name` of the pods placed on it.
    pub pods: Vec<String>,
    /// Pods' requests plus daemonset overhead.
    pub requests: ResourceList,
    /// Allocatable of the launched instance type.
    pub allocatable: ResourceList,
}

/// Pending pods placed on a node that already exists.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExistingNodePods {
    pub name: String,
    pub pods: Vec<String>,
}

/// A pod that cannot be placed, and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulablePod {
    pub pod: String,
    pub reason: String,
}

/// Totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Pending pods in the input.
    pub pods: usize,
    /// Of those, placed on new NodeClaims or existing nodes.
    pub scheduled: usize,
    pub new_node_claims: usize,
    /// Sum of the new NodeClaims' prices, USD per hour.
    pub hourly_cost: f64,
    /// The fractional lower bound on what the new NodeClaims of dynamic NodePools can cost for
    /// the pods they hold, USD per hour (docs/scheduling.md): `hourlyCost / costLowerBound` is
    /// how far the plan is from the cheapest conceivable packing.
    #[serde(default)]
    pub cost_lower_bound: f64,
    /// Per NodePool with new NodeClaims: their cost and its bound.
    #[serde(default)]
    pub node_pools: BTreeMap<String, NodePoolCost>,
}

/// One NodePool's share of [`Summary`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolCost {
    pub hourly_cost: f64,
    pub cost_lower_bound: f64,
}

/// A plan plus notes for people (printed on stderr, not part of the JSON).
#[derive(Clone, Debug, Default)]
pub struct PlanOutcome {
    pub plan: Plan,
    pub warnings: Vec<String>,
    /// The NodeClaim objects the provisioner would create, one per `plan.node_claims` entry (same
    /// order, named as there): built by the same code as the controller's.
    pub node_claims: Vec<NodeClaim>,
}

/// Rejects invalid NodePools with the same checks as `validate` and the controller.
fn check_node_pool(node_pool: &NodePool) -> Result<(), SimulateError> {
    let mut errors: Vec<String> = validation::validate_nodepool(node_pool)
        .iter()
        .map(ToString::to_string)
        .collect();
    // The launch path parses requirements with the core's algebra: anything it rejects must be
    // reported here, naming the field, rather than surface later as an odd launch failure.
    if errors.is_empty() {
        for (i, r) in node_pool.spec.template.spec.requirements.iter().enumerate() {
            if let Err(e) =
                Requirements::from_node_selector_with_min_values(std::slice::from_ref(r))
            {
                errors.push(format!("spec.template.spec.requirements[{i}]: {e}"));
            }
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(SimulateError::InvalidNodePool {
        name: node_pool.metadata.name.clone().unwrap_or_default(),
        message: errors.join("; "),
    })
}

/// Each pool's types with the input's NodeOverlays applied, as the controller applies the
/// cluster's ([`karpenter_core::node_overlay`]): prices and capacities everywhere downstream
/// (the plan, the cost lower bound, `explain`, `--disruption`) are the overlaid ones.
pub(crate) fn apply_overlays(
    manifests: &Manifests,
    pool_types: BTreeMap<String, Vec<Arc<InstanceType>>>,
) -> BTreeMap<String, Vec<Arc<InstanceType>>> {
    if manifests.node_overlays.is_empty() {
        return pool_types;
    }
    let evaluation = evaluate_overlays(manifests, &pool_types);
    pool_types
        .into_iter()
        .map(|(name, types)| {
            let types = evaluation.apply(&name, &types);
            (name, types)
        })
        .collect()
}

/// The launch choice among a pool's overlaid types: the cheapest available offering at the
/// overlaid price (a savings plan's discount is what the cluster pays), as upstream's aws provider
/// launches a NodeClaim whose prices an overlay changed in the order of those prices.
fn overlaid_launch_choice(
    node_claim: &NodeClaim,
    types: Option<&Vec<Arc<InstanceType>>>,
) -> Result<karpenter_sim::LaunchChoice, karpenter_core::cloud_provider::CloudError> {
    let (requirements, requests) = karpenter_core::cloud_provider::parse_claim(node_claim)?;
    let by_name: BTreeMap<String, Arc<InstanceType>> = types
        .into_iter()
        .flatten()
        .map(|t| (t.name.clone(), Arc::clone(t)))
        .collect();
    // The NodeClaim's overlaid order first, as the providers launch it; the overlaid prices
    // order each type's offerings.
    let launch_order = karpenter_core::node_overlay::launch_order(node_claim);
    karpenter_sim::launch::candidates(
        &by_name,
        &requirements,
        &requests,
        launch_order.as_deref(),
        |_, _| true,
    )
    .first()
    .map(karpenter_sim::launch::Candidate::choice)
    .ok_or_else(|| karpenter_sim::launch::no_offering_error(&requirements))
}

fn evaluate_overlays(
    manifests: &Manifests,
    pool_types: &BTreeMap<String, Vec<Arc<InstanceType>>>,
) -> karpenter_core::node_overlay::Evaluation {
    let offered: Vec<_> = manifests
        .node_pools
        .iter()
        .filter_map(|pool| {
            let types = pool_types.get(pool.metadata.name.as_deref()?)?;
            Some((pool.clone(), types.clone()))
        })
        .collect();
    karpenter_core::node_overlay::evaluate(&manifests.node_overlays, &offered)
}

/// The overlays of the input that are not applied (conflict or runtime validation), with why.
fn overlay_verdicts(
    manifests: &Manifests,
    pool_types: &BTreeMap<String, Vec<Arc<InstanceType>>>,
) -> Vec<(String, karpenter_core::node_overlay::Verdict)> {
    if manifests.node_overlays.is_empty() {
        return Vec::new();
    }
    evaluate_overlays(manifests, pool_types)
        .verdicts
        .into_iter()
        .filter(|(_, verdict)| *verdict != karpenter_core::node_overlay::Verdict::Applied)
        .collect()
}

/// Computes the plan for `manifests` on `provider`'s catalogue with the default policies.
pub fn plan(
    manifests: &Manifests,
    provider: &SimCloudProvider,
) -> Result<PlanOutcome, SimulateError> {
    plan_with(manifests, provider, SchedulerOptions::default())
}

/// Computes the plan with the core pipeline the provisioner runs: the manifests become the same
/// [`ClusterState`](karpenter_core::state::ClusterState), the same snapshot gives the scheduler
/// its input, and the same builder makes the NodeClaims (then run through the sim provider's
/// launch choice to say what would be bought). `options` carries the policies.
pub fn plan_with(
    manifests: &Manifests,
    provider: &SimCloudProvider,
    options: SchedulerOptions,
) -> Result<PlanOutcome, SimulateError> {
    plan_keeping(manifests, provider, options, true, true)
}

/// [`plan_with`] without the cost lower bound (the plan's `costLowerBound` figures are 0): for
/// the disruption loop's re-provisioning of displaced pods, which reads only where they go. The
/// bound is a linear program over every instance type; computed at each eviction it took a
/// sixth of a 40-node consolidation run.
pub(crate) fn plan_placements(
    manifests: &Manifests,
    provider: &SimCloudProvider,
    options: SchedulerOptions,
) -> Result<PlanOutcome, SimulateError> {
    plan_keeping(manifests, provider, options, true, false)
}

/// [`plan_with`] for a caller that wants the plan only (`karpenter simulate`): the NodeClaim
/// objects are built and checked the same way but not kept (`PlanOutcome::node_claims` is
/// empty), so memory does not hold one object per planned node.
pub fn plan_only(
    manifests: &Manifests,
    provider: &SimCloudProvider,
    options: SchedulerOptions,
) -> Result<PlanOutcome, SimulateError> {
    plan_keeping(manifests, provider, options, false, true)
}

fn plan_keeping(
    manifests: &Manifests,
    provider: &SimCloudProvider,
    options: SchedulerOptions,
    keep_node_claims: bool,
    with_bound: bool,
) -> Result<PlanOutcome, SimulateError> {
    if manifests.node_pools.is_empty() {
        return Err(SimulateError::NoNodePool);
    }
    let mut warnings = Vec::new();
    // Each pool's types, shaped by its EC2NodeClass; the launch choice below uses the same ones.
    let mut pool_types: BTreeMap<String, Vec<Arc<InstanceType>>> = BTreeMap::new();
    for node_pool in &manifests.node_pools {
        check_node_pool(node_pool)?;
        let name = node_pool.metadata.name.clone().unwrap_or_default();
        let class = &node_pool.spec.template.spec.node_class_ref;
        let node_class = manifests
            .node_classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(class.name.as_str()))
            .filter(|_| class.kind == "EC2NodeClass");
        if class.kind == "EC2NodeClass" && node_class.is_none() {
            warnings.push(format!(
                "NodePool {name} refers to EC2NodeClass {} which is not in the input; planning as if it were ready",
                class.name
            ));
        }
        if let Some(node_class) = node_class {
            // The same parse the provider does, for an error that names the field.
            NodeClassShape::from_node_class(node_class, ProviderSettings::default())?;
        }
        let types = provider
            .instance_types_for(node_pool, node_class)
            .map_err(|e| SimulateError::InstanceTypes {
                name: name.clone(),
                message: e.to_string(),
            })?;
        pool_types.insert(name.clone(), types);
    }
    for (name, verdict) in overlay_verdicts(manifests, &pool_types) {
        warnings.push(format!("NodeOverlay {name} is not applied: {verdict}"));
    }
    let pool_types = apply_overlays(manifests, pool_types);
    let by_node = manifests.pods_by_node();
    for (node, pods) in &by_node {
        if !manifests
            .nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(*node))
        {
            return Err(SimulateError::UnknownNode {
                pod: pod::key(&pods[0]),
                node: node.to_string(),
            });
        }
    }

    let state = manifests.cluster_state();
    let mut snapshot = Snapshot::new(&state, options, Timestamp::UNIX_EPOCH);
    for pool in pipeline::dynamic_pools(&state) {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let types = pool_types.get(name).map(Vec::as_slice).unwrap_or_default();
        snapshot = snapshot.offer(pool, types);
    }
    let prepared = snapshot.scheduler_input();
    if let Some(problem) = prepared.problems.first() {
        let message = format!("{}: {}", problem.field, problem.source);
        let object = problem.object.as_str();
        return Err(if let Some(name) = object.strip_prefix("nodepool ") {
            SimulateError::InvalidNodePool {
                name: name.into(),
                message,
            }
        } else if let Some(name) = object.strip_prefix("nodeclaim ") {
            SimulateError::InvalidNodeClaim {
                name: name.into(),
                message,
            }
        } else {
            SimulateError::InvalidNode {
                name: object.strip_prefix("node ").unwrap_or(object).into(),
                message,
            }
        });
    }
    let pods = &manifests.pending_pods;
    let bound_input = prepared.input.clone();
    let mut results = pipeline::solve(prepared.input, pods);
    let bound = if with_bound {
        Scheduler::new(bound_input).cost_lower_bound(pods, &results)
    } else {
        CostLowerBound::default()
    };

    let mut plan = Plan::default();
    let mut counters: BTreeMap<String, usize> = BTreeMap::new();
    let mut node_claims = Vec::new();
    // One claim at a time, each decision dropped once planned: at 200,000 pods the 17,000
    // decisions, their NodeClaim objects and their plan entries were otherwise all alive at once
    // (memory per pending pod 1,011 → 479 bytes, docs/benchmarks.md).
    let decided = std::mem::take(&mut results.new_node_claims)
        .into_iter()
        .filter_map(|claim| {
            let node_pool = state.nodepool(&claim.node_pool)?;
            let pod_names: Vec<String> = claim
                .pods
                .iter()
                .filter_map(|i| pods.get(*i))
                .map(PendingPod::key)
                .collect();
            Some((nodeclaim::build(&claim, node_pool), pod_names))
        });
    // Static NodePools hold exactly `replicas` NodeClaims, whatever the pods.
    let fixed = pipeline::static_nodeclaims(&state)
        .into_iter()
        .map(|c| (c, Vec::new()));
    for (mut node_claim, pod_names) in decided.chain(fixed) {
        let node_pool = node_claim.nodepool_name().unwrap_or_default().to_string();
        let counter = counters.entry(node_pool.clone()).or_default();
        *counter += 1;
        let name = format!("{node_pool}-{:05}", *counter);
        node_claim.metadata.name = Some(name.clone());
        node_claim.metadata.generate_name = None;
        let choice = if manifests.node_overlays.is_empty() {
            provider.launch_choice(&node_claim)
        } else {
            overlaid_launch_choice(&node_claim, pool_types.get(&node_pool))
        };
        match choice {
            Ok(choice) => {
                // The labels the node will carry: the launched type's, then zone and capacity
                // type, then the NodeClaim's own.
                let launched = pool_types
                    .get(&node_pool)
                    .into_iter()
                    .flatten()
                    .find(|t| t.name == choice.instance_type);
                let mut labels = launched.map(|t| t.labels.clone()).unwrap_or_default();
                labels.insert(wk::ZONE_LABEL.to_string(), choice.zone.clone());
                labels.insert(
                    wk::CAPACITY_TYPE_LABEL.to_string(),
                    choice.capacity_type.clone(),
                );
                labels.extend(node_claim.metadata.labels.clone().unwrap_or_default());
                let allocatable = launched.map(|t| t.allocatable()).unwrap_or_default();
                let requests = node_claim
                    .spec
                    .resources
                    .as_ref()
                    .and_then(|r| ResourceList::from_k8s(&r.requests).ok())
                    .unwrap_or_default();
                plan.node_claims.push(PlannedNodeClaim {
                    name,
                    node_pool,
                    instance_type: choice.instance_type,
                    instance_type_options: node_claim
                        .spec
                        .requirements
                        .iter()
                        .find(|r| r.key == wk::INSTANCE_TYPE_LABEL)
                        .map(|r| r.values.to_vec())
                        .unwrap_or_default(),
                    zone: choice.zone,
                    capacity_type: choice.capacity_type,
                    price: choice.price,
                    labels,
                    taints: node_claim.spec.taints.clone(),
                    pods: pod_names,
                    requests,
                    allocatable,
                });
                if keep_node_claims {
                    node_claims.push(node_claim);
                }
            }
            Err(err) => {
                for pod in pod_names {
                    plan.unschedulable.push(UnschedulablePod {
                        pod,
                        reason: format!("launch would fail: {err}"),
                    });
                }
            }
        }
    }
    for placement in &results.existing_nodes {
        plan.existing_nodes.push(ExistingNodePods {
            name: placement.node.clone(),
            pods: placement
                .pods
                .iter()
                .filter_map(|i| pods.get(*i))
                .map(PendingPod::key)
                .collect(),
        });
    }
    for pod in &results.unschedulable {
        // By index: replicas share one `Pod`, whose name is the workload's.
        let name = pods.get(pod.pod).map_or_else(
            || format!("{}/{}", pod.namespace, pod.name),
            PendingPod::key,
        );
        plan.unschedulable.push(UnschedulablePod {
            pod: name,
            reason: pod.explanation.clone(),
        });
    }
    plan.ignored = manifests.ignored.clone();
    let placed_new: usize = plan.node_claims.iter().map(|c| c.pods.len()).sum();
    let placed_existing: usize = plan.existing_nodes.iter().map(|n| n.pods.len()).sum();
    let mut node_pools: BTreeMap<String, NodePoolCost> = BTreeMap::new();
    for claim in &plan.node_claims {
        node_pools
            .entry(claim.node_pool.clone())
            .or_default()
            .hourly_cost += claim.price;
    }
    for (name, cost) in &bound.node_pools {
        node_pools.entry(name.clone()).or_default().cost_lower_bound = *cost;
    }
    for entry in node_pools.values_mut() {
        entry.hourly_cost = round6(entry.hourly_cost);
        entry.cost_lower_bound = round6(entry.cost_lower_bound);
    }
    plan.summary = Summary {
        pods: pods.len(),
        scheduled: placed_new + placed_existing,
        new_node_claims: plan.node_claims.len(),
        hourly_cost: round6(
            plan.node_claims
                .iter()
                .fold(0.0, |total, c| total + c.price),
        ),
        cost_lower_bound: round6(bound.total),
        node_pools,
    };
    Ok(PlanOutcome {
        plan,
        warnings,
        node_claims,
    })
}

fn round6(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}
