//! Adapters from API objects to the scheduler's input types, so callers do not reinvent them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::pod::Pod;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{LimitRange, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use karpenter_api::well_known;
use karpenter_api::{NodeClaim, NodePool};

use super::{ExistingNode, SchedulingNodePool};
use crate::instance_type::InstanceType;
use crate::resources::{QuantityError, ResourceList};

/// An API object could not be turned into scheduler input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {field}: {source}")]
pub struct InputError {
    /// e.g. `nodepool default`.
    pub object: String,
    /// e.g. `spec.limits`.
    pub field: String,
    #[source]
    pub source: QuantityError,
}

/// A NodePool and the instance types its NodeClass offers.
pub fn node_pool(
    pool: &NodePool,
    instance_types: Vec<Arc<InstanceType>>,
) -> Result<SchedulingNodePool, InputError> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let err = |field: &str| {
        let object = format!("nodepool {name}");
        let field = field.to_string();
        move |source| InputError {
            object: object.clone(),
            field: field.clone(),
            source,
        }
    };
    let template = &pool.spec.template;
    let limits = match &pool.spec.limits {
        Some(l) => ResourceList::from_k8s(l).map_err(err("spec.limits"))?,
        None => ResourceList::new(),
    };
    let usage = match &pool.status {
        Some(s) => {
            let mut usage =
                ResourceList::from_k8s(&s.resources).map_err(err("status.resources"))?;
            if let Some(n) = s.nodes {
                usage.set(
                    well_known::NODES_RESOURCE,
                    crate::resources::Quantity::from_units(n),
                );
            }
            usage
        }
        None => ResourceList::new(),
    };
    Ok(SchedulingNodePool {
        name,
        weight: pool.spec.weight.unwrap_or(0),
        requirements: template.spec.requirements.clone(),
        labels: template
            .metadata
            .as_ref()
            .map(|m| m.labels.clone())
            .unwrap_or_default(),
        taints: template.spec.taints.clone(),
        startup_taints: template.spec.startup_taints.clone(),
        limits,
        usage,
        instance_types,
    })
}

/// A Node (with its NodeClaim, if Karpenter manages it) and the pods bound to it.
///
/// The node counts as initialized when it carries `karpenter.sh/initialized=true` or is not
/// managed by Karpenter. While uninitialized, zero node capacity/allocatable fall back to the
/// NodeClaim's status values.
pub fn existing_node(
    node: &Node,
    node_claim: Option<&NodeClaim>,
    pods: Vec<Arc<Pod>>,
) -> Result<ExistingNode, InputError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let err = |field: &str| {
        let object = format!("node {name}");
        let field = field.to_string();
        move |source| InputError {
            object: object.clone(),
            field: field.clone(),
            source,
        }
    };
    // Read in place: a copy of the status (conditions and all) per node per solve was garbage.
    let status = node.status.as_ref();
    let no_quantities = BTreeMap::new();
    let mut allocatable = ResourceList::from_k8s(
        status
            .and_then(|s| s.allocatable.as_ref())
            .unwrap_or(&no_quantities),
    )
    .map_err(err("status.allocatable"))?;
    let mut capacity = ResourceList::from_k8s(
        status
            .and_then(|s| s.capacity.as_ref())
            .unwrap_or(&no_quantities),
    )
    .map_err(err("status.capacity"))?;
    let managed = node_claim.is_some() || labels.contains_key(well_known::NODEPOOL_LABEL);
    let initialized = !managed
        || labels
            .get(well_known::NODE_INITIALIZED_LABEL)
            .is_some_and(|v| v == "true");
    let mut startup_taints = Vec::new();
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if let Some(nc) = node_claim {
        startup_taints = nc.spec.startup_taints.clone();
        let registered = labels
            .get(well_known::NODE_REGISTERED_LABEL)
            .is_some_and(|v| v == "true");
        if !registered && taints.is_empty() {
            taints = nc.spec.taints.clone();
        }
        if !initialized && let Some(s) = &nc.status {
            let claim_alloc = ResourceList::from_k8s(&s.allocatable)
                .map_err(err("nodeclaim status.allocatable"))?;
            let claim_cap =
                ResourceList::from_k8s(&s.capacity).map_err(err("nodeclaim status.capacity"))?;
            for (k, v) in claim_alloc.iter() {
                if allocatable.get(k).is_zero() {
                    allocatable.set(k, v);
                }
            }
            for (k, v) in claim_cap.iter() {
                if capacity.get(k).is_zero() {
                    capacity.set(k, v);
                }
            }
        }
    }
    Ok(ExistingNode {
        name,
        node_pool: labels.get(well_known::NODEPOOL_LABEL).cloned(),
        labels,
        taints,
        allocatable,
        capacity,
        pods,
        initialized,
        startup_taints,
        volume_limits: BTreeMap::new(),
        closed_to_moved_pods: false,
    })
}

/// The representative pod of a DaemonSet: its template, owned by the DaemonSet.
pub fn daemonset_pod(ds: &DaemonSet) -> Pod {
    let template = ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            name: ds.metadata.name.clone(),
            namespace: ds.metadata.namespace.clone(),
            labels: meta.labels,
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: ds.metadata.name.clone().unwrap_or_default(),
                uid: ds.metadata.uid.clone().unwrap_or_default(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: template.spec.map(Into::into),
        status: None,
    }
}

/// The pod the DaemonSet controller will create: [`daemonset_pod`] with the defaults of its
/// namespace's LimitRanges applied, as admission applies them to the real pod (the requests
/// that pod will really have, which the node must hold beside the pods planned onto it).
pub fn admitted_daemonset_pod<'a>(
    ds: &DaemonSet,
    limit_ranges: impl IntoIterator<Item = &'a LimitRange>,
) -> Pod {
    let mut pod = daemonset_pod(ds);
    if let Some(spec) = pod.spec.as_mut() {
        crate::pod::apply_limit_ranges(spec, limit_ranges);
    }
    pod
}

/// A NodeClaim whose Node has not registered yet (in flight), with the pods already planned
/// onto it.
///
/// Its labels are the NodeClaim's plus every single-valued `In` requirement (what the Node will
/// carry). Capacity and allocatable come from the NodeClaim's status, so before launch it has
/// none and takes no further pods (as upstream: only the launched instance says what fits).
pub fn in_flight_node_claim(
    node_claim: &NodeClaim,
    pods: Vec<Arc<Pod>>,
) -> Result<ExistingNode, InputError> {
    let name = node_claim.metadata.name.clone().unwrap_or_default();
    let err = |field: &str| {
        let object = format!("nodeclaim {name}");
        let field = field.to_string();
        move |source| InputError {
            object: object.clone(),
            field: field.clone(),
            source,
        }
    };
    let mut labels = node_claim.metadata.labels.clone().unwrap_or_default();
    for requirement in &node_claim.spec.requirements {
        if requirement.operator == "In"
            && requirement.values.len() == 1
            && let Some(value) = requirement.values.first()
        {
            labels
                .entry(requirement.key.clone())
                .or_insert_with(|| value.to_string());
        }
    }
    let (allocatable, capacity) = match &node_claim.status {
        Some(status) => (
            ResourceList::from_k8s(&status.allocatable).map_err(err("status.allocatable"))?,
            ResourceList::from_k8s(&status.capacity).map_err(err("status.capacity"))?,
        ),
        None => (ResourceList::new(), ResourceList::new()),
    };
    Ok(ExistingNode {
        name,
        node_pool: labels.get(well_known::NODEPOOL_LABEL).cloned(),
        labels,
        taints: node_claim.spec.taints.clone(),
        allocatable,
        capacity,
        pods,
        initialized: false,
        startup_taints: node_claim.spec.startup_taints.clone(),
        volume_limits: BTreeMap::new(),
        closed_to_moved_pods: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
    use karpenter_api::NodeClaimSpec;
    use karpenter_api::v1::NodeSelectorRequirementWithMinValues;

    fn requirement(key: &str, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
        NodeSelectorRequirementWithMinValues {
            key: key.into(),
            operator: "In".into(),
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        }
    }

    #[test]
    fn in_flight_node_claim_takes_single_valued_requirements_as_labels() {
        let mut claim = NodeClaim::new(
            "default-abc",
            NodeClaimSpec {
                requirements: vec![
                    requirement(well_known::CAPACITY_TYPE_LABEL, &["spot"]),
                    requirement(well_known::INSTANCE_TYPE_LABEL, &["m5.large", "m5.xlarge"]),
                ],
                ..NodeClaimSpec::default()
            },
        );
        claim.metadata.labels =
            Some([(well_known::NODEPOOL_LABEL.into(), "default".into())].into());
        let node = in_flight_node_claim(&claim, Vec::new()).unwrap();
        assert_eq!(node.name, "default-abc");
        assert_eq!(node.node_pool.as_deref(), Some("default"));
        assert_eq!(node.labels[well_known::CAPACITY_TYPE_LABEL], "spot");
        assert!(!node.labels.contains_key(well_known::INSTANCE_TYPE_LABEL));
        assert!(!node.initialized);
        assert!(
            node.allocatable.get("cpu").is_zero(),
            "not launched: no capacity yet"
        );

        claim.status = Some(karpenter_api::NodeClaimStatus {
            allocatable: [("cpu".into(), K8sQuantity("1930m".into()))].into(),
            ..Default::default()
        });
        let node = in_flight_node_claim(&claim, Vec::new()).unwrap();
        assert_eq!(node.allocatable.get("cpu").millis(), 1930);
    }
}
