//! Why a legacy object could not be converted, and why a converted one could not be written.

use serde_json::Value;

/// Why a legacy object was not converted. Nothing of it is written, so nothing is dropped
/// silently; the message names the field to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The document is not a YAML/JSON object.
    #[error("not an object")]
    NotAnObject,
    /// A field holds a value of the wrong shape.
    #[error(
        "{path}: Invalid value: {found}: must be {expected}, not {} (nothing was converted, so nothing is dropped silently)",
        value_kind(.found)
    )]
    Malformed {
        path: String,
        expected: &'static str,
        found: Value,
    },
    /// A `ttlSeconds...` field is not a non-negative integer.
    #[error("{field} must be a non-negative integer")]
    NotASecondCount { field: &'static str },
    /// `amiFamily: Custom` names no AMIs, and v1 has no alias for it.
    #[error("amiFamily Custom without an AMI selector cannot be converted: add amiSelectorTerms")]
    CustomAmiWithoutSelector,
    /// The converted object does not deserialize as the v1 type (a bug of the mapping, or a
    /// value v1 rejects).
    #[error("converted {kind} is not valid v1: {error}")]
    NotValidV1 {
        kind: &'static str,
        /// Printed in the message, so not also the `source()` (a `{:#}` chain would repeat it).
        error: serde_json::Error,
    },
    /// Two documents convert to objects of the same kind and name.
    #[error(
        "{}: the API server keeps one object per name, so one would be lost; rename one of them (and the nodeClassRef pointing at it)",
        .clashes.join("; ")
    )]
    NameClash { clashes: Vec<String> },
}

/// A converted object could not be written as YAML or JSON.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Yaml(serde_saphyr::SerializeError),
    #[error(transparent)]
    Json(serde_json::Error),
}

/// How a JSON value's kind reads in a message ("a string", "a list", ...).
fn value_kind(found: &Value) -> &'static str {
    match found {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
