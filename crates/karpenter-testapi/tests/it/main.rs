//! Integration tests: a real `kube::Client` (and kube-runtime watchers) against `TestApiServer`.
// Test helpers may panic: a failed fixture is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod crd;
mod crud;
mod eviction;
mod faults;
mod gc_delay;
mod lease;
mod runtime;
mod tcp;
mod watch;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

/// The HTTP code of a failed kube call.
pub fn code_of<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A pod labelled `app=<app>`, bound to `node` when given, Ready or not.
pub fn pod(name: &str, app: &str, node: Option<&str>, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "pause"}], "nodeName": node},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .unwrap()
}
