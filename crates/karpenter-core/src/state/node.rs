//! A node as the controllers see it: a Node, its NodeClaim, or both, with the pods bound to it.

use std::collections::BTreeMap;

use crate::pod::Pod;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use karpenter_api::NodeClaim;
use karpenter_api::well_known::{NODE_INITIALIZED_LABEL, NODEPOOL_LABEL, UNREGISTERED_TAINT_KEY};
use kube_core::ResourceExt;

use crate::pod;
use crate::resources::ResourceList;

/// A Node joined with its NodeClaim. `node` is `None` while the NodeClaim is in flight;
/// `nodeclaim` is `None` for nodes Karpenter does not manage.
#[derive(Clone, Debug)]
pub struct StateNode<'a> {
    pub node: Option<&'a Node>,
    pub nodeclaim: Option<&'a NodeClaim>,
    pub pods: Vec<&'a Pod>,
    /// Karpenter marked it for deletion ([`super::ClusterState::mark_for_deletion`]).
    pub marked: bool,
}

fn resource_list(map: Option<&BTreeMap<String, K8sQuantity>>) -> ResourceList {
    // A malformed quantity on a cluster object must not stop the controller; it counts as absent.
    map.and_then(|m| ResourceList::from_k8s(m).ok())
        .unwrap_or_default()
}

impl<'a> StateNode<'a> {
    pub fn new(
        node: Option<&'a Node>,
        nodeclaim: Option<&'a NodeClaim>,
        pods: Vec<&'a Pod>,
    ) -> Self {
        StateNode {
            node,
            nodeclaim,
            pods,
            marked: false,
        }
    }

    /// The Node's name, or the NodeClaim's while no Node exists.
    pub fn name(&self) -> String {
        match (self.node, self.nodeclaim) {
            (Some(node), _) => node.name_any(),
            (None, Some(claim)) => claim.name_any(),
            (None, None) => String::new(),
        }
    }

    /// The name nominations to this node are kept under ([`super::ClusterState::nominate`]):
    /// its NodeClaim's, else (a Node Karpenter does not manage) the Node's.
    pub fn nomination_key(&self) -> String {
        self.nodeclaim
            .map_or_else(|| self.name(), ResourceExt::name_any)
    }

    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.node
            .and_then(|n| n.labels().get(key))
            .or_else(|| self.nodeclaim.and_then(|c| c.labels().get(key)))
            .map(String::as_str)
    }

    pub fn nodepool(&self) -> Option<&'a str> {
        self.label(NODEPOOL_LABEL)
    }

    /// A Node that joined the cluster more than `grace` ago and still carries the
    /// `karpenter.sh/unregistered` taint: registration (seconds when healthy) is stuck, and
    /// kube-scheduler cannot put pods there. Counting it as capacity would nominate pods to it
    /// pass after pass instead of adding capacity that can take them.
    pub fn stuck_unregistered(&self, now: jiff::Timestamp, grace: jiff::SignedDuration) -> bool {
        let Some(node) = self.node else { return false };
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == UNREGISTERED_TAINT_KEY));
        let joined = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
        tainted && joined.is_some_and(|at| now.duration_since(at) > grace)
    }

    pub fn provider_id(&self) -> Option<&'a str> {
        self.node
            .and_then(|n| n.spec.as_ref()?.provider_id.as_deref())
            .or_else(|| {
                self.nodeclaim
                    .and_then(|c| c.status.as_ref()?.provider_id.as_deref())
            })
    }

    /// Managed by Karpenter (it has a NodeClaim).
    pub fn is_managed(&self) -> bool {
        self.nodeclaim.is_some()
    }

    /// A NodeClaim whose Node has not registered yet.
    pub fn in_flight(&self) -> bool {
        self.node.is_none()
    }

    /// Being deleted: marked by Karpenter, or either object has a deletion timestamp.
    pub fn marked_for_deletion(&self) -> bool {
        self.marked
            || self
                .node
                .is_some_and(|n| n.metadata.deletion_timestamp.is_some())
            || self
                .nodeclaim
                .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
    }

    /// Managed nodes carry `karpenter.sh/initialized=true`; unmanaged ones count once Ready.
    pub fn initialized(&self) -> bool {
        match (self.node, self.nodeclaim) {
            (Some(node), Some(_)) => node
                .labels()
                .get(NODE_INITIALIZED_LABEL)
                .is_some_and(|v| v == "true"),
            (Some(node), None) => crate::node::node_is_ready(node),
            (None, _) => false,
        }
    }

    /// What the machine has: the Node's capacity, else the launched NodeClaim's, else what the
    /// NodeClaim asked for.
    pub fn capacity(&self) -> ResourceList {
        if let Some(capacity) = self.node.and_then(|n| n.status.as_ref()?.capacity.as_ref()) {
            return resource_list(Some(capacity));
        }
        self.nodeclaim_resources(|s| &s.capacity)
    }

    /// What pods may use: the Node's allocatable, else the NodeClaim's.
    pub fn allocatable(&self) -> ResourceList {
        if let Some(allocatable) = self
            .node
            .and_then(|n| n.status.as_ref()?.allocatable.as_ref())
        {
            return resource_list(Some(allocatable));
        }
        self.nodeclaim_resources(|s| &s.allocatable)
    }

    fn nodeclaim_resources(
        &self,
        field: impl Fn(&karpenter_api::NodeClaimStatus) -> &BTreeMap<String, K8sQuantity>,
    ) -> ResourceList {
        let Some(claim) = self.nodeclaim else {
            return ResourceList::new();
        };
        match claim.status.as_ref().map(&field).filter(|m| !m.is_empty()) {
            Some(map) => resource_list(Some(map)),
            None => resource_list(claim.spec.resources.as_ref().map(|r| &r.requests)),
        }
    }

    /// Summed requests of the pods bound here that still hold resources.
    pub fn requested(&self) -> ResourceList {
        let mut total = ResourceList::new();
        for pod in self.pods.iter().filter(|p| !pod::is_terminal(p)) {
            if let Ok(requests) = pod::effective_requests(pod) {
                total.add(&requests);
            }
        }
        total
    }

    /// Allocatable minus requested, floored at zero.
    pub fn available(&self) -> ResourceList {
        let mut available = self.allocatable();
        available.sub_floor_zero(&self.requested());
        available
    }
}
