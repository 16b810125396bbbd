//! Integration tests of the embedded catalogue.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use karpenter_api::well_known as wk;
use karpenter_catalog::{Catalog, CatalogError};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::resources::Quantity;

mod exotic;
mod node_class;
mod packing;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn find<'a>(types: &'a [InstanceType], name: &str) -> &'a InstanceType {
    types
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn has_more_than_a_thousand_instance_types_in_both_regions() {
    let catalog = Catalog::embedded().unwrap();
    for region in ["us-east-1", "us-west-2"] {
        let types = catalog.instance_types(region).unwrap();
        assert!(types.len() > 1000, "{region}: {}", types.len());
        assert!(
            types.windows(2).all(|w| w[0].name < w[1].name),
            "sorted by name"
        );
        assert!(
            types
                .iter()
                .all(|t| t.labels.get(wk::INSTANCE_TYPE_LABEL) == Some(&t.name))
        );
        assert!(
            !types.iter().any(|t| t.name.starts_with("mac")),
            "macs are not discoverable"
        );
    }
}

#[test]
fn m5_large_matches_the_worked_example_exactly() {
    let types = Catalog::embedded()
        .unwrap()
        .instance_types("us-east-1")
        .unwrap();
    let m5 = find(&types, "m5.large");
    assert_eq!(m5.capacity.get("cpu"), q("2"));
    assert_eq!(m5.capacity.get("memory"), q("7577Mi"));
    assert_eq!(m5.capacity.get("pods"), q("29"));
    assert_eq!(m5.capacity.get("ephemeral-storage"), q("20Gi"));
    assert_eq!(m5.overhead.kube_reserved.get("cpu"), q("70m"));
    assert_eq!(m5.overhead.kube_reserved.get("memory"), q("574Mi"));
    assert_eq!(m5.overhead.kube_reserved.get("ephemeral-storage"), q("1Gi"));
    assert_eq!(m5.overhead.eviction_threshold.get("memory"), q("100Mi"));
    assert_eq!(
        m5.overhead.eviction_threshold.get("ephemeral-storage"),
        q("2Gi")
    );
    let allocatable = m5.allocatable();
    assert_eq!(allocatable.get("cpu"), q("1930m"));
    assert_eq!(allocatable.get("memory"), q("6903Mi"));
    assert_eq!(allocatable.get("pods"), q("29"));
    assert_eq!(allocatable.get("ephemeral-storage"), q("17Gi"));
}

#[test]
fn m5_large_has_upstreams_labels() {
    let types = Catalog::embedded()
        .unwrap()
        .instance_types("us-east-1")
        .unwrap();
    let labels = &find(&types, "m5.large").labels;
    let expect = [
        (wk::ARCH_LABEL, "amd64"),
        (wk::OS_LABEL, "linux"),
        (wk::REGION_LABEL, "us-east-1"),
        (wk::AWS_INSTANCE_CATEGORY_LABEL, "m"),
        (wk::AWS_INSTANCE_FAMILY_LABEL, "m5"),
        (wk::AWS_INSTANCE_GENERATION_LABEL, "5"),
        (wk::AWS_INSTANCE_SIZE_LABEL, "large"),
        (wk::AWS_INSTANCE_CPU_LABEL, "2"),
        (wk::AWS_INSTANCE_MEMORY_LABEL, "8192"),
        (wk::AWS_INSTANCE_CPU_MANUFACTURER_LABEL, "intel"),
        (wk::AWS_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_LABEL, "3100"),
        (wk::AWS_INSTANCE_HYPERVISOR_LABEL, "nitro"),
        (wk::AWS_INSTANCE_ENCRYPTION_IN_TRANSIT_LABEL, "false"),
        (wk::AWS_INSTANCE_NETWORK_BANDWIDTH_LABEL, "750"),
        (wk::AWS_INSTANCE_EBS_BANDWIDTH_LABEL, "4750"),
        (wk::AWS_INSTANCE_CAPABILITY_FLEX_LABEL, "false"),
    ];
    for (key, value) in expect {
        assert_eq!(labels.get(key).map(String::as_str), Some(value), "{key}");
    }
    assert!(!labels.contains_key(wk::AWS_INSTANCE_GPU_NAME_LABEL));
    assert!(
        !labels.contains_key(wk::ZONE_LABEL),
        "zone lives on offerings"
    );
    assert!(
        !labels.contains_key(wk::CAPACITY_TYPE_LABEL),
        "capacity type lives on offerings"
    );
}

#[test]
fn gpu_and_graviton_types() {
    let types = Catalog::embedded()
        .unwrap()
        .instance_types("us-east-1")
        .unwrap();
    let p4d = find(&types, "p4d.24xlarge");
    assert_eq!(p4d.capacity.get("nvidia.com/gpu"), q("8"));
    assert_eq!(p4d.capacity.get("vpc.amazonaws.com/efa"), q("4"));
    assert_eq!(p4d.labels[wk::AWS_INSTANCE_GPU_NAME_LABEL], "a100");
    assert_eq!(
        p4d.labels[wk::AWS_INSTANCE_GPU_MANUFACTURER_LABEL],
        "nvidia"
    );
    assert_eq!(p4d.labels[wk::AWS_INSTANCE_GPU_COUNT_LABEL], "8");
    assert_eq!(p4d.labels[wk::AWS_INSTANCE_GPU_MEMORY_LABEL], "40960");
    assert_eq!(p4d.labels[wk::AWS_INSTANCE_LOCAL_NVME_LABEL], "8000");

    let m6g = find(&types, "m6g.large");
    assert_eq!(m6g.labels[wk::ARCH_LABEL], "arm64");
    assert_eq!(m6g.labels[wk::AWS_INSTANCE_CPU_MANUFACTURER_LABEL], "aws");
    // 8192 − 64 (CMA) = 8128; minus ceil(8128 × 0.075) = 610.
    assert_eq!(m6g.capacity.get("memory"), q("7518Mi"));

    let inf1 = find(&types, "inf1.24xlarge");
    assert_eq!(inf1.capacity.get("aws.amazon.com/neuron"), q("16"));
    assert_eq!(inf1.capacity.get("aws.amazon.com/neuroncore"), q("64"));
    assert_eq!(
        inf1.labels[wk::AWS_INSTANCE_ACCELERATOR_MANUFACTURER_LABEL],
        "aws"
    );
}

#[test]
fn real_on_demand_prices_and_modelled_spot() {
    let catalog = Catalog::embedded().unwrap();
    for (name, price) in [
        ("m5.large", 0.096),
        ("c5.large", 0.085),
        ("m5.xlarge", 0.192),
        ("t3.micro", 0.0104),
    ] {
        assert_eq!(
            catalog.on_demand_price("us-east-1", name),
            Some(price),
            "{name}"
        );
    }
    let types = catalog.instance_types("us-east-1").unwrap();
    let m5 = find(&types, "m5.large");
    let on_demand: Vec<_> = m5
        .offerings
        .iter()
        .filter(|o| o.capacity_type == "on-demand")
        .collect();
    assert_eq!(
        on_demand.len(),
        5,
        "m5.large is offered in five us-east-1 zones (not 1e)"
    );
    assert!(on_demand.iter().all(|o| o.price == 0.096 && o.available));
    for spot in m5.offerings.iter().filter(|o| o.capacity_type == "spot") {
        assert_eq!(
            spot.price,
            karpenter_catalog::pricing::modelled_spot_price("m5.large", &spot.zone, 0.096)
        );
        assert!(spot.price < 0.096 * 0.56);
    }
    // us-west-2 has no price table of its own: us-east-1's stands in.
    assert!(catalog.prices_are_approximated("us-west-2"));
    assert_eq!(
        catalog.on_demand_price("us-west-2", "m5.large"),
        Some(0.096)
    );
}

/// The regions whose offerings the moto package ships (see data/README.md): every one has its
/// zones and priced offerings; only us-east-1 has a price table of its own.
#[test]
fn every_region_moto_ships_is_in_the_catalogue_with_approximated_prices() {
    let catalog = Catalog::embedded().unwrap();
    let regions: Vec<&str> = catalog.regions().collect();
    assert_eq!(regions.len(), 30, "{regions:?}");
    for region in ["ap-northeast-2", "eu-west-1", "sa-east-1", "us-east-2"] {
        assert!(regions.contains(&region), "{region} missing: {regions:?}");
    }
    for region in regions {
        let zones = catalog.zones(region).unwrap();
        assert!(
            zones.len() >= 2 && zones.iter().all(|z| z.starts_with(region)),
            "{region}: {zones:?}"
        );
        let types = catalog.instance_types(region).unwrap();
        let offered = types.iter().filter(|t| !t.offerings.is_empty()).count();
        assert!(offered > 100, "{region}: {offered} types with offerings");
        for t in &types {
            let region_label = t.labels.get(wk::REGION_LABEL).map(String::as_str);
            assert_eq!(region_label, Some(region), "{}", t.name);
        }
        assert_eq!(
            catalog.prices_are_approximated(region),
            region != "us-east-1",
            "{region}"
        );
    }
    // Seoul (ap-northeast-2) has four zones and m5.large at us-east-1's price.
    assert_eq!(
        catalog.zones("ap-northeast-2").unwrap(),
        [
            "ap-northeast-2a",
            "ap-northeast-2b",
            "ap-northeast-2c",
            "ap-northeast-2d"
        ]
    );
    let seoul = catalog.instance_types("ap-northeast-2").unwrap();
    let m5 = find(&seoul, "m5.large");
    assert!(
        m5.offerings
            .iter()
            .any(|o| o.capacity_type == "on-demand" && o.price == 0.096),
        "{:?}",
        m5.offerings
    );
}

#[test]
fn offerings_only_in_zones_that_offer_the_type() {
    let catalog = Catalog::embedded().unwrap();
    assert_eq!(
        catalog.zones("us-west-2").unwrap(),
        ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"]
    );
    let types = catalog.instance_types("us-west-2").unwrap();
    for t in &types {
        assert!(
            t.offerings.iter().all(|o| o.zone.starts_with("us-west-2")),
            "{}",
            t.name
        );
    }
    // Types without a price are listed with no offerings.
    assert!(types.iter().any(|t| t.offerings.is_empty()));
}

#[test]
fn unknown_region_names_the_known_ones() {
    let err = Catalog::embedded()
        .unwrap()
        .instance_types("mars-1")
        .unwrap_err();
    assert!(matches!(err, CatalogError::UnknownRegion { .. }));
    assert!(
        err.to_string().contains("ap-northeast-1, ap-northeast-2"),
        "{err}"
    );
}

#[test]
fn every_type_has_positive_allocatable_cpu_and_memory() {
    let types = Catalog::embedded()
        .unwrap()
        .instance_types("us-east-1")
        .unwrap();
    for t in &types {
        let a = t.allocatable();
        assert!(a.get("cpu") > Quantity::ZERO, "{}", t.name);
        assert!(a.get("memory") > Quantity::ZERO, "{}", t.name);
        assert!(a.get("pods") > Quantity::ZERO, "{}", t.name);
    }
}
