//! One attempt to place a pod: its requirements under the current preference relaxation, and
//! topology (spread, affinity, anti-affinity) checked and recorded against a node or NodeClaim.

use super::*;

impl Engine {
    pub(super) fn derive(&self, pod: &PendingPod, attempt: &Attempt) -> Derived {
        let respect = self.options.preference_policy == PreferencePolicy::Respect;
        let mut strict = pod.node_selector.clone();
        if let Some(term) = pod.required_terms.get(attempt.required_start) {
            strict.add_all(term);
        }
        let mut reqs = strict.clone();
        if respect && let Some(pref) = pod.preferred_terms.get(attempt.node_preferred_dropped) {
            reqs.add_all(pref);
        }
        let pg = &self.groups_of[pod.shape];
        let mut groups: Vec<usize> = Vec::new();
        for (i, &g) in pg.spread.iter().enumerate() {
            if g != usize::MAX && !attempt.spreads_dropped.get(i).copied().unwrap_or(false) {
                groups.push(g);
            }
        }
        groups.extend(&pg.affinity_required);
        groups.extend(
            pg.affinity_preferred
                .iter()
                .skip(attempt.affinity_preferred_dropped),
        );
        groups.extend(&pg.anti_required);
        groups.extend(
            pg.anti_preferred
                .iter()
                .skip(attempt.anti_preferred_dropped),
        );
        groups.extend(&pg.inverse_selecting);
        groups.sort_unstable();
        groups.dedup();
        let groups: Vec<(usize, bool)> = groups
            .into_iter()
            .map(|g| (g, self.topology.groups[g].selects(pod.ns, &pod.labels)))
            .collect();
        let spread_min = groups
            .iter()
            .map(|&(g, _)| {
                let key = self.topology.groups[g].key;
                if key == self.keys.hostname {
                    None // hostname spreads count against zero (checked per node)
                } else {
                    self.topology.spread_min(g, strict.get(&key))
                }
            })
            .collect();
        let hostname_groups = groups
            .iter()
            .copied()
            .filter(|(g, _)| self.topology.groups[*g].key == self.keys.hostname)
            .collect();
        let mut tolerations = pod.tolerations.clone();
        if attempt.tolerate_prefer_no_schedule {
            tolerations.push(taints::prefer_no_schedule_toleration());
        }
        let pool_taint = self
            .pools
            .iter()
            .map(|p| {
                p.taints
                    .iter()
                    .position(|t| !taints::tolerates(&tolerations, t))
            })
            .collect();
        Derived {
            reqs,
            strict,
            groups,
            spread_min,
            hostname_groups,
            tolerations,
            pool_taint,
        }
    }

    /// One relaxation step in upstream's order; false when nothing is left to relax.
    pub(super) fn relax(&self, pod: &PendingPod, a: &mut Attempt) -> bool {
        let respect = self.options.preference_policy == PreferencePolicy::Respect;
        if pod.required_terms.len() > a.required_start + 1 {
            a.required_start += 1;
            return true;
        }
        if respect {
            if a.affinity_preferred_dropped < pod.affinity_preferred.len() {
                a.affinity_preferred_dropped += 1;
                return true;
            }
            if a.anti_preferred_dropped < pod.anti_preferred.len() {
                a.anti_preferred_dropped += 1;
                return true;
            }
            if a.node_preferred_dropped < pod.preferred_terms.len() {
                a.node_preferred_dropped += 1;
                return true;
            }
            if a.spreads_dropped.len() < pod.spreads.len() {
                a.spreads_dropped.resize(pod.spreads.len(), false);
            }
            if let Some(i) = (0..pod.spreads.len())
                .find(|&i| pod.spreads[i].schedule_anyway && !a.spreads_dropped[i])
            {
                a.spreads_dropped[i] = true;
                return true;
            }
        }
        if self.any_prefer_no_schedule && !a.tolerate_prefer_no_schedule {
            a.tolerate_prefer_no_schedule = true;
            return true;
        }
        false
    }

    // ---- topology against a node/claim ----------------------------------------------------------

    /// Tightens `reqs` with the pod's topology constraints on a node whose hostname requirement is
    /// `hostname_req`.
    pub(super) fn apply_topology(
        &self,
        d: &Derived,
        hostname_req: &Req,
        reqs: &mut Reqs,
        strict_node: bool,
    ) -> Result<(), Reject> {
        for &(gid, selected) in &d.groups {
            let key = self.topology.groups[gid].key;
            let allowed = {
                let node_domains = if key == self.keys.hostname {
                    Some(hostname_req)
                } else {
                    reqs.get(&key)
                };
                self.topology
                    .allowed(gid, selected, d.strict.get(&key), node_domains)
            };
            let Some(allowed) = allowed else {
                return Err(Reject::Topology(gid));
            };
            if key == self.keys.hostname {
                continue;
            }
            if strict_node && !reqs.contains_key(&key) {
                return Err(Reject::Topology(gid));
            }
            reqs.add(key, allowed);
            if reqs.get(&key).is_some_and(|r| r.is_empty()) {
                return Err(Reject::Topology(gid));
            }
        }
        Ok(())
    }

    /// Counts a placed pod in the groups that select it (and its own inverse groups).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_topology(
        topology: &mut Topology,
        interner: &Interner,
        groups: &PodGroups,
        hostname_key: Key,
        reqs: &Reqs,
        hostname_req: &Req,
        node_taints: &[Taint],
        on_claim: bool,
    ) {
        for &gid in groups.counting.iter().chain(groups.inverse_owned.iter()) {
            let g = &topology.groups[gid];
            if matches!(g.kind, GroupKind::Spread { .. })
                && !g.filter.is_trivial()
                && !g.filter.matches(reqs, node_taints, interner)
            {
                continue;
            }
            let key = g.key;
            let domains = if key == hostname_key {
                Some(hostname_req)
            } else {
                reqs.get(&key)
            };
            topology.record(gid, domains, on_claim);
        }
    }
}
