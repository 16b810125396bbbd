//! Single-valued instance-type labels as upstream's `computeRequirements` derives them
//! (karpenter-aws.md §3.4). Zone and capacity type live on offerings instead.

use std::collections::BTreeMap;

use karpenter_api::well_known as wk;

use crate::ec2::InstanceTypeInfo;

/// Category and generation from the type name: `m5.large` → (`m`, `5`), `u-6tb1.56xlarge` →
/// (`u`, `1`). Same as upstream's regex `(^[a-z]+)(\-[0-9]+tb)?([0-9]+).*\.`.
pub fn category_and_generation(name: &str) -> Option<(&str, &str)> {
    name.find('.')?;
    let letters_end = name.find(|c: char| !c.is_ascii_lowercase())?;
    if letters_end == 0 {
        return None;
    }
    let category = &name[..letters_end];
    let mut rest = &name[letters_end..];
    // Optional `-<digits>tb` (high-memory `u-*` types).
    if let Some(after_dash) = rest.strip_prefix('-') {
        let digits_end = after_dash
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after_dash.len());
        if digits_end > 0 && after_dash[digits_end..].starts_with("tb") {
            rest = &after_dash[digits_end + 2..];
        }
    }
    let generation_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    if generation_end == 0 {
        return None;
    }
    Some((category, &rest[..generation_end]))
}

/// `"NVIDIA"` → `nvidia`, `"Radeon Pro V520"` → `radeon-pro-v520`.
pub fn lower_kebab(value: &str) -> String {
    value
        .split_whitespace()
        .collect::<Vec<_>>()
        .join("-")
        .to_lowercase()
}

/// Every label a node of this type carries, except zone and capacity type.
pub fn labels(info: &InstanceTypeInfo, region: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut put = |key: &str, value: String| {
        labels.insert(key.to_string(), value);
    };
    let name = info.instance_type.as_str();
    put(wk::INSTANCE_TYPE_LABEL, name.to_string());
    if let Some(arch) = info.kubernetes_arch() {
        put(wk::ARCH_LABEL, arch.to_string());
    }
    put(wk::OS_LABEL, "linux".to_string());
    put(wk::REGION_LABEL, region.to_string());
    if let Some((category, generation)) = category_and_generation(name) {
        put(wk::AWS_INSTANCE_CATEGORY_LABEL, category.to_string());
        put(wk::AWS_INSTANCE_GENERATION_LABEL, generation.to_string());
    }
    if let Some((family, size)) = name.split_once('.') {
        put(wk::AWS_INSTANCE_FAMILY_LABEL, family.to_string());
        put(wk::AWS_INSTANCE_SIZE_LABEL, size.to_string());
        put(
            wk::AWS_INSTANCE_CAPABILITY_FLEX_LABEL,
            family.contains("-flex").to_string(),
        );
    }
    put(
        wk::AWS_INSTANCE_CPU_LABEL,
        info.v_cpu_info.default_v_cpus.to_string(),
    );
    put(
        wk::AWS_INSTANCE_MEMORY_LABEL,
        info.memory_info.size_in_mib.to_string(),
    );
    if let Some(manufacturer) = &info.processor_info.manufacturer {
        put(
            wk::AWS_INSTANCE_CPU_MANUFACTURER_LABEL,
            lower_kebab(manufacturer),
        );
    }
    if let Some(ghz) = info.processor_info.sustained_clock_speed_in_ghz {
        put(
            wk::AWS_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_LABEL,
            format!("{}", (ghz * 1000.0).round() as i64),
        );
    }
    put(
        wk::AWS_INSTANCE_HYPERVISOR_LABEL,
        info.hypervisor.clone().unwrap_or_default(),
    );
    put(
        wk::AWS_INSTANCE_ENCRYPTION_IN_TRANSIT_LABEL,
        info.network_info
            .encryption_in_transit_supported
            .to_string(),
    );
    put(wk::AWS_INSTANCE_TENANCY_LABEL, "default".to_string());
    // Upstream reads a generated bandwidth table; the same figure is the sum of the network
    // cards' baseline bandwidth (m5.large: 0.75 Gbps → 750).
    let bandwidth_mbps: f64 = info
        .network_info
        .network_cards
        .iter()
        .filter_map(|c| c.baseline_bandwidth_in_gbps)
        .sum::<f64>()
        * 1000.0;
    if bandwidth_mbps > 0.0 {
        put(
            wk::AWS_INSTANCE_NETWORK_BANDWIDTH_LABEL,
            format!("{}", bandwidth_mbps.round() as i64),
        );
    }
    if let Some(ebs) = &info.ebs_info
        && ebs.ebs_optimized_support.as_deref() == Some("default")
        && let Some(optimized) = &ebs.ebs_optimized_info
    {
        put(
            wk::AWS_INSTANCE_EBS_BANDWIDTH_LABEL,
            optimized.maximum_bandwidth_in_mbps.to_string(),
        );
    }
    if let Some(storage) = &info.instance_storage_info
        && storage.nvme_support.as_deref() != Some("unsupported")
    {
        put(
            wk::AWS_INSTANCE_LOCAL_NVME_LABEL,
            storage.total_size_in_gb.to_string(),
        );
    }
    if let Some(gpu_info) = &info.gpu_info
        && let [gpu] = gpu_info.gpus.as_slice()
    {
        put(wk::AWS_INSTANCE_GPU_NAME_LABEL, lower_kebab(&gpu.name));
        put(
            wk::AWS_INSTANCE_GPU_MANUFACTURER_LABEL,
            lower_kebab(&gpu.manufacturer),
        );
        put(wk::AWS_INSTANCE_GPU_COUNT_LABEL, gpu.count.to_string());
        put(
            wk::AWS_INSTANCE_GPU_MEMORY_LABEL,
            gpu.memory_info.size_in_mib.to_string(),
        );
    }
    match (&info.neuron_info, &info.inference_accelerator_info) {
        (Some(neuron), _) => {
            if let [device] = neuron.neuron_devices.as_slice() {
                put(
                    wk::AWS_INSTANCE_ACCELERATOR_NAME_LABEL,
                    lower_kebab(&device.name),
                );
                put(
                    wk::AWS_INSTANCE_ACCELERATOR_MANUFACTURER_LABEL,
                    "aws".to_string(),
                );
                put(
                    wk::AWS_INSTANCE_ACCELERATOR_COUNT_LABEL,
                    device.count.to_string(),
                );
            }
        }
        (None, Some(inference)) => {
            if let [accelerator] = inference.accelerators.as_slice() {
                put(
                    wk::AWS_INSTANCE_ACCELERATOR_NAME_LABEL,
                    lower_kebab(&accelerator.name),
                );
                put(
                    wk::AWS_INSTANCE_ACCELERATOR_MANUFACTURER_LABEL,
                    lower_kebab(&accelerator.manufacturer),
                );
                put(
                    wk::AWS_INSTANCE_ACCELERATOR_COUNT_LABEL,
                    accelerator.count.to_string(),
                );
            }
        }
        (None, None) => {}
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_category_and_generation() {
        assert_eq!(category_and_generation("m5.large"), Some(("m", "5")));
        assert_eq!(category_and_generation("c7gn.xlarge"), Some(("c", "7")));
        assert_eq!(category_and_generation("u-6tb1.56xlarge"), Some(("u", "1")));
        assert_eq!(
            category_and_generation("trn1n.32xlarge"),
            Some(("trn", "1"))
        );
        assert_eq!(category_and_generation("m5"), None, "needs a size");
        assert_eq!(category_and_generation("5m.large"), None);
    }

    #[test]
    fn lower_kebab_matches_upstream() {
        assert_eq!(lower_kebab("NVIDIA"), "nvidia");
        assert_eq!(lower_kebab("Radeon Pro V520"), "radeon-pro-v520");
    }
}
