//! `karpenter.k8s.aws/v1` EC2NodeClass.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Condition, ConditionsExt, NodeSelectorRequirementWithMinValues};

/// AWS-specific node configuration referenced by NodePools.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    plural = "ec2nodeclasses",
    singular = "ec2nodeclass",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    status = "EC2NodeClassStatus",
    category = "karpenter",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Role","type":"string","jsonPath":".spec.role","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassSpec {
    /// Subnets to launch into (terms are OR-ed).
    #[serde(default)]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Security groups for the instances (terms are OR-ed).
    #[serde(default)]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Capacity reservations Karpenter may launch into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// Placement group for the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// Whether instances get a public IPv4 address (subnet default when unset).
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// Number of IPv4 prefixes assigned to the primary interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_prefix_count: Option<i32>,
    /// AMIs to choose from (terms are OR-ed).
    #[serde(default)]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// AMI family (bootstrap format); required unless an alias term is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<String>,
    /// User data merged with Karpenter's bootstrap (format depends on the AMI family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// IAM role for the nodes; Karpenter manages an instance profile for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Existing instance profile (exclusive with `role`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Tags applied to instances, volumes, launch templates and instance profiles.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Kubelet settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Volumes attached to the instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// How to use local instance storage (`RAID0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<String>,
    /// Network interfaces to attach (EFA).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    /// Enables detailed CloudWatch monitoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance metadata service options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<MetadataOptions>,
    /// Connection tracking timeouts for the primary interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// Reserved capacity context passed to CreateFleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// CPU options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
}

/// Selects subnets by tags or id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSelectorTerm {
    /// Tags the subnet must have (`*` matches any value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Subnet id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// Selects security groups by tags, id or name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupSelectorTerm {
    /// Tags the group must have (`*` matches any value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Security group id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Security group name (the group's name, not its Name tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Kept for callers of the pre-v1 skeleton.
pub type SelectorTerm = SecurityGroupSelectorTerm;

/// Selects capacity reservations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// Tags the reservation must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Reservation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Owning account (12 digits).
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
    /// `open` or `targeted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<String>,
}

/// Selects a placement group by name or id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementGroupSelector {
    /// Placement group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Placement group id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// Selects AMIs by alias, tags, id, name, owner or SSM parameter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// `family@version`, e.g. `al2023@latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Tags the AMI must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// AMI name (wildcards allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Owner account id or alias (`self`, `amazon`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// SSM parameter holding an AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// Kubelet settings (upstream v1.14 typed struct).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    /// DNS server IPs for pods.
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// Maximum pods per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i32>,
    /// Maximum pods per core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<i32>,
    /// Resources reserved for OS daemons.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, String>,
    /// Resources reserved for Kubernetes daemons.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, String>,
    /// Soft eviction thresholds (need matching grace periods).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft: BTreeMap<String, String>,
    /// Grace periods for the soft eviction thresholds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// Maximum pod termination grace period for soft evictions (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage that always triggers image garbage collection.
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage image garbage collection frees down to.
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Enforce CPU CFS quota for containers with CPU limits.
    #[serde(
        default,
        rename = "cpuCFSQuota",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
}

/// A volume attached at launch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// Device name, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// EBS volume settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// This volume is the root volume (at most one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

/// EBS volume settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    /// Delete the volume when the instance terminates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Encrypt the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// KMS key for encryption.
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// Snapshot to create the volume from.
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Snapshot initialization rate in MiB/s (100-300; needs snapshotID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_initialization_rate: Option<i32>,
    /// Volume size, e.g. `100Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<String>,
    /// `standard`, `io1`, `io2`, `gp2`, `sc1`, `st1` or `gp3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
}

/// A network interface to attach.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// Network card index.
    pub network_card_index: i32,
    /// Device index on the card.
    pub device_index: i32,
    /// `interface` or `efa-only`.
    pub interface_type: String,
}

/// Instance metadata service options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// `enabled` or `disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_endpoint: Option<String>,
    /// `enabled` or `disabled`.
    #[serde(
        default,
        rename = "httpProtocolIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_protocol_ipv6: Option<String>,
    /// Hop limit for metadata PUT responses (1-64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_put_response_hop_limit: Option<i64>,
    /// `required` (IMDSv2) or `optional`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<String>,
}

impl MetadataOptions {
    /// The CRD defaults: endpoint enabled, IPv6 disabled, hop limit 1, IMDSv2 required.
    pub fn crd_default() -> Self {
        Self {
            http_endpoint: Some("enabled".into()),
            http_protocol_ipv6: Some("disabled".into()),
            http_put_response_hop_limit: Some(1),
            http_tokens: Some("required".into()),
        }
    }
}

/// Connection tracking timeouts (seconds).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionTracking {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_established_timeout: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_stream_timeout: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_timeout: Option<i32>,
}

/// CPU options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuOptions {
    /// `enabled` or `disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<String>,
}

/// Observed state of an EC2NodeClass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// Resolved subnets, most free IPs first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<SubnetStatus>,
    /// Resolved security groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroupStatus>,
    /// Resolved capacity reservations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservationStatus>,
    /// Resolved AMIs with the requirements each one serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<AmiStatus>,
    /// Resolved instance profile name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// `AMIsReady`, `SubnetsReady`, `SecurityGroupsReady`, `InstanceProfileReady`, `ValidationSucceeded`, `Ready`, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl ConditionsExt for EC2NodeClassStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

/// A resolved subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetStatus {
    pub id: String,
    pub zone: String,
    #[serde(default, rename = "zoneID", skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

/// A resolved security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupStatus {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved capacity reservation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationStatus {
    pub availability_zone: String,
    /// RFC 3339 end time, if the reservation ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    pub id: String,
    /// `open` or `targeted`.
    pub instance_match_criteria: String,
    pub instance_type: String,
    #[serde(rename = "ownerID")]
    pub owner_id: String,
    /// `default` or `capacity-block`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_type: Option<String>,
    /// Whether the reservation's capacity may be interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    /// `active` or `expiring`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// A resolved AMI.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiStatus {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
    /// Instance types this AMI serves.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
}

/// AMI families the `amiFamily` field accepts.
pub const AMI_FAMILIES: [&str; 7] = [
    "AL2",
    "AL2023",
    "Bottlerocket",
    "Custom",
    "Windows2019",
    "Windows2022",
    "Windows2025",
];
/// Alias families (`family@version`) and the `amiFamily` each one implies.
pub const AMI_ALIAS_FAMILIES: [(&str, &str); 6] = [
    ("al2", "AL2"),
    ("al2023", "AL2023"),
    ("bottlerocket", "Bottlerocket"),
    ("windows2019", "Windows2019"),
    ("windows2022", "Windows2022"),
    ("windows2025", "Windows2025"),
];

impl EC2NodeClass {
    /// The alias term, if the AMIs are selected by alias.
    pub fn alias(&self) -> Option<&str> {
        self.spec
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())
    }

    /// The effective AMI family: from the alias when there is one, else `amiFamily`.
    pub fn ami_family(&self) -> Option<&str> {
        if let Some(alias) = self.alias() {
            let family = alias.split('@').next().unwrap_or_default();
            if let Some((_, resolved)) = AMI_ALIAS_FAMILIES.iter().find(|(f, _)| *f == family) {
                return Some(resolved);
            }
        }
        self.spec.ami_family.as_deref()
    }

    /// Metadata options with the CRD defaults filled in field by field.
    pub fn metadata_options(&self) -> MetadataOptions {
        let defaults = MetadataOptions::crd_default();
        let given = self.spec.metadata_options.clone().unwrap_or_default();
        MetadataOptions {
            http_endpoint: given.http_endpoint.or(defaults.http_endpoint),
            http_protocol_ipv6: given.http_protocol_ipv6.or(defaults.http_protocol_ipv6),
            http_put_response_hop_limit: given
                .http_put_response_hop_limit
                .or(defaults.http_put_response_hop_limit),
            http_tokens: given.http_tokens.or(defaults.http_tokens),
        }
    }

    /// `Ready` condition status is `True`.
    pub fn is_ready(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.is_condition_true(super::CONDITION_READY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_decides_the_family() {
        let mut nc = EC2NodeClass::new("x", EC2NodeClassSpec::default());
        nc.spec.ami_family = Some("AL2".into());
        assert_eq!(nc.ami_family(), Some("AL2"));
        nc.spec.ami_selector_terms = vec![AmiSelectorTerm {
            alias: Some("bottlerocket@latest".into()),
            ..Default::default()
        }];
        assert_eq!(nc.ami_family(), Some("Bottlerocket"));
    }

    #[test]
    fn metadata_defaults_fill_gaps() {
        let mut nc = EC2NodeClass::new("x", EC2NodeClassSpec::default());
        nc.spec.metadata_options = Some(MetadataOptions {
            http_tokens: Some("optional".into()),
            ..Default::default()
        });
        let m = nc.metadata_options();
        assert_eq!(m.http_tokens.as_deref(), Some("optional"));
        assert_eq!(m.http_put_response_hop_limit, Some(1));
    }
}
