//! Instance types from EC2 (karpenter-aws.md §3.1): `DescribeInstanceTypes` (hvm, x86_64/arm64)
//! and `DescribeInstanceTypeOfferings` (per availability zone), converted to the catalogue's
//! [`InstanceTypeInfo`] and turned into core [`InstanceType`]s by
//! [`karpenter_catalog::build::instance_types`] — the function `karpenter simulate` uses on the
//! embedded catalogue, so both agree on capacity, overhead and labels for the same EC2NodeClass.
//!
//! Discovery is refreshed every [`DISCOVERY_REFRESH`] (upstream: 12 h); types resolved for a
//! NodeClass are kept [`RESOLVED_TTL`] (upstream: 5 min) or until the prices change. Prices come
//! from the shared [`PriceTable`] (live where the pricing task fetched them, else embedded).

use std::sync::{Arc, Mutex, MutexGuard};

use aws_sdk_ec2::types::{Filter, LocationType};
use jiff::{SignedDuration, Timestamp};
use karpenter_api::v1::EC2NodeClass;
use karpenter_catalog::ec2::{
    EbsInfo, EbsOptimizedInfo, EfaInfo, Gpu, GpuInfo, InferenceAccelerator,
    InferenceAcceleratorInfo, InstanceStorageInfo, InstanceTypeInfo, MemoryInfo, NetworkCard,
    NetworkInfo, NeuronCoreInfo, NeuronDevice, NeuronInfo, ProcessorInfo, VCpuInfo,
};
use karpenter_catalog::{
    Catalog, CatalogError, NodeClassError, NodeClassShape, ProviderSettings, TypeZones,
};
use karpenter_core::clock::Clock;
use karpenter_core::instance_type::InstanceType;

use crate::pricing::PriceTable;
use crate::{AwsClients, Error};

/// How often the EC2 descriptions are fetched again (upstream's instance-type controller).
pub const DISCOVERY_REFRESH: SignedDuration = SignedDuration::from_hours(12);
/// How long instance types resolved for one NodeClass shape are reused
/// (`InstanceTypesZonesAndOfferingsTTL`).
pub const RESOLVED_TTL: SignedDuration = SignedDuration::from_mins(5);
/// Architectures Karpenter discovers (`processor-info.supported-architecture`).
pub const DISCOVERED_ARCHITECTURES: [&str; 2] = ["x86_64", "arm64"];

/// Why instance types could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum InstanceTypesError {
    #[error(transparent)]
    Aws(#[from] Error),
    #[error(transparent)]
    NodeClass(#[from] NodeClassError),
    #[error("embedded price table: {0}")]
    Catalog(#[from] CatalogError),
}

impl AwsClients {
    /// Every hvm x86_64/arm64 instance type of the region (`DescribeInstanceTypes`, paginated),
    /// as the catalogue's struct. Answers without a name, vCPUs, memory or network data are
    /// skipped: no formula can use them.
    pub async fn describe_instance_types(&self) -> Result<Vec<InstanceTypeInfo>, Error> {
        let pages = self
            .ec2
            .describe_instance_types()
            .filters(
                Filter::builder()
                    .name("supported-virtualization-type")
                    .values("hvm")
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("processor-info.supported-architecture")
                    .set_values(Some(DISCOVERED_ARCHITECTURES.map(str::to_string).to_vec()))
                    .build(),
            )
            .max_results(100)
            .into_paginator()
            .send()
            .try_collect()
            .await
            .map_err(|e| Error::from_sdk("DescribeInstanceTypes", e))?;
        Ok(pages
            .iter()
            .flat_map(|p| p.instance_types())
            .filter_map(instance_type_info)
            .collect())
    }

    /// Instance type → the availability zones offering it (`DescribeInstanceTypeOfferings`,
    /// location type `availability-zone`, paginated).
    pub async fn describe_instance_type_offerings(&self) -> Result<TypeZones, Error> {
        let pages = self
            .ec2
            .describe_instance_type_offerings()
            .location_type(LocationType::AvailabilityZone)
            .max_results(1000)
            .into_paginator()
            .send()
            .try_collect()
            .await
            .map_err(|e| Error::from_sdk("DescribeInstanceTypeOfferings", e))?;
        let mut zones = TypeZones::new();
        for offering in pages.iter().flat_map(|p| p.instance_type_offerings()) {
            if let (Some(instance_type), Some(zone)) =
                (offering.instance_type(), offering.location())
            {
                zones
                    .entry(instance_type.as_str().to_string())
                    .or_default()
                    .insert(zone.to_string());
            }
        }
        Ok(zones)
    }
}

fn count(value: Option<i32>) -> i64 {
    i64::from(value.unwrap_or(0))
}

/// The SDK's `InstanceTypeInfo` as the catalogue's struct (the fields the formulas and labels
/// read). `None` when the answer lacks the type name, vCPUs, memory or network information.
pub fn instance_type_info(sdk: &aws_sdk_ec2::types::InstanceTypeInfo) -> Option<InstanceTypeInfo> {
    let network = sdk.network_info()?;
    let processor = sdk.processor_info();
    Some(InstanceTypeInfo {
        instance_type: sdk.instance_type()?.as_str().to_string(),
        bare_metal: sdk.bare_metal().unwrap_or(false),
        hypervisor: sdk.hypervisor().map(|h| h.as_str().to_string()),
        supported_usage_classes: sdk
            .supported_usage_classes()
            .iter()
            .map(|c| c.as_str().to_string())
            .collect(),
        supported_virtualization_types: sdk
            .supported_virtualization_types()
            .iter()
            .map(|v| v.as_str().to_string())
            .collect(),
        v_cpu_info: VCpuInfo {
            default_v_cpus: i64::from(sdk.v_cpu_info()?.default_v_cpus()?),
        },
        memory_info: MemoryInfo {
            size_in_mib: sdk.memory_info()?.size_in_mib()?,
        },
        processor_info: ProcessorInfo {
            manufacturer: processor.and_then(|p| p.manufacturer()).map(str::to_string),
            supported_architectures: processor
                .map(|p| {
                    p.supported_architectures()
                        .iter()
                        .map(|a| a.as_str().to_string())
                        .collect()
                })
                .unwrap_or_default(),
            sustained_clock_speed_in_ghz: processor.and_then(|p| p.sustained_clock_speed_in_ghz()),
        },
        network_info: NetworkInfo {
            // A negative index from a broken answer selects no card (the type-wide limit
            // applies), never a panic.
            default_network_card_index: usize::try_from(count(
                network.default_network_card_index(),
            ))
            .unwrap_or(usize::MAX),
            maximum_network_interfaces: count(network.maximum_network_interfaces()),
            ipv4_addresses_per_interface: count(network.ipv4_addresses_per_interface()),
            encryption_in_transit_supported: network
                .encryption_in_transit_supported()
                .unwrap_or(false),
            network_cards: network
                .network_cards()
                .iter()
                .map(|card| NetworkCard {
                    network_card_index: usize::try_from(count(card.network_card_index()))
                        .unwrap_or(usize::MAX),
                    maximum_network_interfaces: count(card.maximum_network_interfaces()),
                    baseline_bandwidth_in_gbps: card.baseline_bandwidth_in_gbps(),
                })
                .collect(),
            efa_info: network.efa_info().map(|efa| EfaInfo {
                maximum_efa_interfaces: count(efa.maximum_efa_interfaces()),
            }),
        },
        ebs_info: sdk.ebs_info().map(|ebs| EbsInfo {
            ebs_optimized_support: ebs.ebs_optimized_support().map(|s| s.as_str().to_string()),
            ebs_optimized_info: ebs.ebs_optimized_info().map(|o| EbsOptimizedInfo {
                maximum_bandwidth_in_mbps: count(o.maximum_bandwidth_in_mbps()),
            }),
        }),
        instance_storage_info: sdk.instance_storage_info().map(|s| InstanceStorageInfo {
            total_size_in_gb: s.total_size_in_gb().unwrap_or(0),
            nvme_support: s.nvme_support().map(|n| n.as_str().to_string()),
        }),
        gpu_info: sdk.gpu_info().map(|g| GpuInfo {
            gpus: g
                .gpus()
                .iter()
                .map(|gpu| Gpu {
                    name: gpu.name().unwrap_or_default().to_string(),
                    manufacturer: gpu.manufacturer().unwrap_or_default().to_string(),
                    count: count(gpu.count()),
                    memory_info: MemoryInfo {
                        size_in_mib: count(gpu.memory_info().and_then(|m| m.size_in_mib())),
                    },
                })
                .collect(),
        }),
        neuron_info: sdk.neuron_info().map(|n| NeuronInfo {
            neuron_devices: n
                .neuron_devices()
                .iter()
                .map(|device| NeuronDevice {
                    name: device.name().unwrap_or_default().to_string(),
                    count: count(device.count()),
                    core_info: device.core_info().map(|c| NeuronCoreInfo {
                        count: count(c.count()),
                    }),
                })
                .collect(),
        }),
        inference_accelerator_info: sdk.inference_accelerator_info().map(|i| {
            InferenceAcceleratorInfo {
                accelerators: i
                    .accelerators()
                    .iter()
                    .map(|a| InferenceAccelerator {
                        name: a.name().unwrap_or_default().to_string(),
                        manufacturer: a.manufacturer().unwrap_or_default().to_string(),
                        count: count(a.count()),
                    })
                    .collect(),
            }
        }),
    })
}

/// What EC2 said about the region's instance types.
#[derive(Clone, Debug, Default)]
pub struct Discovered {
    pub infos: Vec<InstanceTypeInfo>,
    pub type_zones: TypeZones,
}

/// Resolves the instance types of an EC2NodeClass from EC2 answers, with upstream's caching.
pub struct InstanceTypeProvider {
    clients: AwsClients,
    settings: ProviderSettings,
    clock: Arc<dyn Clock>,
    prices: PriceTable,
    cache: Mutex<Cache>,
}

/// Instance types resolved for one NodeClass shape.
pub type InstanceTypes = Arc<Vec<Arc<InstanceType>>>;

#[derive(Default)]
struct Cache {
    discovered: Option<(Arc<Discovered>, Timestamp)>,
    /// Per NodeClass shape (a handful: a linear search is enough), with the price table's
    /// generation they were priced at; dropped on rediscovery.
    resolved: Vec<(NodeClassShape, Timestamp, u64, InstanceTypes)>,
}

impl std::fmt::Debug for InstanceTypeProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceTypeProvider")
            .field("region", &self.clients.region)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl InstanceTypeProvider {
    pub fn new(clients: AwsClients, settings: ProviderSettings, clock: Arc<dyn Clock>) -> Self {
        Self {
            clients,
            settings,
            clock,
            prices: PriceTable::new(),
            cache: Mutex::new(Cache::default()),
        }
    }

    /// Prices offerings from `prices` (shared with the pricing task) instead of a private table
    /// that only ever holds the embedded prices.
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    /// The table offerings are priced from.
    pub fn price_table(&self) -> &PriceTable {
        &self.prices
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        // Only cached answers live here; a poisoned lock still holds whole entries.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fetches both descriptions now (at start, upstream fails fatally when this fails).
    pub async fn refresh(&self) -> Result<Arc<Discovered>, Error> {
        let infos = self.clients.describe_instance_types().await?;
        let type_zones = self.clients.describe_instance_type_offerings().await?;
        let discovered = Arc::new(Discovered { infos, type_zones });
        let mut cache = self.cache();
        cache.discovered = Some((Arc::clone(&discovered), self.clock.now()));
        cache.resolved.clear();
        Ok(discovered)
    }

    /// The EC2 descriptions, fetched again when older than [`DISCOVERY_REFRESH`]. (Two callers
    /// racing a refresh may both fetch; the answers are the same.)
    pub async fn discovered(&self) -> Result<Arc<Discovered>, Error> {
        let now = self.clock.now();
        if let Some((discovered, at)) = &self.cache().discovered
            && now.duration_since(*at) < DISCOVERY_REFRESH
        {
            return Ok(Arc::clone(discovered));
        }
        self.refresh().await
    }

    /// The instance types `node_class` can launch (`None`: no NodeClass, nothing excluded).
    pub async fn instance_types(
        &self,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<InstanceTypes, InstanceTypesError> {
        let shape = match node_class {
            Some(node_class) => NodeClassShape::from_node_class(node_class, self.settings)?,
            None => NodeClassShape {
                settings: self.settings,
                ..NodeClassShape::default()
            },
        };
        let discovered = self.discovered().await?;
        let now = self.clock.now();
        let generation = self.prices.generation();
        {
            let mut cache = self.cache();
            cache.resolved.retain(|(_, at, priced, _)| {
                now.duration_since(*at) < RESOLVED_TTL && *priced == generation
            });
            if let Some((_, _, _, types)) = cache.resolved.iter().find(|(s, ..)| *s == shape) {
                return Ok(Arc::clone(types));
            }
        }
        let catalog = Catalog::embedded()?;
        let types: Vec<Arc<InstanceType>> = karpenter_catalog::build::instance_types(
            &discovered.infos,
            &self.clients.region,
            &discovered.type_zones,
            &self.prices.prices(catalog, &self.clients.region),
            &shape,
        )
        .into_iter()
        .map(Arc::new)
        .collect();
        let types = Arc::new(types);
        self.cache()
            .resolved
            .push((shape, now, generation, Arc::clone(&types)));
        Ok(types)
    }
}
