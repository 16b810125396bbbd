//! Instance types from moto's EC2 (`DescribeInstanceTypes`, `DescribeInstanceTypeOfferings`).

use std::sync::Arc;

use jiff::SignedDuration;
use karpenter_api::v1::{AmiSelectorTerm, EC2NodeClass, EC2NodeClassSpec};
use karpenter_aws::InstanceTypeProvider;
use karpenter_aws::instance_types::RESOLVED_TTL;
use karpenter_catalog::{Catalog, NodeClassShape, ProviderSettings};
use karpenter_core::clock::FakeClock;

use crate::harness::moto_clients;

fn node_class(alias: &str) -> EC2NodeClass {
    EC2NodeClass::new(
        "default",
        EC2NodeClassSpec {
            ami_selector_terms: vec![AmiSelectorTerm {
                alias: Some(alias.to_string()),
                ..Default::default()
            }],
            ..Default::default()
        },
    )
}

fn al2023() -> EC2NodeClass {
    node_class("al2023@latest")
}

#[tokio::test]
async fn types_and_zones_come_from_ec2_with_the_catalogues_allocatable() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let region = clients.region.clone();
    let clock = Arc::new(FakeClock::default());
    let provider = InstanceTypeProvider::new(clients, ProviderSettings::default(), clock.clone());
    let node_class = al2023();
    let types = provider.instance_types(Some(&node_class)).await.unwrap();
    assert!(types.len() > 500, "{}", types.len());
    assert!(
        !types.iter().any(|t| t.name.starts_with("a1.")),
        "AL2023 runs no a1"
    );

    let shape = NodeClassShape::from_node_class(&node_class, ProviderSettings::default()).unwrap();
    let catalogue = Catalog::embedded()
        .unwrap()
        .instance_types_for(&region, &shape)
        .unwrap();
    for name in [
        "m5.large",
        "m5.xlarge",
        "c5.2xlarge",
        "m6g.large",
        "t3.micro",
        "r5.4xlarge",
    ] {
        let from_ec2 = types.iter().find(|t| t.name == name).unwrap();
        let embedded = catalogue.iter().find(|t| t.name == name).unwrap();
        assert_eq!(from_ec2.allocatable(), embedded.allocatable(), "{name}");
        assert_eq!(from_ec2.capacity, embedded.capacity, "{name}");
        assert!(!from_ec2.offerings.is_empty(), "{name} has offerings");
        assert!(
            from_ec2
                .offerings
                .iter()
                .all(|o| o.zone.starts_with(&region) && o.price > 0.0),
            "{name}: {:?}",
            from_ec2.offerings
        );
    }

    // Resolved types are reused within the TTL, rebuilt after it.
    let again = provider.instance_types(Some(&node_class)).await.unwrap();
    assert!(Arc::ptr_eq(&types, &again));
    clock.advance(RESOLVED_TTL + SignedDuration::from_secs(1));
    let later = provider.instance_types(Some(&node_class)).await.unwrap();
    assert!(!Arc::ptr_eq(&types, &later));
    assert_eq!(types, later);
}
