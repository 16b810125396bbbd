//! operatorpkg's families (`operator_<kind>_status_condition_*`, `operator_<kind>_termination_*`
//! and their deprecated kind-labelled versions) for NodeClaims, Nodes, NodePools and NodeClasses,
//! from the state at each scrape. Transitions and completed terminations are what changed since
//! the previous scrape (a condition that flips and flips back between two scrapes is not seen).

use std::collections::{BTreeMap, HashSet};

use jiff::Timestamp;
use karpenter_api::v1::Condition;
use karpenter_core::state::ClusterState;

use super::Metrics;
use super::extra::*;
use super::scrape::ObjectSnapshot;

/// One object's conditions and deletion as the families need them.
struct Observed {
    namespace: String,
    name: String,
    conditions: Vec<(String, String, String, Option<Timestamp>)>,
    deleted_at: Option<Timestamp>,
}

fn from_api(conditions: &[Condition]) -> Vec<(String, String, String, Option<Timestamp>)> {
    conditions
        .iter()
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.last_transition_time
                    .as_deref()
                    .and_then(|t| t.parse().ok()),
            )
        })
        .collect()
}

fn meta_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> (String, String, Option<Timestamp>) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
        meta.deletion_timestamp.as_ref().map(|t| t.0),
    )
}

/// The objects of each of [`STATUS_KINDS`], in that order.
fn observe(state: &ClusterState) -> [Vec<Observed>; 4] {
    let make = |meta, conditions| {
        let (namespace, name, deleted_at) = meta_of(meta);
        Observed {
            namespace,
            name,
            conditions,
            deleted_at,
        }
    };
    [
        state
            .nodeclaims()
            .map(|o| {
                make(
                    &o.metadata,
                    from_api(o.status.as_ref().map_or(&[][..], |s| &s.conditions)),
                )
            })
            .collect(),
        state
            .nodes()
            .map(|n| {
                let conditions = n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .map(|cs| {
                        cs.iter()
                            .map(|c| {
                                (
                                    c.type_.clone(),
                                    c.status.clone(),
                                    c.reason.clone().unwrap_or_default(),
                                    c.last_transition_time.as_ref().map(|t| t.0),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                make(&n.metadata, conditions)
            })
            .collect(),
        state
            .nodepools()
            .map(|o| {
                make(
                    &o.metadata,
                    from_api(o.status.as_ref().map_or(&[][..], |s| &s.conditions)),
                )
            })
            .collect(),
        state
            .nodeclasses()
            .map(|o| {
                make(
                    &o.metadata,
                    from_api(o.status.as_ref().map_or(&[][..], |s| &s.conditions)),
                )
            })
            .collect(),
    ]
}

fn secs(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

pub(super) fn refresh_status(metrics: &Metrics, state: &ClusterState, now: Timestamp) {
    let observed = observe(state);
    let by_kind = &metrics.x.status_by_kind;
    by_kind.termination_current_time.clear();
    by_kind.current_status_seconds.clear();
    by_kind.count.clear();
    let mut mem = metrics.memory();
    let mut live = HashSet::new();
    for (k, objects) in observed.iter().enumerate() {
        let kind = STATUS_KINDS[k];
        let m = &metrics.x.status[k];
        m.termination_current_time.clear();
        m.current_status_seconds.clear();
        m.count.clear();
        for o in objects {
            let id = (k, format!("{}/{}", o.namespace, o.name));
            live.insert(id.clone());
            if let Some(deleted) = o.deleted_at {
                let since = secs(deleted, now);
                m.termination_current_time
                    .get_or_create(&ObjectLabels {
                        namespace: o.namespace.clone(),
                        name: o.name.clone(),
                    })
                    .set(since);
                by_kind
                    .termination_current_time
                    .get_or_create(&KindObjectLabels {
                        kind: kind.into(),
                        namespace: o.namespace.clone(),
                        name: o.name.clone(),
                    })
                    .set(since);
            }
            let previous = mem.objects.get(&id).cloned();
            let mut conditions = BTreeMap::new();
            for (type_, status, reason, since) in &o.conditions {
                let object = ObjectConditionLabels {
                    namespace: o.namespace.clone(),
                    name: o.name.clone(),
                    r#type: type_.clone(),
                    status: status.clone(),
                    reason: reason.clone(),
                };
                let by_kind_object = KindObjectConditionLabels {
                    kind: kind.into(),
                    namespace: o.namespace.clone(),
                    name: o.name.clone(),
                    r#type: type_.clone(),
                    status: status.clone(),
                    reason: reason.clone(),
                };
                m.count.get_or_create(&object).set(1);
                by_kind.count.get_or_create(&by_kind_object).set(1);
                if let Some(since) = since {
                    m.current_status_seconds
                        .get_or_create(&object)
                        .set(secs(*since, now));
                    by_kind
                        .current_status_seconds
                        .get_or_create(&by_kind_object)
                        .set(secs(*since, now));
                }
                // A condition new since the last scrape, or whose status changed, transitioned.
                let before = previous.as_ref().and_then(|p| p.conditions.get(type_));
                let changed = match before {
                    Some((old_status, _, _)) => old_status != status,
                    None => previous.is_some(),
                };
                if changed {
                    m.transitions
                        .get_or_create(&ConditionLabels {
                            r#type: type_.clone(),
                            status: status.clone(),
                            reason: reason.clone(),
                        })
                        .inc();
                    by_kind
                        .transitions
                        .get_or_create(&KindConditionLabels {
                            kind: kind.into(),
                            r#type: type_.clone(),
                            status: status.clone(),
                            reason: reason.clone(),
                        })
                        .inc();
                    if let (Some((old_status, old_reason, Some(old_since))), Some(since)) =
                        (before, since)
                    {
                        let held = secs(*old_since, *since);
                        m.transition_seconds
                            .get_or_create(&ConditionLabels {
                                r#type: type_.clone(),
                                status: old_status.clone(),
                                reason: old_reason.clone(),
                            })
                            .observe(held);
                        by_kind
                            .transition_seconds
                            .get_or_create(&KindConditionLabels {
                                kind: kind.into(),
                                r#type: type_.clone(),
                                status: old_status.clone(),
                                reason: old_reason.clone(),
                            })
                            .observe(held);
                    }
                }
                conditions.insert(type_.clone(), (status.clone(), reason.clone(), *since));
            }
            mem.objects.insert(
                id,
                ObjectSnapshot {
                    conditions,
                    deleted_at: o.deleted_at,
                },
            );
        }
    }
    // Objects gone since the last scrape: a deleted one finished terminating.
    let gone: Vec<_> = mem
        .objects
        .keys()
        .filter(|id| !live.contains(*id))
        .cloned()
        .collect();
    for id in gone {
        if let Some(snapshot) = mem.objects.remove(&id)
            && let Some(deleted) = snapshot.deleted_at
        {
            let took = secs(deleted, now);
            metrics.x.status[id.0].termination_duration.observe(took);
            by_kind
                .termination_duration
                .get_or_create(&KindOnlyLabels {
                    kind: STATUS_KINDS[id.0].into(),
                })
                .observe(took);
        }
    }
}
