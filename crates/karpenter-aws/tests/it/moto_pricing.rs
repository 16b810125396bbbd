//! Pricing on moto: moto has no Price List API, so on-demand prices fall back to the embedded
//! ones while the spot prices come from its `DescribeSpotPriceHistory` (all `0.00001`), and the
//! instance types' offerings carry the live prices.

use std::sync::Arc;

use karpenter_api::v1::{AmiSelectorTerm, EC2NodeClass, EC2NodeClassSpec};
use karpenter_api::well_known as wk;
use karpenter_aws::InstanceTypeProvider;
use karpenter_aws::pricing::{PriceTable, PricingError, PricingUpdater};
use karpenter_catalog::build::Prices;
use karpenter_catalog::{Catalog, ProviderSettings};
use karpenter_core::clock::FakeClock;

use crate::harness::moto_clients;

#[tokio::test]
async fn on_demand_falls_back_to_the_embedded_prices_and_spot_comes_from_ec2() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let region = clients.region.clone();
    let table = PriceTable::new();
    let updater = PricingUpdater {
        clients: clients.clone(),
        table: table.clone(),
        isolated_vpc: false,
    };
    let report = updater.update(jiff::Timestamp::now()).await;
    assert!(
        matches!(
            report.on_demand,
            Some(Err(PricingError::Aws(_) | PricingError::Empty { .. }))
        ),
        "moto has no Price List API: {:?}",
        report.on_demand
    );
    let spot_count = *report.spot.as_ref().unwrap().as_ref().unwrap();
    assert!(spot_count > 1000, "{spot_count}");
    assert!(!report.succeeded());
    let (on_demand_at, spot_at) = table.updated();
    assert!(on_demand_at.is_none() && spot_at.is_some());

    let catalog = Catalog::embedded().unwrap();
    {
        let prices = table.prices(catalog, &region);
        assert_eq!(
            prices.on_demand("m5.large"),
            catalog.prices(&region).on_demand("m5.large")
        );
        assert_eq!(prices.spot("m5.large", "us-west-2a"), Some(0.00001));
    }

    let clock = Arc::new(FakeClock::default());
    let provider = InstanceTypeProvider::new(clients.clone(), ProviderSettings::default(), clock)
        .with_prices(table.clone());
    let node_class = EC2NodeClass::new(
        "default",
        EC2NodeClassSpec {
            ami_selector_terms: vec![AmiSelectorTerm {
                alias: Some("al2023@latest".into()),
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    let types = provider.instance_types(Some(&node_class)).await.unwrap();
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
    let spot = m5
        .offerings
        .iter()
        .find(|o| o.capacity_type == wk::CAPACITY_TYPE_SPOT && o.zone == "us-west-2a")
        .unwrap();
    assert_eq!(spot.price, 0.00001);

    // A price change reprices the cached instance types at once.
    table.set_on_demand(
        std::collections::HashMap::from([("m5.large".to_string(), 7.0)]),
        jiff::Timestamp::now(),
    );
    let types = provider.instance_types(Some(&node_class)).await.unwrap();
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
    assert!(
        m5.offerings
            .iter()
            .filter(|o| o.capacity_type == wk::CAPACITY_TYPE_ON_DEMAND)
            .all(|o| o.price == 7.0)
    );
}

#[tokio::test]
async fn an_isolated_vpc_never_calls_the_price_list_api() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let updater = PricingUpdater {
        clients,
        table: PriceTable::new(),
        isolated_vpc: true,
    };
    assert!(!updater.calls_pricing_api());
    let report = updater.update(jiff::Timestamp::now()).await;
    assert!(report.on_demand.is_none());
    assert!(report.succeeded());
}
