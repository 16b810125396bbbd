//! EC2 capacity reservations (reference §1.2, §3.5, §4.2–4.6, §7): `capacityReservationSelectorTerms`
//! resolved through `ec2:DescribeCapacityReservations` into `status.capacityReservations`, the
//! `reserved` offerings an instance type gets from them, and how many instances each reservation
//! can still take ([`ReservationAvailability`], synced from EC2, decremented by our launches,
//! zeroed by `ReservationCapacityExceeded`).
//!
//! Pure except [`AwsClients::describe_capacity_reservations`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use aws_sdk_ec2::types::Filter as Ec2Filter;
use jiff::{SignedDuration, Timestamp};
use karpenter_api::v1::{CapacityReservationSelectorTerm, CapacityReservationStatus};
use karpenter_api::well_known as wk;
use karpenter_core::instance_type::{InstanceType, Offering};

use crate::selectors::{Filter, FilterSet, tag_filters};
use crate::{AwsClients, Error};

/// The EC2NodeClass condition written when the `ReservedCapacity` feature gate is on.
pub const CONDITION_CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";
/// `status.capacityReservations[].reservationType`.
pub const RESERVATION_TYPE_DEFAULT: &str = "default";
pub const RESERVATION_TYPE_CAPACITY_BLOCK: &str = "capacity-block";
/// `status.capacityReservations[].state`.
pub const STATE_ACTIVE: &str = "active";
pub const STATE_EXPIRING: &str = "expiring";
/// A capacity block is `expiring` (no new launches) this long before its end: EC2 reclaims its
/// instances at the end, so a node launched now would barely run.
pub const CAPACITY_BLOCK_EXPIRY_WARNING: SignedDuration = SignedDuration::from_mins(40);
/// Upstream divides the on-demand price by this for a reserved offering: the instances are paid
/// for already (so reserved is always the cheapest choice), while the relative order of types is
/// kept for consolidation.
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;
/// The match criteria the status accepts (the CRD's enum); others are skipped, as upstream does.
const MATCH_CRITERIA: [&str; 2] = ["open", "targeted"];

/// One `DescribeCapacityReservations` call: by ID, or by filters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationQuery {
    pub id: Option<String>,
    pub filters: FilterSet,
}

/// Upstream's queries: an `id` term asks for that ID; a term with tags or match criteria asks by
/// filters (with its owner). Every query asks for `active` reservations only.
pub fn reservation_queries(terms: &[CapacityReservationSelectorTerm]) -> Vec<ReservationQuery> {
    let active = || Filter::new("state", vec![STATE_ACTIVE.to_string()]);
    let mut queries = Vec::new();
    for term in terms {
        if let Some(id) = &term.id {
            queries.push(ReservationQuery {
                id: Some(id.clone()),
                filters: vec![active()],
            });
        }
        if !term.tags.is_empty() || term.instance_match_criteria.is_some() {
            let mut filters = vec![active()];
            if let Some(owner) = &term.owner_id {
                filters.push(Filter::new("owner-id", vec![owner.clone()]));
            }
            filters.extend(tag_filters(&term.tags));
            if let Some(criteria) = &term.instance_match_criteria {
                filters.push(Filter::new(
                    "instance-match-criteria",
                    vec![criteria.clone()],
                ));
            }
            queries.push(ReservationQuery { id: None, filters });
        }
    }
    queries
}

/// What the provider keeps of one `CapacityReservation` answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ReservationInfo {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub owner_id: String,
    pub instance_match_criteria: String,
    /// Instances the reservation can still take.
    pub available: u32,
    pub end: Option<Timestamp>,
    /// `default` or `capacity-block`.
    pub reservation_type: String,
    pub interruptible: bool,
}

impl ReservationInfo {
    fn from_ec2(reservation: &aws_sdk_ec2::types::CapacityReservation) -> Option<Self> {
        Some(Self {
            id: reservation.capacity_reservation_id()?.to_string(),
            instance_type: reservation.instance_type()?.to_string(),
            zone: reservation.availability_zone()?.to_string(),
            owner_id: reservation.owner_id().unwrap_or_default().to_string(),
            instance_match_criteria: reservation
                .instance_match_criteria()
                .map_or_else(String::new, |c| c.as_str().to_string()),
            // A negative count from a broken answer is no capacity, never a wrap-around.
            available: reservation
                .available_instance_count()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            end: reservation
                .end_date()
                .and_then(|t| Timestamp::from_second(t.secs()).ok()),
            reservation_type: reservation
                .reservation_type()
                .map_or(RESERVATION_TYPE_DEFAULT, |t| t.as_str())
                .to_string(),
            interruptible: reservation.interruptible().unwrap_or(false),
        })
    }
}

/// The status entries of the reservations EC2 returned: one per ID, sorted by ID, without ended
/// reservations and unknown match criteria; a capacity block within
/// [`CAPACITY_BLOCK_EXPIRY_WARNING`] of its end is `expiring`.
pub fn reservation_statuses(
    reservations: &[ReservationInfo],
    now: Timestamp,
) -> Vec<CapacityReservationStatus> {
    let mut by_id: BTreeMap<&str, &ReservationInfo> = BTreeMap::new();
    for r in reservations {
        if r.end.is_some_and(|end| end <= now) {
            continue;
        }
        if !MATCH_CRITERIA.contains(&r.instance_match_criteria.as_str()) {
            tracing::warn!(
                reservation = %r.id,
                criteria = %r.instance_match_criteria,
                "capacity reservation has an unsupported instance match criteria; skipping it"
            );
            continue;
        }
        by_id.entry(&r.id).or_insert(r);
    }
    by_id
        .into_values()
        .map(|r| {
            let expiring = r.reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK
                && r.end
                    .is_some_and(|end| end.duration_since(now) <= CAPACITY_BLOCK_EXPIRY_WARNING);
            CapacityReservationStatus {
                availability_zone: r.zone.clone(),
                end_time: r.end.map(|t| t.to_string()),
                id: r.id.clone(),
                instance_match_criteria: r.instance_match_criteria.clone(),
                instance_type: r.instance_type.clone(),
                owner_id: r.owner_id.clone(),
                reservation_type: Some(r.reservation_type.clone()),
                interruptible: Some(r.interruptible),
                state: Some(
                    if expiring {
                        STATE_EXPIRING
                    } else {
                        STATE_ACTIVE
                    }
                    .to_string(),
                ),
            }
        })
        .collect()
}

/// How many instances each reservation can still take, as far as this controller knows: synced
/// from every `DescribeCapacityReservations` answer, decremented when we launch into one,
/// incremented when we terminate one, zeroed when EC2 says it is full. Unknown IDs have none.
/// Shared by the EC2NodeClass controller and the provider; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct ReservationAvailability(Arc<Mutex<BTreeMap<String, u32>>>);

impl ReservationAvailability {
    fn counts(&self) -> MutexGuard<'_, BTreeMap<String, u32>> {
        // Plain counters: a poisoned lock still holds whole values.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes EC2's counts.
    pub fn sync(&self, reservations: &[ReservationInfo]) {
        let mut counts = self.counts();
        for r in reservations {
            counts.insert(r.id.clone(), r.available);
        }
    }

    /// Instances `id` can still take (0 when unknown).
    pub fn available(&self, id: &str) -> u32 {
        self.counts().get(id).copied().unwrap_or(0)
    }

    pub fn mark_launched(&self, id: &str) {
        if let Some(count) = self.counts().get_mut(id) {
            *count = count.saturating_sub(1);
        }
    }

    /// An instance of `id` is going away: its slot comes back (rather overestimated than
    /// under: EC2's next answer corrects it).
    pub fn mark_terminated(&self, id: &str) {
        if let Some(count) = self.counts().get_mut(id) {
            *count = count.saturating_add(1);
        }
    }

    /// EC2 said the reservation is full (`ReservationCapacityExceeded`) or interrupted it.
    pub fn mark_unavailable(&self, id: &str) {
        self.counts().insert(id.to_string(), 0);
    }
}

/// The `reserved` offerings of `instance_type` from the NodeClass's reservations of that type:
/// one per reservation, in its zone, priced at the type's on-demand price divided by
/// [`RESERVED_PRICE_DIVISOR`] (0 without one), available while the reservation has room, the
/// type is offered in that zone (the NodeClass's subnets) and the reservation is not expiring.
pub fn reserved_offerings(
    instance_type: &InstanceType,
    reservations: &[CapacityReservationStatus],
    availability: &ReservationAvailability,
) -> Vec<Offering> {
    let on_demand = instance_type
        .offerings
        .iter()
        .find(|o| o.capacity_type == wk::CAPACITY_TYPE_ON_DEMAND)
        .map(|o| o.price);
    reservations
        .iter()
        .filter(|r| r.instance_type == instance_type.name)
        .map(|r| {
            let capacity = availability.available(&r.id);
            let zone_offered = instance_type
                .offerings
                .iter()
                .any(|o| o.zone == r.availability_zone);
            let expiring = r.state.as_deref() == Some(STATE_EXPIRING);
            Offering {
                zone: r.availability_zone.clone(),
                capacity_type: wk::CAPACITY_TYPE_RESERVED.to_string(),
                price: on_demand.map_or(0.0, |p| p / RESERVED_PRICE_DIVISOR),
                available: capacity > 0 && zone_offered && !expiring,
                reservation_id: Some(r.id.clone()),
                reservation_capacity: Some(capacity),
            }
        })
        .collect()
}

/// `instance_types` with the reserved offerings of `reservations` added (only the types that
/// have reservations are copied).
pub fn with_reserved_offerings(
    instance_types: Vec<Arc<InstanceType>>,
    reservations: &[CapacityReservationStatus],
    availability: &ReservationAvailability,
) -> Vec<Arc<InstanceType>> {
    if reservations.is_empty() {
        return instance_types;
    }
    instance_types
        .into_iter()
        .map(|it| {
            let reserved = reserved_offerings(&it, reservations, availability);
            if reserved.is_empty() {
                return it;
            }
            let mut copy = (*it).clone();
            copy.offerings.extend(reserved);
            Arc::new(copy)
        })
        .collect()
}

/// The status entry of reservation `id`, if the NodeClass has it.
pub fn reservation<'a>(
    reservations: &'a [CapacityReservationStatus],
    id: &str,
) -> Option<&'a CapacityReservationStatus> {
    reservations.iter().find(|r| r.id == id)
}

impl AwsClients {
    /// Runs the queries of `terms` (paginated) and returns every reservation found, duplicates
    /// included. An unknown ID is no reservation, not an error (EC2 answers
    /// `InvalidCapacityReservationId.NotFound`).
    pub async fn describe_capacity_reservations(
        &self,
        terms: &[CapacityReservationSelectorTerm],
    ) -> Result<Vec<ReservationInfo>, Error> {
        let mut found = Vec::new();
        for query in reservation_queries(terms) {
            let filters: Vec<Ec2Filter> = query
                .filters
                .iter()
                .map(|f| {
                    Ec2Filter::builder()
                        .name(&f.name)
                        .set_values(Some(f.values.clone()))
                        .build()
                })
                .collect();
            let request = self
                .ec2
                .describe_capacity_reservations()
                .set_filters(Some(filters));
            // EC2 refuses MaxResults together with IDs.
            let request = match &query.id {
                Some(id) => request.capacity_reservation_ids(id),
                None => request.max_results(1000),
            };
            let pages = request.into_paginator().send().try_collect().await;
            match pages {
                Ok(pages) => found.extend(
                    pages
                        .iter()
                        .flat_map(|p| p.capacity_reservations())
                        .filter_map(ReservationInfo::from_ec2),
                ),
                Err(e) => {
                    let err = Error::from_sdk("DescribeCapacityReservations", e);
                    if query.id.is_some()
                        && err
                            .code()
                            .is_some_and(|c| c.starts_with("InvalidCapacityReservationId"))
                    {
                        continue;
                    }
                    return Err(err);
                }
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use karpenter_core::instance_type::Overhead;
    use karpenter_core::resources::ResourceList;

    use super::*;

    fn info(id: &str, kind: &str, end: Option<&str>) -> ReservationInfo {
        ReservationInfo {
            id: id.into(),
            instance_type: "m5.large".into(),
            zone: "us-west-2a".into(),
            owner_id: "123456789012".into(),
            instance_match_criteria: "targeted".into(),
            available: 2,
            end: end.map(|e| e.parse().unwrap()),
            reservation_type: kind.into(),
            interruptible: false,
        }
    }

    #[test]
    fn terms_become_id_and_filter_queries_for_active_reservations() {
        let terms = vec![
            CapacityReservationSelectorTerm {
                id: Some("cr-1".into()),
                ..Default::default()
            },
            CapacityReservationSelectorTerm {
                tags: BTreeMap::from([
                    ("team".to_string(), "ml".to_string()),
                    ("any".to_string(), "*".to_string()),
                ]),
                owner_id: Some("123456789012".into()),
                instance_match_criteria: Some("open".into()),
                ..Default::default()
            },
        ];
        let queries = reservation_queries(&terms);
        assert_eq!(queries.len(), 2);
        assert_eq!(queries[0].id.as_deref(), Some("cr-1"));
        assert_eq!(
            queries[0].filters,
            vec![Filter::new("state", vec!["active".into()])]
        );
        let names: Vec<(&str, &str)> = queries[1]
            .filters
            .iter()
            .map(|f| (f.name.as_str(), f.values[0].as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("state", "active"),
                ("owner-id", "123456789012"),
                ("tag-key", "any"),
                ("tag:team", "ml"),
                ("instance-match-criteria", "open"),
            ]
        );
        assert!(reservation_queries(&[]).is_empty());
    }

    #[test]
    fn statuses_are_unique_sorted_and_capacity_blocks_expire_40_minutes_early() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let mut open_ended = info("cr-b", RESERVATION_TYPE_DEFAULT, None);
        open_ended.instance_match_criteria = "open".into();
        let mut unknown = info("cr-x", RESERVATION_TYPE_DEFAULT, None);
        unknown.instance_match_criteria = "future-criteria".into();
        let statuses = reservation_statuses(
            &[
                open_ended.clone(),
                info(
                    "cr-a",
                    RESERVATION_TYPE_CAPACITY_BLOCK,
                    Some("2026-01-01T12:39:00Z"),
                ),
                info(
                    "cr-c",
                    RESERVATION_TYPE_CAPACITY_BLOCK,
                    Some("2026-01-01T12:41:00Z"),
                ),
                info(
                    "cr-ended",
                    RESERVATION_TYPE_DEFAULT,
                    Some("2026-01-01T11:00:00Z"),
                ),
                unknown,
                open_ended,
            ],
            now,
        );
        let summary: Vec<(&str, Option<&str>)> = statuses
            .iter()
            .map(|s| (s.id.as_str(), s.state.as_deref()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("cr-a", Some("expiring")),
                ("cr-b", Some("active")),
                ("cr-c", Some("active")),
            ]
        );
        assert_eq!(
            statuses[0].end_time.as_deref(),
            Some("2026-01-01T12:39:00Z")
        );
        assert_eq!(statuses[1].instance_match_criteria, "open");
        assert_eq!(statuses[1].reservation_type.as_deref(), Some("default"));
        assert_eq!(statuses[1].interruptible, Some(false));
    }

    #[test]
    fn availability_follows_ec2_launches_terminations_and_capacity_errors() {
        let availability = ReservationAvailability::default();
        assert_eq!(availability.available("cr-1"), 0);
        availability.mark_launched("cr-1");
        availability.mark_terminated("cr-1");
        assert_eq!(availability.available("cr-1"), 0, "unknown IDs stay at 0");
        availability.sync(&[info("cr-1", RESERVATION_TYPE_DEFAULT, None)]);
        assert_eq!(availability.available("cr-1"), 2);
        availability.mark_launched("cr-1");
        availability.mark_launched("cr-1");
        availability.mark_launched("cr-1");
        assert_eq!(availability.available("cr-1"), 0, "never below zero");
        availability.mark_terminated("cr-1");
        assert_eq!(availability.available("cr-1"), 1);
        availability.mark_unavailable("cr-1");
        assert_eq!(availability.available("cr-1"), 0);
    }

    fn m5_large() -> InstanceType {
        let offering = |zone: &str, capacity_type: &str, price: f64| Offering {
            zone: zone.into(),
            capacity_type: capacity_type.into(),
            price,
            available: true,
            ..Offering::default()
        };
        InstanceType {
            name: "m5.large".into(),
            labels: BTreeMap::new(),
            capacity: ResourceList::new(),
            overhead: Overhead::default(),
            offerings: vec![
                offering("us-west-2a", "on-demand", 0.096),
                offering("us-west-2a", "spot", 0.04),
                offering("us-west-2b", "on-demand", 0.096),
            ],
            ..Default::default()
        }
    }

    fn status(id: &str, zone: &str, state: &str) -> CapacityReservationStatus {
        CapacityReservationStatus {
            availability_zone: zone.into(),
            end_time: None,
            id: id.into(),
            instance_match_criteria: "targeted".into(),
            instance_type: "m5.large".into(),
            owner_id: "123456789012".into(),
            reservation_type: Some("default".into()),
            interruptible: Some(false),
            state: Some(state.into()),
        }
    }

    #[test]
    fn reserved_offerings_are_nearly_free_and_available_while_the_reservation_has_room() {
        let availability = ReservationAvailability::default();
        let mut full = info("cr-full", RESERVATION_TYPE_DEFAULT, None);
        full.available = 0;
        availability.sync(&[
            info("cr-a", RESERVATION_TYPE_DEFAULT, None),
            info("cr-c", RESERVATION_TYPE_DEFAULT, None),
            info("cr-exp", RESERVATION_TYPE_DEFAULT, None),
            full,
        ]);
        let mut other_type = status("cr-other", "us-west-2a", "active");
        other_type.instance_type = "c5.large".into();
        let reservations = vec![
            status("cr-a", "us-west-2a", "active"),
            // The type is not offered in 2c (no subnet there).
            status("cr-c", "us-west-2c", "active"),
            status("cr-exp", "us-west-2b", "expiring"),
            status("cr-full", "us-west-2b", "active"),
            other_type,
        ];
        let offerings = reserved_offerings(&m5_large(), &reservations, &availability);
        let summary: Vec<(&str, &str, bool, Option<u32>)> = offerings
            .iter()
            .map(|o| {
                (
                    o.reservation_id.as_deref().unwrap(),
                    o.zone.as_str(),
                    o.available,
                    o.reservation_capacity,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("cr-a", "us-west-2a", true, Some(2)),
                ("cr-c", "us-west-2c", false, Some(2)),
                ("cr-exp", "us-west-2b", false, Some(2)),
                ("cr-full", "us-west-2b", false, Some(0)),
            ]
        );
        assert!(offerings.iter().all(|o| o.capacity_type == "reserved"));
        assert!((offerings[0].price - 0.096 / RESERVED_PRICE_DIVISOR).abs() < 1e-15);

        let types = with_reserved_offerings(
            vec![Arc::new(m5_large())],
            &reservations[..1],
            &availability,
        );
        assert_eq!(types[0].offerings.len(), 4);
        availability.mark_launched("cr-a");
        availability.mark_launched("cr-a");
        let types = with_reserved_offerings(
            vec![Arc::new(m5_large())],
            &reservations[..1],
            &availability,
        );
        assert!(!types[0].offerings[3].available, "used up");
    }
}
