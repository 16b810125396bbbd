//! Timed scale steps for `simulate --disruption`: a workload annotated
//! `simulate.karpenter-rs.dev/scale-steps: "10m=200, 20m=600"` is scaled to 200 replicas 10
//! minutes after `--now` and to 600 at 20 minutes, in virtual time (docs/simulate.md). The
//! annotation is the scenario's, not the cluster's: the controller ignores it.

use std::sync::Arc;

use jiff::SignedDuration;
use karpenter_core::pod::Pod;

/// The annotation that holds a workload's steps.
pub const SCALE_STEPS_ANNOTATION: &str = "simulate.karpenter-rs.dev/scale-steps";

/// One workload's timed replica counts.
#[derive(Clone, Debug)]
pub struct ScaleSchedule {
    /// `Kind/name`, as the report names it.
    pub object: String,
    /// The pod every replica is stamped from (named after the workload: replica `i` is
    /// `<name>-<i>`), admitted as the input's replicas are.
    pub template: Arc<Pod>,
    /// Replicas before the first step (the workload's own count).
    pub initial: u32,
    /// (after `--now`, replicas), in time order.
    pub steps: Vec<(SignedDuration, u32)>,
}

/// Parses `"10m=200, 20m=600"`: comma-separated `DURATION=REPLICAS`, durations increasing.
pub fn parse(raw: &str) -> Result<Vec<(SignedDuration, u32)>, String> {
    let mut steps: Vec<(SignedDuration, u32)> = Vec::new();
    for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((at, replicas)) = part.split_once('=') else {
            return Err(format!(
                "{part:?} is not DURATION=REPLICAS (e.g. \"10m=200, 20m=600\")"
            ));
        };
        let at: SignedDuration = at
            .trim()
            .parse()
            .map_err(|err| format!("{part:?}: {:?} is not a duration ({err})", at.trim()))?;
        if at.is_negative() || at.is_zero() {
            return Err(format!(
                "{part:?}: a step comes after --now (a positive duration)"
            ));
        }
        let replicas: u32 = replicas.trim().parse().map_err(|_| {
            format!(
                "{part:?}: {:?} is not a whole number of replicas",
                replicas.trim()
            )
        })?;
        if let Some((previous, _)) = steps.last()
            && *previous >= at
        {
            return Err(format!(
                "{part:?}: steps go forward in time (after {previous})"
            ));
        }
        steps.push((at, replicas));
    }
    if steps.is_empty() {
        return Err("no step (e.g. \"10m=200, 20m=600\")".into());
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_durations_and_replicas_in_time_order() {
        assert_eq!(
            parse("10m=200, 20m=600,1h=0, 1h30m=5").unwrap(),
            [
                (SignedDuration::from_mins(10), 200),
                (SignedDuration::from_mins(20), 600),
                (SignedDuration::from_hours(1), 0),
                (SignedDuration::from_mins(90), 5)
            ]
        );
        for (bad, says) in [
            ("", "no step"),
            ("10m", "not DURATION=REPLICAS"),
            ("ten=3", "not a duration"),
            ("10m=-1", "not a whole number"),
            ("20m=1,10m=2", "forward in time"),
            ("0s=1", "positive duration"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
