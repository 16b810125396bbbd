//! Checks a JSON value against a CRD's structural OpenAPI schema, the way the API server does
//! before it runs CEL: types, required fields, enums, patterns, bounds, unknown fields.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use regex::Regex;
use serde_json::{Map, Value};

use super::{ValidationError, join_field, join_index, join_key};

/// Regexes compiled once per pattern; patterns come from our own CRDs, a small fixed set.
#[derive(Default)]
pub(crate) struct PatternCache {
    compiled: Mutex<HashMap<String, Option<Regex>>>,
}

impl PatternCache {
    fn is_match(&self, pattern: &str, text: &str) -> bool {
        let Ok(mut compiled) = self.compiled.lock() else {
            return true;
        };
        let regex = compiled
            .entry(pattern.to_string())
            .or_insert_with(|| Regex::new(pattern).ok());
        // A pattern the regex engine cannot compile would be a bug in our CRD; don't blame the user.
        regex.as_ref().is_none_or(|r| r.is_match(text))
    }
}

pub(crate) fn check(
    schema: &Value,
    value: &Value,
    path: &str,
    cache: &PatternCache,
    errors: &mut Vec<ValidationError>,
) {
    // Non-nullable nulls are pruned by the API server: treat them as absent.
    if value.is_null() {
        return;
    }
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        match value {
            Value::String(s) => check_string(schema, s, path, cache, errors),
            Value::Number(n) if n.is_i64() || n.is_u64() => {}
            _ => errors.push(type_error(path, "an integer or a string", value)),
        }
        return;
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => match value {
            Value::Object(obj) => check_object(schema, obj, path, cache, errors),
            _ => errors.push(type_error(path, "an object", value)),
        },
        Some("array") => match value {
            Value::Array(items) => check_array(schema, items, path, cache, errors),
            _ => errors.push(type_error(path, "a list", value)),
        },
        Some("string") => match value {
            Value::String(s) => check_string(schema, s, path, cache, errors),
            _ => errors.push(type_error(path, "a string", value)),
        },
        Some("integer") => match value.as_i64() {
            Some(n) => check_integer(schema, n, path, errors),
            None => errors.push(type_error(path, "an integer", value)),
        },
        Some("number") if !value.is_number() => errors.push(type_error(path, "a number", value)),
        Some("boolean") if !value.is_boolean() => {
            errors.push(type_error(path, "true or false", value))
        }
        _ => {}
    }
}

fn check_object(
    schema: &Value,
    obj: &Map<String, Value>,
    path: &str,
    cache: &PatternCache,
    errors: &mut Vec<ValidationError>,
) {
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for field in required.iter().filter_map(Value::as_str) {
            if obj.get(field).is_none_or(Value::is_null) {
                errors.push(ValidationError::new(
                    join_field(path, field),
                    "Required value",
                    format!("add the required field {field:?}"),
                ));
            }
        }
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && obj.len() as u64 > max
    {
        errors.push(ValidationError::new(
            path.to_string(),
            format!("Too many: {}: must have at most {max} entries", obj.len()),
            "remove entries",
        ));
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    for (key, child) in obj {
        if let Some(child_schema) = properties.and_then(|p| p.get(key)) {
            check(child_schema, child, &join_field(path, key), cache, errors);
        } else if let Some(additional) = additional.filter(|a| a.is_object()) {
            check(additional, child, &join_key(path, key), cache, errors);
        } else if !preserve && additional.and_then(Value::as_bool) != Some(true) {
            let known: BTreeSet<&str> = properties
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            errors.push(unknown_field(path, key, &known));
        }
    }
}

fn unknown_field(path: &str, key: &str, known: &BTreeSet<&str>) -> ValidationError {
    let closest = known
        .iter()
        .min_by_key(|k| edit_distance(&k.to_lowercase(), &key.to_lowercase()))
        .copied();
    let hint = match closest {
        Some(c) if edit_distance(&c.to_lowercase(), &key.to_lowercase()) <= 3 => {
            format!("did you mean {c:?}?")
        }
        _ if known.is_empty() => "remove it".to_string(),
        _ => format!(
            "remove it; known fields here: {}",
            known.iter().copied().collect::<Vec<_>>().join(", ")
        ),
    };
    ValidationError::new(
        join_field(path, key),
        format!("unknown field {key:?}"),
        hint,
    )
}

/// Levenshtein distance, for "did you mean" hints on short names (fields, kinds).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

fn check_array(
    schema: &Value,
    items: &[Value],
    path: &str,
    cache: &PatternCache,
    errors: &mut Vec<ValidationError>,
) {
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        errors.push(ValidationError::new(
            path.to_string(),
            format!("Too few: {}: must have at least {min} items", items.len()),
            "add items",
        ));
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && items.len() as u64 > max
    {
        errors.push(ValidationError::new(
            path.to_string(),
            format!("Too many: {}: must have at most {max} items", items.len()),
            "remove items",
        ));
    }
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set") {
        for (i, item) in items.iter().enumerate() {
            if items[..i].contains(item) {
                errors.push(ValidationError::new(
                    join_index(path, i),
                    format!("Duplicate value: {item}"),
                    "remove the duplicate",
                ));
            }
        }
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            check(item_schema, item, &join_index(path, i), cache, errors);
        }
    }
}

fn check_string(
    schema: &Value,
    s: &str,
    path: &str,
    cache: &PatternCache,
    errors: &mut Vec<ValidationError>,
) {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.iter().any(|a| a.as_str() == Some(s)) {
            let list: Vec<String> = allowed
                .iter()
                .filter_map(Value::as_str)
                .map(|a| format!("{a:?}"))
                .collect();
            // The message lists the values already: the hint names the one that was likely meant.
            let names = || allowed.iter().filter_map(Value::as_str);
            let hint = match names().find(|a| a.eq_ignore_ascii_case(s)) {
                Some(a) => format!("values are case-sensitive: did you mean {a:?}?"),
                None => match names().min_by_key(|a| edit_distance(a, s)) {
                    Some(a) if edit_distance(a, s) <= 3 => format!("did you mean {a:?}?"),
                    _ => "pick one of the supported values".to_string(),
                },
            };
            errors.push(ValidationError::new(
                path.to_string(),
                format!(
                    "Unsupported value: {s:?}: supported values: {}",
                    list.join(", ")
                ),
                hint,
            ));
        }
        return;
    }
    let length = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && length > max
    {
        errors.push(ValidationError::new(
            path.to_string(),
            format!("Too long: may not be more than {max} bytes"),
            format!("shorten it to at most {max} characters"),
        ));
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && length < min
    {
        errors.push(ValidationError::new(
            path.to_string(),
            format!("Invalid value: {s:?}: should be at least {min} chars long"),
            "set a non-empty value",
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        if !cache.is_match(pattern, s) {
            errors.push(ValidationError::new(
                path.to_string(),
                format!("Invalid value: {s:?}: should match '{pattern}'"),
                pattern_hint(pattern),
            ));
        } else if pattern == crate::crd::QUANTITY_PATTERN
            && let Err(reason) = crate::quantity::parse_millis(s)
        {
            // The pattern admits `1e999999999`; the controller's parser does not.
            errors.push(ValidationError::new(
                path.to_string(),
                format!("Invalid value: {s:?}: quantity {reason}"),
                pattern_hint(pattern),
            ));
        }
    }
}

/// Explains our patterns in words; falls back to the pattern itself.
fn pattern_hint(pattern: &str) -> String {
    use crate::crd::*;
    let hint = match pattern {
        p if p == NILLABLE_DURATION_PATTERN => {
            "use a duration of whole hours/minutes/seconds such as 720h or 1h30m, or Never"
        }
        p if p == DURATION_PATTERN => {
            "use a duration of whole hours/minutes/seconds such as 48h or 30m"
        }
        p if p == BUDGET_NODES_PATTERN => {
            "use a node count such as 5 or a percentage from 0% to 100%"
        }
        p if p == BUDGET_SCHEDULE_PATTERN => {
            "use five cron fields (minute hour day month weekday) or a macro such as @daily"
        }
        p if p == BUDGET_DURATION_PATTERN => "use hours and/or minutes, such as 1h, 30m or 1h30m",
        p if p == LABEL_VALUE_PATTERN => {
            "label values are at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
        }
        p if p == QUALIFIED_NAME_PATTERN => "use a qualified name such as example.com/team or team",
        p if p == QUANTITY_PATTERN => "use a quantity such as 100, 500m, 16Gi",
        p if p == VOLUME_SIZE_PATTERN => {
            "use a size such as 20Gi or 100G (at most 59000Gi / 64000G / 58Ti / 64T)"
        }
        p if p == EVICTION_VALUE_PATTERN => {
            "use a percentage such as 10% or a quantity such as 100Mi"
        }
        _ => return format!("must match {pattern}"),
    };
    hint.to_string()
}

fn check_integer(schema: &Value, n: i64, path: &str, errors: &mut Vec<ValidationError>) {
    let (format_min, format_max) = match schema.get("format").and_then(Value::as_str) {
        Some("int32") => (i64::from(i32::MIN), i64::from(i32::MAX)),
        Some("uint32") => (0, i64::from(u32::MAX)),
        _ => (i64::MIN, i64::MAX),
    };
    let min = schema
        .get("minimum")
        .and_then(Value::as_i64)
        .unwrap_or(format_min)
        .max(format_min);
    let max = schema
        .get("maximum")
        .and_then(Value::as_i64)
        .unwrap_or(format_max)
        .min(format_max);
    if n < min {
        errors.push(ValidationError::new(
            path.to_string(),
            format!("Invalid value: {n}: should be greater than or equal to {min}"),
            range_hint(min, max),
        ));
    } else if n > max {
        errors.push(ValidationError::new(
            path.to_string(),
            format!("Invalid value: {n}: should be less than or equal to {max}"),
            range_hint(min, max),
        ));
    }
}

fn range_hint(min: i64, max: i64) -> String {
    if max == i64::MAX || max == i64::from(i32::MAX) {
        format!("use a value of at least {min}")
    } else {
        format!("use a value from {min} to {max}")
    }
}

fn type_error(path: &str, expected: &str, value: &Value) -> ValidationError {
    let got = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    };
    // The hint shows how to write what is expected in YAML (the message already says what).
    let hint = match (expected, value) {
        ("a string", Value::Number(_) | Value::Bool(_)) => {
            "quote it, so YAML reads it as text: \"...\"".to_string()
        }
        ("a list", _) => "write a YAML list: `[a, b]`, or one `- item` per line".to_string(),
        ("an object", _) => {
            "write a map of fields: `{key: value}`, or one `key: value` per line".to_string()
        }
        ("an integer", Value::Number(_)) => {
            "use a whole number within 64 bits, e.g. 10".to_string()
        }
        ("an integer", _) | ("an integer or a string", _) => {
            "use a whole number, e.g. 10".to_string()
        }
        ("true or false", _) => "use true or false, unquoted".to_string(),
        _ => format!("use {expected}"),
    };
    ValidationError::new(
        path.to_string(),
        format!("Invalid value: expected {expected}, got {got}"),
        hint,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance() {
        assert_eq!(edit_distance("requirements", "requirments"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
