//! One pass of the disruption loop (karpenter-core §4.1): the instance types per NodePool (as
//! the provisioner resolves them), the pure [`decide`] over the state, the events and metrics of
//! the outcome, and — for consolidation — the wait and re-validation before anything runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_INITIALIZED};
use karpenter_core::disruption::candidates::{BlockReason, DisruptionClass, Rejection, candidates};
use karpenter_core::disruption::emptiness::consolidation_block;
use karpenter_core::disruption::{
    BudgetMapping, Command, DisruptionInput, DisruptionOptions, DisruptionReason, Method, Pass,
    ProviderDrift, decide,
};
use karpenter_core::instance_type::InstanceType;
use kube::ResourceExt;

use crate::context::Context;
use crate::events::{
    EventRecord, EventType, REASON_CONSOLIDATION_APPROVED, REASON_CONSOLIDATION_CANDIDATE,
    REASON_CONSOLIDATION_REJECTED, REASON_DISRUPTION_BLOCKED, REASON_INVALID_DO_NOT_DISRUPT,
    REASON_UNCONSOLIDATABLE,
};
use crate::metrics::{
    ConsolidationMoveLabels, ConsolidationTypeLabels, DisruptionMethodLabels,
    DisruptionReasonLabels, NodePoolReasonLabels,
};
use crate::provisioning::provisioner::scheduler_options;
use crate::provisioning::provisioner::{disruption_pools, resolve_instance_types};

/// Instance types per NodePool name.
pub type InstanceTypes = BTreeMap<String, Vec<Arc<InstanceType>>>;

/// The provider's catalogue for every usable NodePool and every static one (the provisioner's
/// helper).
pub async fn instance_types(ctx: &Context) -> InstanceTypes {
    let pools = disruption_pools(&ctx.state.read());
    resolve_instance_types(ctx, pools)
        .await
        .into_iter()
        .map(|(pool, types)| (pool.name_any(), types))
        .collect()
}

/// Why the loop leaves voluntary disruption alone this time (upstream waits while the
/// provisioner has work: moving pods now would race it).
pub fn busy_provisioning(ctx: &Context) -> Option<String> {
    let state = ctx.state.read();
    // Pods the provisioner nominated to a node but that are not bound yet make that node look
    // empty; moving capacity now would race them (upstream also waits on nominations). Pods no
    // pass could place (no nomination) do not hold disruption: one stuck pod must not stop the
    // cluster from consolidating.
    let now = ctx.now();
    let in_flight = state
        .pods()
        .filter(|p| karpenter_core::pod::node_name(p).is_none())
        .filter(|p| {
            state
                .nomination(&karpenter_core::pod::key(p), now)
                .is_some()
        })
        .count();
    if in_flight > 0 {
        return Some(format!("{in_flight} nominated pod(s) not bound yet"));
    }
    let uninitialized = state
        .nodeclaims()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            !c.status
                .as_ref()
                .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_INITIALIZED))
        })
        .count();
    (uninitialized > 0).then(|| format!("{uninitialized} nodeclaim(s) not initialized yet"))
}

/// The provider's drift answers for the managed, initialized NodeClaims not being deleted.
pub async fn provider_drift(ctx: &Context) -> ProviderDrift {
    let claims: Vec<karpenter_api::NodeClaim> = {
        let state = ctx.state.read();
        state
            .nodeclaims()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| crate::nodeclaim::is_managed(ctx, c))
            .filter(|c| {
                c.status
                    .as_ref()
                    .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_INITIALIZED))
            })
            .cloned()
            .collect()
    };
    let mut drift = ProviderDrift::new();
    for claim in claims {
        match crate::timeouts::cloud(ctx.cloud.is_drifted(&claim)).await {
            Ok(Some(reason)) => {
                drift.insert(claim.name_any(), reason);
            }
            Ok(None) => {}
            Err(err) => {
                tracing::debug!(nodeclaim = %claim.name_any(), error = %err, "cannot check drift")
            }
        }
    }
    drift
}

/// The gates' options, with the nodes holding CapacityBuffer capacity (kept from consolidation).
fn disruption_options(ctx: &Context) -> DisruptionOptions {
    let mut options = DisruptionOptions::from_gates(&ctx.settings.feature_gates);
    if ctx.settings.feature_gates.capacity_buffer {
        options.buffer_hosts = ctx.buffers.hosts();
    }
    options
}

/// Runs [`decide`] over the state as it is now. The single place the pure decision is called,
/// for the pass and for validation alike.
pub fn decide_now(ctx: &Context, types: &InstanceTypes, drift: &ProviderDrift) -> Pass {
    let state = snapshot(ctx);
    let scheduler = scheduler_options(&ctx.settings);
    let options = disruption_options(ctx);
    let input = DisruptionInput {
        state: &state,
        instance_types: types,
        scheduler: &scheduler,
        options: &options,
        provider_drift: drift,
        now: ctx.now(),
    };
    off_the_async_workers(|| decide(&input))
}

/// A copy of the state to decide on. A decision takes seconds at hundreds of nodes; holding the
/// state's lock that long made every watcher's write wait, and every reader behind the waiting
/// writer, so the whole runtime stood still (measured: 5.3 s without a single API call between
/// a Node's DELETE and its drain, on the 300-node wide-deployments scale-in). The copy shares
/// the Nodes, NodeClaims and pods with the state (`Arc`s), so it costs pointers, not objects.
fn snapshot(ctx: &Context) -> karpenter_core::state::ClusterState {
    ctx.state.read().clone()
}

/// Runs CPU-bound work where it does not hold up the async workers: on a multi-threaded
/// runtime the worker hands its other tasks over first (`block_in_place`); on a
/// current-thread runtime (tests) it simply runs.
fn off_the_async_workers<T>(work: impl FnOnce() -> T) -> T {
    let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
    if matches!(flavor, Ok(tokio::runtime::RuntimeFlavor::MultiThread)) {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

pub use karpenter_core::disruption::validate::needs_validation;

/// Upstream `commandValidationDelay` (core's, which `simulate` waits too).
pub const VALIDATION_DELAY: Duration =
    karpenter_core::disruption::validate::VALIDATION_DELAY.unsigned_abs();

/// Re-checks a command against a fresh view after the validation delay (core's `validate`: the
/// nodes are still candidates, budgets still allow them, a fresh simulation decides the same).
/// Returns the command to run: an emptiness command keeps only its nodes still empty.
pub fn validate_now(
    ctx: &Context,
    types: &InstanceTypes,
    drift: &ProviderDrift,
    command: &Command,
) -> Result<Command, BlockReason> {
    let state = snapshot(ctx);
    let scheduler = scheduler_options(&ctx.settings);
    let options = disruption_options(ctx);
    let input = DisruptionInput {
        state: &state,
        instance_types: types,
        scheduler: &scheduler,
        options: &options,
        provider_drift: drift,
        now: ctx.now(),
    };
    off_the_async_workers(|| karpenter_core::disruption::validate(command, &input))
}

/// Metrics of a pass: evaluation time, eligible nodes per reason, allowed disruptions per pool.
/// Returns the NodePool `DisruptionBlocked` events of budgets that allow nothing (upstream
/// publishes them while building the budget mapping; the events writer de-duplicates them).
pub fn record_metrics(
    ctx: &Context,
    pass: &Pass,
    types: &InstanceTypes,
    elapsed: Duration,
) -> Vec<EventRecord> {
    ctx.metrics.record_reconcile("disruption", elapsed, true);
    let (reason, consolidation_type) = match pass.method {
        None => ("none".to_string(), ""),
        Some(method) => (
            method.reason().as_str().to_lowercase(),
            match method {
                Method::Emptiness
                | Method::SingleNodeConsolidation
                | Method::MultiNodeConsolidation => method.as_str(),
                Method::Drift | Method::StaticDrift => "",
            },
        ),
    };
    ctx.metrics
        .disruption_evaluation_duration
        .get_or_create(&DisruptionMethodLabels {
            reason,
            consolidation_type: consolidation_type.into(),
        })
        .observe(elapsed.as_secs_f64());
    let now = ctx.now();
    let state = ctx.state.read();
    let (graceful, _) = candidates(&state, now, DisruptionClass::Graceful, types);
    let consolidatable: Vec<_> = graceful
        .iter()
        .filter(|c| consolidation_block(c, now).is_none())
        .collect();
    let empty = consolidatable.iter().filter(|c| c.is_empty()).count();
    for (reason, count) in [
        (DisruptionReason::Empty, empty),
        (DisruptionReason::Underutilized, consolidatable.len()),
    ] {
        ctx.metrics
            .disruption_eligible_nodes
            .get_or_create(&DisruptionReasonLabels {
                reason: reason.as_str().to_lowercase(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    let mut events = Vec::new();
    for reason in DisruptionReason::ALL {
        for allowance in BudgetMapping::build(&state, reason, now).iter() {
            ctx.metrics
                .nodepools_allowed_disruptions
                .get_or_create(&NodePoolReasonLabels {
                    nodepool: allowance.nodepool.clone(),
                    reason: reason.as_str().to_lowercase(),
                })
                .set(i64::from(allowance.allowed.min(i32::MAX as u32)));
            if allowance.blocks_all()
                && let Some(pool) = state.nodepool(&allowance.nodepool)
            {
                let message = format!(
                    "No allowed disruptions for disruption reason {reason} due to blocking budget: {allowance}"
                );
                events.push(EventRecord::new(
                    pool,
                    EventType::Normal,
                    REASON_DISRUPTION_BLOCKED,
                    message,
                ));
            }
        }
    }
    events
}

/// The consolidation moves the pass judged (upstream `balanced.go`): every move counts in
/// `karpenter_consolidation_moves_total`, Balanced ones observe their score in
/// `karpenter_consolidation_score`; approved Balanced moves return their `ConsolidationApproved`
/// events — on the candidate's Node and NodeClaim for single-node moves, on the NodePool for
/// multi-node ones (the score describes the move, not a node). Rejections are not events here:
/// the blocked node's `ConsolidationRejected` event says it once ([`BlockedEvents`]).
pub fn record_moves(ctx: &Context, pass: &Pass) -> Vec<EventRecord> {
    let mut events = Vec::new();
    for judged in &pass.moves {
        let labels = ConsolidationMoveLabels {
            decision: judged.decision().into(),
            nodepool: judged.nodepool.clone(),
            policy: judged.policy.as_str().into(),
        };
        ctx.metrics.consolidation_moves.get_or_create(&labels).inc();
        let Some(score) = &judged.score else {
            continue;
        };
        ctx.metrics
            .consolidation_score
            .get_or_create(&labels)
            .observe(score.score);
        if !score.approved() {
            continue;
        }
        let message = score.summary();
        if judged.method == Method::MultiNodeConsolidation {
            if let Some(pool) = ctx.state.read().nodepool(&judged.nodepool) {
                events.push(EventRecord::new(
                    pool,
                    EventType::Normal,
                    REASON_CONSOLIDATION_APPROVED,
                    message,
                ));
            }
        } else {
            events.extend(records_for(
                ctx,
                judged.candidates.iter().map(String::as_str),
                |_| {
                    (
                        EventType::Normal,
                        REASON_CONSOLIDATION_APPROVED,
                        message.clone(),
                    )
                },
            ));
        }
    }
    events
}

/// A consolidation command the validation abandoned (upstream §4.11): counted in
/// `voluntary_disruption_failed_validations_total`, and `ConsolidationRejected` with the reason
/// on its candidates.
pub async fn publish_rejected(ctx: &Context, command: &Command, why: &BlockReason) {
    ctx.metrics
        .disruption_failed_validations
        .get_or_create(&ConsolidationTypeLabels {
            consolidation_type: command.method.as_str().into(),
        })
        .inc();
    let message = format!("Consolidation rejected after validation: {why}");
    for record in records_for(
        ctx,
        command.candidates.iter().map(|c| c.name.as_str()),
        |_| {
            (
                EventType::Normal,
                REASON_CONSOLIDATION_REJECTED,
                message.clone(),
            )
        },
    ) {
        ctx.events.publish(record).await;
    }
}

/// `ConsolidationCandidate` on the candidates of consolidation commands, with the estimated
/// savings (upstream's message).
pub async fn publish_candidates(ctx: &Context, command: &Command) {
    if !matches!(
        command.method,
        Method::SingleNodeConsolidation | Method::MultiNodeConsolidation
    ) {
        return;
    }
    let message = format!(
        "Consolidation candidate: {}: [{}] -> [{} replacement(s)] (savings: ${:.2})",
        command.decision().as_str(),
        command
            .candidates
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        command.replacements.len(),
        command.savings_per_hour
    );
    for record in records_for(
        ctx,
        command.candidates.iter().map(|c| c.name.as_str()),
        |_| {
            (
                EventType::Normal,
                REASON_CONSOLIDATION_CANDIDATE,
                message.clone(),
            )
        },
    ) {
        ctx.events.publish(record).await;
    }
}

/// Events on the Node and NodeClaim of each named node (those the state holds).
fn records_for<'n>(
    ctx: &Context,
    names: impl Iterator<Item = &'n str>,
    what: impl Fn(&str) -> (EventType, &'static str, String),
) -> Vec<EventRecord> {
    let state = ctx.state.read();
    let mut out = Vec::new();
    for name in names {
        let (event_type, reason, message) = what(name);
        let node = state.node(name);
        let claim = state.nodeclaims().find(|c| {
            c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name)
                || c.name_any() == name
        });
        if let Some(node) = node {
            out.push(EventRecord::new(node, event_type, reason, message.clone()));
        }
        if let Some(claim) = claim {
            out.push(EventRecord::new(claim, event_type, reason, message));
        }
    }
    out
}

/// `DisruptionBlocked` / `Unconsolidatable` events, once per node and reason: a node's event is
/// published again only when its reason changes (or after it was unblocked), so a steady cluster
/// does not spam.
#[derive(Debug, Default)]
pub struct BlockedEvents {
    last: HashMap<String, String>,
}

impl BlockedEvents {
    /// The event for a rejection, if it is one a person should read: nodes that are simply not
    /// ready for disruption yet (not initialized, already going) get none.
    fn event_for(rejection: &Rejection) -> Option<(&'static str, String)> {
        match &rejection.reason {
            BlockReason::NotManaged
            | BlockReason::NoNode
            | BlockReason::NotInitialized
            | BlockReason::MarkedForDeletion
            | BlockReason::BeingDisrupted
            | BlockReason::Replacing => None,
            BlockReason::ConsolidatableAt(at) => Some((
                REASON_DISRUPTION_BLOCKED,
                format!(
                    "not consolidatable before {at}: the NodePool's consolidateAfter has not passed since the node's last pod event (a later pod event moves it)"
                ),
            )),
            BlockReason::ConsolidationDisabled(_)
            | BlockReason::StaticNodePool(_)
            | BlockReason::HostsCapacityBuffer => {
                Some((REASON_UNCONSOLIDATABLE, rejection.reason.to_string()))
            }
            // Upstream's Balanced wording: `score 0.32 < threshold 0.50 (savings 25.0%, …)`.
            BlockReason::BalancedScoreTooLow(score)
            | BlockReason::BalancedDeleteWouldNotPass(score) => {
                Some((REASON_CONSOLIDATION_REJECTED, score.summary()))
            }
            other => Some((REASON_DISRUPTION_BLOCKED, other.to_string())),
        }
    }

    /// Publishes what changed since the last pass.
    pub async fn publish(&mut self, ctx: &Context, blocked: &[Rejection]) {
        let mut now_blocked: HashMap<String, String> = HashMap::new();
        let mut fresh: Vec<(String, &'static str, String)> = Vec::new();
        for rejection in blocked {
            let Some((reason, message)) = Self::event_for(rejection) else {
                continue;
            };
            // Waiting for `consolidateAfter` is one state however often pod events move its
            // end: announced when a node starts waiting, not at every move.
            let key = match rejection.reason {
                BlockReason::ConsolidatableAt(_) => "waiting for consolidateAfter".to_string(),
                _ => format!("{reason}: {message}"),
            };
            if self.last.get(&rejection.name) != Some(&key) {
                fresh.push((rejection.name.clone(), reason, message));
            }
            now_blocked.insert(rejection.name.clone(), key);
        }
        self.last = now_blocked;
        let by_name: HashMap<String, (&'static str, String)> = fresh
            .into_iter()
            .map(|(name, reason, message)| (name, (reason, message)))
            .collect();
        let records = records_for(ctx, by_name.keys().map(String::as_str), |name| {
            let (reason, message) = by_name
                .get(name)
                .cloned()
                .unwrap_or((REASON_DISRUPTION_BLOCKED, String::new()));
            (EventType::Normal, reason, message)
        });
        for record in records {
            ctx.events.publish(record).await;
        }
    }
}

/// `InvalidDoNotDisrupt` warnings on pods whose `karpenter.sh/do-not-disrupt` value is ignored
/// (core says why), once per pod and value: a pod is warned again only when its value changes.
#[derive(Debug, Default)]
pub struct InvalidDoNotDisruptEvents {
    last: HashMap<String, String>,
}

impl InvalidDoNotDisruptEvents {
    /// The events to publish for the pods in the state now (and forgets pods no longer invalid).
    pub fn fresh(&mut self, ctx: &Context) -> Vec<EventRecord> {
        let state = ctx.state.read();
        let invalid = karpenter_core::pod::invalid_do_not_disrupt(state.pods());
        let mut now_invalid = HashMap::with_capacity(invalid.len());
        let mut out = Vec::new();
        for (pod, why) in invalid {
            let key = karpenter_core::pod::key(pod);
            if self.last.get(&key) != Some(&why) {
                out.push(EventRecord::new(
                    pod,
                    EventType::Warning,
                    REASON_INVALID_DO_NOT_DISRUPT,
                    why.clone(),
                ));
            }
            now_invalid.insert(key, why);
        }
        self.last = now_invalid;
        out
    }
}

/// The earliest instant a node blocked now frees itself (a do-not-disrupt duration running out,
/// `consolidateAfter` passing), so the loop looks again then rather than at its next poll.
pub fn next_unblock(pass: &Pass) -> Option<jiff::Timestamp> {
    pass.blocked
        .iter()
        .filter_map(|r| r.reason.frees_at())
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_blocks_a_person_acts_on_get_events() {
        let rejection = |reason| Rejection {
            name: "n".into(),
            nodepool: Some("default".into()),
            reason,
        };
        assert_eq!(
            BlockedEvents::event_for(&rejection(BlockReason::NotInitialized)),
            None
        );
        let waiting = BlockedEvents::event_for(&rejection(BlockReason::ConsolidatableAt(
            jiff::Timestamp::UNIX_EPOCH,
        )))
        .unwrap();
        assert_eq!(waiting.0, REASON_DISRUPTION_BLOCKED);
        assert!(
            waiting
                .1
                .starts_with("not consolidatable before 1970-01-01T00:00:00Z"),
            "{}",
            waiting.1
        );
        let budget = BlockedEvents::event_for(&rejection(BlockReason::BudgetExhausted {
            nodepool: "default".into(),
            reason: "Empty".into(),
        }))
        .unwrap();
        assert_eq!(budget.0, REASON_DISRUPTION_BLOCKED);
        assert!(budget.1.contains("disruption budget"), "{}", budget.1);
        let disabled = BlockedEvents::event_for(&rejection(BlockReason::ConsolidationDisabled(
            "default".into(),
        )))
        .unwrap();
        assert_eq!(disabled.0, REASON_UNCONSOLIDATABLE);
        let score = karpenter_core::disruption::score::PoolScore {
            nodepool: "default".into(),
            score: 0.32,
            savings: 0.2,
            pool_cost: 0.8,
            move_disruption: 7.0,
            pool_disruption: 9.0,
        };
        let balanced =
            BlockedEvents::event_for(&rejection(BlockReason::BalancedScoreTooLow(score))).unwrap();
        assert_eq!(balanced.0, REASON_CONSOLIDATION_REJECTED);
        assert_eq!(
            balanced.1,
            "score 0.32 < threshold 0.50 (savings 25.0%, disruption 77.8%)"
        );
    }
}
