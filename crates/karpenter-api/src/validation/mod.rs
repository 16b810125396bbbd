//! Offline validation of Karpenter manifests (NodePool, NodeClaim, EC2NodeClass, NodeOverlay): the CRD schema (types, required fields, enums,
//! patterns, bounds, unknown fields), the CEL rules of [`crate::rules`] implemented in Rust, and
//! upstream's runtime checks (the NodePool `ValidationSucceeded` condition).
//!
//! The controller and `simulate` call the typed entry points ([`validate_nodepool`], ...), so an
//! invalid NodePool is rejected everywhere with the same message.

mod rules_impl;
mod schema;
mod tidy;

pub use tidy::unexpanded_variables;

pub use schema::edit_distance;

use std::fmt;
use std::sync::OnceLock;

use serde_json::Value;

use crate::autoscaling::CapacityBuffer;
use crate::crd;
use crate::rules::{CelRule, Crd};
use crate::v1::{EC2NodeClass, NodeClaim, NodePool};
use crate::v1alpha1::NodeOverlay;

pub use rules_impl::{
    OVERLAY_RESTRICTED_RESOURCES, check_capacitybuffer, check_ec2nodeclass, check_nodeclaim,
    check_nodeoverlay, check_nodepool, runtime_checks_nodeoverlay, runtime_checks_nodepool,
};

/// One problem with a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    /// Field path, e.g. `spec.template.spec.requirements[0].key` (empty for the whole object).
    pub path: String,
    /// What is wrong (the CEL message for CEL rules).
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

impl ValidationError {
    pub fn new(
        path: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
            hint: Some(hint.into()),
        }
    }

    /// A violation of a CEL rule, reported at `path`.
    pub fn rule(path: impl Into<String>, rule: &CelRule) -> Self {
        Self::new(path, rule.message, rule.hint)
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(object)"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

/// `a` + `b` → `a.b`.
pub(crate) fn join_field(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// `a` + 3 → `a[3]`.
pub(crate) fn join_index(path: &str, index: usize) -> String {
    format!("{path}[{index}]")
}

/// `labels` + `k` → `labels[k]` (map entries, as the API server prints them).
pub(crate) fn join_key(path: &str, key: &str) -> String {
    format!("{path}[{key}]")
}

/// What a document turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A v1 Karpenter object that passed every check.
    Valid,
    /// A Karpenter object with problems (legacy objects land here too, pointing at `convert`).
    Invalid(Vec<ValidationError>),
    /// Not a Karpenter object; nothing to check.
    Skipped(String),
}

/// The result of validating one document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentReport {
    /// `kind` of the document (empty if missing).
    pub kind: String,
    /// `metadata.name` (empty if missing).
    pub name: String,
    pub outcome: Outcome,
}

/// The kind of a v1 object this crate validates.
pub fn v1_kind(api_version: &str, kind: &str) -> Option<Crd> {
    match (api_version, kind) {
        ("karpenter.sh/v1", "NodePool") => Some(Crd::NodePool),
        ("karpenter.sh/v1", "NodeClaim") => Some(Crd::NodeClaim),
        ("karpenter.k8s.aws/v1", "EC2NodeClass") => Some(Crd::EC2NodeClass),
        ("karpenter.sh/v1alpha1", "NodeOverlay") => Some(Crd::NodeOverlay),
        ("autoscaling.x-k8s.io/v1beta1", "CapacityBuffer") => Some(Crd::CapacityBuffer),
        _ => None,
    }
}

/// Whether `apiVersion`/`kind` is a pre-v1 Karpenter API that `karpenter convert` handles.
pub fn is_legacy(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        ("karpenter.sh/v1alpha5", "Provisioner" | "Machine")
            | ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate")
            | ("karpenter.sh/v1beta1", "NodePool" | "NodeClaim")
            | ("karpenter.k8s.aws/v1beta1", "EC2NodeClass")
    )
}

fn schemas() -> &'static [(Crd, Value)] {
    static SCHEMAS: OnceLock<Vec<(Crd, Value)>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        Crd::ALL
            .into_iter()
            .filter_map(|which| crd::schema(which).ok().map(|s| (which, s)))
            .collect()
    })
}

fn pattern_cache() -> &'static schema::PatternCache {
    static CACHE: OnceLock<schema::PatternCache> = OnceLock::new();
    CACHE.get_or_init(schema::PatternCache::default)
}

/// Checks `value` against the finished schema of `which` (no CEL).
pub fn check_schema(which: Crd, value: &Value) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    match schemas().iter().find(|(crd, _)| *crd == which) {
        Some((_, schema)) => {
            // The CRD schema leaves metadata opaque; the API server checks it separately.
            let mut root = schema.clone();
            if let Some(props) = root.get_mut("properties").and_then(Value::as_object_mut) {
                props.insert("apiVersion".into(), serde_json::json!({ "type": "string" }));
                props.insert("kind".into(), serde_json::json!({ "type": "string" }));
                props.insert("metadata".into(), serde_json::json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true }));
            }
            schema::check(&root, value, "", pattern_cache(), &mut errors);
        }
        None => errors.push(ValidationError::new(
            "",
            "internal error: CRD schema unavailable",
            "report this bug",
        )),
    }
    errors
}

/// Validates one parsed manifest document.
pub fn validate_document(doc: &Value) -> DocumentReport {
    let text = |pointer: &str| {
        doc.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind, name) = (text("/apiVersion"), text("/kind"), text("/metadata/name"));
    let report = |outcome| DocumentReport {
        kind: kind.clone(),
        name: name.clone(),
        outcome,
    };
    if !doc.is_object() {
        return report(Outcome::Skipped("not a Kubernetes object".into()));
    }
    if is_legacy(&api_version, &kind) {
        return report(Outcome::Invalid(vec![ValidationError::new(
            "apiVersion",
            format!("{api_version} {kind} is a legacy Karpenter API that v1 no longer serves"),
            "run `karpenter convert -f FILE` to get the v1 equivalent",
        )]));
    }
    let Some(which) = v1_kind(&api_version, &kind) else {
        if let Some(error) = crate::manifest::karpenter_near_miss(&api_version, &kind) {
            return report(Outcome::Invalid(vec![error]));
        }
        return report(Outcome::Skipped(format!(
            "{api_version} {kind} is not a Karpenter v1 object"
        )));
    };
    let mut errors = check_metadata(doc);
    errors.extend(check_schema(which, doc));
    // Typed checks (CEL rules, runtime validation) need a value the types accept. When the schema
    // already failed, still run them if the value can be read, so the user sees every problem at
    // once; a value the types cannot read is already explained by the schema errors.
    let schema_failed = !errors.is_empty();
    {
        let typed = match which {
            Crd::NodePool => {
                serde_json::from_value::<NodePool>(doc.clone()).map(|np| validate_nodepool(&np))
            }
            Crd::NodeClaim => {
                serde_json::from_value::<NodeClaim>(doc.clone()).map(|nc| check_nodeclaim(&nc))
            }
            Crd::EC2NodeClass => serde_json::from_value::<EC2NodeClass>(doc.clone())
                .map(|nc| check_ec2nodeclass(&nc)),
            Crd::NodeOverlay => serde_json::from_value::<NodeOverlay>(doc.clone())
                .map(|overlay| validate_nodeoverlay(&overlay)),
            Crd::CapacityBuffer => serde_json::from_value::<CapacityBuffer>(doc.clone())
                .map(|buffer| validate_capacitybuffer(&buffer)),
        };
        match typed {
            Ok(found) => {
                for error in found {
                    if !errors.contains(&error) {
                        errors.push(error);
                    }
                }
            }
            Err(_) if schema_failed => {}
            Err(err) => errors.push(ValidationError::new(
                "",
                format!("cannot be read: {err}"),
                "fix the field named in the message",
            )),
        }
    }
    if errors.is_empty() {
        report(Outcome::Valid)
    } else {
        report(Outcome::Invalid(tidy::tidy(errors, Some(doc))))
    }
}

fn check_metadata(doc: &Value) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    let name = doc.pointer("/metadata/name");
    match name.and_then(Value::as_str) {
        // YAML reads `name: 123` or `name: yes` as a number or boolean: given, but not a name.
        None if name.is_some_and(|n| !n.is_null()) => errors.push(ValidationError::new(
            "metadata.name",
            format!("Invalid value: {}: must be a string", name.map(Value::to_string).unwrap_or_default()),
            "quote it, so YAML reads it as text: name: \"123\"",
        )),
        None => errors.push(ValidationError::new("metadata.name", "Required value", "give the object a name")),
        Some(name) if !is_dns_subdomain(name) => errors.push(ValidationError::new(
            "metadata.name",
            format!("Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
            "use a name such as default or gpu-pool",
        )),
        Some(_) => {}
    }
    errors
}

/// A lowercase RFC 1123 subdomain (object names).
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Every check a NodePool must pass on creation: the schema-level checks expressible on the typed
/// value, the CEL rules and upstream's runtime validation.
pub fn validate_nodepool(nodepool: &NodePool) -> Vec<ValidationError> {
    let mut errors = match serde_json::to_value(nodepool) {
        Ok(value) => check_schema(Crd::NodePool, &value),
        Err(err) => vec![ValidationError::new(
            "",
            format!("cannot be serialized: {err}"),
            "report this bug",
        )],
    };
    errors.extend(check_nodepool(nodepool));
    errors.extend(runtime_checks_nodepool(nodepool));
    dedup(errors)
}

/// Every check a NodeClaim must pass on creation.
pub fn validate_nodeclaim(nodeclaim: &NodeClaim) -> Vec<ValidationError> {
    let mut errors = match serde_json::to_value(nodeclaim) {
        Ok(value) => check_schema(Crd::NodeClaim, &value),
        Err(err) => vec![ValidationError::new(
            "",
            format!("cannot be serialized: {err}"),
            "report this bug",
        )],
    };
    errors.extend(check_nodeclaim(nodeclaim));
    dedup(errors)
}

/// Every check an EC2NodeClass must pass on creation.
pub fn validate_ec2nodeclass(nodeclass: &EC2NodeClass) -> Vec<ValidationError> {
    let mut errors = match serde_json::to_value(nodeclass) {
        Ok(value) => check_schema(Crd::EC2NodeClass, &value),
        Err(err) => vec![ValidationError::new(
            "",
            format!("cannot be serialized: {err}"),
            "report this bug",
        )],
    };
    errors.extend(check_ec2nodeclass(nodeclass));
    dedup(errors)
}

/// Every check a NodeOverlay must pass: schema, CEL rules and upstream's runtime validation.
pub fn validate_nodeoverlay(overlay: &NodeOverlay) -> Vec<ValidationError> {
    let mut errors = match serde_json::to_value(overlay) {
        Ok(value) => check_schema(Crd::NodeOverlay, &value),
        Err(err) => vec![ValidationError::new(
            "",
            format!("cannot be serialized: {err}"),
            "report this bug",
        )],
    };
    errors.extend(check_nodeoverlay(overlay));
    errors.extend(runtime_checks_nodeoverlay(overlay));
    dedup(errors)
}

/// Every check a CapacityBuffer must pass: schema and CEL rules.
pub fn validate_capacitybuffer(buffer: &CapacityBuffer) -> Vec<ValidationError> {
    let mut errors = match serde_json::to_value(buffer) {
        Ok(value) => check_schema(Crd::CapacityBuffer, &value),
        Err(err) => vec![ValidationError::new(
            "",
            format!("cannot be serialized: {err}"),
            "report this bug",
        )],
    };
    errors.extend(check_capacitybuffer(buffer));
    dedup(errors)
}

fn dedup(errors: Vec<ValidationError>) -> Vec<ValidationError> {
    tidy::tidy(errors, None)
}

pub use rules_impl::{
    validate_ec2nodeclass_update, validate_nodeclaim_update, validate_nodepool_update,
};
