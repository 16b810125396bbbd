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
            // (A domain only nodes a what-if solve took away provided is out of the universe.)
            .filter(|d| !d.providers.is_empty())
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
        // The zone-spread groups' pods already in each zone (existing nodes, NodeClaims in
        // flight): the new replicas are dealt to even the zones out from there.
        let mut placed: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for group in plan_pods.iter().filter_map(|p| p.zone_group) {
            placed.entry(group).or_insert_with(|| {
                let counted = self.topology.groups.get(group as usize);
                zones
                    .iter()
                    .map(|&z| counted.map_or(0, |g| g.count(z)))
                    .collect()
            });
        }
        let plan = bins::plan(
            &plan_pods,
            &plain,
            &offered,
            zones.len(),
            &placed,
            mix.duals,
        );
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use karpenter_api::well_known;

    use super::super::packing::requests_row;
    use super::super::solve::build;
    use crate::instance_type::{InstanceType, Offering};
    use crate::resources::{Quantity, ResourceList};
    use crate::scheduling::packing_workloads::deployment_pod;
    use crate::scheduling::{
        ExistingNode, PackingPolicy, SchedulerInput, SchedulerOptions, SchedulingNodePool,
    };

    const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

    fn resources(cpu: i64, gib: i64, pods: i64) -> ResourceList {
        let mut r = ResourceList::new();
        r.set("cpu", Quantity::from_units(cpu));
        r.set("memory", Quantity::from_gibibytes(gib));
        r.set("pods", Quantity::from_units(pods));
        r
    }

    /// The arrivals benchmark's second step in small: one replica of a zone-spread Deployment
    /// already runs on a full node in zone-a when five more arrive. Dealt round-robin from
    /// zone-a (as before), the plan put two of them there: three in zone-a against one in
    /// zone-c, a skew the scheduler refuses, so the bins plan lost a pod to a fallback node
    /// and the solve fell back to a dearer single-type plan (8 m6g.xlarge, $1.232/h, where the
    /// bins plan costs $1.1216/h, live and in `simulate`).
    #[test]
    fn new_replicas_even_out_the_zones_counting_those_already_placed() {
        let instance_type = Arc::new(InstanceType {
            name: "m.4x".to_string(),
            labels: BTreeMap::from([
                (
                    well_known::INSTANCE_TYPE_LABEL.to_string(),
                    "m.4x".to_string(),
                ),
                (well_known::OS_LABEL.to_string(), "linux".to_string()),
            ]),
            capacity: resources(4, 16, 40),
            overhead: Default::default(),
            offerings: ZONES
                .iter()
                .map(|zone| Offering {
                    zone: zone.to_string(),
                    capacity_type: "on-demand".to_string(),
                    price: 0.2,
                    available: true,
                    reservation_id: None,
                    reservation_capacity: None,
                })
                .collect(),
            ..Default::default()
        });
        let replica = deployment_pod("web", 1000, 4096, true);
        let mut running = replica.clone();
        if let Some(spec) = running.spec.as_mut() {
            spec.node_name = Some("existing-a".to_string());
        }
        let input = SchedulerInput {
            node_pools: vec![SchedulingNodePool {
                name: "default".to_string(),
                instance_types: vec![instance_type],
                ..Default::default()
            }],
            existing_nodes: vec![ExistingNode {
                name: "existing-a".to_string(),
                labels: BTreeMap::from([
                    (well_known::ZONE_LABEL.to_string(), "zone-a".to_string()),
                    (
                        well_known::NODEPOOL_LABEL.to_string(),
                        "default".to_string(),
                    ),
                    (
                        well_known::HOSTNAME_LABEL.to_string(),
                        "existing-a".to_string(),
                    ),
                ]),
                allocatable: resources(1, 4, 10),
                capacity: resources(1, 4, 10),
                pods: vec![Arc::new(running)],
                node_pool: Some("default".to_string()),
                initialized: true,
                ..Default::default()
            }],
            options: SchedulerOptions {
                packing_policy: PackingPolicy::CostOptimal,
                ..Default::default()
            },
            ..Default::default()
        };
        let pending = vec![replica; 5];
        let (engine, infos) = build(&input, &pending);
        let columns = engine.type_columns(0);
        let rows: Vec<_> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| (i, requests_row(&info.requests)))
            .collect();
        let (kinds, bins) = engine
            .bin_plan(0, &infos, &columns, &rows)
            .expect("a plan for the pool");
        assert_eq!(kinds.len(), 5, "every replica is planned");
        let zone_key = engine.keys.zone;
        let group = engine
            .topology
            .groups
            .iter()
            .find(|g| g.key == zone_key)
            .expect("the zone spread's group");
        let mut totals: BTreeMap<String, u32> = BTreeMap::new();
        for domain in engine.topology.domains.get(&zone_key).into_iter().flatten() {
            totals.insert(
                engine.interner.value_str(domain.value).to_string(),
                group.count(domain.value),
            );
        }
        assert_eq!(totals.get("zone-a"), Some(&1), "the running replica counts");
        for (zone, slots) in bins.zones.iter().zip(&bins.slots) {
            let zone = zone.expect("a bin of zone-spread pods is pinned to a zone");
            let planned: u32 = slots.iter().map(|&(_, n)| n).sum();
            *totals
                .entry(engine.interner.value_str(zone).to_string())
                .or_default() += planned;
        }
        let (min, max) = (
            totals.values().copied().min().unwrap_or(0),
            totals.values().copied().max().unwrap_or(0),
        );
        assert!(max - min <= 1, "zone counts after the plan: {totals:?}");
        assert_eq!(totals.values().sum::<u32>(), 6, "{totals:?}");
    }
}
