//! The scheduler's engine: compiled NodePools, nodes and NodeClaims (here), and one module per
//! phase of a solve:
//!
//! - `setup`: the engine built from the input (pools, instance types, nodes, topology groups);
//! - `solve`: the queue and the solve loop, and where a pod is tried first (`add`);
//! - `attempt`: a pod's requirements under preference relaxation, topology checks;
//! - `existing_nodes`: placement on existing and in-flight nodes;
//! - `node_claims`: placement on this solve's NodeClaims and opening new ones;
//! - `claim_index`, `type_rooms`, `limits`: finding candidate NodeClaims fast (and what their
//!   types can hold), NodePool limits;
//! - `finalize`: NodeClaims into results; `explain`: why a pod is left over.

mod attempt;
mod claim_index;
mod existing_nodes;
mod explain;
mod finalize;
mod limits;
mod node_claims;
mod node_domains;
mod node_room;
mod packing;
mod planned_bins;
mod setup;
mod solve;
mod type_rooms;
mod what_if;

pub(crate) use packing::{cost_lower_bound, solve_cost_optimal};
pub(crate) use solve::solve;
pub use what_if::WhatIf;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use crate::pod::Pod;
use k8s_openapi::api::core::v1::{Taint, Toleration};
use karpenter_api::well_known;

use self::claim_index::ClaimIndex;
use self::type_rooms::TypeRooms;
use super::compile::{
    CompileContext, HostPort, PendingPod, PodInfo, PodShapes, compile_pending, compile_pod,
    namespace_labels, ports_conflict,
};
use super::intern::{CPU, FxMap, Interner, Key, MEMORY, PODS, Req, Reqs, ResVec, Sym};
use super::topology::{Group, GroupKind, NodeFilter, SelectingIndex, Topology};
use super::{
    ExistingNodePlacement, InstanceTypeOption, MinValuesPolicy, NewNodeClaim, PreferencePolicy,
    SchedulerInput, SchedulerOptions, SchedulingResults, UnschedulablePod,
};
use crate::instance_type::OverlayApplied;
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
    /// The bits set in both.
    fn and(&self, other: &Bits) -> Bits {
        Bits(self.0.iter().zip(&other.0).map(|(a, b)| a & b).collect())
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

/// Type sets whose rooms a pool keeps (see [`Pool::type_rooms`]).
const ROOMS_CACHE_LIMIT: usize = 4096;

/// (price, type index), cheapest first.
type PriceOrder = Vec<(f64, usize)>;

struct PoolType {
    name: Arc<str>,
    reqs: Reqs,
    allocatable: ResVec,
    capacity: ResVec,
    offerings: Vec<Offering>,
    daemon_group: usize,
    /// What NodeOverlays changed on the type (the NodeClaims offering it are annotated).
    overlay_applied: OverlayApplied,
}

struct DaemonGroup {
    overhead: ResVec,
    host_ports: Vec<HostPort>,
}

struct Limit {
    /// The resource's name in `spec.limits` (to re-derive `remaining` from a new usage).
    name: String,
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
    /// What each set of types (a NodeClaim's) can hold, per set: claims share a few sets.
    rooms_cache: RefCell<FxMap<Bits, Rc<TypeRooms>>>,
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
    /// Its own entry in `Topology::taint_sets`: the provider of the domains its labels name.
    taint_set: usize,
    /// (group, domain) counts its bound pods contributed, so [`WhatIf`] can take the node away.
    bound_counts: Vec<(usize, Sym)>,
    /// Taken away for the current [`WhatIf`] solve: no pod may land here.
    gone: bool,
    /// No pod moved by a consolidation lands here (its `consolidateAfter` window).
    closed_to_moved_pods: bool,
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
    /// What its types offer beyond daemonset overhead: a pod whose requests plus the claim's fit
    /// none of them is refused before the full check (see `type_rooms`).
    rooms: Rc<TypeRooms>,
    /// Its room class in the [`ClaimIndex`] (CPU left; see `claim_index`).
    room_class: u8,
    /// Under a CostOptimal run with planned bins: the bin of the pod that opened it; only
    /// pods of that bin join it.
    bin: Option<u32>,
}

impl Claim {
    /// The (CPU, memory) it has left on each (CPU, memory) shape of its types that no other
    /// covers, which the [`ClaimIndex`] parks it by: a pod fits no type unless one holds it.
    fn rooms_left(&self) -> impl Iterator<Item = claim_index::Room> + '_ {
        let (cpu, memory) = (self.requests.get(CPU), self.requests.get(MEMORY));
        self.rooms
            .cpu_memory
            .iter()
            .map(move |&(c, m)| (c.saturating_sub(cpu), m.saturating_sub(memory)))
    }

    /// The CPU it has left at most (its room class in the [`ClaimIndex`]).
    fn cpu_left(&self) -> i64 {
        self.rooms
            .max
            .get(CPU)
            .saturating_sub(self.requests.get(CPU))
    }
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
    /// Per entry of `groups`: a spread group's global minimum for this pod (the topology does
    /// not change while one attempt looks for a place, so it is computed once, not per node).
    spread_min: Vec<Option<u32>>,
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
    /// A moved pod and a node still under its `consolidateAfter` window.
    ConsolidateAfter,
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
    /// Per resource, the least any queued pod requests: a NodeClaim without room for it can
    /// take no more pods and leaves the claim index, so later pods do not walk past it.
    smallest_request: ResVec,
    /// Which nodes may still have room for a pod (skips the full ones without looking).
    room: node_room::NodeRoom,
    /// Which nodes lie in which topology domain (skips the domains a group rules out).
    node_domains: node_domains::NodeDomains,
    next_hostname: Option<Sym>,
    hostname_counter: usize,
    keys: WellKnownKeys,
    /// While a [`WhatIf`] solve runs: each node's state before its first placement (index,
    /// remaining, host ports, volumes), to take the placements back.
    touched: Option<Vec<(usize, ResVec, usize, usize)>>,
    /// Pods from this index on are moved by a consolidation (`usize::MAX`: none).
    moved_pods_from: usize,
    /// Under `PackingPolicy::CostOptimal`, during one candidate run: which types each pod's
    /// group may use (see `packing`). `None` (always under `Upstream`): any.
    pod_groups: Option<packing::PodGroupTypes>,
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

    /// What the types of `types` offer beyond their daemonset overhead (cached per set).
    fn type_rooms(&self, types: &Bits) -> Rc<TypeRooms> {
        if let Some(rooms) = self.rooms_cache.borrow().get(types) {
            return rooms.clone();
        }
        let rooms = Rc::new(TypeRooms::new(types.iter().map(|t| {
            let ty = &self.types[t];
            let overhead = &self.daemon_groups[ty.daemon_group].overhead;
            let slots = ty.allocatable.0.len().max(overhead.0.len());
            ResVec(
                (0..slots)
                    .map(|r| ty.allocatable.get(r).saturating_sub(overhead.get(r)))
                    .collect(),
            )
        })));
        let mut cache = self.rooms_cache.borrow_mut();
        // Claims of one pool share a few sets; a bound keeps a solve whose claims narrow their
        // types many different ways from holding a set per placement.
        if cache.len() >= ROOMS_CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(types.clone(), rooms.clone());
        rooms
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

/// Where a DaemonSet's pod would run, which decides how its node requirements are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DaemonTarget {
    /// A NodeClaim from a NodePool template: well-known labels it leaves undefined are only set at
    /// launch, so they do not rule the DaemonSet out.
    Template,
    /// An existing node: its labels are all it has (upstream `StrictlyCompatible`), so a key the
    /// DaemonSet requires and the node lacks means the DaemonSet will not run there.
    ExistingNode,
}

fn daemon_compatible(
    ds: &PodInfo,
    pool_reqs: &Reqs,
    type_reqs: Option<&Reqs>,
    taints_to_tolerate: &[Taint],
    interner: &Interner,
    target: DaemonTarget,
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
            .compatible(&strict, |k| {
                target == DaemonTarget::Template && interner.is_well_known(*k)
            })
            .is_ok()
            && type_reqs.is_none_or(|tr| tr.intersects(&strict).is_ok())
    })
}
