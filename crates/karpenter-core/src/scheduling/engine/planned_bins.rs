//! Planned bins in a CostOptimal run ([`super::packing`]'s `Candidate::Bins`): the nodes
//! [`crate::scheduling::bins::plan`] builds become slots the greedy fills. A planned pod joins
//! only a NodeClaim realising a bin with a free slot of its kind, or opens a bin not yet opened
//! that has one (pinned to the bin's type, and its zone when it holds zone-spread pods); when
//! none can take it, it opens a fallback NodeClaim of any type that others in its situation
//! join. Every placement still passes the scheduler's own checks.

use super::packing::{TypeColumn, total_demand};
use super::*;
use crate::scheduling::bins;
use crate::scheduling::bound::{self, Column, RESOURCES};

/// One pool's planned nodes while a run places pods in them.
#[derive(Default)]
pub(super) struct PoolBins {
    /// Per bin: its instance type (one bit).
    types: Vec<Bits>,
    /// Per bin: the zone it is planned in (when it holds zone-spread pods).
    zones: Vec<Option<Sym>>,
    /// Per bin: (kind, free slots).
    slots: Vec<Vec<(u32, u32)>>,
    /// Per bin: whether a NodeClaim realises it yet.
    opened: Vec<bool>,
    /// Per kind: the bins with a slot for it, in plan order.
    by_kind: Vec<Vec<u32>>,
}

impl PoolBins {
    pub(super) fn new(
        types: usize,
        columns: &[TypeColumn],
        zones: &[Sym],
        plan: &bins::Plan,
    ) -> Self {
        let mut out = PoolBins {
            by_kind: vec![Vec::new(); plan.kinds.len()],
            ..Default::default()
        };
        for (b, bin) in plan.bins.iter().enumerate() {
            let mut bits = Bits::new(types);
            if let Some(c) = columns.get(bin.column) {
                bits.set(c.index);
            }
            out.types.push(bits);
            out.zones.push(bin.zone.and_then(|z| zones.get(z).copied()));
            out.slots
                .push(bin.slots.iter().map(|&(k, n)| (k as u32, n)).collect());
            out.opened.push(false);
            for &(k, _) in &bin.slots {
                if let Some(list) = out.by_kind.get_mut(k) {
                    list.push(b as u32);
                }
            }
        }
        out
    }

    fn free_slot(&self, bin: u32, kind: u32) -> bool {
        self.slots
            .get(bin as usize)
            .is_some_and(|s| s.iter().any(|&(k, n)| k == kind && n > 0))
    }
}

/// The "bin" of a NodeClaim a planned pod opened when no planned bin could take it: other
/// planned pods in that situation may join it.
pub(super) const FALLBACK_BIN: u32 = u32::MAX;

/// Most distinct types a pod tries among the unopened bins with a slot for it.
const BIN_TYPES_TRIED: usize = 4;

impl Engine {
    /// Pod `pod`'s kind in pool `pi`'s planned bins, in a run that has them.
    pub(super) fn pod_kind(&self, pi: usize, pod: usize) -> Option<u32> {
        let groups = self.pod_groups.as_ref()?;
        groups.bins.as_ref()?;
        groups.group(pi, pod)
    }

    /// Whether the pod may join the NodeClaim as far as planned bins go: a planned pod joins
    /// only a bin with a free slot of its kind, other pods only NodeClaims that realise no bin.
    pub(super) fn bin_allows(&self, claim: &Claim, pod: usize) -> bool {
        let Some(bins) = self.pod_groups.as_ref().and_then(|g| g.bins.as_ref()) else {
            return true;
        };
        match (self.pod_kind(claim.pool, pod), claim.bin) {
            (Some(_), Some(FALLBACK_BIN)) => true,
            (Some(kind), Some(bin)) => bins.get(claim.pool).is_some_and(|p| p.free_slot(bin, kind)),
            (None, None) => true,
            _ => false,
        }
    }

    /// The bins not yet opened with a slot for pod `pod` (one per distinct type and zone, at
    /// most [`BIN_TYPES_TRIED`]) with their type and zone, for a new NodeClaim of pool `pi`.
    pub(super) fn bins_to_open(&self, pi: usize, pod: usize) -> Vec<(u32, Bits, Option<Sym>)> {
        let Some(kind) = self.pod_kind(pi, pod) else {
            return Vec::new();
        };
        let Some(pool) = self
            .pod_groups
            .as_ref()
            .and_then(|g| g.bins.as_ref())
            .and_then(|b| b.get(pi))
        else {
            return Vec::new();
        };
        let mut out: Vec<(u32, Bits, Option<Sym>)> = Vec::new();
        for &b in pool.by_kind.get(kind as usize).into_iter().flatten() {
            if pool.opened.get(b as usize).copied().unwrap_or(true) {
                continue;
            }
            let (Some(bits), Some(&zone)) =
                (pool.types.get(b as usize), pool.zones.get(b as usize))
            else {
                continue;
            };
            if out.iter().all(|(_, t, z)| t != bits || *z != zone) {
                out.push((b, bits.clone(), zone));
                if out.len() == BIN_TYPES_TRIED {
                    break;
                }
            }
        }
        out
    }

    /// A NodeClaim now realises bin `bin` of pool `pi`.
    pub(super) fn open_bin(&mut self, pi: usize, bin: u32) {
        if let Some(slot) = self
            .pod_groups
            .as_mut()
            .and_then(|g| g.bins.as_mut())
            .and_then(|b| b.get_mut(pi))
            .and_then(|p| p.opened.get_mut(bin as usize))
        {
            *slot = true;
        }
    }

    /// Pod `pod` joined a NodeClaim realising bin `bin` of pool `pi`: it takes a slot.
    pub(super) fn take_bin_slot(&mut self, pi: usize, bin: u32, pod: usize) {
        let Some(kind) = self.pod_kind(pi, pod) else {
            return;
        };
        let slots = self
            .pod_groups
            .as_mut()
            .and_then(|g| g.bins.as_mut())
            .and_then(|b| b.get_mut(pi))
            .and_then(|p| p.slots.get_mut(bin as usize));
        if let Some(slot) = slots
            .into_iter()
            .flatten()
            .find(|(k, n)| *k == kind && *n > 0)
        {
            slot.1 -= 1;
        }
    }
}

impl Engine {
    /// Pool `pi`'s plan for [`Candidate::Bins`]: each planned pod's kind, and the planned
    /// nodes. Pods with affinity, anti-affinity or a spread over another key than the zone are
    /// not planned (they open and join NodeClaims outside the bins, as upstream).
    pub(super) fn bin_plan(
        &self,
        pi: usize,
        infos: &[PendingPod],
        columns: &[TypeColumn],
        pods: &[(usize, [f64; RESOURCES])],
    ) -> Option<(Vec<(usize, u32)>, PoolBins)> {
        let pool = &self.pools[pi];
        let zone_key = self.keys.zone;
        let pool_zone = pool.reqs.get(&zone_key);
        let zones: Vec<Sym> = self
            .topology
            .domains
            .get(&zone_key)
            .into_iter()
            .flatten()
            .map(|d| d.value)
            .filter(|z| pool_zone.is_none_or(|r| r.has(z)))
            .collect();
        let offered: Vec<Vec<bool>> = columns
            .iter()
            .map(|c| {
                zones
                    .iter()
                    .map(|&z| {
                        let mut reqs = pool.reqs.clone();
                        reqs.add(zone_key, Req::is_in([z]));
                        pool.cheapest_price(c.index, &reqs, &self.keys).is_finite()
                    })
                    .collect()
            })
            .collect();
        // Per pod shape, the columns its node selector (and single required node-affinity
        // term) admits; `None`: every column.
        let mut allowed_of: HashMap<usize, Option<Rc<[bool]>>> = HashMap::new();
        let plan_pods: Vec<bins::PlanPod> = pods
            .iter()
            .filter_map(|&(id, request)| {
                let info = infos.get(id)?;
                let groups = self.groups_of.get(info.shape)?;
                let zone_group = self.zone_group(groups)?;
                let allowed = allowed_of
                    .entry(info.shape)
                    .or_insert_with(|| {
                        let single_term = match info.required_terms.as_slice() {
                            [term] => Some(term),
                            _ => None,
                        };
                        if info.node_selector.is_empty() && single_term.is_none() {
                            return None;
                        }
                        let mut reqs = info.node_selector.clone();
                        if let Some(term) = single_term {
                            reqs.add_all(term);
                        }
                        let types = pool.compatible_types(&reqs, &self.keys);
                        Some(columns.iter().map(|c| types.get(c.index)).collect())
                    })
                    .clone();
                Some(bins::PlanPod {
                    id,
                    request,
                    zone_group,
                    allowed,
                })
            })
            .collect();
        let plain: Vec<Column> = columns.iter().map(|c| c.column.clone()).collect();
        let demand = total_demand(plan_pods.iter().map(|p| &p.request));
        let mix = bound::cheapest_mix(&plain, demand)?;
        let plan = bins::plan(&plan_pods, &plain, &offered, zones.len(), mix.duals);
        let kinds = plan
            .kinds
            .iter()
            .enumerate()
            .flat_map(|(k, members)| members.iter().map(move |&pod| (pod, k as u32)))
            .collect();
        Some((
            kinds,
            PoolBins::new(pool.types.len(), columns, &zones, &plan),
        ))
    }

    /// Whether a pod with these topology groups can be planned in a bin (`None`: it cannot),
    /// and the zone-spread group it counts in.
    fn zone_group(&self, groups: &PodGroups) -> Option<Option<u32>> {
        let constrained = [
            &groups.affinity_required,
            &groups.affinity_preferred,
            &groups.anti_required,
            &groups.anti_preferred,
            &groups.inverse_owned,
            &groups.inverse_selecting,
        ];
        if constrained.iter().any(|g| !g.is_empty()) {
            return None;
        }
        let mut zone_group = None;
        for &gid in groups.spread.iter().filter(|&&g| g != usize::MAX) {
            let group = self.topology.groups.get(gid)?;
            if group.key != self.keys.zone {
                return None;
            }
            zone_group.get_or_insert(gid as u32);
        }
        Some(zone_group)
    }
}
