//! Patch application: JSON merge patch (also used for strategic merge and server-side apply,
//! an approximation documented in docs/testapi.md) and RFC 6902 JSON patch.

use serde_json::Value;

/// The patch flavours kube-rs sends, told apart by `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`, applied as a merge patch.
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/apply-patch+yaml` (server-side apply), applied as a merge patch.
    Apply,
}

impl PatchKind {
    /// Maps a `Content-Type` header to a patch kind.
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        match media {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/json-patch+json" => Some(Self::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Why a patch does not apply (the underlying error is printed in the message).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PatchError {
    #[error("a merge or apply patch must be a JSON object")]
    NotAnObject,
    #[error("the JSON patch is not a list of operations: {0}")]
    NotOperations(serde_json::Error),
    #[error("the JSON patch does not apply: {0}")]
    DoesNotApply(json_patch::PatchError),
}

/// Applies a patch body to a copy of `current`; the error says why the patch does not apply.
pub(crate) fn apply(kind: PatchKind, current: &Value, body: &Value) -> Result<Value, PatchError> {
    let mut doc = current.clone();
    match kind {
        PatchKind::Merge | PatchKind::Strategic | PatchKind::Apply => {
            if !body.is_object() {
                return Err(PatchError::NotAnObject);
            }
            json_patch::merge(&mut doc, body);
        }
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(tolerate_null_tests(current, body))
                .map_err(PatchError::NotOperations)?;
            json_patch::patch(&mut doc, &ops).map_err(PatchError::DoesNotApply)?;
        }
    }
    Ok(doc)
}

/// Kubernetes treats `{"op": "test", "value": null}` on a missing path as passing (kube-runtime's
/// `finalizer()` relies on it to add the first finalizer); RFC 6902 libraries fail it, so such
/// operations are dropped before applying.
fn tolerate_null_tests(current: &Value, body: &Value) -> Value {
    let Some(ops) = body.as_array() else {
        return body.clone();
    };
    let passes_trivially = |op: &Value| {
        op.get("op").and_then(Value::as_str) == Some("test")
            && op.get("value").is_some_and(Value::is_null)
            && op
                .get("path")
                .and_then(Value::as_str)
                .is_some_and(|path| current.pointer(path).is_none())
    };
    Value::Array(
        ops.iter()
            .filter(|op| !passes_trivially(op))
            .cloned()
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn merge_and_json_patches() {
        let current = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": [1, 2]}});
        let merged = apply(
            PatchKind::Merge,
            &current,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"x": [3]}}),
        )
        .unwrap();
        assert_eq!(
            merged,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"x": [3]}})
        );
        let ops = json!([{"op": "test", "path": "/spec/x/0", "value": 1}, {"op": "remove", "path": "/spec/x/0"}]);
        assert_eq!(
            apply(PatchKind::Json, &current, &ops).unwrap()["spec"]["x"],
            json!([2])
        );
        let failing = json!([{"op": "test", "path": "/spec/x/0", "value": 9}]);
        assert!(apply(PatchKind::Json, &current, &failing).is_err());
        assert!(apply(PatchKind::Merge, &current, &json!([1])).is_err());
        let first_finalizer = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
        ]);
        let patched = apply(PatchKind::Json, &current, &first_finalizer).unwrap();
        assert_eq!(patched["metadata"]["finalizers"], json!(["f"]));
        assert!(
            apply(PatchKind::Json, &patched, &first_finalizer).is_err(),
            "a present value is not null"
        );
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml"),
            Some(PatchKind::Apply)
        );
        assert_eq!(
            PatchKind::from_content_type("application/json-patch+json; charset=utf-8"),
            Some(PatchKind::Json)
        );
        assert_eq!(PatchKind::from_content_type("application/json"), None);
    }
}
