//! Upstream's orchestration queue tests (`pkg/controllers/disruption/queue_test.go`), as tests
//! of the pure machine, named after upstream's `It`s.

use super::*;

fn t0() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

fn at(seconds: i64) -> Timestamp {
    t0().checked_add(SignedDuration::from_secs(seconds))
        .unwrap()
}

fn candidate(name: &str, marking: Marking) -> CandidateView {
    CandidateView {
        name: name.into(),
        marking,
        deleting: false,
    }
}

fn view(candidates: Vec<CandidateView>, replacements: Vec<ReplacementView>) -> CommandView {
    CommandView {
        started_at: t0(),
        timeout: replacement_timeout(1),
        // A view whose candidates are marked and replacements launched is past the commit.
        committed: candidates.iter().all(|c| c.marking == Marking::Marked)
            && !replacements.contains(&ReplacementView::NotCreated),
        candidates,
        replacements,
    }
}

/// Applies the machine's steps to `view` the way an executor whose writes all succeed does,
/// with the replacements as `replacements_become` says once created; returns the steps seen.
fn run_to_end(
    mut view: CommandView,
    now: Timestamp,
    replacements_become: ReplacementView,
) -> Vec<CommandStep> {
    let mut seen = Vec::new();
    for _ in 0..20 {
        let plan = next(&view, now);
        for step in &plan.steps {
            match step {
                CommandStep::Mark(names) => view
                    .candidates
                    .iter_mut()
                    .filter(|c| names.contains(&c.name))
                    .for_each(|c| c.marking = Marking::Marked),
                CommandStep::Drop(names) => view.candidates.retain(|c| !names.contains(&c.name)),
                CommandStep::CreateReplacements => view
                    .replacements
                    .iter_mut()
                    .for_each(|r| *r = replacements_become.clone()),
                CommandStep::Commit => view.committed = true,
                CommandStep::DeleteCandidates(_) => {
                    view.candidates.iter_mut().for_each(|c| c.deleting = true)
                }
                _ => {}
            }
        }
        let done = plan.is_final() || plan.look_again.is_some();
        seen.extend(plan.steps);
        if done {
            break;
        }
    }
    seen
}

#[test]
fn should_keep_nodes_tainted_when_replacements_havent_finished_initialization() {
    let v = view(
        vec![candidate("n1", Marking::Marked)],
        vec![ReplacementView::Launching],
    );
    let plan = next(&v, at(30));
    assert_eq!(
        plan.steps,
        [CommandStep::WaitForInitialization { deadline: at(600) }]
    );
    assert_eq!(plan.look_again, Some(at(600)));
    assert!(!plan.is_final(), "no rollback: the taint stays");
}

#[test]
fn should_not_return_an_error_when_handling_commands_before_the_timeout() {
    let v = view(
        vec![candidate("n1", Marking::Marked)],
        vec![ReplacementView::Launching],
    );
    let plan = next(&v, at(599));
    assert!(
        !plan
            .steps
            .iter()
            .any(|s| matches!(s, CommandStep::RollBack(_))),
        "{plan:?}"
    );
}

#[test]
fn should_not_return_an_error_when_the_nodeclaim_doesnt_exist_but_the_nodeclaim_is_in_cluster_state()
 {
    // A replacement the API does not return yet but the state holds is still launching: the
    // executor reports it as `Launching`, never `Gone`, and the command waits.
    let v = view(
        vec![candidate("n1", Marking::Marked)],
        vec![ReplacementView::Launching],
    );
    assert!(matches!(
        next(&v, at(1)).steps[..],
        [CommandStep::WaitForInitialization { .. }]
    ));
}

#[test]
fn should_untaint_nodes_when_a_command_times_out() {
    let v = view(
        vec![candidate("n1", Marking::Marked)],
        vec![ReplacementView::Launching],
    );
    let plan = next(&v, at(600));
    assert_eq!(
        plan.steps,
        [CommandStep::RollBack(Failure::Timeout(
            SignedDuration::from_mins(10)
        ))]
    );
    assert!(plan.is_final());
}

#[test]
fn should_fully_handle_a_command_when_replacements_are_initialized() {
    let steps = run_to_end(
        view(
            vec![candidate("n1", Marking::NotYet)],
            vec![ReplacementView::NotCreated],
        ),
        at(0),
        ReplacementView::Initialized,
    );
    assert_eq!(
        steps,
        [
            CommandStep::Mark(vec!["n1".into()]),
            CommandStep::CreateReplacements,
            CommandStep::Commit,
            CommandStep::DeleteCandidates(vec!["n1".into()]),
            CommandStep::Finish,
        ]
    );
}

#[test]
fn should_only_finish_a_command_when_all_replacements_are_initialized() {
    let mut v = view(
        vec![candidate("n1", Marking::Marked)],
        vec![ReplacementView::Initialized, ReplacementView::Launching],
    );
    assert!(matches!(
        next(&v, at(5)).steps[..],
        [CommandStep::WaitForInitialization { .. }]
    ));
    v.replacements[1] = ReplacementView::Initialized;
    assert_eq!(
        next(&v, at(6)).steps,
        [CommandStep::DeleteCandidates(vec!["n1".into()])]
    );
}

#[test]
fn should_not_wait_for_replacements_when_none_are_needed() {
    let steps = run_to_end(
        view(vec![candidate("n1", Marking::NotYet)], Vec::new()),
        at(0),
        ReplacementView::Launching,
    );
    assert_eq!(
        steps,
        [
            CommandStep::Mark(vec!["n1".into()]),
            CommandStep::Commit,
            CommandStep::DeleteCandidates(vec!["n1".into()]),
            CommandStep::Finish,
        ]
    );
}

#[test]
fn should_finish_two_commands_in_order_as_replacements_are_initialized() {
    let mut first = view(
        vec![candidate("n1", Marking::Marked)],
        vec![ReplacementView::Launching],
    );
    let mut second = view(
        vec![candidate("n2", Marking::Marked)],
        vec![ReplacementView::Launching],
    );
    second.started_at = at(1);
    first.replacements[0] = ReplacementView::Initialized;
    assert_eq!(
        next(&first, at(2)).steps,
        [CommandStep::DeleteCandidates(vec!["n1".into()])]
    );
    assert!(matches!(
        next(&second, at(2)).steps[..],
        [CommandStep::WaitForInitialization { .. }]
    ));
    second.replacements[0] = ReplacementView::Initialized;
    assert_eq!(
        next(&second, at(3)).steps,
        [CommandStep::DeleteCandidates(vec!["n2".into()])]
    );
}

#[test]
fn should_calculate_correct_timeout_based_on_queue_length() {
    let minutes = |m: i64| SignedDuration::from_mins(m);
    for (queued, expected) in [
        (100, minutes(10)),
        (4_000, minutes(10)),
        (10_000, minutes(13) + SignedDuration::from_secs(20)),
        (40_000, minutes(53) + SignedDuration::from_secs(20)),
        (80_000, minutes(60)),
        (100_000, minutes(60)),
    ] {
        assert_eq!(replacement_timeout(queued), expected, "{queued} commands");
    }
}

#[test]
fn should_add_and_remove_taints_from_nodeclaims_that_fail_to_disrupt() {
    // Marked, then the replacement fails to launch: the command rolls back (untaints).
    let steps = run_to_end(
        view(
            vec![candidate("n1", Marking::NotYet)],
            vec![ReplacementView::NotCreated],
        ),
        at(0),
        ReplacementView::LaunchFailed("no offering".into()),
    );
    assert_eq!(
        steps,
        [
            CommandStep::Mark(vec!["n1".into()]),
            CommandStep::CreateReplacements,
            CommandStep::RollBack(Failure::LaunchFailed("no offering".into())),
        ]
    );
}

#[test]
fn a_replacement_deleted_before_it_initializes_rolls_the_command_back() {
    let v = view(
        vec![candidate("n1", Marking::Marked)],
        vec![ReplacementView::Gone],
    );
    assert_eq!(
        next(&v, at(1)).steps,
        [CommandStep::RollBack(Failure::ReplacementDeleted)]
    );
}

#[test]
fn a_delete_only_command_goes_on_with_the_candidates_it_could_mark() {
    let v = view(
        vec![
            candidate("n1", Marking::Marked),
            candidate("n2", Marking::Failed),
        ],
        Vec::new(),
    );
    assert_eq!(
        next(&v, at(0)).steps,
        [CommandStep::Drop(vec!["n2".into()])]
    );
    let all_failed = view(vec![candidate("n1", Marking::Failed)], Vec::new());
    assert_eq!(
        next(&all_failed, at(0)).steps,
        [CommandStep::RollBack(Failure::NothingMarked)]
    );
}

#[test]
fn a_replace_command_with_a_candidate_it_could_not_mark_rolls_back() {
    let v = view(
        vec![
            candidate("n1", Marking::Marked),
            candidate("n2", Marking::Failed),
        ],
        vec![ReplacementView::NotCreated],
    );
    assert_eq!(
        next(&v, at(0)).steps,
        [CommandStep::RollBack(Failure::PartlyMarked)]
    );
}
