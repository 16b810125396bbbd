//! Objects the API server accepted but karpenter-rs cannot decode (e.g. a NodePool whose
//! `expireAfter` matches the CRD pattern but overflows a duration). Each is decoded on its own,
//! so one bad object never fails the watch of its kind: it is kept out of the state and listed
//! here, so the controller can log, count and report it while everything else keeps working.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;

use super::Kind;

/// One skipped object and why.
#[derive(Clone, Debug, PartialEq)]
pub struct IgnoredObject {
    pub kind: Kind,
    /// The state's key (`namespace/name` or `name`).
    pub key: String,
    pub reference: ObjectReference,
    pub error: String,
}

/// Every skipped object, by kind and key.
#[derive(Clone, Debug, Default)]
pub struct IgnoredObjects {
    by_kind: BTreeMap<Kind, BTreeMap<String, IgnoredObject>>,
}

impl IgnoredObjects {
    /// Records the object; returns whether this is news (new object or a different error), so
    /// the caller logs each problem once rather than on every watch event.
    pub fn insert(&mut self, ignored: IgnoredObject) -> bool {
        let slot = self.by_kind.entry(ignored.kind).or_default();
        let news = slot
            .get(&ignored.key)
            .is_none_or(|old| old.error != ignored.error);
        slot.insert(ignored.key.clone(), ignored);
        news
    }

    pub fn remove(&mut self, kind: Kind, key: &str) -> bool {
        self.by_kind
            .get_mut(&kind)
            .is_some_and(|m| m.remove(key).is_some())
    }

    pub fn clear(&mut self, kind: Kind) {
        self.by_kind.remove(&kind);
    }

    pub fn iter(&self) -> impl Iterator<Item = &IgnoredObject> {
        self.by_kind.values().flat_map(BTreeMap::values)
    }

    /// How many objects of each kind are skipped now (every kind, zeros included).
    pub fn counts(&self) -> Vec<(Kind, usize)> {
        Kind::ALL
            .into_iter()
            .map(|k| (k, self.by_kind.get(&k).map_or(0, BTreeMap::len)))
            .collect()
    }
}

/// The metric label of a kind (`NodePool`, `Pod`, ...).
pub fn kind_label(kind: Kind) -> String {
    format!("{kind:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ignored(key: &str, error: &str) -> IgnoredObject {
        IgnoredObject {
            kind: Kind::NodePool,
            key: key.into(),
            reference: ObjectReference::default(),
            error: error.into(),
        }
    }

    #[test]
    fn insert_reports_news_once_and_counts_per_kind() {
        let mut objects = IgnoredObjects::default();
        assert!(objects.insert(ignored("bad", "overflow")));
        assert!(
            !objects.insert(ignored("bad", "overflow")),
            "same problem again"
        );
        assert!(
            objects.insert(ignored("bad", "other")),
            "a different problem"
        );
        let counts = objects.counts();
        assert!(counts.contains(&(Kind::NodePool, 1)));
        assert!(counts.contains(&(Kind::Pod, 0)));
        assert!(objects.remove(Kind::NodePool, "bad"));
        assert!(objects.counts().contains(&(Kind::NodePool, 0)));
    }
}
