//! The solve loop: compile the pods, queue them (largest first), place each on an existing node,
//! an open NodeClaim or a new one (relaxing preferences when it fails), then finalise the
//! NodeClaims and explain every pod left over.

use super::*;

impl Engine {
    /// Places the pod somewhere; on failure returns each NodePool's reason.
    fn add(&mut self, pod: &PendingPod, d: &Derived) -> Result<(), Vec<(usize, Reject)>> {
        // First fit in node order, skipping the nodes without room (and those taken away),
        // and looking only in the domains the pod's topology allows when that is few nodes.
        if let Some(shortlist) = self.topology_shortlist(d) {
            for ni in shortlist {
                if self.nodes[ni].gone || !self.room.fits_at(ni, &pod.requests) {
                    continue;
                }
                if let Ok(reqs) = self.node_check(ni, pod, d) {
                    self.node_add(ni, pod, reqs);
                    return Ok(());
                }
            }
        } else {
            let mut from = 0;
            while let Some(ni) = self.room.next_fit(from, &pod.requests) {
                if ni >= self.nodes.len() {
                    break;
                }
                from = ni + 1;
                if self.nodes[ni].gone {
                    continue;
                }
                if let Ok(reqs) = self.node_check(ni, pod, d) {
                    self.node_add(ni, pod, reqs);
                    return Ok(());
                }
            }
        }
        // In-flight claims, fewest pods first (ties: oldest first). An anti-affinity on hostname
        // that already counts every claim rules them all out without looking.
        let all_blocked = d.hostname_groups.iter().any(|&(g, _)| {
            let g = &self.topology.groups[g];
            g.is_exclusive() && g.claims_counted >= self.claims.len()
        });
        let signatures: Vec<u32> = if all_blocked {
            Vec::new()
        } else {
            (0..self.claim_index.signatures().len())
                .filter(|&s| {
                    let s = &self.claim_index.signatures()[s];
                    self.signature_precheck(s.pool, &s.reqs, d)
                })
                .map(|s| s as u32)
                .collect()
        };
        let need = (pod.requests.get(CPU), pod.requests.get(MEMORY));
        self.claim_index.set_need(need);
        let min_class = claim_index::first_class_for(pod.requests.get(CPU));
        // Claims found too full for this pod's CPU or memory are parked after the walk.
        let mut too_full = Vec::new();
        let found = self
            .claim_index
            .in_order(&signatures, min_class)
            .find_map(|ci| {
                let c = &self.claims[ci];
                if !self.bin_allows(c, pod.index) {
                    return None;
                }
                if !self.claim_precheck(c, pod, d) {
                    if !claim_index::any_fits(c.rooms_left(), need) {
                        too_full.push(ci);
                    }
                    return None;
                }
                // Under CostOptimal a pod joins only NodeClaims of its group's types.
                let masked = self.pod_mask(c.pool, pod.index).map(|m| c.types.and(m));
                self.claim_check(
                    c.pool,
                    &c.reqs,
                    masked.as_ref().unwrap_or(&c.types),
                    c.reserved,
                    &c.requests,
                    c.hostname,
                    &c.hostname_req,
                    pod,
                    d,
                )
                .ok()
                .map(|p| (ci, p))
            });
        for ci in too_full {
            let c = &self.claims[ci];
            let rooms: Vec<claim_index::Room> = c.rooms_left().collect();
            self.claim_index
                .park(c.signature, c.room_class, c.pods.len(), ci, &rooms);
        }
        if let Some((ci, placement)) = found {
            self.claim_add(ci, pod, placement);
            return Ok(());
        }
        let mut errors = Vec::new();
        for pi in 0..self.pools.len() {
            match self.try_new_claim(pi, pod, d) {
                Ok(()) => return Ok(()),
                Err(e) => errors.push((pi, e)),
            }
        }
        Err(errors)
    }

    fn try_schedule(&mut self, pod: &PendingPod) -> Result<(), (Attempt, Vec<(usize, Reject)>)> {
        let mut attempt = Attempt::default();
        loop {
            let d = self.derive(pod, &attempt);
            match self.add(pod, &d) {
                Ok(()) => return Ok(()),
                Err(errors) => {
                    if !self.relax(pod, &mut attempt) {
                        return Err((attempt, errors));
                    }
                }
            }
        }
    }
}

/// Runs one scheduling simulation.
pub(crate) fn solve<P: std::borrow::Borrow<Pod>>(
    input: SchedulerInput,
    pods: &[P],
) -> SchedulingResults {
    let (mut engine, infos) = build(&input, pods);
    let order: Vec<usize> = (0..pods.len()).collect();
    run(&mut engine, &infos, pods, &order)
}

/// Compiles `pods` and builds the engine over `input` with the topology groups they need.
pub(super) fn build<P: std::borrow::Borrow<Pod>>(
    input: &SchedulerInput,
    pods: &[P],
) -> (Engine, Vec<PendingPod>) {
    let namespaces = namespace_labels(&input.namespaces);
    let ctx = CompileContext {
        namespaces: &namespaces,
        volumes: &input.volumes,
    };
    let mut interner = Interner::new(&input.options.extra_well_known_labels);
    let (infos, shapes) = compile_pending(pods, &ctx, &mut interner);
    let engine = Engine::new(input, &shapes, &ctx, interner);
    (engine, infos)
}

/// Places the pods at `order` (ascending indices into `pods`/`infos`, compiled by [`build`]);
/// the results refer to pods by their position in `order`. Leaves the engine's nodes and
/// topology as the placements made them (a [`WhatIf`] takes them back).
pub(super) fn run<P: std::borrow::Borrow<Pod>>(
    engine: &mut Engine,
    infos: &[PendingPod],
    pods: &[P],
    order: &[usize],
) -> SchedulingResults {
    let mut results = SchedulingResults::default();
    let mut unschedulable: BTreeMap<usize, String> = BTreeMap::new();
    let mut queue_pods: Vec<usize> = Vec::new();
    for info in order.iter().filter_map(|&i| infos.get(i)) {
        if let Some(reason) = &info.invalid {
            unschedulable.insert(info.index, reason.clone());
        } else if info.ignored {
            unschedulable.insert(
                info.index,
                "ignored: the pod requires karpenter.sh/nodepool DoesNotExist, so no NodePool may run it".to_string(),
            );
        } else if info.is_daemonset {
            unschedulable.insert(
                info.index,
                "ignored: DaemonSet pods are placed by the DaemonSet controller".to_string(),
            );
        } else {
            queue_pods.push(info.index);
        }
    }
    // Queue order: CPU desc, memory desc, then input order.
    queue_pods.sort_by(|&a, &b| {
        let (pa, pb) = (&infos[a], &infos[b]);
        pb.cpu()
            .cmp(&pa.cpu())
            .then_with(|| pb.memory().cmp(&pa.memory()))
            .then_with(|| a.cmp(&b))
    });
    if let Some((&first, rest)) = queue_pods.split_first() {
        let mut smallest = infos[first].requests.clone();
        for &p in rest {
            smallest.min_with(&infos[p].requests);
        }
        engine.smallest_request = smallest;
    }
    let mut queue: std::collections::VecDeque<usize> = queue_pods.into();
    let mut last_len: HashMap<usize, usize> = HashMap::new();
    let mut failures: HashMap<usize, (Attempt, Vec<(usize, Reject)>)> = HashMap::new();
    while let Some(&p) = queue.front() {
        // A full cycle through the queue without progress ends the solve.
        if last_len.get(&p) == Some(&queue.len()) {
            break;
        }
        queue.pop_front();
        match engine.try_schedule(&infos[p]) {
            Ok(()) => {
                failures.remove(&p);
            }
            Err(f) => {
                failures.insert(p, f);
                queue.push_back(p);
                last_len.insert(p, queue.len());
            }
        }
    }
    let mut failed: Vec<usize> = failures.keys().copied().collect();
    failed.sort_unstable();
    for p in failed {
        if let Some((attempt, errors)) = failures.remove(&p) {
            let text = engine.explain(&infos[p], &attempt, &errors);
            unschedulable.insert(p, text);
        }
    }
    let mut claims = std::mem::take(&mut engine.claims);
    if engine.pod_groups.is_some() {
        engine.widen_types(&mut claims);
    }
    let mut shapes = FxMap::default();
    let mut budget = engine.limit_budget();
    for claim in &claims {
        let types = engine.launchable_types(claim, &mut budget);
        match engine.finalize(claim, &types, &mut shapes) {
            Ok(nc) => results.new_node_claims.push(nc),
            Err(reason) => {
                for &p in &claim.pods {
                    unschedulable.insert(p, reason.clone());
                }
            }
        }
    }
    let mut placed_nodes: Vec<&Node> = engine
        .nodes
        .iter()
        .filter(|n| !n.placed.is_empty())
        .collect();
    placed_nodes.sort_by_key(|n| n.input_index);
    results.existing_nodes = placed_nodes
        .into_iter()
        .map(|n| ExistingNodePlacement {
            node: n.name.clone(),
            pods: n.placed.clone(),
        })
        .collect();
    results.unschedulable = unschedulable
        .into_iter()
        .map(|(p, explanation)| {
            let pod: &Pod = std::borrow::Borrow::borrow(&pods[p]);
            UnschedulablePod {
                pod: p,
                namespace: crate::pod::namespace(pod).to_string(),
                name: crate::pod::name(pod).to_string(),
                explanation,
            }
        })
        .collect();
    renumber(&mut results, order, pods.len());
    results
}

/// Rewrites the results' pod indices (into all the pods) as positions in `order`.
fn renumber(results: &mut SchedulingResults, order: &[usize], all: usize) {
    if order.len() == all {
        return; // every pod, ascending: positions are indices
    }
    let mut position = vec![usize::MAX; all];
    for (at, &i) in order.iter().enumerate() {
        if let Some(slot) = position.get_mut(i) {
            *slot = at;
        }
    }
    let at = |i: usize| position.get(i).copied().unwrap_or(usize::MAX);
    for placement in &mut results.existing_nodes {
        for p in &mut placement.pods {
            *p = at(*p);
        }
    }
    for claim in &mut results.new_node_claims {
        for p in &mut claim.pods {
            *p = at(*p);
        }
    }
    for u in &mut results.unschedulable {
        u.pod = at(u.pod);
    }
}
