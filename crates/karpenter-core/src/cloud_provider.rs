//! The contract every cloud provider (`sim`, `aws`) implements. Mirrors upstream's interface so
//! the controllers stay cloud-agnostic.

use std::sync::Arc;

use async_trait::async_trait;
use karpenter_api::{NodeClaim, NodePool};

use crate::instance_type::InstanceType;

/// Errors whose kind changes what the caller does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    /// No capacity for any of the NodeClaim's options: the NodeClaim is deleted so the next
    /// provisioning loop retries elsewhere; the provider marks the offerings unavailable.
    #[error("insufficient capacity: {0}")]
    InsufficientCapacity(String),
    /// The instance does not exist (any more). `delete` returns this once the instance is gone.
    #[error("nodeclaim not found: {0}")]
    NodeClaimNotFound(String),
    /// The NodeClass the NodeClaim refers to is missing or not ready.
    #[error("node class not ready: {0}")]
    NodeClassNotReady(String),
    /// Launch failed for a reason the user should see (`reason` is a short CamelCase word).
    #[error("launch failed ({reason}): {message}")]
    Create { reason: String, message: String },
    /// Anything else (API errors, timeouts); callers retry with backoff.
    #[error("cloud provider error: {0}")]
    Other(String),
}

impl CloudError {
    /// Short label for the `error` dimension of metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CloudError::InsufficientCapacity(_) => "InsufficientCapacityError",
            CloudError::NodeClaimNotFound(_) => "NodeClaimNotFoundError",
            CloudError::NodeClassNotReady(_) => "NodeClassNotReadyError",
            CloudError::Create { .. } => "CreateError",
            CloudError::Other(_) => "CloudProviderError",
        }
    }
}

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

    /// Terminates the NodeClaim's instance. Returns [`CloudError::NodeClaimNotFound`] once the
    /// instance is gone; callers retry until then.
    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudError>;

    /// The instance with this provider ID, as a NodeClaim.
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError>;

    /// Every instance this provider launched for the cluster (for garbage collection).
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudError>;

    /// Every instance type usable by `node_pool`, including those without available offerings.
    async fn instance_types(
        &self,
        node_pool: &NodePool,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError>;

    /// `Some(reason)` when the NodeClaim's instance no longer matches its NodeClass.
    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudError>;

    /// Node conditions that trigger automatic repair.
    fn repair_policies(&self) -> Vec<RepairPolicy>;

    /// NodeClass kinds this provider accepts; the first is the default.
    fn supported_node_classes(&self) -> Vec<NodeClassKind>;
}
