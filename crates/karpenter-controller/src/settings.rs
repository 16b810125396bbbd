//! Validated controller settings. The binary turns flags and environment variables (upstream's
//! names: `BATCH_MAX_DURATION`, `METRICS_PORT`, ...) into a [`Settings`]; everything here has
//! upstream's defaults.

use std::time::Duration;

use karpenter_core::feature_gates::FeatureGates;
use karpenter_core::scheduling::{MinValuesPolicy, PackingPolicy, PreferencePolicy};

use crate::Error;

/// Which cloud the controller launches nodes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloudProviderKind {
    Sim,
    Aws,
}

/// `LOG_FORMAT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Json,
    Text,
}

/// Everything the controller runtime needs to know before it starts.
#[derive(Clone, Debug)]
pub struct Settings {
    pub cluster_name: String,
    /// Window closes after this long without a new provisionable pod (`BATCH_IDLE_DURATION`, 1s).
    pub batch_idle_duration: Duration,
    /// Hard cap on one provisioning window (`BATCH_MAX_DURATION`, 10s).
    pub batch_max_duration: Duration,
    pub metrics_port: u16,
    pub health_probe_port: u16,
    pub log_level: String,
    pub log_format: LogFormat,
    pub disable_leader_election: bool,
    pub leader_election_name: String,
    pub leader_election_namespace: String,
    /// This replica's identity in the Lease (`POD_NAME` in a cluster; hostname otherwise).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Scheduler parallelism hint (`CPU_REQUESTS` millicores; ≤0 means 1000).
    pub cpu_requests: i64,
    /// Whether preferred affinities and `ScheduleAnyway` spreads are honoured (`PREFERENCE_POLICY`).
    pub preference_policy: PreferencePolicy,
    /// What to do when `minValues` cannot be met (`MIN_VALUES_POLICY`).
    pub min_values_policy: MinValuesPolicy,
    /// How NodeClaims are sized: upstream's greedy or for cost (`PACKING_POLICY`).
    pub packing_policy: PackingPolicy,
    /// How often NodePool status (resources, nodes, readiness) is recomputed.
    pub nodepool_status_period: Duration,
    /// `FEATURE_GATES` (upstream's defaults: only `ReservedCapacity` on).
    pub feature_gates: FeatureGates,
    /// How long a disruption command waits for its replacements to initialize before it is
    /// rolled back (upstream's fixed 10 min; hidden `DISRUPTION_REPLACEMENT_TIMEOUT`, which
    /// tests shorten to watch a rollback).
    pub disruption_replacement_timeout: Duration,
    /// How long a launched NodeClaim may wait for its Node before it is deleted (upstream's
    /// fixed 15 min; hidden `REGISTRATION_TTL`, which tests shorten to watch the deletion).
    pub registration_ttl: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cluster_name: String::new(),
            batch_idle_duration: Duration::from_secs(1),
            batch_max_duration: Duration::from_secs(10),
            metrics_port: 8080,
            health_probe_port: 8081,
            log_level: "info".into(),
            log_format: LogFormat::Json,
            disable_leader_election: false,
            leader_election_name: "karpenter-leader-election".into(),
            leader_election_namespace: "kube-system".into(),
            identity: "karpenter".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            cpu_requests: 1000,
            preference_policy: PreferencePolicy::Respect,
            min_values_policy: MinValuesPolicy::Strict,
            packing_policy: PackingPolicy::CostOptimal,
            nodepool_status_period: Duration::from_secs(5),
            feature_gates: FeatureGates::default(),
            disruption_replacement_timeout: Duration::from_secs(10 * 60),
            registration_ttl: Duration::from_secs(15 * 60),
        }
    }
}

impl Settings {
    /// Checks cross-field rules; each error names the setting and the fix.
    pub fn validate(&self) -> Result<(), Error> {
        if self.batch_idle_duration.is_zero() {
            return Err(Error::Settings {
                name: "BATCH_IDLE_DURATION",
                message: "must be positive, e.g. 1s".into(),
            });
        }
        if self.batch_max_duration < self.batch_idle_duration {
            return Err(Error::Settings {
                name: "BATCH_MAX_DURATION",
                message: format!(
                    "{:?} is shorter than BATCH_IDLE_DURATION {:?}; raise it (default 10s)",
                    self.batch_max_duration, self.batch_idle_duration
                ),
            });
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(Error::Settings {
                name: "LEADER_ELECTION_RENEW_DEADLINE",
                message: "must be shorter than the lease duration".into(),
            });
        }
        if self.metrics_port != 0 && self.metrics_port == self.health_probe_port {
            return Err(Error::Settings {
                name: "METRICS_PORT",
                message: format!(
                    "equals HEALTH_PROBE_PORT ({}); use two ports",
                    self.metrics_port
                ),
            });
        }
        Ok(())
    }

    /// Scheduler parallelism upstream derives from `CPU_REQUESTS`: ceil(millicores / 1000).
    pub fn scheduler_parallelism(&self) -> usize {
        let millis = if self.cpu_requests <= 0 {
            1000
        } else {
            self.cpu_requests
        };
        usize::try_from(millis.saturating_add(999) / 1000)
            .unwrap_or(1)
            .max(1)
    }

    /// How long a pod nominated to a NodeClaim is excluded from new batches: upstream's
    /// max(2 × BATCH_MAX_DURATION, 10s).
    pub fn nomination_window(&self) -> Duration {
        self.batch_max_duration
            .saturating_mul(2)
            .max(Duration::from_secs(10))
    }
}

/// Parses a Go-style duration (`10s`, `1m30s`, `500ms`) for duration settings.
pub fn parse_duration(name: &'static str, raw: &str) -> Result<Duration, Error> {
    let bad = |why: &str| Error::Settings {
        name,
        message: format!("{raw:?} is not a duration ({why}); use e.g. 500ms, 10s, 1m30s"),
    };
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(bad("empty"));
    }
    let mut total = Duration::ZERO;
    let mut rest = raw;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        if digits_end == 0 {
            return Err(bad("missing number"));
        }
        let number: f64 = rest[..digits_end]
            .parse()
            .map_err(|_| bad("malformed number"))?;
        rest = &rest[digits_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(bad("missing unit")),
            _ => return Err(bad("unknown unit")),
        };
        rest = &rest[unit_end..];
        let part = Duration::try_from_secs_f64(number * seconds_per_unit)
            .map_err(|_| bad("out of range"))?;
        total = total.checked_add(part).ok_or_else(|| bad("out of range"))?;
    }
    Ok(total)
}

/// The values `BATCH_IDLE_DURATION` and `BATCH_MAX_DURATION` accept (upstream's defaults are
/// 1 s and 10 s; an hour-long window already means pods wait an hour for capacity).
pub const BATCH_DURATION_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(3600);

/// [`parse_duration`], then checks the value lies in `range`; the error names the setting,
/// the allowed range and an example.
pub fn parse_duration_in(
    name: &'static str,
    raw: &str,
    range: &std::ops::RangeInclusive<Duration>,
) -> Result<Duration, Error> {
    let value = parse_duration(name, raw)?;
    if range.contains(&value) {
        return Ok(value);
    }
    Err(Error::Settings {
        name,
        message: format!(
            "{raw:?} is out of range; use a duration from {:?} to {:?}, e.g. 10s",
            range.start(),
            range.end()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_upstream() {
        let s = Settings::default();
        assert_eq!(s.batch_idle_duration, Duration::from_secs(1));
        assert_eq!(s.batch_max_duration, Duration::from_secs(10));
        assert_eq!((s.metrics_port, s.health_probe_port), (8080, 8081));
        assert_eq!(s.leader_election_name, "karpenter-leader-election");
        assert_eq!(s.nomination_window(), Duration::from_secs(20));
        assert_eq!(s.scheduler_parallelism(), 1);
        s.validate().unwrap();
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("X", "10s").unwrap(), Duration::from_secs(10));
        assert_eq!(
            parse_duration("X", "1m30s").unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(
            parse_duration("X", "500ms").unwrap(),
            Duration::from_millis(500)
        );
        for bad in ["", "10", "s", "10x", "1.2.3s"] {
            let err = parse_duration("BATCH_IDLE_DURATION", bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains("BATCH_IDLE_DURATION"), "{err}");
        }
    }

    #[test]
    fn huge_values_are_errors_not_panics() {
        for raw in [
            "9223372036854775807h",
            "10000000000000000000s10000000000000000000s",
            "1e300h",
            "99999999999999999999999999999h",
        ] {
            let err = parse_duration("BATCH_MAX_DURATION", raw).map(|_| ());
            assert!(err.is_err(), "{raw}");
        }
        let err = parse_duration_in("BATCH_IDLE_DURATION", "2h", &BATCH_DURATION_RANGE)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("BATCH_IDLE_DURATION") && err.contains("out of range"),
            "{err}"
        );
        assert!(parse_duration_in("X", "0s", &BATCH_DURATION_RANGE).is_err());
        assert_eq!(
            parse_duration_in("X", "1h", &BATCH_DURATION_RANGE).unwrap(),
            Duration::from_secs(3600)
        );
        let s = Settings {
            cpu_requests: i64::MAX,
            batch_max_duration: Duration::MAX,
            ..Settings::default()
        };
        assert!(s.scheduler_parallelism() >= 1);
        assert_eq!(s.nomination_window(), Duration::MAX);
    }

    #[test]
    fn rejects_inconsistent_batch_windows() {
        let s = Settings {
            batch_max_duration: Duration::from_millis(100),
            ..Settings::default()
        };
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("BATCH_MAX_DURATION")
        );
        let s = Settings {
            cpu_requests: 2500,
            ..Settings::default()
        };
        assert_eq!(s.scheduler_parallelism(), 3);
    }
}
