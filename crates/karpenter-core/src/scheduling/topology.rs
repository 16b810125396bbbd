//! Topology groups: spread constraints, pod affinity and anti-affinity (and the inverse
//! anti-affinity of pods already placed), counted per domain of a topology key.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::compile::{Namespaces, Selector};
use super::intern::{FxMap, Interner, Key, Req, Reqs, Sym};
use crate::taints;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum GroupKind {
    Spread {
        max_skew: u32,
        min_domains: Option<u32>,
    },
    Affinity,
    AntiAffinity,
    /// Anti-affinity seen from the other side: pods this selects may only go to empty domains.
    InverseAntiAffinity,
}

/// Which nodes a spread constraint counts (nodeAffinityPolicy / nodeTaintsPolicy = Honor).
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeFilter {
    /// nodeSelector and ORed required terms the node must satisfy.
    pub affinity: Option<(Reqs, Vec<Reqs>)>,
    /// Tolerations the node's taints must be tolerated by.
    pub tolerations: Option<Vec<Toleration>>,
}

impl NodeFilter {
    /// No node selector or required terms to check.
    fn is_trivial_affinity(&self) -> bool {
        self.affinity.as_ref().is_none_or(|(selector, terms)| {
            selector.is_empty() && terms.iter().all(|t| t.is_empty())
        })
    }

    /// Matches every node (no node selector, terms or taint policy to check).
    pub fn is_trivial(&self) -> bool {
        self.tolerations.is_none()
            && self.affinity.as_ref().is_none_or(|(selector, terms)| {
                selector.is_empty() && terms.iter().all(|t| t.is_empty())
            })
    }

    /// Whether an existing node with these labels may be a domain of the spread: with
    /// `nodeAffinityPolicy: Honor` it must satisfy the pod's nodeSelector and one of its required
    /// terms, and a node's labels are all it has (a key the pod requires and the node lacks fails,
    /// as upstream's `TopologyNodeFilter` checks nodes). Taints are checked separately.
    pub fn admits_node_labels(&self, node_reqs: &Reqs) -> bool {
        let Some((selector, terms)) = &self.affinity else {
            return true;
        };
        let strict = |_: &Key| false;
        if terms.is_empty() {
            node_reqs.compatible(selector, strict).is_ok()
        } else {
            terms.iter().any(|t| {
                node_reqs
                    .compatible(&selector.intersection(t), strict)
                    .is_ok()
            })
        }
    }

    pub fn matches(&self, node_reqs: &Reqs, node_taints: &[Taint], interner: &Interner) -> bool {
        if let Some((selector, terms)) = &self.affinity {
            let allow = |k: &Key| interner.is_well_known(*k);
            let ok = if terms.is_empty() {
                node_reqs.compatible(selector, allow).is_ok()
            } else {
                terms.iter().any(|t| {
                    node_reqs
                        .compatible(&selector.intersection(t), allow)
                        .is_ok()
                })
            };
            if !ok {
                return false;
            }
        }
        if let Some(tolerations) = &self.tolerations {
            return node_taints
                .iter()
                .filter(|t| t.effect != taints::PREFER_NO_SCHEDULE)
                .all(|t| taints::tolerates(tolerations, t));
        }
        true
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub kind: GroupKind,
    pub key: Key,
    pub namespaces: Namespaces,
    pub selector: Selector,
    pub filter: NodeFilter,
    /// Count per domain value id, for the domains counted so far. A map, not a vector indexed by
    /// value id: hostname ids grow with the NodeClaims of the solve, so a dense vector per group
    /// would cost groups × NodeClaims.
    counts: FxMap<u32, u32>,
    /// Domains with a non-zero count, in first-recorded order.
    nonzero: Vec<Sym>,
    /// In-flight NodeClaim hostnames with a non-zero count (counts never decrease, so for
    /// anti-affinity this is the number of claims that can never take a selected pod).
    pub claims_counted: usize,
}

impl Group {
    pub fn new(
        kind: GroupKind,
        key: Key,
        namespaces: Namespaces,
        selector: Selector,
        filter: NodeFilter,
    ) -> Self {
        Group {
            kind,
            key,
            namespaces,
            selector,
            filter,
            counts: FxMap::default(),
            nonzero: Vec::new(),
            claims_counted: 0,
        }
    }

    pub fn count(&self, domain: Sym) -> u32 {
        if self.counts.is_empty() {
            return 0;
        }
        self.counts.get(&domain.id).copied().unwrap_or(0)
    }

    /// Counts one pod in `domain`; true when the domain was empty before.
    pub fn record(&mut self, domain: Sym) -> bool {
        let count = self.counts.entry(domain.id).or_insert(0);
        let first = *count == 0;
        *count = count.saturating_add(1);
        if first {
            self.nonzero.push(domain);
        }
        first
    }

    /// Takes back one [`record`](Self::record) of `domain`.
    pub fn unrecord(&mut self, domain: Sym) {
        if let Some(count) = self.counts.get_mut(&domain.id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.nonzero.retain(|d| *d != domain);
            }
        }
    }

    /// Whether this group forbids selected pods from every domain already counted.
    pub fn is_exclusive(&self) -> bool {
        matches!(
            self.kind,
            GroupKind::AntiAffinity | GroupKind::InverseAntiAffinity
        )
    }

    /// Whether the group counts pods with these labels in this namespace.
    pub fn selects(&self, ns: Option<Sym>, labels: &[(Key, Sym)]) -> bool {
        ns.is_some_and(|ns| self.namespaces.contains(ns)) && self.selector.matches(labels)
    }

    /// Human summary of counts (`a=2, b=0`) over the candidate domains.
    pub fn counts_text(&self, domains: &[Sym], interner: &Interner) -> String {
        let mut parts: Vec<String> = Vec::new();
        for d in domains.iter().chain(self.nonzero.iter()) {
            let text = format!("{}={}", interner.value_str(*d), self.count(*d));
            if !parts.contains(&text) {
                parts.push(text);
            }
        }
        parts.truncate(8);
        parts.join(", ")
    }
}

/// The groups that may select a pod, found from its labels instead of trying every group: a group
/// whose selector has an `In` term is filed under each of that term's (key, value) pairs; the
/// others (rare: only `NotIn`/`Exists`/`DoesNotExist` terms) are tried for every pod. With one
/// group per Deployment this keeps "which groups select each pod shape" linear in the shapes.
pub(crate) struct SelectingIndex {
    by_label: FxMap<(Key, u32), Vec<usize>>,
    unanchored: Vec<usize>,
}

impl SelectingIndex {
    pub fn new(groups: &[Group]) -> Self {
        let mut by_label: FxMap<(Key, u32), Vec<usize>> = FxMap::default();
        let mut unanchored = Vec::new();
        for (gid, g) in groups.iter().enumerate() {
            if g.selector.0.is_none() {
                continue; // selects nothing
            }
            match g.selector.anchor() {
                Some((key, values)) => {
                    for v in values {
                        by_label.entry((key, v.id)).or_default().push(gid);
                    }
                }
                None => unanchored.push(gid),
            }
        }
        SelectingIndex {
            by_label,
            unanchored,
        }
    }

    /// The groups (ascending ids) that select a pod in `ns` with these (sorted) labels.
    pub fn selecting(
        &self,
        groups: &[Group],
        ns: Option<Sym>,
        labels: &[(Key, Sym)],
    ) -> Vec<usize> {
        let mut found: Vec<usize> = labels
            .iter()
            .filter_map(|(k, v)| self.by_label.get(&(*k, v.id)))
            .flatten()
            .chain(&self.unanchored)
            .copied()
            .filter(|&gid| groups[gid].selects(ns, labels))
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }
}

/// A domain value and the taint sets of the pools/nodes that can produce it.
#[derive(Clone, Debug)]
pub(crate) struct Domain {
    pub value: Sym,
    pub providers: Vec<usize>,
}

#[derive(Default)]
pub(crate) struct Topology {
    pub groups: Vec<Group>,
    pub identity: HashMap<String, usize>,
    /// The domain universe per key, in value-string order.
    pub domains: HashMap<Key, Vec<Domain>>,
    pub taint_sets: Vec<Vec<Taint>>,
    /// The labels of the providers (indices into `taint_sets`) that are existing nodes: a spread
    /// honouring node affinity counts a node's domain only if the node admits the pod. Filled
    /// only when some pod has such a spread (the only reader, [`Self::universe`] with a
    /// non-trivial affinity filter); empty otherwise.
    pub node_providers: HashMap<usize, Reqs>,
    pub hostname_key: Key,
    /// While a [`WhatIf`](super::WhatIf) solve runs: every count [`record`](Self::record) made
    /// (group, domain, whether it counted a claim), so the solve can be taken back.
    pub journal: Option<Vec<(usize, Sym, bool)>>,
}

impl Topology {
    /// Registers a group, reusing an identical one. Returns its id and whether it is new.
    pub fn register(&mut self, group: Group) -> (usize, bool) {
        let identity = format!(
            "{:?}|{}|{:?}|{:?}|{:?}|{:?}",
            group.kind,
            group.key,
            group.namespaces,
            group.selector,
            group.filter.affinity,
            group.filter.tolerations
        );
        if let Some(&id) = self.identity.get(&identity) {
            return (id, false);
        }
        let id = self.groups.len();
        self.groups.push(group);
        self.identity.insert(identity, id);
        (id, true)
    }

    pub fn add_domain(&mut self, key: Key, value: Sym, taint_set: usize) {
        let list = self.domains.entry(key).or_default();
        match list.iter_mut().find(|d| d.value == value) {
            Some(d) => {
                if !d.providers.contains(&taint_set) {
                    d.providers.push(taint_set);
                }
            }
            None => list.push(Domain {
                value,
                providers: vec![taint_set],
            }),
        }
    }

    /// Takes `taint_set` away as a provider of `value` (a node taken away by a what-if solve); a
    /// domain nothing provides any more is out of the universe until it is given back.
    pub fn remove_provider(&mut self, key: Key, value: Sym, taint_set: usize) {
        if let Some(d) = self
            .domains
            .get_mut(&key)
            .and_then(|list| list.iter_mut().find(|d| d.value == value))
        {
            d.providers.retain(|&p| p != taint_set);
        }
    }

    pub fn sort_domains(&mut self, interner: &Interner) {
        for list in self.domains.values_mut() {
            list.sort_by(|a, b| interner.value_str(a.value).cmp(interner.value_str(b.value)));
        }
    }

    /// Known domains of `key`; for a spread, those some provider it counts offers (honouring
    /// taints: one whose taints the pod tolerates; honouring node affinity: a NodePool, or an
    /// existing node whose labels admit the pod).
    fn universe<'a>(
        &'a self,
        key: Key,
        filter: Option<&'a NodeFilter>,
    ) -> impl Iterator<Item = Sym> + 'a {
        let tolerations = filter.and_then(|f| f.tolerations.as_deref());
        let affinity = filter.filter(|f| !f.is_trivial_affinity());
        let tolerated = move |p: usize| {
            tolerations.is_none_or(|tol| {
                self.taint_sets[p]
                    .iter()
                    .filter(|t| t.effect != taints::PREFER_NO_SCHEDULE)
                    .all(|t| taints::tolerates(tol, t))
            })
        };
        self.domains
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|d| !d.providers.is_empty())
            .filter_map(move |d| {
                let eligible = match affinity {
                    None => tolerations.is_none() || d.providers.iter().any(|&p| tolerated(p)),
                    // NodePools first (a pool offering the domain settles it), then the
                    // existing nodes, whose labels must admit the pod.
                    Some(f) => {
                        d.providers
                            .iter()
                            .any(|&p| !self.node_providers.contains_key(&p) && tolerated(p))
                            || d.providers.iter().any(|&p| {
                                self.node_providers
                                    .get(&p)
                                    .is_some_and(|labels| f.admits_node_labels(labels))
                                    && tolerated(p)
                            })
                    }
                };
                eligible.then_some(d.value)
            })
    }

    /// Candidate domains on a node: its explicit `In` list, else known domains it allows
    /// (`None` means `Exists`).
    fn candidates(
        &self,
        key: Key,
        node_domains: Option<&Req>,
        filter: Option<&NodeFilter>,
    ) -> Vec<Sym> {
        match node_domains {
            Some(r) if r.operator() == crate::requirements::Operator::In => r.values().to_vec(),
            _ => self
                .universe(key, filter)
                .filter(|d| has(node_domains, d))
                .collect(),
        }
    }

    /// The domains `group` allows a pod into, as a requirement on the group's key; `None` when
    /// none (the constraint cannot be met there).
    pub fn allowed(
        &self,
        gid: usize,
        pod_selected: bool,
        pod_domains: Option<&Req>,
        node_domains: Option<&Req>,
    ) -> Option<Req> {
        let g = &self.groups[gid];
        let self_count = u32::from(pod_selected);
        match g.kind {
            GroupKind::Spread {
                max_skew,
                min_domains,
            } => {
                let global_min = self.spread_global_min(g, pod_domains, min_domains);
                let mut best: Option<(Sym, u32)> = None;
                for d in self.candidates(g.key, node_domains, Some(&g.filter)) {
                    let c = g.count(d) + self_count;
                    if c.saturating_sub(global_min) <= max_skew && best.is_none_or(|(_, bc)| c < bc)
                    {
                        best = Some((d, c));
                    }
                }
                best.map(|(d, _)| Req::is_in([d]))
            }
            GroupKind::Affinity => {
                let candidates = self.candidates(g.key, node_domains, None);
                let occupied: Vec<Sym> = candidates
                    .iter()
                    .copied()
                    .filter(|d| g.count(*d) > 0 && has(pod_domains, d))
                    .collect();
                if !occupied.is_empty() {
                    return Some(Req::is_in(occupied));
                }
                // Bootstrap: a pod selecting itself may start the group where none is yet.
                if pod_selected && !g.nonzero.iter().any(|d| has(pod_domains, d)) {
                    return candidates
                        .into_iter()
                        .find(|d| has(pod_domains, d))
                        .map(|d| Req::is_in([d]));
                }
                None
            }
            GroupKind::AntiAffinity | GroupKind::InverseAntiAffinity => {
                let empty: Vec<Sym> = self
                    .candidates(g.key, node_domains, None)
                    .into_iter()
                    .filter(|d| g.count(*d) == 0 && has(pod_domains, d))
                    .collect();
                (!empty.is_empty()).then(|| Req::is_in(empty))
            }
        }
    }

    /// The smallest pod count over the spread's eligible domains (those the pod may use), or 0
    /// when fewer than `min_domains` are eligible. For hostname spreads it is always 0: a new node
    /// is an empty hostname domain.
    fn spread_global_min(
        &self,
        g: &Group,
        pod_domains: Option<&Req>,
        min_domains: Option<u32>,
    ) -> u32 {
        if g.key == self.hostname_key {
            return 0;
        }
        let mut eligible = 0u32;
        let mut min = u32::MAX;
        for d in self
            .universe(g.key, Some(&g.filter))
            .filter(|d| has(pod_domains, d))
        {
            eligible += 1;
            min = min.min(g.count(d));
        }
        if eligible == 0 || min_domains.is_some_and(|m| eligible < m) {
            0
        } else {
            min
        }
    }

    /// The global minimum a spread group compares a domain's count against, for a pod whose
    /// own requirement on the group's key is `pod_domains`; `None` for other kinds of group.
    /// It changes only when a placement is recorded, so a caller that checks many nodes for
    /// one pod computes it once (see [`allows_any`](Self::allows_any)).
    pub fn spread_min(&self, gid: usize, pod_domains: Option<&Req>) -> Option<u32> {
        let g = &self.groups[gid];
        match g.kind {
            GroupKind::Spread { min_domains, .. } => {
                Some(self.spread_global_min(g, pod_domains, min_domains))
            }
            _ => None,
        }
    }

    /// Allocation-free `allowed(..).is_some()` for a node whose requirement on the key is the
    /// explicit `In` list `node_values`. `known_min` is [`spread_min`](Self::spread_min) for
    /// the same pod when the caller has it (computed here otherwise).
    pub fn allows_any(
        &self,
        gid: usize,
        pod_selected: bool,
        pod_domains: Option<&Req>,
        node_values: &[Sym],
        known_min: Option<u32>,
    ) -> bool {
        let g = &self.groups[gid];
        let self_count = u32::from(pod_selected);
        match g.kind {
            GroupKind::Spread {
                max_skew,
                min_domains,
            } => {
                let global_min = known_min
                    .unwrap_or_else(|| self.spread_global_min(g, pod_domains, min_domains));
                node_values
                    .iter()
                    .any(|d| (g.count(*d) + self_count).saturating_sub(global_min) <= max_skew)
            }
            GroupKind::Affinity => {
                node_values
                    .iter()
                    .any(|d| g.count(*d) > 0 && has(pod_domains, d))
                    || (pod_selected
                        && !g.nonzero.iter().any(|d| has(pod_domains, d))
                        && node_values.iter().any(|d| has(pod_domains, d)))
            }
            GroupKind::AntiAffinity | GroupKind::InverseAntiAffinity => node_values
                .iter()
                .any(|d| g.count(*d) == 0 && has(pod_domains, d)),
        }
    }

    /// Cheap pre-check for hostname groups on a node known to be `hostname`.
    pub fn hostname_allows(&self, gid: usize, pod_selected: bool, hostname: Sym) -> bool {
        let g = &self.groups[gid];
        let c = g.count(hostname);
        match g.kind {
            GroupKind::Spread { max_skew, .. } => c + u32::from(pod_selected) <= max_skew,
            GroupKind::Affinity => c > 0 || (pod_selected && g.nonzero.is_empty()),
            GroupKind::AntiAffinity | GroupKind::InverseAntiAffinity => c == 0,
        }
    }

    /// Records a placement in `gid` on a node whose requirement on the key is `node_domains`.
    /// Anti-affinity counts every domain still possible; spread and affinity only a single one.
    /// `on_claim`: the node is an in-flight NodeClaim (for [`Group::claims_counted`]).
    pub fn record(&mut self, gid: usize, node_domains: Option<&Req>, on_claim: bool) {
        let key = self.groups[gid].key;
        let every = matches!(
            self.groups[gid].kind,
            GroupKind::AntiAffinity | GroupKind::InverseAntiAffinity
        );
        let domains: Vec<Sym> = match node_domains {
            Some(r) if r.operator() == crate::requirements::Operator::In => {
                if !every && r.values().len() != 1 {
                    return;
                }
                r.values().to_vec()
            }
            _ if every => self
                .universe(key, None)
                .filter(|d| has(node_domains, d))
                .collect(),
            _ => return,
        };
        let hostname = key == self.hostname_key;
        for d in domains {
            let claim_counted = self.groups[gid].record(d) && hostname && on_claim;
            if claim_counted {
                self.groups[gid].claims_counted += 1;
            }
            if let Some(journal) = self.journal.as_mut() {
                journal.push((gid, d, claim_counted));
            }
        }
    }
}

impl Topology {
    /// Takes back every count recorded since the journal was started, and stops it.
    pub fn roll_back_journal(&mut self) {
        for (gid, d, claim_counted) in self.journal.take().unwrap_or_default().into_iter().rev() {
            if let Some(g) = self.groups.get_mut(gid) {
                g.unrecord(d);
                if claim_counted {
                    g.claims_counted = g.claims_counted.saturating_sub(1);
                }
            }
        }
    }
}

/// Whether a requirement (`None` = `Exists`) allows `d`.
fn has(req: Option<&Req>, d: &Sym) -> bool {
    req.is_none_or(|r| r.has(d))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    use super::*;

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    /// The index finds exactly the groups a scan of every group finds, whatever the selector.
    #[test]
    fn selecting_index_agrees_with_trying_every_group() {
        let mut interner = Interner::new(&[]);
        let default = interner.value("default");
        let other = interner.value("other");
        let selectors = [
            Some(LabelSelector {
                match_labels: Some([("app".to_string(), "a".to_string())].into()),
                ..Default::default()
            }),
            Some(LabelSelector {
                match_labels: Some([("app".to_string(), "b".to_string())].into()),
                match_expressions: Some(vec![expression("tier", "NotIn", &["db"])]),
            }),
            Some(LabelSelector {
                match_expressions: Some(vec![expression("app", "In", &["a", "b"])]),
                ..Default::default()
            }),
            Some(LabelSelector {
                match_expressions: Some(vec![expression("tier", "Exists", &[])]),
                ..Default::default()
            }),
            Some(LabelSelector::default()),
            None,
        ];
        let groups: Vec<Group> = selectors
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let namespaces = if i % 2 == 0 {
                    Namespaces::All
                } else {
                    Namespaces::Some(vec![default])
                };
                Group::new(
                    GroupKind::AntiAffinity,
                    0,
                    namespaces,
                    Selector::compile(s.as_ref(), &[], &mut interner),
                    NodeFilter::default(),
                )
            })
            .collect();
        let index = SelectingIndex::new(&groups);
        let label_sets: Vec<Vec<(&str, &str)>> = vec![
            vec![],
            vec![("app", "a")],
            vec![("app", "b")],
            vec![("app", "b"), ("tier", "db")],
            vec![("app", "c"), ("tier", "web")],
        ];
        let mut matched_somewhere = 0;
        for labels in &label_sets {
            let mut compiled: Vec<(Key, Sym)> = labels
                .iter()
                .map(|(k, v)| (interner.key(k), interner.value(v)))
                .collect();
            compiled.sort_by_key(|(k, _)| *k);
            for ns in [Some(default), Some(other), None] {
                let scanned: Vec<usize> = (0..groups.len())
                    .filter(|&g| groups[g].selects(ns, &compiled))
                    .collect();
                matched_somewhere += scanned.len();
                assert_eq!(
                    index.selecting(&groups, ns, &compiled),
                    scanned,
                    "labels {labels:?} namespace {ns:?}"
                );
            }
        }
        assert!(matched_somewhere > 5, "the cases select something");
    }

    #[test]
    fn counts_are_per_domain_whatever_the_value_id() {
        let mut g = Group::new(
            GroupKind::AntiAffinity,
            0,
            Namespaces::All,
            Selector(None),
            NodeFilter::default(),
        );
        let far = Sym {
            id: 4_000_000_000,
            int: None,
        };
        let near = Sym { id: 3, int: None };
        assert!(g.record(far));
        assert!(!g.record(far));
        assert!(g.record(near));
        assert_eq!((g.count(far), g.count(near)), (2, 1));
        assert_eq!(g.count(Sym { id: 4, int: None }), 0);
        assert_eq!(g.nonzero, vec![far, near]);
    }
}
