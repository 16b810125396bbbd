//! Freshness of the state's copies: an older copy of an object never replaces a newer one.
//!
//! A copy reaches the state by two roads: the watch stream, and the answer to a write Karpenter
//! made itself (so the next pass sees it before the watch delivers it). The two race: the answer
//! to a create can arrive after the watch already delivered the object and later changes to it
//! (e.g. the lifecycle controller launched it). Overwriting the watched copy with the create
//! answer would leave the state behind the API server with no further event to repair it, and
//! every write based on it would conflict forever.
//!
//! resourceVersions are opaque strings in Kubernetes, but within one resource they are the etcd
//! revision on every real API server, so they compare as integers. When both copies' versions
//! parse, the higher one wins; when they do not, the watched copy wins (it is the API server's
//! own order) and a self-written copy only fills a gap.

use std::collections::{BTreeMap, VecDeque};

use super::Kind;

/// The resourceVersion as a number, when it is one.
pub fn resource_version<K: kube_core::Resource>(obj: &K) -> Option<u64> {
    obj.meta().resource_version.as_deref()?.parse().ok()
}

/// Where a copy comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The watch stream (or a list): the API server's own order.
    Watch,
    /// The answer to a write this replica made.
    OwnWrite,
}

/// Whether `incoming` (with version `incoming_rv`) may replace the copy held now.
pub fn may_replace(
    current_rv: Option<Option<u64>>,
    incoming_rv: Option<u64>,
    source: Source,
) -> bool {
    match (current_rv, source) {
        // Nothing held: any copy fills the gap.
        (None, _) => true,
        (Some(Some(current)), _) => {
            incoming_rv.is_none_or(|incoming| incoming >= current)
                && (source == Source::Watch || incoming_rv.is_some())
        }
        // Held copy without a comparable version: the watch decides, our own answers do not.
        (Some(None), Source::Watch) => true,
        (Some(None), Source::OwnWrite) => false,
    }
}

/// How many deletions are remembered per kind (enough to cover the answers in flight; the
/// oldest are forgotten first).
const TOMBSTONES_PER_KIND: usize = 4096;

/// The resourceVersions at which recently deleted objects went away, so a late answer to an
/// earlier write cannot bring a deleted object back.
#[derive(Clone, Debug, Default)]
pub struct Tombstones {
    by_kind: BTreeMap<Kind, KindTombstones>,
}

#[derive(Clone, Debug, Default)]
struct KindTombstones {
    versions: BTreeMap<String, u64>,
    order: VecDeque<String>,
}

impl Tombstones {
    pub fn bury(&mut self, kind: Kind, key: &str, rv: u64) {
        let tombs = self.by_kind.entry(kind).or_default();
        if tombs.versions.insert(key.to_string(), rv).is_none() {
            tombs.order.push_back(key.to_string());
        }
        while tombs.order.len() > TOMBSTONES_PER_KIND {
            if let Some(oldest) = tombs.order.pop_front() {
                tombs.versions.remove(&oldest);
            }
        }
    }

    /// A copy at `rv` of an object deleted at a later (or the same) version is a ghost.
    pub fn is_ghost(&self, kind: Kind, key: &str, rv: Option<u64>) -> bool {
        let Some(rv) = rv else { return false };
        self.by_kind
            .get(&kind)
            .and_then(|t| t.versions.get(key))
            .is_some_and(|deleted| rv <= *deleted)
    }

    /// A fresh list replaces everything known about the kind.
    pub fn clear(&mut self, kind: Kind) {
        self.by_kind.remove(&kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_version_wins_and_watch_wins_when_incomparable() {
        // Empty slot: anything.
        assert!(may_replace(None, Some(5), Source::OwnWrite));
        assert!(may_replace(None, None, Source::OwnWrite));
        // Numeric: only newer or equal replaces, whatever the source.
        assert!(may_replace(Some(Some(5)), Some(7), Source::OwnWrite));
        assert!(!may_replace(Some(Some(7)), Some(5), Source::OwnWrite));
        assert!(!may_replace(Some(Some(7)), Some(5), Source::Watch));
        assert!(may_replace(Some(Some(7)), Some(7), Source::Watch));
        // Not comparable: prefer the watched copy.
        assert!(may_replace(Some(None), Some(5), Source::Watch));
        assert!(may_replace(Some(Some(5)), None, Source::Watch));
        assert!(!may_replace(Some(None), Some(5), Source::OwnWrite));
        assert!(!may_replace(Some(Some(5)), None, Source::OwnWrite));
    }

    #[test]
    fn tombstones_bury_older_copies_and_forget_the_oldest() {
        let mut tombs = Tombstones::default();
        tombs.bury(Kind::NodeClaim, "a", 10);
        assert!(tombs.is_ghost(Kind::NodeClaim, "a", Some(9)));
        assert!(tombs.is_ghost(Kind::NodeClaim, "a", Some(10)));
        assert!(
            !tombs.is_ghost(Kind::NodeClaim, "a", Some(11)),
            "re-created later"
        );
        assert!(!tombs.is_ghost(Kind::Node, "a", Some(9)), "per kind");
        assert!(!tombs.is_ghost(Kind::NodeClaim, "a", None));
        for i in 0..TOMBSTONES_PER_KIND {
            tombs.bury(Kind::NodeClaim, &format!("x{i}"), 1);
        }
        assert!(!tombs.is_ghost(Kind::NodeClaim, "a", Some(9)), "bounded");
        tombs.clear(Kind::NodeClaim);
        assert!(!tombs.is_ghost(Kind::NodeClaim, "x5", Some(1)));
    }
}
