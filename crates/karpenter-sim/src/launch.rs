//! Which offering a launch picks, the way EC2 CreateFleet does for Karpenter: among the
//! NodeClaim's options (instance types allowed by its requirements whose allocatable fits its
//! requests), without metal/GPU/accelerator types when any other type remains (upstream's exotic
//! filter, `karpenter_catalog::exotic`), the first capacity type of `reserved` → `spot` →
//! `on-demand` that is allowed and has an available offering, then the cheapest such offering
//! (ties: type name, then zone). A NodeClaim planned with NodeOverlay prices
//! (`karpenter.sh/price-overlay-applied`) is launched in its own instance-type order instead
//! (the provisioner's, cheapest at the overlaid price first), as CreateFleet's prioritized
//! allocation does for the aws provider.

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_api::well_known as wk;
use karpenter_core::cloud_provider::CloudError;
use karpenter_core::instance_type::{InstanceType, Offering};
use karpenter_core::requirements::{Operator, Requirement, Requirements};
use karpenter_core::resources::ResourceList;
use serde::{Deserialize, Serialize};

/// The offering a launch would use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchChoice {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// USD per hour (spot prices are modelled, see `karpenter_catalog::pricing`).
    pub price: f64,
}

/// Capacity types in the order a launch prefers them.
pub const CAPACITY_TYPE_PREFERENCE: [&str; 3] = [
    wk::CAPACITY_TYPE_RESERVED,
    wk::CAPACITY_TYPE_SPOT,
    wk::CAPACITY_TYPE_ON_DEMAND,
];

/// Whether an instance type's label value satisfies a requirement on `key`. An instance type
/// defines every well-known label (a missing one means "does not exist"); other keys (the
/// NodePool template's own labels) are the node's business, not the instance type's.
fn label_allows(key: &str, requirement: &Requirement, value: Option<&String>) -> bool {
    match value {
        Some(v) => requirement.has(v),
        None => !wk::is_well_known_label(key) || requirement.operator().tolerates_absence(),
    }
}

/// Whether `it`'s labels (zone and capacity type aside) satisfy `requirements`.
pub fn instance_type_compatible(it: &InstanceType, requirements: &Requirements) -> bool {
    requirements.iter().all(|(key, requirement)| {
        key == wk::ZONE_LABEL
            || key == wk::CAPACITY_TYPE_LABEL
            || key == wk::NODEPOOL_LABEL
            || label_allows(key, requirement, it.labels.get(key))
    })
}

/// Whether the offering's zone and capacity type satisfy `requirements`.
pub fn offering_compatible(offering: &Offering, requirements: &Requirements) -> bool {
    OfferingFilter::new(requirements).allows(offering)
}

/// The zone and capacity-type requirements, looked up once for all offerings (a plan of
/// thousands of NodeClaims checks hundreds of offerings each).
struct OfferingFilter<'r> {
    zone: Option<&'r Requirement>,
    capacity_type: Option<&'r Requirement>,
}

impl<'r> OfferingFilter<'r> {
    fn new(requirements: &'r Requirements) -> Self {
        OfferingFilter {
            zone: requirements.get(&wk::ZONE_LABEL.to_string()),
            capacity_type: requirements.get(&wk::CAPACITY_TYPE_LABEL.to_string()),
        }
    }

    fn allows(&self, offering: &Offering) -> bool {
        self.zone.is_none_or(|r| r.has(&offering.zone))
            && self
                .capacity_type
                .is_none_or(|r| r.has(&offering.capacity_type))
    }
}

/// A candidate offering for a launch.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub instance_type: &'a InstanceType,
    pub offering: &'a Offering,
}

impl Candidate<'_> {
    pub fn choice(&self) -> LaunchChoice {
        LaunchChoice {
            instance_type: self.instance_type.name.clone(),
            zone: self.offering.zone.clone(),
            capacity_type: self.offering.capacity_type.clone(),
            price: self.offering.price,
        }
    }
}

/// Every available offering of a type the NodeClaim allows, ordered the way a launch tries them:
/// capacity type by preference (only the first capacity type that has any candidate is kept),
/// then the type's rank in `launch_order` when given
/// ([`karpenter_core::node_overlay::launch_order`]: the NodeClaim's overlaid order), then price,
/// type name and zone.
pub fn candidates<'a>(
    types: &'a BTreeMap<String, Arc<InstanceType>>,
    requirements: &Requirements,
    requests: &ResourceList,
    launch_order: Option<&[String]>,
    usable: impl Fn(&InstanceType, &Offering) -> bool,
) -> Vec<Candidate<'a>> {
    // Look named types up directly instead of scanning the whole catalogue.
    let named: Option<Vec<&'a Arc<InstanceType>>> = requirements
        .get(&wk::INSTANCE_TYPE_LABEL.to_string())
        .filter(|r| matches!(r.operator(), Operator::In))
        .map(|r| {
            r.values()
                .iter()
                .filter_map(|name| types.get(name))
                .collect()
        });
    let pool: Vec<&'a Arc<InstanceType>> = named.unwrap_or_else(|| types.values().collect());

    let offerings = OfferingFilter::new(requirements);
    let mut all: Vec<Candidate<'a>> = pool
        .into_iter()
        .map(Arc::as_ref)
        .filter(|it| instance_type_compatible(it, requirements) && it.allocatable().fits(requests))
        .flat_map(|it| {
            it.offerings
                .iter()
                .filter(|o| o.available && offerings.allows(o) && usable(it, o))
                .map(move |offering| Candidate {
                    instance_type: it,
                    offering,
                })
        })
        .collect();
    // Like upstream's launch: metal and accelerator types only when nothing else fits.
    karpenter_catalog::exotic::prefer_generic(&mut all, |c| c.instance_type);
    let Some(capacity_type) = CAPACITY_TYPE_PREFERENCE
        .iter()
        .find(|ct| all.iter().any(|c| c.offering.capacity_type == **ct))
    else {
        return Vec::new();
    };
    all.retain(|c| c.offering.capacity_type == *capacity_type);
    let rank = |it: &InstanceType| {
        launch_order.map_or(0, |order| {
            order
                .iter()
                .position(|n| *n == it.name)
                .unwrap_or(order.len())
        })
    };
    all.sort_by(|a, b| {
        rank(a.instance_type)
            .cmp(&rank(b.instance_type))
            .then_with(|| a.offering.price.total_cmp(&b.offering.price))
            .then_with(|| a.instance_type.name.cmp(&b.instance_type.name))
            .then_with(|| a.offering.zone.cmp(&b.offering.zone))
    });
    all
}

/// The offering a launch would pick, ignoring simulated capacity shortages.
pub fn choose(
    types: &BTreeMap<String, Arc<InstanceType>>,
    requirements: &Requirements,
    requests: &ResourceList,
) -> Result<LaunchChoice, CloudError> {
    candidates(types, requirements, requests, None, |_, _| true)
        .first()
        .map(Candidate::choice)
        .ok_or_else(|| no_offering_error(requirements))
}

pub fn no_offering_error(requirements: &Requirements) -> CloudError {
    CloudError::InsufficientCapacity(format!(
        "no available offering satisfies the requirements [{}]",
        requirements
            .iter()
            .map(|(k, r)| format!("{k} {r}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
