//! The provisioner: a singleton loop. Each closed batch window runs one pass (upstream
//! `Provisioner.Schedule` + `CreateNodeClaims`): snapshot the state, collect provisionable pods,
//! solve, publish events, create NodeClaims and nominate their pods.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::capacity_buffer;
use karpenter_core::instance_type::InstanceType;
use karpenter_core::nodepool::{exceeded_limit, limits, usage};
use karpenter_core::pod::{Pod, key as pod_key};
use karpenter_core::provisioning::{self as pipeline, Snapshot, nodeclaim};
use karpenter_core::scheduling::{SchedulerOptions, SchedulingResults};
use karpenter_core::state::ClusterState;
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use super::batcher::Batcher;
use crate::context::Context;
use crate::events::{
    EventRecord, EventType, REASON_FAILED_SCHEDULING, REASON_NOMINATED, kind_name,
};
use crate::metrics::{ControllerLabels, NodeClaimCreatedLabels};
use crate::nodepool;
use crate::settings::Settings;
use crate::timeouts;
use crate::writes::Leader;

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
    /// Names of the NodeClaims created (static ones included).
    pub created: Vec<String>,
    /// Pods nominated to existing nodes or in-flight NodeClaims.
    pub nominated_existing: usize,
    pub unschedulable: usize,
    /// Set when the pass did nothing because the state is not synced yet.
    pub waiting_for_sync: bool,
}

/// The scheduler options carrying the settings' policies.
pub fn scheduler_options(settings: &Settings) -> SchedulerOptions {
    SchedulerOptions {
        preference_policy: settings.preference_policy,
        min_values_policy: settings.min_values_policy,
        packing_policy: settings.packing_policy,
        ..SchedulerOptions::default()
    }
}

/// The NodePools this pass may add NodeClaims to: dynamic, valid, their NodeClass ready.
pub(crate) fn usable_pools(state: &ClusterState) -> Vec<NodePool> {
    pipeline::dynamic_pools(state)
        .into_iter()
        .filter(|pool| match nodepool::usable(pool, state) {
            Ok(()) => true,
            Err(reason) => {
                tracing::debug!(nodepool = %pool.name_any(), %reason, "ignoring nodepool");
                false
            }
        })
        .cloned()
        .collect()
}

/// The pools whose nodes the disruption loop may consider: the usable dynamic ones and every
/// static one not being deleted (upstream's candidates come from every managed NodePool; a
/// static pool's nodes need its catalogue to be candidates for static drift, and the scheduler
/// is never offered a static pool).
pub(crate) fn disruption_pools(state: &ClusterState) -> Vec<NodePool> {
    let mut pools = usable_pools(state);
    pools.extend(
        state
            .nodepools()
            .filter(|pool| {
                matches!(
                    nodepool::usable(pool, state),
                    Err(nodepool::Unusable::Static)
                )
            })
            .cloned(),
    );
    pools
}

/// The instance types the provider offers each of `pools` (with its NodeClass), with the
/// cluster's NodeOverlays applied when the `NodeOverlay` gate is on; pools the provider answers
/// nothing or an error for are left out (logged). Shared by the provisioner and the disruption
/// loop (consolidation, drift), so both see the same catalogue and the same prices.
pub(crate) async fn resolve_instance_types(
    ctx: &Context,
    pools: Vec<NodePool>,
) -> Vec<(NodePool, Vec<Arc<InstanceType>>)> {
    let offered = resolve_offered(ctx, pools).await;
    if ctx.settings.feature_gates.node_overlay {
        crate::nodeoverlay::apply(ctx, offered)
    } else {
        offered
    }
}

/// [`resolve_instance_types`] as the provider answers, before NodeOverlays.
pub(crate) async fn resolve_offered(
    ctx: &Context,
    pools: Vec<NodePool>,
) -> Vec<(NodePool, Vec<Arc<InstanceType>>)> {
    let mut offered: Vec<(NodePool, Vec<Arc<InstanceType>>)> = Vec::new();
    for pool in pools {
        let node_class = pool_node_class(&ctx.state.read(), &pool);
        match timeouts::cloud(ctx.cloud.instance_types(&pool, node_class.as_ref())).await {
            Ok(types) if types.is_empty() => {
                tracing::warn!(nodepool = %pool.name_any(), "skipping, no resolved instance types found");
            }
            Ok(types) => offered.push((pool, types)),
            Err(err) => {
                tracing::error!(nodepool = %pool.name_any(), error = %err, "skipping, unable to resolve instance types")
            }
        }
    }
    ctx.metrics
        .remember_offered(offered.iter().map(|(pool, types)| {
            (
                pool.metadata.name.as_deref().unwrap_or_default(),
                &types[..],
            )
        }));
    offered
}

/// The pods a pass places (see [`Snapshot::pods_to_place`]), borrowed: callers that only count
/// them or read their uids must not copy every pending pod.
pub(crate) fn pods_to_place(state: &ClusterState, now: jiff::Timestamp) -> Vec<&Pod> {
    Snapshot::new(state, SchedulerOptions::default(), now).pods_to_place()
}

/// One provisioning pass. Writes (NodeClaims, events) happen only when this replica leads.
pub async fn provision(ctx: &Arc<Context>) -> crate::Result<ProvisionOutcome> {
    let _ = release_displaced_nominations(ctx);
    let (pools, static_claims, surplus, pending) = {
        let state = ctx.state.read();
        if !state.synced() {
            tracing::debug!(unsynced = ?state.unsynced_kinds(), "waiting on cluster sync");
            return Ok(ProvisionOutcome {
                waiting_for_sync: true,
                ..ProvisionOutcome::default()
            });
        }
        (
            usable_pools(&state),
            pipeline::static_nodeclaims(&state),
            pipeline::static_surplus(&state, ctx.now()),
            pods_to_place(&state, ctx.now()).len(),
        )
    };
    // CapacityBuffers' virtual pods join every pass's pending pods (never created, bound or
    // nominated): a chunk that fits nowhere gets a NodeClaim, so consumed buffers refill.
    let buffers = ctx.settings.feature_gates.capacity_buffer;
    // While a NodeClaim has not launched, its capacity (hence its NodePool's usage against
    // `limits`) is not known yet: chunks re-planned now could add NodeClaims past the limits, as
    // a real pod nominated to that NodeClaim would not. Buffers wait for the launch (a pass runs
    // at least every 10 s while they exist).
    let virtual_pods = if buffers && !launching(ctx) {
        ctx.buffers.virtual_pods()
    } else {
        Vec::new()
    };
    let mut outcome = ProvisionOutcome::default();
    if let Some(leader) = ctx.leader()
        && !static_claims.is_empty()
    {
        let accepted = static_claims.into_iter().map(|c| (c, Vec::new())).collect();
        outcome.created = create_nodeclaims(&leader, &[], accepted, "static").await;
    }
    if let Some(leader) = ctx.leader()
        && !surplus.is_empty()
    {
        delete_static_surplus(&leader, &surplus).await;
    }
    if pending == 0 && virtual_pods.is_empty() {
        if ctx.buffers.virtual_pods().is_empty() {
            ctx.buffers.set_hosts(Default::default());
        }
        return Ok(outcome);
    }

    let offered = resolve_instance_types(ctx, pools).await;
    // Snapshot under one read lock: the nodes and the pods of the same moment.
    let failed_registrations = registration_failures(ctx);
    let (prepared, pods) = {
        let state = ctx.state.read();
        let mut snapshot = Snapshot::new(&state, scheduler_options(&ctx.settings), ctx.now())
            .unregistered_grace(STUCK_REGISTRATION_GRACE, failed_registrations);
        for (pool, types) in &offered {
            snapshot = snapshot.offer(pool, types);
        }
        let pods: Vec<Arc<Pod>> = snapshot
            .pods_to_place_shared()
            .into_iter()
            .map(Arc::clone)
            .chain(virtual_pods)
            .collect();
        (snapshot.scheduler_input(), pods)
    };
    for node in &prepared.stuck_unregistered {
        tracing::warn!(%node, "node is not registered yet; not counting it as capacity");
    }
    let problems: Vec<String> = prepared.problems.iter().map(ToString::to_string).collect();
    for problem in &problems {
        tracing::warn!(%problem, "left out of scheduling");
    }
    outcome.pods = pods.len();
    if pods.is_empty() {
        return Ok(outcome);
    }
    let pod_names: Vec<String> = pods.iter().map(|p| pod_key(p)).collect();
    tracing::info!(
        pods = %nodeclaim::summarize(&pod_names, 5),
        duration = ?Duration::ZERO,
        "found provisionable pod(s)"
    );
    let pools_by_name: BTreeMap<String, NodePool> = offered
        .into_iter()
        .map(|(p, _)| (p.name_any(), p))
        .collect();
    let started = std::time::Instant::now();
    let started_at = ctx.now();
    ctx.metrics
        .x
        .scheduler_ignored_pods
        .set(i64::try_from(problems.len()).unwrap_or(i64::MAX));
    let solving = ctx
        .metrics
        .begin_solve("provisioner", pods.len(), started_at);
    // Solving is CPU-bound (up to seconds on big clusters): keep it off the async workers.
    let solver = ctx.solver.clone();
    let input = prepared.input;
    let (results, pods) = match tokio::task::spawn_blocking(move || {
        let results = solver.solve(input, &pods);
        (results, pods)
    })
    .await
    {
        Ok(solved) => solved,
        Err(err) => {
            // A panicking solver is a bug; the pods stay pending and re-trigger the next pass.
            tracing::error!(error = %err, "scheduling simulation failed");
            return Ok(outcome);
        }
    };
    drop(solving);
    let unschedulable: std::collections::HashSet<usize> =
        results.unschedulable.iter().map(|u| u.pod).collect();
    let real = |i: &usize| {
        pods.get(*i)
            .is_some_and(|p| !capacity_buffer::is_virtual(p))
    };
    let scheduled: Vec<String> = (0..pod_names.len())
        .filter(|i| !unschedulable.contains(i) && real(i))
        .filter_map(|i| pod_names.get(i).cloned())
        .collect();
    let real_names: Vec<String> = (0..pod_names.len())
        .filter(real)
        .filter_map(|i| pod_names.get(i).cloned())
        .collect();
    ctx.metrics
        .record_scheduling_pass(&real_names, &scheduled, started_at, ctx.now());
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
        .set(i64::try_from(results.unschedulable.len()).unwrap_or(i64::MAX));

    outcome.unschedulable = results.unschedulable.len();
    let planned_buffers = pods.iter().any(|p| capacity_buffer::is_virtual(p));
    if planned_buffers {
        ctx.buffers
            .set_hosts(capacity_buffer::hosting_nodes(&pods, &results));
    }
    let Some(leader) = ctx.leader() else {
        return Ok(outcome);
    };
    if planned_buffers {
        let placements = capacity_buffer::summarize_placements(&pods, &results);
        crate::capacitybuffer::write_provisioning(ctx, &placements).await;
    }
    let ctx = &leader;
    record_unschedulable(ctx, &pods, &results, &problems).await;
    outcome.nominated_existing = nominate_existing(ctx, &pods, &results).await;
    if !results.new_node_claims.is_empty() {
        tracing::info!(
            nodeclaims = results.new_node_claims.len(),
            pods = results.pods_on_new_node_claims(),
            "computed new nodeclaim(s) to fit pod(s)"
        );
    }
    let accepted = within_limits(ctx, &pods, &results, &pools_by_name).await;
    outcome
        .created
        .extend(create_nodeclaims(ctx, &pods, accepted, "provisioned").await);
    Ok(outcome)
}

/// The NodeClaims whose last registration attempt failed, forgetting those that are gone.
fn registration_failures(ctx: &Context) -> std::collections::BTreeSet<String> {
    let mut failures = ctx
        .registration_failures
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let state = ctx.state.read();
    failures.retain(|claim| state.nodeclaim(claim).is_some());
    failures
}

/// Whether some NodeClaim not being deleted has not launched yet (no capacity in its status).
fn launching(ctx: &Context) -> bool {
    ctx.state.read().nodeclaims().any(|claim| {
        claim.metadata.deletion_timestamp.is_none()
            && claim
                .status
                .as_ref()
                .is_none_or(|s| s.capacity.is_empty() && s.allocatable.is_empty())
    })
}

/// The pass's pod `i` unless it is a CapacityBuffer's virtual pod: those have no object to
/// nominate or to publish events on.
fn real_pod(pods: &[Arc<Pod>], i: usize) -> Option<&Pod> {
    pods.get(i)
        .map(|p| &**p)
        .filter(|p| !capacity_buffer::is_virtual(p))
}

async fn record_unschedulable(
    ctx: &Leader,
    pods: &[Arc<Pod>],
    results: &SchedulingResults,
    problems: &[String],
) {
    for failure in &results.unschedulable {
        let Some(pod) = real_pod(pods, failure.pod) else {
            continue;
        };
        let explanation = std::iter::once(failure.explanation.clone())
            .chain(problems.iter().cloned())
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        tracing::error!(pod = %pod_key(pod), error = %explanation, "could not schedule pod");
        let message = format!("Failed to schedule pod, {explanation}");
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

async fn nominate_existing(ctx: &Leader, pods: &[Arc<Pod>], results: &SchedulingResults) -> usize {
    let until = window_end(ctx);
    let mut count = 0;
    for placement in &results.existing_nodes {
        // Once per node, not per pod: the nomination is kept under the node's NodeClaim (a
        // placement on a registered node names the Node), and the event names both, as
        // upstream's `NominatePodEvent`.
        let (key, target) = {
            let state = ctx.state.read();
            let key = state.nomination_key(&placement.node);
            let mut target = Vec::new();
            if state.nodeclaim(&key).is_some() {
                target.push(format!("nodeclaim/{key}"));
            }
            if state.node(&placement.node).is_some() {
                target.push(format!("node/{}", placement.node));
            }
            (key, target.join(", "))
        };
        for &i in &placement.pods {
            let Some(pod) = real_pod(pods, i) else {
                continue;
            };
            ctx.state.write().nominate(&pod_key(pod), &key, until);
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

/// The NodeClaims to create for the pass's decisions, each with the indices of its pods.
/// Limits are re-checked against current usage at create time (upstream): a pool already at or
/// over its limit gets nothing more, even if the simulation (pessimistic) allowed it.
async fn within_limits(
    ctx: &Context,
    pods: &[Arc<Pod>],
    results: &SchedulingResults,
    pools: &BTreeMap<String, NodePool>,
) -> Vec<(NodeClaim, Vec<usize>)> {
    let mut accepted = Vec::new();
    for decision in &results.new_node_claims {
        let Some(pool) = pools.get(&decision.node_pool) else {
            tracing::error!(nodepool = %decision.node_pool, "scheduler planned a nodeclaim for an unknown nodepool");
            continue;
        };
        let limits = limits(pool).unwrap_or_default();
        let usage = usage(&ctx.state.read(), &decision.node_pool);
        if let Some(exceeded) = exceeded_limit(&limits, &usage) {
            tracing::warn!(nodepool = %decision.node_pool, reason = %exceeded, "not creating nodeclaim, nodepool limit exceeded");
            for &i in &decision.pods {
                if let Some(pod) = real_pod(pods, i) {
                    let message = format!(
                        "Failed to schedule pod, nodepool {}: {exceeded}",
                        decision.node_pool
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
        accepted.push((nodeclaim::build(decision, pool), decision.pods.clone()));
    }
    accepted
}

/// NodeClaim creates in flight at once (upstream creates a pass's NodeClaims in parallel; its
/// client's QPS limit bounds them).
const PARALLEL_CREATES: usize = 32;

/// Upstream's `static.deprovisioning`: deletes the NodeClaims a static NodePool holds beyond its
/// replicas (chosen by core's `static_surplus`); their finalizer drains the nodes. The deleted
/// copies go into the state at once, so the next pass does not pick more of them.
async fn delete_static_surplus(ctx: &Leader, names: &[String]) {
    let api: Api<NodeClaim> = Api::all(ctx.writer());
    for name in names {
        let labels = ctx
            .state
            .read()
            .nodeclaim(name)
            .map(|c| {
                crate::metrics::NodeClaimDisruptedLabels::for_claim(STATIC_SCALE_DOWN_REASON, c)
            })
            .unwrap_or_else(|| crate::metrics::NodeClaimDisruptedLabels {
                reason: STATIC_SCALE_DOWN_REASON.into(),
                ..Default::default()
            });
        match timeouts::api(api.delete(name, &kube::api::DeleteParams::default())).await {
            Ok(deleted) => {
                tracing::info!(nodeclaim = %name, nodepool = %labels.nodepool, "deleting nodeclaim: static nodepool holds more than its replicas");
                ctx.metrics
                    .nodeclaims_disrupted
                    .get_or_create(&labels)
                    .inc();
                // Still there (its finalizer drains it): the state sees it deleting at once.
                // Gone at once: the watch removes it; a repeated delete meanwhile is a 404.
                if let Some(claim) = deleted.left() {
                    ctx.state.write().remember(claim);
                }
            }
            Err(err) if karpenter_kube::is_not_found(&err) => {}
            Err(err) => {
                tracing::warn!(nodeclaim = %name, error = %err, "failed to delete surplus static nodeclaim; retrying next pass");
            }
        }
    }
}

/// Upstream's termination reason for a static NodePool's scale-down.
const STATIC_SCALE_DOWN_REASON: &str = "overprovisioned";

/// Creates the NodeClaims, remembers them in the state at once and nominates their pods.
/// `reason` labels `nodeclaims_created_total` (`provisioned`, `static`).
async fn create_nodeclaims(
    ctx: &Leader,
    pods: &[Arc<Pod>],
    accepted: Vec<(NodeClaim, Vec<usize>)>,
    reason: &str,
) -> Vec<String> {
    let api: Api<NodeClaim> = Api::all(ctx.writer());
    let params = karpenter_kube::identity::post_params();
    // In parallel, but bounded: HTTP/1.1 carries one request per connection, so a pass of a
    // thousand NodeClaims would otherwise open a thousand connections (each with its buffers,
    // kept idle in the pool afterwards). Results stay in order.
    let creates: Vec<_> = accepted
        .iter()
        .map(|(claim, _)| timeouts::api(api.create(&params, claim)))
        .collect();
    let results: Vec<_> = futures::stream::iter(creates)
        .buffered(PARALLEL_CREATES)
        .collect()
        .await;

    let until = window_end(ctx);
    let mut created = Vec::new();
    for ((planned, placed), result) in accepted.into_iter().zip(results) {
        let pool = planned.nodepool_name().unwrap_or_default().to_string();
        let claim = match result {
            Ok(claim) => claim,
            Err(err) => {
                tracing::error!(nodepool = %pool, error = %err, "failed to create nodeclaim");
                continue;
            }
        };
        let name = claim.name_any();
        let instance_types: Vec<String> = claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == karpenter_api::well_known::INSTANCE_TYPE_LABEL)
            .map(|r| r.values.to_vec())
            .unwrap_or_default();
        let min_values_relaxed = claim
            .annotations()
            .get(karpenter_api::well_known::NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION)
            .cloned()
            .unwrap_or_else(|| "false".into());
        tracing::info!(
            nodepool = %pool,
            nodeclaim = %name,
            requests = ?claim.spec.resources.as_ref().map(|r| &r.requests),
            instance_types = %nodeclaim::summarize(&instance_types, 5),
            "created nodeclaim"
        );
        ctx.metrics
            .nodeclaims_created
            .get_or_create(&NodeClaimCreatedLabels {
                reason: reason.into(),
                nodepool: pool.clone(),
                min_values_relaxed,
            })
            .inc();
        {
            // Visible to the next pass at once, even before the watch delivers it.
            let mut state = ctx.state.write();
            state.remember(claim.clone());
            for &i in &placed {
                if let Some(pod) = real_pod(pods, i) {
                    state.nominate(&pod_key(pod), &name, until);
                }
            }
        }
        if placed
            .iter()
            .any(|&i| pods.get(i).is_some_and(|p| capacity_buffer::is_virtual(p)))
        {
            ctx.buffers.add_host(name.clone());
        }
        for &i in &placed {
            if let Some(pod) = real_pod(pods, i) {
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

/// The provisioner loop: one pass per closed batch window, and one the moment this replica
/// starts to work (leads with synced caches: the pods that waited for a leader are all known
/// by then, so no window is opened for them), until `shutdown` turns true. A helper task
/// re-triggers still-unplaced pods (provisionable, or reschedulable on a deleting node) every
/// [`RETRIGGER_PERIOD`].
pub async fn run(ctx: Arc<Context>, mut batcher: Batcher, mut shutdown: watch::Receiver<bool>) {
    // Aborted with the loop, also when the loop itself is aborted (a crashed replica must not
    // leave a ticker behind that keeps its state alive).
    let _retrigger = AbortOnDrop(tokio::spawn(retrigger_provisionable(ctx.clone())));
    let _displaced = AbortOnDrop(tokio::spawn(retrigger_displaced(ctx.clone())));
    let mut starts = ctx.work_starts();
    loop {
        // A window cut short by a start loses only its triggers: the pass reads every pending
        // pod from the state.
        tokio::select! {
            window = batcher.wait() => {
                let Some(window) = window else { break };
                tracing::debug!(triggers = window.triggers.len(), window = ?(window.closed - window.opened), "batch window closed");
            }
            () = starts.next() => {
                tracing::debug!("leading with synced caches, provisioning at once");
            }
            _ = shutdown.wait_for(|stop| *stop) => break,
        }
        let pass_started = std::time::Instant::now();
        let result = provision(&ctx).await;
        ctx.metrics
            .record_reconcile("provisioner", pass_started.elapsed(), result.is_ok());
        match result {
            Ok(outcome) if outcome.waiting_for_sync => {
                // Try again shortly: the pods are still pending and will re-trigger.
            }
            Ok(_) => {}
            Err(err) => tracing::error!(error = %err, "provisioning failed"),
        }
    }
}

/// How often the nominations are checked against what the kube-scheduler bound: a displaced pod
/// waits at most this long (plus a batch window) for the pass that plans its node. Cheap: a walk
/// over the live nominations and their nodes.
const DISPLACED_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// Triggers a pass for every pod whose nomination an initialized node can no longer honour, as
/// soon as that is so: each late pass used to wait for a pod event or the 10 s re-trigger, and a
/// burst of 1,000 pods ended in six passes of one pod each, 4–5 s apart.
async fn retrigger_displaced(ctx: Arc<Context>) {
    let mut ticker = tokio::time::interval(DISPLACED_CHECK_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let released = release_displaced_nominations(&ctx);
        let uids: Vec<String> = {
            let state = ctx.state.read();
            released
                .iter()
                .filter_map(|key| state.pod(key).and_then(|p| p.uid()))
                .collect()
        };
        for uid in uids {
            ctx.provisioning_trigger.trigger(uid);
        }
    }
}

/// Frees the pods whose nominated node the kube-scheduler filled with other pods, so this pass
/// (or the retrigger's) plans for them (see `ClusterState::release_displaced_nominations`).
/// Checked under the read lock first: the check runs every second and rarely finds anything,
/// and the writer's lock would stall every reader meanwhile.
fn release_displaced_nominations(ctx: &Context) -> Vec<String> {
    let now = ctx.now();
    if ctx.state.read().displaced_nominations(now).is_empty() {
        return Vec::new();
    }
    let released = ctx.state.write().release_displaced_nominations(now);
    if !released.is_empty() {
        tracing::debug!(
            pods = %nodeclaim::summarize(&released, 5),
            "released nominations their nodes can no longer hold"
        );
    }
    released
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn retrigger_provisionable(ctx: Arc<Context>) {
    let mut ticker = tokio::time::interval(RETRIGGER_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let uids: Vec<String> = {
            let now = ctx.now();
            let _ = release_displaced_nominations(&ctx);
            let mut state = ctx.state.write();
            state.expire_nominations(now);
            let mut uids: Vec<String> = pods_to_place(&state, now)
                .into_iter()
                .filter_map(|p| p.uid())
                .collect();
            if ctx.settings.feature_gates.capacity_buffer && !ctx.buffers.virtual_pods().is_empty()
            {
                // Buffers are kept full: a pass refills what was consumed meanwhile.
                uids.push(crate::capacitybuffer::TRIGGER.into());
            }
            if !pipeline::static_nodeclaims(&state).is_empty()
                || !pipeline::static_surplus(&state, now).is_empty()
            {
                // A static NodePool misses NodeClaims or holds too many: a pass fixes it.
                uids.push("static-capacity".into());
            }
            uids
        };
        for uid in uids {
            ctx.provisioning_trigger.trigger(uid);
        }
    }
}

/// The EC2NodeClass `pool` references, as the state holds it (cloned: the state's lock is not
/// held across the provider call).
fn pool_node_class(
    state: &ClusterState,
    pool: &NodePool,
) -> Option<karpenter_api::v1::EC2NodeClass> {
    let reference = &pool.spec.template.spec.node_class_ref;
    use karpenter_api::v1::EC2NodeClass;
    (reference.kind == <EC2NodeClass as kube::Resource>::kind(&())
        && reference.group == <EC2NodeClass as kube::Resource>::group(&()))
    .then(|| state.nodeclass(&reference.name).cloned())
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::scheduling::{MinValuesPolicy, PreferencePolicy};

    #[test]
    fn policies_follow_the_settings() {
        let settings = Settings {
            preference_policy: PreferencePolicy::Ignore,
            min_values_policy: MinValuesPolicy::BestEffort,
            ..Settings::default()
        };
        let options = scheduler_options(&settings);
        assert_eq!(options.preference_policy, PreferencePolicy::Ignore);
        assert_eq!(options.min_values_policy, MinValuesPolicy::BestEffort);
        let options = scheduler_options(&Settings::default());
        assert_eq!(options.preference_policy, PreferencePolicy::Respect);
        assert_eq!(options.min_values_policy, MinValuesPolicy::Strict);
    }
}
