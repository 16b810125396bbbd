//! The EC2NodeClass rules (karpenter-aws.md §2, §3.2–3.5) on real catalogue types, with the
//! numbers worked out from the spec's formulas.

use karpenter_api::v1::EC2NodeClass;
use karpenter_api::well_known as wk;
use karpenter_catalog::node_class::{AmiFamily, NodeClassShape, ProviderSettings};
use karpenter_catalog::{Catalog, CatalogError};
use karpenter_core::instance_type::InstanceType;
use serde_json::{Value, json};

use super::{find, q};

const REGION: &str = "us-east-1";

/// An EC2NodeClass named `test` with the given spec fields (amiSelectorTerms defaults to the
/// alias `al2023@latest`).
fn node_class(spec: Value) -> EC2NodeClass {
    let mut full = json!({
        "role": "KarpenterNodeRole",
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
    });
    for (key, value) in spec.as_object().unwrap() {
        full[key] = value.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "test"},
        "spec": full,
    }))
    .unwrap()
}

fn alias(family: &str) -> Value {
    json!([{"alias": format!("{family}@latest")}])
}

fn shaped(spec: Value) -> Vec<InstanceType> {
    shaped_with(spec, ProviderSettings::default())
}

fn shaped_with(spec: Value, settings: ProviderSettings) -> Vec<InstanceType> {
    let shape = NodeClassShape::from_node_class(&node_class(spec), settings).unwrap();
    Catalog::embedded()
        .unwrap()
        .instance_types_for(REGION, &shape)
        .unwrap()
}

#[test]
fn without_a_node_class_nothing_is_excluded_and_al2023_defaults_give_the_same_numbers() {
    let catalog = Catalog::embedded().unwrap();
    let plain = catalog.instance_types(REGION).unwrap();
    assert!(plain.iter().any(|t| t.name == "a1.metal"));
    let al2023 = shaped(json!({}));
    assert!(!al2023.iter().any(|t| t.name.starts_with("a1.")));
    assert_eq!(
        plain.len() - al2023.len(),
        plain.iter().filter(|t| t.name.starts_with("a1.")).count()
    );
    for t in &al2023 {
        assert_eq!(t, find(&plain, &t.name), "{}", t.name);
    }
}

#[test]
fn memory_overhead_in_float_equals_the_exact_per_mille_formula_for_every_type() {
    // The former integer formula: ceil(MiB × 75 / 1000).
    for info in Catalog::embedded().unwrap().instance_type_infos() {
        let arm64 = info.kubernetes_arch() == Some("arm64");
        let mib = info.memory_info.size_in_mib - if arm64 { 64 } else { 0 };
        let exact = mib - (mib * 75 + 999) / 1000;
        assert_eq!(
            karpenter_catalog::formulas::memory_capacity_mib(
                info.memory_info.size_in_mib,
                arm64,
                0.075
            ),
            exact,
            "{}",
            info.instance_type
        );
    }
}

#[test]
fn max_pods_replaces_eni_limited_pods_but_not_the_memory_reservation_on_al2023() {
    let types = shaped(json!({"kubelet": {"maxPods": 110}}));
    let m5 = find(&types, "m5.large");
    assert_eq!(m5.capacity.get("pods"), q("110"));
    assert_eq!(m5.allocatable().get("pods"), q("110"));
    // AL2023 reserves memory for the ENI-limited 29 pods: 11 × 29 + 255.
    assert_eq!(m5.overhead.kube_reserved.get("memory"), q("574Mi"));

    // Bottlerocket reserves for the pods it runs: 11 × 110 + 255 = 1465Mi.
    let types =
        shaped(json!({"amiSelectorTerms": alias("bottlerocket"), "kubelet": {"maxPods": 110}}));
    let m5 = find(&types, "m5.large");
    assert_eq!(m5.capacity.get("pods"), q("110"));
    assert_eq!(m5.overhead.kube_reserved.get("memory"), q("1465Mi"));
}

#[test]
fn pods_per_core_caps_pods_except_on_bottlerocket() {
    // m5.large: 2 vCPUs × 4 = 8 < 29.
    let types = shaped(json!({"kubelet": {"podsPerCore": 4}}));
    assert_eq!(find(&types, "m5.large").capacity.get("pods"), q("8"));
    // m5.xlarge: 4 × 20 = 80 > 58: the ENI limit stays.
    let types = shaped(json!({"kubelet": {"podsPerCore": 20}}));
    assert_eq!(find(&types, "m5.xlarge").capacity.get("pods"), q("58"));
    let types =
        shaped(json!({"amiSelectorTerms": alias("bottlerocket"), "kubelet": {"podsPerCore": 4}}));
    assert_eq!(find(&types, "m5.large").capacity.get("pods"), q("29"));
    // With maxPods too: min(110, 2 × 4).
    let types = shaped(json!({"kubelet": {"maxPods": 110, "podsPerCore": 4}}));
    assert_eq!(find(&types, "m5.large").capacity.get("pods"), q("8"));
}

#[test]
fn kube_and_system_reserved_override_per_key() {
    let types = shaped(json!({"kubelet": {
        "kubeReserved": {"cpu": "200m", "pid": "1000"},
        "systemReserved": {"memory": "300Mi", "cpu": "100m"},
    }}));
    let m5 = find(&types, "m5.large");
    assert_eq!(m5.overhead.kube_reserved.get("cpu"), q("200m"));
    assert_eq!(m5.overhead.kube_reserved.get("memory"), q("574Mi"), "kept");
    assert!(!m5.overhead.kube_reserved.contains("pid"));
    let a = m5.allocatable();
    // 2000m − 200m − 100m; 7577Mi − 574Mi − 300Mi − 100Mi.
    assert_eq!(a.get("cpu"), q("1700m"));
    assert_eq!(a.get("memory"), q("6603Mi"));
}

#[test]
fn eviction_hard_and_soft_take_the_largest_threshold() {
    // memory.available 5% of 7577Mi = 387.85Mi, rounded up to the byte; nodefs 15% of 20Gi = 3Gi.
    let types = shaped(json!({"kubelet": {
        "evictionHard": {"memory.available": "5%", "nodefs.available": "15%"},
    }}));
    let m5 = find(&types, "m5.large");
    let memory_bytes = 7577_i64 * 1024 * 1024;
    assert_eq!(
        m5.overhead.eviction_threshold.get("memory"),
        q(&((memory_bytes * 5 + 99) / 100).to_string())
    );
    assert_eq!(
        m5.overhead.eviction_threshold.get("ephemeral-storage"),
        q("3Gi")
    );

    let soft = json!({
        "evictionHard": {"memory.available": "200Mi"},
        "evictionSoft": {"memory.available": "500Mi"},
        "evictionSoftGracePeriod": {"memory.available": "1m"},
    });
    let types = shaped(json!({"kubelet": soft}));
    assert_eq!(
        find(&types, "m5.large")
            .overhead
            .eviction_threshold
            .get("memory"),
        q("500Mi")
    );
    // Bottlerocket does not count soft thresholds.
    let types = shaped(json!({"amiSelectorTerms": alias("bottlerocket"), "kubelet": soft}));
    assert_eq!(
        find(&types, "m5.large")
            .overhead
            .eviction_threshold
            .get("memory"),
        q("200Mi")
    );
    // 100% disables the threshold.
    let types = shaped(json!({"kubelet": {"evictionHard": {"memory.available": "100%"}}}));
    assert_eq!(
        find(&types, "m5.large")
            .overhead
            .eviction_threshold
            .get("memory"),
        q("0")
    );
}

#[test]
fn the_root_volume_is_the_ephemeral_storage() {
    let root = json!([{"deviceName": "/dev/xvda", "rootVolume": true,
                       "ebs": {"volumeSize": "100Gi", "volumeType": "gp3"}}]);
    let types = shaped(json!({"blockDeviceMappings": root}));
    let m5 = find(&types, "m5.large");
    assert_eq!(m5.capacity.get("ephemeral-storage"), q("100Gi"));
    assert_eq!(
        m5.overhead.eviction_threshold.get("ephemeral-storage"),
        q("10Gi")
    );
    // 100Gi − 1Gi kube-reserved − 10Gi eviction.
    assert_eq!(m5.allocatable().get("ephemeral-storage"), q("89Gi"));

    // AL2 without rootVolume: the mapping of its ephemeral device /dev/xvda.
    let types = shaped(
        json!({"amiSelectorTerms": alias("al2"), "blockDeviceMappings": [
            {"deviceName": "/dev/xvdz", "ebs": {"volumeSize": "500Gi"}},
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "50Gi"}},
        ]}),
    );
    assert_eq!(
        find(&types, "m5.large").capacity.get("ephemeral-storage"),
        q("50Gi")
    );

    // Bottlerocket: the data volume /dev/xvdb, not the 4Gi OS volume.
    let types = shaped(
        json!({"amiSelectorTerms": alias("bottlerocket"), "blockDeviceMappings": [
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "4Gi"}},
            {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "80Gi"}},
        ]}),
    );
    assert_eq!(
        find(&types, "m5.large").capacity.get("ephemeral-storage"),
        q("80Gi")
    );

    // A mapping of another device only: the family default.
    let types = shaped(
        json!({"blockDeviceMappings": [{"deviceName": "/dev/xvdz", "ebs": {"volumeSize": "500G"}}]}),
    );
    assert_eq!(
        find(&types, "m5.large").capacity.get("ephemeral-storage"),
        q("20Gi")
    );

    // Custom: the last mapping, whatever its device.
    let custom = node_class(
        json!({"amiFamily": "Custom", "amiSelectorTerms": [{"id": "ami-123"}],
        "blockDeviceMappings": [{"deviceName": "/dev/xvdz", "ebs": {"volumeSize": "500G"}}]}),
    );
    let shape = NodeClassShape::from_node_class(&custom, ProviderSettings::default()).unwrap();
    assert_eq!(shape.family, AmiFamily::Custom);
    assert_eq!(shape.ephemeral_storage, q("500G"));
}

#[test]
fn raid0_uses_the_instance_store() {
    let types = shaped(json!({"instanceStorePolicy": "RAID0"}));
    // m5d.large has one 75 GB NVMe disk; m5.large has none and keeps the root volume.
    assert_eq!(
        find(&types, "m5d.large").capacity.get("ephemeral-storage"),
        q("75G")
    );
    assert_eq!(
        find(&types, "m5.large").capacity.get("ephemeral-storage"),
        q("20Gi")
    );
}

#[test]
fn windows_families_run_amd64_types_as_windows_nodes() {
    let types = shaped(json!({"amiSelectorTerms": alias("windows2022")}));
    assert!(types.iter().all(|t| t.labels[wk::ARCH_LABEL] == "amd64"));
    let m5 = find(&types, "m5.large");
    assert_eq!(m5.labels[wk::OS_LABEL], "windows");
    assert_eq!(m5.labels[wk::WINDOWS_BUILD_LABEL], "10.0.20348");
    // Windows: no ENI-limited density (110 pods), but 10 IPv4 per ENI − 1 secondary IPs.
    assert_eq!(m5.capacity.get("pods"), q("110"));
    assert_eq!(
        m5.capacity.get("vpc.amazonaws.com/PrivateIPv4Address"),
        q("9")
    );
    assert_eq!(m5.capacity.get("ephemeral-storage"), q("50Gi"));
    // Not ENI-limited memory overhead: 11 × 110 + 255.
    assert_eq!(m5.overhead.kube_reserved.get("memory"), q("1465Mi"));

    let linux = shaped(json!({}));
    assert!(
        !find(&linux, "m5.large")
            .labels
            .contains_key(wk::WINDOWS_BUILD_LABEL)
    );
    let w2019 = shaped(json!({"amiSelectorTerms": alias("windows2019")}));
    assert_eq!(
        find(&w2019, "m5.large").labels[wk::WINDOWS_BUILD_LABEL],
        "10.0.17763"
    );
}

#[test]
fn only_al2023_excludes_a1() {
    for (family, has_a1) in [("al2023", false), ("al2", true), ("bottlerocket", true)] {
        let types = shaped(json!({"amiSelectorTerms": alias(family)}));
        assert_eq!(
            types.iter().any(|t| t.name == "a1.large"),
            has_a1,
            "{family}"
        );
    }
}

#[test]
fn settings_change_memory_and_eni_limited_pods() {
    let settings = ProviderSettings {
        vm_memory_overhead_percent: 0.0,
        reserved_enis: 1,
    };
    let types = shaped_with(json!({}), settings);
    let m5 = find(&types, "m5.large");
    assert_eq!(m5.capacity.get("memory"), q("8192Mi"));
    // (3 − 1) ENIs × 9 + 2.
    assert_eq!(m5.capacity.get("pods"), q("20"));
}

#[test]
fn efa_only_interfaces_take_enis_from_pods_and_set_the_efa_count() {
    let interfaces = json!([
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
        {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
    ]);
    let plain = Catalog::embedded().unwrap().instance_types(REGION).unwrap();
    let types = shaped(json!({"networkInterfaces": interfaces}));
    let p4d_before = find(&plain, "p4d.24xlarge");
    let p4d = find(&types, "p4d.24xlarge");
    assert_eq!(p4d.capacity.get("vpc.amazonaws.com/efa"), q("2"));
    // One ENI of card 0 fewer: (ENIs − 1) × (IPv4 − 1) + 2 = previous − (IPv4 − 1) = − 49.
    assert_eq!(
        p4d.capacity.get("pods").units_ceil(),
        p4d_before.capacity.get("pods").units_ceil() - 49
    );
}

#[test]
fn offerings_stay_within_the_subnets_zones() {
    let mut nc = node_class(json!({}));
    nc.status = Some(
        serde_json::from_value(json!({"subnets": [
            {"id": "subnet-a", "zone": "us-east-1a"},
            {"id": "subnet-b", "zone": "us-east-1b"},
        ]}))
        .unwrap(),
    );
    let shape = NodeClassShape::from_node_class(&nc, ProviderSettings::default()).unwrap();
    let types = Catalog::embedded()
        .unwrap()
        .instance_types_for(REGION, &shape)
        .unwrap();
    let zones: std::collections::BTreeSet<&str> = find(&types, "m5.large")
        .offerings
        .iter()
        .map(|o| o.zone.as_str())
        .collect();
    assert_eq!(
        zones.into_iter().collect::<Vec<_>>(),
        ["us-east-1a", "us-east-1b"]
    );
}

#[test]
fn a_bad_quantity_names_its_field() {
    let nc = node_class(json!({"kubelet": {"kubeReserved": {"memory": "lots"}}}));
    let err = NodeClassShape::from_node_class(&nc, ProviderSettings::default()).unwrap_err();
    assert_eq!(err.field, "spec.kubelet.kubeReserved.memory");
    assert!(
        err.to_string()
            .starts_with("EC2NodeClass test: spec.kubelet.kubeReserved.memory"),
        "{err}"
    );
    let nc = node_class(json!({"kubelet": {"evictionHard": {"nodefs.available": "150%"}}}));
    let err = NodeClassShape::from_node_class(&nc, ProviderSettings::default()).unwrap_err();
    assert_eq!(err.field, "spec.kubelet.evictionHard.nodefs.available");
    let nc = node_class(
        json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "big"}}]}),
    );
    let err = NodeClassShape::from_node_class(&nc, ProviderSettings::default()).unwrap_err();
    assert_eq!(err.field, "spec.blockDeviceMappings[0].ebs.volumeSize");
    // The region check is unchanged.
    assert!(matches!(
        Catalog::embedded()
            .unwrap()
            .instance_types_for("mars-1", &NodeClassShape::default()),
        Err(CatalogError::UnknownRegion { .. })
    ));
}
