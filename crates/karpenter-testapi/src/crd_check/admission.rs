//! Custom objects written through the API, handled as the API server handles them against their
//! CRD's schema: nulls of non-nullable fields and unknown fields are pruned, defaults applied,
//! then the object is validated (OpenAPI and CEL, transition rules against the old object on
//! updates). Updates ratchet: an error in a part of the object the update did not change is not
//! reported (the API server's CRD validation ratcheting), so objects stored before a stricter
//! schema stay writable.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use regex::Regex;

use serde_json::Value;

use super::{FieldError, values};

/// One served version's schema, with its CEL rules compiled once.
pub(crate) struct ObjectSchema {
    schema: Value,
    compiled: kube_cel::CompiledSchema,
}

impl std::fmt::Debug for ObjectSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectSchema").finish_non_exhaustive()
    }
}

impl ObjectSchema {
    /// The schema with its rules compiled; shared by every server that registers the same
    /// schema (compiling is the slow part of registering a CRD).
    pub(crate) fn new(schema: Value) -> Arc<Self> {
        static COMPILED: LazyLock<Mutex<HashMap<String, Arc<ObjectSchema>>>> =
            LazyLock::new(Default::default);
        let key = schema.to_string();
        if let Some(found) = COMPILED.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return found;
        }
        let compiled = kube_cel::compile_schema(&schema);
        let built = Arc::new(Self { schema, compiled });
        if let Ok(mut cache) = COMPILED.lock() {
            cache.insert(key, built.clone());
        }
        built
    }

    /// The object as it would be stored, or every reason the API server would refuse it.
    pub(crate) fn admit(
        &self,
        object: Value,
        old: Option<&Value>,
    ) -> Result<Value, Vec<FieldError>> {
        let object = self.normalize(object);
        // The server defaults what it reads from storage too, so compare like with like.
        let old = old.map(|o| self.normalize(o.clone()));
        let mut errors = check_name(&object);
        errors.extend(values::validate_schema(&self.schema, &object, "", ""));
        if errors.is_empty()
            && let Err(failures) =
                kube_cel::validate_compiled(&self.compiled, &object, old.as_ref())
        {
            errors = values::cel_failures(&self.schema, &failures, "");
        }
        if let Some(old) = &old {
            errors.retain(|error| !unchanged(&object, old, &error.path));
        }
        if errors.is_empty() {
            Ok(object)
        } else {
            Err(errors)
        }
    }

    /// The fields of a request body the schema does not know (`spec.foo`, `spec.list[0].bar`):
    /// what `fieldValidation=Strict` refuses instead of pruning.
    pub(crate) fn unknown_fields(&self, body: &Value) -> Vec<String> {
        let mut unknown = Vec::new();
        prune(&self.schema, &mut body.clone(), "", &mut unknown);
        unknown
    }

    /// Pruned and defaulted.
    fn normalize(&self, mut object: Value) -> Value {
        prune(&self.schema, &mut object, "", &mut Vec::new());
        super::defaults::apply(&self.schema, &mut object);
        object
    }
}

static DNS_SUBDOMAIN: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").ok()
});

/// Custom object names are DNS subdomains (the API server's `NameIsDNSSubdomain`).
fn check_name(object: &Value) -> Vec<FieldError> {
    let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    if name.len() > 253 {
        errors.push(FieldError::invalid(
            "metadata.name",
            format!("{name:?}"),
            "must be no more than 253 characters",
        ));
    }
    if !DNS_SUBDOMAIN.as_ref().is_none_or(|r| r.is_match(name)) {
        errors.push(FieldError::invalid(
            "metadata.name",
            format!("{name:?}"),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ));
    }
    errors
}

/// Drops what the API server prunes: fields the schema does not know (outside
/// `x-kubernetes-preserve-unknown-fields`) and nulls of non-nullable fields. The root's
/// `metadata`, `apiVersion` and `kind` belong to the server and are left alone.
fn prune(schema: &Value, value: &mut Value, at: &str, unknown: &mut Vec<String>) {
    let root = at.is_empty();
    let preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    match value {
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let open = preserve || schema.get("additionalProperties") == Some(&Value::Bool(true));
            let keys: Vec<String> = obj.keys().cloned().collect();
            for key in keys {
                if root && ["metadata", "apiVersion", "kind"].contains(&key.as_str()) {
                    continue;
                }
                let child_schema = props.and_then(|p| p.get(&key)).or(additional);
                let child_at = if root {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                match (child_schema, obj.get_mut(&key)) {
                    (Some(child_schema), Some(child)) => {
                        let nullable =
                            child_schema.get("nullable").and_then(Value::as_bool) == Some(true);
                        if child.is_null() && !nullable {
                            obj.remove(&key);
                        } else {
                            prune(child_schema, child, &child_at, unknown);
                        }
                    }
                    (None, _) if !open => {
                        obj.remove(&key);
                        unknown.push(child_at);
                    }
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|i| i.is_object()) {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item_schema, item, &format!("{at}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// Whether the update left the value at a field path (`a.b[0].c`, `a[key]`) as it was; for a
/// path that exists in neither object (a missing required field), its parent decides.
fn unchanged(new: &Value, old: &Value, path: &str) -> bool {
    let mut segments = parse_path(path);
    loop {
        match (lookup(new, &segments), lookup(old, &segments)) {
            (Some(a), Some(b)) => return a == b,
            (None, None) if !segments.is_empty() => {
                segments.pop();
            }
            (None, None) => return true,
            _ => return false,
        }
    }
}

fn parse_path(path: &str) -> Vec<String> {
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut in_brackets = false;
    for c in path.chars() {
        match c {
            '[' if !in_brackets => {
                if !current.is_empty() {
                    segments.push(std::mem::take(&mut current));
                }
                in_brackets = true;
            }
            ']' if in_brackets => {
                segments.push(std::mem::take(&mut current));
                in_brackets = false;
            }
            '.' if !in_brackets => {
                if !current.is_empty() {
                    segments.push(std::mem::take(&mut current));
                }
            }
            other => current.push(other),
        }
    }
    if !current.is_empty() {
        segments.push(current);
    }
    segments
}

fn lookup<'a>(value: &'a Value, segments: &[String]) -> Option<&'a Value> {
    segments.iter().try_fold(value, |node, segment| match node {
        Value::Object(obj) => obj.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

/// Renders errors for a `Status` message: `Kind.group "name" is invalid: ...`.
pub(crate) fn invalid_message(
    kind: &str,
    group: &str,
    name: &str,
    errors: &[FieldError],
) -> String {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    format!("{qualified} {name:?} is invalid: {}", super::render(errors))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "name": {"type": "string"}
                    },
                    "x-kubernetes-validations": [
                        {"rule": "self.size < 10", "message": "size must be small"},
                        {"rule": "!has(oldSelf.name) || self.name == oldSelf.name", "message": "name is immutable"}
                    ]
                }
            }
        })
    }

    #[test]
    fn defaults_apply_and_unknown_fields_and_nulls_are_pruned() {
        let admitted = ObjectSchema::new(schema())
            .admit(json!({"metadata": {"name": "w", "labels": {"x": "y"}}, "spec": {"size": 1, "name": null, "extra": true}}), None)
            .unwrap();
        assert_eq!(admitted["spec"], json!({"size": 1, "mode": "a"}));
        assert_eq!(
            admitted["metadata"]["labels"],
            json!({"x": "y"}),
            "metadata is the server's"
        );
    }

    #[test]
    fn schema_and_cel_errors_read_like_the_api_server() {
        let schema = ObjectSchema::new(schema());
        let errors = schema
            .admit(json!({"spec": {"size": 0, "mode": "c"}}), None)
            .unwrap_err();
        let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            rendered,
            [
                "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"",
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
            ]
        );
        let errors = schema
            .admit(json!({"spec": {"size": 20}}), None)
            .unwrap_err();
        assert_eq!(
            errors[0].to_string(),
            "spec: Invalid value: \"object\": size must be small"
        );
        assert_eq!(
            invalid_message("Widget", "example.com", "w", &errors),
            "Widget.example.com \"w\" is invalid: spec: Invalid value: \"object\": size must be small"
        );
    }

    #[test]
    fn transition_rules_see_the_old_object_and_unchanged_parts_ratchet() {
        let schema = ObjectSchema::new(schema());
        let old = json!({"spec": {"size": 1, "name": "x"}});
        let errors = schema
            .admit(json!({"spec": {"size": 1, "name": "y"}}), Some(&old))
            .unwrap_err();
        assert_eq!(errors[0].detail, "name is immutable");
        // An old object already invalid (stored before a stricter rule) stays writable when the
        // update does not touch the invalid part.
        let stale = json!({"metadata": {"name": "w"}, "spec": {"size": 20}});
        let relabelled =
            json!({"metadata": {"name": "w", "labels": {"a": "b"}}, "spec": {"size": 20}});
        assert!(schema.admit(relabelled, Some(&stale)).is_ok());
        assert!(
            schema
                .admit(json!({"spec": {"size": 21}}), Some(&stale))
                .is_err()
        );
    }

    #[test]
    fn unknown_fields_are_listed_with_their_paths() {
        let schema = ObjectSchema::new(schema());
        let body = json!({"metadata": {"name": "w", "anything": 1}, "spec": {"size": 1, "extra": true}, "top": 1});
        assert_eq!(schema.unknown_fields(&body), ["spec.extra", "top"]);
    }

    #[test]
    fn paths_parse_fields_indexes_and_keys() {
        assert_eq!(
            parse_path("spec.a[0].b[karpenter.sh/x]"),
            ["spec", "a", "0", "b", "karpenter.sh/x"]
        );
    }
}
