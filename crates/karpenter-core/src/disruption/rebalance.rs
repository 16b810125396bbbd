//! Spot rebalance replacement (karpenter-rs, beyond upstream; aws `--spot-rebalance-replace`).
//!
//! EC2 sends a rebalance recommendation when a spot instance is at elevated risk of
//! interruption. With the setting on, the aws interruption consumer marks the NodeClaim with
//! [`SPOT_REBALANCE_RECOMMENDATION_ANNOTATION`]; from then on the node is drifted (reason
//! [`SPOT_REBALANCE_RECOMMENDED`]) and goes through drift's path: budgets, a replacement
//! launched and initialized first, then the drain honouring PDBs.
//!
//! What differs from other drift is where the replacement may go: not back into the spot pool
//! at risk (the node's instance type, zone and `spot`). The pass simulates with that offering
//! unavailable ([`SpotPool::hide_in`]) and the replacement NodeClaim's requirements exclude it
//! ([`SpotPool::exclude_from`]), so the provider cannot pick it at launch either.

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_api::NodeClaim;
use karpenter_api::v1::NodeSelectorRequirementWithMinValues;
use karpenter_api::well_known::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_SPOT, INSTANCE_TYPE_LABEL,
    SPOT_REBALANCE_RECOMMENDATION_ANNOTATION, ZONE_LABEL,
};
use kube_core::ResourceExt;

use crate::instance_type::InstanceType;
use crate::requirements::Requirement;

/// The drift reason (the `Drifted` condition's reason) of a node replaced on a rebalance
/// recommendation.
pub const SPOT_REBALANCE_RECOMMENDED: &str = "SpotRebalanceRecommendation";

/// The spot pool a recommendation was about: the replacement must not go back into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpotPool {
    pub instance_type: String,
    pub zone: String,
}

/// The spot pool of a NodeClaim marked with a rebalance recommendation, from `labels` (the
/// Node's over the NodeClaim's). `None` for an unmarked claim, or one that is not spot or whose
/// type or zone is unknown (nothing to replace it away from).
pub fn recommended_away_from(
    claim: &NodeClaim,
    labels: &BTreeMap<String, String>,
) -> Option<SpotPool> {
    if !claim
        .annotations()
        .contains_key(SPOT_REBALANCE_RECOMMENDATION_ANNOTATION)
    {
        return None;
    }
    if labels.get(CAPACITY_TYPE_LABEL).map(String::as_str) != Some(CAPACITY_TYPE_SPOT) {
        return None;
    }
    Some(SpotPool {
        instance_type: labels.get(INSTANCE_TYPE_LABEL)?.clone(),
        zone: labels.get(ZONE_LABEL)?.clone(),
    })
}

impl SpotPool {
    fn is(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        self.instance_type == instance_type
            && self.zone == zone
            && capacity_type == CAPACITY_TYPE_SPOT
    }

    /// `types` with this pool's offering unavailable (the other offerings of its type stay).
    /// Types without it are shared, not copied.
    pub fn hide_in(&self, types: &[Arc<InstanceType>]) -> Vec<Arc<InstanceType>> {
        types
            .iter()
            .map(|t| {
                let affected = t.name == self.instance_type
                    && t.offerings
                        .iter()
                        .any(|o| o.available && self.is(&t.name, &o.zone, &o.capacity_type));
                if !affected {
                    return Arc::clone(t);
                }
                let mut hidden = InstanceType::clone(t);
                for offering in &mut hidden.offerings {
                    if self.is(&t.name, &offering.zone, &offering.capacity_type) {
                        offering.available = false;
                    }
                }
                Arc::new(hidden)
            })
            .collect()
    }

    /// Narrows a replacement's requirements so no offering of this pool satisfies them, giving
    /// up as little as possible: the instance type leaves the `instance-type In` list when other
    /// types remain (and its `minValues` still holds); otherwise (the type is the only choice)
    /// the zone is excluded when the type has another compatible spot zone, else `spot`. `types`
    /// are the NodePool's instance types, for the type's other offerings.
    pub fn exclude_from(&self, claim: &mut NodeClaim, types: &[Arc<InstanceType>]) {
        let requirements = &mut claim.spec.requirements;
        let current: &[NodeSelectorRequirementWithMinValues] = requirements;
        let allowed =
            |requirements: &[NodeSelectorRequirementWithMinValues], key: &str, value: &str| {
                requirements.iter().filter(|r| r.key == key).all(|r| {
                    Requirement::from_values(&r.key, &r.operator, &r.values)
                        .is_ok_and(|req| req.has(&value.to_string()))
                })
            };
        if !allowed(current, INSTANCE_TYPE_LABEL, &self.instance_type)
            || !allowed(current, ZONE_LABEL, &self.zone)
            || !allowed(current, CAPACITY_TYPE_LABEL, CAPACITY_TYPE_SPOT)
        {
            return; // the pool is out already
        }
        if let Some(list) = requirements
            .iter_mut()
            .find(|r| r.key == INSTANCE_TYPE_LABEL && r.operator == "In")
        {
            let others = list
                .values
                .iter()
                .filter(|v| *v != self.instance_type)
                .count();
            let needed = list
                .min_values
                .map_or(1, |m| usize::try_from(m).unwrap_or(usize::MAX));
            if others >= needed.max(1) {
                list.values.retain(|v| v != self.instance_type);
                return;
            }
        }
        let other_spot_zone = types
            .iter()
            .filter(|t| t.name == self.instance_type)
            .flat_map(|t| t.offerings.iter())
            .any(|o| {
                o.available
                    && o.capacity_type == CAPACITY_TYPE_SPOT
                    && o.zone != self.zone
                    && allowed(requirements.as_slice(), ZONE_LABEL, &o.zone)
            });
        let (key, value) = if other_spot_zone {
            (ZONE_LABEL, self.zone.as_str())
        } else {
            (CAPACITY_TYPE_LABEL, CAPACITY_TYPE_SPOT)
        };
        exclude_value(requirements, key, value);
    }
}

/// Removes `value` from the `In` requirement on `key` when there is one, else adds `NotIn`.
fn exclude_value(
    requirements: &mut Vec<NodeSelectorRequirementWithMinValues>,
    key: &str,
    value: &str,
) {
    if let Some(list) = requirements
        .iter_mut()
        .find(|r| r.key == key && r.operator == "In")
    {
        list.values.retain(|v| v != value);
        return;
    }
    requirements.push(NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: "NotIn".to_string(),
        values: [value].into(),
        min_values: None,
    });
}

#[cfg(test)]
mod tests;
