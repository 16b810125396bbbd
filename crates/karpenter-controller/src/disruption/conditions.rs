//! The NodeClaim conditions of upstream's `nodeclaim.disruption` controller (karpenter-core
//! §1.2), written only when they change, so a steady cluster costs no writes:
//!
//! * `Consolidatable`: `True` once `consolidateAfter` has passed since the node's last pod event
//!   (or its initialization), cleared while it has not or when the NodePool never consolidates.
//!   Only candidates are looked at: a node that cannot be disrupted anyway (not initialized,
//!   deleting, …) keeps whatever it had.
//! * `Drifted`: `True` with core's drift reason (`NodePoolDrifted`, `RequirementsDrifted`, the
//!   provider's `AMIDrift`, …) while [`drift_reason`] finds one, removed when it no longer does
//!   or the NodeClaim has not launched. NodeClaims whose NodePool is gone keep what they had
//!   (upstream). The transition time orders the drift method's candidates.

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_api::NodeClaim;
use karpenter_api::v1::{
    CONDITION_TRUE, ConditionsExt, NODECLAIM_CONDITION_CONSOLIDATABLE, NODECLAIM_CONDITION_DRIFTED,
    NODECLAIM_CONDITION_LAUNCHED,
};
use karpenter_api::well_known::NODEPOOL_LABEL;
use karpenter_core::disruption::ProviderDrift;
use karpenter_core::disruption::candidates::{DisruptionClass, candidates};
use karpenter_core::disruption::command::DriftContext;
use karpenter_core::disruption::drift::drift_reason;
use karpenter_core::disruption::emptiness::consolidation_block;
use karpenter_core::instance_type::InstanceType;
use karpenter_kube::{is_conflict, is_not_found};
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::timeouts;
use crate::writes::Leader;

/// The `Consolidatable` writes the state calls for: NodeClaim name → wanted (`true`: set
/// `True`; `false`: clear).
pub fn consolidatable_changes(
    ctx: &Context,
    instance_types: &BTreeMap<String, Vec<Arc<InstanceType>>>,
) -> Vec<(String, bool)> {
    let now = ctx.now();
    let state = ctx.state.read();
    let (found, _) = candidates(&state, now, DisruptionClass::Graceful, instance_types);
    found
        .iter()
        .filter_map(|candidate| {
            let wanted = consolidation_block(candidate, now).is_none();
            let current = candidate
                .nodeclaim
                .status
                .as_ref()
                .and_then(|s| s.condition(NODECLAIM_CONDITION_CONSOLIDATABLE));
            let has_true = current.is_some_and(|c| c.status == CONDITION_TRUE);
            let differs = if wanted { !has_true } else { current.is_some() };
            differs.then(|| (candidate.nodeclaim.name_any(), wanted))
        })
        .collect()
}

/// Writes the `Consolidatable` changes (a conflict or a vanished NodeClaim just waits for the
/// next pass).
pub async fn update_consolidatable(
    ctx: &Leader,
    instance_types: &BTreeMap<String, Vec<Arc<InstanceType>>>,
) {
    for (name, wanted) in consolidatable_changes(ctx, instance_types) {
        let wanted = wanted.then_some(NODECLAIM_CONDITION_CONSOLIDATABLE.to_string());
        write_condition(ctx, &name, NODECLAIM_CONDITION_CONSOLIDATABLE, wanted).await;
    }
}

/// The `Drifted` writes the state calls for: NodeClaim name → the reason it should carry
/// (`None`: remove the condition). Managed NodeClaims not being deleted whose NodePool exists;
/// the requirements are checked against the Node's labels over the NodeClaim's, as the drift
/// method does.
pub fn drifted_changes(
    ctx: &Context,
    instance_types: &BTreeMap<String, Vec<Arc<InstanceType>>>,
    provider_drift: &ProviderDrift,
) -> Vec<(String, Option<String>)> {
    let now = ctx.now();
    let state = ctx.state.read();
    let mut out = Vec::new();
    for joined in state.state_nodes() {
        let Some(claim) = joined.nodeclaim else {
            continue;
        };
        if claim.metadata.deletion_timestamp.is_some() || !crate::nodeclaim::is_managed(ctx, claim)
        {
            continue;
        }
        let Some(pool) = claim
            .labels()
            .get(NODEPOOL_LABEL)
            .and_then(|name| state.nodepool(name))
        else {
            continue;
        };
        let status = claim.status.as_ref();
        let launched = status.is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_LAUNCHED));
        let wanted = if launched {
            let mut labels = claim.labels().clone();
            if let Some(node) = joined.node {
                labels.extend(node.labels().iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            let context = DriftContext {
                provider_drift,
                instance_types: instance_types.get(&pool.name_any()).map(Vec::as_slice),
                now,
            };
            drift_reason(claim, &labels, pool, context)
        } else {
            None
        };
        let current = status.and_then(|s| s.condition(NODECLAIM_CONDITION_DRIFTED));
        let differs = match (&wanted, current) {
            (Some(reason), Some(c)) => {
                c.status != CONDITION_TRUE || c.reason.as_deref() != Some(reason.as_str())
            }
            (Some(_), None) => true,
            (None, current) => current.is_some(),
        };
        if differs {
            out.push((claim.name_any(), wanted));
        }
    }
    out
}

/// Writes the `Drifted` changes (see [`drifted_changes`]).
pub async fn update_drifted(
    ctx: &Leader,
    instance_types: &BTreeMap<String, Vec<Arc<InstanceType>>>,
    provider_drift: &ProviderDrift,
) {
    for (name, reason) in drifted_changes(ctx, instance_types, provider_drift) {
        write_condition(ctx, &name, NODECLAIM_CONDITION_DRIFTED, reason).await;
    }
}

/// Sets condition `type_` to `True` with `reason` (or removes it for `None`) on the NodeClaim as
/// the state holds it; a conflict or a vanished NodeClaim just waits for the next pass.
async fn write_condition(ctx: &Leader, name: &str, type_: &str, reason: Option<String>) {
    let Some(mut claim) = ctx.state.read().nodeclaim(name).cloned() else {
        return;
    };
    let generation = claim.metadata.generation;
    let status = claim.status.get_or_insert_with(Default::default);
    match &reason {
        Some(reason) => {
            status.set_condition(
                type_,
                CONDITION_TRUE,
                reason,
                "",
                &ctx.now().to_string(),
                generation,
            );
        }
        None => {
            status.clear_condition(type_);
        }
    }
    let api: Api<NodeClaim> = Api::all(ctx.writer());
    match timeouts::api(api.replace_status(name, &karpenter_kube::identity::post_params(), &claim))
        .await
    {
        Ok(updated) => {
            ctx.state.write().remember(updated);
        }
        Err(err) if is_conflict(&err) || is_not_found(&err) => {}
        Err(err) => {
            tracing::warn!(nodeclaim = %name, condition = %type_, error = %err, "failed to update nodeclaim condition")
        }
    }
}
