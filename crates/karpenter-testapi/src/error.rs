//! Failures as the server reports them: Kubernetes `Status` objects with a code and a reason.

use serde_json::{Value, json};

/// A failed request, answered to clients as a `meta/v1 Status` with `code` and `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code (404, 409, 422, 429, ...).
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, ...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl ApiError {
    /// Any error with an explicit code, reason and message.
    pub fn new(code: u16, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// 404 `NotFound` for `resource "name"`.
    pub fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
    }

    /// 409 `AlreadyExists`.
    pub fn already_exists(resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
    }

    /// 409 `Conflict`, e.g. a stale `resourceVersion`.
    pub fn conflict(resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        )
    }

    /// 422 `Invalid`.
    pub fn invalid(resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{resource} \"{name}\" is invalid: {why}"),
        )
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405 `MethodNotAllowed`.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 429 `TooManyRequests` (an eviction blocked by a PodDisruptionBudget, or injected throttling).
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", message)
    }

    /// 410 `Expired`: a watch asked for history the server no longer keeps.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 500 `InternalError`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` object sent on the wire.
    pub fn to_status(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        })
    }
}

/// The `Status` a successful eviction or collection delete answers with.
pub(crate) fn success_status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}
