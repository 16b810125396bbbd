//! Pod predicates the controllers share: identity, provisionability, resource requests.

use k8s_openapi::api::core::v1::{Container, Pod};
use karpenter_core::resources::{QuantityError, ResourceList};
use kube::ResourceExt;

/// `namespace/name`, the key pods are tracked by.
pub fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Succeeded or Failed: the pod will never run again.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub fn is_owned_by(pod: &Pod, kind: &str) -> bool {
    pod.owner_references().iter().any(|o| o.kind == kind)
}

pub fn is_owned_by_daemonset(pod: &Pod) -> bool {
    is_owned_by(pod, "DaemonSet")
}

/// Static (mirror) pods are owned by their Node.
pub fn is_owned_by_node(pod: &Pod) -> bool {
    is_owned_by(pod, "Node")
}

/// The node the pod is bound to, if any.
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The kube-scheduler marked the pod `PodScheduled=False` with reason `Unschedulable`.
pub fn failed_to_schedule(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conds| {
            conds.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

/// Has scheduling gates, so kube-scheduler is not even trying yet.
pub fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// Upstream's `IsProvisionable`: unschedulable per kube-scheduler, not bound, not nominated to
/// an existing node, not terminal or terminating, not gated, not a DaemonSet or static pod.
pub fn is_provisionable(pod: &Pod) -> bool {
    failed_to_schedule(pod)
        && node_name(pod).is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .is_none_or(str::is_empty)
        && !is_terminal(pod)
        && !is_terminating(pod)
        && !is_gated(pod)
        && !is_owned_by_daemonset(pod)
        && !is_owned_by_node(pod)
}

fn container_requests(container: &Container) -> Result<ResourceList, QuantityError> {
    match container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
    {
        Some(requests) => ResourceList::from_k8s(requests),
        None => Ok(ResourceList::new()),
    }
}

/// Effective requests of a pod as the kube-scheduler computes them: the sum of the app
/// containers (plus restartable "sidecar" init containers) or the largest plain init container,
/// whichever is larger per resource, plus pod overhead; `pods: 1` is always included.
pub fn pod_requests(pod: &Pod) -> Result<ResourceList, QuantityError> {
    let mut total = ResourceList::new();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(total);
    };
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for init in spec.init_containers.iter().flatten() {
        let requests = container_requests(init)?;
        if init.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&requests);
        } else {
            // A plain init container runs alongside the sidecars started before it.
            let mut with_sidecars = requests;
            with_sidecars.add(&sidecars);
            init_peak.max_with(&with_sidecars);
        }
    }
    for container in &spec.containers {
        total.add(&container_requests(container)?);
    }
    total.add(&sidecars);
    total.max_with(&init_peak);
    if let Some(overhead) = spec.overhead.as_ref() {
        total.add(&ResourceList::from_k8s(overhead)?);
    }
    total.set(
        karpenter_core::resources::PODS,
        karpenter_core::resources::Quantity::from_units(1),
    );
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pending_pod(name: &str, cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        }))
        .unwrap()
    }

    #[test]
    fn provisionable_requires_unschedulable_and_unbound() {
        let pod = pending_pod("a", "1");
        assert!(is_provisionable(&pod));

        let mut bound = pod.clone();
        bound.spec.as_mut().unwrap().node_name = Some("node-1".into());
        assert!(!is_provisionable(&bound));

        let mut ds: Pod = pod.clone();
        ds.metadata.owner_references = Some(vec![
            serde_json::from_value(
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "x"}),
            )
            .unwrap(),
        ]);
        assert!(!is_provisionable(&ds));

        let mut gated = pod.clone();
        gated.spec.as_mut().unwrap().scheduling_gates =
            Some(vec![serde_json::from_value(json!({"name": "g"})).unwrap()]);
        assert!(!is_provisionable(&gated));

        let mut done = pod.clone();
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(!is_provisionable(&done));

        let mut fresh = pod;
        fresh.status.as_mut().unwrap().conditions = None;
        assert!(
            !is_provisionable(&fresh),
            "kube-scheduler has not looked at it yet"
        );
    }

    #[test]
    fn requests_count_sidecars_and_init_peak() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "initContainers": [
                    {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                    {"name": "init", "resources": {"requests": {"cpu": "2"}}}
                ],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "250m"}}}
                ]
            }
        }))
        .unwrap();
        let requests = pod_requests(&pod).unwrap();
        assert_eq!(
            requests.get("cpu").millis(),
            2100,
            "init 2 + the sidecar running beside it"
        );
        assert_eq!(requests.get("memory").to_string(), "1Gi");
        assert_eq!(requests.get("pods").millis(), 1000);
    }
}
