//! Upstream's AWS capacity and overhead formulas (karpenter-aws.md §3.2–3.3), shaped by the
//! EC2NodeClass ([`NodeClassShape`]; its `Default` has AL2023's numbers: no `maxPods`/`podsPerCore`,
//! no reserved ENIs, a 20Gi root volume).

use karpenter_core::instance_type::Overhead;
use karpenter_core::resources::{self, Quantity, ResourceList};

use crate::ec2::InstanceTypeInfo;
use crate::node_class::{EvictionSignals, NodeClassShape};

/// Graviton reserves this much memory for CMA.
pub const ARM64_CMA_RESERVED_MIB: i64 = 64;
/// AL2023's default root volume (the ephemeral-storage capacity).
pub const DEFAULT_EPHEMERAL_STORAGE_GIB: i64 = crate::node_class::DEFAULT_VOLUME_GIB;
/// Hard eviction threshold for memory, in MiB.
pub const EVICTION_MEMORY_MIB: i64 = 100;
/// Hard eviction threshold for ephemeral storage, as a percentage of its capacity.
pub const EVICTION_STORAGE_PERCENT: i64 = 10;
/// kube-reserved ephemeral storage, in GiB.
pub const KUBE_RESERVED_STORAGE_GIB: i64 = 1;
/// Windows nodes' `vpc.amazonaws.com/PrivateIPv4Address` resource (secondary IPs of the primary ENI).
pub const WINDOWS_PRIVATE_IPV4_RESOURCE: &str = "vpc.amazonaws.com/PrivateIPv4Address";

/// ENI-limited max pods: `ENIs × (IPv4 per ENI − 1) + 2` (0 when no ENI is usable).
pub fn eni_limited_pods(usable_enis: i64, ipv4_per_eni: i64) -> i64 {
    if usable_enis <= 0 {
        return 0;
    }
    usable_enis
        .saturating_mul(ipv4_per_eni.saturating_sub(1).max(0))
        .saturating_add(2)
}

/// ENI-limited max pods on the default network card, without the ENIs reserved by
/// `--reserved-enis` and the `efa_only` interfaces configured on card 0.
pub fn eni_limited_pods_for(info: &InstanceTypeInfo, reserved_enis: u32, efa_only: i64) -> i64 {
    let usable = info
        .default_card_max_enis()
        .saturating_sub(i64::from(reserved_enis))
        .saturating_sub(efa_only)
        .max(0);
    eni_limited_pods(usable, info.network_info.ipv4_addresses_per_interface)
}

/// Memory capacity in MiB: raw size, minus the Graviton CMA reservation, minus
/// `ceil(MiB × overhead_percent)` (upstream computes it in float64 the same way).
pub fn memory_capacity_mib(size_in_mib: i64, arm64: bool, overhead_percent: f64) -> i64 {
    let mib = if arm64 {
        size_in_mib.saturating_sub(ARM64_CMA_RESERVED_MIB)
    } else {
        size_in_mib
    };
    let overhead = (mib as f64 * overhead_percent).ceil();
    // Settings reject negative or non-finite percentages; stay sane anyway (`as` saturates).
    let overhead = if overhead.is_finite() && overhead > 0.0 {
        overhead as i64
    } else {
        0
    };
    mib.saturating_sub(overhead).max(0)
}

/// kube-reserved CPU in millicores: 6% of the first core, 1% of the second, 0.5% of cores 3–4,
/// 0.25% of the rest.
pub fn kube_reserved_cpu_millis(vcpus: i64) -> i64 {
    let total = vcpus.saturating_mul(1000);
    // (range start, range end, per-ten-thousand)
    let tiers: [(i64, i64, i64); 4] = [
        (0, 1000, 600),
        (1000, 2000, 100),
        (2000, 4000, 50),
        (4000, i64::MAX, 25),
    ];
    tiers
        .iter()
        .map(|&(start, end, per_10k)| {
            let in_range = total.min(end) - start;
            if in_range > 0 {
                in_range.saturating_mul(per_10k) / 10_000
            } else {
                0
            }
        })
        .sum()
}

/// kube-reserved memory in MiB: `11 × pods + 255`.
pub fn kube_reserved_memory_mib(pods: i64) -> i64 {
    pods.saturating_mul(11).saturating_add(255)
}

/// The node's pod capacity: `kubelet.maxPods`, else ENI-limited pods (Windows: 110), then capped
/// at `podsPerCore × vCPUs` when the family honours `podsPerCore`.
pub fn pods(info: &InstanceTypeInfo, shape: &NodeClassShape) -> i64 {
    let efa_only = shape.efa_only_interfaces.map_or(0, |e| e.on_card_zero);
    let mut count = match shape.max_pods {
        Some(max_pods) => max_pods,
        None if shape.family.eni_limited_pod_density() => {
            eni_limited_pods_for(info, shape.settings.reserved_enis, efa_only)
        }
        None => crate::node_class::DEFAULT_MAX_PODS,
    };
    if let Some(per_core) = shape.pods_per_core.filter(|p| *p > 0)
        && shape.family.pods_per_core_enabled()
    {
        count = count.min(per_core.saturating_mul(info.v_cpu_info.default_v_cpus));
    }
    count
}

/// Capacity of a node of this type (cpu, memory, pods, ephemeral-storage, accelerators, EFA).
pub fn capacity(info: &InstanceTypeInfo, shape: &NodeClassShape) -> ResourceList {
    let arm64 = info.kubernetes_arch() == Some("arm64");
    let mut capacity = ResourceList::new();
    capacity.set(
        resources::CPU,
        Quantity::from_units(info.v_cpu_info.default_v_cpus),
    );
    capacity.set(
        resources::MEMORY,
        Quantity::from_mebibytes(memory_capacity_mib(
            info.memory_info.size_in_mib,
            arm64,
            shape.settings.vm_memory_overhead_percent,
        )),
    );
    capacity.set(resources::PODS, Quantity::from_units(pods(info, shape)));
    capacity.set(
        resources::EPHEMERAL_STORAGE,
        shape.ephemeral_storage_for(info),
    );

    let mut set_nonzero = |name: &str, count: i64| {
        if count > 0 {
            capacity.set(name, Quantity::from_units(count));
        }
    };
    if let Some(gpu_info) = &info.gpu_info {
        for (manufacturer, resource) in [
            ("NVIDIA", resources::NVIDIA_GPU),
            ("AMD", resources::AMD_GPU),
            ("Habana", resources::HABANA_GAUDI),
        ] {
            let count = gpu_info
                .gpus
                .iter()
                .filter(|g| g.manufacturer == manufacturer)
                .fold(0i64, |sum, g| sum.saturating_add(g.count));
            set_nonzero(resource, count);
        }
    }
    if let Some(neuron) = &info.neuron_info {
        set_nonzero(
            resources::AWS_NEURON,
            neuron
                .neuron_devices
                .iter()
                .fold(0i64, |sum, d| sum.saturating_add(d.count)),
        );
        if let Some(first) = neuron.neuron_devices.first() {
            set_nonzero(
                resources::AWS_NEURON_CORE,
                first
                    .count
                    .saturating_mul(first.core_info.as_ref().map_or(0, |c| c.count)),
            );
        }
    }
    match shape.efa_only_interfaces {
        Some(efa_only) => set_nonzero(resources::EFA, efa_only.total),
        None => {
            if let Some(efa) = &info.network_info.efa_info {
                set_nonzero(resources::EFA, efa.maximum_efa_interfaces);
            }
        }
    }
    if shape.family.is_windows() {
        set_nonzero(
            WINDOWS_PRIVATE_IPV4_RESOURCE,
            info.network_info
                .ipv4_addresses_per_interface
                .saturating_sub(1),
        );
    }
    capacity
}

/// kube-reserved, system-reserved and the eviction threshold of a node of this type with
/// `capacity` (from [`capacity`]).
pub fn overhead(
    info: &InstanceTypeInfo,
    capacity: &ResourceList,
    shape: &NodeClassShape,
) -> Overhead {
    let pods_for_memory = if shape.family.eni_limited_memory_overhead() {
        eni_limited_pods_for(info, shape.settings.reserved_enis, 0)
    } else {
        capacity.get(resources::PODS).units_ceil()
    };
    let mut kube_reserved = ResourceList::new();
    kube_reserved.set(
        resources::CPU,
        Quantity::from_millis(kube_reserved_cpu_millis(info.v_cpu_info.default_v_cpus)),
    );
    kube_reserved.set(
        resources::MEMORY,
        Quantity::from_mebibytes(kube_reserved_memory_mib(pods_for_memory)),
    );
    kube_reserved.set(
        resources::EPHEMERAL_STORAGE,
        Quantity::from_gibibytes(KUBE_RESERVED_STORAGE_GIB),
    );
    for (name, quantity) in shape.kube_reserved.iter() {
        kube_reserved.set(name, quantity);
    }
    Overhead {
        kube_reserved,
        system_reserved: shape.system_reserved.clone(),
        eviction_threshold: eviction_threshold(capacity, shape),
    }
}

/// Memory `100Mi` and ephemeral storage `ceil(10%)`, each replaced by the largest of the
/// configured `evictionHard` and (when the family honours it) `evictionSoft` thresholds.
fn eviction_threshold(capacity: &ResourceList, shape: &NodeClassShape) -> ResourceList {
    let memory = capacity.get(resources::MEMORY);
    let storage = capacity.get(resources::EPHEMERAL_STORAGE);
    let storage_bytes = storage.units_ceil();
    let mut threshold = ResourceList::new();
    threshold.set(
        resources::MEMORY,
        Quantity::from_mebibytes(EVICTION_MEMORY_MIB),
    );
    threshold.set(
        resources::EPHEMERAL_STORAGE,
        Quantity::from_units(
            storage_bytes
                .saturating_mul(EVICTION_STORAGE_PERCENT)
                .saturating_add(99)
                / 100,
        ),
    );
    let mut configured: Vec<&EvictionSignals> = vec![&shape.eviction_hard];
    if shape.family.eviction_soft_enabled() {
        configured.push(&shape.eviction_soft);
    }
    let largest = |pick: fn(&EvictionSignals) -> Option<crate::node_class::EvictionSignal>,
                   of: Quantity| {
        configured
            .iter()
            .filter_map(|signals| pick(signals))
            .map(|signal| signal.threshold(of))
            .max()
    };
    if let Some(memory_threshold) = largest(|s| s.memory_available, memory) {
        threshold.set(resources::MEMORY, memory_threshold);
    }
    if let Some(storage_threshold) = largest(|s| s.nodefs_available, storage) {
        threshold.set(resources::EPHEMERAL_STORAGE, storage_threshold);
    }
    threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eni_limited_pods_matches_known_values() {
        assert_eq!(eni_limited_pods(3, 10), 29, "m5.large");
        assert_eq!(eni_limited_pods(4, 15), 58, "m5.xlarge");
        assert_eq!(eni_limited_pods(15, 50), 737, "m5.24xlarge / p4d");
        assert_eq!(eni_limited_pods(0, 10), 0);
    }

    #[test]
    fn kube_reserved_cpu_tiers() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(2), 70);
        assert_eq!(kube_reserved_cpu_millis(4), 80);
        assert_eq!(kube_reserved_cpu_millis(8), 90);
        assert_eq!(kube_reserved_cpu_millis(96), 310);
    }

    #[test]
    fn memory_capacity_subtracts_vm_overhead_and_cma() {
        assert_eq!(memory_capacity_mib(8192, false, 0.075), 7577);
        // 8192 − 64 = 8128; ceil(8128 × 0.075) = ceil(609.6) = 610.
        assert_eq!(memory_capacity_mib(8192, true, 0.075), 7518);
    }
}
