//! The provisioner: a singleton loop. Each closed batch window runs one pass (upstream
//! `Provisioner.Schedule` + `CreateNodeClaims`): snapshot the state, collect provisionable pods,
//! solve, publish events, create NodeClaims and nominate their pods.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use karpenter_api::{NodeClaim, NodePool};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use super::batcher::Batcher;
use super::nodeclaim;
use super::reschedulable;
use super::solver::{NodeInput, PoolInput, SolveInput, SolveOutput};
use crate::context::Context;
use crate::events::{
    EventRecord, EventType, REASON_FAILED_SCHEDULING, REASON_NOMINATED, kind_name,
};
use crate::metrics::{ControllerLabels, NodeClaimCreatedLabels};
use crate::nodepool;
use crate::state::ClusterState;
use crate::state::pod::pod_key;
use crate::timeouts;

/// How often still-provisionable pods re-trigger the batcher (upstream requeues every 10 s).
pub const RETRIGGER_PERIOD: Duration = Duration::from_secs(10);

/// A Node still unregistered this long after joining is not counted as capacity (registration
/// takes seconds; see [`crate::state::StateNode::stuck_unregistered`]).
pub const STUCK_REGISTRATION_GRACE: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProvisionOutcome {
    /// Pods considered.
    pub pods: usize,
    /// Names of the NodeClaims created.
    pub created: Vec<String>,
    /// Pods nominated to existing nodes or in-flight NodeClaims.
    pub nominated_existing: usize,
    pub unschedulable: usize,
    /// Set when the pass did nothing because the state is not synced yet.
    pub waiting_for_sync: bool,
}

/// Upstream orders pools by weight (descending), ties by name descending.
fn weight_order(a: &NodePool, b: &NodePool) -> std::cmp::Ordering {
    b.spec
        .weight
        .unwrap_or(0)
        .cmp(&a.spec.weight.unwrap_or(0))
        .then_with(|| b.name_any().cmp(&a.name_any()))
}

/// Snapshot of what the pass needs, taken under one read lock (nodes before pods, as upstream,
/// so capacity in use is over- rather than under-estimated).
fn snapshot(ctx: &Context) -> Option<(Vec<NodePool>, SolveInput)> {
    let now = ctx.now();
    let state = ctx.state.read();
    if !state.synced() {
        return None;
    }
    let nodes: Vec<NodeInput> = state
        .state_nodes()
        .into_iter()
        .filter(|n| !n.marked_for_deletion())
        .filter(|n| {
            let stuck = n.stuck_unregistered(now, STUCK_REGISTRATION_GRACE);
            if stuck {
                tracing::warn!(node = %n.name(), "node is not registered yet; not counting it as capacity");
            }
            !stuck
        })
        .map(|n| {
            let mut pods: Vec<Pod> = n.pods.iter().map(|p| (*p).clone()).collect();
            if let Some(claim) = n.nodeclaim {
                // Pods nominated to an in-flight NodeClaim already use its capacity.
                pods.extend(
                    state
                        .nominated_pods(&claim.name_any(), now)
                        .into_iter()
                        .cloned(),
                );
            }
            NodeInput {
                node: n.node.cloned(),
                nodeclaim: n.nodeclaim.cloned(),
                pods,
            }
        })
        .collect();
    let mut pools: Vec<NodePool> = Vec::new();
    for pool in state.nodepools() {
        match nodepool::usable(pool, &state) {
            Ok(()) => pools.push(pool.clone()),
            Err(reason) => {
                tracing::debug!(nodepool = %pool.name_any(), %reason, "ignoring nodepool")
            }
        }
    }
    pools.sort_by(weight_order);
    let input = SolveInput {
        nodepools: Vec::new(),
        nodes,
        daemonsets: state.daemonsets().cloned().collect(),
        pvcs: state.pvcs.values().cloned().collect(),
        pvs: state.pvs.values().cloned().collect(),
        storage_classes: state.storage_classes.values().cloned().collect(),
        pods: pods_to_place(&state, now).into_iter().cloned().collect(),
        preference_policy: ctx.settings.preference_policy.clone(),
        min_values_policy: ctx.settings.min_values_policy.clone(),
    };
    Some((pools, input))
}

/// The pods a pass places: provisionable pods, then the pods of nodes marked for deletion that
/// will need capacity elsewhere (upstream appends them to the pass), unless an earlier pass
/// already planned for them (a live nomination).
fn pods_to_place(state: &ClusterState, now: jiff::Timestamp) -> Vec<&Pod> {
    let pdbs: Vec<_> = state.pdbs().collect();
    let reschedulable = state
        .state_nodes()
        .into_iter()
        .filter(|n| n.marked_for_deletion())
        .flat_map(|n| n.pods)
        .filter(|p| reschedulable::is_reschedulable(p, &pdbs))
        .filter(|p| state.nomination(&pod_key(p), now).is_none());
    let mut pods = state.provisionable_pods(now);
    pods.extend(reschedulable);
    pods
}

/// One provisioning pass. Writes (NodeClaims, events) happen only when this replica leads.
pub async fn provision(ctx: &Context) -> crate::Result<ProvisionOutcome> {
    let Some((pools, mut input)) = snapshot(ctx) else {
        tracing::debug!(unsynced = ?ctx.state.read().unsynced_kinds(), "waiting on cluster sync");
        return Ok(ProvisionOutcome {
            waiting_for_sync: true,
            ..ProvisionOutcome::default()
        });
    };
    if input.pods.is_empty() {
        return Ok(ProvisionOutcome::default());
    }
    let pod_names: Vec<String> = input.pods.iter().map(pod_key).collect();
    tracing::info!(
        pods = %nodeclaim::summarize(&pod_names, 5),
        duration = ?Duration::ZERO,
        "found provisionable pod(s)"
    );

    for pool in &pools {
        let node_class = pool_node_class(&ctx.state.read(), pool);
        match timeouts::cloud(ctx.cloud.instance_types(pool, node_class.as_ref())).await {
            Ok(types) if types.is_empty() => {
                tracing::warn!(nodepool = %pool.name_any(), "skipping, no resolved instance types found");
            }
            Ok(types) => {
                let usage = nodepool::usage(&ctx.state.read(), &pool.name_any());
                input.nodepools.push(PoolInput {
                    nodepool: pool.clone(),
                    instance_types: types.iter().map(|t| (**t).clone()).collect(),
                    usage,
                });
            }
            Err(err) => {
                tracing::error!(nodepool = %pool.name_any(), error = %err, "skipping, unable to resolve instance types")
            }
        }
    }
    let pools_by_name: BTreeMap<String, NodePool> =
        pools.into_iter().map(|p| (p.name_any(), p)).collect();
    let pods = input.pods.clone();
    let started = std::time::Instant::now();
    // Solving is CPU-bound (up to seconds on big clusters): keep it off the async workers.
    let solver = ctx.solver.clone();
    let output = match tokio::task::spawn_blocking(move || solver.solve(input)).await {
        Ok(output) => output,
        Err(err) => {
            // A panicking solver is a bug; the pods stay pending and re-trigger the next pass.
            tracing::error!(error = %err, "scheduling simulation failed");
            return Ok(ProvisionOutcome {
                pods: pods.len(),
                ..ProvisionOutcome::default()
            });
        }
    };
    let elapsed = started.elapsed().as_secs_f64();
    ctx.metrics.provisioner_scheduling_duration.observe(elapsed);
    let controller = ControllerLabels {
        controller: "provisioner".into(),
    };
    ctx.metrics
        .scheduler_scheduling_duration
        .get_or_create(&controller)
        .observe(elapsed);
    ctx.metrics
        .scheduler_unschedulable_pods
        .get_or_create(&controller)
        .set(i64::try_from(output.unschedulable.len()).unwrap_or(i64::MAX));

    let mut outcome = ProvisionOutcome {
        pods: pods.len(),
        unschedulable: output.unschedulable.len(),
        ..Default::default()
    };
    if !ctx.is_leader() {
        return Ok(outcome);
    }
    record_unschedulable(ctx, &pods, &output).await;
    outcome.nominated_existing = nominate_existing(ctx, &pods, &output).await;
    if !output.new_nodeclaims.is_empty() {
        tracing::info!(
            nodeclaims = output.new_nodeclaims.len(),
            pods = output
                .new_nodeclaims
                .iter()
                .map(|c| c.pods.len())
                .sum::<usize>(),
            "computed new nodeclaim(s) to fit pod(s)"
        );
    }
    outcome.created = create_nodeclaims(ctx, &pods, &output, &pools_by_name).await;
    Ok(outcome)
}

async fn record_unschedulable(ctx: &Context, pods: &[Pod], output: &SolveOutput) {
    for failure in &output.unschedulable {
        let Some(pod) = pods.get(failure.pod) else {
            continue;
        };
        tracing::error!(pod = %pod_key(pod), error = %failure.explanation, "could not schedule pod");
        let message = format!("Failed to schedule pod, {}", failure.explanation);
        ctx.events
            .publish(EventRecord::new(
                pod,
                EventType::Warning,
                REASON_FAILED_SCHEDULING,
                message,
            ))
            .await;
    }
}

async fn nominate_existing(ctx: &Context, pods: &[Pod], output: &SolveOutput) -> usize {
    let until = window_end(ctx);
    let mut count = 0;
    for placement in &output.existing {
        for &i in &placement.pods {
            let Some(pod) = pods.get(i) else { continue };
            let claim = ctx
                .state
                .read()
                .nodeclaim(&placement.node)
                .map(|c| c.name_any());
            let target = match &claim {
                Some(claim) => format!("nodeclaim/{claim}"),
                None => format!("node/{}", placement.node),
            };
            ctx.state.write().nominate(
                &pod_key(pod),
                claim.as_deref().unwrap_or(&placement.node),
                until,
            );
            let message = format!("Pod should schedule on: {target}");
            ctx.events
                .publish(EventRecord::new(
                    pod,
                    EventType::Normal,
                    REASON_NOMINATED,
                    message,
                ))
                .await;
            count += 1;
        }
    }
    count
}

fn window_end(ctx: &Context) -> jiff::Timestamp {
    let window = jiff::SignedDuration::try_from(ctx.settings.nomination_window())
        .unwrap_or(jiff::SignedDuration::from_secs(20));
    ctx.now()
        .saturating_add(window)
        .unwrap_or_else(|_| ctx.now())
}

async fn create_nodeclaims(
    ctx: &Context,
    pods: &[Pod],
    output: &SolveOutput,
    pools: &BTreeMap<String, NodePool>,
) -> Vec<String> {
    // Limits are re-checked against current usage at create time (upstream): a pool already at
    // or over its limit gets nothing more, even if the simulation (pessimistic) allowed it.
    let mut accepted = Vec::new();
    for plan in &output.new_nodeclaims {
        let Some(pool) = pools.get(&plan.nodepool) else {
            tracing::error!(nodepool = %plan.nodepool, "scheduler planned a nodeclaim for an unknown nodepool");
            continue;
        };
        let limits = nodepool::limits(pool).unwrap_or_default();
        let usage = nodepool::usage(&ctx.state.read(), &plan.nodepool);
        if let Some(exceeded) = nodepool::exceeded_limit(&limits, &usage) {
            tracing::warn!(nodepool = %plan.nodepool, reason = %exceeded, "not creating nodeclaim, nodepool limit exceeded");
            for &i in &plan.pods {
                if let Some(pod) = pods.get(i) {
                    let message = format!(
                        "Failed to schedule pod, nodepool {}: {exceeded}",
                        plan.nodepool
                    );
                    ctx.events
                        .publish(EventRecord::new(
                            pod,
                            EventType::Warning,
                            REASON_FAILED_SCHEDULING,
                            message,
                        ))
                        .await;
                }
            }
            continue;
        }
        accepted.push((plan, nodeclaim::build(plan, pool)));
    }

    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let params = PostParams::default();
    let results = futures::future::join_all(
        accepted
            .iter()
            .map(|(_, claim)| timeouts::api(api.create(&params, claim))),
    )
    .await;

    let until = window_end(ctx);
    let mut created = Vec::new();
    for ((plan, _), result) in accepted.into_iter().zip(results) {
        let claim = match result {
            Ok(claim) => claim,
            Err(err) => {
                tracing::error!(nodepool = %plan.nodepool, error = %err, "failed to create nodeclaim");
                continue;
            }
        };
        let name = claim.name_any();
        tracing::info!(
            nodepool = %plan.nodepool,
            nodeclaim = %name,
            requests = ?plan.requests,
            instance_types = %nodeclaim::summarize(&plan.instance_types, 5),
            "created nodeclaim"
        );
        ctx.metrics
            .nodeclaims_created
            .get_or_create(&NodeClaimCreatedLabels {
                reason: "provisioned".into(),
                nodepool: plan.nodepool.clone(),
                min_values_relaxed: plan.min_values_relaxed.to_string(),
            })
            .inc();
        {
            // Visible to the next pass at once, even before the watch delivers it.
            let mut state = ctx.state.write();
            state.remember(claim.clone());
            for &i in &plan.pods {
                if let Some(pod) = pods.get(i) {
                    state.nominate(&pod_key(pod), &name, until);
                }
            }
        }
        for &i in &plan.pods {
            if let Some(pod) = pods.get(i) {
                let message = format!("Pod should schedule on: {}", kind_name(&claim));
                ctx.events
                    .publish(EventRecord::new(
                        pod,
                        EventType::Normal,
                        REASON_NOMINATED,
                        message,
                    ))
                    .await;
            }
        }
        created.push(name);
    }
    ctx.nodepools_changed.notify_one();
    created
}

/// The provisioner loop: one pass per closed batch window, until `shutdown` turns true. A
/// helper task re-triggers still-unplaced pods (provisionable, or reschedulable on a deleting
/// node) every [`RETRIGGER_PERIOD`].
pub async fn run(ctx: Arc<Context>, mut batcher: Batcher, mut shutdown: watch::Receiver<bool>) {
    let retrigger = tokio::spawn(retrigger_provisionable(ctx.clone()));
    loop {
        let window = tokio::select! {
            window = batcher.wait() => window,
            _ = shutdown.wait_for(|stop| *stop) => None,
        };
        let Some(window) = window else { break };
        tracing::debug!(triggers = window.triggers.len(), window = ?(window.closed - window.opened), "batch window closed");
        match provision(&ctx).await {
            Ok(outcome) if outcome.waiting_for_sync => {
                // Try again shortly: the pods are still pending and will re-trigger.
            }
            Ok(_) => {}
            Err(err) => tracing::error!(error = %err, "provisioning failed"),
        }
    }
    retrigger.abort();
}

async fn retrigger_provisionable(ctx: Arc<Context>) {
    let mut ticker = tokio::time::interval(RETRIGGER_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let uids: Vec<String> = {
            let mut state = ctx.state.write();
            let now = ctx.now();
            state.expire_nominations(now);
            pods_to_place(&state, now)
                .iter()
                .filter_map(|p| p.uid())
                .collect()
        };
        for uid in uids {
            ctx.provisioning_trigger.trigger(uid);
        }
    }
}

/// The EC2NodeClass `pool` references, as the state holds it (cloned: the state's lock is not
/// held across the provider call).
fn pool_node_class(
    state: &crate::state::ClusterState,
    pool: &NodePool,
) -> Option<karpenter_api::v1::EC2NodeClass> {
    let reference = &pool.spec.template.spec.node_class_ref;
    use karpenter_api::v1::EC2NodeClass;
    (reference.kind == <EC2NodeClass as kube::Resource>::kind(&())
        && reference.group == <EC2NodeClass as kube::Resource>::group(&()))
    .then(|| state.nodeclass(&reference.name).cloned())
    .flatten()
}
