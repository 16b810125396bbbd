//! The embedded AWS instance-type catalogue.
//!
//! The real EC2 data (instance types, zone offerings for us-east-1 and us-west-2, on-demand prices)
//! is compiled into the binary gzip-compressed (`data/`, see its README for the regeneration
//! command) and decoded once, on first use. [`Catalog::instance_types`] turns it into
//! [`InstanceType`]s with upstream's capacity, overhead and label formulas.
//!
//! Prices: on-demand prices are real (AWS Price List, us-east-1; other regions reuse them as an
//! approximation). Spot prices come from a documented deterministic model ([`pricing`]).

pub mod ec2;
pub mod formulas;
pub mod labels;
pub mod pricing;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::sync::OnceLock;

use karpenter_api::well_known as wk;
use karpenter_core::instance_type::{InstanceType, Offering};
use serde::Deserialize;

use crate::ec2::InstanceTypeInfo;

const INSTANCE_TYPES_GZ: &[u8] = include_bytes!("../data/instance-types.json.gz");
const OFFERINGS_GZ: &[u8] = include_bytes!("../data/offerings.json.gz");
const ON_DEMAND_PRICES_GZ: &[u8] = include_bytes!("../data/on-demand-prices.json.gz");

/// The region whose published prices stand in for regions without their own table.
pub const PRICE_FALLBACK_REGION: &str = "us-east-1";
/// The region used when none is given.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Why the catalogue could not be loaded or queried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error("failed to decompress embedded catalogue file {file}: {message}")]
    Decompress { file: &'static str, message: String },
    #[error("failed to parse catalogue file {file}: {message}")]
    Parse { file: &'static str, message: String },
    #[error(
        "unknown region {region:?}: the catalogue has {known} (pass one of them with --region)"
    )]
    UnknownRegion { region: String, known: String },
}

#[derive(Deserialize)]
struct RegionOfferings {
    zones: BTreeMap<String, BTreeSet<String>>,
}

#[derive(Deserialize)]
struct PriceFile {
    source: String,
    regions: BTreeMap<String, BTreeMap<String, f64>>,
}

/// The decoded EC2 catalogue. Immutable; build [`InstanceType`]s per region from it.
#[derive(Debug)]
pub struct Catalog {
    infos: BTreeMap<String, InstanceTypeInfo>,
    /// region → zone → instance types offered there.
    zones: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// region → instance type → USD/h.
    on_demand: BTreeMap<String, BTreeMap<String, f64>>,
    price_source: String,
}

impl Catalog {
    /// The catalogue compiled into this binary (decoded on first call, then shared).
    pub fn embedded() -> Result<&'static Catalog, CatalogError> {
        static EMBEDDED: OnceLock<Result<Catalog, CatalogError>> = OnceLock::new();
        EMBEDDED
            .get_or_init(|| {
                Catalog::from_json(
                    &gunzip("instance-types.json.gz", INSTANCE_TYPES_GZ)?,
                    &gunzip("offerings.json.gz", OFFERINGS_GZ)?,
                    &gunzip("on-demand-prices.json.gz", ON_DEMAND_PRICES_GZ)?,
                )
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Builds a catalogue from the three (uncompressed) JSON documents.
    pub fn from_json(
        instance_types: &[u8],
        offerings: &[u8],
        prices: &[u8],
    ) -> Result<Catalog, CatalogError> {
        let infos: BTreeMap<String, InstanceTypeInfo> = serde_json::from_slice(instance_types)
            .map_err(|e| CatalogError::Parse {
                file: "instance-types.json",
                message: e.to_string(),
            })?;
        let regions: BTreeMap<String, RegionOfferings> = serde_json::from_slice(offerings)
            .map_err(|e| CatalogError::Parse {
                file: "offerings.json",
                message: e.to_string(),
            })?;
        let prices: PriceFile =
            serde_json::from_slice(prices).map_err(|e| CatalogError::Parse {
                file: "on-demand-prices.json",
                message: e.to_string(),
            })?;
        Ok(Catalog {
            infos,
            zones: regions
                .into_iter()
                .map(|(region, o)| (region, o.zones))
                .collect(),
            on_demand: prices.regions,
            price_source: prices.source,
        })
    }

    /// Regions with zone data.
    pub fn regions(&self) -> impl Iterator<Item = &str> {
        self.zones.keys().map(String::as_str)
    }

    /// The zones of `region`, sorted.
    pub fn zones(&self, region: &str) -> Result<Vec<&str>, CatalogError> {
        Ok(self
            .region_zones(region)?
            .keys()
            .map(String::as_str)
            .collect())
    }

    /// Where the on-demand prices come from.
    pub fn price_source(&self) -> &str {
        &self.price_source
    }

    /// Whether `region` borrows another region's on-demand prices (an approximation).
    pub fn prices_are_approximated(&self, region: &str) -> bool {
        !self.on_demand.contains_key(region)
    }

    /// The on-demand price of `instance_type` in `region` (USD/h), falling back to
    /// [`PRICE_FALLBACK_REGION`]'s price when the region has no table.
    pub fn on_demand_price(&self, region: &str, instance_type: &str) -> Option<f64> {
        self.on_demand
            .get(region)
            .or_else(|| self.on_demand.get(PRICE_FALLBACK_REGION))
            .and_then(|table| table.get(instance_type))
            .copied()
            .filter(|p| *p > 0.0)
    }

    /// Every instance type Karpenter would discover in `region` (hvm, x86_64/arm64, offered in
    /// at least one zone), sorted by name. Offerings: each zone offering the type × each
    /// supported capacity type (`on-demand`, `spot`) that has a price; types without a price
    /// have no offerings but are still listed.
    pub fn instance_types(&self, region: &str) -> Result<Vec<InstanceType>, CatalogError> {
        let zones = self.region_zones(region)?;
        Ok(self
            .infos
            .values()
            .filter(|info| info.is_discoverable())
            .filter_map(|info| {
                let offered_in: Vec<&str> = zones
                    .iter()
                    .filter(|(_, types)| types.contains(&info.instance_type))
                    .map(|(zone, _)| zone.as_str())
                    .collect();
                if offered_in.is_empty() {
                    return None;
                }
                Some(self.build(info, region, &offered_in))
            })
            .collect())
    }

    fn build(&self, info: &InstanceTypeInfo, region: &str, zones: &[&str]) -> InstanceType {
        let name = &info.instance_type;
        let supports = |class: &str| info.supported_usage_classes.iter().any(|c| c == class);
        let mut offerings = Vec::new();
        if let Some(on_demand) = self.on_demand_price(region, name) {
            for zone in zones {
                if supports(wk::CAPACITY_TYPE_ON_DEMAND) {
                    offerings.push(offering(zone, wk::CAPACITY_TYPE_ON_DEMAND, on_demand));
                }
                if supports(wk::CAPACITY_TYPE_SPOT) {
                    let spot = pricing::modelled_spot_price(name, zone, on_demand);
                    offerings.push(offering(zone, wk::CAPACITY_TYPE_SPOT, spot));
                }
            }
        }
        InstanceType {
            name: name.clone(),
            labels: labels::labels(info, region),
            capacity: formulas::capacity(info),
            overhead: formulas::overhead(info),
            offerings,
        }
    }

    fn region_zones(
        &self,
        region: &str,
    ) -> Result<&BTreeMap<String, BTreeSet<String>>, CatalogError> {
        self.zones
            .get(region)
            .ok_or_else(|| CatalogError::UnknownRegion {
                region: region.to_string(),
                known: self.regions().collect::<Vec<_>>().join(", "),
            })
    }
}

fn offering(zone: &str, capacity_type: &str, price: f64) -> Offering {
    Offering {
        zone: zone.to_string(),
        capacity_type: capacity_type.to_string(),
        price,
        available: true,
        reservation_id: None,
        reservation_capacity: None,
    }
}

fn gunzip(file: &'static str, bytes: &[u8]) -> Result<Vec<u8>, CatalogError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| CatalogError::Decompress {
            file,
            message: e.to_string(),
        })?;
    Ok(out)
}
