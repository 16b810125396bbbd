//! Workloads as Kubernetes makes them. Here, the API server's checks on the workloads `simulate`
//! reads (pods, Deployments, ReplicaSets, StatefulSets, Jobs, DaemonSets, RuntimeClasses), on the
//! raw document so every message names the field: counts that may not be negative, resource
//! quantities, topology spread constraints, tolerations and node-affinity operators. What the API
//! server would refuse must not be planned. Then admission (`admission`: RuntimeClass, the
//! claims of a StatefulSet) and the controllers' expansion into pods (`expand`).

mod admission;
mod expand;
pub mod scale_steps;

pub use expand::{Workload, WorkloadSource};
pub use scale_steps::ScaleSchedule;

use karpenter_core::resources::Quantity;
use serde_json::Value;

/// One problem: (field path, message, hint).
pub type Finding = (String, String, String);

const WHEN_UNSATISFIABLE: [&str; 2] = ["DoNotSchedule", "ScheduleAnyway"];
const TOLERATION_OPERATORS: [&str; 2] = ["Exists", "Equal"];
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const NODE_SELECTOR_OPERATORS: [&str; 6] = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"];

/// Checks one object of `kind`; empty when it is fine (or not a workload).
pub fn check(kind: &str, value: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    if kind == "RuntimeClass" {
        runtime_class(value, &mut out);
        return out;
    }
    let pod_spec_path = match kind {
        "Pod" => "spec",
        "Deployment" | "ReplicaSet" | "StatefulSet" | "Job" | "DaemonSet" => "spec.template.spec",
        _ => return out,
    };
    match kind {
        "Deployment" | "ReplicaSet" => {
            count(value, "spec.replicas", &mut out);
        }
        "StatefulSet" => {
            count(value, "spec.replicas", &mut out);
            claim_templates(value, &mut out);
        }
        "Job" => {
            count(value, "spec.parallelism", &mut out);
            count(value, "spec.completions", &mut out);
        }
        _ => {}
    }
    match at(value, pod_spec_path) {
        Some(spec) if spec.is_object() => pod_spec(spec, pod_spec_path, &mut out),
        Some(Value::Null) | None => out.push((
            pod_spec_path.to_string(),
            "Required value".into(),
            format!("a {kind} needs {pod_spec_path} with at least one container"),
        )),
        Some(_) => out.push((
            pod_spec_path.to_string(),
            "Invalid value: must be an object".into(),
            "see `kubectl explain pod.spec`".into(),
        )),
    }
    out
}

/// A StatefulSet's claims are named after their templates: each needs a name, used once.
fn claim_templates(value: &Value, out: &mut Vec<Finding>) {
    let Some(Value::Array(templates)) = at(value, "spec.volumeClaimTemplates") else {
        return;
    };
    let mut seen = Vec::new();
    for (i, template) in templates.iter().enumerate() {
        let path = format!("spec.volumeClaimTemplates[{i}].metadata.name");
        match template.pointer("/metadata/name").and_then(Value::as_str) {
            None | Some("") => out.push((
                path,
                "Required value".into(),
                "name the template: replica i's claim is <template>-<statefulset>-<i>".into(),
            )),
            Some(name) if seen.contains(&name) => out.push((
                path,
                format!("Duplicate value: {name:?}"),
                "give each volumeClaimTemplate its own name".into(),
            )),
            Some(name) => seen.push(name),
        }
        if let Some(requests) = template.pointer("/spec/resources/requests") {
            quantities(
                requests,
                &format!("spec.volumeClaimTemplates[{i}].spec.resources.requests"),
                out,
            );
        }
    }
}

/// A RuntimeClass needs a handler; its fixed pod overhead is a map of quantities.
fn runtime_class(value: &Value, out: &mut Vec<Finding>) {
    if value
        .get("handler")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        out.push((
            "handler".into(),
            "Required value".into(),
            "name the CRI handler, e.g. handler: runc".into(),
        ));
    }
    if let Some(pod_fixed) = at(value, "overhead.podFixed") {
        quantities(pod_fixed, "overhead.podFixed", out);
    }
}

/// The value at a dotted path of object keys.
fn at<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |v, key| v.get(key))
}

/// A replica-like count: an integer from 0 to 2^31-1.
fn count(value: &Value, path: &str, out: &mut Vec<Finding>) {
    let Some(v) = at(value, path) else { return };
    if v.is_null() {
        return;
    }
    match v.as_i64() {
        Some(n) if n < 0 => out.push((
            path.into(),
            format!("Invalid value: {n}: must be greater than or equal to 0"),
            "use 0 or more".into(),
        )),
        Some(n) if n > i64::from(i32::MAX) => out.push((
            path.into(),
            format!("Invalid value: {n}: must be at most 2147483647"),
            "use a smaller count".into(),
        )),
        Some(_) => {}
        None => out.push((
            path.into(),
            format!("Invalid value: {v}: must be an integer"),
            "write a whole number such as 3".into(),
        )),
    }
}

fn pod_spec(spec: &Value, path: &str, out: &mut Vec<Finding>) {
    match spec.get("containers") {
        Some(Value::Array(cs)) if !cs.is_empty() => {
            containers(cs, &format!("{path}.containers"), out)
        }
        _ => out.push((
            format!("{path}.containers"),
            "Required value".into(),
            "a pod needs at least one container".into(),
        )),
    }
    if let Some(Value::Array(cs)) = spec.get("initContainers") {
        containers(cs, &format!("{path}.initContainers"), out);
    }
    if let Some(overhead) = spec.get("overhead") {
        quantities(overhead, &format!("{path}.overhead"), out);
    }
    if let Some(Value::Array(spreads)) = spec.get("topologySpreadConstraints") {
        for (i, tsc) in spreads.iter().enumerate() {
            spread(tsc, &format!("{path}.topologySpreadConstraints[{i}]"), out);
        }
    }
    if let Some(Value::Array(tolerations)) = spec.get("tolerations") {
        for (i, t) in tolerations.iter().enumerate() {
            toleration(t, &format!("{path}.tolerations[{i}]"), out);
        }
    }
    let terms = at(
        spec,
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
    );
    if let Some(Value::Array(terms)) = terms {
        for (i, term) in terms.iter().enumerate() {
            if let Some(Value::Array(exprs)) = term.get("matchExpressions") {
                for (j, e) in exprs.iter().enumerate() {
                    let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
                    if !NODE_SELECTOR_OPERATORS.contains(&op) {
                        out.push((
                            format!("{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}].matchExpressions[{j}].operator"),
                            format!("Unsupported value: {op:?}"),
                            format!("supported values: {}", NODE_SELECTOR_OPERATORS.join(", ")),
                        ));
                    }
                }
            }
        }
    }
}

fn containers(cs: &[Value], path: &str, out: &mut Vec<Finding>) {
    for (i, c) in cs.iter().enumerate() {
        let path = format!("{path}[{i}]");
        let requests = c.pointer("/resources/requests");
        let limits = c.pointer("/resources/limits");
        let parsed_requests =
            requests.map(|r| quantities(r, &format!("{path}.resources.requests"), out));
        let parsed_limits = limits.map(|l| quantities(l, &format!("{path}.resources.limits"), out));
        if let (Some(requests), Some(limits)) = (parsed_requests, parsed_limits) {
            for (name, request) in &requests {
                if let Some((_, limit)) = limits.iter().find(|(n, _)| n == name)
                    && request > limit
                {
                    out.push((
                        format!("{path}.resources.requests[{name}]"),
                        format!("Invalid value: {request}: must be less than or equal to {name} limit of {limit}"),
                        "raise the limit or lower the request".into(),
                    ));
                }
            }
        }
    }
}

/// Checks a resource map; returns the entries that parsed.
fn quantities(map: &Value, path: &str, out: &mut Vec<Finding>) -> Vec<(String, Quantity)> {
    let mut parsed = Vec::new();
    let Some(map) = map.as_object() else {
        if !map.is_null() {
            out.push((
                path.into(),
                "Invalid value: must be a map of resource names to quantities".into(),
                "e.g. {cpu: 500m, memory: 1Gi}".into(),
            ));
        }
        return parsed;
    };
    for (name, q) in map {
        let field = format!("{path}[{name}]");
        let quantity = match q {
            Value::String(s) => Quantity::parse(s).map_err(|e| e.to_string()),
            Value::Number(n) => Quantity::parse(&n.to_string()).map_err(|e| e.to_string()),
            other => Err(format!(
                "invalid quantity {other}: must be a string or number"
            )),
        };
        match quantity {
            Ok(value) if value < Quantity::ZERO => out.push((
                field,
                format!("Invalid value: {q}: must be greater than or equal to 0"),
                "resource quantities may not be negative".into(),
            )),
            Ok(value) => parsed.push((name.clone(), value)),
            Err(message) => out.push((
                field,
                format!("Invalid value: {message}"),
                "use a quantity such as 500m, 2, 1Gi".into(),
            )),
        }
    }
    parsed
}

fn spread(tsc: &Value, path: &str, out: &mut Vec<Finding>) {
    match tsc.get("maxSkew").map(|v| (v, v.as_i64())) {
        None | Some((Value::Null, _)) => out.push((
            format!("{path}.maxSkew"),
            "Required value".into(),
            "set maxSkew to 1 or more".into(),
        )),
        Some((_, Some(n))) if n > 0 => {}
        Some((v, _)) => out.push((
            format!("{path}.maxSkew"),
            format!("Invalid value: {v}: must be greater than zero"),
            "set maxSkew to 1 or more".into(),
        )),
    }
    let when = tsc.get("whenUnsatisfiable").and_then(Value::as_str);
    match when {
        Some(w) if WHEN_UNSATISFIABLE.contains(&w) => {}
        Some(w) => out.push((
            format!("{path}.whenUnsatisfiable"),
            format!("Unsupported value: {w:?}"),
            format!("supported values: {}", WHEN_UNSATISFIABLE.join(", ")),
        )),
        None => out.push((
            format!("{path}.whenUnsatisfiable"),
            "Required value".into(),
            format!("supported values: {}", WHEN_UNSATISFIABLE.join(", ")),
        )),
    }
    if tsc
        .get("topologyKey")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        out.push((
            format!("{path}.topologyKey"),
            "Required value: can not be empty".into(),
            "e.g. topology.kubernetes.io/zone".into(),
        ));
    }
    if let Some(v) = tsc.get("minDomains").filter(|v| !v.is_null()) {
        if v.as_i64().is_none_or(|n| n <= 0) {
            out.push((
                format!("{path}.minDomains"),
                format!("Invalid value: {v}: must be greater than zero"),
                "omit minDomains or set it to 1 or more".into(),
            ));
        } else if when != Some("DoNotSchedule") {
            out.push((
                format!("{path}.minDomains"),
                format!(
                    "Invalid value: {v}: can only use minDomains if whenUnsatisfiable=DoNotSchedule"
                ),
                "remove minDomains or use whenUnsatisfiable: DoNotSchedule".into(),
            ));
        }
    }
}

fn toleration(t: &Value, path: &str, out: &mut Vec<Finding>) {
    let operator = t.get("operator").and_then(Value::as_str).unwrap_or("Equal");
    if !TOLERATION_OPERATORS.contains(&operator) {
        out.push((
            format!("{path}.operator"),
            format!("Unsupported value: {operator:?}"),
            format!("supported values: {}", TOLERATION_OPERATORS.join(", ")),
        ));
    }
    if operator == "Exists"
        && t.get("value")
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty())
    {
        out.push((
            format!("{path}.operator"),
            "Invalid value: \"Exists\": value must be empty when `operator` is 'Exists'".into(),
            "drop the value, or use operator: Equal".into(),
        ));
    }
    if let Some(effect) = t.get("effect").and_then(Value::as_str)
        && !effect.is_empty()
        && !TAINT_EFFECTS.contains(&effect)
    {
        out.push((
            format!("{path}.effect"),
            format!("Unsupported value: {effect:?}"),
            format!("supported values: {}", TAINT_EFFECTS.join(", ")),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(kind: &str, yaml: &str) -> Vec<String> {
        let value: Value = serde_saphyr::from_str(yaml).unwrap();
        check(kind, &value).into_iter().map(|f| f.0).collect()
    }

    #[test]
    fn api_server_checks_name_the_field() {
        let deployment = r#"
spec:
  replicas: -1
  template:
    spec:
      containers:
      - name: c
        resources: {requests: {cpu: "-1"}, limits: {memory: 1Gi}}
      topologySpreadConstraints:
      - {maxSkew: 0, topologyKey: zone, whenUnsatisfiable: Sometimes}
      tolerations:
      - {key: a, operator: Matches}
"#;
        assert_eq!(
            paths("Deployment", deployment),
            [
                "spec.replicas",
                "spec.template.spec.containers[0].resources.requests[cpu]",
                "spec.template.spec.topologySpreadConstraints[0].maxSkew",
                "spec.template.spec.topologySpreadConstraints[0].whenUnsatisfiable",
                "spec.template.spec.tolerations[0].operator",
            ]
        );
        assert_eq!(
            paths(
                "Job",
                "spec: {parallelism: -2, template: {spec: {containers: [{name: c}]}}}"
            ),
            ["spec.parallelism"]
        );
        assert!(
            paths(
                "Pod",
                "spec: {containers: [{name: c, resources: {requests: {cpu: 100m}}}]}"
            )
            .is_empty()
        );
        assert!(paths("ConfigMap", "data: {}").is_empty());
    }
}
