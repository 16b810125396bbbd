//! Node repair on the cluster (upstream `node.health`, karpenter-core §1.2; feature gate
//! `NodeRepair`, default off): core's [`plan_repairs`] over the state with the provider's
//! `repair_policies()`, then for each node due the NodeClaim gets
//! `karpenter.sh/nodeclaim-termination-timestamp = now` (the drain forces everything at once,
//! whatever the NodePool's `terminationGracePeriod`) and is deleted — no budgets, no
//! do-not-disrupt. Metric `nodeclaims_disrupted_total{reason="unhealthy"}`.
//!
//! A node the 20 % cap holds gets `NodeRepairBlocked` on its Node, NodeClaim and NodePool and
//! is looked at again after [`BLOCKED_RECHECK`] (upstream requeues it in 5 minutes).

use std::collections::HashMap;

use jiff::Timestamp;
use karpenter_api::NodeClaim;
use karpenter_api::well_known::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION;
use karpenter_core::disruption::repair::{BLOCKED_RECHECK, RepairBlocked, plan_repairs};
use karpenter_kube::{is_conflict, is_not_found};
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::events::{EventRecord, EventType, REASON_NODE_REPAIR_BLOCKED};
use crate::metrics::NodeClaimDisruptedLabels;
use crate::nodeclaim::{is_managed, rfc3339};
use crate::timeouts;
use crate::writes::Leader;

/// The metric reason of a repair (upstream `UnhealthyReason`).
pub const UNHEALTHY_REASON: &str = "unhealthy";

/// Nodes held back by the cap, by Node name, until they are looked at again.
#[derive(Debug, Default)]
pub struct RepairHolds {
    until: HashMap<String, Timestamp>,
}

/// Repairs the nodes due (when the gate is on); returns when a node next becomes due or a held
/// one is looked at again.
pub async fn repair_unhealthy(ctx: &Leader, holds: &mut RepairHolds) -> Option<Timestamp> {
    if !ctx.settings.feature_gates.node_repair {
        return None;
    }
    let policies = ctx.cloud.repair_policies();
    let now = ctx.now();
    holds.until.retain(|_, until| *until > now);
    let (repairs, blocked, next_due) = {
        let state = ctx.state.read();
        let plan = plan_repairs(&state, &policies, now);
        let ours = |name: &str| {
            state
                .nodeclaim(name)
                .filter(|c| is_managed(ctx, c))
                .cloned()
        };
        let repairs: Vec<NodeClaim> = plan
            .repair
            .iter()
            .filter(|r| !holds.until.contains_key(&r.node))
            .filter_map(|r| {
                let claim = ours(&r.nodeclaim)?;
                tracing::info!(node = %r.node, nodeclaim = %r.nodeclaim, condition = %r.condition, since = %r.since, "repairing unhealthy node");
                Some(claim)
            })
            .collect();
        let blocked: Vec<(RepairBlocked, Option<NodeClaim>)> = plan
            .blocked
            .into_iter()
            .filter(|b| !holds.until.contains_key(&b.node))
            .map(|b| {
                let claim = ours(&b.nodeclaim);
                (b, claim)
            })
            .filter(|(_, claim)| claim.is_some())
            .collect();
        (repairs, blocked, plan.next_due)
    };
    for claim in repairs {
        force_delete(ctx, claim, now).await;
    }
    let recheck = now.checked_add(BLOCKED_RECHECK).ok();
    for (blocked, claim) in blocked {
        publish_blocked(ctx, &blocked, claim.as_ref()).await;
        if let Some(until) = recheck {
            holds.until.insert(blocked.node.clone(), until);
        }
    }
    holds.until.values().copied().chain(next_due).min()
}

/// Stamps the termination deadline `now` on the NodeClaim, then deletes it.
async fn force_delete(ctx: &Leader, mut claim: NodeClaim, now: Timestamp) {
    let name = claim.name_any();
    let api: Api<NodeClaim> = Api::all(ctx.writer());
    claim.metadata.annotations.get_or_insert_default().insert(
        NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION.into(),
        rfc3339(now),
    );
    match timeouts::api(api.replace(&name, &karpenter_kube::identity::post_params(), &claim)).await
    {
        Ok(updated) => {
            ctx.state.write().remember(updated);
        }
        // Changed meanwhile: the next tick decides again on the fresh object.
        Err(err) if is_conflict(&err) || is_not_found(&err) => return,
        Err(err) => {
            tracing::warn!(nodeclaim = %name, error = %err, "failed to stamp the repair deadline");
            return;
        }
    }
    match timeouts::api(api.delete(&name, &DeleteParams::default())).await {
        Ok(_) => {
            ctx.metrics
                .nodeclaims_disrupted
                .get_or_create(&NodeClaimDisruptedLabels::for_claim(
                    UNHEALTHY_REASON,
                    &claim,
                ))
                .inc();
            record_unhealthy(ctx, &claim);
        }
        Err(err) if is_not_found(&err) => {}
        Err(err) => {
            tracing::warn!(nodeclaim = %name, error = %err, "failed to delete unhealthy nodeclaim")
        }
    }
}

/// `NodeRepairBlocked` on the Node, its NodeClaim and its NodePool.
async fn publish_blocked(ctx: &Context, blocked: &RepairBlocked, claim: Option<&NodeClaim>) {
    let message = blocked.message();
    let mut records = Vec::new();
    {
        let state = ctx.state.read();
        if let Some(node) = state.node(&blocked.node) {
            records.push(EventRecord::new(
                node,
                EventType::Warning,
                REASON_NODE_REPAIR_BLOCKED,
                message.clone(),
            ));
        }
        if let Some(pool) = blocked.nodepool.as_deref().and_then(|p| state.nodepool(p)) {
            records.push(EventRecord::new(
                pool,
                EventType::Warning,
                REASON_NODE_REPAIR_BLOCKED,
                message.clone(),
            ));
        }
    }
    if let Some(claim) = claim {
        records.push(EventRecord::new(
            claim,
            EventType::Warning,
            REASON_NODE_REPAIR_BLOCKED,
            message,
        ));
    }
    for record in records {
        ctx.events.publish(record).await;
    }
}

/// `karpenter_nodeclaims_unhealthy_disrupted_total`: the repair policy's condition the claim's
/// Node matches (the first, as policies are checked in order).
fn record_unhealthy(ctx: &Leader, claim: &NodeClaim) {
    let status = claim.status.as_ref();
    let node_name = status.and_then(|s| s.node_name.clone()).unwrap_or_default();
    let condition = {
        let state = ctx.state.read();
        let node_conditions = state
            .node(&node_name)
            .and_then(|n| n.status.as_ref()?.conditions.clone())
            .unwrap_or_default();
        ctx.cloud
            .repair_policies()
            .into_iter()
            .find(|p| {
                node_conditions
                    .iter()
                    .any(|c| c.type_ == p.condition_type && c.status == p.condition_status)
            })
            .map(|p| p.condition_type)
            .unwrap_or_default()
    };
    ctx.metrics
        .x
        .nodeclaims_unhealthy_disrupted
        .get_or_create(&crate::metrics::UnhealthyLabels {
            condition,
            nodepool: claim.nodepool_name().unwrap_or_default().to_string(),
            capacity_type: crate::metrics::capacity_type(claim),
            image_id: status.and_then(|s| s.image_id.clone()).unwrap_or_default(),
        })
        .inc();
}
