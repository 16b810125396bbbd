//! `karpenter diff`: the NodePools and EC2NodeClasses of some files, as they would be after
//! `kubectl apply`, against a cluster's objects: which nodes would drift and why, their
//! replacements, the cost before and after, how long the rollout takes under the budgets (the
//! disruption loop of `simulate --disruption`, in virtual time from the cluster as it is), and
//! the pods that would become unschedulable. Pure: both sides arrive as [`Manifests`].

use std::collections::BTreeSet;

use jiff::Timestamp;
use karpenter_api::well_known::{NODEPOOL_HASH_ANNOTATION, NODEPOOL_HASH_VERSION_ANNOTATION};
use karpenter_core::scheduling::SchedulerOptions;
use kube_core::ResourceExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::disruption::report::ReplacementReport;
use crate::disruption::{DisruptionSettings, DisruptionSimError, simulate_disruption};
use crate::explain::{HOURS_PER_MONTH, round6};
use crate::manifests::Manifests;
use crate::plan::{plan_only, plan_with};
use karpenter_sim::SimCloudProvider;

/// `kubectl.kubernetes.io/last-applied-configuration`: what the last `kubectl apply` sent, so a
/// field dropped from the file is dropped from the object (apply's three-way merge).
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A node the change would drift.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftedNode {
    pub node: String,
    pub node_claim: String,
    pub node_pool: String,
    /// `NodePoolDrifted`, `RequirementsDrifted`, `InstanceTypeNotFound`.
    pub reason: String,
}

/// A drifted node the rollout leaves in place, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldNode {
    pub node: String,
    pub reason: String,
}

/// A pod that schedules today and would not after the change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulableAfter {
    /// `namespace/name`.
    pub pod: String,
    pub reason: String,
}

/// What `diff -o json` prints (keys documented in `docs/diff.md`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffReport {
    /// `Kind/name (new|changed)` for every object of the files that differs from the cluster.
    pub changed: Vec<String>,
    pub drifted: Vec<DriftedNode>,
    /// The nodes launched to replace drifted ones, in launch order.
    pub replacements: Vec<ReplacementReport>,
    /// Σ prices of the cluster's nodes now, USD per hour.
    pub hourly_cost_before: f64,
    /// Σ prices once the rollout has settled (the disruption loop's end state).
    pub hourly_cost_after: f64,
    pub monthly_cost_before: f64,
    pub monthly_cost_after: f64,
    /// From now until the last drift replacement completed (its old node gone), in virtual
    /// time under the budgets; 0 when nothing drifts.
    pub rollout_seconds: i64,
    /// False when a drifted node is still there at the end of the run: held (see `held`) or
    /// still on its way out when `until` was reached.
    pub rollout_complete: bool,
    /// Drifted nodes the rollout could not replace, with the reason (a do-not-disrupt pod, a
    /// PDB, a budget), or `still on its way out` at `until`.
    pub held: Vec<HeldNode>,
    /// Pods that schedule today and would not after the change.
    pub unschedulable: Vec<UnschedulableAfter>,
}

impl DiffReport {
    /// Whether applying the files would change anything (`kubectl diff`'s exit 1).
    pub fn changes_anything(&self) -> bool {
        !self.changed.is_empty()
    }
}

/// Compares `changes` (files) with `live` (the cluster) and runs the rollout in virtual time.
pub fn diff(
    live: &Manifests,
    changes: &Manifests,
    provider: &SimCloudProvider,
    options: SchedulerOptions,
    settings: DisruptionSettings,
) -> Result<DiffReport, DisruptionSimError> {
    let mut after = live.clone();
    let mut changed = Vec::new();
    for pool in &changes.node_pools {
        if let Some(note) = apply(&mut after.node_pools, pool, "NodePool", true) {
            changed.push(note);
        }
    }
    for class in &changes.node_classes {
        if let Some(note) = apply(&mut after.node_classes, class, "EC2NodeClass", false) {
            changed.push(note);
        }
    }
    // A NodeOverlay changes prices and capacities the drift of instance types reads.
    for overlay in &changes.node_overlays {
        if let Some(note) = apply(&mut after.node_overlays, overlay, "NodeOverlay", false) {
            changed.push(note);
        }
    }

    let now = settings.now;
    let live_state = live.cluster_state();
    let after_state = after.cluster_state();
    let live_types = crate::disruption::pool_instance_types(live, provider)?;
    let after_types = crate::disruption::pool_instance_types(&after, provider)?;
    let live_nodes = live_state.state_nodes();
    let drifted_before: BTreeSet<String> = live_nodes
        .iter()
        .filter(|n| crate::explain::drift_of(n, &live_state, &live_types, now).is_some())
        .map(|n| n.name())
        .collect();
    let drifted: Vec<DriftedNode> = after_state
        .state_nodes()
        .iter()
        .filter(|n| !drifted_before.contains(&n.name()))
        .filter_map(|n| {
            let reason = crate::explain::drift_of(n, &after_state, &after_types, now)?;
            Some(DriftedNode {
                node: n.name(),
                node_claim: n.nodeclaim.map(ResourceExt::name_any).unwrap_or_default(),
                node_pool: n.nodepool().unwrap_or_default().to_string(),
                reason,
            })
        })
        .collect();
    let hourly_cost_before = round6(
        live_nodes
            .iter()
            .filter_map(|n| {
                crate::explain::NodeFacts::of(&live_state, &live_types, &n.name()).price
            })
            .sum(),
    );

    // Pods that have a place today (no NodeClaim needed beyond what the plan would launch).
    let unschedulable_before: BTreeSet<String> = plan_only(live, provider, options.clone())?
        .plan
        .unschedulable
        .into_iter()
        .map(|u| u.pod)
        .collect();
    let outcome = plan_with(&after, provider, options.clone())?;
    let report = simulate_disruption(&after, provider, options, &outcome, settings)?;

    let drift_commands: Vec<_> = report
        .commands
        .iter()
        .filter(|c| c.reason == "Drifted")
        .collect();
    let replacements = drift_commands
        .iter()
        .flat_map(|c| c.replacements.iter().cloned())
        .collect();
    let held: Vec<HeldNode> = drifted
        .iter()
        .filter(|d| report.after.nodes.iter().any(|n| n.name == d.node))
        .map(|d| HeldNode {
            node: d.node.clone(),
            reason: report
                .blocked
                .iter()
                .find(|b| b.name == d.node)
                .map(|b| b.reason.clone())
                .unwrap_or_else(|| "still on its way out".to_string()),
        })
        .collect();
    let rollout_complete =
        held.is_empty() && drift_commands.iter().all(|c| c.completed_at.is_some());
    let end = drift_commands
        .iter()
        .filter_map(|c| c.completed_at.as_deref()?.parse::<Timestamp>().ok())
        .max();
    let rollout_seconds = end.map_or(0, |end| end.duration_since(now).as_secs().max(0));
    let mut unschedulable: Vec<UnschedulableAfter> = outcome
        .plan
        .unschedulable
        .iter()
        .map(|u| UnschedulableAfter {
            pod: u.pod.clone(),
            reason: u.reason.clone(),
        })
        .chain(
            report
                .after
                .unschedulable
                .iter()
                .map(|u| UnschedulableAfter {
                    pod: format!("{}/{}", u.namespace, u.name),
                    reason: u.reason.clone(),
                }),
        )
        .filter(|u| !unschedulable_before.contains(&u.pod))
        .collect();
    // The plan's and the loop's end state may name the same pod: once, with the first reason.
    let mut named = BTreeSet::new();
    unschedulable.retain(|u| named.insert(u.pod.clone()));
    let hourly_cost_after = report.after.hourly_cost;
    Ok(DiffReport {
        changed,
        drifted,
        replacements,
        hourly_cost_before,
        hourly_cost_after,
        monthly_cost_before: round6(hourly_cost_before * HOURS_PER_MONTH),
        monthly_cost_after: round6(hourly_cost_after * HOURS_PER_MONTH),
        rollout_seconds,
        rollout_complete,
        held,
        unschedulable,
    })
}

/// Applies `object` to the cluster's objects of its kind as `kubectl apply` would: a new object
/// is added; an existing one gets the file's fields merged over its own (fields the API server
/// defaulted stay, fields the last apply set and the file drops go). Returns `Kind/name (new)`
/// or `Kind/name (changed)`, or `None` when the spec is unchanged. A NodePool whose template
/// changed loses its stored hash, so drift is judged on the new template's.
fn apply<K>(objects: &mut Vec<K>, object: &K, kind: &str, pool_hash: bool) -> Option<String>
where
    K: ResourceExt + Serialize + DeserializeOwned + Clone,
{
    let name = object.name_any();
    let Some(index) = objects.iter().position(|o| o.name_any() == name) else {
        objects.push(object.clone());
        return Some(format!("{kind}/{name} (new)"));
    };
    let live = serde_json::to_value(&objects[index]).ok()?;
    let file = serde_json::to_value(object).ok()?;
    let last_applied: Option<Value> = objects[index]
        .annotations()
        .get(LAST_APPLIED_ANNOTATION)
        .and_then(|text| serde_json::from_str(text).ok());
    let mut merged = live.clone();
    if let (Some(target), Some(spec)) = (merged.get_mut("spec"), file.get("spec")) {
        merge(
            target,
            spec,
            last_applied.as_ref().and_then(|l| l.get("spec")),
        );
    }
    if merged.get("spec") == live.get("spec") {
        return None;
    }
    if pool_hash
        && merged.pointer("/spec/template") != live.pointer("/spec/template")
        && let Some(annotations) = merged
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
    {
        annotations.remove(NODEPOOL_HASH_ANNOTATION);
        annotations.remove(NODEPOOL_HASH_VERSION_ANNOTATION);
    }
    let merged: K = serde_json::from_value(merged).ok()?;
    objects[index] = merged;
    Some(format!("{kind}/{name} (changed)"))
}

/// Merges `patch` into `target` (objects key by key, everything else replaced), then removes the
/// keys `last_applied` had and `patch` no longer has.
fn merge(target: &mut Value, patch: &Value, last_applied: Option<&Value>) {
    let (Some(target_map), Some(patch_map)) = (target.as_object_mut(), patch.as_object()) else {
        *target = patch.clone();
        return;
    };
    for (key, value) in patch_map {
        let previous = last_applied.and_then(|l| l.get(key));
        match target_map.get_mut(key) {
            Some(existing) if existing.is_object() && value.is_object() => {
                merge(existing, value, previous);
            }
            _ => {
                target_map.insert(key.clone(), value.clone());
            }
        }
    }
    if let Some(previous) = last_applied.and_then(Value::as_object) {
        for key in previous.keys() {
            if !patch_map.contains_key(key) {
                target_map.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// Small JSON objects two levels deep over a few keys, so patches overlap their targets.
    fn object() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![any::<u8>().prop_map(Value::from), Just(Value::Null)];
        let inner = prop::collection::btree_map("[abc]", leaf.clone(), 0..3)
            .prop_map(|m| Value::Object(m.into_iter().collect()));
        prop::collection::btree_map("[abcd]", prop_oneof![leaf, inner], 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    /// Whether every field of `patch` is in `merged` with the patch's value (objects field by
    /// field).
    fn carries(merged: &Value, patch: &Value) -> bool {
        match (merged, patch) {
            (Value::Object(m), Value::Object(p)) => p
                .iter()
                .all(|(k, v)| m.get(k).is_some_and(|mv| carries(mv, v))),
            _ => merged == patch,
        }
    }

    proptest! {
        /// Without a last apply: the file's fields win, the others stay, and applying the same
        /// file twice changes nothing more (what makes a second `diff` after `apply` say "no
        /// change").
        #[test]
        fn a_merge_carries_the_patch_keeps_the_rest_and_is_idempotent(
            target in object(),
            patch in object(),
        ) {
            let mut merged = target.clone();
            merge(&mut merged, &patch, None);
            prop_assert!(carries(&merged, &patch), "{merged} lacks {patch}");
            for (key, value) in target.as_object().into_iter().flatten() {
                if patch.get(key).is_none() {
                    prop_assert_eq!(merged.get(key), Some(value));
                }
            }
            let mut twice = merged.clone();
            merge(&mut twice, &patch, None);
            prop_assert_eq!(twice, merged);
        }
    }

    #[test]
    fn a_merge_keeps_defaults_and_drops_what_the_last_apply_set() {
        let mut live = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": 5});
        let patch = json!({"b": {"c": 9}});
        let last = json!({"b": {"c": 2}, "e": 5});
        merge(&mut live, &patch, Some(&last));
        // `a` and `b.d` were defaulted (not in the last apply): kept. `e` was applied and is
        // gone from the file: removed.
        assert_eq!(live, json!({"a": 1, "b": {"c": 9, "d": 3}}));
    }
}
