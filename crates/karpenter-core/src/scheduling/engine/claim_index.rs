//! In-flight NodeClaims indexed for the per-pod scan.
//!
//! Pods try in-flight claims fewest pods first (ties: oldest first). A plain ordered list makes
//! every pod walk past every claim its requirements rule out (a zonal affinity pod past all the
//! claims pinned to other zones), which is quadratic at scale. Claims are therefore grouped by
//! *signature* — (NodePool, requirements) — and each group keeps its claims ordered by
//! (pod count, index). Claims of one signature answer the requirement-level checks (pool taints,
//! topology on the keys the requirements pin) identically, so a pod checks each signature once and
//! walks only the groups that can take it, merged back into the global order. A workload has a
//! handful of signatures (one per combination of pinned zone, capacity type, ...), so the merge
//! is cheap, and moving a claim after a placement is two `O(log n)` set operations instead of
//! shifting a vector of every claim.

use std::collections::BTreeSet;
use std::collections::btree_set;
use std::iter::Peekable;

use super::super::intern::{FxMap, Reqs};

/// One (NodePool, requirements) combination and its claims.
pub(super) struct Signature {
    pub pool: usize,
    pub reqs: Reqs,
    /// (pod count, claim index): the order claims are tried in.
    claims: BTreeSet<(u32, u32)>,
}

#[derive(Default)]
pub(super) struct ClaimIndex {
    /// Per pool: requirements → signature id.
    ids: Vec<FxMap<Reqs, u32>>,
    signatures: Vec<Signature>,
    /// Claims in the index (all signatures).
    len: usize,
}

impl ClaimIndex {
    pub fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The signature id of (`pool`, `reqs`), created on first use.
    pub fn signature(&mut self, pool: usize, reqs: &Reqs) -> u32 {
        if self.ids.len() <= pool {
            self.ids.resize_with(pool + 1, FxMap::default);
        }
        if let Some(&id) = self.ids[pool].get(reqs) {
            return id;
        }
        let id = u32::try_from(self.signatures.len()).unwrap_or(u32::MAX);
        self.signatures.push(Signature {
            pool,
            reqs: reqs.clone(),
            claims: BTreeSet::new(),
        });
        self.ids[pool].insert(reqs.clone(), id);
        id
    }

    pub fn insert(&mut self, signature: u32, pods: usize, claim: usize) {
        if let Some(s) = self.signatures.get_mut(signature as usize)
            && s.claims.insert(order_key(pods, claim))
        {
            self.len += 1;
        }
    }

    pub fn remove(&mut self, signature: u32, pods: usize, claim: usize) {
        if let Some(s) = self.signatures.get_mut(signature as usize)
            && s.claims.remove(&order_key(pods, claim))
        {
            self.len -= 1;
        }
    }

    /// The claims of `signatures`, fewest pods first (ties: lowest index), as one sequence.
    pub fn in_order(&self, signatures: &[u32]) -> InOrder<'_> {
        InOrder {
            heads: signatures
                .iter()
                .filter_map(|&s| self.signatures.get(s as usize))
                .map(|s| s.claims.iter().peekable())
                .collect(),
        }
    }
}

fn order_key(pods: usize, claim: usize) -> (u32, u32) {
    (
        u32::try_from(pods).unwrap_or(u32::MAX),
        u32::try_from(claim).unwrap_or(u32::MAX),
    )
}

/// A k-way merge of the signatures' ordered claim sets.
pub(super) struct InOrder<'a> {
    heads: Vec<Peekable<btree_set::Iter<'a, (u32, u32)>>>,
}

impl Iterator for InOrder<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let (head, _) = self
            .heads
            .iter_mut()
            .enumerate()
            .filter_map(|(i, h)| h.peek().map(|&&key| (i, key)))
            .min_by_key(|&(_, key)| key)?;
        self.heads[head].next().map(|&(_, claim)| claim as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_signatures_in_pod_count_then_index_order() {
        let mut index = ClaimIndex::default();
        let a = index.signature(0, &Reqs::new());
        let mut pinned = Reqs::new();
        pinned.add(
            1,
            crate::requirements::Requirement::is_in([super::super::super::intern::Sym {
                id: 7,
                int: None,
            }]),
        );
        let b = index.signature(0, &pinned);
        assert_eq!(
            index.signature(0, &Reqs::new()),
            a,
            "same requirements, same signature"
        );
        assert_ne!(a, b);
        index.insert(a, 2, 0);
        index.insert(b, 1, 1);
        index.insert(a, 1, 2);
        index.insert(b, 3, 3);
        assert_eq!(index.len(), 4);
        let all: Vec<usize> = index.in_order(&[a, b]).collect();
        assert_eq!(all, vec![1, 2, 0, 3]);
        let only_b: Vec<usize> = index.in_order(&[b]).collect();
        assert_eq!(only_b, vec![1, 3]);
        // A placement moves claim 2 from (1 pod) to (2 pods) in another signature.
        index.remove(a, 1, 2);
        index.insert(b, 2, 2);
        let all: Vec<usize> = index.in_order(&[a, b]).collect();
        assert_eq!(all, vec![1, 0, 2, 3]);
        assert_eq!(index.len(), 4);
    }
}
