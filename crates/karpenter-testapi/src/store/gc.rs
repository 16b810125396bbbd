//! Garbage collection by owner references, as kube-controller-manager's garbage collector does
//! it with background propagation: when an object is gone, every object whose
//! `metadata.ownerReferences` name it (by `uid`) and no other existing owner is deleted too (a
//! normal delete: finalizers and graceful pod termination still apply), recursively.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{DeleteOptions, ObjectKey, Store, meta_str};

fn owner_uids(object: &Value) -> Vec<&str> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
        .collect()
}

impl Store {
    /// Deletes the dependents of the object with `owner_uid`, which has just been removed.
    pub(super) fn collect_dependents(&mut self, owner_uid: &str) {
        let dependents: Vec<(ObjectKey, Vec<String>)> = self
            .objects
            .iter()
            .filter_map(|(key, object)| {
                let owners = owner_uids(object);
                owners.contains(&owner_uid).then(|| {
                    let others = owners
                        .into_iter()
                        .filter(|uid| *uid != owner_uid)
                        .map(str::to_owned)
                        .collect();
                    (key.clone(), others)
                })
            })
            .collect();
        if dependents.is_empty() {
            return;
        }
        let needs_uids = dependents.iter().any(|(_, others)| !others.is_empty());
        let live_uids: BTreeSet<String> = if needs_uids {
            self.objects
                .values()
                .filter_map(|o| meta_str(o, "uid").map(str::to_owned))
                .collect()
        } else {
            BTreeSet::new()
        };
        for (key, others) in dependents {
            if others.iter().any(|uid| live_uids.contains(uid)) {
                continue; // another owner still exists
            }
            let Some(res) = self
                .registry
                .all()
                .iter()
                .find(|r| r.group == key.group && r.plural == key.plural)
                .cloned()
            else {
                continue;
            };
            let namespace = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
            // Already gone or already terminating is fine: the collector only starts deletions.
            let _ = self.delete(&res, namespace, &key.name, &DeleteOptions::default());
        }
    }
}
