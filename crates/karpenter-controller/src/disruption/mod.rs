//! The disruption loop on the cluster (issue 10, karpenter-core §4): the leader, every
//! [`POLL_PERIOD`] once the state is synced,
//! 1. cleans what an unfinished command left (disrupted taint, `DisruptionReason` condition);
//! 2. deletes expired NodeClaims ([`expiration`], forceful, no budgets) and, with the
//!    `NodeRepair` gate, those of nodes unhealthy past the provider's toleration ([`repair`]);
//! 3. writes the `Consolidatable` and `Drifted` conditions where they changed ([`conditions`]);
//!    `Drifted` also at once when a NodePool or NodeClass changes (`Context::templates_changed`),
//!    as upstream's NodeClaim disruption controller follows its NodePool's events;
//! 4. unless the provisioner has work (pending pods, NodeClaims not initialized), runs one pass
//!    of the pure [`karpenter_core::disruption::decide`] ([`pass`]), publishes its events and
//!    metrics, waits [`pass::VALIDATION_DELAY`] and re-validates consolidation commands, and
//!    hands the commands to the orchestration [`queue`], each in its own task. A tick skipped
//!    for the provisioner looks again every [`BUSY_RECHECK`] and runs the pass as soon as it is
//!    done.
//!
//! Budgets bound what is in flight: the queue's candidates are "being disrupted" in the state,
//! which the next pass's budgets count.

pub mod conditions;
pub mod expiration;
pub mod pass;
pub mod queue;
pub mod repair;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use karpenter_core::disruption::Command;
use karpenter_kube::stopped;
use tokio::sync::watch;
use tokio::task::{Id, JoinSet};

use crate::context::Context;
use crate::writes::Leader;

/// How often the loop runs when no method acted (upstream `pollingPeriod`).
pub const POLL_PERIOD: Duration = Duration::from_secs(10);

/// How soon the loop runs again after a method acted (upstream requeues at once; a second
/// lets the watch deliver the command's writes first).
pub const AFTER_ACTION: Duration = Duration::from_secs(1);

/// How often a loop that skipped its pass for the provisioner looks again whether the
/// provisioner is done (a read of the state): the pass then runs at once instead of up to a
/// poll period later. After each consolidation command the evicted pods and the replacements
/// keep the provisioner busy a few seconds; waiting out the poll period after each made every
/// command of a long consolidation ~10 s slower (upstream requeues at once after an action).
pub const BUSY_RECHECK: Duration = Duration::from_secs(1);

/// What one tick did (for logs and tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TickOutcome {
    pub expired: bool,
    /// Why voluntary disruption was skipped, if it was.
    pub skipped: Option<String>,
    /// Commands handed to the queue.
    pub started: usize,
}

/// The commands in flight, by task, with their candidates (released if the task is aborted),
/// and the Nodes finished commands left marked for deletion.
#[derive(Default)]
struct InFlight {
    tasks: JoinSet<Vec<String>>,
    commands: HashMap<Id, Command>,
    deleting: BTreeSet<String>,
}

impl InFlight {
    fn spawn(&mut self, ctx: &Leader, command: Command) {
        let task_ctx = ctx.clone();
        let running = command.clone();
        let handle = self.tasks.spawn(async move {
            let timeout = task_ctx.settings.disruption_replacement_timeout;
            queue::execute(&task_ctx, running, timeout)
                .await
                .unwrap_or_default()
        });
        self.commands.insert(handle.id(), command);
    }

    /// Stops every command (leadership lost, shutdown) and releases their candidates in the
    /// state; the next leader's clean-up untaints them.
    /// Unmarks the Nodes of finished commands once the state no longer holds them: a later
    /// Node with the same name (EC2 names are IP-based) starts unmarked.
    fn forget_removed(&mut self, ctx: &Context) {
        if self.deleting.is_empty() {
            return;
        }
        let mut state = ctx.state.write();
        self.deleting.retain(|name| {
            let present = state.node(name).is_some();
            if !present {
                state.unmark_for_deletion(name);
            }
            present
        });
    }

    fn abort_all(&mut self, ctx: &Context) {
        self.tasks.abort_all();
        let mut state = ctx.state.write();
        for (_, command) in self.commands.drain() {
            queue::release(&mut state, &command);
        }
        state.clear_replacing();
    }
}

/// Runs the loop until `shutdown` turns true. Only the leader acts.
pub async fn run(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut in_flight = InFlight::default();
    let mut notices = Notices::default();
    let mut holds = repair::RepairHolds::default();
    let mut leadership = ctx.leadership();
    let mut starts = ctx.work_starts();
    let mut next = tokio::time::Instant::now();
    // After a tick skipped for the provisioner: when its full wait ends.
    let mut busy_until: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => break,
            // A new leader looks at once (the sleep arm fires next).
            () = starts.next() => next = tokio::time::Instant::now(),
            Some(done) = in_flight.tasks.join_next_with_id() => {
                let id = match done {
                    Ok((id, marked)) => {
                        in_flight.deleting.extend(marked);
                        id
                    }
                    Err(err) => err.id(),
                };
                in_flight.commands.remove(&id);
            }
            Ok(()) = leadership.changed() => {
                if !ctx.is_leader() {
                    in_flight.abort_all(&ctx);
                }
            }
            () = ctx.templates_changed.notified() => {
                if let Some(leader) = ctx.working() {
                    let types = pass::instance_types(&leader).await;
                    let drift = pass::provider_drift(&leader).await;
                    conditions::update_drifted(&leader, &types, &drift).await;
                }
            }
            () = tokio::time::sleep_until(next) => {
                let now = tokio::time::Instant::now();
                if let Some(until) = busy_until
                    && now < until
                    && pass::busy_provisioning(&ctx).is_some()
                {
                    next = (now + BUSY_RECHECK).min(until);
                    continue;
                }
                busy_until = None;
                let wait = if let Some(leader) = ctx.working() {
                    let (outcome, wait) = tick(&leader, &mut in_flight, &mut notices, &mut holds, &mut shutdown).await;
                    if outcome.started > 0 {
                        tracing::debug!(?outcome, "disruption pass");
                    }
                    if outcome.skipped.is_some() && wait > BUSY_RECHECK {
                        busy_until = Some(tokio::time::Instant::now() + wait);
                        BUSY_RECHECK
                    } else {
                        wait
                    }
                } else {
                    AFTER_ACTION
                };
                next = tokio::time::Instant::now() + wait;
            }
        }
    }
    in_flight.abort_all(&ctx);
}

/// What the loop remembers between passes so each event is published once.
#[derive(Debug, Default)]
struct Notices {
    blocked: pass::BlockedEvents,
    invalid: pass::InvalidDoNotDisruptEvents,
}

/// One tick of the loop (see the module docs); returns what it did and how long to wait.
async fn tick(
    ctx: &Leader,
    in_flight: &mut InFlight,
    notices: &mut Notices,
    holds: &mut repair::RepairHolds,
    shutdown: &mut watch::Receiver<bool>,
) -> (TickOutcome, Duration) {
    let mut outcome = TickOutcome::default();
    in_flight.forget_removed(ctx);
    queue::clean_leftovers(ctx).await;
    let next_expiry = expiration::delete_expired(ctx).await;
    let next_repair = repair::repair_unhealthy(ctx, holds).await;
    // Instants the loop wakes at (an expiry, a repair, a node freeing), measured when the tick
    // ends: a consolidation tick spends its 15 s validation in between, and a wait measured at
    // its start but run from its end woke 15 s late.
    let mut wake: Vec<jiff::Timestamp> = [next_expiry, next_repair].into_iter().flatten().collect();
    let wait = |wake: &[jiff::Timestamp]| wait_until_next(ctx.now(), wake);
    let types = pass::instance_types(ctx).await;
    let drift = pass::provider_drift(ctx).await;
    conditions::update_consolidatable(ctx, &types).await;
    conditions::update_drifted(ctx, &types, &drift).await;
    if let Some(why) = pass::busy_provisioning(ctx) {
        tracing::debug!(reason = %why, "waiting for provisioning before disrupting");
        outcome.skipped = Some(why);
        return (outcome, wait(&wake));
    }
    let started = std::time::Instant::now();
    let decided = pass::decide_now(ctx, &types, &drift);
    let mut events = pass::record_metrics(ctx, &decided, &types, started.elapsed());
    events.extend(pass::record_moves(ctx, &decided));
    events.extend(notices.invalid.fresh(ctx));
    for event in events {
        ctx.events.publish(event).await;
    }
    notices.blocked.publish(ctx, &decided.blocked).await;
    // A node held by a do-not-disrupt duration (or consolidateAfter) is looked at again the
    // moment it frees, not up to a poll period later.
    if let Some(at) = pass::next_unblock(&decided)
        && at.duration_since(ctx.now()).is_positive()
    {
        wake.push(at);
    }
    let Some(method) = decided.method else {
        return (outcome, wait(&wake));
    };
    let mut commands = decided.commands;
    for command in &commands {
        pass::publish_candidates(ctx, command).await;
    }
    if pass::needs_validation(method) {
        let validate_at = tokio::time::Instant::now() + pass::VALIDATION_DELAY;
        loop {
            tokio::select! {
                () = stopped(shutdown) => return (outcome, wait(&wake)),
                () = tokio::time::sleep_until(validate_at) => break,
                // A template change marks drift at once, as between ticks: upstream's drift
                // marking does not wait for a command's validation.
                () = ctx.templates_changed.notified() => {
                    let types = pass::instance_types(ctx).await;
                    let drift = pass::provider_drift(ctx).await;
                    conditions::update_drifted(ctx, &types, &drift).await;
                }
            }
        }
        let mut valid = Vec::with_capacity(commands.len());
        for command in commands {
            match pass::validate_now(ctx, &types, &drift, &command) {
                Ok(runnable) => {
                    if runnable.candidates.len() < command.candidates.len() {
                        tracing::info!(command = %queue::describe(&command), kept = runnable.candidates.len(), "some nodes of the command are no longer empty: deleting the others");
                    }
                    valid.push(runnable)
                }
                Err(why) => {
                    tracing::info!(command = %queue::describe(&command), reason = %why, "abandoning disruption command: no longer valid");
                    pass::publish_rejected(ctx, &command, &why).await;
                }
            }
        }
        commands = valid;
    }
    for command in commands {
        if !queue::claim(&mut ctx.state.write(), &command) {
            continue;
        }
        in_flight.spawn(ctx, command);
        outcome.started += 1;
    }
    let mut wait = wait(&wake);
    if outcome.started > 0 {
        wait = wait.min(AFTER_ACTION);
    }
    (outcome, wait)
}

/// The shortest wait for an instant the loop wakes at (it never spins).
const MIN_WAIT: Duration = Duration::from_millis(100);

/// How long the loop waits after a tick ending at `now`: until the earliest of `wake` (an
/// instant already past wakes it after [`MIN_WAIT`]), at most [`POLL_PERIOD`].
fn wait_until_next(now: jiff::Timestamp, wake: &[jiff::Timestamp]) -> Duration {
    wake.iter().fold(POLL_PERIOD, |wait, at| {
        let until = at.duration_since(now);
        let until = if until.is_positive() {
            until.unsigned_abs()
        } else {
            Duration::ZERO
        };
        wait.min(until.max(MIN_WAIT))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_waits_for_its_earliest_wake_instant_within_a_poll_period() {
        let now = jiff::Timestamp::from_second(1_000).unwrap();
        let at = |secs: i64| {
            now.checked_add(jiff::SignedDuration::from_secs(secs))
                .unwrap()
        };
        assert_eq!(wait_until_next(now, &[]), POLL_PERIOD);
        assert_eq!(wait_until_next(now, &[at(60)]), POLL_PERIOD);
        assert_eq!(
            wait_until_next(now, &[at(7), at(3), at(60)]),
            Duration::from_secs(3)
        );
        // A wake instant that passed while the tick ran (a 15 s validation) wakes it at once,
        // without spinning.
        assert_eq!(wait_until_next(now, &[at(-5), at(3)]), MIN_WAIT);
        assert_eq!(wait_until_next(now, &[now]), MIN_WAIT);
    }
}
