//! Every `default` must be valid for its own schema node, as the API server checks it: the
//! default, with the node's nested defaults applied, must have no unknown fields, pass the
//! node's OpenAPI validations, and pass the CEL rules of the node and its descendants.

use serde_json::Value;

use super::{FieldError, children, values};

pub(super) fn check(schema: &Value, base: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    walk(schema, base, &mut errors);
    errors
}

fn walk(node: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(default) = node.get("default") {
        let default_path = format!("{path}.default");
        if default.is_null() && node.get("nullable").and_then(Value::as_bool) != Some(true) {
            errors.push(FieldError::required(
                default_path,
                "must not be null for non-nullable field",
            ));
        } else {
            let mut defaulted = default.clone();
            apply(node, &mut defaulted);
            let unknown = unknown_fields(node, &defaulted, "");
            if unknown.is_empty() {
                errors.extend(values::validate(node, &defaulted, &default_path, ""));
            } else {
                errors.push(FieldError::invalid(
                    default_path,
                    defaulted.to_string(),
                    format!("must not have unknown fields: [{}]", unknown.join(" ")),
                ));
            }
        }
    }
    for (segment, child) in children(node) {
        walk(child, &format!("{path}.{segment}"), errors);
    }
}

/// Structural defaulting as the API server does it: a missing field with a `default` gets it,
/// and every field (defaulted ones included, so defaults nest) is then defaulted in turn.
pub(crate) fn apply(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(obj) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (key, prop) in props {
                    if !obj.contains_key(key)
                        && let Some(default) = prop.get("default")
                    {
                        obj.insert(key.clone(), default.clone());
                    }
                    if let Some(child) = obj.get_mut(key) {
                        apply(prop, child);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                obj.values_mut().for_each(|child| apply(additional, child));
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                items.iter_mut().for_each(|item| apply(item_schema, item));
            }
        }
        _ => {}
    }
}

/// Fields pruning would drop: object keys the schema neither declares nor allows.
fn unknown_fields(node: &Value, value: &Value, at: &str) -> Vec<String> {
    let preserve = node
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    let mut unknown = Vec::new();
    match value {
        Value::Object(obj) => {
            let props = node.get("properties").and_then(Value::as_object);
            let additional = node.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in obj {
                let name = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                match props.and_then(|p| p.get(key)).or(additional) {
                    Some(child_schema) => {
                        unknown.extend(unknown_fields(child_schema, child, &name))
                    }
                    None if !preserve
                        && node.get("additionalProperties") != Some(&Value::Bool(true)) =>
                    {
                        unknown.push(name)
                    }
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = node.get("items") {
                for (i, item) in items.iter().enumerate() {
                    unknown.extend(unknown_fields(item_schema, item, &format!("{at}[{i}]")));
                }
            }
        }
        _ => {}
    }
    unknown
}
