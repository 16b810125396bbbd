//! The API server's `LimitRanger` admission, as it fills in a new pod's container resources from
//! the LimitRanges of its namespace: the requests a pod really gets when it is created.
//!
//! Why Karpenter needs it: a DaemonSet's (or a workload's) pod template carries no requests of
//! its own when a LimitRange supplies them, and admission only touches pods, never templates. A
//! provisioner that sizes a node from the template reserves too little for the DaemonSet's pod;
//! when that pod then arrives with its admitted requests (and a higher priority), it preempts
//! the workload's pod, which asks for yet another node that is again too small: one node per
//! pass, without end. Planning with the admitted requests sizes the node once.
//!
//! The rules (Kubernetes `plugin/pkg/admission/limitranger` and `SetDefaults_LimitRangeItem`):
//! - a `Container` item's `default` (limits) falls back to its `max`; its `defaultRequest` falls
//!   back to its `default`, then to its `min`;
//! - before admission, pod defaulting has made each request that is absent but limited equal to
//!   its limit;
//! - then every LimitRange of the namespace, in turn, sets each limit and each request a container
//!   (or init container) does not have from its defaults: the first LimitRange to set one wins.
//!
//! Pure: callers pass the LimitRanges of the pod's namespace.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{LimitRange, LimitRangeItem, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::object::{Container, PodSpec};

/// The `type` of a LimitRange item that defaults container resources.
const CONTAINER_LIMIT_TYPE: &str = "Container";

/// The defaults one LimitRange gives a container: (limits, requests).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerDefaults {
    pub limits: BTreeMap<String, Quantity>,
    pub requests: BTreeMap<String, Quantity>,
}

impl ContainerDefaults {
    fn is_empty(&self) -> bool {
        self.limits.is_empty() && self.requests.is_empty()
    }
}

/// One item's defaults after the API server's defaulting of the item itself.
fn item_defaults(item: &LimitRangeItem) -> ContainerDefaults {
    let mut limits = item.default.clone().unwrap_or_default();
    for (name, max) in item.max.iter().flatten() {
        limits.entry(name.clone()).or_insert_with(|| max.clone());
    }
    let mut requests = item.default_request.clone().unwrap_or_default();
    for (name, limit) in &limits {
        requests
            .entry(name.clone())
            .or_insert_with(|| limit.clone());
    }
    for (name, min) in item.min.iter().flatten() {
        requests.entry(name.clone()).or_insert_with(|| min.clone());
    }
    ContainerDefaults { limits, requests }
}

/// What `limit_range` gives a container that sets nothing (its `Container` items merged, a
/// later item overriding an earlier one as admission's loop does).
pub fn container_defaults(limit_range: &LimitRange) -> ContainerDefaults {
    let mut out = ContainerDefaults::default();
    let items = limit_range
        .spec
        .as_ref()
        .map(|s| s.limits.as_slice())
        .unwrap_or_default();
    for item in items.iter().filter(|i| i.type_ == CONTAINER_LIMIT_TYPE) {
        let defaults = item_defaults(item);
        out.limits.extend(defaults.limits);
        out.requests.extend(defaults.requests);
    }
    out
}

/// Pod defaulting (requests absent but limited become the limit), then each default a container
/// lacks.
fn admit_container(container: &mut Container, defaults: &[ContainerDefaults]) {
    let resources = container
        .resources
        .get_or_insert_with(ResourceRequirements::default);
    if let Some(limits) = resources.limits.as_ref() {
        let requests = resources.requests.get_or_insert_default();
        for (name, limit) in limits {
            requests
                .entry(name.clone())
                .or_insert_with(|| limit.clone());
        }
    }
    for defaults in defaults {
        if !defaults.limits.is_empty() {
            let limits = resources.limits.get_or_insert_default();
            for (name, q) in &defaults.limits {
                limits.entry(name.clone()).or_insert_with(|| q.clone());
            }
        }
        if !defaults.requests.is_empty() {
            let requests = resources.requests.get_or_insert_default();
            for (name, q) in &defaults.requests {
                requests.entry(name.clone()).or_insert_with(|| q.clone());
            }
        }
    }
    if resources.limits.as_ref().is_some_and(BTreeMap::is_empty) {
        resources.limits = None;
    }
    if resources.requests.as_ref().is_some_and(BTreeMap::is_empty) {
        resources.requests = None;
    }
    if resources.limits.is_none() && resources.requests.is_none() && resources.claims.is_none() {
        container.resources = None;
    }
}

/// Applies the LimitRanges of the pod's namespace to `spec` as admission does when the pod is
/// created (ordered by name, the order the API server lists them). Idempotent: a pod already
/// admitted is left as it is.
pub fn apply_limit_ranges<'a>(
    spec: &mut PodSpec,
    limit_ranges: impl IntoIterator<Item = &'a LimitRange>,
) {
    let mut ranges: Vec<&LimitRange> = limit_ranges.into_iter().collect();
    ranges.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let defaults: Vec<ContainerDefaults> = ranges
        .into_iter()
        .map(container_defaults)
        .filter(|d| !d.is_empty())
        .collect();
    if defaults.is_empty() {
        return;
    }
    let init_containers = spec.init_containers.as_mut().map(Arc::make_mut);
    for container in Arc::make_mut(&mut spec.containers)
        .iter_mut()
        .chain(init_containers.into_iter().flatten())
    {
        admit_container(container, &defaults);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::{Pod, effective_requests};
    use crate::resources::Quantity as Q;
    use serde_json::json;

    fn limit_range(name: &str, item: serde_json::Value) -> LimitRange {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"limits": [item]}
        }))
        .unwrap()
    }

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": containers}
        }))
        .unwrap()
    }

    fn admitted(mut pod: Pod, ranges: &[LimitRange]) -> Pod {
        apply_limit_ranges(pod.spec.as_mut().unwrap(), ranges);
        pod
    }

    fn requests(pod: &Pod) -> (Q, Q) {
        let r = effective_requests(pod).unwrap();
        (r.get("cpu"), r.get("memory"))
    }

    /// Upstream's regression spec: a LimitRange `default` of 2 CPU and 1Gi; the DaemonSet's
    /// container limits memory only, the workload's requests 4 bytes of memory.
    #[test]
    fn default_limits_become_requests_of_containers_that_set_none() {
        let ranges = [limit_range(
            "lr",
            json!({"type": "Container", "default": {"cpu": "2", "memory": "1Gi"}}),
        )];
        let daemon = admitted(
            pod(json!([{"name": "c", "resources": {"limits": {"memory": "1Gi"}}}])),
            &ranges,
        );
        assert_eq!(
            requests(&daemon),
            (Q::parse("2").unwrap(), Q::parse("1Gi").unwrap())
        );
        let workload = admitted(
            pod(json!([{"name": "c", "resources": {"requests": {"memory": "4"}}}])),
            &ranges,
        );
        assert_eq!(
            requests(&workload),
            (Q::parse("2").unwrap(), Q::parse("4").unwrap())
        );
        let limits = workload.spec.unwrap().containers[0]
            .resources
            .clone()
            .unwrap()
            .limits
            .unwrap();
        assert_eq!(limits["cpu"], Quantity("2".into()));
    }

    #[test]
    fn default_request_sets_requests_only() {
        let ranges = [limit_range(
            "lr",
            json!({"type": "Container", "defaultRequest": {"cpu": "2", "memory": "1Gi"}}),
        )];
        let bare = admitted(pod(json!([{"name": "c"}])), &ranges);
        assert_eq!(
            requests(&bare),
            (Q::parse("2").unwrap(), Q::parse("1Gi").unwrap())
        );
        assert!(
            bare.spec.unwrap().containers[0]
                .resources
                .clone()
                .unwrap()
                .limits
                .is_none()
        );
    }

    /// A limit the container sets becomes its request before the LimitRange's default request
    /// is considered (pod defaulting runs first).
    #[test]
    fn a_containers_own_limit_wins_over_the_default_request() {
        let ranges = [limit_range(
            "lr",
            json!({"type": "Container", "defaultRequest": {"cpu": "2"}}),
        )];
        let limited = admitted(
            pod(json!([{"name": "c", "resources": {"limits": {"cpu": "500m"}}}])),
            &ranges,
        );
        assert_eq!(requests(&limited).0, Q::parse("500m").unwrap());
    }

    #[test]
    fn max_and_min_stand_in_for_missing_defaults() {
        let max_only = [limit_range(
            "lr",
            json!({"type": "Container", "max": {"cpu": "3"}}),
        )];
        assert_eq!(
            requests(&admitted(pod(json!([{"name": "c"}])), &max_only)).0,
            Q::parse("3").unwrap()
        );
        let min_only = [limit_range(
            "lr",
            json!({"type": "Container", "min": {"cpu": "250m"}}),
        )];
        assert_eq!(
            requests(&admitted(pod(json!([{"name": "c"}])), &min_only)).0,
            Q::parse("250m").unwrap()
        );
    }

    #[test]
    fn pod_items_and_other_namespaces_items_do_not_default_containers() {
        let pod_item = [limit_range(
            "lr",
            json!({"type": "Pod", "max": {"cpu": "3"}}),
        )];
        let bare = admitted(pod(json!([{"name": "c"}])), &pod_item);
        assert_eq!(bare, pod(json!([{"name": "c"}])));
    }

    /// The first LimitRange (by name) to set a resource wins; init containers are defaulted too;
    /// applying twice changes nothing.
    #[test]
    fn first_limit_range_wins_init_containers_too_and_admission_is_idempotent() {
        let ranges = [
            limit_range(
                "b",
                json!({"type": "Container", "defaultRequest": {"cpu": "4", "memory": "2Gi"}}),
            ),
            limit_range(
                "a",
                json!({"type": "Container", "defaultRequest": {"cpu": "1"}}),
            ),
        ];
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c"}], "initContainers": [{"name": "i"}]}
        }))
        .unwrap();
        apply_limit_ranges(p.spec.as_mut().unwrap(), &ranges);
        let spec = p.spec.clone().unwrap();
        for c in spec.containers.iter().chain(spec.init_containers()) {
            let r = c.resources.clone().unwrap().requests.unwrap();
            assert_eq!(r["cpu"], Quantity("1".into()), "{}", c.name);
            assert_eq!(r["memory"], Quantity("2Gi".into()), "{}", c.name);
        }
        let again = admitted(p.clone(), &ranges);
        assert_eq!(again, p);
    }
}
