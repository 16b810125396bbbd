//! Upstream's AWS capacity and overhead formulas (karpenter-aws.md §3.2–3.3), for the AL2023
//! defaults: no `maxPods`/`podsPerCore`, no reserved ENIs, a 20Gi root volume.

use karpenter_core::instance_type::Overhead;
use karpenter_core::resources::{self, Quantity, ResourceList};

use crate::ec2::InstanceTypeInfo;

/// `--vm-memory-overhead-percent` default (0.075), as per-mille so the arithmetic stays exact.
pub const VM_MEMORY_OVERHEAD_PER_MILLE: i64 = 75;
/// Graviton reserves this much memory for CMA.
pub const ARM64_CMA_RESERVED_MIB: i64 = 64;
/// AL2023's default root volume (the ephemeral-storage capacity).
pub const DEFAULT_EPHEMERAL_STORAGE_GIB: i64 = 20;
/// Hard eviction threshold for memory, in MiB.
pub const EVICTION_MEMORY_MIB: i64 = 100;
/// Hard eviction threshold for ephemeral storage, as a percentage of its capacity.
pub const EVICTION_STORAGE_PERCENT: i64 = 10;

/// ENI-limited max pods: `ENIs × (IPv4 per ENI − 1) + 2` (0 when no ENI is usable).
pub fn eni_limited_pods(usable_enis: i64, ipv4_per_eni: i64) -> i64 {
    if usable_enis <= 0 {
        return 0;
    }
    usable_enis * (ipv4_per_eni - 1).max(0) + 2
}

/// Memory capacity in MiB: raw size, minus the Graviton CMA reservation, minus the VM overhead
/// (rounded up).
pub fn memory_capacity_mib(size_in_mib: i64, arm64: bool) -> i64 {
    let mib = if arm64 {
        size_in_mib - ARM64_CMA_RESERVED_MIB
    } else {
        size_in_mib
    };
    let overhead = (mib * VM_MEMORY_OVERHEAD_PER_MILLE + 999) / 1000;
    mib - overhead
}

/// kube-reserved CPU in millicores: 6% of the first core, 1% of the second, 0.5% of cores 3–4,
/// 0.25% of the rest.
pub fn kube_reserved_cpu_millis(vcpus: i64) -> i64 {
    let total = vcpus * 1000;
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
                in_range * per_10k / 10_000
            } else {
                0
            }
        })
        .sum()
}

/// kube-reserved memory in MiB: `11 × pods + 255`.
pub fn kube_reserved_memory_mib(pods: i64) -> i64 {
    11 * pods + 255
}

/// Capacity of a node of this type (cpu, memory, pods, ephemeral-storage, accelerators, EFA).
pub fn capacity(info: &InstanceTypeInfo) -> ResourceList {
    let arm64 = info.kubernetes_arch() == Some("arm64");
    let mut capacity = ResourceList::new();
    capacity.set(
        resources::CPU,
        Quantity::from_units(info.v_cpu_info.default_v_cpus),
    );
    capacity.set(
        resources::MEMORY,
        Quantity::from_mebibytes(memory_capacity_mib(info.memory_info.size_in_mib, arm64)),
    );
    capacity.set(resources::PODS, Quantity::from_units(max_pods(info)));
    capacity.set(
        resources::EPHEMERAL_STORAGE,
        Quantity::from_gibibytes(DEFAULT_EPHEMERAL_STORAGE_GIB),
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
                .map(|g| g.count)
                .sum();
            set_nonzero(resource, count);
        }
    }
    if let Some(neuron) = &info.neuron_info {
        set_nonzero(
            resources::AWS_NEURON,
            neuron.neuron_devices.iter().map(|d| d.count).sum(),
        );
        if let Some(first) = neuron.neuron_devices.first() {
            set_nonzero(
                resources::AWS_NEURON_CORE,
                first.count * first.core_info.as_ref().map_or(0, |c| c.count),
            );
        }
    }
    if let Some(efa) = &info.network_info.efa_info {
        set_nonzero(resources::EFA, efa.maximum_efa_interfaces);
    }
    capacity
}

/// ENI-limited max pods on the default network card.
pub fn max_pods(info: &InstanceTypeInfo) -> i64 {
    eni_limited_pods(
        info.default_card_max_enis(),
        info.network_info.ipv4_addresses_per_interface,
    )
}

/// kube-reserved, system-reserved (empty) and the hard eviction threshold.
pub fn overhead(info: &InstanceTypeInfo) -> Overhead {
    let mut kube_reserved = ResourceList::new();
    kube_reserved.set(
        resources::CPU,
        Quantity::from_millis(kube_reserved_cpu_millis(info.v_cpu_info.default_v_cpus)),
    );
    kube_reserved.set(
        resources::MEMORY,
        Quantity::from_mebibytes(kube_reserved_memory_mib(max_pods(info))),
    );
    kube_reserved.set(resources::EPHEMERAL_STORAGE, Quantity::from_gibibytes(1));

    let storage_bytes = DEFAULT_EPHEMERAL_STORAGE_GIB * 1024 * 1024 * 1024;
    let mut eviction_threshold = ResourceList::new();
    eviction_threshold.set(
        resources::MEMORY,
        Quantity::from_mebibytes(EVICTION_MEMORY_MIB),
    );
    eviction_threshold.set(
        resources::EPHEMERAL_STORAGE,
        Quantity::from_units((storage_bytes * EVICTION_STORAGE_PERCENT + 99) / 100),
    );
    Overhead {
        kube_reserved,
        system_reserved: ResourceList::new(),
        eviction_threshold,
    }
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
        assert_eq!(memory_capacity_mib(8192, false), 7577);
        // 8192 − 64 = 8128; ceil(8128 × 0.075) = ceil(609.6) = 610.
        assert_eq!(memory_capacity_mib(8192, true), 7518);
    }
}
