//! Placement on nodes that exist or are in flight: resources, taints, host ports, volume limits,
//! requirements and topology.

use super::*;

impl Engine {
    pub(super) fn node_check(
        &self,
        ni: usize,
        pod: &PendingPod,
        d: &Derived,
    ) -> Result<Reqs, Reject> {
        let node = &self.nodes[ni];
        if node.closed_to_moved_pods && pod.index >= self.moved_pods_from {
            return Err(Reject::ConsolidateAfter);
        }
        if let Some(i) = node
            .taints
            .iter()
            .position(|t| !taints::tolerates(&d.tolerations, t))
        {
            return Err(Reject::Taint(i));
        }
        for &(gid, sel) in &d.hostname_groups {
            if !self.topology.hostname_allows(gid, sel, node.hostname) {
                return Err(Reject::Topology(gid));
            }
        }
        if let Some(p) = ports_conflict(&pod.host_ports, &node.host_ports) {
            return Err(Reject::HostPort(p));
        }
        if let Some(r) = node
            .remaining
            .first_exceeded_sum(&pod.requests, &ResVec::default())
        {
            return Err(Reject::Resources(r));
        }
        node.reqs
            .compatible(&d.reqs, |_| false)
            .map_err(Reject::Requirements)?;
        // A node's label names one domain per key: when a topology group allows the pod no
        // place there, nothing below can (volume alternatives only narrow), so say so before
        // copying the requirements for the full check.
        for (&(gid, selected), &min) in d.groups.iter().zip(&d.spread_min) {
            let key = self.topology.groups[gid].key;
            if key == self.keys.hostname {
                continue; // checked above
            }
            if let Some(r) = node.reqs.get(&key)
                && r.operator() == crate::requirements::Operator::In
                && !self
                    .topology
                    .allows_any(gid, selected, d.strict.get(&key), r.values(), min)
            {
                return Err(Reject::Topology(gid));
            }
        }
        // Volume limits per CSI driver.
        for (driver, limit) in &node.volume_limits {
            let mut ids: HashSet<&String> = node
                .volumes
                .iter()
                .filter(|(dr, _)| dr == driver)
                .map(|(_, id)| id)
                .collect();
            ids.extend(
                pod.volumes
                    .iter()
                    .filter(|(dr, _)| dr == driver)
                    .map(|(_, id)| id),
            );
            if ids.len() > *limit as usize {
                return Err(Reject::Volume(format!(
                    "would exceed the {driver} volume limit of {limit}"
                )));
            }
        }
        let hostname_req = Req::is_in([node.hostname]);
        let alternatives: Vec<Option<&Reqs>> = if pod.volume_alternatives.is_empty() {
            vec![None]
        } else {
            pod.volume_alternatives.iter().map(Some).collect()
        };
        let mut last = Reject::Volume("no volume topology alternative fits".into());
        for alt in alternatives {
            let mut reqs = node.reqs.clone();
            if let Some(alt) = alt {
                if let Err(e) = reqs.compatible(alt, |_| false) {
                    last = Reject::Requirements(e);
                    continue;
                }
                reqs.add_all(alt);
            }
            match self.apply_topology(d, &hostname_req, &mut reqs, true) {
                Ok(()) => return Ok(reqs),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    pub(super) fn node_add(&mut self, ni: usize, pod: &PendingPod, reqs: Reqs) {
        let node = &mut self.nodes[ni];
        if node.placed.is_empty()
            && let Some(touched) = self.touched.as_mut()
        {
            touched.push((
                ni,
                node.remaining.clone(),
                node.host_ports.len(),
                node.volumes.len(),
            ));
        }
        node.remaining.sub_floor_zero(&pod.requests);
        self.room.set(ni, Some(&node.remaining));
        node.host_ports.extend(pod.host_ports.iter().cloned());
        node.volumes.extend(pod.volumes.iter().cloned());
        node.placed.push(pod.index);
        let hostname_req = Req::is_in([node.hostname]);
        Self::record_topology(
            &mut self.topology,
            &self.interner,
            &self.groups_of[pod.shape],
            self.keys.hostname,
            &reqs,
            &hostname_req,
            &self.nodes[ni].taints,
            false,
        );
    }
}
