//! Must-show of issue 11: `karpenter simulate` (the embedded catalogue) and the aws provider
//! (EC2 answers through the SDK types) compute the same instance types — capacity, overhead,
//! allocatable, labels and offerings — for every catalogue type and the AL2023, AL2 and
//! Bottlerocket NodeClasses. The catalogue's own `DescribeInstanceTypes` answers are rebuilt as SDK
//! values, so no network is needed for all of them.

use aws_sdk_ec2::types as sdk;
use karpenter_api::v1::{AmiSelectorTerm, EC2NodeClass, EC2NodeClassSpec, KubeletConfiguration};
use karpenter_aws::instance_types::instance_type_info;
use karpenter_aws::pricing::PriceTable;
use karpenter_catalog::ec2::InstanceTypeInfo;
use karpenter_catalog::{Catalog, NodeClassShape, ProviderSettings};

fn i32_of(value: i64) -> i32 {
    i32::try_from(value).unwrap()
}

/// The catalogue's answer as the SDK would have deserialised it from EC2.
fn to_sdk(info: &InstanceTypeInfo) -> sdk::InstanceTypeInfo {
    let network = &info.network_info;
    sdk::InstanceTypeInfo::builder()
        .instance_type(sdk::InstanceType::from(info.instance_type.as_str()))
        .bare_metal(info.bare_metal)
        .set_hypervisor(
            info.hypervisor
                .as_deref()
                .map(sdk::InstanceTypeHypervisor::from),
        )
        .set_supported_usage_classes(Some(
            info.supported_usage_classes
                .iter()
                .map(|c| sdk::UsageClassType::from(c.as_str()))
                .collect(),
        ))
        .set_supported_virtualization_types(Some(
            info.supported_virtualization_types
                .iter()
                .map(|v| sdk::VirtualizationType::from(v.as_str()))
                .collect(),
        ))
        .v_cpu_info(
            sdk::VCpuInfo::builder()
                .default_v_cpus(i32_of(info.v_cpu_info.default_v_cpus))
                .build(),
        )
        .memory_info(
            sdk::MemoryInfo::builder()
                .size_in_mib(info.memory_info.size_in_mib)
                .build(),
        )
        .processor_info(
            sdk::ProcessorInfo::builder()
                .set_manufacturer(info.processor_info.manufacturer.clone())
                .set_supported_architectures(Some(
                    info.processor_info
                        .supported_architectures
                        .iter()
                        .map(|a| sdk::ArchitectureType::from(a.as_str()))
                        .collect(),
                ))
                .set_sustained_clock_speed_in_ghz(info.processor_info.sustained_clock_speed_in_ghz)
                .build(),
        )
        .network_info(
            sdk::NetworkInfo::builder()
                .default_network_card_index(i32_of(network.default_network_card_index as i64))
                .maximum_network_interfaces(i32_of(network.maximum_network_interfaces))
                .ipv4_addresses_per_interface(i32_of(network.ipv4_addresses_per_interface))
                .encryption_in_transit_supported(network.encryption_in_transit_supported)
                .set_network_cards(Some(
                    network
                        .network_cards
                        .iter()
                        .map(|card| {
                            sdk::NetworkCardInfo::builder()
                                .network_card_index(i32_of(card.network_card_index as i64))
                                .maximum_network_interfaces(i32_of(card.maximum_network_interfaces))
                                .set_baseline_bandwidth_in_gbps(card.baseline_bandwidth_in_gbps)
                                .build()
                        })
                        .collect(),
                ))
                .set_efa_info(network.efa_info.as_ref().map(|efa| {
                    sdk::EfaInfo::builder()
                        .maximum_efa_interfaces(i32_of(efa.maximum_efa_interfaces))
                        .build()
                }))
                .build(),
        )
        .set_ebs_info(info.ebs_info.as_ref().map(|ebs| {
            sdk::EbsInfo::builder()
                .set_ebs_optimized_support(
                    ebs.ebs_optimized_support
                        .as_deref()
                        .map(sdk::EbsOptimizedSupport::from),
                )
                .set_ebs_optimized_info(ebs.ebs_optimized_info.as_ref().map(|o| {
                    sdk::EbsOptimizedInfo::builder()
                        .maximum_bandwidth_in_mbps(i32_of(o.maximum_bandwidth_in_mbps))
                        .build()
                }))
                .build()
        }))
        .set_instance_storage_info(info.instance_storage_info.as_ref().map(|s| {
            sdk::InstanceStorageInfo::builder()
                .total_size_in_gb(s.total_size_in_gb)
                .set_nvme_support(
                    s.nvme_support
                        .as_deref()
                        .map(sdk::EphemeralNvmeSupport::from),
                )
                .build()
        }))
        .set_gpu_info(info.gpu_info.as_ref().map(|g| {
            sdk::GpuInfo::builder()
                .set_gpus(Some(
                    g.gpus
                        .iter()
                        .map(|gpu| {
                            sdk::GpuDeviceInfo::builder()
                                .name(&gpu.name)
                                .manufacturer(&gpu.manufacturer)
                                .count(i32_of(gpu.count))
                                .memory_info(
                                    sdk::GpuDeviceMemoryInfo::builder()
                                        .size_in_mib(i32_of(gpu.memory_info.size_in_mib))
                                        .build(),
                                )
                                .build()
                        })
                        .collect(),
                ))
                .build()
        }))
        .set_neuron_info(info.neuron_info.as_ref().map(|n| {
            sdk::NeuronInfo::builder()
                .set_neuron_devices(Some(
                    n.neuron_devices
                        .iter()
                        .map(|d| {
                            sdk::NeuronDeviceInfo::builder()
                                .name(&d.name)
                                .count(i32_of(d.count))
                                .set_core_info(d.core_info.as_ref().map(|c| {
                                    sdk::NeuronDeviceCoreInfo::builder()
                                        .count(i32_of(c.count))
                                        .build()
                                }))
                                .build()
                        })
                        .collect(),
                ))
                .build()
        }))
        .set_inference_accelerator_info(info.inference_accelerator_info.as_ref().map(|i| {
            sdk::InferenceAcceleratorInfo::builder()
                .set_accelerators(Some(
                    i.accelerators
                        .iter()
                        .map(|a| {
                            sdk::InferenceDeviceInfo::builder()
                                .name(&a.name)
                                .manufacturer(&a.manufacturer)
                                .count(i32_of(a.count))
                                .build()
                        })
                        .collect(),
                ))
                .build()
        }))
        .build()
}

fn node_class(alias: &str, kubelet: Option<KubeletConfiguration>) -> EC2NodeClass {
    EC2NodeClass::new(
        "default",
        EC2NodeClassSpec {
            ami_selector_terms: vec![AmiSelectorTerm {
                alias: Some(alias.to_string()),
                ..Default::default()
            }],
            kubelet,
            ..Default::default()
        },
    )
}

#[test]
fn simulate_and_the_aws_provider_agree_on_every_catalogue_type() {
    let catalog = Catalog::embedded().unwrap();
    let region = "us-east-1";
    let from_ec2: Vec<InstanceTypeInfo> = catalog
        .instance_type_infos()
        .map(|info| instance_type_info(&to_sdk(info)).unwrap())
        .collect();
    assert_eq!(from_ec2.len(), catalog.instance_type_infos().count());
    let prices = PriceTable::new();
    let tuned = KubeletConfiguration {
        max_pods: Some(110),
        kube_reserved: [("memory".to_string(), "1Gi".to_string())].into(),
        eviction_hard: [("memory.available".to_string(), "5%".to_string())].into(),
        ..Default::default()
    };
    for node_class in [
        node_class("al2023@latest", None),
        node_class("al2@latest", None),
        node_class("bottlerocket@latest", None),
        node_class("al2023@latest", Some(tuned.clone())),
        node_class("bottlerocket@latest", Some(tuned)),
    ] {
        let shape =
            NodeClassShape::from_node_class(&node_class, ProviderSettings::default()).unwrap();
        let simulate = catalog.instance_types_for(region, &shape).unwrap();
        // Priced as the provider prices them: through a price table no update reached yet.
        let aws = karpenter_catalog::build::instance_types(
            &from_ec2,
            region,
            catalog.type_zones(region).unwrap(),
            &prices.prices(catalog, region),
            &shape,
        );
        assert!(simulate.len() > 1000, "{:?}", shape.family);
        assert_eq!(simulate.len(), aws.len(), "{:?}", shape.family);
        for (s, a) in simulate.iter().zip(&aws) {
            assert_eq!(s.name, a.name);
            assert_eq!(
                s.allocatable(),
                a.allocatable(),
                "{} {:?}",
                s.name,
                shape.family
            );
            assert_eq!(s, a, "{} {:?}", s.name, shape.family);
        }
    }
}

#[test]
fn answers_missing_what_the_formulas_need_are_skipped() {
    let incomplete = sdk::InstanceTypeInfo::builder()
        .instance_type(sdk::InstanceType::from("m5.large"))
        .build();
    assert!(instance_type_info(&incomplete).is_none());
}
