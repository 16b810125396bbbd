//! The subset of EC2 `DescribeInstanceTypes` answers the catalogue reads (field names as AWS
//! spells them). Unknown fields are ignored so newer data keeps loading.

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceTypeInfo {
    pub instance_type: String,
    #[serde(default)]
    pub bare_metal: bool,
    #[serde(default)]
    pub hypervisor: Option<String>,
    #[serde(default)]
    pub supported_usage_classes: Vec<String>,
    #[serde(default)]
    pub supported_virtualization_types: Vec<String>,
    pub v_cpu_info: VCpuInfo,
    pub memory_info: MemoryInfo,
    pub processor_info: ProcessorInfo,
    pub network_info: NetworkInfo,
    #[serde(default)]
    pub ebs_info: Option<EbsInfo>,
    #[serde(default)]
    pub instance_storage_info: Option<InstanceStorageInfo>,
    #[serde(default)]
    pub gpu_info: Option<GpuInfo>,
    #[serde(default)]
    pub neuron_info: Option<NeuronInfo>,
    #[serde(default)]
    pub inference_accelerator_info: Option<InferenceAcceleratorInfo>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct VCpuInfo {
    pub default_v_cpus: i64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct MemoryInfo {
    #[serde(rename = "SizeInMiB")]
    pub size_in_mib: i64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ProcessorInfo {
    #[serde(default)]
    pub manufacturer: Option<String>,
    #[serde(default)]
    pub supported_architectures: Vec<String>,
    #[serde(default)]
    pub sustained_clock_speed_in_ghz: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkInfo {
    #[serde(default)]
    pub default_network_card_index: usize,
    pub maximum_network_interfaces: i64,
    pub ipv4_addresses_per_interface: i64,
    #[serde(default)]
    pub encryption_in_transit_supported: bool,
    #[serde(default)]
    pub network_cards: Vec<NetworkCard>,
    #[serde(default)]
    pub efa_info: Option<EfaInfo>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkCard {
    #[serde(default)]
    pub network_card_index: usize,
    pub maximum_network_interfaces: i64,
    #[serde(default)]
    pub baseline_bandwidth_in_gbps: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EfaInfo {
    pub maximum_efa_interfaces: i64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EbsInfo {
    #[serde(default)]
    pub ebs_optimized_support: Option<String>,
    #[serde(default)]
    pub ebs_optimized_info: Option<EbsOptimizedInfo>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EbsOptimizedInfo {
    pub maximum_bandwidth_in_mbps: i64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceStorageInfo {
    #[serde(rename = "TotalSizeInGB")]
    pub total_size_in_gb: i64,
    #[serde(default)]
    pub nvme_support: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GpuInfo {
    #[serde(default)]
    pub gpus: Vec<Gpu>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Gpu {
    pub name: String,
    pub manufacturer: String,
    pub count: i64,
    pub memory_info: MemoryInfo,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NeuronInfo {
    #[serde(default)]
    pub neuron_devices: Vec<NeuronDevice>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NeuronDevice {
    pub name: String,
    pub count: i64,
    #[serde(default)]
    pub core_info: Option<NeuronCoreInfo>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NeuronCoreInfo {
    pub count: i64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InferenceAcceleratorInfo {
    #[serde(default)]
    pub accelerators: Vec<InferenceAccelerator>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InferenceAccelerator {
    pub name: String,
    pub manufacturer: String,
    pub count: i64,
}

impl InstanceTypeInfo {
    /// The Kubernetes architecture (`amd64`/`arm64`), or `None` for types Karpenter does not
    /// discover (Macs, 32-bit only).
    pub fn kubernetes_arch(&self) -> Option<&'static str> {
        match self
            .processor_info
            .supported_architectures
            .first()
            .map(String::as_str)
        {
            Some("x86_64") => Some("amd64"),
            Some("arm64") => Some("arm64"),
            _ => {
                // `["i386", "x86_64"]`: Karpenter's filter matches x86_64 anywhere in the list.
                if self
                    .processor_info
                    .supported_architectures
                    .iter()
                    .any(|a| a == "x86_64")
                {
                    Some("amd64")
                } else {
                    None
                }
            }
        }
    }

    /// Whether Karpenter's discovery filter (`hvm`, x86_64/arm64) keeps this type.
    pub fn is_discoverable(&self) -> bool {
        self.supported_virtualization_types
            .iter()
            .any(|v| v == "hvm")
            && self.kubernetes_arch().is_some()
    }

    /// Max ENIs on the default network card (the ENIs pods can use).
    pub fn default_card_max_enis(&self) -> i64 {
        let index = self.network_info.default_network_card_index;
        self.network_info
            .network_cards
            .iter()
            .find(|c| c.network_card_index == index)
            .map_or(self.network_info.maximum_network_interfaces, |c| {
                c.maximum_network_interfaces
            })
    }
}
