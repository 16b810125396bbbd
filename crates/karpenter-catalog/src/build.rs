//! The one function that turns `DescribeInstanceTypes` answers into core [`InstanceType`]s, shaped
//! by an EC2NodeClass. The embedded catalogue and the aws provider (live EC2 answers) both call
//! [`instance_types`], so `karpenter simulate` and the controller agree on every number.

use std::collections::{BTreeMap, BTreeSet};

use karpenter_api::well_known as wk;
use karpenter_core::instance_type::{InstanceType, Offering};

use crate::ec2::InstanceTypeInfo;
use crate::node_class::NodeClassShape;
use crate::{formulas, labels};

/// Instance type → the zones of the region that offer it (`DescribeInstanceTypeOfferings` with
/// location type `availability-zone`).
pub type TypeZones = BTreeMap<String, BTreeSet<String>>;

/// Where prices come from (the embedded tables, later the Pricing API and spot price history).
pub trait Prices {
    /// On-demand USD/h of `instance_type`, if known.
    fn on_demand(&self, instance_type: &str) -> Option<f64>;
    /// Spot USD/h of `instance_type` in `zone`, if known.
    fn spot(&self, instance_type: &str, zone: &str) -> Option<f64>;
}

/// Every instance type Karpenter would offer for a NodeClass of this `shape` in `region`, sorted
/// by name: discoverable (hvm, x86_64/arm64), runnable by the AMI family, offered in at least one
/// zone. Offerings: each offering zone (within the NodeClass' subnet zones when resolved) × each
/// supported capacity type with a price; types without a price are listed with no offerings.
pub fn instance_types<'a>(
    infos: impl IntoIterator<Item = &'a InstanceTypeInfo>,
    region: &str,
    type_zones: &TypeZones,
    prices: &dyn Prices,
    shape: &NodeClassShape,
) -> Vec<InstanceType> {
    let mut types: Vec<InstanceType> = infos
        .into_iter()
        .filter(|info| info.is_discoverable() && shape.family.can_run(info))
        .filter_map(|info| {
            let zones = type_zones.get(&info.instance_type)?;
            if zones.is_empty() {
                return None;
            }
            Some(instance_type(info, region, zones, prices, shape))
        })
        .collect();
    types.sort_by(|a, b| a.name.cmp(&b.name));
    types
}

/// One instance type (see [`instance_types`]).
pub fn instance_type(
    info: &InstanceTypeInfo,
    region: &str,
    zones: &BTreeSet<String>,
    prices: &dyn Prices,
    shape: &NodeClassShape,
) -> InstanceType {
    let name = &info.instance_type;
    let supports = |class: &str| info.supported_usage_classes.iter().any(|c| c == class);
    let mut offerings = Vec::new();
    let usable_zones = zones.iter().filter(|zone| {
        shape
            .subnet_zones
            .as_ref()
            .is_none_or(|subnets| subnets.contains(*zone))
    });
    let on_demand = prices.on_demand(name);
    for zone in usable_zones {
        if supports(wk::CAPACITY_TYPE_ON_DEMAND)
            && let Some(price) = on_demand
        {
            offerings.push(offering(zone, wk::CAPACITY_TYPE_ON_DEMAND, price));
        }
        if supports(wk::CAPACITY_TYPE_SPOT)
            && let Some(price) = prices.spot(name, zone)
        {
            offerings.push(offering(zone, wk::CAPACITY_TYPE_SPOT, price));
        }
    }
    let mut labels = labels::labels(info, region);
    if let Some(build) = shape.family.windows_build() {
        labels.insert(wk::OS_LABEL.to_string(), "windows".to_string());
        labels.insert(wk::WINDOWS_BUILD_LABEL.to_string(), build.to_string());
    }
    let capacity = formulas::capacity(info, shape);
    let overhead = formulas::overhead(info, &capacity, shape);
    InstanceType {
        name: name.clone(),
        labels,
        capacity,
        overhead,
        offerings,
        ..Default::default()
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
