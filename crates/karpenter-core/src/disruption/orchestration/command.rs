//! One command through upstream's orchestration queue (karpenter-core §4.12).
//!
//! Marking first (taint `karpenter.sh/disrupted:NoSchedule`, NodeClaim condition
//! `DisruptionReason`) keeps new pods off the candidates while the replacements start. The
//! candidates are deleted only once every replacement is initialized, so their pods always
//! have somewhere to go. A replacement that fails to launch, disappears before it initializes,
//! or is not initialized by the deadline rolls the command back: the candidates are untainted
//! and released. The replacements stay, as upstream leaves them: one that initializes later is
//! ordinary capacity that consolidation weighs, one that never registers is removed by the
//! NodeClaim registration TTL.

use jiff::{SignedDuration, Timestamp};

/// Upstream's command timeout: 80 ms per command in the queue, clamped to [10 min, 1 h].
pub const TIMEOUT_PER_QUEUED_COMMAND: SignedDuration = SignedDuration::from_millis(80);
pub const MIN_REPLACEMENT_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);
pub const MAX_REPLACEMENT_TIMEOUT: SignedDuration = SignedDuration::from_hours(1);

/// How long a rolled-back command's candidates stay out of the passes' decisions. Upstream
/// does not re-run a failed command's decision at once: a replacement that could not launch
/// marks its offering unavailable for `UnavailableOfferingsTTL` (3 minutes), and the loop
/// re-evaluates because the cluster changed (the replacement NodeClaim came and went). Without
/// such a memory the next pass (1 s later) decides the same command on the same offerings and
/// fails the same way, tainting and untainting the candidates in a loop. The candidates are
/// held for upstream's TTL, after which the same decision may come back (the cluster or the
/// offerings may have changed meanwhile).
pub const ROLLBACK_HOLD: SignedDuration = SignedDuration::from_mins(3);

/// The instant until which the candidates of a command rolled back at `now` are held out of
/// decisions ([`ROLLBACK_HOLD`]).
pub fn hold_after_rollback(now: Timestamp) -> Timestamp {
    now.checked_add(ROLLBACK_HOLD).unwrap_or(now)
}

/// How long a command may wait for its replacements with `queued` commands in the queue.
pub fn replacement_timeout(queued: usize) -> SignedDuration {
    let queued = i32::try_from(queued).unwrap_or(i32::MAX);
    TIMEOUT_PER_QUEUED_COMMAND
        .checked_mul(queued)
        .unwrap_or(MAX_REPLACEMENT_TIMEOUT)
        .clamp(MIN_REPLACEMENT_TIMEOUT, MAX_REPLACEMENT_TIMEOUT)
}

/// Whether a candidate carries the command's marks (taint and `DisruptionReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marking {
    NotYet,
    Marked,
    /// The write failed (conflict, API error).
    Failed,
}

/// One candidate as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateView {
    /// The Node's name.
    pub name: String,
    pub marking: Marking,
    /// Its NodeClaim is deleting (or gone): the termination machine has it.
    pub deleting: bool,
}

/// One replacement the command asked for, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplacementView {
    NotCreated,
    /// Creation failed: no offering, an API error.
    LaunchFailed(String),
    /// Created, not initialized yet.
    Launching,
    Initialized,
    /// Deleted before it initialized (insufficient capacity, the liveness TTL).
    Gone,
}

/// What the machine needs to know of one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandView {
    /// When the command was accepted.
    pub started_at: Timestamp,
    /// How long the replacements may take ([`replacement_timeout`], or the controller's
    /// `--disruption-replacement-timeout`).
    pub timeout: SignedDuration,
    pub candidates: Vec<CandidateView>,
    pub replacements: Vec<ReplacementView>,
    /// The [`CommandStep::Commit`] step was taken.
    pub committed: bool,
}

/// Why a command is rolled back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("no candidate could be marked for disruption")]
    NothingMarked,
    #[error("a candidate could not be marked and the command launches replacements")]
    PartlyMarked,
    #[error("a replacement could not launch: {0}")]
    LaunchFailed(String),
    #[error("a replacement nodeclaim was deleted before it initialized")]
    ReplacementDeleted,
    #[error("replacements were not initialized within {0:?}")]
    Timeout(SignedDuration),
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandStep {
    /// Taint these candidates' Nodes and set their NodeClaims' `DisruptionReason`.
    Mark(Vec<String>),
    /// A delete-only command goes on without these candidates, whose marking failed: release
    /// them.
    Drop(Vec<String>),
    /// Create every replacement not created yet.
    CreateReplacements,
    /// Every replacement is launched (or none is needed): mark the candidates for deletion in
    /// the state (only now, so the provisioner does not launch for the same pods twice) and
    /// count the decision.
    Commit,
    /// Keep waiting until the replacements are initialized, at most until this deadline.
    WaitForInitialization { deadline: Timestamp },
    /// Delete these candidates' NodeClaims; termination drains them.
    DeleteCandidates(Vec<String>),
    /// Untaint the candidates, clear their `DisruptionReason`, release them, and hold them out
    /// of decisions until [`hold_after_rollback`]. The replacements stay (see the module's
    /// comment).
    RollBack(Failure),
    /// The command is done.
    Finish,
}

/// The machine's answer: steps in order, and when to look again (`None` with steps to take:
/// as soon as they are taken).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandPlan {
    pub steps: Vec<CommandStep>,
    pub look_again: Option<Timestamp>,
}

impl CommandPlan {
    fn now(step: CommandStep) -> Self {
        CommandPlan {
            steps: vec![step],
            look_again: None,
        }
    }

    /// The command has ended (finished or rolled back).
    pub fn is_final(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s, CommandStep::Finish | CommandStep::RollBack(_)))
    }
}

/// The deadline for the replacements of `view`.
pub fn deadline(view: &CommandView) -> Timestamp {
    view.started_at
        .checked_add(view.timeout)
        .unwrap_or(view.started_at)
}

/// The next step of the command observed as `view` at `now`.
pub fn next(view: &CommandView, now: Timestamp) -> CommandPlan {
    let names = |pick: &dyn Fn(&CandidateView) -> bool| -> Vec<String> {
        view.candidates
            .iter()
            .filter(|c| pick(c))
            .map(|c| c.name.clone())
            .collect()
    };
    // 1. Mark.
    let unmarked = names(&|c| c.marking == Marking::NotYet);
    if !unmarked.is_empty() {
        return CommandPlan::now(CommandStep::Mark(unmarked));
    }
    let failed = names(&|c| c.marking == Marking::Failed);
    if failed.len() == view.candidates.len() {
        return CommandPlan::now(CommandStep::RollBack(Failure::NothingMarked));
    }
    if !failed.is_empty() {
        if !view.replacements.is_empty() {
            return CommandPlan::now(CommandStep::RollBack(Failure::PartlyMarked));
        }
        return CommandPlan::now(CommandStep::Drop(failed));
    }
    // 2. Launch.
    if let Some(message) = view.replacements.iter().find_map(|r| match r {
        ReplacementView::LaunchFailed(message) => Some(message.clone()),
        _ => None,
    }) {
        return CommandPlan::now(CommandStep::RollBack(Failure::LaunchFailed(message)));
    }
    if view.replacements.contains(&ReplacementView::NotCreated) {
        return CommandPlan::now(CommandStep::CreateReplacements);
    }
    if !view.committed {
        return CommandPlan::now(CommandStep::Commit);
    }
    // 3. Wait for initialization, until the deadline.
    if view.replacements.contains(&ReplacementView::Gone) {
        return CommandPlan::now(CommandStep::RollBack(Failure::ReplacementDeleted));
    }
    if view
        .replacements
        .iter()
        .any(|r| *r != ReplacementView::Initialized)
    {
        let deadline = deadline(view);
        if now >= deadline {
            return CommandPlan::now(CommandStep::RollBack(Failure::Timeout(view.timeout)));
        }
        return CommandPlan {
            steps: vec![CommandStep::WaitForInitialization { deadline }],
            look_again: Some(deadline),
        };
    }
    // 4. Delete the candidates.
    let standing = names(&|c| !c.deleting);
    if !standing.is_empty() {
        return CommandPlan::now(CommandStep::DeleteCandidates(standing));
    }
    CommandPlan::now(CommandStep::Finish)
}

#[cfg(test)]
#[path = "command_tests.rs"]
mod tests;
