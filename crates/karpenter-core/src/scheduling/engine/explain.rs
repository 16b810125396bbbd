//! Why a pod could not be placed, in words: per NodePool, the first constraint that rules it out.

use super::*;

impl Engine {
    pub(super) fn reqs_text(&self, reqs: &Reqs) -> Requirements {
        let mut r = self.interner.reqs_to_strings(reqs);
        r.remove(&well_known::NODE_REGISTERED_LABEL.to_string());
        r.remove(&well_known::NODE_INITIALIZED_LABEL.to_string());
        r
    }

    fn explain_reject(&self, pi: usize, pod: &PendingPod, d: &Derived, reject: &Reject) -> String {
        let pool = &self.pools[pi];
        let name = &pool.name;
        let i = &self.interner;
        match reject {
            // Only existing nodes reject for this (explained with them below).
            Reject::ConsolidateAfter => format!("nodepool {name}: consolidateAfter window"),
            Reject::Unusable => format!(
                "nodepool {name}: {}",
                pool.unusable.clone().unwrap_or_default()
            ),
            Reject::Taint(t) => format!(
                "nodepool {name}: taint {} not tolerated",
                pool.taints
                    .get(*t)
                    .map(taints::taint_to_string)
                    .unwrap_or_default()
            ),
            Reject::Requirements(inc) => {
                let key = i.key_str(*inc.key()).to_string();
                let pod_req = d
                    .reqs
                    .get(inc.key())
                    .map(|r| i.req_to_string(r).to_string())
                    .unwrap_or_default();
                match inc {
                    Incompatibility::UndefinedKey(_) => {
                        let hint =
                            crate::requirements::typo_hint(&key, self.reqs_text(&pool.reqs).keys())
                                .map(|h| format!(" (typo of {h:?}?)"))
                                .unwrap_or_default();
                        format!(
                            "incompatible with nodepool {name}: pod requires {key} {pod_req} but the pool does not define label {key:?}{hint}; add it to the pool's requirements or labels"
                        )
                    }
                    Incompatibility::NoCommonValue(_) => {
                        let pool_req = pool
                            .reqs
                            .get(inc.key())
                            .map(|r| i.req_to_string(r).to_string())
                            .unwrap_or_default();
                        format!(
                            "incompatible with nodepool {name}: pod requires {key} {pod_req} but the pool allows {key} {pool_req}"
                        )
                    }
                }
            }
            Reject::NodesLimit => {
                let l = pool
                    .nodes_limit
                    .as_ref()
                    .map(|l| Quantity::from_millis(l.limit).to_string())
                    .unwrap_or_default();
                format!("nodepool {name}: limit nodes={l} reached")
            }
            Reject::TypesExceedLimits => {
                let mut parts = Vec::new();
                for l in &pool.limits {
                    let r = i.resource_name(l.resource);
                    parts.push(format!(
                        "limit {r}={} reached (used {}, pod needs {})",
                        Quantity::from_millis(l.limit),
                        Quantity::from_millis(l.limit - l.remaining.max(0)),
                        Quantity::from_millis(pod.requests.get(l.resource))
                    ));
                }
                format!(
                    "nodepool {name}: every instance type would exceed the pool's limits: {}",
                    parts.join(", ")
                )
            }
            Reject::HostPort(p) => format!(
                "nodepool {name}: host port {}/{} already in use",
                p.port, p.protocol
            ),
            Reject::Topology(gid) => {
                self.explain_topology(*gid, pod, d, &format!("nodepool {name}"))
            }
            Reject::Volume(text) => format!("nodepool {name}: {text}"),
            Reject::MinValues(keys) => {
                let keys: Vec<&str> = keys.iter().map(|k| i.key_str(*k)).collect();
                format!(
                    "nodepool {name}: instance types cannot satisfy minValues for {}",
                    keys.join(", ")
                )
            }
            Reject::Resources(r) => format!("nodepool {name}: not enough {}", i.resource_name(*r)),
            Reject::NoInstanceType => {
                let reqs = pool.reqs.intersection(&d.reqs);
                self.explain_no_type(pi, &reqs, &pod.requests, pod)
            }
        }
    }

    fn explain_topology(&self, gid: usize, pod: &PendingPod, d: &Derived, subject: &str) -> String {
        let g = &self.topology.groups[gid];
        let key = self.interner.key_str(g.key);
        let domains: Vec<Sym> = self
            .topology
            .domains
            .get(&g.key)
            .map(|v| v.iter().map(|d| d.value).collect())
            .unwrap_or_default();
        let counts = g.counts_text(&domains, &self.interner);
        let allowed = d
            .strict
            .get(&g.key)
            .map(|r| format!(", pod allows {key} {}", self.interner.req_to_string(r)))
            .unwrap_or_default();
        let _ = pod;
        match g.kind {
            GroupKind::Spread { max_skew, .. } => format!(
                "{subject}: topology spread on {key} (maxSkew {max_skew}) cannot be met (counts: {counts}{allowed})"
            ),
            GroupKind::Affinity => format!(
                "{subject}: pod affinity on {key}: no domain has a matching pod (counts: {counts}{allowed})"
            ),
            GroupKind::AntiAffinity => {
                format!(
                    "{subject}: pod anti-affinity on {key}: every allowed domain already has a matching pod (counts: {counts}{allowed})"
                )
            }
            GroupKind::InverseAntiAffinity => format!(
                "{subject}: another pod's anti-affinity on {key} excludes this pod from every allowed domain (counts: {counts}{allowed})"
            ),
        }
    }

    fn explain_no_type(
        &self,
        pi: usize,
        reqs: &Reqs,
        requests: &ResVec,
        pod: &PendingPod,
    ) -> String {
        let pool = &self.pools[pi];
        let name = &pool.name;
        let i = &self.interner;
        let offered = pool.base.count();
        // A single requirement no type satisfies?
        for (key, req) in reqs.iter() {
            if *key == self.keys.registered || *key == self.keys.initialized {
                continue;
            }
            let mut single = Reqs::new();
            single.add(*key, req.clone());
            let any = pool.base.iter().any(|t| {
                let ty = &pool.types[t];
                ty.reqs.intersects(&single).is_ok()
                    && ty
                        .offerings
                        .iter()
                        .any(|o| o.available && offering_compatible(o, &single, &self.keys))
            });
            if !any {
                let values: BTreeSet<String> = pool
                    .base
                    .iter()
                    .filter_map(|t| pool.types[t].reqs.get(key))
                    .flat_map(|r| r.values().iter().map(|v| i.value_str(*v).to_string()))
                    .collect();
                let shown: Vec<String> = values.iter().take(8).cloned().collect();
                let more = if values.len() > 8 {
                    format!(" and {} more", values.len() - 8)
                } else {
                    String::new()
                };
                return format!(
                    "nodepool {name}: requirement {} {} matches no instance type (none of {offered} types; they offer [{}{more}])",
                    i.key_str(*key),
                    i.req_to_string(req),
                    shown.join(", ")
                );
            }
        }
        // Requirements jointly compatible? Then it's resources.
        let compatible: Vec<usize> = pool
            .base
            .iter()
            .filter(|&t| {
                let ty = &pool.types[t];
                ty.reqs.intersects(reqs).is_ok()
                    && ty
                        .offerings
                        .iter()
                        .any(|o| o.available && offering_compatible(o, reqs, &self.keys))
            })
            .collect();
        if compatible.is_empty() {
            return format!(
                "nodepool {name}: no instance type meets all of {} together (of {offered} types)",
                self.reqs_text(reqs)
            );
        }
        let within: Vec<usize> = compatible
            .iter()
            .copied()
            .filter(|&t| pool.fits_limits(t, None))
            .collect();
        if within.is_empty() {
            return format!(
                "nodepool {name}: every compatible instance type would exceed the pool's limits"
            );
        }
        // Which resource fails on the largest type?
        let mut largest = ResVec::default();
        let mut best: Option<usize> = None;
        for &t in &within {
            let ty = &pool.types[t];
            let mut alloc = ty.allocatable.clone();
            alloc.sub_floor_zero(&pool.daemon_groups[ty.daemon_group].overhead);
            if best.is_none_or(|b| alloc.get(0) > pool.types[b].allocatable.get(0)) {
                best = Some(t);
                largest = alloc;
            }
        }
        let ds = pool
            .daemon_groups
            .iter()
            .any(|g| !g.overhead.0.iter().all(|v| *v == 0));
        let ds_text = if ds { " after daemonset overhead" } else { "" };
        let short = requests
            .0
            .iter()
            .enumerate()
            .find(|(r, v)| **v > largest.get(*r))
            .map(|(r, _)| r);
        let need = match short {
            Some(r) => format!(
                "{} {}",
                Quantity::from_millis(requests.get(r)),
                i.resource_name(r)
            ),
            None => i.resources_text(requests),
        };
        let ports = if pod.host_ports.is_empty() {
            ""
        } else {
            " (or daemonset host ports conflict)"
        };
        let typo = if requests.get(0) >= 1_000_000_000 {
            " (cpu request >= 1 million: m vs M typo?)"
        } else {
            ""
        };
        format!(
            "nodepool {name}: no instance type has {need}{ds_text}{typo}{ports} (largest allocatable: {})",
            i.resources_text(&largest)
        )
    }

    pub(super) fn explain(
        &mut self,
        pod: &PendingPod,
        attempt: &Attempt,
        errors: &[(usize, Reject)],
    ) -> String {
        let d = self.derive(pod, attempt);
        let mut lines: Vec<String> = errors
            .iter()
            .map(|(pi, e)| self.explain_reject(*pi, pod, &d, e))
            .collect();
        if self.pools.is_empty() {
            lines.push("no NodePool can launch nodes for it (none given)".to_string());
        }
        if let Some(first) = self.nodes.iter().position(|n| !n.gone) {
            // Say why the first existing node did not take it, when that is informative.
            if let Err(e) = self.node_check(first, pod, &d) {
                let node = self.nodes[first].name.clone();
                let text = match e {
                    Reject::Taint(t) => format!(
                        "taint {} not tolerated",
                        taints::taint_to_string(&self.nodes[first].taints[t])
                    ),
                    Reject::Resources(r) => {
                        format!("not enough {} left", self.interner.resource_name(r))
                    }
                    Reject::Requirements(inc) => format!(
                        "node lacks a required label value for {}",
                        self.interner.key_str(*inc.key())
                    ),
                    Reject::Topology(g) => self.explain_topology(g, pod, &d, "topology"),
                    Reject::HostPort(p) => format!("host port {} in use", p.port),
                    Reject::Volume(v) => v,
                    Reject::ConsolidateAfter => {
                        "under its NodePool's consolidateAfter window, it takes no moved pods"
                            .to_string()
                    }
                    _ => String::new(),
                };
                if !text.is_empty() {
                    lines.push(format!("existing node {node}: {text}"));
                }
            }
        }
        lines.join("; ")
    }
}
