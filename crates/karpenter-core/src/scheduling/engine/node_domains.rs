//! Existing nodes by topology domain, so a pod that a spread or affinity group confines to a
//! few domains looks only at the nodes there.
//!
//! A zonal spread whose emptiest domain has no node (a zone the NodePool offers but nothing runs
//! in yet) allows no existing node at all, and consolidation asks for a place for every pod of
//! every candidate: walking the whole cluster to learn that made each such pod cost a pass over
//! all nodes. A node whose label names one value on the group's key is found under that value;
//! nodes without such a label stay candidates everywhere (the full check decides for them).

use std::collections::BTreeMap;

use super::{Derived, Engine};
use crate::requirements::Operator;
use crate::scheduling::intern::{Key, Sym};

/// For each non-hostname topology key: the nodes (ascending indices) per value they name.
#[derive(Debug, Default)]
pub(super) struct NodeDomains {
    keys: BTreeMap<Key, KeyDomains>,
}

#[derive(Debug, Default)]
struct KeyDomains {
    by_value: BTreeMap<Sym, Vec<usize>>,
    /// Nodes without exactly one `In` value on the key: not pre-judged.
    other: Vec<usize>,
}

impl Engine {
    /// Indexes the engine's nodes (in their final order) on every non-hostname group key.
    pub(super) fn index_node_domains(&mut self) {
        let mut keys: BTreeMap<Key, KeyDomains> = BTreeMap::new();
        for group in &self.topology.groups {
            if group.key != self.keys.hostname {
                keys.entry(group.key).or_default();
            }
        }
        for (ni, node) in self.nodes.iter().enumerate() {
            for (key, domains) in &mut keys {
                match node.reqs.get(key) {
                    Some(r) if r.operator() == Operator::In && r.values().len() == 1 => {
                        domains.by_value.entry(r.values()[0]).or_default().push(ni);
                    }
                    _ => domains.other.push(ni),
                }
            }
        }
        self.node_domains = NodeDomains { keys };
    }

    /// The only existing nodes that can pass the pod's topology pre-check (ascending), when
    /// one of its groups rules out at least half of the cluster; `None` to walk every node.
    pub(super) fn topology_shortlist(&self, d: &Derived) -> Option<Vec<usize>> {
        let mut best: Option<(usize, Key, usize)> = None; // (nodes, key, position in d.groups)
        for (at, (&(gid, selected), &min)) in d.groups.iter().zip(&d.spread_min).enumerate() {
            let key = self.topology.groups[gid].key;
            let Some(domains) = self.node_domains.keys.get(&key) else {
                continue;
            };
            let allowed: usize = domains.other.len()
                + domains
                    .by_value
                    .iter()
                    .filter(|(value, _)| {
                        self.topology.allows_any(
                            gid,
                            selected,
                            d.strict.get(&key),
                            std::slice::from_ref(*value),
                            min,
                        )
                    })
                    .map(|(_, nodes)| nodes.len())
                    .sum::<usize>();
            if best.is_none_or(|(n, _, _)| allowed < n) {
                best = Some((allowed, key, at));
            }
        }
        let (allowed, key, at) = best?;
        if allowed.saturating_mul(2) > self.nodes.len() {
            return None;
        }
        let (gid, selected) = d.groups[at];
        let min = d.spread_min[at];
        let domains = self.node_domains.keys.get(&key)?;
        let mut nodes = domains.other.clone();
        for (value, in_domain) in &domains.by_value {
            if self.topology.allows_any(
                gid,
                selected,
                d.strict.get(&key),
                std::slice::from_ref(value),
                min,
            ) {
                nodes.extend(in_domain);
            }
        }
        nodes.sort_unstable();
        Some(nodes)
    }
}
