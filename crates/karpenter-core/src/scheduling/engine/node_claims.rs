//! Placement on the NodeClaims of this solve, and opening a new one: per-pool instance-type
//! filtering, limits, minValues.

use super::planned_bins::FALLBACK_BIN;
use super::*;

impl Engine {
    /// The fast rejections that depend only on a claim's pool and requirements, checked once per
    /// signature: pool taints, and topology on the keys the requirements pin.
    pub(super) fn signature_precheck(&self, pool: usize, reqs: &Reqs, d: &Derived) -> bool {
        d.pool_taint[pool].is_none()
            && d.groups
                .iter()
                .zip(&d.spread_min)
                .all(|(&(gid, sel), &min)| {
                    let key = self.topology.groups[gid].key;
                    match reqs.get(&key) {
                        // The merged requirement can only be narrower than the claim's explicit list.
                        Some(r) if key != self.keys.hostname && r.operator() == Operator::In => {
                            self.topology
                                .allows_any(gid, sel, d.strict.get(&key), r.values(), min)
                        }
                        _ => true,
                    }
                })
    }

    /// Per-claim checks that need no allocation (the fast rejections within a signature).
    pub(super) fn claim_precheck(&self, claim: &Claim, pod: &PendingPod, d: &Derived) -> bool {
        claim.rooms.fits_sum(&claim.requests, &pod.requests)
            && d.hostname_groups
                .iter()
                .all(|&(g, sel)| self.topology.hostname_allows(g, sel, claim.hostname))
            && (pod.host_ports.is_empty()
                || ports_conflict(&pod.host_ports, &claim.host_ports).is_none())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn claim_check(
        &self,
        pool_index: usize,
        claim_reqs: &Reqs,
        claim_types: &Bits,
        reserved: Option<usize>,
        claim_requests: &ResVec,
        hostname: Sym,
        hostname_req: &Req,
        pod: &PendingPod,
        d: &Derived,
    ) -> Result<Placement, Reject> {
        if let Some(t) = d.pool_taint[pool_index] {
            return Err(Reject::Taint(t));
        }
        for &(gid, sel) in &d.hostname_groups {
            if !self.topology.hostname_allows(gid, sel, hostname) {
                return Err(Reject::Topology(gid));
            }
        }
        let interner = &self.interner;
        claim_reqs
            .compatible(&d.reqs, |k| interner.is_well_known(*k))
            .map_err(Reject::Requirements)?;
        let mut merged = claim_reqs.clone();
        merged.add_all(&d.reqs);
        let mut total = claim_requests.clone();
        total.add(&pod.requests);
        let mut last = Reject::Volume("no volume topology alternative fits".into());
        let alternatives = pod.volume_alternatives.len().max(1);
        for ai in 0..alternatives {
            let mut reqs = if ai + 1 == alternatives {
                std::mem::take(&mut merged)
            } else {
                merged.clone()
            };
            if let Some(alt) = pod.volume_alternatives.get(ai) {
                if let Err(e) = reqs.compatible(alt, |k| interner.is_well_known(*k)) {
                    last = Reject::Requirements(e);
                    continue;
                }
                reqs.add_all(alt);
            }
            if let Err(e) = self.apply_topology(d, hostname_req, &mut reqs, false) {
                last = e;
                continue;
            }
            match self.filter_types(
                pool_index,
                claim_types,
                reserved,
                &reqs,
                &total,
                &pod.host_ports,
            ) {
                Ok((types, relaxed)) => {
                    let min_values_relaxed = relaxed.is_some();
                    if let Some(relaxed) = relaxed {
                        reqs = relaxed;
                    }
                    return Ok(Placement {
                        reqs,
                        types,
                        min_values_relaxed,
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Keeps the claim's types that match `reqs`, have a compatible offering, fit `total` plus
    /// their daemonset overhead and fit the pool's limits (given what the claim already reserves).
    /// Returns lowered-minValues requirements under BestEffort.
    pub(super) fn filter_types(
        &self,
        pool_index: usize,
        candidates: &Bits,
        reserved: Option<usize>,
        reqs: &Reqs,
        total: &ResVec,
        pod_ports: &[HostPort],
    ) -> Result<(Bits, Option<Reqs>), Reject> {
        let pool = &self.pools[pool_index];
        let compat = pool.compatible_types(reqs, &self.keys);
        let mut kept = Bits::new(pool.types.len());
        for (wi, (a, b)) in compat.0.iter().zip(&candidates.0).enumerate() {
            let mut w = a & b;
            while w != 0 {
                let t = wi * 64 + w.trailing_zeros() as usize;
                w &= w - 1;
                let ty = &pool.types[t];
                let dg = &pool.daemon_groups[ty.daemon_group];
                if !pod_ports.is_empty() && ports_conflict(pod_ports, &dg.host_ports).is_some() {
                    continue;
                }
                if !pool.limits.is_empty() && !pool.fits_limits(t, reserved) {
                    continue;
                }
                if ty.allocatable.fits_sum(total, &dg.overhead) {
                    kept.set(t);
                }
            }
        }
        if kept.is_empty() {
            return Err(Reject::NoInstanceType);
        }
        if reqs.has_min_values() {
            let unmet = pool.unmet_min_values(&kept, reqs);
            if !unmet.is_empty() {
                if self.options.min_values_policy == MinValuesPolicy::Strict {
                    return Err(Reject::MinValues(
                        unmet.into_iter().map(|(k, _)| k).collect(),
                    ));
                }
                let mut lowered = reqs.clone();
                for (k, achievable) in unmet {
                    if let Some(r) = lowered.get_mut(&k) {
                        r.set_min_values(Some(achievable.max(1) as u32));
                    }
                }
                return Ok((kept, Some(lowered)));
            }
        }
        Ok((kept, None))
    }

    pub(super) fn claim_add(&mut self, ci: usize, pod: &PendingPod, placement: Placement) {
        let claim = &self.claims[ci];
        if let Some(bin) = claim.bin {
            let pool = claim.pool;
            self.take_bin_slot(pool, bin, pod.index);
        }
        let claim = &self.claims[ci];
        self.claim_index
            .remove(claim.signature, claim.room_class, claim.pods.len(), ci);
        let signature = self.claim_index.signature(claim.pool, &placement.reqs);
        let claim = &mut self.claims[ci];
        claim.reqs = placement.reqs;
        claim.types = placement.types;
        claim.requests.add(&pod.requests);
        claim.pods.push(pod.index);
        claim.host_ports.extend(pod.host_ports.iter().cloned());
        claim.min_values_relaxed |= placement.min_values_relaxed;
        claim.signature = signature;
        claim.rooms = self.pools[claim.pool].type_rooms(&claim.types);
        // Full for the smallest queued pod: full for every pod (claims only grow and narrow).
        claim.room_class = claim_index::room_class(claim.cpu_left());
        if claim
            .rooms
            .fits_sum(&claim.requests, &self.smallest_request)
        {
            let rooms: Vec<claim_index::Room> = claim.rooms_left().collect();
            self.claim_index
                .insert(signature, claim.room_class, claim.pods.len(), ci, &rooms);
        }
        self.reserve_limits(ci);
        let claim = &self.claims[ci];
        Self::record_topology(
            &mut self.topology,
            &self.interner,
            &self.groups_of[pod.shape],
            self.keys.hostname,
            &claim.reqs,
            &claim.hostname_req,
            &self.pools[claim.pool].taints,
            true,
        );
    }

    pub(super) fn hostname(&mut self) -> Sym {
        if let Some(h) = self.next_hostname {
            return h;
        }
        let h = self.interner.value(&format!(
            "hostname-placeholder-{:04}",
            self.hostname_counter
        ));
        self.next_hostname = Some(h);
        h
    }

    pub(super) fn try_new_claim(
        &mut self,
        pi: usize,
        pod: &PendingPod,
        d: &Derived,
    ) -> Result<(), Reject> {
        let hostname = self.hostname();
        let pool = &self.pools[pi];
        if pool.unusable.is_some() {
            return Err(Reject::Unusable);
        }
        if let Some(t) = d.pool_taint[pi] {
            return Err(Reject::Taint(t));
        }
        if pool
            .nodes_limit
            .as_ref()
            .is_some_and(|l| l.remaining < 1000)
        {
            return Err(Reject::NodesLimit);
        }
        if !pool.limits.is_empty() && !pool.base.iter().any(|t| pool.fits_limits(t, None)) {
            return Err(Reject::TypesExceedLimits);
        }
        let hostname_req = Req::is_in([hostname]);
        let check_in = |reqs: &Reqs, types: &Bits| {
            self.claim_check(
                pi,
                reqs,
                types,
                None,
                &ResVec::default(),
                hostname,
                &hostname_req,
                pod,
                d,
            )
        };
        // Under CostOptimal a pod's group opens NodeClaims of its group's types when one of
        // them can hold it, and of any type otherwise (the pod is never left out for it).
        // With planned bins a pod opens a bin not yet opened that has a slot of its kind (of
        // the first of their types that can hold it), or a NodeClaim of any type otherwise.
        let check = |types: &Bits| check_in(&pool.reqs, types);
        let mut bin = None;
        let mut placement = None;
        for (b, types, zone) in self.bins_to_open(pi, pod.index) {
            let mut reqs = pool.reqs.clone();
            if let Some(zone) = zone {
                reqs.add(self.keys.zone, Req::is_in([zone]));
            }
            if let Ok(p) = check_in(&reqs, &pool.base.and(&types)) {
                (bin, placement) = (Some(b), Some(p));
                break;
            }
        }
        let placement = match placement {
            Some(p) => p,
            None => match self.pod_mask(pi, pod.index) {
                Some(mask) => check(&pool.base.and(mask)).or_else(|_| check(&pool.base)),
                None => check(&pool.base),
            }?,
        };
        match bin {
            Some(b) => self.open_bin(pi, b),
            // A planned pod no bin takes opens a NodeClaim that others in its situation join.
            None if self.pod_kind(pi, pod.index).is_some() => bin = Some(FALLBACK_BIN),
            None => {}
        }
        self.next_hostname = None;
        self.hostname_counter += 1;
        let ci = self.claims.len();
        self.claims.push(Claim {
            pool: pi,
            hostname,
            hostname_req,
            reqs: Reqs::new(),
            types: Bits::new(0),
            requests: ResVec::default(),
            pods: Vec::new(),
            host_ports: Vec::new(),
            min_values_relaxed: false,
            signature: u32::MAX,
            reserved: None,
            rooms: Rc::default(),
            room_class: 0,
            bin,
        });
        self.claim_add(ci, pod, placement);
        let pool = &mut self.pools[pi];
        if let Some(l) = pool.nodes_limit.as_mut() {
            l.remaining -= 1000;
        }
        Ok(())
    }
}
