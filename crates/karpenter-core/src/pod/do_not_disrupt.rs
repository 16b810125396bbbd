//! `karpenter.sh/do-not-disrupt` on a pod (upstream since v1.12): `"true"` protects the pod's
//! node from voluntary disruption for good; a positive Go duration (`"2m"`, `"1h30m"`) protects
//! it until the pod's `status.startTime` plus that duration (a pod without a start time is
//! protected); any other value protects nothing, and says why so the controller can put it in
//! an event on the pod. `"false"` is the explicit "no" and is not reported.

use jiff::{SignedDuration, Timestamp};

use super::Pod;

/// What a pod's `karpenter.sh/do-not-disrupt` annotation asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DoNotDisrupt {
    /// No annotation, or `"false"`.
    Absent,
    /// `"true"`, or a duration on a pod that has not started yet.
    Forever,
    /// A duration counted from `status.startTime`: protected strictly before this instant.
    Until(Timestamp),
    /// Neither `"true"` nor a positive duration: ignored; the sentence says why.
    Invalid(String),
}

impl DoNotDisrupt {
    /// Whether the annotation keeps the pod's node from voluntary disruption at `now`.
    pub fn protects_at(&self, now: Timestamp) -> bool {
        match self {
            Self::Forever => true,
            Self::Until(until) => now < *until,
            Self::Absent | Self::Invalid(_) => false,
        }
    }
}

/// Reads the pod's annotation (see the module docs).
pub fn do_not_disrupt(pod: &Pod) -> DoNotDisrupt {
    let Some(raw) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION))
    else {
        return DoNotDisrupt::Absent;
    };
    match raw.as_str() {
        "true" => return DoNotDisrupt::Forever,
        "false" => return DoNotDisrupt::Absent,
        _ => {}
    }
    let duration = match parse_go_duration(raw) {
        Ok(d) if d.is_positive() => d,
        Ok(_) => {
            return DoNotDisrupt::Invalid(format!(
                "{}={raw:?} is not a positive duration; it is ignored",
                karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION
            ));
        }
        Err(why) => {
            return DoNotDisrupt::Invalid(format!(
                "{}={raw:?} is neither \"true\" nor a duration ({why}); it is ignored",
                karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION
            ));
        }
    };
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0);
    match started.and_then(|start| start.checked_add(duration).ok()) {
        Some(until) => DoNotDisrupt::Until(until),
        // Not started (or beyond the representable range): the duration has not begun to run.
        None => DoNotDisrupt::Forever,
    }
}

/// Whether the pod's annotation protects its node at `now`.
pub fn has_do_not_disrupt(pod: &Pod, now: Timestamp) -> bool {
    do_not_disrupt(pod).protects_at(now)
}

/// The active pods among `pods` whose annotation is ignored as invalid, each with the sentence
/// saying why (the controller puts it in an event on the pod).
pub fn invalid_do_not_disrupt<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
) -> Vec<(&'a Pod, String)> {
    pods.into_iter()
        .filter(|p| !super::is_terminal(p) && !super::is_terminating(p))
        .filter_map(|p| match do_not_disrupt(p) {
            DoNotDisrupt::Invalid(why) => Some((p, why)),
            _ => None,
        })
        .collect()
}

/// Why a Go duration does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GoDurationError {
    #[error("empty duration")]
    Empty,
    #[error("duration out of range")]
    OutOfRange,
    #[error("missing unit after {rest:?}")]
    MissingUnit { rest: String },
    #[error("a unit without a number at {rest:?}")]
    UnitWithoutNumber { rest: String },
    #[error("malformed number {number:?}")]
    MalformedNumber { number: String },
    #[error("unknown unit {unit:?}")]
    UnknownUnit { unit: String },
}

/// Parses a Go `time.Duration` string (`"300ms"`, `"-1.5h"`, `"2h45m"`; units ns, us, µs, ms,
/// s, m, h) as `time.ParseDuration` does, without overflowing.
pub fn parse_go_duration(raw: &str) -> Result<SignedDuration, GoDurationError> {
    let (negative, mut rest) = match raw.as_bytes().first() {
        Some(b'-') => (true, &raw[1..]),
        Some(b'+') => (false, &raw[1..]),
        _ => (false, raw),
    };
    if rest == "0" {
        return Ok(SignedDuration::ZERO);
    }
    if rest.is_empty() {
        return Err(GoDurationError::Empty);
    }
    let too_large = || GoDurationError::OutOfRange;
    let mut total_nanos: i128 = 0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| GoDurationError::MissingUnit {
                rest: rest.to_string(),
            })?;
        let (number, tail) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(GoDurationError::UnitWithoutNumber {
                rest: rest.to_string(),
            });
        }
        if fraction.contains('.') {
            return Err(GoDurationError::MalformedNumber {
                number: number.to_string(),
            });
        }
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let unit_nanos: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            other => {
                return Err(GoDurationError::UnknownUnit {
                    unit: other.to_string(),
                });
            }
        };
        let whole: i128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_large())?
        };
        let mut nanos = whole.checked_mul(unit_nanos).ok_or_else(too_large)?;
        let mut scale = unit_nanos;
        for digit in fraction.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos = nanos
                .checked_add(i128::from(digit - b'0') * scale)
                .ok_or_else(too_large)?;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(too_large)?;
        if total_nanos > i128::from(i64::MAX) {
            return Err(too_large());
        }
        rest = next;
    }
    let signed = if negative { -total_nanos } else { total_nanos };
    let seconds = i64::try_from(signed / 1_000_000_000).map_err(|_| too_large())?;
    let nanos = i32::try_from(signed % 1_000_000_000).map_err(|_| too_large())?;
    Ok(SignedDuration::new(seconds, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use proptest::prelude::*;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_704_067_200).unwrap()
    }

    fn pod(value: &str, started: Option<Timestamp>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.annotations = Some(
            [(
                karpenter_api::well_known::DO_NOT_DISRUPT_ANNOTATION.to_string(),
                value.to_string(),
            )]
            .into(),
        );
        pod.status = Some(super::super::PodStatus {
            start_time: started.map(|t| Box::new(Time(t))),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn go_durations_parse_as_time_parse_duration_does() {
        let secs = |s: &str| parse_go_duration(s).map(|d| d.as_secs_f64());
        assert_eq!(secs("2m"), Ok(120.0));
        assert_eq!(secs("1h30m"), Ok(5400.0));
        assert_eq!(secs("1.5h"), Ok(5400.0));
        assert_eq!(secs("300ms"), Ok(0.3));
        assert_eq!(secs("-5s"), Ok(-5.0));
        assert_eq!(secs("0"), Ok(0.0));
        for bad in [
            "",
            "5",
            "true",
            "5d",
            "h",
            "1e3s",
            "1.2.3s",
            "9999999999999999999h",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn true_protects_for_good_and_false_or_absent_never() {
        assert!(has_do_not_disrupt(&pod("true", None), t0()));
        assert_eq!(do_not_disrupt(&pod("false", None)), DoNotDisrupt::Absent);
        assert_eq!(do_not_disrupt(&Pod::default()), DoNotDisrupt::Absent);
    }

    #[test]
    fn a_duration_protects_until_start_time_plus_duration() {
        let p = pod("2m", Some(t0()));
        let until = t0().checked_add(SignedDuration::from_mins(2)).unwrap();
        assert_eq!(do_not_disrupt(&p), DoNotDisrupt::Until(until));
        let before = until.checked_sub(SignedDuration::from_secs(1)).unwrap();
        assert!(has_do_not_disrupt(&p, before));
        assert!(!has_do_not_disrupt(&p, until));
    }

    #[test]
    fn a_duration_without_a_start_time_protects() {
        assert_eq!(do_not_disrupt(&pod("2m", None)), DoNotDisrupt::Forever);
    }

    #[test]
    fn invalid_values_are_ignored_with_a_reason() {
        for value in ["yes", "-2m", "0s", "2 minutes"] {
            let verdict = do_not_disrupt(&pod(value, Some(t0())));
            let DoNotDisrupt::Invalid(why) = &verdict else {
                panic!("{value:?}: {verdict:?}");
            };
            assert!(why.contains(value), "{why}");
            assert!(!verdict.protects_at(t0()));
        }
        let pods = [pod("soon", None), pod("true", None), pod("2m", None)];
        let invalid = invalid_do_not_disrupt(&pods);
        assert_eq!(invalid.len(), 1);
        assert!(invalid[0].1.contains("\"soon\""), "{}", invalid[0].1);
    }

    proptest! {
        #[test]
        fn any_string_parses_or_fails_without_panicking(raw in "[-+]?[0-9.]{0,25}(ns|us|ms|s|m|h|x)?[0-9.]{0,5}[smh]?") {
            let _ = parse_go_duration(&raw);
        }

        #[test]
        fn whole_seconds_round_trip(secs in 0i64..10_000_000) {
            prop_assert_eq!(parse_go_duration(&format!("{secs}s")), Ok(SignedDuration::from_secs(secs)));
        }
    }
}
