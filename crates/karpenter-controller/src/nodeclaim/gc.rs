//! Garbage collection, both directions:
//!
//! * instances with no NodeClaim (a NodeClaim deleted while its launch was in flight, a crash
//!   between launch and status write followed by a manual delete) are terminated — only
//!   instances karpenter-rs launched (they carry the `karpenter.sh/nodepool` label the NodeClaim
//!   gave them), and only once they are older than [`INSTANCE_GC_GRACE`] so a launch whose
//!   status write is still on its way is never mistaken for an orphan;
//! * registered NodeClaims whose instance is gone and whose Node is missing or not Ready are
//!   deleted (upstream `nodeclaim.garbagecollection`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_REGISTERED};
use karpenter_api::well_known::{CAPACITY_TYPE_LABEL, NODEPOOL_LABEL};
use karpenter_api::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
use karpenter_core::cloud_provider::CloudError;
use karpenter_core::node::{node_is_ready, node_provider_id};
use karpenter_core::nodeclaim_lifecycle::provider_id;
use karpenter_kube::watch::list_paged;
use karpenter_kube::{is_not_found, stopped};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use super::is_managed;
use crate::context::Context;
use crate::metrics::NodeClaimDisruptedLabels;
use crate::timeouts;
use crate::writes::Leader;

/// Upstream runs NodeClaim garbage collection every 2 minutes.
pub const GC_PERIOD: Duration = Duration::from_secs(120);
/// Instances younger than this are never orphans (their NodeClaim may not show them yet).
pub const INSTANCE_GC_GRACE: SignedDuration = SignedDuration::from_secs(30);

/// Instances (as the provider lists them) that karpenter-rs launched, that are older than the
/// grace period and that no NodeClaim claims, by providerID or by the NodeClaim name (and UID
/// when both are known) the instance was launched for.
pub fn orphaned_instances<'a>(
    instances: &'a [NodeClaim],
    claims: &[NodeClaim],
    now: Timestamp,
) -> Vec<&'a NodeClaim> {
    unclaimed_instances(instances, claims)
        .filter(|instance| instance_age(instance, now).is_some_and(|age| age >= INSTANCE_GC_GRACE))
        .collect()
}

/// How long until the youngest unclaimed instance karpenter-rs launched is old enough to be an
/// orphan (`None` when there is none): the collector looks again then instead of a whole
/// [`GC_PERIOD`] later, so a controller that restarts often still collects what it leaked.
pub fn next_orphan_check(
    instances: &[NodeClaim],
    claims: &[NodeClaim],
    now: Timestamp,
) -> Option<Duration> {
    unclaimed_instances(instances, claims)
        .filter_map(|instance| instance_age(instance, now))
        .filter(|age| *age < INSTANCE_GC_GRACE)
        .filter_map(|age| INSTANCE_GC_GRACE.checked_sub(age))
        .filter_map(|wait| Duration::try_from(wait).ok())
        .min()
}

fn instance_age(instance: &NodeClaim, now: Timestamp) -> Option<SignedDuration> {
    instance
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|created| now.duration_since(created.0))
}

/// Instances karpenter-rs launched (they carry the NodePool label) that no NodeClaim claims.
fn unclaimed_instances<'a>(
    instances: &'a [NodeClaim],
    claims: &[NodeClaim],
) -> impl Iterator<Item = &'a NodeClaim> {
    let claimed_ids: BTreeSet<&str> = claims.iter().filter_map(provider_id).collect();
    instances
        .iter()
        .filter(|instance| instance.nodepool_name().is_some())
        .filter(move |instance| provider_id(instance).is_none_or(|id| !claimed_ids.contains(id)))
        .filter(move |instance| {
            !claims.iter().any(|claim| {
                claim.name_any() == instance.name_any()
                    && match (claim.uid(), instance.uid()) {
                        (Some(a), Some(b)) => a == b,
                        _ => true,
                    }
            })
        })
}

/// Registered, not-deleting NodeClaims whose instance the provider no longer lists and whose
/// Node is missing or not Ready (`ready_node_ids`: the provider IDs of the Ready Nodes).
pub fn lost_nodeclaims<'a>(
    claims: &'a [NodeClaim],
    instance_ids: &BTreeSet<String>,
    ready_node_ids: &BTreeSet<String>,
) -> Vec<&'a NodeClaim> {
    claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_REGISTERED))
        })
        .filter(|c| provider_id(c).is_some_and(|id| !instance_ids.contains(id)))
        .filter(|c| provider_id(c).is_none_or(|id| !ready_node_ids.contains(id)))
        .collect()
}

/// What a collection reads of a NodeClaim: its names, NodePool and capacity-type labels,
/// NodeClassRef, grace period, deletion, provider ID and conditions. The rest (up to 600
/// instance-type names, ~40 labels, capacity) goes as each page of the list arrives: at 2,000
/// nodes a whole list held at once was the controller's largest transient (heaptrack).
fn gc_view(mut claim: NodeClaim) -> NodeClaim {
    let metadata = &mut claim.metadata;
    metadata.annotations = None;
    metadata.managed_fields = None;
    if let Some(labels) = metadata.labels.as_mut() {
        labels.retain(|key, _| key == NODEPOOL_LABEL || key == CAPACITY_TYPE_LABEL);
    }
    claim.spec = NodeClaimSpec {
        node_class_ref: std::mem::take(&mut claim.spec.node_class_ref),
        termination_grace_period: claim.spec.termination_grace_period.take(),
        ..NodeClaimSpec::default()
    };
    claim.status = claim.status.take().map(|status| NodeClaimStatus {
        provider_id: status.provider_id,
        conditions: status.conditions,
        ..NodeClaimStatus::default()
    });
    claim
}

/// The managed NodeClaims, from the API server, a page at a time, each cut to [`gc_view`].
async fn list_managed_claims(ctx: &Leader) -> crate::Result<Vec<NodeClaim>> {
    let api = Api::<NodeClaim>::all(ctx.client.clone());
    list_paged(&api, &ListParams::default(), |claim| {
        is_managed(ctx, &claim).then(|| gc_view(claim))
    })
    .await
    .map_err(|e| crate::Error::kube("list nodeclaims", e))
}

/// Runs garbage collection while leading, until `shutdown`: once as soon as the replica leads
/// with synced caches (start-up, a lease taken over), then every [`GC_PERIOD`], and early when
/// an unclaimed instance is about to pass its grace period ([`next_orphan_check`]). Its own
/// loop, so a slow NodeClaim reconcile never delays it (and every call in a pass has a timeout).
pub async fn run(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut collector = tokio::time::interval(GC_PERIOD);
    collector.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut starts = ctx.work_starts();
    let mut recheck: Option<tokio::time::Instant> = None;
    loop {
        let early = async {
            match recheck {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stopped(&mut shutdown) => break,
            _ = collector.tick() => {}
            () = starts.next() => {}
            () = early => {}
        }
        recheck = None;
        let Some(leader) = ctx.working() else {
            continue;
        };
        let pass = collect(&leader);
        tokio::select! {
            () = stopped(&mut shutdown) => break,
            result = pass => match result {
                Ok(next) => recheck = next.map(|wait| tokio::time::Instant::now() + wait),
                Err(err) => tracing::error!(error = %err, "nodeclaim garbage collection failed"),
            }
        }
    }
}

/// One garbage-collection pass. NodeClaims are listed from the API server (not the cache), so
/// a NodeClaim created a moment ago always protects its instance. Returns when to look again
/// for an unclaimed instance still within its grace period ([`next_orphan_check`]).
pub async fn collect(ctx: &Leader) -> crate::Result<Option<Duration>> {
    let instances =
        timeouts::cloud(ctx.cloud.list())
            .await
            .map_err(|source| crate::Error::Cloud {
                action: "list instances".into(),
                source,
            })?;
    let claims = list_managed_claims(ctx).await?;
    let now = ctx.now();
    let recheck = next_orphan_check(&instances, &claims, now);
    for orphan in orphaned_instances(&instances, &claims, now) {
        let id = provider_id(orphan).unwrap_or_default();
        tracing::info!(provider_id = %id, nodeclaim = %orphan.name_any(), "garbage collecting instance with no nodeclaim");
        match timeouts::cloud(ctx.cloud_writes().delete(orphan)).await {
            Ok(()) | Err(CloudError::NodeClaimNotFound(_)) => {}
            Err(err) => {
                tracing::warn!(provider_id = %id, error = %err, "failed to terminate orphaned instance")
            }
        }
    }
    let instance_ids: BTreeSet<String> = instances
        .iter()
        .filter_map(provider_id)
        .map(str::to_string)
        .collect();
    let ready_node_ids: BTreeSet<String> = ctx
        .state
        .read()
        .nodes()
        .filter(|n| node_is_ready(n))
        .filter_map(node_provider_id)
        .map(str::to_string)
        .collect();
    let api: Api<NodeClaim> = Api::all(ctx.writer());
    for lost in lost_nodeclaims(&claims, &instance_ids, &ready_node_ids) {
        tracing::info!(nodeclaim = %lost.name_any(), "garbage collecting nodeclaim whose instance is gone");
        match timeouts::api(api.delete(&lost.name_any(), &DeleteParams::default())).await {
            Ok(_) => {
                ctx.metrics
                    .nodeclaims_disrupted
                    .get_or_create(&NodeClaimDisruptedLabels::for_claim(
                        "garbage_collected",
                        lost,
                    ))
                    .inc();
            }
            Err(err) if is_not_found(&err) => {}
            Err(err) => {
                return Err(crate::Error::kube(
                    format!("delete nodeclaim {}", lost.name_any()),
                    err,
                ));
            }
        }
    }
    Ok(recheck)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use karpenter_api::well_known::NODEPOOL_LABEL;
    use serde_json::json;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_704_067_200).unwrap()
    }

    fn instance(name: &str, id: &str, pool: Option<&str>) -> NodeClaim {
        let mut c: NodeClaim = serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"providerID": id}
        }))
        .unwrap();
        if let Some(pool) = pool {
            c.metadata.labels = Some([(NODEPOOL_LABEL.to_string(), pool.to_string())].into());
        }
        c.metadata.creation_timestamp = Some(Time(t0()));
        c
    }

    #[test]
    fn orphans_are_old_owned_and_unclaimed() {
        let instances = vec![
            instance("a", "sim://1", Some("default")),
            instance("b", "sim://2", Some("default")),
            instance("c", "sim://3", None),
            instance("d", "sim://4", Some("default")),
        ];
        let mut claimed_by_id = instance("a", "sim://1", Some("default"));
        claimed_by_id.metadata.uid = Some("other".into());
        // `d` is claimed by name only: its launch has not been recorded yet.
        let mut in_flight = instance("d", "", Some("default"));
        in_flight.status = None;
        let claims = vec![claimed_by_id, in_flight];
        let later = t0().checked_add(SignedDuration::from_secs(31)).unwrap();
        let names: Vec<String> = orphaned_instances(&instances, &claims, later)
            .iter()
            .map(|c| c.name_any())
            .collect();
        assert_eq!(names, ["b"], "c was not launched by karpenter-rs");
        assert!(
            orphaned_instances(&instances, &claims, t0()).is_empty(),
            "too young"
        );
        let ten_seconds_in = t0().checked_add(SignedDuration::from_secs(10)).unwrap();
        assert_eq!(
            next_orphan_check(&instances, &claims, ten_seconds_in),
            Some(Duration::from_secs(20)),
            "b turns into an orphan 30 s after its launch"
        );
        assert_eq!(next_orphan_check(&instances, &claims, later), None);
    }

    fn registered(mut claim: NodeClaim) -> NodeClaim {
        claim.status.get_or_insert_default().set_condition(
            NODECLAIM_CONDITION_REGISTERED,
            "True",
            "Registered",
            "",
            "t",
            None,
        );
        claim
    }

    #[test]
    fn lost_nodeclaims_need_missing_instance_and_unready_node() {
        let registered = registered(instance("a", "sim://1", Some("default")));
        let unregistered = instance("b", "sim://2", Some("default"));
        let claims = vec![registered, unregistered];
        let none = BTreeSet::new();
        assert_eq!(lost_nodeclaims(&claims, &none, &none).len(), 1);
        let ready: BTreeSet<String> = ["sim://1".to_string()].into();
        assert!(
            lost_nodeclaims(&claims, &none, &ready).is_empty(),
            "node still Ready"
        );
        let listed: BTreeSet<String> = ["sim://1".to_string()].into();
        assert!(
            lost_nodeclaims(&claims, &listed, &none).is_empty(),
            "instance still exists"
        );
    }

    #[test]
    fn the_collections_view_of_a_nodeclaim_keeps_what_it_decides_on_and_drops_the_rest() {
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-x", "uid": "u1", "creationTimestamp": "2024-01-01T00:00:00Z",
                         "deletionTimestamp": "2024-01-01T01:00:00Z",
                         "labels": {"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot",
                                    "node.kubernetes.io/instance-type": "m5.large"},
                         "annotations": {"karpenter.sh/nodepool-hash": "1"}},
            "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                       "values": ["m5.large", "m5.xlarge"]}],
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "terminationGracePeriod": "1h"},
            "status": {"providerID": "sim://1", "nodeName": "n", "capacity": {"cpu": "2"}}
        }))
        .unwrap();
        let mut claim = registered(claim);
        let view = gc_view(claim.clone());
        assert!(view.spec.requirements.is_empty() && view.metadata.annotations.is_none());
        assert!(view.status.as_ref().unwrap().capacity.is_empty());
        assert_eq!(view.labels().len(), 2);
        assert_eq!(view.spec.node_class_ref, claim.spec.node_class_ref);
        assert_eq!(
            NodeClaimDisruptedLabels::for_claim("garbage_collected", &view),
            NodeClaimDisruptedLabels::for_claim("garbage_collected", &claim)
        );
        assert_eq!(
            (view.name_any(), view.uid(), provider_id(&view)),
            (claim.name_any(), claim.uid(), provider_id(&claim))
        );
        assert_eq!(
            view.metadata.creation_timestamp,
            claim.metadata.creation_timestamp
        );
        assert!(view.metadata.deletion_timestamp.is_some());
        // Not deleting: lost once its instance and Ready Node are gone, as the whole claim is.
        claim.metadata.deletion_timestamp = None;
        let view = gc_view(claim.clone());
        let none = BTreeSet::new();
        let lost = |claims: &[NodeClaim]| lost_nodeclaims(claims, &none, &none).len();
        assert_eq!(lost(&[view]), lost(std::slice::from_ref(&claim)));
        assert_eq!(lost(&[claim]), 1);
    }
}
