//! The API server's checks of a `CustomResourceDefinition`, reproduced so that a CRD the real
//! server would refuse is refused by the test server too (and by a unit test before it ships).
//!
//! What is checked (the list `docs/testapi.md` documents):
//! * [`structural`]: the structural-schema rules (types everywhere, items for arrays, no
//!   `additionalProperties` beside `properties`, root `metadata` limited to name/generateName,
//!   nothing but value validations inside `anyOf/allOf/oneOf/not`, list-type markers), and every
//!   `x-kubernetes-validations` rule compiles, with `oldSelf` only where objects correlate;
//! * [`defaults`]: every `default`, with its nested defaults applied, validates against its own
//!   schema node ([`values`]: type, bounds, enum, pattern, format, required, unknown fields) and
//!   against that node's CEL rules;
//! * [`cost`]: every CEL rule's estimated cost fits the per-rule budget, and the sum over the
//!   schema (each rule times how many times it can run) fits the per-CRD budget.
//!
//! Messages follow the API server's `field.Error` rendering, e.g.
//! `spec.validation.openAPIV3Schema.properties[spec].properties[amiSelectorTerms].default:
//! Invalid value: 0: in body should have at least 1 items`.

pub(crate) mod admission;
mod cost;
pub(crate) mod defaults;
mod structural;
pub(crate) mod values;

use std::collections::HashMap;
use std::fmt;
use std::sync::{LazyLock, Mutex};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

pub use cost::{CostReport, PER_CRD_COST_LIMIT, PER_RULE_COST_LIMIT, cost_report};

/// One problem, rendered like the API server's `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Where, e.g. `spec.validation.openAPIV3Schema.properties[spec].default`.
    pub path: String,
    /// What kind of problem.
    pub kind: FieldErrorKind,
    /// Why.
    pub detail: String,
}

/// The `field.ErrorType`s the checker reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `Invalid value: <value>` (the value as Go renders it: `0`, `"array"`, ...).
    Invalid(String),
    /// `Required value`.
    Required,
    /// `Forbidden`.
    Forbidden,
    /// `Unsupported value: <value>`; the detail lists the supported values.
    NotSupported(String),
    /// `Duplicate value: <value>` (a repeated entry of a `set` or `map` list).
    Duplicate(String),
}

impl FieldError {
    pub(crate) fn invalid(
        path: impl Into<String>,
        value: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            path: path.into(),
            kind: FieldErrorKind::Invalid(value.into()),
            detail: detail.into(),
        }
    }

    pub(crate) fn required(path: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            kind: FieldErrorKind::Required,
            detail: detail.into(),
        }
    }

    pub(crate) fn forbidden(path: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            kind: FieldErrorKind::Forbidden,
            detail: detail.into(),
        }
    }

    pub(crate) fn not_supported(
        path: impl Into<String>,
        value: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            path: path.into(),
            kind: FieldErrorKind::NotSupported(value.into()),
            detail: detail.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, value) = match &self.kind {
            FieldErrorKind::Invalid(value) => ("Invalid value", Some(value)),
            FieldErrorKind::Required => ("Required value", None),
            FieldErrorKind::Forbidden => ("Forbidden", None),
            FieldErrorKind::NotSupported(value) => ("Unsupported value", Some(value)),
            FieldErrorKind::Duplicate(value) => ("Duplicate value", Some(value)),
        };
        write!(f, "{}: {what}", self.path)?;
        if let Some(value) = value {
            write!(f, ": {value}")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// A refused CRD: every problem found, in the API server's `Invalid` wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CustomResourceDefinition.apiextensions.k8s.io {name:?} is invalid: {}", render(.errors))]
pub struct CrdInvalid {
    /// `metadata.name` of the CRD.
    pub name: String,
    /// The problems (never empty).
    pub errors: Vec<FieldError>,
}

/// One error alone, several as `[a, b]`, as apimachinery's aggregate prints them.
pub(crate) fn render(errors: &[FieldError]) -> String {
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    match rendered.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Verdicts by the CRD's JSON: the check is pure, and test suites register the same CRDs in
/// every test server they build.
static VERDICTS: LazyLock<Mutex<HashMap<String, Result<(), CrdInvalid>>>> =
    LazyLock::new(Default::default);

/// Checks a CRD the way the API server does on create and update.
pub fn check_crd(crd: &CustomResourceDefinition) -> Result<(), CrdInvalid> {
    let Ok(key) = serde_json::to_string(crd) else {
        return check_crd_uncached(crd);
    };
    if let Some(verdict) = VERDICTS.lock().ok().and_then(|v| v.get(&key).cloned()) {
        return verdict;
    }
    let verdict = check_crd_uncached(crd);
    if let Ok(mut verdicts) = VERDICTS.lock() {
        verdicts.insert(key, verdict.clone());
    }
    verdict
}

fn check_crd_uncached(crd: &CustomResourceDefinition) -> Result<(), CrdInvalid> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let mut errors = Vec::new();
    let schemas: Vec<(usize, Value)> = crd
        .spec
        .versions
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let schema = v.schema.as_ref()?.open_api_v3_schema.as_ref()?;
            serde_json::to_value(schema).ok().map(|s| (i, s))
        })
        .collect();
    // The API server reports a schema shared by every version under `spec.validation` (its
    // internal form); only differing per-version schemas are reported under `spec.versions[i]`.
    let shared = schemas.len() == crd.spec.versions.len()
        && schemas.windows(2).all(|pair| pair[0].1 == pair[1].1);
    for (i, schema) in &schemas {
        let base = if shared {
            "spec.validation.openAPIV3Schema".to_string()
        } else {
            format!("spec.versions[{i}].schema.openAPIV3Schema")
        };
        errors.extend(check_schema(schema, &base));
        if shared {
            break;
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CrdInvalid { name, errors })
    }
}

/// Checks one `openAPIV3Schema`; `base` is the path the errors start with.
pub fn check_schema(schema: &Value, base: &str) -> Vec<FieldError> {
    let mut errors = structural::check(schema, base);
    errors.extend(defaults::check(schema, base));
    errors.extend(cost::check(schema, base));
    errors
}

/// A JSON value's type as the API server names it in messages.
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Child schemas with the path segment the API server prints for them.
pub(crate) fn children(node: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            out.push((format!("properties[{name}]"), child));
        }
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        out.push(("items".to_string(), items));
    }
    if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
        out.push(("additionalProperties".to_string(), additional));
    }
    out
}

#[cfg(test)]
mod tests;
