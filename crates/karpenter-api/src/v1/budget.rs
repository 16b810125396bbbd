//! Disruption budget arithmetic (upstream `GetAllowedDisruptionsByReason`). `now` is always a
//! parameter: this crate never reads a clock.

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use jiff::{Timestamp, tz::TimeZone};

use super::duration::{DurationError, parse_go_duration_secs};
use super::{Budget, NodePool};

/// Disruption reasons a budget may be limited to.
pub const BUDGET_REASONS: [&str; 3] = ["Underutilized", "Empty", "Drifted"];

/// Why a budget could not be evaluated. Callers fail closed (allow 0 disruptions).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("budget nodes {value:?} is neither a count nor a percentage (use e.g. 5 or 10%)")]
    InvalidNodes { value: String },
    #[error("budget schedule {schedule:?} is not a valid cron expression: {reason}")]
    InvalidSchedule { schedule: String, reason: String },
    #[error("budget duration {duration:?} is invalid: {reason}")]
    /// The reason is printed in the message, so not also the `source()`.
    InvalidDuration {
        duration: String,
        reason: DurationError,
    },
    #[error("budget schedule and duration must be set together")]
    ScheduleWithoutDuration,
}

/// Parses a budget schedule as standard 5-field cron (or `@daily`-style macro), in UTC.
pub fn parse_budget_schedule(schedule: &str) -> Result<Cron, BudgetError> {
    // croner knows every macro upstream allows except `@midnight` (= `@daily`).
    let pattern = if schedule.trim().eq_ignore_ascii_case("@midnight") {
        "@daily"
    } else {
        schedule
    };
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .build()
        .parse(pattern)
        .map_err(|err| BudgetError::InvalidSchedule {
            schedule: schedule.to_string(),
            reason: err.to_string(),
        })
}

impl Budget {
    /// Whether the budget constrains disruption at `now`: always without a schedule, else when a
    /// schedule hit happened within the last `duration`.
    pub fn is_active(&self, now: Timestamp) -> Result<bool, BudgetError> {
        let (schedule, duration) = match (&self.schedule, &self.duration) {
            (None, None) => return Ok(true),
            (Some(s), Some(d)) => (s, d),
            _ => return Err(BudgetError::ScheduleWithoutDuration),
        };
        let cron = parse_budget_schedule(schedule)?;
        let secs =
            parse_go_duration_secs(duration).map_err(|reason| BudgetError::InvalidDuration {
                duration: duration.clone(),
                reason,
            })?;
        let window_start = now - jiff::SignedDuration::from_secs(secs);
        let start = window_start.to_zoned(TimeZone::UTC);
        // Upstream asks for the next hit strictly after (now - duration); active if it is not in
        // the future.
        let next = cron.find_next_occurrence(&start, false).map_err(|err| {
            BudgetError::InvalidSchedule {
                schedule: schedule.clone(),
                reason: err.to_string(),
            }
        })?;
        Ok(next.timestamp() <= now)
    }

    /// Nodes this budget allows to be disrupted at once out of `num_nodes`: `i32::MAX` when the
    /// budget is inactive; percentages round up like a PDB's maxUnavailable.
    pub fn allowed_disruptions(&self, num_nodes: u32, now: Timestamp) -> Result<i32, BudgetError> {
        if !self.is_active(now)? {
            return Ok(i32::MAX);
        }
        parse_budget_nodes(&self.nodes, num_nodes)
    }

    /// Whether this budget applies to `reason` (no reasons = all reasons).
    pub fn applies_to(&self, reason: &str) -> bool {
        self.reasons
            .as_ref()
            .is_none_or(|reasons| reasons.iter().any(|r| r == reason))
    }
}

/// `5` → 5; `10%` of `num_nodes` rounded up.
pub fn parse_budget_nodes(nodes: &str, num_nodes: u32) -> Result<i32, BudgetError> {
    let invalid = || BudgetError::InvalidNodes {
        value: nodes.to_string(),
    };
    if let Some(percent) = nodes.strip_suffix('%') {
        let percent: u64 = percent.parse().map_err(|_| invalid())?;
        if percent > 100 {
            return Err(invalid());
        }
        let allowed = (percent * u64::from(num_nodes)).div_ceil(100);
        return i32::try_from(allowed).map_err(|_| invalid());
    }
    let count: u64 = nodes.parse().map_err(|_| invalid())?;
    Ok(i32::try_from(count).unwrap_or(i32::MAX))
}

impl NodePool {
    /// The minimum allowance over the budgets that apply to `reason` (`i32::MAX` if none does).
    pub fn allowed_disruptions_by_reason(
        &self,
        now: Timestamp,
        num_nodes: u32,
        reason: &str,
    ) -> Result<i32, Vec<BudgetError>> {
        let mut allowed = i32::MAX;
        let mut errors = Vec::new();
        for budget in self.budgets().iter().filter(|b| b.applies_to(reason)) {
            match budget.allowed_disruptions(num_nodes, now) {
                Ok(n) => allowed = allowed.min(n),
                Err(err) => errors.push(err),
            }
        }
        if errors.is_empty() {
            Ok(allowed)
        } else {
            Err(errors)
        }
    }

    /// Like [`Self::allowed_disruptions_by_reason`] but fails closed: any error means 0.
    pub fn must_get_allowed_disruptions(
        &self,
        now: Timestamp,
        num_nodes: u32,
        reason: &str,
    ) -> i32 {
        self.allowed_disruptions_by_reason(now, num_nodes, reason)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::{Disruption, NodePoolSpec};

    fn at(rfc3339: &str) -> Timestamp {
        rfc3339.parse().unwrap()
    }

    fn budget(
        nodes: &str,
        schedule: Option<&str>,
        duration: Option<&str>,
        reasons: Option<&[&str]>,
    ) -> Budget {
        Budget {
            nodes: nodes.into(),
            schedule: schedule.map(Into::into),
            duration: duration.map(Into::into),
            reasons: reasons.map(|r| r.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn pool(budgets: Vec<Budget>) -> NodePool {
        NodePool::new(
            "p",
            NodePoolSpec {
                disruption: Some(Disruption {
                    budgets: Some(budgets),
                    ..Disruption::default()
                }),
                ..NodePoolSpec::default()
            },
        )
    }

    #[test]
    fn active_when_no_schedule() {
        assert!(
            budget("1", None, None, None)
                .is_active(at("2024-01-01T00:00:00Z"))
                .unwrap()
        );
    }

    #[test]
    fn active_inside_window_inactive_after() {
        let b = budget("0", Some("0 9 * * *"), Some("1h"), None);
        assert!(b.is_active(at("2024-01-01T09:30:00Z")).unwrap());
        assert!(b.is_active(at("2024-01-01T09:00:00Z")).unwrap());
        assert!(!b.is_active(at("2024-01-01T10:00:01Z")).unwrap());
        assert!(!b.is_active(at("2024-01-01T08:59:59Z")).unwrap());
    }

    #[test]
    fn duration_longer_than_recurrence_is_always_active() {
        let b = budget("0", Some("@hourly"), Some("2h"), None);
        assert!(b.is_active(at("2024-01-01T09:59:00Z")).unwrap());
    }

    #[test]
    fn midnight_macro_and_weekday_names() {
        assert!(
            budget("0", Some("@midnight"), Some("1h"), None)
                .is_active(at("2024-01-01T00:10:00Z"))
                .unwrap()
        );
        // 2024-01-06 is a Saturday.
        let weekdays = budget("0", Some("0 9 * * MON-FRI"), Some("8h"), None);
        assert!(!weekdays.is_active(at("2024-01-06T10:00:00Z")).unwrap());
        assert!(weekdays.is_active(at("2024-01-05T10:00:00Z")).unwrap());
    }

    #[test]
    fn invalid_schedule_is_an_error() {
        let err =
            budget("0", Some("* * *"), Some("1h"), None).is_active(at("2024-01-01T00:00:00Z"));
        assert!(matches!(err, Err(BudgetError::InvalidSchedule { .. })));
    }

    #[test]
    fn percentages_round_up() {
        assert_eq!(parse_budget_nodes("10%", 15).unwrap(), 2);
        assert_eq!(parse_budget_nodes("10%", 0).unwrap(), 0);
        assert_eq!(parse_budget_nodes("100%", 7).unwrap(), 7);
        assert_eq!(parse_budget_nodes("3", 100).unwrap(), 3);
        assert!(parse_budget_nodes("-1", 10).is_err());
        assert!(parse_budget_nodes("101%", 10).is_err());
    }

    #[test]
    fn minimum_over_applicable_budgets() {
        let p = pool(vec![
            budget("10", None, None, None),
            budget("2", None, None, Some(&["Drifted"])),
        ]);
        let now = at("2024-01-01T00:00:00Z");
        assert_eq!(
            p.allowed_disruptions_by_reason(now, 100, "Drifted")
                .unwrap(),
            2
        );
        assert_eq!(
            p.allowed_disruptions_by_reason(now, 100, "Empty").unwrap(),
            10
        );
    }

    #[test]
    fn inactive_budgets_allow_everything() {
        let p = pool(vec![budget("0", Some("0 9 * * *"), Some("1h"), None)]);
        assert_eq!(
            p.must_get_allowed_disruptions(at("2024-01-01T12:00:00Z"), 10, "Empty"),
            i32::MAX
        );
        assert_eq!(
            p.must_get_allowed_disruptions(at("2024-01-01T09:10:00Z"), 10, "Empty"),
            0
        );
    }

    #[test]
    fn default_budget_is_ten_percent_and_errors_fail_closed() {
        let p = NodePool::new("p", NodePoolSpec::default());
        assert_eq!(
            p.must_get_allowed_disruptions(at("2024-01-01T00:00:00Z"), 30, "Empty"),
            3
        );
        let bad = pool(vec![budget("abc", None, None, None)]);
        assert_eq!(
            bad.must_get_allowed_disruptions(at("2024-01-01T00:00:00Z"), 30, "Empty"),
            0
        );
    }
}
