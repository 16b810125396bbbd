//! The orchestration queue (karpenter-core §4.12): executes one disruption [`Command`] as
//! [`karpenter_core::disruption::orchestration::command`] says — mark the candidates, launch
//! the replacements, wait until they are initialized, delete the candidates' NodeClaims — or
//! rolls it back. The machine decides every step (the same machine `simulate --disruption`
//! applies in virtual time); this module writes through the leader's writer and observes. The
//! termination controller then drains the candidates.
//!
//! In the state, the candidates are "being disrupted" for the whole command: budgets count them
//! ([`karpenter_core::disruption::BudgetMapping`]) and no other command may pick them. A crash
//! loses that in-memory mark; the loop's [`clean_leftovers`] then untaints whatever a command
//! left behind, as upstream's does.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Taint};
use karpenter_api::NodeClaim;
use karpenter_api::v1::{CONDITION_TRUE, ConditionsExt, NODECLAIM_CONDITION_DISRUPTION_REASON};
use karpenter_api::well_known::{CAPACITY_TYPE_LABEL, DISRUPTED_TAINT_KEY};
use karpenter_core::disruption::orchestration::command::{self, CommandStep};
use karpenter_core::disruption::orchestration::{
    CandidateView, CommandView, Failure, Marking, ReplacementView,
};
use karpenter_core::disruption::{Command, DisruptedNode, DisruptionReason, Method};
use karpenter_core::state::ClusterState;
use karpenter_core::taints::NO_SCHEDULE;
use karpenter_kube::is_not_found;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::events::{
    EventRecord, EventType, REASON_DISRUPTION_LAUNCHING, REASON_DISRUPTION_TERMINATING,
    REASON_DISRUPTION_WAITING_READINESS,
};
use crate::metrics::{DisruptionDecisionLabels, NodeClaimDisruptedLabels};
use crate::timeouts;
use crate::writes::Leader;

/// How often the replacements are checked (upstream requeues the command every second).
pub const READINESS_POLL: Duration = Duration::from_secs(1);

/// Attempts of one read-modify-write against a conflicting writer.
const CONFLICT_RETRIES: usize = 3;

/// Why a command was rolled back.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("a candidate is already being disrupted by another command")]
    AlreadyInFlight,
    #[error("no candidate could be marked for disruption")]
    NothingMarked,
    #[error("a candidate could not be marked and the command launches replacements")]
    PartlyMarked,
    #[error("a replacement could not launch: {0}")]
    LaunchFailed(String),
    #[error("a replacement nodeclaim was deleted before it initialized")]
    ReplacementDeleted,
    #[error("replacements were not initialized within {0:?}")]
    ReplacementTimeout(Duration),
    #[error("this replica does not lead")]
    NotLeader,
    #[error(transparent)]
    Controller(#[from] crate::Error),
}

impl From<Failure> for CommandError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::NothingMarked => CommandError::NothingMarked,
            Failure::PartlyMarked => CommandError::PartlyMarked,
            Failure::LaunchFailed(message) => CommandError::LaunchFailed(message),
            Failure::ReplacementDeleted => CommandError::ReplacementDeleted,
            Failure::Timeout(timeout) => CommandError::ReplacementTimeout(
                Duration::try_from(timeout).unwrap_or(Duration::ZERO),
            ),
        }
    }
}

/// Claims the command's candidates in the state ("being disrupted"); refuses (claiming nothing)
/// when any of them already is. Synchronous, so the loop claims before its next pass looks.
pub fn claim(state: &mut ClusterState, command: &Command) -> bool {
    if command
        .candidates
        .iter()
        .any(|c| state.is_being_disrupted(&c.name))
    {
        return false;
    }
    for candidate in &command.candidates {
        state.mark_being_disrupted(&candidate.name);
    }
    true
}

/// Releases what [`claim`] took (and the deletion marks a command set).
pub fn release(state: &mut ClusterState, command: &Command) {
    for candidate in &command.candidates {
        state.unmark_being_disrupted(&candidate.name);
        state.unmark_for_deletion(&candidate.name);
    }
}

/// Claims the candidates and runs the command (see [`execute`]).
pub async fn run_command(
    ctx: &Arc<Context>,
    command: Command,
) -> Result<Vec<String>, CommandError> {
    let ctx = &ctx.leader().ok_or(CommandError::NotLeader)?;
    if !claim(&mut ctx.state.write(), &command) {
        return Err(CommandError::AlreadyInFlight);
    }
    let timeout = ctx.settings.disruption_replacement_timeout;
    execute(ctx, command, timeout).await
}

/// Runs a command whose candidates are already [`claim`]ed, with `timeout` for the
/// replacements to initialize. On success, the names of the Nodes it left marked for deletion
/// (the loop unmarks them once they are gone, since Node names can be reused). On failure
/// everything is rolled back (untainted, condition cleared, state marks
/// released).
pub async fn execute(
    ctx: &Leader,
    mut command: Command,
    timeout: Duration,
) -> Result<Vec<String>, CommandError> {
    tracing::info!(command = %describe(&command), "disrupting node(s)");
    let started = ctx.now();
    let mut created: Vec<String> = Vec::new();
    let outcome = run(ctx, &mut command, &mut created, timeout).await;
    log_ended(ctx, &command, &created, started, outcome.as_ref().err());
    match outcome {
        Ok(()) => {
            // The NodeClaims are deleting: the deletion mark keeps them out of budgets' "free"
            // nodes and out of candidates until the watch shows the deletion.
            let mut state = ctx.state.write();
            for candidate in &command.candidates {
                state.unmark_being_disrupted(&candidate.name);
            }
            Ok(command.candidates.into_iter().map(|c| c.name).collect())
        }
        Err(err) => {
            tracing::warn!(command = %describe(&command), error = %err, "disruption command failed; rolling back");
            ctx.metrics
                .disruption_queue_failures
                .get_or_create(&decision_labels(&command))
                .inc();
            rollback(ctx, &command).await;
            let mut state = ctx.state.write();
            for name in &created {
                state.unmark_replacing(name);
            }
            Err(err)
        }
    }
}

/// One line per command when it ends, with what `simulate --disruption` reports of it (its
/// reason, candidates, replacements' offerings, start, outcome), so the two can be compared
/// (the parity test reads it): `disruption command ended reason=Drifted candidates=a,b
/// replacements=m5.large/us-east-1a/on-demand started=RFC3339 outcome=succeeded`.
fn log_ended(
    ctx: &Leader,
    command: &Command,
    created: &[String],
    started: Timestamp,
    error: Option<&CommandError>,
) {
    let candidates: Vec<&str> = command.candidates.iter().map(|c| c.name.as_str()).collect();
    let replacements: Vec<String> = {
        let state = ctx.state.read();
        // Only launched replacements have an offering (one whose launch failed may still be
        // in the state, without labels, until its deletion is seen).
        created
            .iter()
            .filter_map(|name| state.nodeclaim(name))
            .filter_map(|claim| {
                let label = |key: &str| claim.labels().get(key).cloned();
                Some(format!(
                    "{}/{}/{}",
                    label(karpenter_api::well_known::INSTANCE_TYPE_LABEL)?,
                    label(karpenter_api::well_known::ZONE_LABEL)?,
                    label(CAPACITY_TYPE_LABEL)?
                ))
            })
            .collect()
    };
    tracing::info!(
        reason = command.reason.as_str(),
        candidates = %candidates.join(","),
        replacements = %replacements.join(","),
        %started,
        outcome = if error.is_some() { "rolled-back" } else { "succeeded" },
        error = %error.map(ToString::to_string).unwrap_or_default(),
        "disruption command ended"
    );
}

/// Executes the steps of [`command::next`] until the command finishes or rolls back: the
/// machine decides, this function only writes (through the leader's writer) and observes.
async fn run(
    ctx: &Leader,
    command: &mut Command,
    created: &mut Vec<String>,
    timeout: Duration,
) -> Result<(), CommandError> {
    let api: Api<NodeClaim> = Api::all(ctx.writer());
    let mut view = CommandView {
        started_at: ctx.now(),
        timeout: SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX),
        candidates: command
            .candidates
            .iter()
            .map(|c| CandidateView {
                name: c.name.clone(),
                marking: Marking::NotYet,
                deleting: false,
            })
            .collect(),
        replacements: vec![ReplacementView::NotCreated; command.replacements.len()],
        committed: false,
    };
    // The name of each replacement once created (same order as `view.replacements`).
    let mut names: Vec<Option<String>> = vec![None; command.replacements.len()];
    loop {
        observe_replacements(ctx, &api, &names, &mut view.replacements).await;
        let plan = command::next(&view, ctx.now());
        for step in plan.steps {
            match step {
                CommandStep::Mark(names) => mark(ctx, command, &names, &mut view).await,
                CommandStep::Drop(names) => {
                    // A delete-only command goes on with the nodes it could mark.
                    let mut state = ctx.state.write();
                    for name in &names {
                        state.unmark_being_disrupted(name);
                    }
                    drop(state);
                    command.candidates.retain(|c| !names.contains(&c.name));
                    view.candidates.retain(|c| !names.contains(&c.name));
                }
                CommandStep::CreateReplacements => {
                    create_replacements(ctx, &api, command, &mut names, &mut view).await;
                    *created = names.iter().flatten().cloned().collect();
                }
                CommandStep::Commit => {
                    commit(ctx, command, !created.is_empty()).await;
                    view.committed = true;
                }
                CommandStep::WaitForInitialization { deadline } => {
                    publish(
                        ctx,
                        command,
                        REASON_DISRUPTION_WAITING_READINESS,
                        "Waiting on readiness to continue disruption",
                    )
                    .await;
                    let left = deadline.duration_since(ctx.now());
                    let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
                    tokio::time::sleep(READINESS_POLL.min(left)).await;
                }
                CommandStep::DeleteCandidates(names) => {
                    delete_candidates(ctx, &api, command, &names).await?;
                    for candidate in &mut view.candidates {
                        candidate.deleting |= names.contains(&candidate.name);
                    }
                }
                CommandStep::RollBack(failure) => return Err(failure.into()),
                CommandStep::Finish => {
                    publish(
                        ctx,
                        command,
                        REASON_DISRUPTION_TERMINATING,
                        &format!("Disrupting Node: {}", command.reason),
                    )
                    .await;
                    return Ok(());
                }
            }
        }
    }
}

/// Taints the Nodes `names` and sets their NodeClaims' `DisruptionReason`; records the
/// outcome of each in `view`.
async fn mark(ctx: &Leader, command: &Command, names: &[String], view: &mut CommandView) {
    for candidate in command
        .candidates
        .iter()
        .filter(|c| names.contains(&c.name))
    {
        let result = async {
            set_taint(ctx, &candidate.name, true).await?;
            set_disruption_reason(ctx, &candidate.nodeclaim, Some(command.reason.as_str())).await
        }
        .await;
        let marking = match result {
            Ok(()) => Marking::Marked,
            Err(err) => {
                tracing::warn!(node = %candidate.name, error = %err, "failed to mark node for disruption");
                Marking::Failed
            }
        };
        if let Some(seen) = view
            .candidates
            .iter_mut()
            .find(|c| c.name == candidate.name)
        {
            seen.marking = marking;
        }
    }
}

/// Creates the replacements not created yet.
async fn create_replacements(
    ctx: &Leader,
    api: &Api<NodeClaim>,
    command: &Command,
    names: &mut [Option<String>],
    view: &mut CommandView,
) {
    for ((replacement, seen), named) in command
        .replacements
        .iter()
        .zip(&mut view.replacements)
        .zip(names.iter_mut())
    {
        if *seen != ReplacementView::NotCreated {
            continue;
        }
        let claim =
            match timeouts::api(api.create(&karpenter_kube::identity::post_params(), replacement))
                .await
            {
                Ok(claim) => claim,
                Err(err) => {
                    *seen = ReplacementView::LaunchFailed(format!(
                        "create replacement nodeclaim: {err}"
                    ));
                    continue;
                }
            };
        let name = claim.name_any();
        tracing::info!(nodeclaim = %name, nodepool = ?claim.nodepool_name(), "created replacement nodeclaim");
        ctx.metrics
            .nodeclaims_created
            .get_or_create(&crate::metrics::NodeClaimCreatedLabels {
                reason: command.reason.as_str().to_lowercase(),
                nodepool: claim
                    .labels()
                    .get(karpenter_api::well_known::NODEPOOL_LABEL)
                    .cloned()
                    .unwrap_or_default(),
                min_values_relaxed: "false".into(),
            })
            .inc();
        {
            // Out of every decision until the candidates are gone (their pods come here).
            let mut state = ctx.state.write();
            state.remember(claim);
            state.mark_replacing(&name, command.candidates.iter().map(|c| c.name.as_str()));
        }
        *named = Some(name);
        *seen = ReplacementView::Launching;
    }
}

/// Marks the candidates for deletion in the state (only once the replacements are launched, so
/// the provisioner does not launch for the same pods twice) and counts the decision.
async fn commit(ctx: &Leader, command: &Command, launched: bool) {
    {
        let mut state = ctx.state.write();
        for candidate in &command.candidates {
            state.mark_for_deletion(&candidate.name);
        }
    }
    ctx.metrics
        .disruption_decisions
        .get_or_create(&decision_labels(command))
        .inc();
    ctx.metrics
        .command_started(command, &decision_labels(command));
    if launched {
        publish(
            ctx,
            command,
            REASON_DISRUPTION_LAUNCHING,
            &format!("Launching NodeClaim: {}", command.reason),
        )
        .await;
    }
}

/// Reads each created replacement: initialized, still launching, or gone. A read error keeps
/// what was seen last (the next look retries).
async fn observe_replacements(
    ctx: &Leader,
    api: &Api<NodeClaim>,
    names: &[Option<String>],
    seen: &mut [ReplacementView],
) {
    for (name, seen) in names.iter().zip(seen.iter_mut()) {
        let (Some(name), ReplacementView::Launching) = (name, &*seen) else {
            continue;
        };
        match timeouts::api(api.get_opt(name)).await {
            // Not returned by the API yet but in the state: still launching (upstream).
            Ok(None) if ctx.state.read().nodeclaim(name).is_some() => {}
            Ok(None) => *seen = ReplacementView::Gone,
            Ok(Some(claim)) if karpenter_core::nodeclaim_lifecycle::is_initialized(&claim) => {
                *seen = ReplacementView::Initialized
            }
            Ok(Some(claim)) if claim.metadata.deletion_timestamp.is_some() => {
                *seen = ReplacementView::Gone
            }
            Ok(Some(_)) => {}
            Err(err) => {
                tracing::debug!(nodeclaim = %name, error = %err, "cannot read replacement; retrying")
            }
        }
    }
}

/// `karpenter_nodeclaims_disrupted_total`'s labels for a candidate a command deletes: the pool's
/// consolidation policy for a consolidation command (emptiness, multi, single), none for drift
/// (it flows through the same queue), as upstream.
fn disrupted_labels(
    ctx: &Leader,
    command: &Command,
    candidate: &DisruptedNode,
) -> NodeClaimDisruptedLabels {
    let reason = command.reason.as_str().to_lowercase();
    let state = ctx.state.read();
    let labels = match state.nodeclaim(&candidate.nodeclaim) {
        Some(claim) => NodeClaimDisruptedLabels::for_claim(reason, claim),
        None => NodeClaimDisruptedLabels {
            reason,
            nodepool: candidate.node_pool.clone(),
            capacity_type: candidate.capacity_type.clone().unwrap_or_default(),
            termination_mode: "graceful".into(),
            ..Default::default()
        },
    };
    match (command.reason, state.nodepool(&candidate.node_pool)) {
        (DisruptionReason::Drifted, _) | (_, None) => labels,
        (_, Some(pool)) => labels.consolidating(pool.consolidation_policy()),
    }
}

/// Deletes the candidates' NodeClaims `names`; termination drains them.
async fn delete_candidates(
    ctx: &Leader,
    api: &Api<NodeClaim>,
    command: &Command,
    names: &[String],
) -> Result<(), CommandError> {
    for candidate in command
        .candidates
        .iter()
        .filter(|c| names.contains(&c.name))
    {
        let deleted = timeouts::api(api.delete(&candidate.nodeclaim, &DeleteParams::default()))
            .await
            .map(|_| true)
            .or_else(|err| {
                if is_not_found(&err) {
                    Ok(false)
                } else {
                    Err(err)
                }
            })
            .map_err(|err| {
                crate::Error::kube(format!("delete nodeclaim {}", candidate.nodeclaim), err)
            })?;
        if deleted {
            let labels = disrupted_labels(ctx, command, candidate);
            ctx.metrics
                .nodeclaims_disrupted
                .get_or_create(&labels)
                .inc();
        }
    }
    Ok(())
}

/// Undoes a failed command: untaints the candidates, clears their condition, releases the
/// state marks and holds the candidates out of decisions until
/// [`command::hold_after_rollback`]. The replacements it launched stay, as upstream's queue leaves them: one that
/// initializes later is ordinary capacity (consolidation weighs it), one that never registers
/// is removed by the registration TTL. Best effort: what fails here the loop's
/// [`clean_leftovers`] retries.
async fn rollback(ctx: &Leader, command: &Command) {
    for candidate in &command.candidates {
        if let Err(err) = set_taint(ctx, &candidate.name, false).await {
            tracing::warn!(node = %candidate.name, error = %err, "failed to untaint node");
        }
        if let Err(err) = set_disruption_reason(ctx, &candidate.nodeclaim, None).await {
            tracing::warn!(nodeclaim = %candidate.nodeclaim, error = %err, "failed to clear disruption condition");
        }
    }
    // Held out of the next passes for a while, as the machine says: deciding the same command
    // at once would fail the same way.
    let now = ctx.now();
    let until = command::hold_after_rollback(now);
    let mut state = ctx.state.write();
    release(&mut state, command);
    for candidate in &command.candidates {
        state.hold_after_rollback(&candidate.name, until, now);
    }
}

/// Cleans what a crashed or failed command left behind (upstream's loop step 3): Nodes with the
/// `karpenter.sh/disrupted:NoSchedule` taint and NodeClaims with the `DisruptionReason`
/// condition that no command is working on and that are not being deleted.
pub async fn clean_leftovers(ctx: &Leader) {
    let (nodes, claims) = {
        let state = ctx.state.read();
        let mut nodes = Vec::new();
        let mut claims = Vec::new();
        for state_node in state.state_nodes() {
            let name = state_node.name();
            let claim_deleting = state_node
                .nodeclaim
                .is_some_and(|c| c.metadata.deletion_timestamp.is_some());
            if state.is_being_disrupted(&name) || state_node.marked || claim_deleting {
                continue;
            }
            if let Some(node) = state_node.node
                && node.metadata.deletion_timestamp.is_none()
                && has_disrupted_taint(node)
            {
                nodes.push(name.clone());
            }
            if let Some(claim) = state_node.nodeclaim
                && claim
                    .status
                    .as_ref()
                    .is_some_and(|s| s.condition(NODECLAIM_CONDITION_DISRUPTION_REASON).is_some())
            {
                claims.push(claim.name_any());
            }
        }
        (nodes, claims)
    };
    for node in nodes {
        tracing::info!(%node, "removing disrupted taint left by an unfinished disruption");
        if let Err(err) = set_taint(ctx, &node, false).await {
            tracing::warn!(%node, error = %err, "failed to untaint node");
        }
    }
    for claim in claims {
        if let Err(err) = set_disruption_reason(ctx, &claim, None).await {
            tracing::warn!(nodeclaim = %claim, error = %err, "failed to clear disruption condition");
        }
    }
}

pub fn has_disrupted_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|t| t.key == DISRUPTED_TAINT_KEY && t.effect == NO_SCHEDULE)
        })
}

/// Adds (`on`) or removes the disrupted taint; read-modify-write with the resourceVersion,
/// retried on conflict. A Node that is gone needs nothing.
async fn set_taint(ctx: &Leader, node_name: &str, on: bool) -> crate::Result<()> {
    let api: Api<Node> = Api::all(ctx.writer());
    for _ in 0..CONFLICT_RETRIES {
        let Some(mut node) = timeouts::api(api.get_opt(node_name))
            .await
            .map_err(|err| crate::Error::kube(format!("get node {node_name}"), err))?
        else {
            return Ok(());
        };
        if has_disrupted_taint(&node) == on {
            return Ok(());
        }
        let taints = node
            .spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new);
        if on {
            taints.push(Taint {
                key: DISRUPTED_TAINT_KEY.into(),
                effect: NO_SCHEDULE.into(),
                ..Taint::default()
            });
        } else {
            taints.retain(|t| !(t.key == DISRUPTED_TAINT_KEY && t.effect == NO_SCHEDULE));
        }
        match timeouts::api(api.replace(node_name, &karpenter_kube::identity::post_params(), &node))
            .await
        {
            Ok(updated) => {
                ctx.state.write().remember(updated);
                return Ok(());
            }
            Err(err) if karpenter_kube::is_conflict(&err) => continue,
            Err(err) if is_not_found(&err) => return Ok(()),
            Err(err) => return Err(crate::Error::kube(format!("taint node {node_name}"), err)),
        }
    }
    Err(crate::Error::ControllerFailed(format!(
        "node {node_name}: conflicting writers, giving up for now"
    )))
}

/// Sets the NodeClaim's `DisruptionReason` condition to `reason`, or clears it (`None`).
async fn set_disruption_reason(
    ctx: &Leader,
    claim_name: &str,
    reason: Option<&str>,
) -> crate::Result<()> {
    let api: Api<NodeClaim> = Api::all(ctx.writer());
    for _ in 0..CONFLICT_RETRIES {
        let Some(mut claim) = timeouts::api(api.get_opt(claim_name))
            .await
            .map_err(|err| crate::Error::kube(format!("get nodeclaim {claim_name}"), err))?
        else {
            return Ok(());
        };
        let generation = claim.metadata.generation;
        let status = claim.status.get_or_insert_with(Default::default);
        let changed = match reason {
            Some(reason) => status.set_condition(
                NODECLAIM_CONDITION_DISRUPTION_REASON,
                CONDITION_TRUE,
                reason,
                &format!("Disrupting NodeClaim: {reason}"),
                &now_rfc3339(ctx.now()),
                generation,
            ),
            None => status.clear_condition(NODECLAIM_CONDITION_DISRUPTION_REASON),
        };
        if !changed {
            return Ok(());
        }
        match timeouts::api(api.replace_status(
            claim_name,
            &karpenter_kube::identity::post_params(),
            &claim,
        ))
        .await
        {
            Ok(updated) => {
                ctx.state.write().remember(updated);
                return Ok(());
            }
            Err(err) if karpenter_kube::is_conflict(&err) => continue,
            Err(err) if is_not_found(&err) => return Ok(()),
            Err(err) => {
                return Err(crate::Error::kube(
                    format!("update nodeclaim {claim_name} status"),
                    err,
                ));
            }
        }
    }
    Err(crate::Error::ControllerFailed(format!(
        "nodeclaim {claim_name}: conflicting writers, giving up for now"
    )))
}

fn now_rfc3339(now: Timestamp) -> String {
    now.to_string()
}

/// Publishes an event on every candidate's Node and NodeClaim (those the state still holds).
async fn publish(ctx: &Context, command: &Command, reason: &str, message: &str) {
    let records: Vec<EventRecord> = {
        let state = ctx.state.read();
        command
            .candidates
            .iter()
            .flat_map(|c| {
                let node = state
                    .node(&c.name)
                    .map(|n| EventRecord::new(n, EventType::Normal, reason, message));
                let claim = state
                    .nodeclaim(&c.nodeclaim)
                    .map(|n| EventRecord::new(n, EventType::Normal, reason, message));
                node.into_iter().chain(claim)
            })
            .collect()
    };
    for record in records {
        ctx.events.publish(record).await;
    }
}

pub(crate) fn decision_labels(command: &Command) -> DisruptionDecisionLabels {
    DisruptionDecisionLabels {
        decision: command.decision().as_str().into(),
        reason: command.reason.as_str().to_lowercase(),
        consolidation_type: consolidation_type(command.method).into(),
    }
}

/// Upstream's `consolidation_type` label: `empty`, `single`, `multi`; drift has none.
fn consolidation_type(method: Method) -> &'static str {
    match method {
        Method::Emptiness | Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
            method.as_str()
        }
        Method::StaticDrift | Method::Drift => "",
    }
}

/// Upstream's command string: `Empty: delete: nodepools=[default]: [node-a] -> [] (savings: $0.10)`.
pub fn describe(command: &Command) -> String {
    let pools: BTreeSet<&str> = command
        .candidates
        .iter()
        .map(|c| c.node_pool.as_str())
        .collect();
    let nodes: Vec<&str> = command.candidates.iter().map(|c| c.name.as_str()).collect();
    format!(
        "{}: {}: nodepools=[{}]: [{}] -> [{} replacement(s)] (savings: ${:.2})",
        command.reason,
        command.decision().as_str(),
        pools.into_iter().collect::<Vec<_>>().join(", "),
        nodes.join(", "),
        command.replacements.len(),
        command.savings_per_hour
    )
}
