//! Planned bins: which pods share a node, and of which instance type, for
//! [`super::PackingPolicy::CostOptimal`].
//!
//! The lower bound ([`super::bound`]) buys a fractional mix of types that is full in cpu, memory
//! and pod slots at once. Reaching it with whole nodes needs each node to be full in every
//! resource, so a memory-optimised node must hold memory-hungry pods *and* cpu-hungry ones in the
//! proportion of its type. Upstream's greedy fills nodes in queue order (largest cpu first), which
//! fills a node's memory with the first memory-hungry pods and leaves its cpu idle. This planner
//! builds nodes one at a time instead, as a column generation does:
//!
//! - **Which pods fill a node of type T**: one pod at a time, the pod (among those that still
//!   fit) that raises the node's least used resource (cpu or memory, as a share of the type's
//!   room) most, and among those the one that raises the other least. A node half full of
//!   memory-hungry pods has its cpu lagging, so it takes cpu-hungry pods next, and ends full in
//!   both. (The classic dot-product and L2 rules of vector bin packing, tried first, fill by size
//!   and left large memory-optimised nodes at 65 % cpu on the mixed workloads.)
//! - **Which type**: every candidate type is filled that way from the pods still to place, and the
//!   one whose contents are worth most per dollar wins, a pod's worth being its requests at the
//!   bound's dual prices (what the resources cost in the optimal fractional mix). A type whose
//!   fill is as full as the mix scores 1; rounding losses (a half-empty last node, a type too
//!   large for what is left) score less, so the tail goes to smaller types.
//! - **Zones**: a zone-spread Deployment's replicas must end evenly across the zones, and a node
//!   sits in one zone. So the replicas are dealt to the zones first, each to the zone where its
//!   group then counts fewest (the replicas already running included, or a zone that has some
//!   would get too many), and a node that takes some is planned in one zone (where its type
//!   launches), taking only that zone's share. The engine pins the zone when it opens the node.
//! - **Repeats**: while every pod kind the chosen node took is still available in the same
//!   number, the same choice would be made again, so the node is repeated as often as the pods
//!   allow. This makes the plan cost a few hundred fills, not one per node.
//!
//! The bins name kinds of pods (identical requests, same zone share), not pods: any pod of the
//! kind may take a slot, so the scheduler's own choices (which replica goes to which zone) still
//! find one. Pure arithmetic on request rows and type columns; the engine turns the bins into a
//! restricted greedy run that checks every scheduling constraint (see `engine::packing`).

use std::collections::BTreeMap;
use std::rc::Rc;

use super::bound::{Column, RESOURCES};

/// A pod to plan.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanPod {
    pub id: usize,
    /// Requests as the bound's rows (cpu, memory, pods).
    pub request: [f64; RESOURCES],
    /// The zone-spread group it counts in, if any: its replicas must be dealt evenly across
    /// the zones, so each planned node holding it is planned in one zone.
    pub zone_group: Option<u32>,
    /// Per column, whether its node requirements admit the type (`None`: every column).
    pub allowed: Option<Rc<[bool]>>,
}

/// One planned node: a type, a zone when it holds zone-spread pods, and how many pods of each
/// kind it holds. Pods of one kind are interchangeable, so the engine lets any pod of the kind
/// take a slot.
#[derive(Clone, Debug, PartialEq)]
pub struct Bin {
    /// Index into the types given to [`plan`].
    pub column: usize,
    /// Index into the zones given to [`plan`].
    pub zone: Option<usize>,
    /// (kind, pods of that kind), kinds ascending.
    pub slots: Vec<(usize, u32)>,
}

/// The planned nodes and the pod kinds their slots name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Per kind, its pods (ids as given to [`plan`]); pods that fit no type are in no kind.
    pub kinds: Vec<Vec<usize>>,
    pub bins: Vec<Bin>,
}

/// The plans tried, the cheapest kept: (largest pod first, how much a fill weighs keeping the
/// node balanced against filling its least used resource; see [`fill`]).
const VARIANTS: [(bool, f64); 4] = [(false, 0.1), (true, 0.1), (false, 1.0), (true, 1.0)];

/// The variants also tried with the pods free of zones shared out to the zones first
/// ([`kinds`]' `share_free`), when the pods mix zone-spread and zone-free ones.
const SHARED_VARIANTS: [(bool, f64); 2] = [(false, 0.1), (true, 0.1)];

/// At most this many types are tried for each node (the most efficient at the dual prices).
const MAX_TYPES: usize = 16;

/// Pods with identical requests (and zone-spread group, and zone share), planned together.
struct Kind {
    request: [f64; RESOURCES],
    /// The zone its pods are dealt to: zone-spread pods, and pods free of zones when they are
    /// shared out to the zones (`reserved`).
    zone: Option<usize>,
    /// Pods free of zones, reserved for that zone's nodes while its zone-spread pods are
    /// planned: a node holding only such pods is not pinned to the zone.
    reserved: bool,
    /// The columns its pods may go to (`None`: every column).
    allowed: Option<Rc<[bool]>>,
    pods: Vec<usize>,
    /// How many are not yet in a bin.
    left: usize,
}

impl Kind {
    /// The zone its pods must go to (zone-spread pods only).
    fn pinned_zone(&self) -> Option<usize> {
        self.zone.filter(|_| !self.reserved)
    }

    /// Whether a node planned for `zone` (`None`: no zone) may take its pods. Pods reserved for
    /// a zone go anywhere once the zones are done.
    fn eligible_in(&self, zone: Option<usize>) -> bool {
        self.zone.is_none() || self.zone == zone || (self.reserved && zone.is_none())
    }

    /// Whether its pods may go to column `c`.
    fn admits(&self, c: usize) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.get(c).copied().unwrap_or(false))
    }
}

/// Plans bins for `pods` over `columns` (each type's price and room beyond its daemonset
/// overhead), valuing resources at `duals` (the bound's dual prices). `offered[c][z]`: column
/// `c` can launch in zone `z` (of `zones` zones). Zone-spread pods are dealt evenly to the
/// zones first, so the nodes of each zone hold its share: each replica to the zone where its
/// group then counts fewest, counting the group's pods already there (`placed`: per zone group,
/// its pods in each zone), as the scheduler's skew check will.
/// Every pod that fits some column has a slot in exactly one bin, and each bin's column holds
/// its slots; pods no column holds get none. Deterministic.
pub fn plan(
    pods: &[PlanPod],
    columns: &[Column],
    offered: &[Vec<bool>],
    zones: usize,
    placed: &BTreeMap<u32, Vec<u32>>,
    duals: [f64; RESOURCES],
) -> Plan {
    let price = |p: &Plan| -> f64 { p.bins.iter().map(|b| columns[b.column].price).sum() };
    let mut best: Option<(f64, Plan)> = None;
    // Sharing the zone-free pods out changes something only when some pods spread over zones
    // and others do not.
    let mixed = zones > 0
        && pods.iter().any(|p| p.zone_group.is_some())
        && pods.iter().any(|p| p.zone_group.is_none());
    let shared = SHARED_VARIANTS.iter().filter(|_| mixed).map(|&v| (v, true));
    for ((seeded, balance), share_free) in VARIANTS.iter().map(|&v| (v, false)).chain(shared) {
        let plan = plan_with(
            pods, columns, offered, zones, placed, duals, seeded, balance, share_free,
        );
        let cost = price(&plan);
        if best.as_ref().is_none_or(|(c, _)| cost < *c) {
            best = Some((cost, plan));
        }
    }
    best.map(|(_, p)| p).unwrap_or_default()
}

#[allow(clippy::too_many_arguments)]
fn plan_with(
    pods: &[PlanPod],
    columns: &[Column],
    offered: &[Vec<bool>],
    zones: usize,
    placed: &BTreeMap<u32, Vec<u32>>,
    duals: [f64; RESOURCES],
    seeded: bool,
    balance: f64,
    share_free: bool,
) -> Plan {
    let worth =
        |request: &[f64; RESOURCES]| -> f64 { (0..RESOURCES).map(|r| duals[r] * request[r]).sum() };
    let mut kinds = kinds(pods, zones, placed, share_free.then_some(&worth));
    let mut restrictions: Vec<Rc<[bool]>> =
        kinds.iter().filter_map(|k| k.allowed.clone()).collect();
    restrictions.sort();
    restrictions.dedup();
    let candidates = candidate_columns(columns, offered, &restrictions, worth);
    let launches_in = |c: usize, zone: Option<usize>| {
        zone.is_none_or(|z| {
            offered
                .get(c)
                .and_then(|o| o.get(z))
                .copied()
                .unwrap_or(false)
        })
    };
    let mut dead_zones = vec![false; zones];
    let mut bins = Vec::new();
    loop {
        // Zone-spread pods first, from the zone with the most of them left.
        let mut zone_worth = vec![0.0; zones];
        for k in &kinds {
            if let Some(z) = k.zone.filter(|&z| !dead_zones[z]) {
                zone_worth[z] += k.left as f64 * worth(&k.request);
            }
        }
        let zone = (0..zones)
            .filter(|&z| zone_worth[z] > 0.0)
            .max_by(|&a, &b| zone_worth[a].total_cmp(&zone_worth[b]).then(b.cmp(&a)));
        // Largest first: the node starts with the remaining pod worth most (it has the fewest
        // types to go to and the most to gain from partners), then fills.
        let seed = seeded
            .then(|| {
                kinds
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| k.left > 0 && k.eligible_in(zone))
                    .max_by(|a, b| {
                        worth(&a.1.request)
                            .total_cmp(&worth(&b.1.request))
                            .then(b.0.cmp(&a.0))
                    })
                    .map(|(i, _)| i)
            })
            .flatten();
        let eligible: Vec<usize> = (0..kinds.len())
            .filter(|&k| kinds[k].left > 0 && kinds[k].eligible_in(zone))
            .collect();
        // How far this zone leads the next: its nodes repeat while it stays the busiest.
        let lead = zone.map(|z| {
            let next = (0..zones)
                .filter(|&o| o != z)
                .map(|o| zone_worth[o])
                .fold(0.0, f64::max);
            zone_worth[z] - next
        });
        let holds_seed = |c: usize| {
            seed.is_none_or(|k| {
                kinds[k].admits(c)
                    && (0..RESOURCES).all(|r| kinds[k].request[r] <= columns[c].room[r])
            })
        };
        let mut best: Option<(f64, usize, Vec<u32>, usize)> = None;
        for &c in candidates
            .iter()
            .filter(|&&c| launches_in(c, zone) && holds_seed(c))
        {
            let column = &columns[c];
            let value_of = |taken: &[u32]| -> f64 {
                taken
                    .iter()
                    .zip(&kinds)
                    .map(|(&n, k)| f64::from(n) * worth(&k.request))
                    .sum()
            };
            let taken = fill(&kinds, &eligible, c, &column.room, seed, balance);
            let value = value_of(&taken);
            if value <= 0.0 {
                continue;
            }
            let repeats = repeats_of(&kinds, &taken, lead, worth);
            let score = value / column.price.max(f64::MIN_POSITIVE);
            if best.as_ref().is_none_or(|(s, ..)| score > *s) {
                best = Some((score, c, taken, repeats));
            }
        }
        let Some((_, column, taken, repeats)) = best else {
            if let Some(k) = seed {
                // No type that launches here holds it: it is no seed (the engine places it).
                kinds[k].left = 0;
                continue;
            }
            match zone {
                // Nothing that launches there holds what is left of it: plan the rest.
                Some(z) => {
                    dead_zones[z] = true;
                    continue;
                }
                None => break,
            }
        };
        let slots: Vec<(usize, u32)> = taken
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(k, &n)| (k, n))
            .collect();
        if repeats == 0 {
            break; // cannot happen: a fill takes only what is left
        }
        for &(k, n) in &slots {
            kinds[k].left -= n as usize * repeats;
        }
        // A node planned for a zone pins it only when it holds zone-spread pods.
        let zone = zone.filter(|_| slots.iter().any(|&(k, _)| kinds[k].pinned_zone().is_some()));
        bins.extend(std::iter::repeat_n(
            Bin {
                column,
                zone,
                slots,
            },
            repeats,
        ));
    }
    // Kinds some bin has a slot for keep their pods; the others' pods fit no type.
    let mut used = vec![false; kinds.len()];
    for bin in &bins {
        for &(k, _) in &bin.slots {
            used[k] = true;
        }
    }
    Plan {
        kinds: kinds
            .into_iter()
            .zip(used)
            .map(|(k, used)| if used { k.pods } else { Vec::new() })
            .collect(),
        bins,
    }
}

/// How often a node taking `taken` is planned at once: while every kind it took is still there
/// in that number (the same fill would come out again), and, for a node of a zone (`lead`: how
/// much more zone-spread worth that zone has left than the next), while the zone stays the
/// busiest.
fn repeats_of(
    kinds: &[Kind],
    taken: &[u32],
    lead: Option<f64>,
    worth: impl Fn(&[f64; RESOURCES]) -> f64,
) -> usize {
    let available = taken
        .iter()
        .zip(kinds)
        .filter(|(n, _)| **n > 0)
        .map(|(&n, k)| k.left / n as usize)
        .min()
        .unwrap_or(0);
    let Some(lead) = lead else {
        return available;
    };
    let zoned: f64 = taken
        .iter()
        .zip(kinds)
        .filter(|(_, k)| k.pinned_zone().is_some())
        .map(|(&n, k)| f64::from(n) * worth(&k.request))
        .sum();
    if zoned <= 0.0 {
        return available;
    }
    let while_busiest = ((lead / zoned).floor() as usize).saturating_add(1);
    available.min(while_busiest.max(1))
}

/// The pods grouped by identical requests and zone-spread group, largest cpu first (ids
/// ascending within a kind); a zone-spread kind is split into one kind per zone, each pod dealt
/// to the zone where its group counts fewest so far (its pods already `placed` there included;
/// ties to the first zone). With nothing placed that is round-robin; with replicas already in
/// a zone, the new ones even the zones out instead of planning a zone the skew check refuses.
///
/// With `share_free` (the worth of a request), each zone-free kind is also split over the zones,
/// in proportion to the worth of the zone-spread pods each zone was dealt, as pods `reserved`
/// for that zone. Otherwise the first zones' nodes take every zone-free pod that balances them
/// (cpu-hungry pods beside memory-hungry ones), and the last zones' zone-spread pods are left
/// alone on nodes of the wrong shape: memory-hungry replicas by themselves on
/// memory-optimised nodes whose cpu idles.
fn kinds<W: Fn(&[f64; RESOURCES]) -> f64>(
    pods: &[PlanPod],
    zones: usize,
    placed: &BTreeMap<u32, Vec<u32>>,
    share_free: Option<&W>,
) -> Vec<Kind> {
    let mut sorted: Vec<&PlanPod> = pods.iter().collect();
    sorted.sort_by(|a, b| {
        (0..RESOURCES)
            .map(|r| b.request[r].total_cmp(&a.request[r]))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.zone_group.cmp(&b.zone_group))
            .then(a.allowed.cmp(&b.allowed))
            .then(a.id.cmp(&b.id))
    });
    let mut grouped: Vec<(&PlanPod, Vec<usize>)> = Vec::new();
    for pod in sorted {
        match grouped.last_mut() {
            Some((first, ids))
                if first.request == pod.request
                    && first.zone_group == pod.zone_group
                    && first.allowed == pod.allowed =>
            {
                ids.push(pod.id);
            }
            _ => grouped.push((pod, vec![pod.id])),
        }
    }
    let mut kinds = Vec::new();
    // Per zone group, its pods in each zone: those placed, then those dealt so far.
    let mut counts: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (first, ids) in grouped {
        let Some(group) = first.zone_group.filter(|_| zones > 0) else {
            kinds.push(Kind {
                request: first.request,
                zone: None,
                reserved: false,
                allowed: first.allowed.clone(),
                left: ids.len(),
                pods: ids,
            });
            continue;
        };
        let counts = counts.entry(group).or_insert_with(|| {
            let mut counts = placed.get(&group).cloned().unwrap_or_default();
            counts.resize(zones, 0);
            counts
        });
        let mut shares: Vec<Vec<usize>> = vec![Vec::new(); zones];
        for id in ids {
            let z = (0..zones).min_by_key(|&z| (counts[z], z)).unwrap_or(0);
            counts[z] = counts[z].saturating_add(1);
            shares[z].push(id);
        }
        for (z, share) in shares.into_iter().enumerate() {
            if !share.is_empty() {
                kinds.push(Kind {
                    request: first.request,
                    zone: Some(z),
                    reserved: false,
                    allowed: first.allowed.clone(),
                    left: share.len(),
                    pods: share,
                });
            }
        }
    }
    match share_free {
        Some(worth) => shared_out(kinds, zones, worth),
        None => kinds,
    }
}

/// `kinds` with each zone-free kind split over the zones in proportion to the worth of the
/// zone-spread pods dealt to each (zones with none get none), each pod to the zone furthest
/// below its share so far (Sainte-Laguë's rule: the largest zone does not take every tie); the
/// parts are `reserved` for their zone. Unchanged when no pod is dealt to a zone.
fn shared_out<W: Fn(&[f64; RESOURCES]) -> f64>(
    kinds: Vec<Kind>,
    zones: usize,
    worth: &W,
) -> Vec<Kind> {
    let mut weight = vec![0.0; zones];
    for kind in &kinds {
        if let Some(z) = kind.zone.filter(|&z| z < zones) {
            weight[z] += kind.pods.len() as f64 * worth(&kind.request);
        }
    }
    if !weight.iter().any(|&w| w > 0.0) {
        return kinds;
    }
    let mut out = Vec::with_capacity(kinds.len());
    for kind in kinds {
        if kind.zone.is_some() {
            out.push(kind);
            continue;
        }
        let mut shares: Vec<Vec<usize>> = vec![Vec::new(); zones];
        for &id in &kind.pods {
            // Sainte-Laguë's highest quotient: the zone furthest below its share.
            let furthest_below = (0..zones).filter(|&z| weight[z] > 0.0).max_by(|&a, &b| {
                let quotient = |z: usize| weight[z] / (2 * shares[z].len() + 1) as f64;
                quotient(a).total_cmp(&quotient(b)).then(b.cmp(&a))
            });
            if let Some(z) = furthest_below {
                shares[z].push(id);
            }
        }
        for (z, share) in shares.into_iter().enumerate() {
            if !share.is_empty() {
                out.push(Kind {
                    request: kind.request,
                    zone: Some(z),
                    reserved: true,
                    allowed: kind.allowed.clone(),
                    left: share.len(),
                    pods: share,
                });
            }
        }
    }
    out
}

/// The columns worth trying: per distinct room (and zones it launches in, and pods it admits)
/// the cheapest, then the [`MAX_TYPES`] whose room is worth most per dollar at the dual prices
/// (ties: larger first, fewer nodes for the same money).
fn candidate_columns(
    columns: &[Column],
    offered: &[Vec<bool>],
    restrictions: &[Rc<[bool]>],
    worth: impl Fn(&[f64; RESOURCES]) -> f64,
) -> Vec<usize> {
    // Which pods' node requirements admit a column (a type some pods may not use is no
    // duplicate of one they may).
    let admitted = |c: usize| -> Vec<bool> {
        restrictions
            .iter()
            .map(|r| r.get(c).copied().unwrap_or(false))
            .collect()
    };
    let mut order: Vec<usize> = (0..columns.len())
        .filter(|&c| columns[c].price.is_finite() && columns[c].price > 0.0)
        .collect();
    // Cheapest first within one room, so the dedup below keeps it.
    order.sort_by(|&a, &b| {
        let (ca, cb) = (&columns[a], &columns[b]);
        (0..RESOURCES)
            .map(|r| ca.room[r].total_cmp(&cb.room[r]))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(ca.price.total_cmp(&cb.price))
            .then(a.cmp(&b))
    });
    // (A type that launches in other zones than the cheaper one stays.)
    order.dedup_by(|b, a| {
        admitted(*a) == admitted(*b)
            && columns[*a].room == columns[*b].room
            && offered.get(*a) == offered.get(*b)
    });
    let efficiency = |c: usize| worth(&columns[c].room) / columns[c].price;
    order.sort_by(|&a, &b| {
        efficiency(b)
            .total_cmp(&efficiency(a))
            .then(columns[b].room[0].total_cmp(&columns[a].room[0]))
            .then(a.cmp(&b))
    });
    order.truncate(MAX_TYPES);
    order
}

/// How many pods of each kind a node of `column` with `room` takes, filled one pod at a time
/// from the `eligible` kinds (those with pods left that the node's zone admits) whose pods may
/// go to that column, `seed` first: each time
/// the pod that most raises the node's least used resource (cpu or memory, as a share of the
/// room), less `balance` times how much further it lifts the other; so the node stays full in
/// both as it fills.
fn fill(
    kinds: &[Kind],
    eligible: &[usize],
    column: usize,
    room: &[f64; RESOURCES],
    seed: Option<usize>,
    balance: f64,
) -> Vec<u32> {
    let mut taken = vec![0u32; kinds.len()];
    let mut free = *room;
    let scale: [f64; RESOURCES] = std::array::from_fn(|r| 1.0 / room[r].max(f64::MIN_POSITIVE));
    // The seed first (the caller only seeds types that hold it).
    if let Some(k) = seed
        .filter(|&k| kinds[k].left > 0 && (0..RESOURCES).all(|r| kinds[k].request[r] <= free[r]))
    {
        taken[k] += 1;
        for (f, request) in free.iter_mut().zip(&kinds[k].request) {
            *f -= request;
        }
    }
    loop {
        let mut best: Option<(f64, usize)> = None;
        for &k in eligible {
            let kind = &kinds[k];
            if kind.left <= taken[k] as usize || !kind.admits(column) {
                continue;
            }
            if (0..RESOURCES).any(|r| kind.request[r] > free[r]) {
                continue;
            }
            // A small `balance` takes the largest pod that raises the lagging resource; a large
            // one the pod that closes the gap between the two (see `VARIANTS`).
            let used = |r: usize| (room[r] - free[r] + kind.request[r]) * scale[r];
            let (least, most) = (used(0).min(used(1)), used(0).max(used(1)));
            let score = least - balance * (most - least);
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, k));
            }
        }
        let Some((_, k)) = best else {
            return taken;
        };
        taken[k] += 1;
        for (f, request) in free.iter_mut().zip(&kinds[k].request) {
            *f -= request;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(price: f64, cpu: f64, memory: f64) -> Column {
        Column {
            price,
            room: [cpu, memory, 110.0],
        }
    }

    fn pod(id: usize, request: [f64; RESOURCES]) -> PlanPod {
        PlanPod {
            id,
            request,
            zone_group: None,
            allowed: None,
        }
    }

    /// The resources a bin's slots use.
    fn used(plan: &Plan, pods: &[PlanPod], bin: &Bin) -> [f64; RESOURCES] {
        let mut used = [0.0; RESOURCES];
        for &(k, n) in &bin.slots {
            let id = plan.kinds[k][0];
            let request = pods.iter().find(|p| p.id == id).unwrap().request;
            for r in 0..RESOURCES {
                used[r] += request[r] * f64::from(n);
            }
        }
        used
    }

    #[test]
    fn a_memory_optimised_node_takes_memory_and_cpu_hungry_pods_together() {
        // An r-like type: 8 GiB per cpu. Pods: memory-hungry (1 cpu, 14 GiB) and cpu-hungry
        // (1 cpu, 2 GiB), eight of each: 8 cpu and 128 GiB, exactly two nodes of 8 cpu/64 GiB.
        let columns = [column(1.0, 8.0, 64.0)];
        let mut pods = Vec::new();
        for i in 0..8 {
            pods.push(pod(i, [1.0, 14.0, 1.0]));
            pods.push(pod(100 + i, [1.0, 2.0, 1.0]));
        }
        let plan = plan(
            &pods,
            &columns,
            &[],
            0,
            &BTreeMap::new(),
            [0.0625, 0.0078125, 0.0],
        );
        assert_eq!(plan.bins.len(), 2, "{plan:?}");
        for bin in &plan.bins {
            assert_eq!(bin.slots.len(), 2, "each node takes both kinds: {bin:?}");
            assert!(bin.slots.iter().all(|&(_, n)| n == 4), "{bin:?}");
        }
    }

    #[test]
    fn every_pod_that_fits_has_one_slot_in_a_bin_that_holds_it() {
        let columns = [
            column(0.1, 2.0, 4.0),
            column(0.2, 4.0, 16.0),
            column(0.4, 16.0, 32.0),
        ];
        let pods: Vec<PlanPod> = (0..50u32)
            .map(|i| {
                pod(
                    i as usize,
                    [f64::from(i % 7 + 1) * 0.5, f64::from(i % 5 + 1), 1.0],
                )
            })
            .chain([pod(99, [64.0, 1.0, 1.0])])
            .collect();
        let plan = plan(
            &pods,
            &columns,
            &[],
            0,
            &BTreeMap::new(),
            [0.01, 0.005, 0.0],
        );
        let mut planned: Vec<usize> = plan.kinds.iter().flatten().copied().collect();
        planned.sort_unstable();
        assert_eq!(
            planned,
            (0..50).collect::<Vec<_>>(),
            "the 64-cpu pod fits nothing"
        );
        for (k, members) in plan.kinds.iter().enumerate() {
            let slots: u32 = plan
                .bins
                .iter()
                .flat_map(|b| &b.slots)
                .filter(|s| s.0 == k)
                .map(|s| s.1)
                .sum();
            assert_eq!(slots as usize, members.len(), "kind {k}");
        }
        for bin in &plan.bins {
            let used = used(&plan, &pods, bin);
            for (r, amount) in used.iter().enumerate() {
                assert!(
                    *amount <= columns[bin.column].room[r],
                    "{bin:?} overflows {r}"
                );
            }
        }
    }

    #[test]
    fn the_tail_goes_to_a_smaller_type() {
        // 17 pods of 1 cpu: two 8-cpu nodes and the last pod on the 2-cpu type, not a third
        // 8-cpu node.
        let columns = [column(0.8, 8.0, 32.0), column(0.2, 2.0, 8.0)];
        let pods: Vec<PlanPod> = (0..17).map(|i| pod(i, [1.0, 4.0, 1.0])).collect();
        let plan = plan(&pods, &columns, &[], 0, &BTreeMap::new(), [0.1, 0.0, 0.0]);
        let big = plan.bins.iter().filter(|b| b.column == 0).count();
        let small = plan.bins.iter().filter(|b| b.column == 1).count();
        assert_eq!((big, small), (2, 1), "{plan:?}");
    }

    #[test]
    fn zone_spread_replicas_are_dealt_evenly_to_nodes_pinned_in_each_zone() {
        // Six replicas of a zone-spread Deployment over three zones, with plain pods: each
        // zone's nodes hold two replicas; a type not offered in zone 2 is not planned there.
        let columns = [column(0.4, 4.0, 16.0), column(0.39, 4.0, 16.0)];
        let offered = vec![vec![true, true, true], vec![true, true, false]];
        let mut pods: Vec<PlanPod> = (0..6)
            .map(|i| PlanPod {
                id: i,
                request: [1.0, 4.0, 1.0],
                zone_group: Some(7),
                allowed: None,
            })
            .collect();
        pods.extend((10..16).map(|i| pod(i, [1.0, 4.0, 1.0])));
        let plan = plan(
            &pods,
            &columns,
            &offered,
            3,
            &BTreeMap::new(),
            [0.05, 0.0125, 0.0],
        );
        let mut per_zone = [0u32; 3];
        for bin in &plan.bins {
            let spread: u32 = bin
                .slots
                .iter()
                .filter(|(k, _)| plan.kinds[*k].iter().all(|&id| id < 6))
                .map(|s| s.1)
                .sum();
            if spread > 0 {
                let z = bin
                    .zone
                    .expect("a node with zone-spread pods is planned in a zone");
                per_zone[z] += spread;
                if z == 2 {
                    assert_eq!(bin.column, 0, "column 1 does not launch in zone 2");
                }
            }
        }
        assert_eq!(per_zone, [2, 2, 2], "{plan:?}");
        let planned: usize = plan.kinds.iter().map(Vec::len).sum();
        assert_eq!(planned, 12);
    }

    #[test]
    fn replicas_already_placed_count_when_the_new_ones_are_dealt_to_zones() {
        // One replica runs in zone 0 and two in zone 1; seven more arrive. Round-robin from
        // zone 0 (as before) planned 3/2/2, ending at 4/4/2: a skew of 2 the scheduler refuses.
        // Evened out from what runs: 3/1/3, ending at 4/3/3.
        let columns = [column(0.4, 4.0, 16.0)];
        let offered = vec![vec![true, true, true]];
        let pods: Vec<PlanPod> = (0..7)
            .map(|i| PlanPod {
                id: i,
                request: [1.0, 4.0, 1.0],
                zone_group: Some(3),
                allowed: None,
            })
            .collect();
        let placed = BTreeMap::from([(3, vec![1, 2, 0])]);
        let plan = plan(&pods, &columns, &offered, 3, &placed, [0.05, 0.0125, 0.0]);
        let mut per_zone = [0u32; 3];
        for bin in &plan.bins {
            let z = bin
                .zone
                .expect("a node of zone-spread pods is planned in a zone");
            per_zone[z] += bin.slots.iter().map(|s| s.1).sum::<u32>();
        }
        assert_eq!(per_zone, [3, 1, 3], "{plan:?}");
    }

    #[test]
    fn pods_go_only_to_the_types_their_node_requirements_admit() {
        // The cheaper column 1 is what an arm type would be; half the pods are amd64-only
        // (column 0 only): they get bins of column 0, the others of column 1.
        let columns = [column(0.4, 4.0, 16.0), column(0.3, 4.0, 16.0)];
        let amd64_only: Rc<[bool]> = Rc::from(vec![true, false]);
        let mut pods: Vec<PlanPod> = (0..8).map(|i| pod(i, [1.0, 4.0, 1.0])).collect();
        pods.extend((10..18).map(|i| PlanPod {
            allowed: Some(amd64_only.clone()),
            ..pod(i, [1.0, 4.0, 1.0])
        }));
        let plan = plan(
            &pods,
            &columns,
            &[],
            0,
            &BTreeMap::new(),
            [0.0375, 0.009375, 0.0],
        );
        for bin in &plan.bins {
            for &(k, _) in &bin.slots {
                let pinned = plan.kinds[k].iter().all(|&id| id >= 10);
                assert!(!pinned || bin.column == 0, "{bin:?} holds amd64-only pods");
            }
        }
        let on = |c: usize| plan.bins.iter().filter(|b| b.column == c).count();
        assert_eq!((on(0), on(1)), (2, 2), "{plan:?}");
    }

    #[test]
    fn zone_free_pods_are_shared_out_to_the_zones_in_proportion_to_their_spread_pods() {
        // Zone-spread replicas dealt 2/1/1 over three zones (three of one group, one of
        // another twice the worth); eight zone-free pods follow that worth, 4/2/2, and are only
        // reserved for their zone. The plan with them shared out is what the arrival pattern
        // needs (`karpenter-simulate`'s
        // `the_arrival_patterns_second_step_plans_within_ten_percent_of_the_bound`).
        let mut pods: Vec<PlanPod> = (0..3)
            .map(|i| PlanPod {
                zone_group: Some(1),
                ..pod(i, [1.0, 2.0, 1.0])
            })
            .collect();
        pods.push(PlanPod {
            zone_group: Some(2),
            ..pod(3, [2.0, 4.0, 1.0])
        });
        pods.extend((10..18).map(|i| pod(i, [0.5, 0.5, 1.0])));
        let worth = |r: &[f64; RESOURCES]| r[0] + r[1] / 2.0;
        let kinds = kinds(&pods, 3, &BTreeMap::new(), Some(&worth));
        let mut reserved = [0; 3];
        for kind in &kinds {
            let zone = kind.zone.expect("every kind is dealt to a zone");
            if kind.reserved {
                assert_eq!(kind.pinned_zone(), None);
                assert!(kind.eligible_in(None) && kind.eligible_in(Some(zone)));
                assert!(!kind.eligible_in(Some((zone + 1) % 3)));
                reserved[zone] += kind.pods.len();
            } else {
                assert_eq!(kind.pinned_zone(), Some(zone));
                assert!(!kind.eligible_in(None));
            }
        }
        // Zone 0 has one group-1 replica and the group-2 one (worth 2 + 4), zones 1 and 2 one
        // group-1 replica each (2): 8 pods as 6:2:2 → 4.8, 1.6, 1.6.
        assert_eq!(
            reserved,
            [5, 2, 1],
            "{:?}",
            kinds
                .iter()
                .map(|k| (k.zone, k.reserved, k.pods.len()))
                .collect::<Vec<_>>()
        );
        // Without sharing, the zone-free pods stay one kind of no zone.
        let plain = super::kinds(
            &pods,
            3,
            &BTreeMap::new(),
            None::<&fn(&[f64; RESOURCES]) -> f64>,
        );
        assert!(plain.iter().any(|k| k.zone.is_none() && k.pods.len() == 8));
    }
}
