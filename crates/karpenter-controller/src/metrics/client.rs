//! client-go's request metrics (`client_go_request_total{code,method}`,
//! `client_go_request_duration_seconds{verb,group,version,kind,subresource}`) for every request
//! the controller's clients send (see `writes.rs`, `Gated`).

use std::time::Duration;

use super::Metrics;
use super::extra::{ApiRequestLabels, ApiResultLabels};

/// What a request's metrics are labelled with, read from its method and path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiCall {
    pub method: String,
    pub verb: String,
    pub group: String,
    pub version: String,
    /// The resource (`pods`, `nodeclaims`), as client-go's `kind` label carries it.
    pub kind: String,
    pub subresource: String,
}

impl ApiCall {
    pub fn of<B>(request: &http::Request<B>) -> Self {
        let method = request.method().as_str().to_string();
        let query = request.uri().query().unwrap_or_default();
        Self::parse(&method, request.uri().path(), query)
    }

    /// `/api/v1/namespaces/ns/pods/name/eviction`, `/apis/karpenter.sh/v1/nodeclaims`, ...
    pub fn parse(method: &str, path: &str, query: &str) -> Self {
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let (group, version, rest) = match parts.as_slice() {
            ["api", version, rest @ ..] => (String::new(), (*version).to_string(), rest),
            ["apis", group, version, rest @ ..] => {
                ((*group).to_string(), (*version).to_string(), rest)
            }
            _ => (String::new(), String::new(), &[][..]),
        };
        // Skip `namespaces/<ns>` unless the namespace itself is the object.
        let rest = match rest {
            ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
            other => other,
        };
        let (kind, name, subresource) = match rest {
            [kind] => (*kind, None, ""),
            [kind, name] => (*kind, Some(*name), ""),
            [kind, name, sub, ..] => (*kind, Some(*name), *sub),
            [] => ("", None, ""),
        };
        let watch = query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1");
        let verb = match (method, name.is_some()) {
            ("GET", _) if watch => "watch",
            ("GET", true) => "get",
            ("GET", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => "other",
        };
        ApiCall {
            method: method.to_string(),
            verb: verb.to_string(),
            group,
            version,
            kind: kind.to_string(),
            subresource: subresource.to_string(),
        }
    }
}

impl Metrics {
    /// One request answered with `code` (`<error>` without an answer) after `took`.
    pub fn record_api_call(&self, call: &ApiCall, code: &str, took: Duration) {
        self.x
            .client_go_requests
            .get_or_create(&ApiResultLabels {
                code: code.into(),
                method: call.method.clone(),
            })
            .inc();
        self.x
            .client_go_request_duration
            .get_or_create(&ApiRequestLabels {
                verb: call.verb.clone(),
                group: call.group.clone(),
                version: call.version.clone(),
                kind: call.kind.clone(),
                subresource: call.subresource.clone(),
            })
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_verb_group_version_resource_and_subresource_from_the_path() {
        let c = ApiCall::parse("POST", "/api/v1/namespaces/default/pods/web-1/eviction", "");
        assert_eq!(
            (
                c.verb.as_str(),
                c.group.as_str(),
                c.version.as_str(),
                c.kind.as_str(),
                c.subresource.as_str()
            ),
            ("create", "", "v1", "pods", "eviction")
        );
        let c = ApiCall::parse(
            "GET",
            "/apis/karpenter.sh/v1/nodeclaims",
            "watch=true&resourceVersion=1",
        );
        assert_eq!(
            (c.verb.as_str(), c.group.as_str(), c.kind.as_str()),
            ("watch", "karpenter.sh", "nodeclaims")
        );
        let c = ApiCall::parse("GET", "/apis/karpenter.sh/v1/nodeclaims", "");
        assert_eq!(c.verb, "list");
        let c = ApiCall::parse("PATCH", "/api/v1/nodes/n1/status", "");
        assert_eq!(
            (c.verb.as_str(), c.kind.as_str(), c.subresource.as_str()),
            ("patch", "nodes", "status")
        );
        let c = ApiCall::parse("DELETE", "/api/v1/namespaces/kube-system", "");
        assert_eq!((c.verb.as_str(), c.kind.as_str()), ("delete", "namespaces"));
    }
}
