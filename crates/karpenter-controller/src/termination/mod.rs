//! Node termination (upstream `node.termination` + the eviction queue): the
//! `karpenter.sh/termination` finalizer on a deleting Node taints it
//! `karpenter.sh/disrupted:NoSchedule`, then executes the steps of
//! [`karpenter_core::disruption::orchestration::termination`] (the machine `simulate` applies
//! too): drain through the Eviction API tier by tier (PDB refusals retried with backoff,
//! do-not-disrupt pods waited for, everything left force-deleted at the NodeClaim's
//! `terminationGracePeriod` deadline, pods stuck terminating ignored), the minimum drain time,
//! terminate the instance, and finally release the Node.
//!
//! Only Nodes this controller registered are touched: they carry our finalizer and a providerID
//! of this cloud provider; an instance is terminated only when a NodeClaim (or the
//! `karpenter.sh/nodepool` label Karpenter put on the Node) says karpenter-rs launched it.

pub mod drain;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use karpenter_api::v1::{ConditionsExt, NODECLAIM_CONDITION_DISRUPTION_REASON};
use karpenter_api::well_known::{
    DISRUPTED_TAINT_KEY, EXCLUDE_FROM_LB_LABEL, NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION,
    NODEPOOL_LABEL, TERMINATION_FINALIZER,
};
use karpenter_api::{NodeClaim, NodeClaimStatus};
use karpenter_core::cloud_provider::CloudError;
use karpenter_core::node::{node_is_ready, node_provider_id};
use karpenter_core::pod::Pod;
use karpenter_core::taints::NO_SCHEDULE;
use karpenter_kube::{delete_ignoring_not_found, is_conflict, is_not_found, lock, status_code};
use kube::api::{DeleteParams, EvictParams, Preconditions};
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use crate::backoff::BackoffPolicy;
use crate::context::Context;
use crate::events::{EventRecord, EventType};
use crate::metrics::{EvictionRequestLabels, NodePoolLabels, PodsDrainedLabels, seconds_since};
use crate::nodeclaim::{has_finalizer, parse_time};
use crate::timeouts;
use crate::workers::{MAX_CONCURRENT_RECONCILES, Urgency, Workers, run_reconciler};
use crate::writes::Leader;
use drain::EvictionBackoff;
use karpenter_core::disruption::orchestration::termination::{self, TerminationStep};
use karpenter_core::disruption::orchestration::{InstanceView, NodeView};
use karpenter_core::drain::{Action, PodAction};

pub const REASON_EVICTED: &str = "Evicted";
pub const REASON_DISRUPTED: &str = "Disrupted";
pub const REASON_FAILED_DRAINING: &str = "FailedDraining";
pub const REASON_TERMINATION_GRACE_PERIOD_EXPIRING: &str = "TerminationGracePeriodExpiring";

/// Upstream requeues a draining node every second.
pub const RECONCILE_PERIOD: Duration = Duration::from_secs(1);
pub use karpenter_core::disruption::orchestration::termination::MIN_DRAIN_TIME;

const MULTIPLE_PDBS_MESSAGE: &str = "more than one PodDisruptionBudget";

/// The node termination controller's memory: eviction backoffs and when each node was first
/// seen drained. Losing it on restart only costs a retry.
#[derive(Debug, Default)]
pub struct Terminator {
    backoff: Mutex<EvictionBackoff>,
    drained_since: Mutex<HashMap<String, Timestamp>>,
}

/// A deleting Node this controller must finalize: our finalizer, and a providerID of this
/// cloud provider (`<name>://...`).
pub fn should_finalize(node: &Node, provider_name: &str) -> bool {
    node.metadata.deletion_timestamp.is_some()
        && has_finalizer(node)
        && node_provider_id(node).is_some_and(|id| id.starts_with(&format!("{provider_name}://")))
}

/// The Node with the `karpenter.sh/disrupted:NoSchedule` taint (replacing any other taint with
/// that key) and excluded from external load balancers.
pub fn tainted_for_termination(node: &Node) -> Node {
    let mut node = node.clone();
    let taints = node
        .spec
        .get_or_insert_default()
        .taints
        .get_or_insert_default();
    taints.retain(|t| t.key != DISRUPTED_TAINT_KEY);
    taints.push(Taint {
        key: DISRUPTED_TAINT_KEY.into(),
        effect: NO_SCHEDULE.into(),
        ..Taint::default()
    });
    node.metadata
        .labels
        .get_or_insert_default()
        .insert(EXCLUDE_FROM_LB_LABEL.into(), "karpenter".into());
    node
}

fn has_disrupted_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter()
                .any(|t| t.key == DISRUPTED_TAINT_KEY && t.effect == NO_SCHEDULE)
        })
        && node.labels().contains_key(EXCLUDE_FROM_LB_LABEL)
}

/// Why pods are drained, for `pods_drained_total` and the `Evicted` event: the NodeClaim's
/// `DisruptionReason` condition when a disruption set one, else upstream's default wording.
pub fn drain_reason(claim: Option<&NodeClaim>) -> String {
    claim
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.condition(NODECLAIM_CONDITION_DISRUPTION_REASON))
        .and_then(|c| c.reason.clone())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "Forceful Termination".to_string())
}

/// Runs the node termination loop until `shutdown` turns true: each deleting Node gets its own
/// reconcile task every [`RECONCILE_PERIOD`] unless one is in flight or it is backing off.
pub async fn run(ctx: Arc<Context>, shutdown: watch::Receiver<bool>) {
    let terminator = Arc::new(Terminator::default());
    let workers = Workers::new("node", BackoffPolicy::RECONCILE, MAX_CONCURRENT_RECONCILES);
    run_reconciler(
        ctx,
        shutdown,
        workers,
        RECONCILE_PERIOD,
        |leader, workers| {
            terminator.start_reconciles(leader, workers);
        },
    )
    .await;
}

impl Terminator {
    /// Starts a reconcile for every deleting Node we own that is not in flight or backing off.
    pub fn start_reconciles(self: &Arc<Self>, ctx: &Leader, workers: &mut Workers) {
        // Every Node here is being deleted: each has work to do.
        let candidates: Vec<(String, Urgency)> = ctx
            .state
            .read()
            .nodes()
            .filter(|n| should_finalize(n, ctx.cloud.name()))
            .map(|n| (n.name_any(), Urgency::Now))
            .collect();
        workers.start_in_turn(ctx.now(), candidates, |key| {
            let node = ctx.state.read().node(key).cloned()?;
            let (ctx, terminator) = (ctx.clone(), self.clone());
            Some(async move { terminator.reconcile(&ctx, node).await })
        });
    }

    /// One step of terminating one Node.
    pub async fn reconcile(&self, ctx: &Leader, node: Node) -> crate::Result<()> {
        let node_name = node.name_any();
        let Some(pid) = node_provider_id(&node).map(str::to_string) else {
            return Ok(());
        };
        let claims: Vec<NodeClaim> = ctx
            .state
            .read()
            .nodeclaims()
            .filter(|c| {
                c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid.as_str())
            })
            .cloned()
            .collect();
        let claim_api: Api<NodeClaim> = Api::all(ctx.writer());
        for claim in claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
        {
            delete_ignoring_not_found(
                claim_api.delete(&claim.name_any(), &DeleteParams::default()),
            )
            .await
            .map_err(|err| {
                crate::Error::kube(format!("delete nodeclaim {}", claim.name_any()), err)
            })?;
        }
        let claim = match claims.as_slice() {
            [one] => Some(one.clone()),
            _ => None,
        };
        // An instance karpenter-rs launched: its NodeClaim says so, or the label Karpenter put on
        // the Node at registration does.
        let instance_claim = claim.clone().or_else(|| {
            node.labels().contains_key(NODEPOOL_LABEL).then(|| {
                let mut synthetic = NodeClaim::new(&node_name, Default::default());
                synthetic.status = Some(NodeClaimStatus {
                    provider_id: Some(pid.clone()),
                    ..Default::default()
                });
                synthetic
            })
        });

        let node_ready = node_is_ready(&node);
        // Only a Node that is not Ready may be released undrained (its instance gone).
        let instance_gone = !node_ready
            && matches!(
                timeouts::cloud(ctx.cloud.get(&pid)).await,
                Err(CloudError::NodeClaimNotFound(_))
            );

        let deadline = claim
            .as_ref()
            .and_then(|c| {
                c.annotations()
                    .get(NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION)
                    .cloned()
            })
            .and_then(|raw| parse_time(&raw));
        if let Some(deadline) = deadline {
            let message = format!("All pods will be deleted by {deadline}");
            ctx.events
                .publish(EventRecord::new(
                    &node,
                    EventType::Warning,
                    REASON_TERMINATION_GRACE_PERIOD_EXPIRING,
                    message,
                ))
                .await;
        }

        if !has_disrupted_taint(&node) {
            let desired = tainted_for_termination(&node);
            match timeouts::api(Api::<Node>::all(ctx.writer()).replace(
                &node_name,
                &karpenter_kube::identity::post_params(),
                &desired,
            ))
            .await
            {
                Ok(updated) => ctx.state.write().apply(updated),
                Err(err) if is_conflict(&err) || is_not_found(&err) => return Ok(()),
                Err(err) => return Err(crate::Error::kube(format!("taint node {node_name}"), err)),
            }
        }

        let now = ctx.now();
        let pods: Vec<Pod> = ctx.state.read().pods_on_node(&node_name).cloned().collect();
        lock(&self.backoff).retain(|key, uid| {
            pods.iter()
                .any(|p| karpenter_core::pod::key(p) == key && p.uid().as_deref() == Some(uid))
        });
        let reason = drain_reason(claim.as_ref());
        let mut instance = if instance_gone {
            InstanceView::Gone
        } else {
            InstanceView::Running
        };
        // The machine decides; each pass performs its steps. Termination of the instance
        // answers at once whether it is already gone, so look again then (at most twice).
        for _ in 0..3 {
            let view = NodeView {
                pods: pods.iter().collect(),
                deadline,
                // The Eviction API checks PDBs.
                pdbs: None,
                drained_since: lock(&self.drained_since).get(&node_name).copied(),
                min_drain_time: MIN_DRAIN_TIME,
                node_ready,
                instance,
            };
            let plan = termination::next(&view, now);
            let mut terminated = false;
            for step in &plan.steps {
                match step {
                    TerminationStep::Remove(action) => {
                        self.act(ctx, &node, action, &reason, now).await
                    }
                    TerminationStep::WaitForPods { waiting, .. } => {
                        lock(&self.drained_since).remove(&node_name);
                        let message = format!(
                            "Failed to drain node, {waiting} pods are waiting to be evicted"
                        );
                        ctx.events
                            .publish(EventRecord::new(
                                &node,
                                EventType::Warning,
                                REASON_FAILED_DRAINING,
                                message,
                            ))
                            .await;
                    }
                    TerminationStep::Drained => {
                        lock(&self.drained_since).insert(node_name.clone(), now);
                        ctx.metrics
                            .x
                            .nodes_drained
                            .get_or_create(&crate::metrics::NodePoolOnlyLabels {
                                nodepool: node
                                    .labels()
                                    .get(NODEPOOL_LABEL)
                                    .cloned()
                                    .unwrap_or_default(),
                            })
                            .inc();
                    }
                    TerminationStep::TerminateInstance => {
                        instance = self
                            .terminate_instance(
                                ctx,
                                &node_name,
                                instance_claim.as_ref(),
                                claim.as_ref(),
                            )
                            .await?;
                        terminated = true;
                    }
                    TerminationStep::ReleaseNode => return self.release(ctx, &node).await,
                }
            }
            // Poll a terminating instance until the provider no longer knows it.
            if !terminated || instance != InstanceView::Gone {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Asks the provider to terminate the instance (when karpenter-rs launched one); says
    /// whether it is still terminating or already gone.
    async fn terminate_instance(
        &self,
        ctx: &Leader,
        node_name: &str,
        instance_claim: Option<&NodeClaim>,
        claim: Option<&NodeClaim>,
    ) -> crate::Result<InstanceView> {
        let Some(instance) = instance_claim else {
            return Ok(InstanceView::Gone);
        };
        let still_terminating = match timeouts::cloud(ctx.cloud_writes().delete(instance)).await {
            Ok(()) => true,
            Err(CloudError::NodeClaimNotFound(_)) => false,
            Err(source) => {
                return Err(crate::Error::Cloud {
                    action: format!("terminate instance of node {node_name}"),
                    source,
                });
            }
        };
        // Upstream's awaitInstanceTermination: the NodeClaim says its instance is going as
        // soon as the termination is asked for, even while the Node lingers (another
        // finalizer): budgets and disruption no longer count it as a node being disrupted.
        if let Some(claim) = claim {
            crate::nodeclaim::lifecycle::mark_instance_terminating(ctx, claim).await?;
        }
        Ok(if still_terminating {
            InstanceView::Terminating { gone_at: None }
        } else {
            InstanceView::Gone
        })
    }

    /// Removes our finalizer: the Node goes away.
    async fn release(&self, ctx: &Leader, node: &Node) -> crate::Result<()> {
        let node_name = node.name_any();
        let mut node = node.clone();
        node.metadata
            .finalizers
            .get_or_insert_default()
            .retain(|f| f != TERMINATION_FINALIZER);
        match timeouts::api(Api::<Node>::all(ctx.writer()).replace(
            &node_name,
            &karpenter_kube::identity::post_params(),
            &node,
        ))
        .await
        {
            Ok(_) => {}
            Err(err) if is_conflict(&err) || is_not_found(&err) => return Ok(()),
            Err(err) => {
                return Err(crate::Error::kube(
                    format!("remove finalizer from node {node_name}"),
                    err,
                ));
            }
        }
        lock(&self.drained_since).remove(&node_name);
        let pool = NodePoolLabels {
            nodepool: node
                .labels()
                .get(NODEPOOL_LABEL)
                .cloned()
                .unwrap_or_default(),
        };
        let now = ctx.now();
        ctx.metrics
            .nodes_terminated
            .get_or_create(&crate::metrics::NodePoolZoneLabels {
                nodepool: pool.nodepool.clone(),
                zone: node
                    .labels()
                    .get(karpenter_api::well_known::ZONE_LABEL)
                    .cloned()
                    .unwrap_or_default(),
            })
            .inc();
        if let Some(seconds) = seconds_since(node.metadata.deletion_timestamp.as_ref(), now) {
            ctx.metrics
                .nodes_termination_duration
                .observe(&[&pool.nodepool], seconds);
        }
        if let Some(seconds) = seconds_since(node.metadata.creation_timestamp.as_ref(), now) {
            ctx.metrics
                .nodes_lifetime_duration
                .get_or_create(&pool)
                .observe(seconds);
        }
        tracing::info!(node = %node_name, "deleted node");
        Ok(())
    }

    async fn act(
        &self,
        ctx: &Leader,
        node: &Node,
        action: &PodAction,
        reason: &str,
        now: Timestamp,
    ) {
        if !lock(&self.backoff).ready(&action.key, &action.uid, now) {
            return;
        }
        let api: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(ctx.writer(), &action.namespace);
        let preconditions = Some(Preconditions {
            uid: Some(action.uid.clone()),
            resource_version: None,
        });
        let result = match action.action {
            Action::Evict => {
                let params = EvictParams {
                    delete_options: Some(DeleteParams {
                        preconditions,
                        ..DeleteParams::default()
                    }),
                    post_options: karpenter_kube::identity::post_params(),
                };
                timeouts::api(api.evict(&action.name, &params))
                    .await
                    .map(|_| ())
            }
            Action::ForceDelete { grace_seconds } => {
                let params = DeleteParams {
                    grace_period_seconds: Some(u32::try_from(grace_seconds).unwrap_or(1)),
                    preconditions,
                    ..DeleteParams::default()
                };
                timeouts::api(api.delete(&action.name, &params))
                    .await
                    .map(|_| ())
            }
        };
        if matches!(action.action, Action::Evict) {
            let code = match &result {
                Ok(()) => "200".to_string(),
                Err(err) => status_code(err).map_or_else(|| "error".to_string(), |c| c.to_string()),
            };
            ctx.metrics
                .pods_eviction_requests
                .get_or_create(&EvictionRequestLabels { code })
                .inc();
        }
        let pod_ref = || {
            let mut pod = Pod::default();
            pod.metadata.name = Some(action.name.clone());
            pod.metadata.namespace = Some(action.namespace.clone());
            pod.metadata.uid = Some(action.uid.clone());
            pod
        };
        match result {
            Ok(()) => {
                lock(&self.backoff).forget(&action.key, &action.uid);
                let (event_reason, message) = match action.action {
                    Action::Evict => {
                        ctx.metrics
                            .pods_drained
                            .get_or_create(&PodsDrainedLabels {
                                reason: reason.to_string(),
                            })
                            .inc();
                        (REASON_EVICTED, format!("Evicted pod: {reason}"))
                    }
                    Action::ForceDelete { .. } => (
                        REASON_DISRUPTED,
                        "Deleting the pod to accommodate the terminationTime of the node"
                            .to_string(),
                    ),
                };
                tracing::info!(pod = %action.key, node = %node.name_any(), reason = event_reason, "pod removed from node");
                ctx.events
                    .publish(EventRecord::new(
                        &pod_ref(),
                        EventType::Normal,
                        event_reason,
                        message,
                    ))
                    .await;
            }
            // Gone, or a different pod by now: nothing to do.
            Err(err) if matches!(status_code(&err), Some(404 | 409)) => {
                lock(&self.backoff).forget(&action.key, &action.uid)
            }
            Err(err) => {
                lock(&self.backoff).failed(&action.key, &action.uid, now);
                let blocked = match &err {
                    kube::Error::Api(s) if s.code == 429 => Some("evicting pod violates a PDB"),
                    kube::Error::Api(s) if s.message.contains(MULTIPLE_PDBS_MESSAGE) => {
                        Some("eviction does not support multiple PDBs")
                    }
                    _ => None,
                };
                match blocked {
                    Some(why) => {
                        tracing::debug!(pod = %action.key, "eviction refused: {why}");
                        let message = format!("Failed to drain node, {why} (pod {})", action.key);
                        ctx.events
                            .publish(EventRecord::new(
                                node,
                                EventType::Warning,
                                REASON_FAILED_DRAINING,
                                message,
                            ))
                            .await;
                    }
                    None => {
                        tracing::warn!(pod = %action.key, error = %err, "eviction failed; retrying")
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(deleting: bool, finalizer: bool, pid: &str) -> Node {
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"providerID": pid, "taints": [{"key": DISRUPTED_TAINT_KEY, "effect": "NoExecute"}]}
        }))
        .unwrap();
        if deleting {
            n.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
            );
        }
        if finalizer {
            n.metadata.finalizers = Some(vec![TERMINATION_FINALIZER.into()]);
        }
        n
    }

    #[test]
    fn drain_reason_is_the_disruption_reason_else_forceful_termination() {
        assert_eq!(drain_reason(None), "Forceful Termination");
        let mut claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"}},
            "status": {"conditions": [{"type": "Launched", "status": "True", "reason": "Launched"}]}
        }))
        .unwrap();
        assert_eq!(drain_reason(Some(&claim)), "Forceful Termination");
        if let Some(status) = claim.status.as_mut() {
            status.conditions.push(serde_json::from_value(json!({
                "type": NODECLAIM_CONDITION_DISRUPTION_REASON, "status": "True", "reason": "Underutilized"
            })).unwrap());
        }
        assert_eq!(drain_reason(Some(&claim)), "Underutilized");
    }

    #[test]
    fn finalizes_only_our_deleting_nodes() {
        assert!(should_finalize(&node(true, true, "sim://r/z/i-1"), "sim"));
        assert!(!should_finalize(&node(false, true, "sim://r/z/i-1"), "sim"));
        assert!(!should_finalize(&node(true, false, "sim://r/z/i-1"), "sim"));
        assert!(
            !should_finalize(&node(true, true, "aws:///us-west-2a/i-1"), "sim"),
            "another provider's node"
        );
    }

    #[test]
    fn taint_replaces_existing_disrupted_taint() {
        let tainted = tainted_for_termination(&node(true, true, "sim://x"));
        let taints = tainted.spec.as_ref().unwrap().taints.as_ref().unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0].effect, "NoSchedule");
        assert_eq!(tainted.labels()[EXCLUDE_FROM_LB_LABEL], "karpenter");
        assert!(has_disrupted_taint(&tainted));
        assert!(!has_disrupted_taint(&node(true, true, "sim://x")));
    }
}
