//! NodeOverlays (`karpenter.sh/v1alpha1`, behind the `NodeOverlay` gate) applied to the instance
//! types a cloud provider offers each NodePool, before anything reads a price or a capacity.
//!
//! Upstream's semantics (pkg/controllers/nodeoverlay, pkg/cloudprovider/types.go):
//! - An overlay selects an instance type of a NodePool when its `requirements` are compatible with
//!   the type's labels, the pool's name (`karpenter.sh/nodepool`) and template labels, and the
//!   zones/capacity types of its offerings; a price change then applies to the offerings the
//!   requirements also select (zone, capacity type), a capacity change to the whole type.
//! - Overlays are evaluated by weight (higher first; equal weights by name, later in the
//!   alphabet first). For each offering (price) and each type (capacity) the first overlay to
//!   change it wins; a later overlay of *lower* weight only fills what is still unset (capacity
//!   resources it adds that are missing). A later overlay of the *same* weight that changes the
//!   same offering price or the same capacity resource is a conflict: it is not applied anywhere
//!   (no partial application across types or pools) and gets `ValidationSucceeded=False`,
//!   reason `Conflict`.
//! - Overlays that fail upstream's runtime validation get reason `RuntimeValidation`.
//!
//! [`evaluate`] is a pure function of the overlays and the offered types; [`Evaluation::apply`]
//! returns the types as the scheduler must see them. The controller and `simulate` call both.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use karpenter_api::v1::ConditionsExt;
use karpenter_api::v1alpha1::{
    CONDITION_VALIDATION_SUCCEEDED, MESSAGE_CONFLICT, NodeOverlay, NodeOverlayStatus,
    PRICE_OVERLAY_APPLIED_ANNOTATION, REASON_CONFLICT, REASON_RUNTIME_VALIDATION,
};
use karpenter_api::validation::validate_nodeoverlay;
use karpenter_api::well_known;
use karpenter_api::{NodeClaim, NodePool};
use kube_core::ResourceExt;

use crate::cloud_provider::CapacityOverlay;
use crate::instance_type::{InstanceType, Offering};
use crate::requirements::{Requirement, Requirements};
use crate::resources::ResourceList;

#[cfg(test)]
mod tests;

/// A parsed `price` or `priceAdjustment`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PriceChange {
    /// `price: "0.05"`: the offering costs exactly this.
    Replace(f64),
    /// `priceAdjustment: "+0.5"` / `"-0.5"`: added to the offering's price (floored at 0).
    Add(f64),
    /// `priceAdjustment: "+10%"` / `"-15%"`: the offering's price times `1 + p/100` (floored at 0).
    Percent(f64),
}

impl PriceChange {
    /// Reads a `price` (no sign) or a `priceAdjustment` (signed, optionally `%`), as upstream's
    /// `AdjustedPrice` does. `None` for text that is not a finite number.
    pub fn parse(text: &str) -> Option<PriceChange> {
        let text = text.trim();
        let finite = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite());
        if !text.starts_with('+') && !text.starts_with('-') {
            return finite(text).filter(|v| *v >= 0.0).map(PriceChange::Replace);
        }
        match text.strip_suffix('%') {
            Some(percent) => finite(percent).map(PriceChange::Percent),
            None => finite(text).map(PriceChange::Add),
        }
    }

    /// The price of an offering that cost `price` before the change.
    pub fn apply(self, price: f64) -> f64 {
        let adjusted = match self {
            PriceChange::Replace(new) => return new,
            PriceChange::Add(delta) => price + delta,
            PriceChange::Percent(percent) => price * (1.0 + percent / 100.0),
        };
        adjusted.max(0.0)
    }
}

/// What happened to one overlay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid and without conflict (applied wherever it selects something).
    Applied,
    /// An overlay of the same weight already changes what this one changes.
    Conflict,
    /// Upstream's runtime validation refused it; the message names the fields.
    Invalid(String),
}

impl Verdict {
    /// `(status, reason, message)` of the `ValidationSucceeded` condition, as upstream writes it.
    pub fn condition(&self) -> (&'static str, &str, &str) {
        match self {
            Verdict::Applied => ("True", "ValidationSucceeded", ""),
            Verdict::Conflict => ("False", REASON_CONFLICT, MESSAGE_CONFLICT),
            Verdict::Invalid(message) => ("False", REASON_RUNTIME_VALIDATION, message),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Applied => f.write_str("applied"),
            Verdict::Conflict => write!(f, "{REASON_CONFLICT}: {MESSAGE_CONFLICT}"),
            Verdict::Invalid(message) => write!(f, "{REASON_RUNTIME_VALIDATION}: {message}"),
        }
    }
}

/// An offering's identity inside its instance type.
type OfferingKey = (String, String, Option<String>);

fn offering_key(offering: &Offering) -> OfferingKey {
    (
        offering.zone.clone(),
        offering.capacity_type.clone(),
        offering.reservation_id.clone(),
    )
}

#[derive(Clone, Debug)]
struct PriceSlot {
    change: PriceChange,
    /// Weight of the last overlay that selected this offering (conflicts are same-weight).
    last_weight: i32,
}

#[derive(Clone, Debug, Default)]
struct CapacitySlot {
    added: ResourceList,
    last_weight: i32,
    last_resources: BTreeSet<String>,
}

#[derive(Clone, Debug, Default)]
struct TypeUpdate {
    prices: BTreeMap<OfferingKey, PriceSlot>,
    capacity: Option<CapacitySlot>,
}

/// The result of [`evaluate`]: every overlay's verdict and the changes to apply per pool and type.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    /// pool → instance type → changes.
    updates: BTreeMap<String, BTreeMap<String, TypeUpdate>>,
    /// Overlay name → verdict, for every overlay given.
    pub verdicts: BTreeMap<String, Verdict>,
}

/// One overlay, parsed.
struct Parsed {
    name: String,
    weight: i32,
    requirements: Requirements,
    price: Option<PriceChange>,
    capacity: ResourceList,
}

fn parse(overlay: &NodeOverlay) -> Result<Parsed, String> {
    let errors = validate_nodeoverlay(overlay);
    if !errors.is_empty() {
        return Err(errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "));
    }
    let spec = &overlay.spec;
    let mut requirements = Requirements::new();
    for (i, r) in spec.requirements.iter().enumerate() {
        let requirement = Requirement::new(&r.key, &r.operator, &r.values)
            .map_err(|err| format!("spec.requirements[{i}]: {err}"))?;
        requirements.add_str(&r.key, requirement);
    }
    let price = match spec.price_change() {
        None => None,
        Some(text) => Some(PriceChange::parse(text).ok_or_else(|| {
            let field = if spec.price.is_some() {
                "price"
            } else {
                "priceAdjustment"
            };
            format!("spec.{field}: {text:?} is not a price")
        })?),
    };
    let capacity = match &spec.capacity {
        None => ResourceList::new(),
        Some(map) => ResourceList::from_k8s(map).map_err(|err| format!("spec.capacity: {err}"))?,
    };
    Ok(Parsed {
        name: overlay.name_any(),
        weight: spec.effective_weight(),
        requirements,
        price,
        capacity,
    })
}

/// Upstream's `OrderByWeight`: higher weight first; equal weights by name, later name first.
pub fn order_by_weight(overlays: &mut [&NodeOverlay]) {
    overlays.sort_by(|a, b| {
        b.spec
            .effective_weight()
            .cmp(&a.spec.effective_weight())
            .then_with(|| b.name_any().cmp(&a.name_any()))
    });
}

/// The requirements an overlay is matched against for one type of one pool: the type's labels,
/// the pool's name and template labels, and the zones and capacity types of its offerings.
fn type_requirements(pool: &NodePool, it: &InstanceType) -> Requirements {
    let mut reqs = Requirements::from_labels(&it.labels);
    reqs.add_str(
        well_known::NODEPOOL_LABEL,
        Requirement::is_in([pool.name_any()]),
    );
    if let Some(metadata) = &pool.spec.template.metadata {
        reqs.add_all(&Requirements::from_labels(&metadata.labels));
    }
    let zones: BTreeSet<String> = it.offerings.iter().map(|o| o.zone.clone()).collect();
    let capacity_types: BTreeSet<String> = it
        .offerings
        .iter()
        .map(|o| o.capacity_type.clone())
        .collect();
    reqs.add_str(well_known::ZONE_LABEL, Requirement::is_in(zones));
    reqs.add_str(
        well_known::CAPACITY_TYPE_LABEL,
        Requirement::is_in(capacity_types),
    );
    reqs
}

fn offering_requirements(offering: &Offering) -> Requirements {
    let mut reqs = Requirements::new();
    reqs.add_str(
        well_known::ZONE_LABEL,
        Requirement::is_in([offering.zone.clone()]),
    );
    reqs.add_str(
        well_known::CAPACITY_TYPE_LABEL,
        Requirement::is_in([offering.capacity_type.clone()]),
    );
    if let Some(id) = &offering.reservation_id {
        reqs.add_str(
            well_known::AWS_CAPACITY_RESERVATION_ID_LABEL,
            Requirement::is_in([id.clone()]),
        );
    }
    reqs
}

/// The offerings of `it` (in `pool`) that `overlay` selects; empty when it does not select the
/// type at all.
fn selected_offerings<'a>(
    pool: &NodePool,
    it: &'a InstanceType,
    overlay: &Requirements,
) -> Vec<&'a Offering> {
    if type_requirements(pool, it)
        .compatible(overlay, |_| false)
        .is_err()
    {
        return Vec::new();
    }
    // Offerings only define zone, capacity type and reservation: the overlay's other keys were
    // checked against the type above (upstream: AllowUndefinedWellKnownLabels).
    it.offerings
        .iter()
        .filter(|o| offering_requirements(o).intersects(overlay).is_ok())
        .collect()
}

impl Evaluation {
    fn conflicts(&self, pool: &str, it: &str, overlay: &Parsed, offerings: &[&Offering]) -> bool {
        let Some(update) = self.updates.get(pool).and_then(|types| types.get(it)) else {
            return false;
        };
        if overlay.price.is_some()
            && offerings.iter().any(|o| {
                update
                    .prices
                    .get(&offering_key(o))
                    .is_some_and(|slot| slot.last_weight == overlay.weight)
            })
        {
            return true;
        }
        if !overlay.capacity.is_empty()
            && let Some(slot) = &update.capacity
            && slot.last_weight == overlay.weight
            && overlay
                .capacity
                .iter()
                .any(|(name, _)| slot.last_resources.contains(name))
        {
            return true;
        }
        false
    }

    fn record(&mut self, pool: &str, it: &str, overlay: &Parsed, offerings: &[&Offering]) {
        let update = self
            .updates
            .entry(pool.to_string())
            .or_default()
            .entry(it.to_string())
            .or_default();
        if let Some(change) = overlay.price {
            for offering in offerings {
                update
                    .prices
                    .entry(offering_key(offering))
                    .and_modify(|slot| slot.last_weight = overlay.weight)
                    .or_insert(PriceSlot {
                        change,
                        last_weight: overlay.weight,
                    });
            }
        }
        if !overlay.capacity.is_empty() {
            let slot = update.capacity.get_or_insert_with(CapacitySlot::default);
            for (name, quantity) in overlay.capacity.iter() {
                if !slot.added.contains(name) {
                    slot.added.set(name, quantity);
                }
            }
            slot.last_weight = overlay.weight;
            slot.last_resources = overlay
                .capacity
                .iter()
                .map(|(name, _)| name.to_string())
                .collect();
        }
    }

    /// The verdict of the overlay named `name`, if it was evaluated.
    pub fn verdict(&self, name: &str) -> Option<&Verdict> {
        self.verdicts.get(name)
    }

    /// Whether some overlay changes some type of `pool`.
    pub fn changes(&self, pool: &str) -> bool {
        self.updates
            .get(pool)
            .is_some_and(|types| !types.is_empty())
    }

    /// `types` of `pool` with the overlays applied: changed types are copies, the others are
    /// shared.
    pub fn apply(&self, pool: &str, types: &[Arc<InstanceType>]) -> Vec<Arc<InstanceType>> {
        let Some(updates) = self.updates.get(pool) else {
            return types.to_vec();
        };
        types
            .iter()
            .map(|it| match updates.get(&it.name) {
                None => Arc::clone(it),
                Some(update) => Arc::new(apply_update(it, update)),
            })
            .collect()
    }

    /// What the overlays set on `pool`'s types' capacity, for the launch
    /// ([`CloudProvider::create_with_capacity_overlay`](crate::cloud_provider::CloudProvider::create_with_capacity_overlay)).
    pub fn capacity_added(&self, pool: &str) -> CapacityOverlay {
        let by_type = self
            .updates
            .get(pool)
            .into_iter()
            .flatten()
            .filter_map(|(it, update)| Some((it.clone(), update.capacity.as_ref()?.added.clone())))
            .collect();
        CapacityOverlay::new(by_type)
    }

    /// Every pool's types with the overlays applied.
    pub fn apply_all(
        &self,
        pools: Vec<(NodePool, Vec<Arc<InstanceType>>)>,
    ) -> Vec<(NodePool, Vec<Arc<InstanceType>>)> {
        pools
            .into_iter()
            .map(|(pool, types)| {
                let types = self.apply(&pool.name_any(), &types);
                (pool, types)
            })
            .collect()
    }
}

fn apply_update(it: &InstanceType, update: &TypeUpdate) -> InstanceType {
    let mut out = it.clone();
    if let Some(slot) = &update.capacity {
        for (name, quantity) in slot.added.iter() {
            out.capacity.set(name, quantity);
        }
        out.overlay_applied.capacity = true;
    }
    for offering in &mut out.offerings {
        if let Some(slot) = update.prices.get(&offering_key(offering)) {
            offering.price = slot.change.apply(offering.price);
            out.overlay_applied.price = true;
        }
    }
    out
}

/// Evaluates `overlays` against the types each pool is offered: verdicts and changes, as
/// upstream's NodeOverlay controller computes them. Pools are matched by name; an overlay that
/// conflicts in any pool is applied in none.
pub fn evaluate(
    overlays: &[NodeOverlay],
    pools: &[(NodePool, Vec<Arc<InstanceType>>)],
) -> Evaluation {
    let mut evaluation = Evaluation::default();
    let mut ordered: Vec<&NodeOverlay> = overlays.iter().collect();
    order_by_weight(&mut ordered);
    for overlay in ordered {
        let parsed = match parse(overlay) {
            Ok(parsed) => parsed,
            Err(message) => {
                evaluation
                    .verdicts
                    .insert(overlay.name_any(), Verdict::Invalid(message));
                continue;
            }
        };
        // Check every pool and type before recording anything: no partial application.
        let mut selected: Vec<(String, String, Vec<&Offering>)> = Vec::new();
        let mut conflict = false;
        'pools: for (pool, types) in pools {
            let pool_name = pool.name_any();
            for it in types {
                let offerings = selected_offerings(pool, it, &parsed.requirements);
                if offerings.is_empty() {
                    continue;
                }
                if evaluation.conflicts(&pool_name, &it.name, &parsed, &offerings) {
                    conflict = true;
                    break 'pools;
                }
                selected.push((pool_name.clone(), it.name.clone(), offerings));
            }
        }
        if conflict {
            evaluation
                .verdicts
                .insert(parsed.name.clone(), Verdict::Conflict);
            continue;
        }
        for (pool, it, offerings) in &selected {
            evaluation.record(pool, it, &parsed, offerings);
        }
        evaluation
            .verdicts
            .insert(parsed.name.clone(), Verdict::Applied);
    }
    evaluation
}

/// The instance types of `claim` in the order its provider must prefer them when the claim was
/// planned with overlaid prices, i.e. when it carries
/// [`PRICE_OVERLAY_APPLIED_ANNOTATION`](karpenter_api::v1alpha1::PRICE_OVERLAY_APPLIED_ANNOTATION)
/// (upstream checks the key only): its `node.kubernetes.io/instance-type In` values as the
/// provisioner wrote them, cheapest at the overlaid price first. `None` otherwise: the provider's
/// own prices decide. The providers do not see the overlays; this order is what they carry.
pub fn launch_order(claim: &NodeClaim) -> Option<Vec<String>> {
    claim
        .metadata
        .annotations
        .as_ref()?
        .get(PRICE_OVERLAY_APPLIED_ANNOTATION)?;
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == well_known::INSTANCE_TYPE_LABEL && r.operator == "In")
        .map(|r| r.values.to_vec())
}

/// The status the controller writes for `overlay` given its verdict: `ValidationSucceeded` and
/// `Ready` (upstream's ready set has that one dependent), transition times kept when the status
/// does not change. `None` when the current status already says so (no write).
pub fn desired_status(
    overlay: &NodeOverlay,
    verdict: &Verdict,
    now_rfc3339: &str,
) -> Option<NodeOverlayStatus> {
    let mut status = overlay.status.clone().unwrap_or_default();
    let (state, reason, message) = verdict.condition();
    let generation = overlay.metadata.generation;
    let mut changed = status.set_condition(
        CONDITION_VALIDATION_SUCCEEDED,
        state,
        reason,
        message,
        now_rfc3339,
        generation,
    );
    let ready_reason = if state == "True" { "Ready" } else { reason };
    changed |= status.set_condition(
        "Ready",
        state,
        ready_reason,
        message,
        now_rfc3339,
        generation,
    );
    changed.then_some(status)
}
