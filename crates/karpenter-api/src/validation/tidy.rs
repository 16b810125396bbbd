//! The errors of several layers (schema, CEL rules, runtime checks) about one document, made into
//! what a person should read: one error per field (the first layer's: a missing field is reported
//! as missing, not also as malformed; a schedule failing the schema's pattern is not also a bad
//! cron expression), no hint that only repeats its message, and a value still holding a shell
//! variable (`${CLUSTER_NAME}`) pointed out as such.

use serde_json::Value;

use super::ValidationError;

/// The schema's message for a missing field.
const REQUIRED: &str = "Required value";

/// Tidies `errors`; `doc` (when given) is the document they are about, to look at the values.
pub(super) fn tidy(errors: Vec<ValidationError>, doc: Option<&Value>) -> Vec<ValidationError> {
    let missing: Vec<String> = errors
        .iter()
        .filter(|e| e.message == REQUIRED)
        .map(|e| e.path.clone())
        .collect();
    let mut out: Vec<ValidationError> = Vec::with_capacity(errors.len());
    for mut error in errors {
        let under_missing =
            error.message != REQUIRED && missing.iter().any(|path| is_within(&error.path, path));
        // Errors about the whole object (empty path) are distinct rules; keep each.
        let field_taken = !error.path.is_empty() && out.iter().any(|e| e.path == error.path);
        if under_missing || field_taken || out.contains(&error) {
            continue;
        }
        if error
            .hint
            .as_deref()
            .is_some_and(|hint| repeats(&error.message, hint))
        {
            error.hint = None;
        }
        if let Some(variable) = shell_variable(doc, &error) {
            error.hint = Some(format!(
                "{variable} is a shell variable the manifest expects to be substituted: export it and run the file through `envsubst` first, as the guides do"
            ));
        }
        out.push(error);
    }
    out
}

/// Whether `path` lies under `parent` (`a.b[0]` and `a.b.c` lie under `a.b`).
fn is_within(path: &str, parent: &str) -> bool {
    path.strip_prefix(parent)
        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// Whether the hint only says again what the message says (compared on letters and digits).
fn repeats(message: &str, hint: &str) -> bool {
    let normal = |s: &str| -> String {
        s.chars()
            .filter(|c| c.is_alphanumeric() || c.is_whitespace())
            .collect::<String>()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    let hint = normal(hint);
    !hint.is_empty() && normal(message).contains(&hint)
}

/// The `${NAME}` in the value the error is about (or in its message), if any.
fn shell_variable(doc: Option<&Value>, error: &ValidationError) -> Option<String> {
    let value = doc
        .and_then(|doc| doc.pointer(&json_pointer(&error.path)))
        .and_then(Value::as_str);
    [value, Some(error.message.as_str())]
        .into_iter()
        .flatten()
        .find_map(first_variable)
}

/// Every string of `doc` that still holds a shell variable, as (field path, `${NAME}`), in
/// document order: a manifest meant for `envsubst` applied as it is (the API server takes
/// `karpenter.sh/discovery: ${CLUSTER_NAME}` literally, and discovery then finds nothing).
pub fn unexpanded_variables(doc: &Value) -> Vec<(String, String)> {
    fn walk(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
        match value {
            Value::String(text) => {
                if let Some(variable) = first_variable(text) {
                    out.push((path.to_string(), variable));
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}[{i}]"), out);
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    let path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    walk(item, &path, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(doc, "", &mut out);
    out
}

fn first_variable(text: &str) -> Option<String> {
    let start = text.find("${")?;
    let end = text[start..].find('}')?;
    let name = &text[start + 2..start + end];
    let is_name = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    is_name.then(|| format!("${{{name}}}"))
}

/// `spec.template.spec.taints[0].key` → `/spec/template/spec/taints/0/key`.
fn json_pointer(path: &str) -> String {
    let mut pointer = String::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (field, indexes) = part.split_once('[').unwrap_or((part, ""));
        if !field.is_empty() {
            pointer.push('/');
            pointer.push_str(&field.replace('~', "~0").replace('/', "~1"));
        }
        for index in indexes.split('[').map(|i| i.trim_end_matches(']')) {
            if !index.is_empty() {
                pointer.push('/');
                pointer.push_str(index);
            }
        }
    }
    pointer
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn error(path: &str, message: &str, hint: &str) -> ValidationError {
        ValidationError::new(path, message, hint)
    }

    #[test]
    fn a_missing_field_is_reported_once() {
        let errors = vec![
            error("spec.taints[0].key", REQUIRED, "add the taint's key"),
            error(
                "spec.taints[0].key",
                "Invalid value: \"\": name part must be non-empty",
                "use a key",
            ),
            error(
                "spec.taints[0].effect",
                "Unsupported value",
                "use NoSchedule",
            ),
        ];
        let tidied = tidy(errors, None);
        let paths: Vec<(&str, &str)> = tidied
            .iter()
            .map(|e| (e.path.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(
            paths,
            [
                ("spec.taints[0].key", REQUIRED),
                ("spec.taints[0].effect", "Unsupported value")
            ]
        );
    }

    #[test]
    fn one_error_per_field_the_first_layers() {
        let tidied = tidy(
            vec![
                error(
                    "spec.schedule",
                    "should match '^(@(annually...'",
                    "use five cron fields",
                ),
                error(
                    "spec.schedule",
                    "not a valid cron expression",
                    "use five cron fields, UTC",
                ),
                error("", "rule one", "fix one"),
                error("", "rule two", "fix two"),
            ],
            None,
        );
        let messages: Vec<&str> = tidied.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages,
            ["should match '^(@(annually...'", "rule one", "rule two"]
        );
    }

    #[test]
    fn a_hint_repeating_its_message_is_dropped() {
        let tidied = tidy(
            vec![
                error("a", "name may not be empty", "Name may not be empty."),
                error("b", "name may not be empty", "give the object a name"),
            ],
            None,
        );
        assert_eq!(tidied[0].hint, None);
        assert_eq!(tidied[1].hint.as_deref(), Some("give the object a name"));
        assert_eq!(tidied[0].to_string(), "a: name may not be empty");
    }

    #[test]
    fn an_unexpanded_shell_variable_is_pointed_out() {
        let doc = json!({"spec": {"amiSelectorTerms": [{"alias": "al2023@${ALIAS_VERSION}"}]}});
        let tidied = tidy(
            vec![error(
                "spec.amiSelectorTerms[0].alias",
                "should match '^[a-z0-9]+@.+$'",
                "use family@version",
            )],
            Some(&doc),
        );
        let hint = tidied[0].hint.as_deref().unwrap_or_default();
        assert!(
            hint.starts_with("${ALIAS_VERSION} is a shell variable"),
            "{hint}"
        );
    }

    #[test]
    fn unexpanded_variables_are_found_with_their_fields() {
        let doc = json!({"spec": {"role": "KarpenterNodeRole-${CLUSTER_NAME}",
                                  "tags": [{"a": "b"}, {"c": "${X}"}], "n": 1}});
        assert_eq!(
            unexpanded_variables(&doc),
            [
                ("spec.role".to_string(), "${CLUSTER_NAME}".to_string()),
                ("spec.tags[1].c".to_string(), "${X}".to_string())
            ]
        );
    }

    #[test]
    fn paths_become_json_pointers() {
        assert_eq!(
            json_pointer("spec.template.spec.taints[0].key"),
            "/spec/template/spec/taints/0/key"
        );
        assert_eq!(json_pointer("metadata.name"), "/metadata/name");
        assert_eq!(json_pointer(""), "");
        assert_eq!(first_variable("a ${B_1} c"), Some("${B_1}".into()));
        assert_eq!(first_variable("${}"), None);
        assert_eq!(first_variable("$B"), None);
    }
}
