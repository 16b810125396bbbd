//! The embedded AWS instance-type catalogue.
//!
//! The real EC2 data (instance types, zone offerings for the 30 regions moto ships, on-demand prices)
//! is compiled into the binary gzip-compressed (`data/`, see its README for the regeneration
//! command) and decoded once, on first use. [`Catalog::instance_types`] turns it into
//! [`InstanceType`]s with upstream's capacity, overhead and label formulas;
//! [`Catalog::instance_types_for`] does the same for an EC2NodeClass ([`NodeClassShape`]). Both go
//! through [`build::instance_types`], which the aws provider calls with live EC2 answers.
//!
//! Prices: on-demand prices are real (AWS Price List, us-east-1; other regions reuse them as an
//! approximation). Spot prices come from a documented deterministic model ([`pricing`]).

pub mod build;
pub mod ec2;
pub mod exotic;
pub mod formulas;
pub mod labels;
pub mod node_class;
pub mod pricing;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::sync::OnceLock;

use karpenter_core::instance_type::InstanceType;
use serde::Deserialize;

pub use crate::build::{Prices, TypeZones};
use crate::ec2::InstanceTypeInfo;
pub use crate::node_class::{AmiFamily, NodeClassError, NodeClassShape, ProviderSettings};

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
    /// The offerings document as decompressed: a region's zones are decoded from it the first
    /// time that region is asked for. A controller runs in one region; decoded for all 30 the
    /// zone sets took ~12 MB of its memory (heaptrack, docs/benchmarks.md), its own region's
    /// ~0.4 MB.
    offerings: Vec<u8>,
    /// region → its zones, decoded on first use.
    regions: BTreeMap<String, OnceLock<RegionZones>>,
    /// region → instance type → USD/h.
    on_demand: BTreeMap<String, BTreeMap<String, f64>>,
    price_source: String,
}

/// One region's offerings, decoded.
#[derive(Debug)]
struct RegionZones {
    /// zone → instance types offered there.
    zones: BTreeMap<String, BTreeSet<String>>,
    /// instance type → zones offering it (the same facts, the way EC2 answers them).
    type_zones: TypeZones,
}

impl RegionZones {
    fn new(zones: BTreeMap<String, BTreeSet<String>>) -> Self {
        let mut type_zones = TypeZones::new();
        for (zone, types) in &zones {
            for name in types {
                type_zones
                    .entry(name.clone())
                    .or_default()
                    .insert(zone.clone());
            }
        }
        RegionZones { zones, type_zones }
    }
}

/// Decodes one region's entry of the offerings document, skipping the others unbuilt.
struct OneRegion<'r>(&'r str);

impl<'de> serde::de::DeserializeSeed<'de> for OneRegion<'_> {
    type Value = Option<RegionOfferings>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for OneRegion<'_> {
    type Value = Option<RegionOfferings>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a map of regions to their offerings")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(region) = map.next_key::<String>()? {
            if region == self.0 {
                found = Some(map.next_value::<RegionOfferings>()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
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
        // Every region was decoded above, so a broken document fails here, not at first use;
        // only the names stay (see `offerings`).
        let regions = regions
            .into_keys()
            .map(|region| (region, OnceLock::new()))
            .collect();
        Ok(Catalog {
            infos,
            offerings: offerings.to_vec(),
            regions,
            on_demand: prices.regions,
            price_source: prices.source,
        })
    }

    /// Regions with zone data.
    pub fn regions(&self) -> impl Iterator<Item = &str> {
        self.regions.keys().map(String::as_str)
    }

    /// The zones of `region`, sorted.
    pub fn zones(&self, region: &str) -> Result<Vec<&str>, CatalogError> {
        Ok(self
            .region(region)?
            .zones
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

    /// Every instance type Karpenter would discover in `region` without an EC2NodeClass
    /// ([`NodeClassShape::default`]: AL2023's numbers, no type excluded), sorted by name. Offerings: each zone offering the type ×
    /// each supported capacity type (`on-demand`, `spot`) that has a price; types without a
    /// price have no offerings but are still listed.
    pub fn instance_types(&self, region: &str) -> Result<Vec<InstanceType>, CatalogError> {
        self.instance_types_for(region, &NodeClassShape::default())
    }

    /// Like [`Self::instance_types`], shaped by an EC2NodeClass.
    pub fn instance_types_for(
        &self,
        region: &str,
        shape: &NodeClassShape,
    ) -> Result<Vec<InstanceType>, CatalogError> {
        Ok(build::instance_types(
            self.infos.values(),
            region,
            self.type_zones(region)?,
            &self.prices(region),
            shape,
        ))
    }

    /// Instance type → zones of `region` offering it (what `DescribeInstanceTypeOfferings`
    /// answers).
    pub fn type_zones(&self, region: &str) -> Result<&TypeZones, CatalogError> {
        Ok(&self.region(region)?.type_zones)
    }

    /// Every `DescribeInstanceTypes` answer in the catalogue, by name.
    pub fn instance_type_infos(&self) -> impl Iterator<Item = &InstanceTypeInfo> {
        self.infos.values()
    }

    /// The embedded answer for `instance_type`.
    pub fn instance_type_info(&self, instance_type: &str) -> Option<&InstanceTypeInfo> {
        self.infos.get(instance_type)
    }

    /// The catalogue's prices for `region`: real on-demand, modelled spot ([`pricing`]).
    pub fn prices<'a>(&'a self, region: &'a str) -> CatalogPrices<'a> {
        CatalogPrices {
            catalog: self,
            region,
        }
    }

    /// `region`'s offerings, decoded from the document the first time they are asked for.
    fn region(&self, region: &str) -> Result<&RegionZones, CatalogError> {
        let cell = self
            .regions
            .get(region)
            .ok_or_else(|| CatalogError::UnknownRegion {
                region: region.to_string(),
                known: self.regions().collect::<Vec<_>>().join(", "),
            })?;
        Ok(cell.get_or_init(|| {
            use serde::de::DeserializeSeed;
            let mut de = serde_json::Deserializer::from_slice(&self.offerings);
            // `from_json` decoded this same document whole, so this cannot fail; an empty
            // region is what a failure would otherwise leave.
            let zones = OneRegion(region)
                .deserialize(&mut de)
                .ok()
                .flatten()
                .map(|o| o.zones)
                .unwrap_or_default();
            RegionZones::new(zones)
        }))
    }
}

/// [`Prices`] from the embedded tables (see [`Catalog::prices`]).
#[derive(Clone, Copy, Debug)]
pub struct CatalogPrices<'a> {
    catalog: &'a Catalog,
    region: &'a str,
}

impl Prices for CatalogPrices<'_> {
    fn on_demand(&self, instance_type: &str) -> Option<f64> {
        self.catalog.on_demand_price(self.region, instance_type)
    }

    fn spot(&self, instance_type: &str, zone: &str) -> Option<f64> {
        self.on_demand(instance_type)
            .map(|on_demand| pricing::modelled_spot_price(instance_type, zone, on_demand))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the regions asked for are decoded, and each as the whole document has it.
    #[test]
    fn a_region_is_decoded_when_first_asked_for_and_matches_the_whole_document() {
        let catalog = Catalog::from_json(
            &gunzip("instance-types.json.gz", INSTANCE_TYPES_GZ).unwrap(),
            &gunzip("offerings.json.gz", OFFERINGS_GZ).unwrap(),
            &gunzip("on-demand-prices.json.gz", ON_DEMAND_PRICES_GZ).unwrap(),
        )
        .unwrap();
        assert!(catalog.regions.values().all(|r| r.get().is_none()));
        let zones = catalog.zones("eu-west-1").unwrap();
        let decoded: Vec<&str> = catalog
            .regions
            .iter()
            .filter(|(_, r)| r.get().is_some())
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(decoded, ["eu-west-1"]);

        let whole: BTreeMap<String, RegionOfferings> =
            serde_json::from_slice(&catalog.offerings).unwrap();
        let expected = &whole["eu-west-1"].zones;
        assert_eq!(
            zones,
            expected.keys().map(String::as_str).collect::<Vec<_>>()
        );
        let type_zones = catalog.type_zones("eu-west-1").unwrap();
        for (zone, types) in expected {
            for name in types {
                assert!(type_zones[name].contains(zone), "{name} in {zone}");
            }
        }
        let offered: usize = expected.values().map(BTreeSet::len).sum();
        assert_eq!(
            type_zones.values().map(BTreeSet::len).sum::<usize>(),
            offered
        );
        assert!(matches!(
            catalog.zones("mars-east-1"),
            Err(CatalogError::UnknownRegion { .. })
        ));
    }
}
