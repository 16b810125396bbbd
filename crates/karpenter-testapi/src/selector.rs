//! Label selectors (query-string and `LabelSelector` object forms) and field selectors.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// A conjunction of label requirements; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<(String, LabelOp)>,
}

impl LabelSelector {
    /// Parses the `labelSelector` query form: `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for term in split_top_level(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let (key, op) = parse_label_term(term)?;
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(ApiError::bad_request(format!(
                    "unable to parse label selector requirement {term:?}: invalid key {key:?}"
                )));
            }
            requirements.push((key, op));
        }
        Ok(Self { requirements })
    }

    /// Builds a selector from a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    /// `None` for a null selector, which selects nothing.
    pub fn from_object(selector: &Value) -> Result<Option<Self>, ApiError> {
        if selector.is_null() {
            return Ok(None);
        }
        let mut requirements = Vec::new();
        if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (key, value) in labels {
                let value = value.as_str().unwrap_or_default().to_owned();
                requirements.push((key.clone(), LabelOp::Equals(value)));
            }
        }
        for expr in selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = expr.get("key").and_then(Value::as_str).unwrap_or_default();
            let values: Vec<String> = expr
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            let op = match expr.get("operator").and_then(Value::as_str) {
                Some("In") => LabelOp::In(values),
                Some("NotIn") => LabelOp::NotIn(values),
                Some("Exists") => LabelOp::Exists,
                Some("DoesNotExist") => LabelOp::DoesNotExist,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "selector.matchExpressions: unknown operator {other:?}; use In, NotIn, Exists or DoesNotExist"
                    )));
                }
            };
            requirements.push((key.to_owned(), op));
        }
        Ok(Some(Self { requirements }))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.requirements.iter().all(|(key, op)| match op {
            LabelOp::Equals(v) => label(key) == Some(v.as_str()),
            LabelOp::NotEquals(v) => label(key) != Some(v.as_str()),
            LabelOp::In(vs) => label(key).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelOp::NotIn(vs) => label(key).is_none_or(|l| vs.iter().all(|v| v != l)),
            LabelOp::Exists => label(key).is_some(),
            LabelOp::DoesNotExist => label(key).is_none(),
        })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_label_term(term: &str) -> Result<(String, LabelOp), ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "unable to parse label selector requirement {term:?}"
        ))
    };
    if let Some(key) = term.strip_prefix('!') {
        return Ok((key.trim().to_owned(), LabelOp::DoesNotExist));
    }
    if let Some(open) = term.find('(') {
        let (head, rest) = term.split_at(open);
        let values: Vec<String> = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(bad)?
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect();
        let mut words = head.split_whitespace();
        let (key, op) = (words.next().ok_or_else(bad)?, words.next().ok_or_else(bad)?);
        let op = match op {
            "in" => LabelOp::In(values),
            "notin" => LabelOp::NotIn(values),
            _ => return Err(bad()),
        };
        return Ok((key.to_owned(), op));
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok((
            key.trim().to_owned(),
            LabelOp::NotEquals(value.trim().to_owned()),
        ));
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok((
            key.trim().to_owned(),
            LabelOp::Equals(value.trim().to_owned()),
        ));
    }
    Ok((term.to_owned(), LabelOp::Exists))
}

/// A conjunction of `path=value` / `path!=value` tests on dotted object paths
/// (`metadata.name`, `spec.nodeName`, `status.phase`, ...). Missing fields read as "".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses the `fieldSelector` query form.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, equal, value) = if let Some((p, v)) = term.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (p, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector {term:?}: expected path=value or path!=value"
                )));
            };
            requirements.push((path.trim().to_owned(), equal, value.trim().to_owned()));
        }
        Ok(Self { requirements })
    }

    /// Whether the object satisfies every test.
    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|(path, equal, expected)| {
            let pointer = format!("/{}", path.replace('.', "/"));
            let actual = match object.pointer(&pointer) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            (actual == *expected) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_selector_operators() {
        let p = pod(json!({"app": "web", "tier": "front"}));
        let yes = [
            "",
            "app=web",
            "app==web",
            "app!=db",
            "app in (web, db)",
            "env notin (prod)",
            "app",
            "!env",
            "app=web,tier in (front),!env",
        ];
        for text in yes {
            assert!(LabelSelector::parse(text).unwrap().matches(&p), "{text}");
        }
        let no = [
            "app=db",
            "app!=web",
            "app in (db)",
            "app notin (web)",
            "env",
            "!app",
            "app=web,env",
        ];
        for text in no {
            assert!(!LabelSelector::parse(text).unwrap().matches(&p), "{text}");
        }
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn label_selector_object_form() {
        let p = pod(json!({"app": "web"}));
        let sel = json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]});
        assert!(
            LabelSelector::from_object(&sel)
                .unwrap()
                .unwrap()
                .matches(&p)
        );
        let empty = LabelSelector::from_object(&json!({})).unwrap().unwrap();
        assert!(empty.matches(&p), "the empty selector selects everything");
        assert!(LabelSelector::from_object(&Value::Null).unwrap().is_none());
        let bad = json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]});
        assert!(LabelSelector::from_object(&bad).is_err());
    }

    #[test]
    fn field_selectors() {
        let p = pod(json!({}));
        for text in [
            "metadata.name=p",
            "spec.nodeName==n1",
            "status.phase!=Pending",
            "metadata.namespace=ns",
        ] {
            assert!(FieldSelector::parse(text).unwrap().matches(&p), "{text}");
        }
        assert!(!FieldSelector::parse("spec.nodeName=").unwrap().matches(&p));
        let unscheduled = json!({"metadata": {"name": "q"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.nodeName=")
                .unwrap()
                .matches(&unscheduled)
        );
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
