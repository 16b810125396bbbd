#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use karpenter_core::clock::FakeClock;

use super::*;

const EMPTY: &str = include_str!("../../../../../examples/disruption-empty/cluster.yaml");

fn run(
    yaml: &str,
    until: SignedDuration,
    max_steps: usize,
) -> Result<DisruptionReport, DisruptionSimError> {
    let now: Timestamp = "2026-01-30T23:00:00Z".parse().unwrap();
    let mut manifests = Manifests::new();
    manifests.load_str("cluster.yaml", yaml).unwrap();
    let provider = SimCloudProvider::new("us-east-1", Arc::new(FakeClock::new(now))).unwrap();
    let outcome = super::super::plan(&manifests, &provider).unwrap();
    simulate_disruption(
        &manifests,
        &provider,
        SchedulerOptions::default(),
        &outcome,
        DisruptionSettings {
            now,
            until,
            max_steps,
            feature_gates: Default::default(),
        },
    )
}

#[test]
fn the_empty_node_goes_when_consolidate_after_has_passed_since_now() {
    let report = run(EMPTY, SignedDuration::from_hours(24), MAX_STEPS).unwrap();
    assert_eq!(report.commands.len(), 1);
    let command = &report.commands[0];
    assert_eq!(command.at, "2026-01-30T23:10:00Z");
    assert_eq!(command.reason, "Empty");
    assert_eq!(command.candidates[0].name, "node-b");
    assert_eq!(report.before.nodes, 2);
    assert_eq!(report.after.nodes.len(), 1);
}

#[test]
fn a_loop_that_reaches_the_step_cap_fails_with_a_clear_error() {
    // One step sees node-b not yet consolidatable; the command needs a second one.
    let err = run(EMPTY, SignedDuration::from_hours(24), 1).unwrap_err();
    assert!(
        matches!(err, DisruptionSimError::StepCap { steps: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("did not settle"), "{err}");
}

#[test]
fn idle_stretches_are_skipped_not_polled() {
    // 24 h at a 10 s poll would be 8,640 steps; the run needs a handful.
    assert!(run(EMPTY, SignedDuration::from_hours(24), 10).is_ok());
}
