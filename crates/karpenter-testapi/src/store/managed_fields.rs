//! `metadata.managedFields`, as the API server keeps them: every create, update and patch
//! records who wrote (the request's `fieldManager`, else the User-Agent up to its first `/`,
//! else `unknown`), how (`Update`, or `Apply` for server-side apply), through which
//! subresource, with which API version and when. One entry per manager, operation and
//! subresource, refreshed by each write that changes the object; a no-op write records nothing.
//!
//! Not modelled: the field sets themselves (`fieldsV1` is an empty object) and the conflicts
//! server-side apply derives from them.

use serde_json::{Map, Value, json};

/// Who sent a write, as the API server names it in `managedFields`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Writer {
    pub manager: String,
    /// `Update` or `Apply`.
    pub operation: &'static str,
    /// `status` for writes through `/status`.
    pub subresource: Option<String>,
}

impl Writer {
    /// The manager the API server records: `fieldManager`, else the User-Agent's product (the
    /// part before the first `/`), else `unknown`.
    pub(crate) fn new(
        field_manager: Option<&str>,
        user_agent: Option<&str>,
        apply: bool,
        subresource: Option<&str>,
    ) -> Self {
        let manager = field_manager
            .filter(|m| !m.is_empty())
            .or_else(|| {
                user_agent
                    .and_then(|ua| ua.split('/').next())
                    .filter(|p| !p.is_empty())
            })
            .unwrap_or("unknown")
            .to_owned();
        Writer {
            manager,
            operation: if apply { "Apply" } else { "Update" },
            subresource: subresource.map(str::to_owned),
        }
    }

    fn matches(&self, entry: &Value) -> bool {
        entry.get("manager").and_then(Value::as_str) == Some(self.manager.as_str())
            && entry.get("operation").and_then(Value::as_str) == Some(self.operation)
            && entry.get("subresource").and_then(Value::as_str) == self.subresource.as_deref()
    }
}

/// A write that sends no `managedFields` keeps the object's (the API server only replaces them
/// when the request sets them).
pub(crate) fn keep_when_unset(meta: &mut Map<String, Value>, old_meta: &Map<String, Value>) {
    if !meta.contains_key("managedFields")
        && let Some(entries) = old_meta.get("managedFields")
    {
        meta.insert("managedFields".into(), entries.clone());
    }
}

/// Records `writer`'s write of `object` at `time` (RFC 3339).
pub(crate) fn stamp(object: &mut Value, writer: &Writer, time: &str) {
    let api_version = object
        .get("apiVersion")
        .cloned()
        .unwrap_or_else(|| json!(""));
    let mut entry = json!({
        "manager": writer.manager,
        "operation": writer.operation,
        "apiVersion": api_version,
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": {},
    });
    if let (Some(sub), Some(map)) = (&writer.subresource, entry.as_object_mut()) {
        map.insert("subresource".into(), json!(sub));
    }
    let meta = super::metadata_mut(object);
    let mut entries: Vec<Value> = meta
        .get("managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match entries.iter_mut().find(|e| writer.matches(e)) {
        Some(existing) => *existing = entry,
        None => entries.push(entry),
    }
    meta.insert("managedFields".into(), Value::Array(entries));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_is_the_field_manager_else_the_user_agent_product_else_unknown() {
        let named = Writer::new(Some("karpenter"), Some("kubectl/v1.33"), false, None);
        assert_eq!(named.manager, "karpenter");
        let by_agent = Writer::new(None, Some("kubectl/v1.33 (linux/amd64)"), false, None);
        assert_eq!(by_agent.manager, "kubectl");
        assert_eq!(Writer::new(Some(""), None, false, None).manager, "unknown");
        assert_eq!(Writer::new(Some("m"), None, true, None).operation, "Apply");
    }

    #[test]
    fn one_entry_per_manager_operation_and_subresource() {
        let mut object = json!({"apiVersion": "v1", "metadata": {"name": "a"}});
        let main = Writer::new(Some("karpenter"), None, false, None);
        let status = Writer::new(Some("karpenter"), None, false, Some("status"));
        stamp(&mut object, &main, "2026-01-01T00:00:00Z");
        stamp(&mut object, &status, "2026-01-01T00:00:01Z");
        stamp(&mut object, &main, "2026-01-01T00:00:02Z");
        let entries = object["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["time"], "2026-01-01T00:00:02Z");
        assert_eq!(entries[0]["operation"], "Update");
        assert_eq!(entries[1]["subresource"], "status");
    }
}
