//! The solve loop: queue, placement on existing nodes / in-flight NodeClaims / new NodeClaims,
//! preference relaxation, instance-type filtering, finalisation and explanations.

mod claim_index;
mod limits;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};
use karpenter_api::well_known;

use self::claim_index::ClaimIndex;
use super::compile::{
    CompileContext, HostPort, PendingPod, PodInfo, compile_pending, compile_pod, namespace_labels,
    ports_conflict,
};
use super::intern::{FxMap, Interner, Key, Req, Reqs, ResVec, Sym};
use super::topology::{Group, GroupKind, NodeFilter, Topology};
use super::{
    ExistingNodePlacement, InstanceTypeOption, MinValuesPolicy, NewNodeClaim, PreferencePolicy,
    SchedulerInput, SchedulerOptions, SchedulingResults, UnschedulablePod,
};
use crate::requirements::{Incompatibility, Operator, Requirement, Requirements};
use crate::resources::Quantity;
use crate::taints;

// ---- small bitset ------------------------------------------------------------------------------

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn get(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
    fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(wi, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(wi * 64 + b)
            })
        })
    }
}

// ---- compiled pools, nodes, claims --------------------------------------------------------------

struct Offering {
    zone: Sym,
    capacity_type: Sym,
    reservation: Option<Sym>,
    price: f64,
    available: bool,
}

/// (price, type index), cheapest first.
type PriceOrder = Vec<(f64, usize)>;

struct PoolType {
    name: Arc<str>,
    reqs: Reqs,
    allocatable: ResVec,
    capacity: ResVec,
    offerings: Vec<Offering>,
    daemon_group: usize,
}

struct DaemonGroup {
    overhead: ResVec,
    host_ports: Vec<HostPort>,
}

struct Limit {
    resource: usize,
    limit: i64,
    remaining: i64,
}

struct Pool {
    name: String,
    reqs: Reqs,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    startup_taints: Vec<Taint>,
    types: Vec<PoolType>,
    /// Types compatible with the pool and with an available offering.
    base: Bits,
    daemon_groups: Vec<DaemonGroup>,
    limits: Vec<Limit>,
    nodes_limit: Option<Limit>,
    compat_cache: RefCell<FxMap<Reqs, Rc<Bits>>>,
    /// (price, type) of types with a compatible available offering, cheapest first, per requirements.
    price_cache: RefCell<FxMap<Reqs, Rc<PriceOrder>>>,
    unusable: Option<String>,
}

struct Node {
    name: String,
    input_index: usize,
    hostname: Sym,
    reqs: Reqs,
    taints: Vec<Taint>,
    remaining: ResVec,
    host_ports: Vec<HostPort>,
    volumes: Vec<(String, String)>,
    volume_limits: BTreeMap<String, u32>,
    placed: Vec<usize>,
}

struct Claim {
    pool: usize,
    hostname: Sym,
    hostname_req: Req,
    reqs: Reqs,
    types: Bits,
    requests: ResVec,
    pods: Vec<usize>,
    host_ports: Vec<HostPort>,
    min_values_relaxed: bool,
    /// Its (pool, requirements) group in the [`ClaimIndex`].
    signature: u32,
    /// The option whose capacity the claim holds against its pool's limits (pools with limits).
    reserved: Option<usize>,
}

/// Per-pod group membership, computed once.
#[derive(Default, Clone)]
struct PodGroups {
    spread: Vec<usize>,
    affinity_required: Vec<usize>,
    affinity_preferred: Vec<usize>,
    anti_required: Vec<usize>,
    anti_preferred: Vec<usize>,
    inverse_owned: Vec<usize>,
    inverse_selecting: Vec<usize>,
    /// Non-inverse groups that count this pod when it is placed.
    counting: Vec<usize>,
}

/// How far a pod's soft constraints have been relaxed.
#[derive(Clone, Debug, Default)]
struct Attempt {
    required_start: usize,
    affinity_preferred_dropped: usize,
    anti_preferred_dropped: usize,
    node_preferred_dropped: usize,
    spreads_dropped: Vec<bool>,
    tolerate_prefer_no_schedule: bool,
}

/// The constraints of one attempt.
struct Derived {
    reqs: Reqs,
    strict: Reqs,
    /// (group, pod selected by it), all keys.
    groups: Vec<(usize, bool)>,
    /// The subset on the hostname key (cheap pre-check).
    hostname_groups: Vec<(usize, bool)>,
    tolerations: Vec<Toleration>,
    /// Per pool: the first template taint not tolerated.
    pool_taint: Vec<Option<usize>>,
}

/// Why a NodePool (or a node) refused a pod; rendered into text only for the final explanation.
#[derive(Clone, Debug)]
enum Reject {
    Unusable,
    Taint(usize),
    Requirements(Incompatibility<Key>),
    NodesLimit,
    TypesExceedLimits,
    HostPort(HostPort),
    Topology(usize),
    Volume(String),
    NoInstanceType,
    MinValues(Vec<Key>),
    Resources(usize),
}

struct Placement {
    reqs: Reqs,
    types: Bits,
    min_values_relaxed: bool,
}

struct Engine {
    interner: Interner,
    options: SchedulerOptions,
    pools: Vec<Pool>,
    nodes: Vec<Node>,
    claims: Vec<Claim>,
    /// In-flight claims by signature, each ordered by (pod count, index): the order they are tried.
    claim_index: ClaimIndex,
    topology: Topology,
    groups_of: Vec<PodGroups>,
    any_prefer_no_schedule: bool,
    next_hostname: Option<Sym>,
    hostname_counter: usize,
    keys: WellKnownKeys,
}

struct WellKnownKeys {
    zone: Key,
    capacity_type: Key,
    hostname: Key,
    reservation: Key,
    registered: Key,
    initialized: Key,
}

// ---- setup --------------------------------------------------------------------------------------

/// Keys whose absence from an instance type's labels does not mean `DoesNotExist` (they come from
/// offerings or the pool).
fn label_from_elsewhere(key: &str) -> bool {
    [
        well_known::ZONE_LABEL,
        well_known::CAPACITY_TYPE_LABEL,
        well_known::NODEPOOL_LABEL,
        well_known::REGION_LABEL,
        well_known::AWS_ZONE_ID_LABEL,
        well_known::AWS_CAPACITY_RESERVATION_ID_LABEL,
        well_known::AWS_CAPACITY_RESERVATION_TYPE_LABEL,
    ]
    .contains(&key)
}

fn offering_compatible(o: &Offering, reqs: &Reqs, keys: &WellKnownKeys) -> bool {
    reqs.get(&keys.zone).is_none_or(|r| r.has(&o.zone))
        && reqs
            .get(&keys.capacity_type)
            .is_none_or(|r| r.has(&o.capacity_type))
        && reqs
            .get(&keys.reservation)
            .is_none_or(|r| match &o.reservation {
                Some(id) => r.has(id),
                None => r.operator().tolerates_absence(),
            })
}

impl Pool {
    /// Types compatible with `reqs` and with a compatible available offering (cached per reqs).
    fn compatible_types(&self, reqs: &Reqs, keys: &WellKnownKeys) -> Rc<Bits> {
        if let Some(bits) = self.compat_cache.borrow().get(reqs) {
            return bits.clone();
        }
        let mut bits = Bits::new(self.types.len());
        for t in self.base.iter() {
            let ty = &self.types[t];
            if ty.reqs.intersects(reqs).is_ok()
                && ty
                    .offerings
                    .iter()
                    .any(|o| o.available && offering_compatible(o, reqs, keys))
            {
                bits.set(t);
            }
        }
        let bits = Rc::new(bits);
        self.compat_cache
            .borrow_mut()
            .insert(reqs.clone(), bits.clone());
        bits
    }

    /// Compatible types by their cheapest compatible available offering (ties: name).
    fn price_order(&self, reqs: &Reqs, keys: &WellKnownKeys) -> Rc<PriceOrder> {
        if let Some(order) = self.price_cache.borrow().get(reqs) {
            return order.clone();
        }
        let mut order: Vec<(f64, usize)> = self
            .compatible_types(reqs, keys)
            .iter()
            .map(|t| (self.cheapest_price(t, reqs, keys), t))
            .collect();
        order.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then_with(|| self.types[a.1].name.cmp(&self.types[b.1].name))
        });
        let order = Rc::new(order);
        self.price_cache
            .borrow_mut()
            .insert(reqs.clone(), order.clone());
        order
    }

    fn cheapest_price(&self, t: usize, reqs: &Reqs, keys: &WellKnownKeys) -> f64 {
        self.types[t]
            .offerings
            .iter()
            .filter(|o| o.available && offering_compatible(o, reqs, keys))
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min)
    }

    /// Keys whose `minValues` the types cannot meet (distinct values across all of them).
    fn unmet_min_values(&self, types: &Bits, reqs: &Reqs) -> Vec<(Key, usize)> {
        let mut unmet = Vec::new();
        for (key, req) in reqs.iter() {
            let Some(min) = req.min_values() else {
                continue;
            };
            let mut seen: HashSet<Sym> = HashSet::new();
            for t in types.iter() {
                if let Some(r) = self.types[t].reqs.get(key) {
                    seen.extend(r.values().iter().filter(|v| req.has(v)).copied());
                }
            }
            if seen.len() < min as usize {
                unmet.push((*key, seen.len()));
            }
        }
        unmet
    }
}

struct DaemonSetInfo {
    info: PodInfo,
}

fn daemon_compatible(
    ds: &PodInfo,
    pool_reqs: &Reqs,
    type_reqs: Option<&Reqs>,
    taints_to_tolerate: &[Taint],
    interner: &Interner,
) -> bool {
    let mut tolerations = ds.tolerations.clone();
    tolerations.push(taints::prefer_no_schedule_toleration());
    if taints::first_untolerated(&tolerations, taints_to_tolerate).is_some() {
        return false;
    }
    // Try the required terms in turn (the DS controller rewrites them per node; drop and retry).
    let terms: Vec<Option<&Reqs>> = if ds.required_terms.is_empty() {
        vec![None]
    } else {
        ds.required_terms.iter().map(Some).collect()
    };
    terms.into_iter().any(|term| {
        let mut strict = ds.node_selector.clone();
        if let Some(t) = term {
            strict.add_all(t);
        }
        pool_reqs
            .compatible(&strict, |k| interner.is_well_known(*k))
            .is_ok()
            && type_reqs.is_none_or(|tr| tr.intersects(&strict).is_ok())
    })
}

impl Engine {
    fn new(
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
                types.push(PoolType {
                    name: Arc::from(it.name.as_str()),
                    reqs: tr,
                    allocatable: interner.resources(&it.allocatable()),
                    capacity: interner.resources(&it.capacity),
                    offerings,
                    daemon_group: 0,
                });
            }
            let mut pool = Pool {
                name: np.name.clone(),

                reqs,
                labels: np.labels.clone(),
                taints: np.taints.clone(),
                startup_taints: np.startup_taints.clone(),
                base: Bits::new(types.len()),
                types,
                daemon_groups: Vec::new(),
                limits: Vec::new(),
                nodes_limit: None,
                compat_cache: RefCell::default(),
                price_cache: RefCell::default(),
                unusable,
            };
            // Pre-filter: compatible with the pool and some available compatible offering.
            for t in 0..pool.types.len() {
                let ty = &pool.types[t];
                if ty.reqs.intersects(&pool.reqs).is_ok()
                    && ty
                        .offerings
                        .iter()
                        .any(|o| o.available && offering_compatible(o, &pool.reqs, &keys))
                {
                    pool.base.set(t);
                }
            }
            if pool.unusable.is_none() && pool.base.is_empty() {
                pool.unusable = Some(format!(
                    "its requirements filter out every instance type with an available offering ({} types offered)",
                    pool.types.len()
                ));
            }
            // Daemon overhead groups: types with the same set of compatible daemonsets share one.
            let mut group_ids: HashMap<Vec<usize>, usize> = HashMap::new();
            for t in 0..pool.types.len() {
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
                        resource: usize::MAX,
                        limit: limit.millis(),
                        remaining,
                    });
                } else {
                    let resource = interner.resource(name);
                    pool.limits.push(Limit {
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
        let mut nodes = Vec::new();
        let mut bound: Vec<(usize, PodInfo)> = Vec::new();
        for (ni, n) in input.existing_nodes.iter().enumerate() {
            let hostname_text = n
                .labels
                .get(well_known::HOSTNAME_LABEL)
                .cloned()
                .unwrap_or_else(|| n.name.clone());
            let hostname = interner.value(&hostname_text);
            let mut reqs_s = Requirements::from_labels(&n.labels);
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
                bound.push((node_index, info));
            }
            // Daemonsets that will still land here.
            let mut daemon_expected = ResVec::default();
            for d in &daemonsets {
                if daemon_compatible(&d.info, &reqs, None, &taints_eff, &interner) {
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
            next_hostname: None,
            hostname_counter: 0,
            keys,
        };
        engine.build_topology(shapes, &nodes, &bound);
        // Reorder nodes (bound pods reference node indices before reordering).
        let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
        engine.nodes = node_order.iter().filter_map(|&i| slots[i].take()).collect();
        engine
    }

    /// Registers the topology groups of every distinct pod shape and which groups each selects.
    fn build_topology(&mut self, pods: &[Rc<PodInfo>], nodes: &[Node], bound: &[(usize, PodInfo)]) {
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
                let ns = super::compile::Namespaces::Some(pod.ns.into_iter().collect());
                g.spread.push(register(
                    &mut self.topology,
                    Group::new(kind, s.key, ns, s.selector.clone(), filter),
                    &mut used_keys,
                ));
            }
            let mk = |kind: GroupKind, t: &super::compile::AffinityTerm| {
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
        for &gid in &new_groups {
            let g = &self.topology.groups[gid];
            if g.kind == GroupKind::InverseAntiAffinity {
                continue;
            }
            let mut hits = Vec::new();
            for (ni, bp) in bound {
                if bp.terminating || !g.selects(bp.ns, &bp.labels) {
                    continue;
                }
                let node = &nodes[*ni];
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
                hits.extend(domain);
            }
            for d in hits {
                self.topology.groups[gid].record(d);
            }
        }
        // Which groups select each pod.
        for (pi, pod) in pods.iter().enumerate() {
            for (gid, g) in self.topology.groups.iter().enumerate() {
                if !g.selects(pod.ns, &pod.labels) {
                    continue;
                }
                if g.kind == GroupKind::InverseAntiAffinity {
                    groups_of[pi].inverse_selecting.push(gid);
                } else {
                    groups_of[pi].counting.push(gid);
                }
            }
        }
        self.groups_of = groups_of;
    }

    // ---- attempts -------------------------------------------------------------------------------

    fn derive(&self, pod: &PendingPod, attempt: &Attempt) -> Derived {
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
            hostname_groups,
            tolerations,
            pool_taint,
        }
    }

    /// One relaxation step in upstream's order; false when nothing is left to relax.
    fn relax(&self, pod: &PendingPod, a: &mut Attempt) -> bool {
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
    fn apply_topology(
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
    fn record_topology(
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

    // ---- existing nodes -------------------------------------------------------------------------

    fn node_check(&self, ni: usize, pod: &PendingPod, d: &Derived) -> Result<Reqs, Reject> {
        let node = &self.nodes[ni];
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

    fn node_add(&mut self, ni: usize, pod: &PendingPod, reqs: Reqs) {
        let node = &mut self.nodes[ni];
        node.remaining.sub_floor_zero(&pod.requests);
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

    // ---- NodeClaims -----------------------------------------------------------------------------

    /// The fast rejections that depend only on a claim's pool and requirements, checked once per
    /// signature: pool taints, and topology on the keys the requirements pin.
    fn signature_precheck(&self, pool: usize, reqs: &Reqs, d: &Derived) -> bool {
        d.pool_taint[pool].is_none()
            && d.groups.iter().all(|&(gid, sel)| {
                let key = self.topology.groups[gid].key;
                match reqs.get(&key) {
                    // The merged requirement can only be narrower than the claim's explicit list.
                    Some(r) if key != self.keys.hostname && r.operator() == Operator::In => self
                        .topology
                        .allows_any(gid, sel, d.strict.get(&key), r.values()),
                    _ => true,
                }
            })
    }

    /// Per-claim checks that need no allocation (the fast rejections within a signature).
    fn claim_precheck(&self, claim: &Claim, pod: &PendingPod, d: &Derived) -> bool {
        d.hostname_groups
            .iter()
            .all(|&(g, sel)| self.topology.hostname_allows(g, sel, claim.hostname))
            && (pod.host_ports.is_empty()
                || ports_conflict(&pod.host_ports, &claim.host_ports).is_none())
    }

    #[allow(clippy::too_many_arguments)]
    fn claim_check(
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
    fn filter_types(
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

    fn claim_add(&mut self, ci: usize, pod: &PendingPod, placement: Placement) {
        let claim = &self.claims[ci];
        self.claim_index
            .remove(claim.signature, claim.pods.len(), ci);
        let signature = self.claim_index.signature(claim.pool, &placement.reqs);
        let claim = &mut self.claims[ci];
        claim.reqs = placement.reqs;
        claim.types = placement.types;
        claim.requests.add(&pod.requests);
        claim.pods.push(pod.index);
        claim.host_ports.extend(pod.host_ports.iter().cloned());
        claim.min_values_relaxed |= placement.min_values_relaxed;
        claim.signature = signature;
        self.claim_index.insert(signature, claim.pods.len(), ci);
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

    fn hostname(&mut self) -> Sym {
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

    fn try_new_claim(&mut self, pi: usize, pod: &PendingPod, d: &Derived) -> Result<(), Reject> {
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
        let placement = self.claim_check(
            pi,
            &pool.reqs,
            &pool.base,
            None,
            &ResVec::default(),
            hostname,
            &hostname_req,
            pod,
            d,
        )?;
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
        });
        self.claim_add(ci, pod, placement);
        let pool = &mut self.pools[pi];
        if let Some(l) = pool.nodes_limit.as_mut() {
            l.remaining -= 1000;
        }
        Ok(())
    }

    // ---- add ------------------------------------------------------------------------------------

    /// Places the pod somewhere; on failure returns each NodePool's reason.
    fn add(&mut self, pod: &PendingPod, d: &Derived) -> Result<(), Vec<(usize, Reject)>> {
        for ni in 0..self.nodes.len() {
            if let Ok(reqs) = self.node_check(ni, pod, d) {
                self.node_add(ni, pod, reqs);
                return Ok(());
            }
        }
        // In-flight claims, fewest pods first (ties: oldest first). An anti-affinity on hostname
        // that already counts every claim rules them all out without looking.
        let all_blocked = d.hostname_groups.iter().any(|&(g, _)| {
            let g = &self.topology.groups[g];
            g.is_exclusive() && g.claims_counted >= self.claim_index.len()
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
        let found = self.claim_index.in_order(&signatures).find_map(|ci| {
            let c = &self.claims[ci];
            if !self.claim_precheck(c, pod, d) {
                return None;
            }
            self.claim_check(
                c.pool,
                &c.reqs,
                &c.types,
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

    // ---- explanations ---------------------------------------------------------------------------

    fn reqs_text(&self, reqs: &Reqs) -> Requirements {
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

    fn explain(
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
        if !self.nodes.is_empty() {
            // Say why the first existing node did not take it, when that is informative.
            if let Err(e) = self.node_check(0, pod, &d) {
                let node = self.nodes[0].name.clone();
                let text = match e {
                    Reject::Taint(t) => format!(
                        "taint {} not tolerated",
                        taints::taint_to_string(&self.nodes[0].taints[t])
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
                    _ => String::new(),
                };
                if !text.is_empty() {
                    lines.push(format!("existing node {node}: {text}"));
                }
            }
        }
        lines.join("; ")
    }

    // ---- finalisation ---------------------------------------------------------------------------

    /// The parts of a NodeClaim that depend only on its requirements and instance types.
    fn finalize_shape(
        &self,
        pool_index: usize,
        reqs: &Reqs,
        types: &Bits,
    ) -> Result<Finalized, String> {
        let pool = &self.pools[pool_index];
        let keys = &self.keys;
        let order = pool.price_order(reqs, keys);
        let max = self.options.max_instance_types.max(1);
        let options: Vec<(f64, usize)> = order
            .iter()
            .copied()
            .filter(|(_, t)| types.get(*t))
            .take(max)
            .collect();
        let mut kept = Bits::new(pool.types.len());
        for (_, t) in &options {
            kept.set(*t);
        }
        let unmet = pool.unmet_min_values(&kept, reqs);
        if !unmet.is_empty() && self.options.min_values_policy == MinValuesPolicy::Strict {
            let keys: Vec<&str> = unmet
                .iter()
                .map(|(k, _)| self.interner.key_str(*k))
                .collect();
            return Err(format!(
                "nodepool {}: NodePool couldn't meet minValues requirements for {} after keeping the {} cheapest instance types",
                pool.name,
                keys.join(", "),
                options.len()
            ));
        }
        let mut min_overhead: Option<ResVec> = None;
        let mut groups_seen: Vec<usize> = Vec::new();
        let mut capacity_types: BTreeSet<Sym> = BTreeSet::new();
        for (_, t) in &options {
            let g = pool.types[*t].daemon_group;
            if !groups_seen.contains(&g) {
                groups_seen.push(g);
                match &mut min_overhead {
                    None => min_overhead = Some(pool.daemon_groups[g].overhead.clone()),
                    Some(m) => m.min_with(&pool.daemon_groups[g].overhead),
                }
            }
            for o in &pool.types[*t].offerings {
                if o.available && offering_compatible(o, reqs, keys) {
                    capacity_types.insert(o.capacity_type);
                }
            }
        }
        let mut text = self.reqs_text(reqs);
        let min_ct = text
            .get(&well_known::CAPACITY_TYPE_LABEL.to_string())
            .and_then(|r| r.min_values());
        let capacity_types = capacity_types
            .into_iter()
            .map(|c| self.interner.value_str(c).to_string());
        text.set(
            well_known::CAPACITY_TYPE_LABEL.to_string(),
            Requirement::is_in(capacity_types).with_min_values(min_ct),
        );
        let instance_type_min_values = text
            .get(&well_known::INSTANCE_TYPE_LABEL.to_string())
            .and_then(|r| r.min_values());
        // The instance-type list lives in `instance_types`; `node_claim_requirements()` adds it.
        text.remove(&well_known::INSTANCE_TYPE_LABEL.to_string());
        let mut labels = pool.labels.clone();
        labels.insert(well_known::NODEPOOL_LABEL.to_string(), pool.name.clone());
        for (k, r) in text.iter() {
            if well_known::is_well_known_label(k)
                || self.options.extra_well_known_labels.contains(k)
                || well_known::restricted_label_reason(k).is_some()
                || labels.contains_key(k)
            {
                continue;
            }
            if let Some(v) = r.any() {
                labels.insert(k.clone(), v);
            }
        }
        Ok(Finalized {
            requirements: text.to_node_selector(),
            instance_type_min_values: instance_type_min_values.map(|m| m as i32),
            instance_types: options
                .iter()
                .map(|(p, t)| InstanceTypeOption {
                    name: pool.types[*t].name.clone(),
                    price: *p,
                })
                .collect(),
            labels,
            daemon_overhead: min_overhead.unwrap_or_default(),
        })
    }

    /// The NodeClaim to launch for `claim`, offering `types` (its types within the pool's limits).
    fn finalize(
        &self,
        claim: &Claim,
        types: &Bits,
        cache: &mut FxMap<(usize, Reqs, Bits), Result<Rc<Finalized>, String>>,
    ) -> Result<NewNodeClaim, String> {
        let key = (claim.pool, claim.reqs.clone(), types.clone());
        let shape = match cache.get(&key) {
            Some(shape) => shape.clone(),
            None => {
                let shape = self
                    .finalize_shape(claim.pool, &claim.reqs, types)
                    .map(Rc::new);
                cache.insert(key, shape.clone());
                shape
            }
        }?;
        let pool = &self.pools[claim.pool];
        let mut requests = claim.requests.clone();
        requests.add(&shape.daemon_overhead);
        Ok(NewNodeClaim {
            node_pool: pool.name.clone(),
            hostname: self.interner.value_str(claim.hostname).to_string(),
            requirements: shape.requirements.clone(),
            instance_type_min_values: shape.instance_type_min_values,
            instance_types: shape.instance_types.clone(),
            pods: claim.pods.clone(),
            requests: self.interner.resource_list(&requests),
            labels: shape.labels.clone(),
            taints: pool.taints.clone(),
            startup_taints: pool.startup_taints.clone(),
            min_values_relaxed: claim.min_values_relaxed,
        })
    }
}

/// What identical NodeClaims share.
struct Finalized {
    requirements: Vec<karpenter_api::v1::NodeSelectorRequirementWithMinValues>,
    instance_type_min_values: Option<i32>,
    instance_types: Arc<[InstanceTypeOption]>,
    labels: BTreeMap<String, String>,
    daemon_overhead: ResVec,
}

/// Runs one scheduling simulation.
pub(crate) fn solve<P: std::borrow::Borrow<Pod>>(
    input: SchedulerInput,
    pods: &[P],
) -> SchedulingResults {
    let namespaces = namespace_labels(&input.namespaces);
    let ctx = CompileContext {
        namespaces: &namespaces,
        volumes: &input.volumes,
    };
    let mut interner = Interner::new(&input.options.extra_well_known_labels);
    let (infos, shapes) = compile_pending(pods, &ctx, &mut interner);
    let mut engine = Engine::new(&input, &shapes, &ctx, interner);
    drop(shapes);

    let mut results = SchedulingResults::default();
    let mut unschedulable: BTreeMap<usize, String> = BTreeMap::new();
    let mut queue_pods: Vec<usize> = Vec::new();
    for info in &infos {
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
    let claims = std::mem::take(&mut engine.claims);
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
            let (namespace, name) = crate::pod::pod_key(std::borrow::Borrow::borrow(&pods[p]));
            UnschedulablePod {
                pod: p,
                namespace,
                name,
                explanation,
            }
        })
        .collect();
    results
}
