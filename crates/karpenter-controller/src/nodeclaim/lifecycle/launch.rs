//! Launch: ask the provider for an instance and record it (its labels first, then the providerID),
//! or give the NodeClaim up when the provider's answer will not change
//! ([`CloudError::is_retryable`]).

use jiff::Timestamp;
use karpenter_api::NodeClaim;
use karpenter_api::v1::{CONDITION_TRUE, CONDITION_UNKNOWN, NODECLAIM_CONDITION_LAUNCHED};
use karpenter_core::cloud_provider::CloudError;
use karpenter_core::nodeclaim_lifecycle::{hydrate, provider_id, set_condition, truncate_message};
use karpenter_kube::{delete_ignoring_not_found, is_conflict, is_not_found};
use kube::ResourceExt;
use kube::api::DeleteParams;

use super::{
    REASON_INSUFFICIENT_CAPACITY, REASON_NODECLASS_NOT_READY, api, kube_err, remember, resync,
};
use crate::events::{EventRecord, EventType};
use crate::metrics::NodeClaimDisruptedLabels;
use crate::nodeclaim::name;
use crate::timeouts;
use crate::writes::Leader;

pub(super) enum LaunchOutcome {
    Launched,
    Failed,
    Deleted,
    /// The state's copy was behind the API server; it has been re-read, try again next tick.
    Stale,
}

pub(super) async fn launch(
    ctx: &Leader,
    claim: &mut NodeClaim,
    now: Timestamp,
) -> crate::Result<LaunchOutcome> {
    let claim_name = name(claim);
    let created = match crate::nodeoverlay::capacity_for_launch(ctx, claim).await {
        Some(overlay) => {
            timeouts::cloud(
                ctx.cloud_writes()
                    .create_with_capacity_overlay(claim, &overlay),
            )
            .await
        }
        None => timeouts::cloud(ctx.cloud_writes().create(claim)).await,
    };
    match created {
        Ok(launched) => {
            let labels_before = claim.metadata.labels.clone();
            let annotations_before = claim.metadata.annotations.clone();
            hydrate(claim, &launched);
            set_condition(
                claim,
                NODECLAIM_CONDITION_LAUNCHED,
                CONDITION_TRUE,
                NODECLAIM_CONDITION_LAUNCHED,
                "",
                now,
            );
            // The labels (instance type, zone, capacity type) go to the API server before the
            // providerID, as upstream writes them: whoever sees a launched NodeClaim sees its
            // offering. A restart between the two writes launches again, which is idempotent
            // (the provider finds the same instance by the NodeClaim's tag).
            let relabelled = claim.metadata.labels != labels_before
                || claim.metadata.annotations != annotations_before;
            let recorded = async {
                let mut labelled = if relabelled {
                    // The main resource keeps its stored status: only the metadata changes here.
                    timeouts::api(api(ctx).replace(
                        &claim_name,
                        &karpenter_kube::identity::post_params(),
                        claim,
                    ))
                    .await?
                } else {
                    claim.clone()
                };
                labelled.status = claim.status.clone();
                timeouts::api(api(ctx).replace_status(
                    &claim_name,
                    &karpenter_kube::identity::post_params(),
                    &labelled,
                ))
                .await
            };
            let updated = match recorded.await {
                Ok(updated) => updated,
                Err(err) if is_conflict(&err) || is_not_found(&err) => {
                    // Launch is idempotent: the next tick relaunches from the fresh copy and
                    // gets the same instance back.
                    resync(ctx, &api(ctx), claim).await;
                    return Ok(LaunchOutcome::Stale);
                }
                Err(err) => {
                    return Err(kube_err(format!("record launch of nodeclaim {claim_name}"))(err));
                }
            };
            remember(ctx, &updated);
            tracing::info!(
                nodeclaim = %claim_name,
                provider_id = provider_id(&updated).unwrap_or_default(),
                instance_type = updated.labels().get(karpenter_api::well_known::INSTANCE_TYPE_LABEL).map(String::as_str).unwrap_or_default(),
                "launched nodeclaim"
            );
            *claim = updated;
            Ok(LaunchOutcome::Launched)
        }
        Err(CloudError::Create { reason, message }) => {
            set_condition(
                claim,
                NODECLAIM_CONDITION_LAUNCHED,
                CONDITION_UNKNOWN,
                &reason,
                &truncate_message(&message),
                now,
            );
            Ok(LaunchOutcome::Failed)
        }
        // The same call would fail the same way: give this NodeClaim up; the provisioner plans
        // its pods again (elsewhere: the provider marked the offerings unavailable).
        Err(err) if !err.is_retryable() => {
            let (event, reason) = match err {
                CloudError::InsufficientCapacity(_) => {
                    (REASON_INSUFFICIENT_CAPACITY, "insufficient_capacity")
                }
                CloudError::NodeClassNotReady(_) => {
                    (REASON_NODECLASS_NOT_READY, "nodeclass_not_ready")
                }
                _ => (err.metric_label(), "launch_failed"),
            };
            tracing::error!(nodeclaim = %claim_name, error = %err, "failed launching nodeclaim; deleting it");
            ctx.events
                .publish(EventRecord::new(
                    claim,
                    EventType::Warning,
                    event,
                    format!("Failed to launch nodeclaim: {err}"),
                ))
                .await;
            delete_claim(ctx, claim, reason).await?;
            Ok(LaunchOutcome::Deleted)
        }
        Err(err) => {
            tracing::warn!(nodeclaim = %claim_name, error = %err, "launch failed; retrying");
            set_condition(
                claim,
                NODECLAIM_CONDITION_LAUNCHED,
                CONDITION_UNKNOWN,
                "LaunchFailed",
                &truncate_message(&err.to_string()),
                now,
            );
            Ok(LaunchOutcome::Failed)
        }
    }
}

/// Deletes the NodeClaim (its finalizer then terminates whatever was launched), counting why.
pub(super) async fn delete_claim(
    ctx: &Leader,
    claim: &NodeClaim,
    reason: &str,
) -> crate::Result<()> {
    let claim_name = name(claim);
    let found = delete_ignoring_not_found(api(ctx).delete(&claim_name, &DeleteParams::default()))
        .await
        .map_err(kube_err(format!("delete nodeclaim {claim_name}")))?;
    if !found {
        return Ok(());
    }
    ctx.metrics
        .nodeclaims_disrupted
        .get_or_create(&NodeClaimDisruptedLabels::for_claim(reason, claim))
        .inc();
    Ok(())
}
