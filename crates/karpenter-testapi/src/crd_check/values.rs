//! A value checked against a structural schema node the way the API server's OpenAPI validator
//! does (go-openapi messages: `<name> in body should have at least 1 items`), then against the
//! node's CEL rules (kube-cel).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use regex::Regex;
use serde_json::{Map, Value};

use super::{FieldError, json_type};

/// Schema validation errors, then (only when the schema holds) the CEL rules of `schema` and its
/// descendants evaluated on `value`. `path` prefixes every error; `body` is the name go-openapi
/// puts before `in body` (empty when validating a value at its own root, as for defaults).
pub(crate) fn validate(schema: &Value, value: &Value, path: &str, body: &str) -> Vec<FieldError> {
    let mut errors = validate_schema(schema, value, path, body);
    if errors.is_empty() {
        errors.extend(cel(schema, value, path));
    }
    errors
}

/// The OpenAPI part of [`validate`] alone (no CEL).
pub(crate) fn validate_schema(
    schema: &Value,
    value: &Value,
    path: &str,
    body: &str,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_node(schema, value, path, body, &mut errors);
    errors
}

fn join(path: &str, segment: &str) -> String {
    if segment.is_empty() {
        return path.to_string();
    }
    match (path.is_empty(), segment.starts_with('[')) {
        (true, _) => segment.trim_start_matches('.').to_string(),
        (false, true) => format!("{path}{segment}"),
        (false, false) => format!("{path}.{segment}"),
    }
}

fn in_body(body: &str) -> String {
    if body.is_empty() {
        "in body".to_string()
    } else {
        format!("{body} in body")
    }
}

/// A value rendered as Go's `%#v`-ish field.Invalid does: strings quoted, numbers plain.
pub(crate) fn render(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) | Value::Object(_) => format!("{:?}", json_type(value)),
        other => other.to_string(),
    }
}

fn check_node(schema: &Value, value: &Value, path: &str, body: &str, errors: &mut Vec<FieldError>) {
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true) {
            errors.push(FieldError::invalid(
                path,
                "null",
                format!(
                    "{} must be of type {}: \"null\"",
                    in_body(body),
                    declared_type(schema)
                ),
            ));
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    let declared = schema.get("type").and_then(Value::as_str);
    let type_ok = match (declared, value) {
        _ if int_or_string => value.is_string() || is_integer(value),
        (None, _) => true,
        (Some("object"), Value::Object(_))
        | (Some("array"), Value::Array(_))
        | (Some("string"), Value::String(_))
        | (Some("boolean"), Value::Bool(_))
        | (Some("number"), Value::Number(_)) => true,
        (Some("integer"), v) => is_integer(v),
        _ => false,
    };
    if !type_ok {
        errors.push(FieldError::invalid(
            path,
            format!("{:?}", json_type(value)),
            format!(
                "{} must be of type {}: {:?}",
                in_body(body),
                declared_type(schema),
                json_type(value)
            ),
        ));
        return;
    }
    check_enum(schema, value, path, errors);
    match value {
        Value::Object(obj) => check_object(schema, obj, path, body, errors),
        Value::Array(items) => check_array(schema, items, path, body, errors),
        Value::String(text) => check_string(schema, text, path, body, errors),
        Value::Number(_) => check_number(schema, value, path, body, errors),
        _ => {}
    }
}

fn declared_type(schema: &Value) -> String {
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return "integer,string".to_string();
    }
    schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("any")
        .to_string()
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
}

fn check_enum(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    if !allowed.contains(value) {
        let supported: Vec<String> = allowed.iter().map(render).collect();
        errors.push(FieldError::not_supported(
            path,
            render(value),
            format!("supported values: {}", supported.join(", ")),
        ));
    }
}

/// One size bound of a schema node (`minItems`/`maxItems`, ...) and go-openapi's wording for it.
struct SizeRule {
    min_key: &'static str,
    max_key: &'static str,
    /// `("least" | "most", bound)` → the message after the field name.
    phrase: fn(&str, u64) -> String,
}

const PROPERTIES: SizeRule = SizeRule {
    min_key: "minProperties",
    max_key: "maxProperties",
    phrase: |side, bound| format!("should have at {side} {bound} properties"),
};
const ITEMS: SizeRule = SizeRule {
    min_key: "minItems",
    max_key: "maxItems",
    phrase: |side, bound| format!("should have at {side} {bound} items"),
};
const LENGTH: SizeRule = SizeRule {
    min_key: "minLength",
    max_key: "maxLength",
    phrase: |side, bound| format!("should be at {side} {bound} chars long"),
};

/// Checks `size` against the node's bounds for `rule`; `shown` is the value as the error prints it.
fn check_size(
    schema: &Value,
    rule: &SizeRule,
    size: usize,
    shown: &str,
    path: &str,
    body: &str,
    errors: &mut Vec<FieldError>,
) {
    let size = size as u64;
    let bound = |key: &str| schema.get(key).and_then(Value::as_u64);
    let violated = [
        bound(rule.min_key)
            .filter(|min| size < *min)
            .map(|min| ("least", min)),
        bound(rule.max_key)
            .filter(|max| size > *max)
            .map(|max| ("most", max)),
    ];
    for (side, limit) in violated.into_iter().flatten() {
        errors.push(FieldError::invalid(
            path,
            shown.to_string(),
            format!("{} {}", in_body(body), (rule.phrase)(side, limit)),
        ));
    }
}

fn check_object(
    schema: &Value,
    obj: &Map<String, Value>,
    path: &str,
    body: &str,
    errors: &mut Vec<FieldError>,
) {
    check_size(
        schema,
        &PROPERTIES,
        obj.len(),
        &obj.len().to_string(),
        path,
        body,
        errors,
    );
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for key in required.iter().filter_map(Value::as_str) {
            if obj.get(key).is_none_or(Value::is_null) {
                let child = join(path, key);
                errors.push(FieldError::required(&child, ""));
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (key, child) in obj {
        // Declared fields join with `.`, map entries with `[key]`, as Kubernetes field paths do.
        let (child_schema, segment) = match props.and_then(|p| p.get(key)) {
            Some(declared) => (Some(declared), key.clone()),
            None => (additional, format!("[{key}]")),
        };
        if let Some(child_schema) = child_schema {
            check_node(
                child_schema,
                child,
                &join(path, &segment),
                &join(body, &segment),
                errors,
            );
        }
    }
}

fn check_array(
    schema: &Value,
    items: &[Value],
    path: &str,
    body: &str,
    errors: &mut Vec<FieldError>,
) {
    check_size(
        schema,
        &ITEMS,
        items.len(),
        &items.len().to_string(),
        path,
        body,
        errors,
    );
    check_list_uniqueness(schema, items, path, errors);
    if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
        for (i, item) in items.iter().enumerate() {
            let segment = format!("[{i}]");
            check_node(
                item_schema,
                item,
                &join(path, &segment),
                &join(body, &segment),
                errors,
            );
        }
    }
}

/// `set` lists hold each value once, `map` lists each key tuple once (`Duplicate value`).
fn check_list_uniqueness(
    schema: &Value,
    items: &[Value],
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let identity = |item: &Value| -> Option<Value> {
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => Some(item.clone()),
            Some("map") => {
                let keys = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)?;
                let tuple: serde_json::Map<String, Value> = keys
                    .iter()
                    .filter_map(Value::as_str)
                    .filter_map(|k| item.get(k).map(|v| (k.to_string(), v.clone())))
                    .collect();
                Some(Value::Object(tuple))
            }
            _ => None,
        }
    };
    let mut seen: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(id) = identity(item) else {
            return;
        };
        if seen.contains(&id) {
            let shown = if id.is_object() {
                id.to_string()
            } else {
                render(&id)
            };
            errors.push(FieldError {
                path: join(path, &format!("[{i}]")),
                kind: super::FieldErrorKind::Duplicate(shown),
                detail: String::new(),
            });
        } else {
            seen.push(id);
        }
    }
}

fn check_string(schema: &Value, text: &str, path: &str, body: &str, errors: &mut Vec<FieldError>) {
    let length = text.chars().count();
    check_size(
        schema,
        &LENGTH,
        length,
        &format!("{text:?}"),
        path,
        body,
        errors,
    );
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && !pattern_matches(pattern, text)
    {
        errors.push(FieldError::invalid(
            path,
            format!("{text:?}"),
            format!("{} should match '{pattern}'", in_body(body)),
        ));
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str)
        && !format_matches(format, text)
    {
        errors.push(FieldError::invalid(
            path,
            format!("{text:?}"),
            format!("{} must be of type {format}: {text:?}", in_body(body)),
        ));
    }
}

fn check_number(
    schema: &Value,
    value: &Value,
    path: &str,
    body: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(number) = value.as_f64() else {
        return;
    };
    let exclusive = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let below = if exclusive("exclusiveMinimum") {
            number <= min
        } else {
            number < min
        };
        if below {
            let relation = if exclusive("exclusiveMinimum") {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errors.push(FieldError::invalid(
                path,
                value.to_string(),
                format!(
                    "{} should be {relation} {}",
                    in_body(body),
                    number_text(min)
                ),
            ));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let above = if exclusive("exclusiveMaximum") {
            number >= max
        } else {
            number > max
        };
        if above {
            let relation = if exclusive("exclusiveMaximum") {
                "less than"
            } else {
                "less than or equal to"
            };
            errors.push(FieldError::invalid(
                path,
                value.to_string(),
                format!(
                    "{} should be {relation} {}",
                    in_body(body),
                    number_text(max)
                ),
            ));
        }
    }
}

/// A bound as Go prints a float64 with `%v`: `1`, not `1.0`.
fn number_text(number: f64) -> String {
    if number.fract() == 0.0 && number.abs() < 1e15 {
        format!("{}", number as i64)
    } else {
        number.to_string()
    }
}

/// Patterns come from CRDs, a small set per test process: compile each once.
static PATTERNS: LazyLock<Mutex<HashMap<String, Option<Regex>>>> = LazyLock::new(Default::default);

/// Whether a pattern compiles (cached like the matches).
pub(crate) fn pattern_is_valid(pattern: &str) -> bool {
    let Ok(mut cache) = PATTERNS.lock() else {
        return true;
    };
    cache
        .entry(pattern.to_string())
        .or_insert_with(|| Regex::new(pattern).ok())
        .is_some()
}

fn pattern_matches(pattern: &str, text: &str) -> bool {
    let Ok(mut cache) = PATTERNS.lock() else {
        return true;
    };
    let regex = cache
        .entry(pattern.to_string())
        .or_insert_with(|| Regex::new(pattern).ok());
    // The structural check reports a pattern that does not compile; don't also blame the value.
    regex.as_ref().is_none_or(|r| r.is_match(text))
}

static GO_DURATION: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^[-+]?(0|([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+$").ok()
});

/// The string formats the API server checks (others are accepted, as it ignores unknown ones).
fn format_matches(format: &str, text: &str) -> bool {
    match format {
        "date-time" => text.parse::<jiff::Timestamp>().is_ok(),
        "date" => text.parse::<jiff::civil::Date>().is_ok(),
        "duration" => GO_DURATION.as_ref().is_none_or(|r| r.is_match(text)),
        "int-or-string" => true,
        _ => true,
    }
}

/// The CEL rules of `schema` and its descendants on `value` (transition rules need an old object
/// and are skipped, as on create).
fn cel(schema: &Value, value: &Value, path: &str) -> Vec<FieldError> {
    let Err(failures) = kube_cel::validate(schema, value, None) else {
        return Vec::new();
    };
    cel_failures(schema, &failures, path)
}

/// kube-cel failures as field errors: `<path>: Invalid value: "<node type>": <message>`.
pub(crate) fn cel_failures(
    schema: &Value,
    failures: &kube_cel::ValidationErrors,
    path: &str,
) -> Vec<FieldError> {
    failures
        .iter()
        .map(|failure| {
            let at = join(path, &failure.field_path);
            let node_type = schema_at(schema, &failure.field_path)
                .and_then(|node| node.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("object");
            FieldError::invalid(at, format!("{node_type:?}"), failure.message.clone())
        })
        .collect()
}

/// The schema node a kube-cel field path (`a.b[0].c`, map keys as `a[key]`) points at.
fn schema_at<'a>(schema: &'a Value, field_path: &str) -> Option<&'a Value> {
    let mut node = schema;
    for part in field_path.split('.').filter(|p| !p.is_empty()) {
        let mut pieces = part.split('[');
        if let Some(name) = pieces.next().filter(|n| !n.is_empty()) {
            node = node
                .get("properties")
                .and_then(|p| p.get(name))
                .or_else(|| node.get("additionalProperties"))?;
        }
        for _ in pieces {
            node = node
                .get("items")
                .or_else(|| node.get("additionalProperties"))?;
        }
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn min_items_at_the_root_reads_like_the_api_server() {
        let errors = validate(
            &json!({"type": "array", "minItems": 1, "items": {"type": "string"}}),
            &json!([]),
            "x.default",
            "",
        );
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].to_string(),
            "x.default: Invalid value: 0: in body should have at least 1 items"
        );
    }

    #[test]
    fn nested_errors_name_the_field() {
        let schema = json!({
            "type": "object",
            "required": ["b"],
            "properties": {
                "a": {"type": "string", "pattern": "^[a-z]+$"},
                "b": {"type": "integer", "minimum": 1},
                "c": {"type": "string", "enum": ["x", "y"]},
                "d": {"type": "string", "format": "date-time"}
            }
        });
        let errors: Vec<String> = validate(
            &schema,
            &json!({"a": "A1", "c": "z", "d": "yesterday"}),
            "p",
            "",
        )
        .iter()
        .map(ToString::to_string)
        .collect();
        assert!(
            errors.contains(
                &"p.a: Invalid value: \"A1\": a in body should match '^[a-z]+$'".to_string()
            ),
            "{errors:?}"
        );
        assert!(
            errors.contains(&"p.b: Required value".to_string()),
            "{errors:?}"
        );
        assert!(
            errors.contains(
                &"p.c: Unsupported value: \"z\": supported values: \"x\", \"y\"".to_string()
            ),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("d in body must be of type date-time")),
            "{errors:?}"
        );
    }

    #[test]
    fn set_and_map_lists_refuse_duplicates() {
        let set =
            json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}});
        let errors = validate(&set, &json!(["a", "b", "a"]), "p", "");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].to_string(), "p[2]: Duplicate value: \"a\"");
        let map = json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                         "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}});
        let errors = validate(
            &map,
            &json!([{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}]),
            "c",
            "",
        );
        assert_eq!(
            errors[0].to_string(),
            "c[1]: Duplicate value: {\"type\":\"Ready\"}"
        );
        assert!(
            validate(
                &map,
                &json!([{"type": "Ready"}, {"type": "Launched"}]),
                "c",
                ""
            )
            .is_empty()
        );
    }

    #[test]
    fn type_mismatch_and_bounds() {
        let schema = json!({"type": "integer", "minimum": 1, "maximum": 64});
        assert!(validate(&schema, &json!(1), "p", "").is_empty());
        assert!(validate(&schema, &json!(64), "p", "").is_empty());
        assert_eq!(
            validate(&schema, &json!(65), "p", "")[0].detail,
            "in body should be less than or equal to 64"
        );
        assert_eq!(
            validate(&schema, &json!("1"), "p", "")[0].detail,
            "in body must be of type integer: \"string\""
        );
        let duration = json!({"type": "string", "format": "duration"});
        assert!(validate(&duration, &json!("1h30m"), "p", "").is_empty());
        assert_eq!(validate(&duration, &json!("1 day"), "p", "").len(), 1);
    }

    #[test]
    fn cel_rules_run_on_the_value() {
        let schema = json!({
            "type": "array", "items": {"type": "string"},
            "x-kubernetes-validations": [{"rule": "self.size() != 0", "message": "cannot be empty"}]
        });
        let errors = validate(&schema, &json!([]), "d", "");
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].to_string(),
            "d: Invalid value: \"array\": cannot be empty"
        );
        assert!(validate(&schema, &json!(["a"]), "d", "").is_empty());
    }
}
