//! The structural-schema rules the API server enforces on a CRD's `openAPIV3Schema`
//! (apiextensions `ValidateStructural` and the CEL rule compilation), those that matter for
//! kube-derive generated schemas.

use serde_json::Value;

use super::{FieldError, children};

const JUNCTORS: [&str; 4] = ["allOf", "anyOf", "oneOf", "not"];
const LIST_TYPES: [&str; 3] = ["atomic", "set", "map"];
const SCALARS: [&str; 4] = ["string", "integer", "number", "boolean"];

pub(super) fn check(schema: &Value, base: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {}
        Some(other) => errors.push(FieldError::invalid(
            format!("{base}.type"),
            format!("{other:?}"),
            "must be object at the root",
        )),
        None => errors.push(FieldError::required(
            format!("{base}.type"),
            "must be object at the root",
        )),
    }
    check_root_metadata(schema, base, &mut errors);
    check_node(schema, base, true, &mut errors);
    errors
}

/// The API server owns `metadata`: a schema may only restrict `name` and `generateName`.
fn check_root_metadata(schema: &Value, base: &str, errors: &mut Vec<FieldError>) {
    let Some(metadata) = schema.pointer("/properties/metadata") else {
        return;
    };
    let path = format!("{base}.properties[metadata]");
    let allowed_keys = ["type", "description", "properties"];
    let extra_keys = metadata
        .as_object()
        .is_some_and(|m| m.keys().any(|k| !allowed_keys.contains(&k.as_str())));
    let extra_props = metadata
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| p.keys().any(|k| k != "name" && k != "generateName"));
    if extra_keys || extra_props {
        errors.push(FieldError::forbidden(
            path,
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
}

fn flag(node: &Value, key: &str) -> bool {
    node.get(key).and_then(Value::as_bool) == Some(true)
}

/// `correlatable`: whether an old object can be paired with the new one at this node (false
/// under the items of a list that is not a `map` list): `oldSelf` needs it.
fn check_node(node: &Value, path: &str, correlatable: bool, errors: &mut Vec<FieldError>) {
    let ty = node.get("type").and_then(Value::as_str);
    let int_or_string = flag(node, "x-kubernetes-int-or-string");
    let preserve_unknown = flag(node, "x-kubernetes-preserve-unknown-fields");
    if ty.is_none() && !int_or_string && !preserve_unknown {
        errors.push(FieldError::required(
            format!("{path}.type"),
            "must not be empty for specified object fields",
        ));
    }
    if int_or_string && ty.is_some() {
        errors.push(FieldError::forbidden(
            format!("{path}.type"),
            "must be empty when x-kubernetes-int-or-string is true",
        ));
    }
    if node.get("properties").is_some() && node.get("additionalProperties").is_some() {
        errors.push(FieldError::forbidden(
            format!("{path}.additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if node.get("additionalProperties") == Some(&Value::Bool(false)) {
        errors.push(FieldError::forbidden(
            format!("{path}.additionalProperties"),
            "must not be false; omit it instead",
        ));
    }
    if ty == Some("array") && node.get("items").is_none() {
        errors.push(FieldError::required(
            format!("{path}.items"),
            "must be specified",
        ));
    }
    if ty != Some("array") && node.get("items").is_some() && ty.is_some() {
        errors.push(FieldError::forbidden(
            format!("{path}.items"),
            "must be empty when type is not array",
        ));
    }
    if flag(node, "uniqueItems") {
        errors.push(FieldError::forbidden(
            format!("{path}.uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(pattern) = node.get("pattern").and_then(Value::as_str)
        && !super::values::pattern_is_valid(pattern)
    {
        errors.push(FieldError::invalid(
            format!("{path}.pattern"),
            format!("{pattern:?}"),
            "must be a valid regular expression",
        ));
    }
    check_list_type(node, path, errors);
    let list_correlates = node.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
    check_rules(node, path, correlatable, errors);
    for junctor in JUNCTORS {
        if let Some(branches) = node.get(junctor) {
            check_junctor(branches, &format!("{path}.{junctor}"), errors);
        }
    }
    for (segment, child) in children(node) {
        let child_correlatable = correlatable && (segment != "items" || list_correlates);
        check_node(
            child,
            &format!("{path}.{segment}"),
            child_correlatable,
            errors,
        );
    }
}

fn check_list_type(node: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(list_type) = node.get("x-kubernetes-list-type") else {
        if node.get("x-kubernetes-list-map-keys").is_some() {
            errors.push(FieldError::forbidden(
                format!("{path}.x-kubernetes-list-map-keys"),
                "must not be specified if x-kubernetes-list-type is not map",
            ));
        }
        return;
    };
    let list_type = list_type.as_str().unwrap_or_default();
    let list_path = format!("{path}.x-kubernetes-list-type");
    if !LIST_TYPES.contains(&list_type) {
        errors.push(FieldError::not_supported(
            list_path,
            format!("{list_type:?}"),
            "supported values: \"atomic\", \"map\", \"set\"",
        ));
        return;
    }
    if node.get("type").and_then(Value::as_str) != Some("array") {
        errors.push(FieldError::invalid(
            list_path,
            format!("{list_type:?}"),
            "must only be used on type array",
        ));
        return;
    }
    let item_type = node
        .pointer("/items/type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match list_type {
        "set" if !SCALARS.contains(&item_type) => errors.push(FieldError::invalid(
            format!("{path}.items.type"),
            format!("{item_type:?}"),
            "must be a scalar type if parent array type is set",
        )),
        "map" => {
            let keys: Vec<&str> = node
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if keys.is_empty() {
                errors.push(FieldError::required(
                    format!("{path}.x-kubernetes-list-map-keys"),
                    "must not be empty if x-kubernetes-list-type is map",
                ));
            }
            for key in keys {
                let Some(key_schema) = node.pointer(&format!("/items/properties/{key}")) else {
                    errors.push(FieldError::invalid(
                        format!("{path}.x-kubernetes-list-map-keys"),
                        format!("{key:?}"),
                        "entries must all be names of item properties",
                    ));
                    continue;
                };
                let scalar = key_schema
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| SCALARS.contains(&t));
                let required = node
                    .pointer("/items/required")
                    .and_then(Value::as_array)
                    .is_some_and(|r| r.iter().any(|k| k == key));
                if !scalar {
                    errors.push(FieldError::invalid(
                        format!("{path}.items.properties[{key}].type"),
                        "\"\"",
                        "must be a scalar type if parent array type is map",
                    ));
                }
                if !required && key_schema.get("default").is_none() {
                    errors.push(FieldError::required(
                        format!("{path}.items.properties[{key}]"),
                        "all map keys must be required or have a default value",
                    ));
                }
            }
        }
        _ => {}
    }
}

/// Inside `allOf/anyOf/oneOf/not` only value validations are allowed: no types, defaults,
/// descriptions of shape or extensions (the structural schema lives outside the junctors).
fn check_junctor(branches: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let nodes: Vec<(String, &Value)> = match branches {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, b)| (format!("{path}[{i}]"), b))
            .collect(),
        other => vec![(path.to_string(), other)],
    };
    for (branch_path, branch) in nodes {
        for key in [
            "type",
            "default",
            "nullable",
            "additionalProperties",
            "x-kubernetes-preserve-unknown-fields",
        ] {
            if branch.get(key).is_some() {
                let detail = if key == "default" {
                    "must not be set inside logical junctors"
                } else {
                    "must be empty to be structural"
                };
                errors.push(FieldError::forbidden(
                    format!("{branch_path}.{key}"),
                    detail,
                ));
            }
        }
        for (segment, child) in children(branch) {
            check_junctor(child, &format!("{branch_path}.{segment}"), errors);
        }
        for junctor in JUNCTORS {
            if let Some(inner) = branch.get(junctor) {
                check_junctor(inner, &format!("{branch_path}.{junctor}"), errors);
            }
        }
    }
}

/// Every rule compiles and uses `oldSelf` only where the old object can be correlated.
fn check_rules(node: &Value, path: &str, correlatable: bool, errors: &mut Vec<FieldError>) {
    let Some(rules) = node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return;
    };
    for (i, rule) in rules.iter().enumerate() {
        let rule_path = format!("{path}.x-kubernetes-validations[{i}].rule");
        let Some(text) = rule.get("rule").and_then(Value::as_str) else {
            errors.push(FieldError::required(rule_path, ""));
            continue;
        };
        let program = match kube_cel::cel::Program::compile(text) {
            Ok(program) => program,
            Err(err) => {
                errors.push(FieldError::invalid(
                    rule_path,
                    format!("{text:?}"),
                    format!("compilation failed: {err}"),
                ));
                continue;
            }
        };
        let transition = program.references().variables().contains(&"oldSelf");
        let optional_old_self = flag(rule, "optionalOldSelf");
        if transition && !correlatable && !optional_old_self {
            errors.push(FieldError::invalid(
                rule_path,
                format!("{text:?}"),
                "oldSelf cannot be used on the uncorrelatable portion of the schema within a list; a rule is correlatable only inside x-kubernetes-list-type: map lists",
            ));
        }
        if let Some(reason) = rule.get("reason").and_then(Value::as_str)
            && ![
                "FieldValueInvalid",
                "FieldValueForbidden",
                "FieldValueRequired",
                "FieldValueDuplicate",
            ]
            .contains(&reason)
        {
            errors.push(FieldError::not_supported(
                format!("{path}.x-kubernetes-validations[{i}].reason"),
                format!("{reason:?}"),
                "supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\"",
            ));
        }
    }
}
