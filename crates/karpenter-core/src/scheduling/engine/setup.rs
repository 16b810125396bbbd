//! Building the engine: NodePools compiled into instance types and offerings, existing and
//! in-flight nodes with their pods, daemonset overhead, and the topology groups of every pod shape.

use super::*;

impl Engine {
    pub(super) fn new(
        input: &SchedulerInput,
        shapes: &[Rc<PodInfo>],
        ctx: &CompileContext,
        pods_interner: Interner,
    ) -> Self {
        let mut interner = pods_interner;
        let keys = WellKnownKeys {
            zone: interner.key(well_known::ZONE_LABEL),
            capacity_type: interner.key(well_known::CAPACITY_TYPE_LABEL),
            hostname: interner.key(well_known::HOSTNAME_LABEL),
            reservation: interner.key(well_known::AWS_CAPACITY_RESERVATION_ID_LABEL),
            registered: interner.key(well_known::NODE_REGISTERED_LABEL),
            initialized: interner.key(well_known::NODE_INITIALIZED_LABEL),
        };
        let mut topology = Topology {
            hostname_key: keys.hostname,
            ..Default::default()
        };
        let daemonsets: Vec<DaemonSetInfo> = input
            .daemonsets
            .iter()
            .map(|p| DaemonSetInfo {
                info: compile_pod(p, ctx, &mut interner),
            })
            .filter(|d| d.info.invalid.is_none())
            .collect();
        let well_known_keys: Vec<&str> = well_known::WELL_KNOWN_LABELS
            .iter()
            .chain(well_known::AWS_WELL_KNOWN_LABELS.iter())
            .copied()
            .chain(
                input
                    .options
                    .extra_well_known_labels
                    .iter()
                    .map(String::as_str),
            )
            .filter(|k| !label_from_elsewhere(k))
            .collect();

        // ---- pools
        let mut order: Vec<usize> = (0..input.node_pools.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&input.node_pools[a], &input.node_pools[b]);
            pb.weight
                .cmp(&pa.weight)
                .then_with(|| pb.name.cmp(&pa.name))
        });
        let mut pools = Vec::new();
        for &pi in &order {
            let np = &input.node_pools[pi];
            let taint_set = topology.taint_sets.len();
            topology.taint_sets.push(np.taints.clone());
            let mut unusable = None;
            let mut reqs_s =
                match Requirements::from_node_selector_with_min_values(&np.requirements) {
                    Ok(r) => r,
                    Err(e) => {
                        unusable = Some(format!("invalid spec.template.spec.requirements: {e}"));
                        Requirements::new()
                    }
                };
            reqs_s.add_all(&Requirements::from_labels(&np.labels));
            reqs_s.add_str(
                well_known::NODEPOOL_LABEL,
                Requirement::is_in([np.name.clone()]),
            );
            reqs_s.add_str(
                well_known::NODE_REGISTERED_LABEL,
                Requirement::is_in(["true".to_string()]),
            );
            reqs_s.add_str(
                well_known::NODE_INITIALIZED_LABEL,
                Requirement::is_in(["true".to_string()]),
            );
            let reqs = interner.reqs(&reqs_s);
            let mut types = Vec::with_capacity(np.instance_types.len());
            let mut base = Bits::new(np.instance_types.len());
            for it in &np.instance_types {
                let mut tr = Reqs::new();
                for (k, v) in &it.labels {
                    let key = interner.key(well_known::normalize_label_key(k));
                    tr.add(key, Req::is_in([interner.value(v)]));
                }
                for k in &well_known_keys {
                    let key = interner.key(k);
                    if !tr.contains_key(&key) {
                        tr.add(key, Req::does_not_exist());
                    }
                }
                let offerings: Vec<Offering> = it
                    .offerings
                    .iter()
                    .map(|o| Offering {
                        zone: interner.value(&o.zone),
                        capacity_type: interner.value(&o.capacity_type),
                        reservation: o.reservation_id.as_deref().map(|r| interner.value(r)),
                        price: o.price,
                        available: o.available,
                    })
                    .collect();
                let avail: Vec<&Offering> = offerings.iter().filter(|o| o.available).collect();
                tr.add(keys.zone, Req::is_in(avail.iter().map(|o| o.zone)));
                tr.add(
                    keys.capacity_type,
                    Req::is_in(avail.iter().map(|o| o.capacity_type)),
                );
                // Pre-filter: compatible with the pool and some available compatible offering.
                // A type the pool rules out is never looked at again, so it keeps only its
                // name and index: a NodePool allowing 20 of the catalogue's 1,300 types would
                // otherwise hold every type's compiled requirements for the whole solve.
                let usable = tr.intersects(&reqs).is_ok()
                    && offerings
                        .iter()
                        .any(|o| o.available && offering_compatible(o, &reqs, &keys));
                if !usable {
                    types.push(PoolType {
                        name: Arc::from(it.name.as_str()),
                        reqs: Reqs::new(),
                        allocatable: ResVec::default(),
                        capacity: ResVec::default(),
                        offerings: Vec::new(),
                        daemon_group: 0,
                        overlay_applied: it.overlay_applied,
                    });
                    continue;
                }
                base.set(types.len());
                types.push(PoolType {
                    name: Arc::from(it.name.as_str()),
                    reqs: tr,
                    allocatable: interner.resources(&it.allocatable()),
                    capacity: interner.resources(&it.capacity),
                    offerings,
                    daemon_group: 0,
                    overlay_applied: it.overlay_applied,
                });
            }
            let mut pool = Pool {
                name: np.name.clone(),

                reqs,
                labels: np.labels.clone(),
                taints: np.taints.clone(),
                startup_taints: np.startup_taints.clone(),
                base,
                types,
                daemon_groups: Vec::new(),
                limits: Vec::new(),
                nodes_limit: None,
                compat_cache: RefCell::default(),
                price_cache: RefCell::default(),
                rooms_cache: RefCell::default(),
                unusable,
            };
            if pool.unusable.is_none() && pool.base.is_empty() {
                pool.unusable = Some(format!(
                    "its requirements filter out every instance type with an available offering ({} types offered)",
                    pool.types.len()
                ));
            }
            // Daemon overhead groups: types with the same set of compatible daemonsets share one.
            let mut group_ids: HashMap<Vec<usize>, usize> = HashMap::new();
            let usable: Vec<usize> = pool.base.iter().collect();
            for t in usable {
                let set: Vec<usize> = daemonsets
                    .iter()
                    .enumerate()
                    .filter(|(_, d)| {
                        daemon_compatible(
                            &d.info,
                            &pool.reqs,
                            Some(&pool.types[t].reqs),
                            &pool.taints,
                            &interner,
                            DaemonTarget::Template,
                        )
                    })
                    .map(|(i, _)| i)
                    .collect();
                let next = group_ids.len();
                let gid = *group_ids.entry(set.clone()).or_insert(next);
                if gid == pool.daemon_groups.len() {
                    let mut overhead = ResVec::default();
                    let mut host_ports = Vec::new();
                    for &d in &set {
                        overhead.add(&daemonsets[d].info.requests);
                        host_ports.extend(daemonsets[d].info.host_ports.iter().cloned());
                    }
                    pool.daemon_groups.push(DaemonGroup {
                        overhead,
                        host_ports,
                    });
                }
                pool.types[t].daemon_group = gid;
            }
            // Limits.
            for (name, limit) in np.limits.iter() {
                let used = np.usage.get(name);
                let remaining = limit.millis().saturating_sub(used.millis());
                if name == well_known::NODES_RESOURCE {
                    pool.nodes_limit = Some(Limit {
                        name: name.to_string(),
                        resource: usize::MAX,
                        limit: limit.millis(),
                        remaining,
                    });
                } else {
                    let resource = interner.resource(name);
                    pool.limits.push(Limit {
                        name: name.to_string(),
                        resource,
                        limit: limit.millis(),
                        remaining,
                    });
                }
            }
            pools.push(pool);
            let _ = taint_set;
        }
        let any_prefer_no_schedule = pools.iter().any(|p| {
            p.taints
                .iter()
                .any(|t| t.effect == taints::PREFER_NO_SCHEDULE)
        });

        // ---- existing nodes
        // A node's whole labels (hostname included) are read only by a spread that honours the
        // pod's node affinity (`Topology::universe`); without one they are not kept, sparing a
        // second interned copy of every node's labels per pass.
        let keep_node_labels = shapes.iter().any(|p| {
            p.spreads.iter().any(|s| s.honor_affinity)
                && !(p.node_selector.is_empty() && p.required_terms.iter().all(|t| t.is_empty()))
        });
        let mut nodes = Vec::new();
        // Bound pods share one compiled info per distinct shape (the replicas of a Deployment),
        // as pending pods do: a private copy each was the largest part of a pass's memory once
        // most of 10,000 pods were bound (a `PodInfo` and its lists, ~1.3 KB a pod).
        let mut bound: Vec<(usize, Rc<PodInfo>)> = Vec::new();
        let mut bound_shapes = PodShapes::default();
        for (ni, n) in input.existing_nodes.iter().enumerate() {
            let hostname_text = n
                .labels
                .get(well_known::HOSTNAME_LABEL)
                .cloned()
                .unwrap_or_else(|| n.name.clone());
            let hostname = interner.value(&hostname_text);
            let mut reqs_s = Requirements::from_labels(&n.labels);
            // Its labels, hostname included, for spreads that honour node affinity.
            let all_labels = keep_node_labels.then(|| interner.reqs(&reqs_s));
            reqs_s.remove(&well_known::HOSTNAME_LABEL.to_string());
            let reqs = interner.reqs(&reqs_s);
            let managed = n.node_pool.is_some();
            let taints_eff: Vec<Taint> = n
                .taints
                .iter()
                .filter(|t| {
                    !(managed
                        && !n.initialized
                        && (taints::is_ephemeral(t)
                            || n.startup_taints
                                .iter()
                                .any(|s| s.key == t.key && s.effect == t.effect)))
                })
                .cloned()
                .collect();
            let taint_set = topology.taint_sets.len();
            topology.taint_sets.push(taints_eff.clone());
            if let Some(labels) = all_labels {
                topology.node_providers.insert(taint_set, labels);
            }
            let mut remaining = interner.resources(&n.allocatable);
            let mut host_ports = Vec::new();
            let mut volumes = Vec::new();
            let mut daemon_bound = ResVec::default();
            let node_index = nodes.len();
            for bp in &n.pods {
                if crate::pod::is_terminal(bp) {
                    continue; // finished: frees its resources, counts for nothing
                }
                let info = compile_pod(bp, ctx, &mut interner);
                remaining.sub_floor_zero(&info.requests);
                host_ports.extend(info.host_ports.iter().cloned());
                volumes.extend(info.volumes.iter().cloned());
                if info.is_daemonset {
                    daemon_bound.add(&info.requests);
                }
                bound.push((node_index, bound_shapes.share(info)));
            }
            // Daemonsets that will still land here.
            let mut daemon_expected = ResVec::default();
            for d in &daemonsets {
                if daemon_compatible(
                    &d.info,
                    &reqs,
                    None,
                    &taints_eff,
                    &interner,
                    DaemonTarget::ExistingNode,
                ) {
                    daemon_expected.add(&d.info.requests);
                }
            }
            daemon_expected.sub_floor_zero(&daemon_bound);
            remaining.sub_floor_zero(&daemon_expected);
            for (k, r) in reqs.iter() {
                if let [v] = r.values() {
                    topology.add_domain(*k, *v, taint_set);
                }
            }
            nodes.push(Node {
                name: n.name.clone(),
                input_index: ni,
                hostname,
                reqs,
                taints: taints_eff,
                remaining,
                host_ports,
                volumes,
                volume_limits: n.volume_limits.clone(),
                placed: Vec::new(),
                taint_set,
                bound_counts: Vec::new(),
                gone: false,
                closed_to_moved_pods: n.closed_to_moved_pods,
            });
            let _ = n.capacity.len();
        }
        let mut node_order: Vec<usize> = (0..nodes.len()).collect();
        node_order.sort_by(|&a, &b| {
            let (na, nb) = (
                &input.existing_nodes[nodes[a].input_index],
                &input.existing_nodes[nodes[b].input_index],
            );
            nb.initialized
                .cmp(&na.initialized)
                .then_with(|| na.name.cmp(&nb.name))
        });

        let mut engine = Engine {
            interner,
            options: input.options.clone(),
            pools,
            nodes: Vec::new(),
            claims: Vec::new(),
            claim_index: ClaimIndex::default(),
            topology,
            groups_of: Vec::new(),
            any_prefer_no_schedule,
            smallest_request: ResVec::default(),
            room: super::node_room::NodeRoom::default(),
            node_domains: super::node_domains::NodeDomains::default(),
            next_hostname: None,
            hostname_counter: 0,
            keys,
            touched: None,
            moved_pods_from: input.moved_pods_from.unwrap_or(usize::MAX),
            pod_groups: None,
        };
        let bound_counts = engine.build_topology(shapes, &nodes, &bound);
        for (node, counts) in nodes.iter_mut().zip(bound_counts) {
            node.bound_counts = counts;
        }
        // Reorder nodes (bound pods reference node indices before reordering).
        let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
        engine.nodes = node_order.iter().filter_map(|&i| slots[i].take()).collect();
        let width = engine
            .nodes
            .iter()
            .map(|n| n.remaining.0.len())
            .max()
            .unwrap_or(0);
        engine.room =
            super::node_room::NodeRoom::new(engine.nodes.iter().map(|n| &n.remaining), width);
        engine.index_node_domains();
        engine
    }

    /// Registers the topology groups of every distinct pod shape and which groups each selects.
    /// Returns, per node (in `nodes` order), the (group, domain) counts of its bound pods.
    fn build_topology(
        &mut self,
        pods: &[Rc<PodInfo>],
        nodes: &[Node],
        bound: &[(usize, Rc<PodInfo>)],
    ) -> Vec<Vec<(usize, Sym)>> {
        let mut bound_counts: Vec<Vec<(usize, Sym)>> = vec![Vec::new(); nodes.len()];
        let respect = self.options.preference_policy == PreferencePolicy::Respect;
        let mut used_keys: HashSet<Key> = HashSet::new();
        let mut new_groups: Vec<usize> = Vec::new();
        let mut register = |topology: &mut Topology, g: Group, used: &mut HashSet<Key>| {
            used.insert(g.key);
            let (id, new) = topology.register(g);
            if new {
                new_groups.push(id);
            }
            id
        };
        let mut groups_of = vec![PodGroups::default(); pods.len()];
        for (pi, pod) in pods.iter().enumerate() {
            let g = &mut groups_of[pi];
            for s in &pod.spreads {
                if !respect && s.schedule_anyway {
                    g.spread.push(usize::MAX);
                    continue;
                }
                let filter = NodeFilter {
                    affinity: s
                        .honor_affinity
                        .then(|| (pod.node_selector.clone(), pod.required_terms.clone())),
                    tolerations: s.honor_taints.then(|| pod.tolerations.clone()),
                };
                let kind = GroupKind::Spread {
                    max_skew: s.max_skew,
                    min_domains: s.min_domains,
                };
                let ns = crate::scheduling::compile::Namespaces::Some(pod.ns.into_iter().collect());
                g.spread.push(register(
                    &mut self.topology,
                    Group::new(kind, s.key, ns, s.selector.clone(), filter),
                    &mut used_keys,
                ));
            }
            let mk = |kind: GroupKind, t: &crate::scheduling::compile::AffinityTerm| {
                Group::new(
                    kind,
                    t.key,
                    t.namespaces.clone(),
                    t.selector.clone(),
                    NodeFilter::default(),
                )
            };
            for t in &pod.affinity_required {
                g.affinity_required.push(register(
                    &mut self.topology,
                    mk(GroupKind::Affinity, t),
                    &mut used_keys,
                ));
            }
            for t in &pod.anti_required {
                g.anti_required.push(register(
                    &mut self.topology,
                    mk(GroupKind::AntiAffinity, t),
                    &mut used_keys,
                ));
                g.inverse_owned.push(register(
                    &mut self.topology,
                    mk(GroupKind::InverseAntiAffinity, t),
                    &mut used_keys,
                ));
            }
            if respect {
                for t in &pod.affinity_preferred {
                    g.affinity_preferred.push(register(
                        &mut self.topology,
                        mk(GroupKind::Affinity, t),
                        &mut used_keys,
                    ));
                }
                for t in &pod.anti_preferred {
                    g.anti_preferred.push(register(
                        &mut self.topology,
                        mk(GroupKind::AntiAffinity, t),
                        &mut used_keys,
                    ));
                }
            }
        }
        // Bound pods' required anti-affinity, seen inversely.
        for (ni, bp) in bound {
            for t in &bp.anti_required {
                let id = register(
                    &mut self.topology,
                    Group::new(
                        GroupKind::InverseAntiAffinity,
                        t.key,
                        t.namespaces.clone(),
                        t.selector.clone(),
                        NodeFilter::default(),
                    ),
                    &mut used_keys,
                );
                let node = &nodes[*ni];
                let domain = if t.key == self.keys.hostname {
                    Some(node.hostname)
                } else {
                    node.reqs
                        .get(&t.key)
                        .and_then(|r| r.values().first().copied())
                };
                if let Some(d) = domain {
                    self.topology.groups[id].record(d);
                    bound_counts[*ni].push((id, d));
                }
            }
        }
        // Domain universe for the keys in use.
        for (pi, pool) in self.pools.iter().enumerate() {
            if pool.unusable.is_some() {
                continue;
            }
            let taint_set = pi; // pools were pushed to taint_sets first, in the same order
            for key in &used_keys {
                if *key == self.keys.hostname {
                    continue;
                }
                let pool_req = pool.reqs.get(key);
                if let Some(r) = pool_req
                    && r.operator() == Operator::In
                {
                    for v in r.values() {
                        self.topology.add_domain(*key, *v, taint_set);
                    }
                }
                for t in pool.base.iter() {
                    if let Some(tr) = pool.types[t].reqs.get(key) {
                        let r = match pool_req {
                            Some(p) => p.intersection(tr),
                            None => tr.clone(),
                        };
                        if r.operator() == Operator::In {
                            for v in r.values() {
                                self.topology.add_domain(*key, *v, taint_set);
                            }
                        }
                    }
                }
            }
        }
        self.topology.sort_domains(&self.interner);
        // Count pods already bound, for the groups just created (not inverse: recorded above).
        // Each bound pod looks up the groups selecting it (by its labels) instead of every group
        // trying every bound pod: groups × bound pods is quadratic when every pod to place
        // brings its own group (consolidation prepares all the cluster's pods at once).
        let index = SelectingIndex::new(&self.topology.groups);
        let mut counted = vec![false; self.topology.groups.len()];
        for &gid in &new_groups {
            counted[gid] = self.topology.groups[gid].kind != GroupKind::InverseAntiAffinity;
        }
        for (ni, bp) in bound {
            if bp.terminating {
                continue;
            }
            let node = &nodes[*ni];
            for gid in index.selecting(&self.topology.groups, bp.ns, &bp.labels) {
                if !counted[gid] {
                    continue;
                }
                let g = &self.topology.groups[gid];
                if !g.filter.matches(&node.reqs, &node.taints, &self.interner) {
                    continue;
                }
                let domain = if g.key == self.keys.hostname {
                    Some(node.hostname)
                } else {
                    node.reqs
                        .get(&g.key)
                        .and_then(|r| r.values().first().copied())
                };
                if let Some(d) = domain {
                    self.topology.groups[gid].record(d);
                    bound_counts[*ni].push((gid, d));
                }
            }
        }
        // Which groups select each pod.
        for (pi, pod) in pods.iter().enumerate() {
            for gid in index.selecting(&self.topology.groups, pod.ns, &pod.labels) {
                let g = &self.topology.groups[gid];
                if g.kind == GroupKind::InverseAntiAffinity {
                    groups_of[pi].inverse_selecting.push(gid);
                } else {
                    groups_of[pi].counting.push(gid);
                }
            }
        }
        self.groups_of = groups_of;
        bound_counts
    }
}
