//! What an EC2NodeClass (and the provider settings) change about instance types
//! (karpenter-aws.md §2, §2.6, §3.2–3.5): the AMI family's rules, `kubelet`, `blockDeviceMappings`,
//! `instanceStorePolicy`, efa-only `networkInterfaces` and the subnets' zones.
//!
//! [`NodeClassShape`] is read once from the EC2NodeClass (every user-given quantity parsed here,
//! so a bad value fails with the field's name); applying it to an instance type cannot fail.

use std::collections::BTreeSet;

use karpenter_api::v1::{EC2NodeClass, KubeletConfiguration};
use karpenter_core::resources::{Quantity, QuantityError, ResourceList};

use crate::ec2::InstanceTypeInfo;

/// `--vm-memory-overhead-percent` default.
pub const DEFAULT_VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
/// Pods per node when the family does not use ENI-limited pod density (Windows).
pub const DEFAULT_MAX_PODS: i64 = 110;
/// `DefaultEBS.VolumeSize`: the root/data volume of every family but Windows.
pub const DEFAULT_VOLUME_GIB: i64 = 20;
/// Windows' default root volume (`/dev/sda1`).
pub const WINDOWS_VOLUME_GIB: i64 = 50;
/// `instanceStorePolicy` value that makes the instance store the node's ephemeral storage.
pub const INSTANCE_STORE_POLICY_RAID0: &str = "RAID0";
/// `networkInterfaces[].interfaceType` of an interface pods cannot use.
pub const INTERFACE_TYPE_EFA_ONLY: &str = "efa-only";
/// Kubelet eviction signals that change allocatable.
pub const SIGNAL_MEMORY_AVAILABLE: &str = "memory.available";
pub const SIGNAL_NODEFS_AVAILABLE: &str = "nodefs.available";

/// AMI families as far as instance types are concerned (upstream's `FeatureFlags` and default
/// block devices, karpenter-aws.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AmiFamily {
    Al2,
    Al2023,
    Bottlerocket,
    Custom,
    Windows2019,
    Windows2022,
    Windows2025,
}

impl AmiFamily {
    /// From the `amiFamily` spelling (`AL2023`, `Bottlerocket`, `Windows2022`, ...).
    pub fn from_name(name: &str) -> Option<AmiFamily> {
        Some(match name {
            "AL2" => AmiFamily::Al2,
            "AL2023" => AmiFamily::Al2023,
            "Bottlerocket" => AmiFamily::Bottlerocket,
            "Custom" => AmiFamily::Custom,
            "Windows2019" => AmiFamily::Windows2019,
            "Windows2022" => AmiFamily::Windows2022,
            "Windows2025" => AmiFamily::Windows2025,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            AmiFamily::Al2 => "AL2",
            AmiFamily::Al2023 => "AL2023",
            AmiFamily::Bottlerocket => "Bottlerocket",
            AmiFamily::Custom => "Custom",
            AmiFamily::Windows2019 => "Windows2019",
            AmiFamily::Windows2022 => "Windows2022",
            AmiFamily::Windows2025 => "Windows2025",
        }
    }

    /// The `node.kubernetes.io/windows-build` of the family's nodes (Linux: none).
    pub fn windows_build(self) -> Option<&'static str> {
        match self {
            AmiFamily::Windows2019 => Some("10.0.17763"),
            AmiFamily::Windows2022 => Some("10.0.20348"),
            AmiFamily::Windows2025 => Some("10.0.26100"),
            _ => None,
        }
    }

    pub fn is_windows(self) -> bool {
        self.windows_build().is_some()
    }

    /// The block device whose size is the node's ephemeral storage (Custom: unknown).
    pub fn ephemeral_device(self) -> Option<&'static str> {
        match self {
            AmiFamily::Al2 | AmiFamily::Al2023 => Some("/dev/xvda"),
            // Bottlerocket's root volume (`/dev/xvda`, 4Gi) holds the OS; pods use the data volume.
            AmiFamily::Bottlerocket => Some("/dev/xvdb"),
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
                Some("/dev/sda1")
            }
            AmiFamily::Custom => None,
        }
    }

    /// The size of the family's default ephemeral device.
    pub fn default_ephemeral_storage(self) -> Quantity {
        if self.is_windows() {
            Quantity::from_gibibytes(WINDOWS_VOLUME_GIB)
        } else {
            Quantity::from_gibibytes(DEFAULT_VOLUME_GIB)
        }
    }

    /// `SupportsENILimitedPodDensity`: max pods from the ENI limits (else 110).
    pub fn eni_limited_pod_density(self) -> bool {
        !self.is_windows()
    }

    /// `UsesENILimitedMemoryOverhead`: kube-reserved memory from the ENI-limited pod count
    /// even when `maxPods` says otherwise.
    pub fn eni_limited_memory_overhead(self) -> bool {
        matches!(self, AmiFamily::Al2 | AmiFamily::Al2023 | AmiFamily::Custom)
    }

    /// `PodsPerCoreEnabled`.
    pub fn pods_per_core_enabled(self) -> bool {
        self != AmiFamily::Bottlerocket
    }

    /// `EvictionSoftEnabled`: soft eviction thresholds count towards the reserved resources.
    pub fn eviction_soft_enabled(self) -> bool {
        self != AmiFamily::Bottlerocket
    }

    /// Whether an AMI of this family can run the type (upstream's compatibility checks,
    /// karpenter-aws.md §3.5): AL2023 has no `a1.*` support; Windows AMIs exist for x86_64 only
    /// (upstream gives arm64 types no `kubernetes.io/os` value, so nothing can run there).
    pub fn can_run(self, info: &InstanceTypeInfo) -> bool {
        match self {
            AmiFamily::Al2023 => !info.instance_type.starts_with("a1."),
            family if family.is_windows() => info.kubernetes_arch() == Some("amd64"),
            _ => true,
        }
    }
}

/// The provider settings that change instance types (`--vm-memory-overhead-percent`,
/// `--reserved-enis`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProviderSettings {
    pub vm_memory_overhead_percent: f64,
    pub reserved_enis: u32,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self {
            vm_memory_overhead_percent: DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
            reserved_enis: 0,
        }
    }
}

/// A kubelet eviction threshold: a percentage of the resource's capacity or a quantity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EvictionSignal {
    Percent(f64),
    Quantity(Quantity),
}

/// An eviction threshold that is neither a percentage nor a quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvictionSignalError {
    #[error("{value:?} is not a percentage")]
    NotAPercentage { value: String },
    #[error("{value:?} is not between 0% and 100%")]
    PercentageOutOfRange { value: String },
    #[error(transparent)]
    Quantity(#[from] QuantityError),
}

impl EvictionSignal {
    fn parse(value: &str) -> Result<EvictionSignal, EvictionSignalError> {
        match value.strip_suffix('%') {
            Some(percent) => {
                let p: f64 =
                    percent
                        .trim()
                        .parse()
                        .map_err(|_| EvictionSignalError::NotAPercentage {
                            value: value.to_string(),
                        })?;
                if !(0.0..=100.0).contains(&p) {
                    return Err(EvictionSignalError::PercentageOutOfRange {
                        value: value.to_string(),
                    });
                }
                // The kubelet reads `100%` as "threshold disabled".
                Ok(EvictionSignal::Percent(if p == 100.0 { 0.0 } else { p }))
            }
            None => Ok(EvictionSignal::Quantity(Quantity::parse(value)?)),
        }
    }

    /// The amount the threshold keeps free on a node with `capacity` of the resource
    /// (percentages rounded up to whole units, as upstream).
    pub fn threshold(self, capacity: Quantity) -> Quantity {
        match self {
            EvictionSignal::Quantity(q) => q,
            EvictionSignal::Percent(p) => {
                let units = (capacity.as_f64_units() / 100.0 * p).ceil();
                // `as` saturates; a NaN (impossible from a parsed percentage) becomes 0.
                Quantity::from_units(units as i64)
            }
        }
    }
}

/// The eviction signals that change allocatable.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EvictionSignals {
    pub memory_available: Option<EvictionSignal>,
    pub nodefs_available: Option<EvictionSignal>,
}

/// efa-only network interfaces of `spec.networkInterfaces`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EfaOnlyInterfaces {
    /// On network card 0: those ENIs are not available to pods.
    pub on_card_zero: i64,
    /// On every card: the node's `vpc.amazonaws.com/efa` capacity.
    pub total: i64,
}

/// Everything about an EC2NodeClass that shapes instance types, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeClassShape {
    pub family: AmiFamily,
    pub settings: ProviderSettings,
    /// `kubelet.maxPods`.
    pub max_pods: Option<i64>,
    /// `kubelet.podsPerCore` (0 = off).
    pub pods_per_core: Option<i64>,
    /// `kubelet.kubeReserved` entries (override the computed defaults per key).
    pub kube_reserved: ResourceList,
    /// `kubelet.systemReserved` (default: nothing).
    pub system_reserved: ResourceList,
    pub eviction_hard: EvictionSignals,
    pub eviction_soft: EvictionSignals,
    /// Size of the volume that holds the node's ephemeral storage, from `blockDeviceMappings`
    /// or the family default (instance-store RAID0 overrides it per type).
    pub ephemeral_storage: Quantity,
    /// `instanceStorePolicy: RAID0`.
    pub raid0: bool,
    /// `None` when `spec.networkInterfaces` is not set.
    pub efa_only_interfaces: Option<EfaOnlyInterfaces>,
    /// Zones of the resolved subnets (`status.subnets`); `None` = not resolved yet, all zones.
    pub subnet_zones: Option<BTreeSet<String>>,
}

impl Default for NodeClassShape {
    /// No EC2NodeClass: nothing is known about the AMI, so the family is Custom (upstream's
    /// fallback), which has AL2023's numbers (20Gi root volume, ENI-limited pods and memory
    /// overhead) without excluding any type.
    fn default() -> Self {
        NodeClassShape::for_family(AmiFamily::Custom, ProviderSettings::default())
    }
}

/// A field of the EC2NodeClass that cannot shape instance types.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("EC2NodeClass {node_class}: {field}: {message}")]
pub struct NodeClassError {
    pub node_class: String,
    pub field: String,
    pub message: String,
}

impl NodeClassShape {
    /// The family's defaults, nothing configured.
    pub fn for_family(family: AmiFamily, settings: ProviderSettings) -> Self {
        Self {
            family,
            settings,
            max_pods: None,
            pods_per_core: None,
            kube_reserved: ResourceList::new(),
            system_reserved: ResourceList::new(),
            eviction_hard: EvictionSignals::default(),
            eviction_soft: EvictionSignals::default(),
            ephemeral_storage: family.default_ephemeral_storage(),
            raid0: false,
            efa_only_interfaces: None,
            subnet_zones: None,
        }
    }

    /// Reads `node_class`. Its family comes from the alias or `amiFamily` (neither: Custom, as
    /// upstream's fallback).
    pub fn from_node_class(
        node_class: &EC2NodeClass,
        settings: ProviderSettings,
    ) -> Result<Self, NodeClassError> {
        let name = node_class.metadata.name.clone().unwrap_or_default();
        let error = |field: &str, message: String| NodeClassError {
            node_class: name.clone(),
            field: field.to_string(),
            message,
        };
        let family = match node_class.ami_family() {
            None => AmiFamily::Custom,
            Some(family) => AmiFamily::from_name(family)
                .ok_or_else(|| error("spec.amiFamily", format!("unknown AMI family {family:?}")))?,
        };
        let spec = &node_class.spec;
        let mut shape = NodeClassShape::for_family(family, settings);
        if let Some(kubelet) = &spec.kubelet {
            shape
                .apply_kubelet(kubelet)
                .map_err(|(f, m)| error(&f, m))?;
        }
        shape.ephemeral_storage =
            ephemeral_volume(node_class, family).map_err(|(f, m)| error(&f, m))?;
        shape.raid0 = spec.instance_store_policy.as_deref() == Some(INSTANCE_STORE_POLICY_RAID0);
        if !spec.network_interfaces.is_empty() {
            let efa_only = spec
                .network_interfaces
                .iter()
                .filter(|i| i.interface_type == INTERFACE_TYPE_EFA_ONLY);
            shape.efa_only_interfaces = Some(EfaOnlyInterfaces {
                on_card_zero: efa_only
                    .clone()
                    .filter(|i| i.network_card_index == 0)
                    .count() as i64,
                total: efa_only.count() as i64,
            });
        }
        if let Some(status) = &node_class.status
            && !status.subnets.is_empty()
        {
            shape.subnet_zones = Some(status.subnets.iter().map(|s| s.zone.clone()).collect());
        }
        Ok(shape)
    }

    fn apply_kubelet(&mut self, kubelet: &KubeletConfiguration) -> Result<(), (String, String)> {
        self.max_pods = kubelet.max_pods.map(|n| i64::from(n.max(0)));
        self.pods_per_core = kubelet.pods_per_core.map(|n| i64::from(n.max(0)));
        self.kube_reserved = reserved("spec.kubelet.kubeReserved", &kubelet.kube_reserved)?;
        self.system_reserved = reserved("spec.kubelet.systemReserved", &kubelet.system_reserved)?;
        self.eviction_hard = signals("spec.kubelet.evictionHard", &kubelet.eviction_hard)?;
        self.eviction_soft = signals("spec.kubelet.evictionSoft", &kubelet.eviction_soft)?;
        Ok(())
    }

    /// The node's ephemeral-storage capacity on `info`: the instance store under RAID0 (in GB,
    /// as EC2 reports it), else the configured volume.
    pub fn ephemeral_storage_for(&self, info: &InstanceTypeInfo) -> Quantity {
        if self.raid0
            && let Some(storage) = &info.instance_storage_info
        {
            return Quantity::from_units(storage.total_size_in_gb.saturating_mul(1_000_000_000));
        }
        self.ephemeral_storage
    }
}

/// `kubeReserved`/`systemReserved`: `pid` is not a schedulable resource and is left out.
fn reserved(
    field: &str,
    entries: &std::collections::BTreeMap<String, String>,
) -> Result<ResourceList, (String, String)> {
    let mut list = ResourceList::new();
    for (key, value) in entries {
        if key == "pid" {
            continue;
        }
        let quantity =
            Quantity::parse(value).map_err(|e| (format!("{field}.{key}"), e.to_string()))?;
        list.set(key, quantity);
    }
    Ok(list)
}

fn signals(
    field: &str,
    entries: &std::collections::BTreeMap<String, String>,
) -> Result<EvictionSignals, (String, String)> {
    let parse = |key: &str| {
        entries
            .get(key)
            .map(|v| {
                EvictionSignal::parse(v).map_err(|m| (format!("{field}.{key}"), m.to_string()))
            })
            .transpose()
    };
    Ok(EvictionSignals {
        memory_available: parse(SIGNAL_MEMORY_AVAILABLE)?,
        nodefs_available: parse(SIGNAL_NODEFS_AVAILABLE)?,
    })
}

/// The volume holding the node's ephemeral storage (upstream's `ephemeralStorage`, RAID0 aside):
/// the `rootVolume: true` mapping; for Custom the last mapping; else the mapping of the family's
/// ephemeral device; else the family default.
fn ephemeral_volume(
    node_class: &EC2NodeClass,
    family: AmiFamily,
) -> Result<Quantity, (String, String)> {
    let mappings = &node_class.spec.block_device_mappings;
    let size_of = |index: usize| -> Result<Option<Quantity>, (String, String)> {
        let size = mappings[index]
            .ebs
            .as_ref()
            .and_then(|e| e.volume_size.as_deref());
        size.map(|s| {
            Quantity::parse(s).map_err(|e| {
                (
                    format!("spec.blockDeviceMappings[{index}].ebs.volumeSize"),
                    e.to_string(),
                )
            })
        })
        .transpose()
    };
    if mappings.is_empty() {
        return Ok(family.default_ephemeral_storage());
    }
    if let Some(root) = mappings.iter().position(|m| m.root_volume == Some(true))
        && let Some(size) = size_of(root)?
    {
        return Ok(size);
    }
    if family == AmiFamily::Custom {
        return Ok(
            size_of(mappings.len() - 1)?.unwrap_or(Quantity::from_gibibytes(DEFAULT_VOLUME_GIB))
        );
    }
    if let Some(device) = family.ephemeral_device()
        && let Some(index) = mappings
            .iter()
            .position(|m| m.device_name.as_deref() == Some(device))
        && let Some(size) = size_of(index)?
    {
        return Ok(size);
    }
    Ok(family.default_ephemeral_storage())
}
