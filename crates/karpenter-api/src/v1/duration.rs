//! Go-style durations (`720h`, `1h30m`, `30s`) that may also be `Never`.

use std::borrow::Cow;
use std::fmt;

use jiff::SignedDuration;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration field that accepts `Never`. The raw text is kept so a round trip changes nothing
/// (GitOps tools see no diff).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NillableDuration {
    raw: String,
    value: Option<SignedDuration>,
}

impl NillableDuration {
    /// `Never`.
    pub fn never() -> Self {
        Self {
            raw: "Never".into(),
            value: None,
        }
    }

    /// A finite duration, rendered Go-style.
    pub fn from_secs(secs: i64) -> Self {
        Self {
            raw: format_go_duration(secs),
            value: Some(SignedDuration::from_secs(secs)),
        }
    }

    /// Parses `Never` or a Go duration made of `h`, `m`, `s` parts.
    pub fn parse(raw: &str) -> Result<Self, DurationError> {
        if raw == "Never" {
            return Ok(Self {
                raw: raw.into(),
                value: None,
            });
        }
        let secs = parse_go_duration_secs(raw)?;
        Ok(Self {
            raw: raw.into(),
            value: Some(SignedDuration::from_secs(secs)),
        })
    }

    /// `None` means `Never`.
    pub fn duration(&self) -> Option<SignedDuration> {
        self.value
    }

    pub fn is_never(&self) -> bool {
        self.value.is_none()
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// Why a duration does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("invalid duration {raw:?}: unexpected {found:?} (use h, m, s, e.g. 720h or 1h30m)")]
    UnexpectedCharacter { raw: String, found: char },
    #[error("invalid duration {raw:?}: unit {unit:?} without a number")]
    UnitWithoutNumber { raw: String, unit: char },
    #[error("invalid duration {raw:?}: number too large")]
    NumberTooLarge { raw: String },
    #[error("invalid duration {raw:?}: too large")]
    TooLarge { raw: String },
    #[error("invalid duration {raw:?}: missing unit after {digits} (use h, m or s)")]
    MissingUnit { raw: String, digits: String },
}

/// Parses a Go duration restricted to whole `h`/`m`/`s` units (Karpenter's CRD pattern
/// `^([0-9]+(s|m|h))+$`) into seconds.
pub fn parse_go_duration_secs(raw: &str) -> Result<i64, DurationError> {
    if raw.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: i64 = 0;
    let mut digits = String::new();
    for ch in raw.chars() {
        if ch.is_ascii_digit() {
            digits.push(ch);
            continue;
        }
        let unit = match ch {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => {
                return Err(DurationError::UnexpectedCharacter {
                    raw: raw.to_string(),
                    found: ch,
                });
            }
        };
        if digits.is_empty() {
            return Err(DurationError::UnitWithoutNumber {
                raw: raw.to_string(),
                unit: ch,
            });
        }
        let n: i64 = digits.parse().map_err(|_| DurationError::NumberTooLarge {
            raw: raw.to_string(),
        })?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| DurationError::TooLarge {
                raw: raw.to_string(),
            })?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(DurationError::MissingUnit {
            raw: raw.to_string(),
            digits,
        });
    }
    Ok(total)
}

/// Renders seconds the way Go prints a `time.Duration` (`720h0m0s`, `30s`).
pub fn format_go_duration(secs: i64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn schema_name() -> Cow<'static, str> {
        "NillableDuration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^(([0-9]+(s|m|h))+|Never)$"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations_and_never() {
        assert_eq!(
            NillableDuration::parse("720h").unwrap().duration(),
            Some(SignedDuration::from_hours(720))
        );
        assert_eq!(parse_go_duration_secs("1h30m").unwrap(), 5400);
        assert!(NillableDuration::parse("Never").unwrap().is_never());
        assert!(NillableDuration::parse("2d").is_err());
        assert!(NillableDuration::parse("10").is_err());
        assert_eq!(
            NillableDuration::parse("1h30m").unwrap().to_string(),
            "1h30m"
        );
    }
}
