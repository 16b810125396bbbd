//! Live prices (reference §5): on-demand from the Price List API (`GetProducts`), spot from
//! `DescribeSpotPriceHistory`, both refreshed at start and every [`PRICING_REFRESH`], with the
//! embedded catalogue's prices as the fallback. The [`PriceTable`] is shared: the
//! [`crate::InstanceTypeProvider`] builds offerings from it, so the prices the scheduler sees are
//! the live ones.
//!
//! Fallbacks, as upstream: when a query fails (moto has no Pricing API) or answers nothing, the
//! previous prices stay; with `ISOLATED_VPC` (or in `us-gov-*`) the Pricing API is never called.
//! An instance type without a live on-demand price takes the embedded one. Before the first
//! successful spot update a type's spot price is the catalogue's (upstream uses the on-demand
//! price; the catalogue's modelled spot keeps the aws provider equal to `karpenter simulate`
//! offline); afterwards a (type, zone) the history did not mention has no spot offering.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use aws_sdk_pricing::types::{Filter as PricingFilter, FilterType};
use jiff::{SignedDuration, Timestamp};
use karpenter_catalog::Catalog;
use karpenter_catalog::build::Prices;
use karpenter_core::clock::Clock;
use serde_json::Value;
use tokio::sync::watch;

use crate::{AwsClients, Error};

/// Upstream's pricing controller period (both updates).
pub const PRICING_REFRESH: SignedDuration = SignedDuration::from_hours(12);
/// How long a failed update waits before trying again (the refresh period would leave the
/// embedded prices in place for 12 h after one network blip).
pub const PRICING_RETRY: SignedDuration = SignedDuration::from_mins(5);
/// `DescribeSpotPriceHistory` product descriptions Karpenter asks for.
pub const SPOT_PRODUCT_DESCRIPTIONS: [&str; 2] = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"];

/// The region whose Price List endpoint serves `region` (the API has a few endpoints only).
pub fn pricing_region(region: &str) -> &'static str {
    if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("eu-") {
        "eu-central-1"
    } else {
        "us-east-1"
    }
}

/// The currency of the price lists of `region`.
pub fn currency(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "CNY"
    } else {
        "USD"
    }
}

/// Why a price update did not happen.
#[derive(Debug, thiserror::Error)]
pub enum PricingError {
    #[error(transparent)]
    Aws(#[from] Error),
    #[error("{query} answered no prices; keeping the previous ones")]
    Empty { query: &'static str },
    #[error("price list item: {0}")]
    Item(String),
}

/// On-demand price of one `GetProducts` `PriceList` item: `(instance type, price)`; `Ok(None)`
/// for an item without a positive price in `currency` (upstream skips zero prices).
pub fn parse_price_list_item(
    item: &str,
    currency: &str,
) -> Result<Option<(String, f64)>, PricingError> {
    let value: Value = serde_json::from_str(item).map_err(|e| PricingError::Item(e.to_string()))?;
    let instance_type = value
        .pointer("/product/attributes/instanceType")
        .and_then(Value::as_str)
        .ok_or_else(|| PricingError::Item("no product.attributes.instanceType".into()))?;
    let terms = value
        .pointer("/terms/OnDemand")
        .and_then(Value::as_object)
        .ok_or_else(|| PricingError::Item(format!("{instance_type}: no terms.OnDemand")))?;
    let price = terms
        .values()
        .filter_map(|term| term.get("priceDimensions").and_then(Value::as_object))
        .flat_map(|dimensions| dimensions.values())
        .filter_map(|d| d.get("pricePerUnit")?.get(currency)?.as_str())
        .filter_map(|p| p.parse::<f64>().ok())
        .find(|p| p.is_finite() && *p > 0.0);
    Ok(price.map(|p| (instance_type.to_string(), p)))
}

/// The `TERM_MATCH` filters of one on-demand query (upstream's), per tenancy/product family.
pub fn on_demand_filters(
    region: &str,
    tenancy: &str,
    product_family: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("regionCode", region.to_string()),
        ("serviceCode", "AmazonEC2".to_string()),
        ("preInstalledSw", "NA".to_string()),
        ("operatingSystem", "Linux".to_string()),
        ("capacitystatus", "Used".to_string()),
        ("marketoption", "OnDemand".to_string()),
        ("tenancy", tenancy.to_string()),
        ("productFamily", product_family.to_string()),
    ]
}

/// Upstream's two on-demand queries: shared-tenancy instances, dedicated bare metal.
const ON_DEMAND_QUERIES: [(&str, &str, &str); 2] = [
    (
        "GetProducts(Compute Instance)",
        "Shared",
        "Compute Instance",
    ),
    (
        "GetProducts(Compute Instance (bare metal))",
        "Dedicated",
        "Compute Instance (bare metal)",
    ),
];

impl AwsClients {
    async fn on_demand_query(
        &self,
        tenancy: &str,
        product_family: &str,
    ) -> Result<Vec<String>, Error> {
        let mut request = self
            .pricing
            .get_products()
            .service_code("AmazonEC2")
            .max_results(100);
        for (field, value) in on_demand_filters(&self.region, tenancy, product_family) {
            let filter = PricingFilter::builder()
                .r#type(FilterType::TermMatch)
                .field(field)
                .value(value)
                .build()
                .map_err(|e| Error::Config {
                    message: format!("pricing filter {field}: {e}"),
                })?;
            request = request.filters(filter);
        }
        let pages = request
            .into_paginator()
            .send()
            .try_collect()
            .await
            .map_err(|e| Error::from_sdk("GetProducts", e))?;
        Ok(pages
            .into_iter()
            .flat_map(|p| p.price_list.unwrap_or_default())
            .collect())
    }

    /// On-demand prices of the region from the Price List API (both queries; either empty is
    /// an error so a partial answer never replaces the table).
    pub async fn on_demand_prices(&self) -> Result<HashMap<String, f64>, PricingError> {
        let currency = currency(&self.region);
        let mut prices = HashMap::new();
        for (query, tenancy, family) in ON_DEMAND_QUERIES {
            let items = self.on_demand_query(tenancy, family).await?;
            let before = prices.len();
            for item in &items {
                match parse_price_list_item(item, currency) {
                    Ok(Some((instance_type, price))) => {
                        prices.insert(instance_type, price);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::debug!(error = %e, "skipping a price list item"),
                }
            }
            if prices.len() == before {
                return Err(PricingError::Empty { query });
            }
        }
        Ok(prices)
    }

    /// The latest spot price per (instance type, zone) (`DescribeSpotPriceHistory` from now,
    /// paginated).
    pub async fn spot_prices(
        &self,
        now: Timestamp,
    ) -> Result<HashMap<(String, String), f64>, PricingError> {
        let start = aws_smithy_types_datetime(now);
        let pages = self
            .ec2
            .describe_spot_price_history()
            .set_product_descriptions(Some(SPOT_PRODUCT_DESCRIPTIONS.map(str::to_string).to_vec()))
            .start_time(start)
            .max_results(1000)
            .into_paginator()
            .send()
            .try_collect()
            .await
            .map_err(|e| Error::from_sdk("DescribeSpotPriceHistory", e))?;
        let entries = pages
            .iter()
            .flat_map(|p| p.spot_price_history())
            .map(|s| SpotEntry {
                instance_type: s.instance_type().map(|t| t.as_str().to_string()),
                zone: s.availability_zone().map(str::to_string),
                price: s.spot_price().map(str::to_string),
                timestamp: s.timestamp().map(|t| t.secs()),
            });
        let prices = latest_spot_prices(entries);
        if prices.is_empty() {
            return Err(PricingError::Empty {
                query: "DescribeSpotPriceHistory",
            });
        }
        Ok(prices)
    }
}

fn aws_smithy_types_datetime(at: Timestamp) -> aws_sdk_ec2::primitives::DateTime {
    aws_sdk_ec2::primitives::DateTime::from_secs(at.as_second())
}

/// One `SpotPrice` of the history, as the SDK gives it (every field optional).
#[derive(Clone, Debug, Default)]
pub struct SpotEntry {
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub price: Option<String>,
    /// Seconds since the epoch.
    pub timestamp: Option<i64>,
}

/// The newest positive price per (type, zone); entries missing a field or with an unparsable
/// price are skipped.
pub fn latest_spot_prices(
    entries: impl IntoIterator<Item = SpotEntry>,
) -> HashMap<(String, String), f64> {
    let mut latest: HashMap<(String, String), (i64, f64)> = HashMap::new();
    for entry in entries {
        let (Some(instance_type), Some(zone), Some(price)) =
            (entry.instance_type, entry.zone, entry.price)
        else {
            continue;
        };
        let Ok(price) = price.parse::<f64>() else {
            continue;
        };
        if !price.is_finite() || price <= 0.0 {
            continue;
        }
        let at = entry.timestamp.unwrap_or(i64::MIN);
        let slot = latest.entry((instance_type, zone)).or_insert((at, price));
        if at > slot.0 {
            *slot = (at, price);
        }
    }
    latest.into_iter().map(|(k, (_, p))| (k, p)).collect()
}

#[derive(Debug, Default)]
struct Live {
    on_demand: HashMap<String, f64>,
    /// `None` until the first successful spot update.
    spot: Option<HashMap<(String, String), f64>>,
    /// Bumped on every change, so caches of priced instance types know they are stale.
    generation: u64,
    on_demand_updated: Option<Timestamp>,
    spot_updated: Option<Timestamp>,
}

/// The shared price table; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct PriceTable {
    live: Arc<RwLock<Live>>,
}

impl PriceTable {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Live> {
        self.live.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Live> {
        self.live.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes with every update (see [`crate::InstanceTypeProvider`]'s cache).
    pub fn generation(&self) -> u64 {
        self.read().generation
    }

    pub fn set_on_demand(&self, prices: HashMap<String, f64>, at: Timestamp) {
        let mut live = self.write();
        live.on_demand = prices;
        live.on_demand_updated = Some(at);
        live.generation = live.generation.wrapping_add(1);
    }

    pub fn set_spot(&self, prices: HashMap<(String, String), f64>, at: Timestamp) {
        let mut live = self.write();
        live.spot = Some(prices);
        live.spot_updated = Some(at);
        live.generation = live.generation.wrapping_add(1);
    }

    /// When each half was last updated from AWS (`None`: still the embedded prices).
    pub fn updated(&self) -> (Option<Timestamp>, Option<Timestamp>) {
        let live = self.read();
        (live.on_demand_updated, live.spot_updated)
    }

    /// Prices of `region`: live where known, else the catalogue's.
    pub fn prices<'a>(&'a self, catalog: &'a Catalog, region: &'a str) -> LivePrices<'a> {
        LivePrices {
            live: self.read(),
            fallback: catalog.prices(region),
        }
    }
}

/// A consistent view of the table for one build of instance types.
pub struct LivePrices<'a> {
    live: std::sync::RwLockReadGuard<'a, Live>,
    fallback: karpenter_catalog::CatalogPrices<'a>,
}

impl Prices for LivePrices<'_> {
    fn on_demand(&self, instance_type: &str) -> Option<f64> {
        self.live
            .on_demand
            .get(instance_type)
            .copied()
            .or_else(|| self.fallback.on_demand(instance_type))
    }

    fn spot(&self, instance_type: &str, zone: &str) -> Option<f64> {
        match &self.live.spot {
            Some(spot) => spot
                .get(&(instance_type.to_string(), zone.to_string()))
                .copied(),
            None => self.fallback.spot(instance_type, zone),
        }
    }
}

/// Keeps a [`PriceTable`] up to date from AWS.
#[derive(Clone, Debug)]
pub struct PricingUpdater {
    pub clients: AwsClients,
    pub table: PriceTable,
    /// `ISOLATED_VPC`: the Pricing API is unreachable; on-demand prices stay the embedded ones.
    pub isolated_vpc: bool,
}

/// What one [`PricingUpdater::update`] did.
#[derive(Debug, Default)]
pub struct UpdateReport {
    pub on_demand: Option<Result<usize, PricingError>>,
    pub spot: Option<Result<usize, PricingError>>,
}

impl UpdateReport {
    /// Whether every update that was attempted succeeded.
    pub fn succeeded(&self) -> bool {
        [&self.on_demand, &self.spot]
            .into_iter()
            .flatten()
            .all(Result::is_ok)
    }
}

impl PricingUpdater {
    /// Whether the Price List API may be called for this region.
    pub fn calls_pricing_api(&self) -> bool {
        !self.isolated_vpc && !self.clients.region.starts_with("us-gov-")
    }

    /// Both updates once; a failed one keeps the previous prices (and is logged).
    pub async fn update(&self, now: Timestamp) -> UpdateReport {
        let mut report = UpdateReport::default();
        if self.calls_pricing_api() {
            let result = self.clients.on_demand_prices().await.map(|prices| {
                let count = prices.len();
                self.table.set_on_demand(prices, now);
                count
            });
            if let Err(e) = &result {
                tracing::warn!(error = %e, "on-demand prices not updated; keeping the previous (embedded until the first update)");
            }
            report.on_demand = Some(result);
        }
        let result = self.clients.spot_prices(now).await.map(|prices| {
            let count = prices.len();
            self.table.set_spot(prices, now);
            count
        });
        if let Err(e) = &result {
            tracing::warn!(error = %e, "spot prices not updated; keeping the previous");
        }
        report.spot = Some(result);
        report
    }

    /// Updates at start and every [`PRICING_REFRESH`] ([`PRICING_RETRY`] after a failure) until
    /// `shutdown`. Entry point of the `pricing` provider task.
    pub async fn run(self, clock: Arc<dyn Clock>, mut shutdown: watch::Receiver<bool>) {
        loop {
            let report = self.update(clock.now()).await;
            let wait = if report.succeeded() {
                PRICING_REFRESH
            } else {
                PRICING_RETRY
            };
            let wait = std::time::Duration::try_from(wait).unwrap_or_default();
            tokio::select! {
                () = karpenter_kube::stopped(&mut shutdown) => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M5_LARGE: &str = include_str!("pricing_fixtures/get_products_m5_large.json");

    #[test]
    fn a_real_price_list_item_gives_its_on_demand_price() {
        assert_eq!(
            parse_price_list_item(M5_LARGE, "USD").unwrap(),
            Some(("m5.large".to_string(), 0.096))
        );
        // no CNY price in a us-east-1 item
        assert_eq!(parse_price_list_item(M5_LARGE, "CNY").unwrap(), None);
    }

    #[test]
    fn zero_prices_are_skipped_and_broken_items_are_errors() {
        let zero = M5_LARGE.replace("0.0960000000", "0.0000000000");
        assert_eq!(parse_price_list_item(&zero, "USD").unwrap(), None);
        let cny = M5_LARGE.replace("\"USD\"", "\"CNY\"");
        assert_eq!(
            parse_price_list_item(&cny, "CNY").unwrap(),
            Some(("m5.large".to_string(), 0.096))
        );
        assert!(parse_price_list_item("not json", "USD").is_err());
        assert!(parse_price_list_item(r#"{"product":{}}"#, "USD").is_err());
        assert!(
            parse_price_list_item(
                r#"{"product":{"attributes":{"instanceType":"m5.large"}}}"#,
                "USD"
            )
            .is_err()
        );
    }

    #[test]
    fn endpoints_and_filters_are_upstreams() {
        assert_eq!(pricing_region("us-west-2"), "us-east-1");
        assert_eq!(pricing_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(pricing_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_region("cn-north-1"), "cn-northwest-1");
        assert_eq!(currency("cn-north-1"), "CNY");
        let filters = on_demand_filters("us-west-2", "Shared", "Compute Instance");
        assert!(filters.contains(&("regionCode", "us-west-2".to_string())));
        assert!(filters.contains(&("capacitystatus", "Used".to_string())));
        assert!(filters.contains(&("marketoption", "OnDemand".to_string())));
        assert_eq!(filters.len(), 8);
    }

    #[test]
    fn the_newest_spot_price_per_type_and_zone_wins() {
        let entry = |t: &str, z: &str, p: &str, at: i64| SpotEntry {
            instance_type: Some(t.into()),
            zone: Some(z.into()),
            price: Some(p.into()),
            timestamp: Some(at),
        };
        let prices = latest_spot_prices([
            entry("m5.large", "us-west-2a", "0.040", 100),
            entry("m5.large", "us-west-2a", "0.035", 200),
            entry("m5.large", "us-west-2a", "0.050", 150),
            entry("m5.large", "us-west-2b", "0.041", 100),
            entry("c5.large", "us-west-2a", "bogus", 100),
            entry("c5.large", "us-west-2b", "0", 100),
            SpotEntry::default(),
        ]);
        assert_eq!(prices.len(), 2);
        assert_eq!(prices[&("m5.large".into(), "us-west-2a".into())], 0.035);
        assert_eq!(prices[&("m5.large".into(), "us-west-2b".into())], 0.041);
    }

    #[test]
    fn live_prices_override_the_catalogue_and_spot_gaps_are_unavailable() {
        let catalog = Catalog::embedded().unwrap();
        let table = PriceTable::new();
        let embedded = catalog.prices("us-east-1");
        let embedded_od = embedded.on_demand("m5.large").unwrap();
        let embedded_spot = embedded.spot("m5.large", "us-east-1a").unwrap();
        {
            // before any update: the catalogue's prices
            let prices = table.prices(catalog, "us-east-1");
            assert_eq!(prices.on_demand("m5.large"), Some(embedded_od));
            assert_eq!(prices.spot("m5.large", "us-east-1a"), Some(embedded_spot));
        }
        let generation = table.generation();
        table.set_on_demand(
            HashMap::from([("m5.large".to_string(), 0.5)]),
            Timestamp::UNIX_EPOCH,
        );
        table.set_spot(
            HashMap::from([(("m5.large".to_string(), "us-east-1a".to_string()), 0.02)]),
            Timestamp::UNIX_EPOCH,
        );
        assert_ne!(table.generation(), generation);
        let prices = table.prices(catalog, "us-east-1");
        assert_eq!(prices.on_demand("m5.large"), Some(0.5));
        // a type the live answer lacked keeps the embedded on-demand price
        assert_eq!(prices.on_demand("c5.large"), embedded.on_demand("c5.large"));
        assert_eq!(prices.spot("m5.large", "us-east-1a"), Some(0.02));
        assert_eq!(prices.spot("m5.large", "us-east-1b"), None);
    }
}
