//! When `simulate --disruption` decides: at the instants the controller's disruption loop
//! (`karpenter_controller::disruption::run`) would run a pass, and only at those whose decision
//! could differ from the last one.
//!
//! The controller ticks, after each tick, once its wait is over: [`POLL`] (upstream's
//! `pollingPeriod`), shortened to the instant a node it left alone frees (a
//! `karpenter.sh/do-not-disrupt` duration or `consolidateAfter` running out, a rolled-back
//! command's hold ending — [`karpenter_core::disruption::candidates::BlockReason::frees_at`]) or the next expiry, and to
//! [`AFTER_ACTION`] when the tick started commands. A consolidation tick waits the 15 s
//! validation delay before its 10 s wait starts; an instant it wakes
//! for stays where it is. What the orchestration does meanwhile (a
//! replacement initializing, a pod gone, an instance gone) happens at its own instant, between
//! ticks.
//!
//! [`core's decide`](karpenter_core::disruption::decide) is pure: on the cluster it decided on
//! last time, before any instant the last pass named, it decides the same again (and a
//! consolidation that its validation rejected is rejected again). So the run skips those ticks:
//! it decides at the first tick at which the cluster changed since the last pass, at an instant
//! the controller wakes for, or at the first tick after an instant from which another decision
//! becomes possible without the controller waking for it (another node's `consolidateAfter`
//! window, a budget schedule's minute). Without the skip, a consolidation that its validation
//! keeps rejecting would be decided every 25 s for the whole `--until`.

use jiff::{SignedDuration, Timestamp};
use karpenter_core::disruption::Pass;

/// Upstream polls the disruption loop every 10 s (the controller's `POLL_PERIOD`).
pub const POLL: SignedDuration = SignedDuration::from_secs(10);

/// How soon the controller's loop runs again after a tick started commands (its
/// `AFTER_ACTION`).
pub const AFTER_ACTION: SignedDuration = SignedDuration::from_secs(1);

/// The controller's shortest wait for an instant it wakes at (its 100 ms floor).
const MIN_WAIT: SignedDuration = SignedDuration::from_millis(100);

/// The controller's tick schedule and what the last pass saw.
#[derive(Clone, Debug)]
pub struct Polls {
    /// The controller's next tick: the end of the last one plus its wait.
    next_tick: Timestamp,
    /// The cluster's change count when the last pass read it (`None`: no pass yet).
    seen: Option<u64>,
    /// The first instant after the last pass at which the cluster had changed.
    changed_since: Option<Timestamp>,
    /// The earliest instant the controller wakes for, named by the last pass.
    wake: Option<Timestamp>,
    /// The earliest instant from which the pass could decide otherwise though the controller
    /// does not wake for it: the first tick at or after it decides.
    later: Option<Timestamp>,
}

impl Polls {
    /// The first tick is at `start` (the controller looks at once when it becomes leader).
    pub fn new(start: Timestamp) -> Self {
        Polls {
            next_tick: start,
            seen: None,
            changed_since: Some(start),
            wake: None,
            later: None,
        }
    }

    /// Notes the cluster's change count at `now`, at each step before deciding whether to pass.
    pub fn observe(&mut self, changes: u64, now: Timestamp) {
        if self.seen != Some(changes) && self.changed_since.is_none() {
            self.changed_since = Some(now);
        }
    }

    /// The next instant at or after `now` at which the loop decides, if any: the first tick
    /// whose decision could differ from the last pass's.
    pub fn next_pass(&self, now: Timestamp) -> Option<Timestamp> {
        // A tick at or after the last pass's wake instant could differ: the first is the
        // scheduled one or the wake instant itself.
        let woken = self.wake.map(|wake| wake.max(self.next_tick));
        let ticked = [self.changed_since, self.later]
            .into_iter()
            .flatten()
            .min()
            .map(|from| self.first_tick_from(from.max(now)));
        [woken, ticked]
            .into_iter()
            .flatten()
            .min()
            .map(|at| at.max(now))
    }

    /// The first of the controller's ticks `next_tick + k * POLL` at or after `from`, had it
    /// kept ticking with nothing to wake it sooner.
    fn first_tick_from(&self, from: Timestamp) -> Timestamp {
        if from <= self.next_tick {
            return self.next_tick;
        }
        let behind = from.duration_since(self.next_tick).as_nanos();
        let period = POLL.as_nanos();
        let periods = behind.div_euclid(period) + i128::from(behind.rem_euclid(period) != 0);
        let ahead = i64::try_from(periods)
            .ok()
            .and_then(|p| POLL.checked_mul(i32::try_from(p).ok()?));
        ahead
            .and_then(|d| self.next_tick.checked_add(d).ok())
            .unwrap_or(from)
    }

    /// Records a pass at `now` on the cluster at change count `changes`: `pass` names the
    /// instants a node frees, `expiry` is the next expiry, `later` the earliest other instant
    /// from which the pass could decide otherwise; `started`: its commands started at once (a
    /// consolidation's wait for its validation instead, which [`Polls::validated`] reports).
    pub fn passed(
        &mut self,
        now: Timestamp,
        changes: u64,
        pass: &Pass,
        expiry: Option<Timestamp>,
        later: Option<Timestamp>,
        started: bool,
    ) {
        self.seen = Some(changes);
        self.changed_since = None;
        self.wake = pass
            .blocked
            .iter()
            .filter_map(|r| r.reason.frees_at())
            .chain(expiry)
            .filter(|at| *at > now)
            .min();
        self.later = later.filter(|at| *at > now);
        self.next_tick = self.tick_after(now, started);
    }

    /// The tick ended at `now` (after the validation delay, for a consolidation), having
    /// started commands or not.
    pub fn validated(&mut self, now: Timestamp, started: bool) {
        self.next_tick = self.tick_after(now, started);
    }

    /// The controller's next tick after one that began at `began` and ended at `ended`: the 10 s
    /// poll runs from the end (upstream requeues after its reconcile), an instant the pass named
    /// is kept as it is (at least [`MIN_WAIT`] after the end).
    fn tick_after(&self, ended: Timestamp, started: bool) -> Timestamp {
        let mut wait = POLL;
        if let Some(wake) = self.wake {
            wait = wait.min(wake.duration_since(ended).max(MIN_WAIT));
        }
        if started {
            wait = wait.min(AFTER_ACTION);
        }
        ended.checked_add(wait).unwrap_or(ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::disruption::candidates::{BlockReason, Rejection};

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn pass(frees_at: Option<i64>) -> Pass {
        let mut pass = Pass::default();
        if let Some(s) = frees_at {
            pass.blocked.push(Rejection {
                name: "n".into(),
                nodepool: Some("default".into()),
                reason: BlockReason::ConsolidatableAt(at(s)),
            });
        }
        pass
    }

    #[test]
    fn the_first_pass_is_at_the_start() {
        let polls = Polls::new(at(0));
        assert_eq!(polls.next_pass(at(0)), Some(at(0)));
    }

    #[test]
    fn an_unchanged_cluster_with_nothing_named_is_not_decided_again() {
        let mut polls = Polls::new(at(0));
        polls.observe(3, at(0));
        polls.passed(at(0), 3, &pass(None), None, None, false);
        polls.observe(3, at(25));
        assert_eq!(polls.next_pass(at(25)), None);
    }

    #[test]
    fn a_change_between_ticks_is_decided_at_the_next_tick() {
        let mut polls = Polls::new(at(0));
        polls.passed(at(0), 3, &pass(None), None, None, false);
        // A pod terminated at +13 s: the ticks are at +10, +20, …
        polls.observe(4, at(13));
        assert_eq!(polls.next_pass(at(13)), Some(at(20)));
        // Nothing else changes; the loop comes back at +20.
        polls.observe(4, at(20));
        assert_eq!(polls.next_pass(at(20)), Some(at(20)));
    }

    #[test]
    fn a_tick_that_started_commands_is_followed_one_second_later() {
        let mut polls = Polls::new(at(0));
        polls.passed(at(0), 3, &pass(None), None, None, true);
        // The commands' writes changed the cluster.
        polls.observe(5, at(0));
        assert_eq!(polls.next_pass(at(0)), Some(at(1)));
    }

    #[test]
    fn a_node_freeing_wakes_the_loop_at_its_instant() {
        let mut polls = Polls::new(at(0));
        polls.passed(at(0), 3, &pass(Some(127)), None, None, false);
        assert_eq!(polls.next_pass(at(0)), Some(at(127)));
        // Sooner than a poll: the controller shortens its wait to it.
        polls.passed(at(0), 3, &pass(Some(4)), None, None, false);
        assert_eq!(polls.next_pass(at(0)), Some(at(4)));
        // An expiry too.
        polls.passed(at(0), 3, &pass(None), Some(at(33)), None, false);
        assert_eq!(polls.next_pass(at(0)), Some(at(33)));
    }

    #[test]
    fn an_instant_the_controller_does_not_wake_for_is_seen_at_the_next_tick() {
        let mut polls = Polls::new(at(0));
        polls.passed(at(0), 3, &pass(None), None, Some(at(61)), false);
        assert_eq!(polls.next_pass(at(0)), Some(at(70)));
    }

    /// The controller measures the instants it wakes for when its tick ends: a node freeing at
    /// +20 s, named by a tick at 0 whose validation ran to +15 s, is looked at at +20 s (it
    /// was +35 s, the wait measured at the start but run from the end).
    #[test]
    fn a_node_freeing_during_the_validation_wakes_the_loop_at_its_instant() {
        let mut polls = Polls::new(at(0));
        polls.passed(at(0), 3, &pass(Some(20)), None, None, false);
        polls.validated(at(15), false);
        assert_eq!(polls.next_pass(at(15)), Some(at(20)));
    }

    #[test]
    fn a_validated_tick_waits_from_its_end() {
        let mut polls = Polls::new(at(0));
        polls.passed(at(0), 3, &pass(None), None, None, true);
        // Rejected at +15 s, nothing changed: no further pass.
        polls.validated(at(15), false);
        polls.observe(3, at(15));
        assert_eq!(polls.next_pass(at(15)), None);
        // Started at +15 s: the commands' writes are decided on at +16 s.
        polls.validated(at(15), true);
        polls.observe(4, at(15));
        assert_eq!(polls.next_pass(at(15)), Some(at(16)));
        // Rejected, and something changed at +18 s: the next tick, +25 s.
        polls.validated(at(15), false);
        polls.observe(4, at(18));
        assert_eq!(polls.next_pass(at(18)), Some(at(25)));
    }
}
