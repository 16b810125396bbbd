//! Well-known labels, annotations, taints and finalizers shared with upstream Karpenter.
//!
//! Every string a user, a dashboard or another controller may depend on lives here, so the rest of
//! the code never spells one out by hand.

/// API group of NodePool and NodeClaim.
pub const GROUP: &str = "karpenter.sh";
/// API group of the AWS provider's EC2NodeClass.
pub const AWS_GROUP: &str = "karpenter.k8s.aws";

// ---- labels -------------------------------------------------------------------------------------

/// Owning NodePool (NodeClaim and Node).
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// `spot`, `on-demand` or `reserved`.
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
/// Set on a Node once Karpenter has synced it with its NodeClaim.
pub const NODE_REGISTERED_LABEL: &str = "karpenter.sh/registered";
/// Set on a Node once it is Ready, startup taints are gone and extended resources registered.
pub const NODE_INITIALIZED_LABEL: &str = "karpenter.sh/initialized";
/// Node label: registration must not copy the NodeClaim's taints.
pub const NODE_DO_NOT_SYNC_TAINTS_LABEL: &str = "karpenter.sh/do-not-sync-taints";
/// Added to a Node while it drains.
pub const EXCLUDE_FROM_LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
pub const OS_LABEL: &str = "kubernetes.io/os";
pub const WINDOWS_BUILD_LABEL: &str = "node.kubernetes.io/windows-build";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
/// Known values of [`CAPACITY_TYPE_LABEL`].
pub const CAPACITY_TYPES: [&str; 3] = [
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_SPOT,
    CAPACITY_TYPE_RESERVED,
];

// AWS provider labels (karpenter.k8s.aws/*).
pub const AWS_ZONE_ID_LABEL: &str = "topology.k8s.aws/zone-id";
pub const AWS_INSTANCE_CATEGORY_LABEL: &str = "karpenter.k8s.aws/instance-category";
pub const AWS_INSTANCE_FAMILY_LABEL: &str = "karpenter.k8s.aws/instance-family";
pub const AWS_INSTANCE_GENERATION_LABEL: &str = "karpenter.k8s.aws/instance-generation";
pub const AWS_INSTANCE_SIZE_LABEL: &str = "karpenter.k8s.aws/instance-size";
pub const AWS_INSTANCE_CPU_LABEL: &str = "karpenter.k8s.aws/instance-cpu";
pub const AWS_INSTANCE_CPU_MANUFACTURER_LABEL: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
pub const AWS_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_LABEL: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
pub const AWS_INSTANCE_MEMORY_LABEL: &str = "karpenter.k8s.aws/instance-memory";
pub const AWS_INSTANCE_HYPERVISOR_LABEL: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const AWS_INSTANCE_ENCRYPTION_IN_TRANSIT_LABEL: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
pub const AWS_INSTANCE_NETWORK_BANDWIDTH_LABEL: &str =
    "karpenter.k8s.aws/instance-network-bandwidth";
pub const AWS_INSTANCE_EBS_BANDWIDTH_LABEL: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
pub const AWS_INSTANCE_LOCAL_NVME_LABEL: &str = "karpenter.k8s.aws/instance-local-nvme";
pub const AWS_INSTANCE_CAPABILITY_FLEX_LABEL: &str = "karpenter.k8s.aws/instance-capability-flex";
pub const AWS_INSTANCE_TENANCY_LABEL: &str = "karpenter.k8s.aws/instance-tenancy";
pub const AWS_INSTANCE_GPU_NAME_LABEL: &str = "karpenter.k8s.aws/instance-gpu-name";
pub const AWS_INSTANCE_GPU_MANUFACTURER_LABEL: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
pub const AWS_INSTANCE_GPU_COUNT_LABEL: &str = "karpenter.k8s.aws/instance-gpu-count";
pub const AWS_INSTANCE_GPU_MEMORY_LABEL: &str = "karpenter.k8s.aws/instance-gpu-memory";
pub const AWS_INSTANCE_ACCELERATOR_NAME_LABEL: &str = "karpenter.k8s.aws/instance-accelerator-name";
pub const AWS_INSTANCE_ACCELERATOR_MANUFACTURER_LABEL: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
pub const AWS_INSTANCE_ACCELERATOR_COUNT_LABEL: &str =
    "karpenter.k8s.aws/instance-accelerator-count";
pub const AWS_CAPACITY_RESERVATION_ID_LABEL: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const AWS_CAPACITY_RESERVATION_TYPE_LABEL: &str = "karpenter.k8s.aws/capacity-reservation-type";
/// `true`/`false`: whether EC2 may interrupt the reservation's instances.
pub const AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";
pub const AWS_EC2NODECLASS_LABEL: &str = "karpenter.k8s.aws/ec2nodeclass";

/// Labels Karpenter understands even when a NodePool does not define them (core set; providers add
/// their own, see [`AWS_WELL_KNOWN_LABELS`]).
pub const WELL_KNOWN_LABELS: [&str; 8] = [
    NODEPOOL_LABEL,
    ZONE_LABEL,
    REGION_LABEL,
    INSTANCE_TYPE_LABEL,
    ARCH_LABEL,
    OS_LABEL,
    CAPACITY_TYPE_LABEL,
    WINDOWS_BUILD_LABEL,
];

/// Well-known labels added by the AWS provider.
pub const AWS_WELL_KNOWN_LABELS: [&str; 23] = [
    AWS_ZONE_ID_LABEL,
    AWS_INSTANCE_CATEGORY_LABEL,
    AWS_INSTANCE_FAMILY_LABEL,
    AWS_INSTANCE_GENERATION_LABEL,
    AWS_INSTANCE_SIZE_LABEL,
    AWS_INSTANCE_CPU_LABEL,
    AWS_INSTANCE_CPU_MANUFACTURER_LABEL,
    AWS_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_LABEL,
    AWS_INSTANCE_MEMORY_LABEL,
    AWS_INSTANCE_HYPERVISOR_LABEL,
    AWS_INSTANCE_ENCRYPTION_IN_TRANSIT_LABEL,
    AWS_INSTANCE_NETWORK_BANDWIDTH_LABEL,
    AWS_INSTANCE_EBS_BANDWIDTH_LABEL,
    AWS_INSTANCE_LOCAL_NVME_LABEL,
    AWS_INSTANCE_CAPABILITY_FLEX_LABEL,
    AWS_INSTANCE_TENANCY_LABEL,
    AWS_INSTANCE_GPU_NAME_LABEL,
    AWS_INSTANCE_GPU_MANUFACTURER_LABEL,
    AWS_INSTANCE_GPU_COUNT_LABEL,
    AWS_INSTANCE_GPU_MEMORY_LABEL,
    AWS_INSTANCE_ACCELERATOR_NAME_LABEL,
    AWS_INSTANCE_ACCELERATOR_MANUFACTURER_LABEL,
    AWS_INSTANCE_ACCELERATOR_COUNT_LABEL,
];

/// Whether `key` is a well-known label (core or AWS provider).
pub fn is_well_known_label(key: &str) -> bool {
    WELL_KNOWN_LABELS.contains(&key)
        || AWS_WELL_KNOWN_LABELS.contains(&key)
        || key == AWS_CAPACITY_RESERVATION_ID_LABEL
        || key == AWS_CAPACITY_RESERVATION_TYPE_LABEL
}

/// Deprecated label keys that pods and NodePools may still use; they are rewritten to the
/// current key before anything else looks at them.
pub const LABEL_ALIASES: [(&str, &str); 5] = [
    ("failure-domain.beta.kubernetes.io/zone", ZONE_LABEL),
    ("failure-domain.beta.kubernetes.io/region", REGION_LABEL),
    ("beta.kubernetes.io/arch", ARCH_LABEL),
    ("beta.kubernetes.io/os", OS_LABEL),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE_LABEL),
];

/// The current name of a label key (aliases resolved).
pub fn normalize_label_key(key: &str) -> &str {
    LABEL_ALIASES
        .iter()
        .find(|(old, _)| *old == key)
        .map_or(key, |(_, new)| new)
}

/// Why a label key may not be set by users on a NodePool, or `None` when it may.
pub fn restricted_label_reason(key: &str) -> Option<&'static str> {
    if key == NODEPOOL_LABEL {
        return Some("karpenter.sh/nodepool is set by Karpenter and may not be used");
    }
    if key == HOSTNAME_LABEL {
        return Some("kubernetes.io/hostname is set by the kubelet and may not be used");
    }
    if is_well_known_label(key) {
        return None;
    }
    let domain = key.split_once('/').map(|(d, _)| d).unwrap_or("");
    if domain == "karpenter.sh" || domain.ends_with(".karpenter.sh") {
        return Some("the karpenter.sh domain is reserved for Karpenter's own labels");
    }
    None
}

// ---- annotations --------------------------------------------------------------------------------

pub const DO_NOT_DISRUPT_ANNOTATION: &str = "karpenter.sh/do-not-disrupt";
pub const NODEPOOL_HASH_ANNOTATION: &str = "karpenter.sh/nodepool-hash";
pub const NODEPOOL_HASH_VERSION_ANNOTATION: &str = "karpenter.sh/nodepool-hash-version";
pub const NODEPOOL_HASH_VERSION: &str = "v3";
pub const NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: &str =
    "karpenter.sh/nodeclaim-termination-timestamp";
pub const NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION: &str =
    "karpenter.sh/nodeclaim-min-values-relaxed";
/// karpenter-rs (aws, `--spot-rebalance-replace`): set on a spot NodeClaim by the interruption
/// consumer when EC2 sent a rebalance recommendation for its instance (value: when, RFC 3339).
/// Disruption replaces such a node as a drifted one, on another offering than its spot pool.
pub const SPOT_REBALANCE_RECOMMENDATION_ANNOTATION: &str =
    "karpenter.k8s.aws/spot-rebalance-recommendation";
pub const EC2NODECLASS_HASH_ANNOTATION: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
pub const EC2NODECLASS_HASH_VERSION_ANNOTATION: &str =
    "karpenter.k8s.aws/ec2nodeclass-hash-version";
/// Legacy (v1alpha5/v1beta1) annotations: still recognised so `validate` can point at `convert`.
pub const LEGACY_DO_NOT_EVICT_ANNOTATION: &str = "karpenter.sh/do-not-evict";
pub const LEGACY_DO_NOT_CONSOLIDATE_ANNOTATION: &str = "karpenter.sh/do-not-consolidate";
pub const V1BETA1_KUBELET_CONVERSION_ANNOTATION: &str =
    "compatibility.karpenter.sh/v1beta1-kubelet-conversion";
pub const V1BETA1_NODECLASS_REFERENCE_ANNOTATION: &str =
    "compatibility.karpenter.sh/v1beta1-nodeclass-reference";

// ---- taints -------------------------------------------------------------------------------------

/// Put on nodes that are being disrupted or terminated.
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";
/// Expected at kubelet registration; removed by Karpenter once labels and taints are synced.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
/// Taints the node lifecycle controller and the kubelet manage; tolerated implicitly while a node
/// is still starting up.
pub const NODE_NOT_READY_TAINT_KEY: &str = "node.kubernetes.io/not-ready";
pub const NODE_UNREACHABLE_TAINT_KEY: &str = "node.kubernetes.io/unreachable";
pub const NODE_UNINITIALIZED_TAINT_KEY: &str = "node.cloudprovider.kubernetes.io/uninitialized";

// ---- finalizers ---------------------------------------------------------------------------------

/// On NodeClaims and Nodes: the instance must be gone before the object is.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

// ---- misc ---------------------------------------------------------------------------------------

/// Resource name used in NodePool limits and status for the node count.
pub const NODES_RESOURCE: &str = "nodes";
