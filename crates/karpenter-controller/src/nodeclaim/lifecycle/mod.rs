//! The NodeClaim lifecycle (upstream `nodeclaim.lifecycle`): finalizer → launch → registration
//! → initialization → `Ready`, liveness timeouts, and the finalizer that deletes the Node and
//! terminates the instance. One file per phase; the verdicts (what the conditions say, what the
//! Node must look like, whether a NodeClaim timed out) are pure and live in
//! [`karpenter_core::nodeclaim_lifecycle`]; these modules do the API and cloud calls around them.
//!
//! Launch is idempotent across restarts: the provider's `create` returns the existing instance
//! for a NodeClaim that already has one, and the providerID is written to status before
//! anything else, so a crash between launch and the status write relaunches nothing.

mod finalize;
mod initialization;
mod launch;
mod liveness;
mod registration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::well_known::TERMINATION_FINALIZER;
use karpenter_api::{NodeClaim, NodeClaimStatus};
use karpenter_core::node::node_provider_id;
use karpenter_core::nodeclaim_lifecycle::{
    initialize_conditions, is_initialized, is_launched, provider_id, update_ready,
};
use karpenter_kube::{is_conflict, is_not_found};
use kube::{Api, ResourceExt};

use super::{has_finalizer, is_managed, name};
use crate::context::Context;
use crate::timeouts;
use crate::workers::{Urgency, Workers};
use crate::writes::Leader;
use launch::LaunchOutcome;

pub const REASON_INSUFFICIENT_CAPACITY: &str = "InsufficientCapacityError";
pub const REASON_NODECLASS_NOT_READY: &str = "NodeClassNotReady";
pub const REASON_UNREGISTERED_TAINT_MISSING: &str = "UnregisteredTaintMissing";

pub(super) fn api(ctx: &Leader) -> Api<NodeClaim> {
    Api::all(ctx.writer())
}

pub(super) fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> crate::Error {
    let action = action.into();
    move |e| crate::Error::kube(action, e)
}

/// Starts a reconcile for every managed NodeClaim in the state that is not already in flight
/// or backing off (the loop books the results).
pub fn start_reconciles(ctx: &Leader, workers: &mut Workers) {
    let candidates: Vec<(String, Urgency)> = ctx
        .state
        .read()
        .nodeclaims()
        .filter(|c| is_managed(ctx, c))
        .map(|c| (name(c), urgency(c)))
        .collect();
    workers.start_in_turn(ctx.now(), candidates, |key| {
        let claim = ctx.state.read().nodeclaim(key).cloned()?;
        let ctx = ctx.clone();
        Some(async move { reconcile(&ctx, claim).await })
    });
}

/// A NodeClaim being deleted or not yet initialized has a step to take (a launch, a
/// registration, its Node's deletion) that a command or a pending pod waits for; an
/// initialized one only has its liveness and `Ready` looked at.
fn urgency(claim: &NodeClaim) -> Urgency {
    if claim.metadata.deletion_timestamp.is_some() || !is_initialized(claim) {
        Urgency::Now
    } else {
        Urgency::InTurn
    }
}

/// Makes the state see our write at once, before the watch delivers it (never over a newer
/// watched copy).
pub(super) fn remember<K: karpenter_core::state::Tracked>(ctx: &Context, obj: &K) {
    ctx.state.write().remember(obj.clone());
}

/// A write was refused (409/404): the state's copy is behind the API server. Reads the current
/// object and puts it into the state, so the next tick works from it instead of relying on a
/// watch event that may already have been consumed (registration stays level-triggered).
pub(super) async fn resync<K>(ctx: &Context, api: &Api<K>, stale: &K)
where
    K: karpenter_core::state::Tracked + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let obj_name = stale.name_any();
    match timeouts::api(api.get_opt(&obj_name)).await {
        Ok(Some(fresh)) => {
            ctx.state.write().apply(fresh);
        }
        Ok(None) => ctx.state.write().delete(stale),
        Err(err) => {
            tracing::debug!(name = %obj_name, error = %err, "cannot re-read object after a refused write")
        }
    }
}

/// One pass over one NodeClaim.
pub async fn reconcile(ctx: &Leader, claim: NodeClaim) -> crate::Result<()> {
    if claim.metadata.deletion_timestamp.is_some() {
        return finalize::finalize(ctx, claim).await;
    }
    let claim_name = name(&claim);
    let mut claim = claim;
    if !has_finalizer(&claim) {
        claim
            .metadata
            .finalizers
            .get_or_insert_default()
            .push(TERMINATION_FINALIZER.to_string());
        match timeouts::api(api(ctx).replace(
            &claim_name,
            &karpenter_kube::identity::post_params(),
            &claim,
        ))
        .await
        {
            Ok(updated) => {
                remember(ctx, &updated);
                claim = updated;
            }
            Err(err) if is_conflict(&err) || is_not_found(&err) => {
                resync(ctx, &api(ctx), &claim).await;
                return Ok(());
            }
            Err(err) => {
                return Err(crate::Error::kube(
                    format!("add finalizer to nodeclaim {claim_name}"),
                    err,
                ));
            }
        }
    }
    let now = ctx.now();
    let before = claim.status.clone();
    initialize_conditions(&mut claim, now);

    if !is_launched(&claim) {
        match launch::launch(ctx, &mut claim, now).await? {
            LaunchOutcome::Launched => {}
            LaunchOutcome::Deleted | LaunchOutcome::Stale => return Ok(()),
            LaunchOutcome::Failed => {
                write_status(ctx, &claim, before.as_ref()).await?;
                return liveness::check_liveness(ctx, &claim, now).await;
            }
        }
    }

    let nodes = nodes_for(ctx, &claim);
    registration::register(ctx, &mut claim, &nodes, now).await?;
    let nodes = nodes_for(ctx, &claim);
    initialization::initialize(ctx, &mut claim, &nodes, now).await?;
    update_ready(&mut claim, now);
    write_status(ctx, &claim, before.as_ref()).await?;
    liveness::check_liveness(ctx, &claim, now).await
}

/// Sets `InstanceTerminating=True` on the NodeClaim (once): its instance's termination was asked
/// for (by the Node's finalizer or the NodeClaim's).
pub(crate) async fn mark_instance_terminating(
    ctx: &Leader,
    claim: &NodeClaim,
) -> crate::Result<()> {
    use karpenter_api::v1::ConditionsExt as _;
    let terminating = claim.status.as_ref().is_some_and(|s| {
        s.is_condition_true(karpenter_api::v1::NODECLAIM_CONDITION_INSTANCE_TERMINATING)
    });
    if terminating {
        return Ok(());
    }
    let mut claim = claim.clone();
    let before = claim.status.clone();
    karpenter_core::nodeclaim_lifecycle::set_condition(
        &mut claim,
        karpenter_api::v1::NODECLAIM_CONDITION_INSTANCE_TERMINATING,
        karpenter_api::v1::CONDITION_TRUE,
        "InstanceTerminating",
        "",
        ctx.now(),
    );
    write_status(ctx, &claim, before.as_ref()).await
}

pub(super) async fn write_status(
    ctx: &Leader,
    claim: &NodeClaim,
    before: Option<&NodeClaimStatus>,
) -> crate::Result<()> {
    if claim.status.as_ref() == before {
        return Ok(());
    }
    let claim_name = name(claim);
    match timeouts::api(api(ctx).replace_status(
        &claim_name,
        &karpenter_kube::identity::post_params(),
        claim,
    ))
    .await
    {
        Ok(updated) => {
            remember(ctx, &updated);
            Ok(())
        }
        Err(err) if is_conflict(&err) || is_not_found(&err) => {
            resync(ctx, &api(ctx), claim).await;
            Ok(())
        }
        Err(err) => Err(crate::Error::kube(
            format!("update status of nodeclaim {claim_name}"),
            err,
        )),
    }
}

/// Nodes carrying the NodeClaim's providerID, from the state.
pub(super) fn nodes_for(ctx: &Context, claim: &NodeClaim) -> Vec<Node> {
    let Some(id) = provider_id(claim) else {
        return Vec::new();
    };
    ctx.state
        .read()
        .nodes()
        .filter(|n| node_provider_id(n) == Some(id))
        .cloned()
        .collect()
}
