//! Objects the API server accepted but karpenter-rs cannot decode (e.g. a NodePool whose
//! `expireAfter` matches the CRD pattern but overflows a duration). Each is decoded on its own,
//! so one bad object never fails the watch of its kind: it is logged when seen, kept out of the
//! state, counted in `karpenter_cluster_state_ignored_objects{kind}` and reported with a Warning
//! event on the object, while everything else keeps working.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;

use super::Kind;
use crate::context::Context;
use crate::events::{EventRecord, EventType};

/// Event reason on an object karpenter-rs skips.
pub const REASON_FAILED_TO_DECODE: &str = "FailedToDecode";

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
#[derive(Debug, Default)]
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

/// Refreshes the ignored-objects gauge and (leader only) publishes a Warning event on each
/// skipped object; the event recorder de-duplicates repeats.
pub async fn report(ctx: &Context) {
    let ignored: Vec<IgnoredObject> = {
        let state = ctx.state.read();
        for (kind, count) in state.ignored_objects().counts() {
            ctx.metrics
                .cluster_state_ignored_objects
                .get_or_create(&crate::metrics::KindLabels {
                    kind: kind_label(kind),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        state.ignored_objects().iter().cloned().collect()
    };
    if !ctx.is_leader() {
        return;
    }
    for object in ignored {
        ctx.events
            .publish(EventRecord {
                involved: object.reference.clone(),
                event_type: EventType::Warning,
                reason: REASON_FAILED_TO_DECODE.into(),
                message: format!(
                    "karpenter-rs cannot decode this {} and ignores it: {}",
                    kind_label(object.kind),
                    object.error
                ),
            })
            .await;
    }
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
