//! Converts each Kubernetes pod once into the compact form the scheduler works on.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::rc::Rc;

use crate::pod::Pod;
use k8s_openapi::api::core::v1::{PodAffinityTerm, Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use karpenter_api::well_known;

use super::VolumeInput;
use super::intern::{FxMap, Interner, Key, Reqs, ResVec, Sym};
use crate::pod::{self, effective_requests, is_terminating};
use crate::requirements::{Requirement, Requirements};

/// A compiled label selector; `None` selects nothing (nil or invalid selectors).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Selector(pub Option<Vec<(Key, SelectorOp)>>);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SelectorOp {
    In(Vec<Sym>),
    NotIn(Vec<Sym>),
    Exists,
    DoesNotExist,
}

impl Selector {
    pub fn compile(
        selector: Option<&LabelSelector>,
        extra: &[(Key, Sym)],
        interner: &mut Interner,
    ) -> Selector {
        let Some(selector) = selector else {
            return Selector(None);
        };
        let mut terms = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            terms.push((interner.key(k), SelectorOp::In(vec![interner.value(v)])));
        }
        for e in selector.match_expressions.iter().flatten() {
            let key = interner.key(&e.key);
            let mut values: Vec<Sym> = e
                .values
                .iter()
                .flatten()
                .map(|v| interner.value(v))
                .collect();
            values.sort();
            let op = match e.operator.as_str() {
                "In" => SelectorOp::In(values),
                "NotIn" => SelectorOp::NotIn(values),
                "Exists" => SelectorOp::Exists,
                "DoesNotExist" => SelectorOp::DoesNotExist,
                _ => return Selector(None),
            };
            terms.push((key, op));
        }
        for (k, v) in extra {
            terms.push((*k, SelectorOp::In(vec![*v])));
        }
        terms.sort_by_key(|t| t.0);
        Selector(Some(terms))
    }

    /// A term every matching label set must satisfy with one of a few values: the key and the
    /// values of its first `In` term (`None`: no such term, or the selector matches nothing).
    pub fn anchor(&self) -> Option<(Key, &[Sym])> {
        self.0.as_ref()?.iter().find_map(|(key, op)| match op {
            SelectorOp::In(values) => Some((*key, values.as_slice())),
            _ => None,
        })
    }

    /// Whether the (sorted) labels match.
    pub fn matches(&self, labels: &[(Key, Sym)]) -> bool {
        let Some(terms) = &self.0 else { return false };
        terms.iter().all(|(key, op)| {
            let value = labels
                .binary_search_by(|(k, _)| k.cmp(key))
                .ok()
                .map(|i| labels[i].1);
            match (op, value) {
                (SelectorOp::In(vs), Some(v)) => vs.contains(&v),
                (SelectorOp::NotIn(vs), Some(v)) => !vs.contains(&v),
                (SelectorOp::NotIn(_), None) => true,
                (SelectorOp::Exists, v) => v.is_some(),
                (SelectorOp::DoesNotExist, v) => v.is_none(),
                (SelectorOp::In(_), None) => false,
            }
        })
    }
}

/// The namespaces an affinity term applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Namespaces {
    All,
    Some(Vec<Sym>),
}

impl Namespaces {
    pub fn contains(&self, ns: Sym) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Some(list) => list.contains(&ns),
        }
    }
}

/// A pod (anti-)affinity term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AffinityTerm {
    pub key: Key,
    pub namespaces: Namespaces,
    pub selector: Selector,
    pub weight: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SpreadTerm {
    pub key: Key,
    pub max_skew: u32,
    pub min_domains: Option<u32>,
    pub schedule_anyway: bool,
    pub selector: Selector,
    pub honor_affinity: bool,
    pub honor_taints: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct HostPort {
    pub ip: String,
    pub port: i32,
    pub protocol: String,
}

impl HostPort {
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let unspecified = |ip: &str| ip.is_empty() || ip == "0.0.0.0" || ip == "::";
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || unspecified(&self.ip) || unspecified(&other.ip))
    }
}

pub(crate) fn ports_conflict(a: &[HostPort], b: &[HostPort]) -> Option<HostPort> {
    a.iter().find(|p| b.iter().any(|q| p.conflicts(q))).cloned()
}

/// Everything the scheduler needs to know about one pod, computed once. Identical for the
/// replicas of a Deployment (no name or index), so pending pods share one ([`PendingPod`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PodInfo {
    pub ns: Option<Sym>,
    /// Sorted by key.
    pub labels: Vec<(Key, Sym)>,
    pub requests: ResVec,
    pub tolerations: Vec<Toleration>,
    pub node_selector: Reqs,
    /// ORed required node-affinity terms (empty: none).
    pub required_terms: Vec<Reqs>,
    /// Preferred node-affinity terms, heaviest first.
    pub preferred_terms: Vec<Reqs>,
    pub affinity_required: Vec<AffinityTerm>,
    pub affinity_preferred: Vec<AffinityTerm>,
    pub anti_required: Vec<AffinityTerm>,
    pub anti_preferred: Vec<AffinityTerm>,
    pub spreads: Vec<SpreadTerm>,
    pub host_ports: Vec<HostPort>,
    /// Volume topology alternatives (empty: unconstrained).
    pub volume_alternatives: Vec<Reqs>,
    /// (CSI driver, PVC id) per persistent volume claim the pod uses.
    pub volumes: Vec<(String, String)>,
    pub is_daemonset: bool,
    /// Being deleted: a bound pod that keeps its resources but is not counted for topology.
    pub terminating: bool,
    /// Why the pod cannot be considered at all (bad quantities, restricted labels, ...).
    pub invalid: Option<String>,
    /// Pods requiring `karpenter.sh/nodepool DoesNotExist` are not Karpenter's to place.
    pub ignored: bool,
}

// `Toleration` has no `Eq`/`Hash`; it holds only strings and integers, so equality is total.
impl Eq for PodInfo {}

impl Hash for PodInfo {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Tolerations by their identifying fields (equal tolerations hash equally).
        for t in &self.tolerations {
            t.key.hash(state);
            t.operator.hash(state);
            t.value.hash(state);
            t.effect.hash(state);
            t.toleration_seconds.hash(state);
        }
        self.ns.hash(state);
        self.labels.hash(state);
        self.requests.hash(state);
        self.node_selector.hash(state);
        self.required_terms.hash(state);
        self.preferred_terms.hash(state);
        self.affinity_required.hash(state);
        self.affinity_preferred.hash(state);
        self.anti_required.hash(state);
        self.anti_preferred.hash(state);
        self.spreads.hash(state);
        self.host_ports.hash(state);
        self.volume_alternatives.hash(state);
        self.volumes.hash(state);
        self.is_daemonset.hash(state);
        self.terminating.hash(state);
        self.invalid.hash(state);
        self.ignored.hash(state);
    }
}

/// A pod given to `solve`: its index and its compiled form, shared with identical pods.
#[derive(Clone, Debug)]
pub(crate) struct PendingPod {
    /// Index into the pods given to `solve`.
    pub index: usize,
    /// Index of its [`PodInfo`] among the distinct ones (per-shape data such as topology groups).
    pub shape: usize,
    info: Rc<PodInfo>,
}

impl Deref for PendingPod {
    type Target = PodInfo;
    fn deref(&self) -> &PodInfo {
        &self.info
    }
}

/// The distinct compiled pods of a pass, each shared behind one `Rc`: identical pods (the
/// replicas of a Deployment) compile to equal [`PodInfo`]s, and at 10,000-200,000 pods a private
/// copy each would cost more memory than the solve itself. A shape is its index, in first-seen
/// order.
#[derive(Default)]
pub(crate) struct PodShapes {
    ids: FxMap<Rc<PodInfo>, usize>,
    shapes: Vec<Rc<PodInfo>>,
}

impl PodShapes {
    /// The shape of `info`: an earlier equal one's, or a new one.
    pub(crate) fn shape_of(&mut self, info: PodInfo) -> usize {
        if let Some(&shape) = self.ids.get(&info) {
            return shape;
        }
        let info = Rc::new(info);
        self.shapes.push(Rc::clone(&info));
        self.ids.insert(info, self.shapes.len() - 1);
        self.shapes.len() - 1
    }

    /// The shared info of `info`'s shape.
    pub(crate) fn share(&mut self, info: PodInfo) -> Rc<PodInfo> {
        let shape = self.shape_of(info);
        Rc::clone(&self.shapes[shape])
    }

    pub(crate) fn into_shapes(self) -> Vec<Rc<PodInfo>> {
        self.shapes
    }
}

/// Compiles the pending pods, sharing one [`PodInfo`] between identical pods ([`PodShapes`]).
/// A caller may give the same `Pod` many times (e.g. one `Arc<Pod>` per replica): consecutive
/// references to one `Pod` are compiled once, which keeps a million replicas cheap.
/// Returns the pods and the distinct infos in first-seen order.
pub(crate) fn compile_pending<P: Borrow<Pod>>(
    pods: &[P],
    ctx: &CompileContext,
    interner: &mut Interner,
) -> (Vec<PendingPod>, Vec<Rc<PodInfo>>) {
    let mut shapes = PodShapes::default();
    // The previous pod and its shape: the same address within `pods` is the same pod.
    let mut previous: Option<(*const Pod, usize)> = None;
    let pending = pods
        .iter()
        .enumerate()
        .map(|(index, pod)| {
            let pod: &Pod = pod.borrow();
            let shape = match previous {
                Some((address, shape)) if std::ptr::eq(address, pod) => shape,
                _ => shapes.shape_of(compile_pod(pod, ctx, interner)),
            };
            previous = Some((pod, shape));
            PendingPod {
                index,
                shape,
                info: Rc::clone(&shapes.shapes[shape]),
            }
        })
        .collect();
    (pending, shapes.into_shapes())
}

impl PodInfo {
    pub fn cpu(&self) -> i64 {
        self.requests.get(super::intern::CPU)
    }
    pub fn memory(&self) -> i64 {
        self.requests.get(super::intern::MEMORY)
    }
}

pub(crate) struct CompileContext<'a> {
    pub namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    pub volumes: &'a VolumeInput,
}

fn sorted_labels(
    labels: Option<&BTreeMap<String, String>>,
    interner: &mut Interner,
) -> Vec<(Key, Sym)> {
    let mut out: Vec<(Key, Sym)> = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| (interner.key(k), interner.value(v)))
        .collect();
    out.sort_by_key(|(k, _)| *k);
    out
}

fn affinity_term(
    term: &PodAffinityTerm,
    weight: i32,
    pod_ns: &str,
    ctx: &CompileContext,
    interner: &mut Interner,
) -> AffinityTerm {
    let key = interner.key(well_known::normalize_label_key(&term.topology_key));
    let explicit = term.namespaces.clone().unwrap_or_default();
    let namespaces = match &term.namespace_selector {
        Some(sel)
            if sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && sel.match_expressions.as_ref().is_none_or(|m| m.is_empty()) =>
        {
            Namespaces::All
        }
        Some(sel) => {
            let compiled = Selector::compile(Some(sel), &[], interner);
            let mut list: Vec<Sym> = explicit.iter().map(|n| interner.value(n)).collect();
            for (name, labels) in ctx.namespaces {
                if compiled.matches(&sorted_labels(Some(labels), interner)) {
                    list.push(interner.value(name));
                }
            }
            list.sort();
            list.dedup();
            Namespaces::Some(list)
        }
        None if explicit.is_empty() => Namespaces::Some(vec![interner.value(pod_ns)]),
        None => {
            let mut list: Vec<Sym> = explicit.iter().map(|n| interner.value(n)).collect();
            list.sort();
            list.dedup();
            Namespaces::Some(list)
        }
    };
    AffinityTerm {
        key,
        namespaces,
        selector: Selector::compile(term.label_selector.as_ref(), &[], interner),
        weight,
    }
}

fn spread_term(
    tsc: &TopologySpreadConstraint,
    labels: &[(Key, Sym)],
    interner: &mut Interner,
) -> SpreadTerm {
    // matchLabelKeys: `key In [the pod's value]` for each key the pod has.
    let mut extra = Vec::new();
    for k in tsc.match_label_keys.iter().flatten() {
        let key = interner.key(k);
        if let Ok(i) = labels.binary_search_by(|(lk, _)| lk.cmp(&key)) {
            extra.push((key, labels[i].1));
        }
    }
    let selector = Selector::compile(tsc.label_selector.as_ref(), &extra, interner);
    SpreadTerm {
        key: interner.key(well_known::normalize_label_key(&tsc.topology_key)),
        max_skew: tsc.max_skew.max(1) as u32,
        min_domains: tsc.min_domains.filter(|m| *m > 0).map(|m| m as u32),
        schedule_anyway: tsc.when_unsatisfiable == "ScheduleAnyway",
        selector,
        honor_affinity: tsc.node_affinity_policy.as_deref() != Some("Ignore"),
        honor_taints: tsc.node_taints_policy.as_deref() == Some("Honor"),
    }
}

/// Converts a pod's requirements, rejecting keys pods may not select: the hostname, and the
/// `karpenter.sh` domain except its well-known labels (`karpenter.sh/nodepool`, capacity type).
fn checked_reqs(
    reqs: Result<Requirements, crate::requirements::RequirementError>,
    what: &str,
) -> Result<Requirements, String> {
    let reqs = reqs.map_err(|e| format!("{what}: {e}"))?;
    for key in reqs.keys() {
        if key == well_known::HOSTNAME_LABEL
            || (!well_known::is_well_known_label(key)
                && well_known::restricted_label_reason(key).is_some())
        {
            let reason = well_known::restricted_label_reason(key).unwrap_or("restricted");
            return Err(format!("{what}: label {key:?} may not be used: {reason}"));
        }
    }
    Ok(reqs)
}

/// Why a pod with `spec.resourceClaims` is not provisioned for (upstream's `DRAError` text).
pub(crate) const DRA_UNSUPPORTED: &str =
    "pod has Dynamic Resource Allocation requirements that are not yet supported by Karpenter";

pub(crate) fn compile_pod(pod: &Pod, ctx: &CompileContext, interner: &mut Interner) -> PodInfo {
    let namespace = pod::namespace(pod).to_string();
    let mut info = PodInfo {
        ns: Some(interner.value(&namespace)),
        labels: sorted_labels(pod.metadata.labels.as_ref(), interner),
        ..Default::default()
    };
    info.is_daemonset = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    info.terminating = is_terminating(pod);
    match effective_requests(pod) {
        Ok(r) => info.requests = interner.resources(&r),
        Err(e) => info.invalid = Some(e.to_string()),
    }
    let Some(spec) = pod.spec.as_ref() else {
        return info;
    };
    // Upstream's default (`--ignore-dra-requests=true`), and karpenter-rs has no DRA allocator:
    // a node launched for such a pod could not prove it gets the devices the claims ask for.
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) && info.invalid.is_none() {
        info.invalid = Some(DRA_UNSUPPORTED.to_string());
    }
    info.tolerations = spec.tolerations().to_vec();
    let mut problems = Vec::new();
    if let Some(sel) = &spec.node_selector {
        match checked_reqs(
            Ok(Requirements::from_labels(sel.iter())),
            "spec.nodeSelector",
        ) {
            Ok(r) => info.node_selector = interner.reqs(&r),
            Err(e) => problems.push(e),
        }
    }
    let affinity = spec.affinity.as_ref();
    let node_affinity = affinity.and_then(|a| a.node_affinity.as_ref());
    if let Some(required) = node_affinity.and_then(|n| {
        n.required_during_scheduling_ignored_during_execution
            .as_ref()
    }) {
        for (i, term) in required.node_selector_terms.iter().enumerate() {
            let what = format!("spec.affinity.nodeAffinity.required.nodeSelectorTerms[{i}]");
            match checked_reqs(Requirements::from_term(term), &what) {
                Ok(r) => info.required_terms.push(interner.reqs(&r)),
                Err(e) => problems.push(e),
            }
        }
    }
    if let Some(preferred) = node_affinity.and_then(|n| {
        n.preferred_during_scheduling_ignored_during_execution
            .as_ref()
    }) {
        let mut terms: Vec<(i32, Reqs)> = Vec::new();
        for p in preferred {
            // Invalid preferences are simply not honoured.
            if let Ok(r) = Requirements::from_term(&p.preference) {
                terms.push((p.weight, interner.reqs(&r)));
            }
        }
        terms.sort_by_key(|t| std::cmp::Reverse(t.0));
        info.preferred_terms = terms.into_iter().map(|(_, r)| r).collect();
    }
    let ns = namespace.clone();
    if let Some(pa) = affinity.and_then(|a| a.pod_affinity.as_ref()) {
        for t in pa
            .required_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            info.affinity_required
                .push(affinity_term(t, 0, &ns, ctx, interner));
        }
        for w in pa
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            info.affinity_preferred.push(affinity_term(
                &w.pod_affinity_term,
                w.weight,
                &ns,
                ctx,
                interner,
            ));
        }
        info.affinity_preferred
            .sort_by_key(|t| std::cmp::Reverse(t.weight));
    }
    if let Some(pa) = affinity.and_then(|a| a.pod_anti_affinity.as_ref()) {
        for t in pa
            .required_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            info.anti_required
                .push(affinity_term(t, 0, &ns, ctx, interner));
        }
        for w in pa
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            info.anti_preferred.push(affinity_term(
                &w.pod_affinity_term,
                w.weight,
                &ns,
                ctx,
                interner,
            ));
        }
        info.anti_preferred
            .sort_by_key(|t| std::cmp::Reverse(t.weight));
    }
    for tsc in spec.topology_spread_constraints() {
        let labels = info.labels.clone();
        info.spreads.push(spread_term(tsc, &labels, interner));
    }
    for c in spec.containers.iter().chain(spec.init_containers()) {
        for p in c.ports.iter().flatten() {
            if let Some(port) = p.host_port.filter(|p| *p != 0) {
                info.host_ports.push(HostPort {
                    ip: p.host_ip.clone().unwrap_or_default(),
                    port,
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                });
            }
        }
    }
    match volume_topology(pod, &namespace, ctx.volumes) {
        Ok((alternatives, volumes)) => {
            info.volume_alternatives = alternatives.iter().map(|r| interner.reqs(r)).collect();
            info.volumes = volumes;
        }
        Err(e) => problems.push(e),
    }
    if let Some(r) = info
        .node_selector
        .get(&interner.key(well_known::NODEPOOL_LABEL))
        && r.operator() == crate::requirements::Operator::DoesNotExist
    {
        info.ignored = true;
    }
    if !problems.is_empty() && info.invalid.is_none() {
        info.invalid = Some(format!("ignoring pod, {}", problems.join("; ")));
    }
    info
}

/// Requirement alternatives, and (CSI driver, claim) pairs.
type VolumeTopology = (Vec<Requirements>, Vec<(String, String)>);

/// Volume topology alternatives and (driver, claim) pairs for a pod's persistent volume claims.
fn volume_topology(
    pod: &Pod,
    namespace: &str,
    volumes: &VolumeInput,
) -> Result<VolumeTopology, String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok((Vec::new(), Vec::new()));
    };
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let mut per_volume: Vec<Vec<Requirements>> = Vec::new();
    let mut used = Vec::new();
    for v in spec.volumes.iter().flatten() {
        let claim_name = if let Some(pvc) = &v.persistent_volume_claim {
            pvc.claim_name.clone()
        } else if v.ephemeral.is_some() {
            format!("{pod_name}-{}", v.name)
        } else {
            continue;
        };
        let Some(claim) = volumes.claims.iter().find(|c| {
            c.metadata.name.as_deref() == Some(claim_name.as_str())
                && c.metadata.namespace.as_deref().unwrap_or("default") == namespace
        }) else {
            if v.ephemeral.is_some() {
                continue; // not created yet: no constraint
            }
            return Err(format!(
                "persistentvolumeclaim {namespace}/{claim_name} not found"
            ));
        };
        // Upstream's pod validation: such claims can never be satisfied by a new node.
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!(
                "persistentvolumeclaim {namespace}/{claim_name} is being deleted"
            ));
        }
        if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            return Err(format!(
                "persistentvolumeclaim {namespace}/{claim_name} is Lost"
            ));
        }
        let claim_spec = claim.spec.clone().unwrap_or_default();
        let bound = claim_spec.volume_name.as_ref().and_then(|pv| {
            volumes
                .volumes
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(pv.as_str()))
        });
        let class = claim_spec.storage_class_name.as_ref().and_then(|sc| {
            volumes
                .storage_classes
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(sc.as_str()))
        });
        let mut alternatives = Vec::new();
        let driver;
        if let Some(pv) = bound {
            if pv.metadata.deletion_timestamp.is_some() {
                return Err(format!(
                    "persistentvolume {} bound to {namespace}/{claim_name} is being deleted",
                    pv.metadata.name.clone().unwrap_or_default()
                ));
            }
            let pv_spec = pv.spec.clone().unwrap_or_default();
            driver = pv_spec
                .csi
                .as_ref()
                .map(|c| c.driver.clone())
                .unwrap_or_default();
            let local = pv_spec.local.is_some() || pv_spec.host_path.is_some();
            for term in pv_spec
                .node_affinity
                .and_then(|a| a.required)
                .map(|r| r.node_selector_terms)
                .unwrap_or_default()
            {
                let mut reqs = Requirements::from_term(&term).map_err(|e| {
                    format!(
                        "persistentvolume {}: {e}",
                        pv.metadata.name.clone().unwrap_or_default()
                    )
                })?;
                if local {
                    reqs.remove(&well_known::HOSTNAME_LABEL.to_string());
                }
                alternatives.push(reqs);
            }
        } else {
            let Some(class) = class else {
                if claim_spec.storage_class_name.is_some() {
                    return Err(format!(
                        "storageclass {:?} of persistentvolumeclaim {namespace}/{claim_name} not found",
                        claim_spec.storage_class_name.unwrap_or_default()
                    ));
                }
                return Err(format!(
                    "persistentvolumeclaim {namespace}/{claim_name} is unbound and has no storage class"
                ));
            };
            if class.volume_binding_mode.as_deref() == Some("Immediate") {
                return Err(format!(
                    "persistentvolumeclaim {namespace}/{claim_name} is unbound but its storageclass {:?} binds Immediate",
                    class.metadata.name.clone().unwrap_or_default()
                ));
            }
            driver = class.provisioner.clone();
            for term in class.allowed_topologies.iter().flatten() {
                let mut reqs = Requirements::new();
                for e in term.match_label_expressions.iter().flatten() {
                    reqs.add_str(&e.key, Requirement::is_in(e.values.iter().cloned()));
                }
                alternatives.push(reqs);
            }
        }
        used.push((driver, format!("{namespace}/{claim_name}")));
        if alternatives.iter().any(|a| a.is_empty()) || alternatives.is_empty() {
            continue;
        }
        per_volume.push(alternatives);
    }
    // Cross product, keeping mutually intersecting combinations (all if none intersect).
    let mut combos: Vec<Requirements> = vec![Requirements::new()];
    for alternatives in &per_volume {
        let mut all = Vec::new();
        let mut intersecting = Vec::new();
        for base in &combos {
            for alt in alternatives {
                let ok = base.intersects(alt).is_ok();
                let merged = base.intersection(alt);
                if ok {
                    intersecting.push(merged.clone());
                }
                all.push(merged);
            }
        }
        combos = if intersecting.is_empty() {
            all
        } else {
            intersecting
        };
    }
    if per_volume.is_empty() {
        combos.clear();
    }
    Ok((combos, used))
}

/// Namespace name → labels.
pub(crate) fn namespace_labels(
    namespaces: &[k8s_openapi::api::core::v1::Namespace],
) -> BTreeMap<String, BTreeMap<String, String>> {
    namespaces
        .iter()
        .filter_map(|n| {
            Some((
                n.metadata.name.clone()?,
                n.metadata.labels.clone().unwrap_or_default(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::benchmark;

    /// Runs `f` with no namespaces, no volumes and a fresh interner.
    fn with_empty_context<T>(f: impl FnOnce(&CompileContext, &mut Interner) -> T) -> T {
        let namespaces = BTreeMap::new();
        let volumes = VolumeInput::default();
        let ctx = CompileContext {
            namespaces: &namespaces,
            volumes: &volumes,
        };
        f(&ctx, &mut Interner::new(&[]))
    }

    #[test]
    fn replicas_share_one_compiled_pod_and_different_pods_do_not() {
        let mut pods = benchmark::preference_pods(3, 7);
        // Same spec under other names: the replicas of one Deployment.
        assert_ne!(pods[0].metadata.name, pods[1].metadata.name);
        let mut other = pods[0].clone();
        if let Some(labels) = other.metadata.labels.as_mut() {
            labels.insert("app".to_string(), "other".to_string());
        }
        pods.push(other);
        let (pending, shapes) =
            with_empty_context(|ctx, interner| compile_pending(&pods, ctx, interner));
        assert_eq!(
            shapes.len(),
            2,
            "three replicas and one pod with other labels"
        );
        let indices: Vec<(usize, usize)> = pending.iter().map(|p| (p.index, p.shape)).collect();
        assert_eq!(indices, vec![(0, 0), (1, 0), (2, 0), (3, 1)]);
        assert!(Rc::ptr_eq(&pending[0].info, &pending[2].info));
        assert_eq!(
            pending[3].anti_preferred.len(),
            2,
            "the info is reachable through the pod"
        );
    }

    #[test]
    fn pod_shapes_share_equal_infos_and_keep_terminating_pods_apart() {
        // Bound pods go through `PodShapes::share` one by one: replicas must come back as one
        // `Rc`, and a terminating replica (which counts differently for topology) as another.
        let pods = benchmark::preference_pods(2, 7);
        let mut terminating = pods[0].clone();
        terminating.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        let mut shapes = PodShapes::default();
        let [first, replica, ending] = with_empty_context(|ctx, interner| {
            [&pods[0], &pods[1], &terminating]
                .map(|pod| shapes.share(compile_pod(pod, ctx, interner)))
        });
        assert!(Rc::ptr_eq(&first, &replica), "replicas share one info");
        assert!(
            !Rc::ptr_eq(&first, &ending),
            "a terminating pod is its own shape"
        );
        assert!(ending.terminating && !first.terminating);
        assert_eq!(shapes.into_shapes().len(), 2);
    }

    #[test]
    fn one_pod_given_many_times_is_compiled_once() {
        let pods = benchmark::preference_pods(2, 7);
        let shared = std::sync::Arc::new(pods[0].clone());
        let other = std::sync::Arc::new(pods[1].clone());
        let given = vec![shared.clone(), shared.clone(), other, shared];
        let (pending, shapes) =
            with_empty_context(|ctx, interner| compile_pending(&given, ctx, interner));
        assert_eq!(shapes.len(), 1, "replicas of one spec under two names");
        let indices: Vec<usize> = pending.iter().map(|p| p.index).collect();
        assert_eq!(indices, vec![0, 1, 2, 3]);
        assert!(Rc::ptr_eq(&pending[0].info, &pending[3].info));
    }
}
