//! The contract every cloud provider (`sim`, `aws`) implements. Mirrors upstream's interface so
//! the controllers stay cloud-agnostic.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::{NodeClaim, NodePool, well_known};

use crate::instance_type::InstanceType;
use crate::requirements::Requirements;
use crate::resources::{self, ResourceList};

/// Errors whose kind changes what the caller does next: [`CloudError::is_retryable`] says
/// whether trying the same call again (with backoff) can help, or whether the caller gives up on
/// this NodeClaim (deletes it, so the next provisioning loop plans it elsewhere).
#[derive(Debug, Clone)]
pub enum CloudError {
    /// No capacity for any of the NodeClaim's options: the NodeClaim is deleted so the next
    /// provisioning loop retries elsewhere; the provider marks the offerings unavailable.
    InsufficientCapacity(String),
    /// The instance does not exist (any more). `delete` returns this once the instance is gone.
    NodeClaimNotFound(String),
    /// The NodeClass the NodeClaim refers to is missing or not ready.
    NodeClassNotReady(String),
    /// Launch failed for a reason the user should see (`reason` is a short CamelCase word); the
    /// launch is retried until the lifecycle's launch timeout.
    Create { reason: String, message: String },
    /// Anything else (API errors, timeouts); callers retry with backoff. `source` keeps the
    /// underlying error (an SDK error, a timeout) for logs and for callers that inspect it.
    Other {
        message: String,
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
}

impl CloudError {
    /// An [`CloudError::Other`] without an underlying error.
    pub fn other(message: impl Into<String>) -> Self {
        CloudError::Other {
            message: message.into(),
            source: None,
        }
    }

    /// An [`CloudError::Other`] that keeps `source` (an API error, a timeout).
    pub fn other_from(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        CloudError::Other {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// Whether calling again (after a backoff) may succeed. `false` means the answer will not
    /// change for this NodeClaim: no capacity for any of its options, a NodeClass that is not
    /// ready (upstream deletes the NodeClaim in both cases, and the provisioner plans its pods
    /// again), or an instance that is gone.
    pub fn is_retryable(&self) -> bool {
        match self {
            CloudError::InsufficientCapacity(_)
            | CloudError::NodeClaimNotFound(_)
            | CloudError::NodeClassNotReady(_) => false,
            CloudError::Create { .. } | CloudError::Other { .. } => true,
        }
    }

    /// Short label for the `error` dimension of metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CloudError::InsufficientCapacity(_) => "InsufficientCapacityError",
            CloudError::NodeClaimNotFound(_) => "NodeClaimNotFoundError",
            CloudError::NodeClassNotReady(_) => "NodeClassNotReadyError",
            CloudError::Create { .. } => "CreateError",
            CloudError::Other { .. } => "CloudProviderError",
        }
    }
}

impl std::fmt::Display for CloudError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CloudError::InsufficientCapacity(m) => write!(f, "insufficient capacity: {m}"),
            CloudError::NodeClaimNotFound(m) => write!(f, "nodeclaim not found: {m}"),
            CloudError::NodeClassNotReady(m) => write!(f, "node class not ready: {m}"),
            CloudError::Create { reason, message } => {
                write!(f, "launch failed ({reason}): {message}")
            }
            CloudError::Other { message, .. } => write!(f, "cloud provider error: {message}"),
        }
    }
}

/// Written by hand rather than derived: the derive would report the `Arc` as the source, whose
/// own `source()` skips the wrapped error, so callers could neither print nor downcast it.
impl std::error::Error for CloudError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CloudError::Other {
                source: Some(source),
                ..
            } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// Equal when the kind and the messages are; sources compare by their text (errors rarely
/// implement `PartialEq`). Tests and fault injection compare errors this way.
impl PartialEq for CloudError {
    fn eq(&self, other: &Self) -> bool {
        use CloudError::*;
        match (self, other) {
            (InsufficientCapacity(a), InsufficientCapacity(b))
            | (NodeClaimNotFound(a), NodeClaimNotFound(b))
            | (NodeClassNotReady(a), NodeClassNotReady(b)) => a == b,
            (
                Create { reason, message },
                Create {
                    reason: other_reason,
                    message: other_message,
                },
            ) => reason == other_reason && message == other_message,
            (
                Other { message, source },
                Other {
                    message: other_message,
                    source: other_source,
                },
            ) => {
                message == other_message
                    && source.as_ref().map(ToString::to_string)
                        == other_source.as_ref().map(ToString::to_string)
            }
            _ => false,
        }
    }
}

impl Eq for CloudError {}

/// Why a NodeClaim no longer matches what its NodeClass would launch now.
pub type DriftReason = String;

/// A node condition that, held long enough, means the node should be replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition_type: String,
    pub condition_status: String,
    pub toleration_seconds: i64,
}

/// The NodeClass kinds a provider understands (the first is the default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassKind {
    pub group: String,
    pub kind: String,
}

/// Upstream's node-repair policy for a node whose kubelet stopped reporting: `Ready` `False` or
/// `Unknown` for 30 minutes. Both providers use it.
pub fn node_not_ready_repair_policies() -> Vec<RepairPolicy> {
    ["False", "Unknown"]
        .into_iter()
        .map(|status| RepairPolicy {
            condition_type: "Ready".to_string(),
            condition_status: status.to_string(),
            toleration_seconds: 30 * 60,
        })
        .collect()
}

/// `karpenter.k8s.aws/EC2NodeClass`, the NodeClass both providers accept.
pub fn ec2_node_class_kind() -> NodeClassKind {
    NodeClassKind {
        group: karpenter_api::well_known::AWS_GROUP.to_string(),
        kind: "EC2NodeClass".to_string(),
    }
}

/// A cloud that launches and terminates instances for NodeClaims.
#[async_trait]
pub trait CloudProvider: Send + Sync {
    /// Short name (`sim`, `aws`).
    fn name(&self) -> &str;

    /// Launches one instance for `node_claim` and returns it hydrated: labels (instance type,
    /// zone, capacity type, ...), `status.providerID`, capacity and allocatable. Must be
    /// idempotent: calling it again for a NodeClaim that already has an instance returns that
    /// instance instead of launching another.
    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudError>;

    /// [`CloudProvider::create`] for a NodeClaim planned on types NodeOverlays added capacity
    /// to (hugepages, a device the catalogue does not list): the provider checks the requests it
    /// knows about against its own catalogue (the NodeClaim's options were chosen with the
    /// overlay, so each of them has the added resources), and the launched NodeClaim's capacity
    /// and allocatable carry what the overlay says the machine has, so the scheduler counts it
    /// until the Node registers it. A provider whose machines register what it launches (the
    /// sim kubelet) overrides this to give the instance that capacity too.
    async fn create_with_capacity_overlay(
        &self,
        node_claim: &NodeClaim,
        overlay: &CapacityOverlay,
    ) -> Result<NodeClaim, CloudError> {
        let mut launched = self.create(&overlay.claim_for_provider(node_claim)).await?;
        overlay.add_to_status(&mut launched);
        Ok(launched)
    }

    /// Terminates the NodeClaim's instance. Returns [`CloudError::NodeClaimNotFound`] once the
    /// instance is gone; callers retry until then.
    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudError>;

    /// The instance with this provider ID, as a NodeClaim.
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError>;

    /// Every instance this provider launched for the cluster (for garbage collection).
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudError>;

    /// Every instance type usable by `node_pool`, including those without available offerings.
    /// `node_class` is the NodeClass the pool references, as the caller's cluster state holds it
    /// (`None` when it is not there yet): providers derive capacity from it (kubelet settings,
    /// block devices, AMI family). Providers that ignore NodeClasses ignore it.
    async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError>;

    /// `Some(reason)` when the NodeClaim's instance no longer matches its NodeClass.
    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudError>;

    /// Node conditions that trigger automatic repair.
    fn repair_policies(&self) -> Vec<RepairPolicy>;

    /// NodeClass kinds this provider accepts; the first is the default.
    fn supported_node_classes(&self) -> Vec<NodeClassKind>;
}

/// The capacity NodeOverlays add to a NodePool's instance types (instance type name → the
/// resources set on it), which the provider's own catalogue does not have.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CapacityOverlay {
    by_type: BTreeMap<String, ResourceList>,
}

impl CapacityOverlay {
    pub fn new(by_type: BTreeMap<String, ResourceList>) -> Self {
        let by_type = by_type.into_iter().filter(|(_, r)| !r.is_empty()).collect();
        CapacityOverlay { by_type }
    }

    /// No overlay adds capacity to any type.
    pub fn is_empty(&self) -> bool {
        self.by_type.is_empty()
    }

    /// What the overlays set on `instance_type` (empty when none does).
    pub fn added(&self, instance_type: &str) -> ResourceList {
        self.by_type.get(instance_type).cloned().unwrap_or_default()
    }

    /// `claim` as its provider is asked to launch it: without the requests of resources an
    /// overlay sets, which the provider's catalogue would not find on any type.
    pub fn claim_for_provider(&self, claim: &NodeClaim) -> NodeClaim {
        let names: BTreeSet<&str> = self
            .by_type
            .values()
            .flat_map(|r| r.iter().map(|(name, _)| name))
            .collect();
        let mut out = claim.clone();
        if let Some(resources) = out.spec.resources.as_mut() {
            resources
                .requests
                .retain(|name, _| !names.contains(name.as_str()));
        }
        out
    }

    /// Sets the overlay's resources of the launched type (its `node.kubernetes.io/instance-type`
    /// label) in `launched`'s capacity and allocatable (extended resources have no overhead).
    pub fn add_to_status(&self, launched: &mut NodeClaim) {
        let Some(added) = launched
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(well_known::INSTANCE_TYPE_LABEL))
            .and_then(|t| self.by_type.get(t))
        else {
            return;
        };
        let status = launched.status.get_or_insert_with(Default::default);
        for (name, quantity) in added.to_k8s() {
            status.capacity.insert(name.clone(), quantity.clone());
            status.allocatable.insert(name, quantity);
        }
    }
}

/// A NodeClaim's requirements and resource requests, as every provider reads them before a
/// launch; a claim that does not parse is a `Create` error with reason `InvalidNodeClaim`.
pub fn parse_claim(node_claim: &NodeClaim) -> Result<(Requirements, ResourceList), CloudError> {
    let invalid = |message: String| CloudError::Create {
        reason: "InvalidNodeClaim".to_string(),
        message,
    };
    let requirements =
        Requirements::from_node_selector_with_min_values(&node_claim.spec.requirements)
            .map_err(|e| invalid(format!("spec.requirements: {e}")))?;
    let requests = match &node_claim.spec.resources {
        Some(r) => ResourceList::from_k8s(&r.requests)
            .map_err(|e| invalid(format!("spec.resources.requests: {e}")))?,
        None => ResourceList::new(),
    };
    Ok((requirements, requests))
}

/// A launched node's capacity (or allocatable) from its instance type's: zero entries dropped,
/// EFA only when the NodeClaim asked for it (as upstream).
pub fn node_resources(list: &ResourceList, requests: &ResourceList) -> ResourceList {
    list.iter()
        .filter(|(name, q)| {
            !q.is_zero() && (*name != resources::EFA || requests.contains(resources::EFA))
        })
        .map(|(name, q)| (name.to_string(), q))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Quantity;
    use serde_json::json;

    fn claim(spec: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"}, "spec": spec
        }))
        .unwrap()
    }

    fn node_class_ref() -> serde_json::Value {
        json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"})
    }

    #[test]
    fn parse_claim_reads_requirements_and_requests() {
        let claim = claim(json!({
            "nodeClassRef": node_class_ref(),
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
            "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}
        }));
        let (requirements, requests) = parse_claim(&claim).unwrap();
        assert!(requirements.contains_key(&"karpenter.sh/capacity-type".to_string()));
        assert_eq!(requests.get("cpu"), Quantity::from_millis(1500));
        let bare = claim_without_resources();
        assert!(parse_claim(&bare).unwrap().1.is_empty());
    }

    fn claim_without_resources() -> NodeClaim {
        claim(json!({"nodeClassRef": node_class_ref(), "requirements": []}))
    }

    #[test]
    fn an_unreadable_claim_is_an_invalid_nodeclaim_create_error() {
        let mut bad = claim_without_resources();
        bad.spec.resources =
            Some(serde_json::from_value(json!({"requests": {"cpu": "lots"}})).unwrap());
        match parse_claim(&bad) {
            Err(CloudError::Create { reason, message }) => {
                assert_eq!(reason, "InvalidNodeClaim");
                assert!(
                    message.starts_with("spec.resources.requests: "),
                    "{message}"
                );
            }
            other => panic!("expected an InvalidNodeClaim error, got {other:?}"),
        }
    }

    #[test]
    fn node_resources_drop_zeros_and_unrequested_efa() {
        let mut capacity = ResourceList::new();
        capacity.set("cpu", Quantity::from_units(4));
        capacity.set("nvidia.com/gpu", Quantity::ZERO);
        capacity.set(resources::EFA, Quantity::from_units(1));
        let plain = node_resources(&capacity, &ResourceList::new());
        assert_eq!(plain.iter().map(|(n, _)| n).collect::<Vec<_>>(), ["cpu"]);
        let mut wants_efa = ResourceList::new();
        wants_efa.set(resources::EFA, Quantity::from_units(1));
        let with_efa = node_resources(&capacity, &wants_efa);
        assert_eq!(with_efa.get(resources::EFA), Quantity::from_units(1));
        assert!(!with_efa.contains("nvidia.com/gpu"));
    }

    #[derive(Debug, thiserror::Error)]
    #[error("throttled by the API")]
    struct Throttled;

    #[test]
    fn only_answers_that_may_change_are_retryable() {
        assert!(!CloudError::InsufficientCapacity("none".into()).is_retryable());
        assert!(!CloudError::NodeClassNotReady("no subnets".into()).is_retryable());
        assert!(!CloudError::NodeClaimNotFound("gone".into()).is_retryable());
        assert!(CloudError::other("boom").is_retryable());
        let create = CloudError::Create {
            reason: "LaunchTemplateNotFound".into(),
            message: "m".into(),
        };
        assert!(create.is_retryable());
    }

    #[test]
    fn other_keeps_its_source() {
        let err = CloudError::other_from("describe instances", Throttled);
        let source = std::error::Error::source(&err).expect("source kept");
        assert_eq!(source.to_string(), "throttled by the API");
        assert!(source.downcast_ref::<Throttled>().is_some());
        assert_eq!(err.to_string(), "cloud provider error: describe instances");
        assert_eq!(err.metric_label(), "CloudProviderError");
        // Clones share the source.
        assert_eq!(err.clone(), err);
        assert_ne!(err, CloudError::other("describe instances"));
    }
}
