//! Pods as every caller sees them: identity, the predicates the provisioner and the drain share
//! (provisionable, terminal, owned by a DaemonSet or a Node, ...), and what a pod asks of a node
//! (effective resource requests per Kubernetes' rules; the one place requests are computed).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::resources::{self, Quantity, QuantityError, ResourceList};

mod do_not_disrupt;
mod limit_range;
mod object;

pub use do_not_disrupt::{
    DoNotDisrupt, GoDurationError, do_not_disrupt, has_do_not_disrupt, invalid_do_not_disrupt,
    parse_go_duration,
};

pub use limit_range::{ContainerDefaults, apply_limit_ranges, container_defaults};
pub use object::{
    Container, Pod, PodCondition, PodSpec, PodStatus, Volume, append_shared, share_parts,
};

/// A pod's quantities could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pod {namespace}/{name}: {field}: {source}")]
pub struct PodError {
    pub namespace: String,
    pub name: String,
    /// e.g. `spec.containers[app].resources.requests[cpu]`.
    pub field: String,
    #[source]
    pub source: QuantityError,
}

/// The namespace a pod lives in: `default` when unset, as the API server defaults it. The one
/// place that rule is written, so every key and message names a pod the same way.
pub fn namespace(pod: &Pod) -> &str {
    pod.metadata
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or("default")
}

/// The pod's name (empty when unset).
pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

/// `namespace/name`, the one key pods are known by: the cluster state, nominations, the drain,
/// `simulate` and the sim kubelet all key pods with it.
pub fn key(pod: &Pod) -> String {
    format!("{}/{}", namespace(pod), name(pod))
}

/// The node the pod is bound to, if any.
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The UID of the pod's controlling owner (the ReplicaSet of a Deployment's pod, ...), if any.
pub fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
        .filter(|uid| !uid.is_empty())
}

pub fn is_owned_by(pod: &Pod, kind: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == kind)
}

pub fn is_owned_by_daemonset(pod: &Pod) -> bool {
    is_owned_by(pod, "DaemonSet")
}

/// Static (mirror) pods are owned by their Node.
pub fn is_owned_by_node(pod: &Pod) -> bool {
    is_owned_by(pod, "Node")
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
            .is_none_or(String::is_empty)
        && !is_terminal(pod)
        && !is_terminating(pod)
        && !is_gated(pod)
        && !is_owned_by_daemonset(pod)
        && !is_owned_by_node(pod)
}

/// A pod that has finished (`Succeeded` or `Failed`): it holds no resources and no longer counts
/// for topology.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// A pod being deleted: it still holds its resources but no longer counts for topology.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// A container's requests, with limits standing in for absent requests (as the API server
/// defaults them).
fn container_requests(
    resources: Option<&ResourceRequirements>,
    field: &str,
    err: &dyn Fn(String, QuantityError) -> PodError,
) -> Result<ResourceList, PodError> {
    let mut out = ResourceList::new();
    let Some(resources) = resources else {
        return Ok(out);
    };
    let empty = BTreeMap::new();
    let requests = resources.requests.as_ref().unwrap_or(&empty);
    let limits = resources.limits.as_ref().unwrap_or(&empty);
    let parse = |kind: &str, name: &str, q: &K8sQuantity| {
        Quantity::try_from(q).map_err(|e| err(format!("{field}.resources.{kind}[{name}]"), e))
    };
    for (name, q) in limits {
        if !requests.contains_key(name) {
            out.set(name, parse("limits", name, q)?);
        }
    }
    for (name, q) in requests {
        out.set(name, parse("requests", name, q)?);
    }
    Ok(out)
}

fn is_restartable_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The resources the scheduler reserves for the pod, plus `pods: 1`:
/// `max(sum(containers) + sum(sidecars), max over init containers i of (init_i + sidecars started
/// before i))`, plus pod `overhead`; pod-level `spec.resources` requests override the container
/// aggregate for the resources they name.
pub fn effective_requests(pod: &Pod) -> Result<ResourceList, PodError> {
    let err = |field: String, source: QuantityError| PodError {
        namespace: namespace(pod).to_string(),
        name: name(pod).to_string(),
        field,
        source,
    };
    let mut total = ResourceList::new();
    let Some(spec) = pod.spec.as_ref() else {
        total.set(resources::PODS, Quantity::from_units(1));
        return Ok(total);
    };
    for c in spec.containers.iter() {
        let field = format!("spec.containers[{}]", c.name);
        total.add(&container_requests(c.resources.as_ref(), &field, &err)?);
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for c in spec.init_containers() {
        let field = format!("spec.initContainers[{}]", c.name);
        let requests = container_requests(c.resources.as_ref(), &field, &err)?;
        if is_restartable_sidecar(c) {
            sidecars.add(&requests);
            // A sidecar starting also needs room for the sidecars already running.
            init_max.max_with(&sidecars);
        } else {
            let mut during_init = requests;
            during_init.add(&sidecars);
            init_max.max_with(&during_init);
        }
    }
    total.add(&sidecars);
    total.max_with(&init_max);
    if let Some(pod_level) = spec.resources.as_ref() {
        let pod_requests = container_requests(Some(pod_level), "spec", &err)?;
        for (name, q) in pod_requests.iter() {
            total.set(name, q);
        }
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        for (name, q) in overhead {
            let q = Quantity::try_from(q).map_err(|e| err(format!("spec.overhead[{name}]"), e))?;
            total.set(name, total.get(name) + q);
        }
    }
    total.set(resources::PODS, Quantity::from_units(1));
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
    fn key_defaults_a_missing_namespace_to_default() {
        let mut pod = pending_pod("web-1", "1");
        assert_eq!(key(&pod), "default/web-1");
        pod.metadata.namespace = Some("shop".into());
        assert_eq!(key(&pod), "shop/web-1");
        for missing in [None, Some(String::new())] {
            pod.metadata.namespace = missing;
            assert_eq!(namespace(&pod), "default");
            assert_eq!(key(&pod), "default/web-1");
        }
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
            Some(vec![serde_json::from_value(json!({"name": "g"})).unwrap()].into());
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

    use crate::pod::PodSpec;

    fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        let map = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
                    .collect()
            })
        };
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: map(requests),
                limits: map(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: containers.into(),
                init_containers: Some(init.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn cpu(list: &ResourceList) -> i64 {
        list.get("cpu").millis()
    }

    #[test]
    fn sums_containers_and_counts_one_pod() {
        let p = pod(
            vec![
                container("a", &[("cpu", "1")], &[]),
                container("b", &[("cpu", "500m")], &[]),
            ],
            vec![],
        );
        let r = effective_requests(&p).unwrap();
        assert_eq!(cpu(&r), 1500);
        assert_eq!(r.get("pods"), Quantity::from_units(1));
    }

    #[test]
    fn init_containers_take_the_max() {
        let p = pod(
            vec![container("a", &[("cpu", "1")], &[])],
            vec![container("i", &[("cpu", "2")], &[])],
        );
        assert_eq!(cpu(&effective_requests(&p).unwrap()), 2000);
        let p = pod(
            vec![container("a", &[("cpu", "3")], &[])],
            vec![container("i", &[("cpu", "2")], &[])],
        );
        assert_eq!(cpu(&effective_requests(&p).unwrap()), 3000);
    }

    #[test]
    fn restartable_sidecars_add_to_containers_and_later_inits() {
        let mut sidecar = container("side", &[("cpu", "1")], &[]);
        sidecar.restart_policy = Some("Always".into());
        // sidecar(1) then init(2): init phase needs 1+2=3; run phase 1+1=2.
        let p = pod(
            vec![container("a", &[("cpu", "1")], &[])],
            vec![sidecar.clone(), container("i", &[("cpu", "2")], &[])],
        );
        assert_eq!(cpu(&effective_requests(&p).unwrap()), 3000);
        // init(2) before the sidecar: init phase 2, run phase 1+1=2 → 2... and a big app wins.
        let p = pod(
            vec![container("a", &[("cpu", "4")], &[])],
            vec![container("i", &[("cpu", "2")], &[]), sidecar],
        );
        assert_eq!(cpu(&effective_requests(&p).unwrap()), 5000);
    }

    #[test]
    fn limits_stand_in_for_missing_requests_and_overhead_is_added() {
        let mut p = pod(
            vec![container(
                "a",
                &[("memory", "1Gi")],
                &[("cpu", "2"), ("memory", "2Gi")],
            )],
            vec![],
        );
        if let Some(spec) = p.spec.as_mut() {
            spec.overhead = Some(BTreeMap::from([(
                "cpu".to_string(),
                K8sQuantity("250m".into()),
            )]));
        }
        let r = effective_requests(&p).unwrap();
        assert_eq!(cpu(&r), 2250);
        assert_eq!(r.get("memory"), Quantity::from_gibibytes(1));
    }

    #[test]
    fn zero_quantity_requests_are_kept_as_zero() {
        let p = pod(
            vec![container(
                "a",
                &[("cpu", "0"), ("nvidia.com/gpu", "0")],
                &[],
            )],
            vec![],
        );
        let r = effective_requests(&p).unwrap();
        assert_eq!(cpu(&r), 0);
        assert!(r.get("nvidia.com/gpu").is_zero());
    }

    #[test]
    fn pod_level_resources_override_the_container_sum() {
        let mut p = pod(vec![container("a", &[("cpu", "1")], &[])], vec![]);
        if let Some(spec) = p.spec.as_mut() {
            spec.resources = Some(Box::new(ResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "cpu".to_string(),
                    K8sQuantity("3".into()),
                )])),
                ..Default::default()
            }));
        }
        assert_eq!(cpu(&effective_requests(&p).unwrap()), 3000);
    }

    #[test]
    fn bad_quantities_name_the_field() {
        let p = pod(vec![container("app", &[("cpu", "lots")], &[])], vec![]);
        let e = effective_requests(&p).unwrap_err();
        assert!(
            e.to_string()
                .contains("spec.containers[app].resources.requests[cpu]"),
            "{e}"
        );
    }
}
