//! NodePool arithmetic shared by the provisioner, the NodePool controllers and `simulate`:
//! what a pool uses, its limits, and the template hash.

pub mod hash;
pub mod static_capacity;

use std::collections::BTreeSet;

use karpenter_api::NodePool;
use karpenter_api::well_known::NODES_RESOURCE;

use crate::resources::{self, Quantity, QuantityError, ResourceList};
use crate::state::ClusterState;

/// Capacity provisioned for `pool`: the summed capacity of its nodes and in-flight NodeClaims
/// not being deleted, with `nodes` = their count. cpu/memory/pods/ephemeral-storage/nodes are
/// always present (0 when empty), as upstream.
pub fn usage(state: &ClusterState, pool: &str) -> ResourceList {
    usage_without(state, pool, &BTreeSet::new())
}

/// [`usage`] as if the nodes named in `without` (Node or NodeClaim names) were gone.
pub fn usage_without(state: &ClusterState, pool: &str, without: &BTreeSet<String>) -> ResourceList {
    let mut total = ResourceList::new();
    for base in [
        resources::CPU,
        resources::MEMORY,
        resources::PODS,
        resources::EPHEMERAL_STORAGE,
        NODES_RESOURCE,
    ] {
        total.set(base, Quantity::ZERO);
    }
    let mut nodes = 0;
    for node in state.state_nodes() {
        let left_out = without.contains(&node.name())
            || node
                .nodeclaim
                .is_some_and(|c| without.contains(c.metadata.name.as_deref().unwrap_or_default()));
        if node.nodepool() == Some(pool)
            && node.is_managed()
            && !node.marked_for_deletion()
            && !left_out
        {
            total.add(&node.capacity());
            nodes += 1;
        }
    }
    total.set(NODES_RESOURCE, Quantity::from_units(nodes));
    total
}

/// A NodePool's `spec.limits` holds a value that is not a quantity (printed in the message, so
/// not also the `source()`: a `{:#}` chain would repeat it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spec.limits: {0}")]
pub struct LimitsError(pub QuantityError);

/// The pool's limits, parsed; an unparsable limit is reported naming the resource.
pub fn limits(pool: &NodePool) -> Result<ResourceList, LimitsError> {
    match &pool.spec.limits {
        None => Ok(ResourceList::new()),
        Some(map) => ResourceList::from_k8s(map).map_err(LimitsError),
    }
}

/// The first resource whose usage already exceeds the limit, upstream's `ExceededBy`.
pub fn exceeded_limit(limits: &ResourceList, usage: &ResourceList) -> Option<String> {
    limits
        .iter()
        .find(|(name, limit)| usage.get(name) > *limit)
        .map(|(name, limit)| {
            format!(
                "{name} limit {limit} exceeded (in use: {})",
                usage.get(name)
            )
        })
}

/// A static NodePool (`spec.replicas`): the dynamic scheduler never adds NodeClaims to it; it
/// holds exactly `replicas` NodeClaims (upstream's static capacity).
pub fn static_replicas(pool: &NodePool) -> Option<i64> {
    pool.spec.replicas
}
