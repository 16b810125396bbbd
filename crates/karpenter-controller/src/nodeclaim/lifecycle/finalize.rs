//! The NodeClaim finalizer: termination deadline, Node deletion (its own finalizer drains it),
//! instance termination, then the finalizer goes.

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::v1::{CONDITION_TRUE, NODECLAIM_CONDITION_INSTANCE_TERMINATING};
use karpenter_api::well_known::{
    CAPACITY_TYPE_LABEL, NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION, TERMINATION_FINALIZER,
};
use karpenter_core::cloud_provider::CloudError;
use karpenter_core::nodeclaim_lifecycle::{set_condition, termination_deadline};
use karpenter_kube::{delete_ignoring_not_found, is_conflict, is_not_found};
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use super::{api, nodes_for, remember, write_status};
use crate::metrics::{NodeClaimLabels, NodePoolLabels, seconds_since};
use crate::nodeclaim::{has_finalizer, name, rfc3339};
use crate::timeouts;
use crate::writes::Leader;

/// The NodeClaim finalizer: deadline annotation, delete the Node (its finalizer drains), then
/// terminate the instance until the provider says it is gone, then let the NodeClaim go.
pub(super) async fn finalize(ctx: &Leader, claim: NodeClaim) -> crate::Result<()> {
    if !has_finalizer(&claim) {
        return Ok(());
    }
    let claim_name = name(&claim);
    let mut claim = claim;
    if let Some(deadline) = termination_deadline(&claim)
        && !claim
            .annotations()
            .contains_key(NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION)
    {
        claim.metadata.annotations.get_or_insert_default().insert(
            NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION.into(),
            rfc3339(deadline),
        );
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
            Err(err) if is_conflict(&err) || is_not_found(&err) => return Ok(()),
            Err(err) => {
                return Err(crate::Error::kube(
                    format!("annotate nodeclaim {claim_name}"),
                    err,
                ));
            }
        }
    }
    let nodes = nodes_for(ctx, &claim);
    if !nodes.is_empty() {
        let node_api: Api<Node> = Api::all(ctx.writer());
        for node in nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
        {
            delete_ignoring_not_found(node_api.delete(&node.name_any(), &DeleteParams::default()))
                .await
                .map_err(|err| {
                    crate::Error::kube(format!("delete node {}", node.name_any()), err)
                })?;
        }
        // The Node's own finalizer drains and terminates; wait for it to be gone.
        return Ok(());
    }
    match timeouts::cloud(ctx.cloud_writes().delete(&claim)).await {
        Ok(()) => {
            let now = ctx.now();
            let before = claim.status.clone();
            set_condition(
                &mut claim,
                NODECLAIM_CONDITION_INSTANCE_TERMINATING,
                CONDITION_TRUE,
                "InstanceTerminating",
                "",
                now,
            );
            return write_status(ctx, &claim, before.as_ref()).await;
        }
        Err(CloudError::NodeClaimNotFound(_)) => record_instance_termination(ctx, &claim),
        Err(err) => {
            return Err(crate::Error::Cloud {
                action: format!("terminate instance of nodeclaim {claim_name}"),
                source: err,
            });
        }
    }
    claim
        .metadata
        .finalizers
        .get_or_insert_default()
        .retain(|f| f != TERMINATION_FINALIZER);
    match timeouts::api(api(ctx).replace(
        &claim_name,
        &karpenter_kube::identity::post_params(),
        &claim,
    ))
    .await
    {
        Ok(_) => {}
        Err(err) if is_conflict(&err) || is_not_found(&err) => return Ok(()),
        Err(err) => {
            return Err(crate::Error::kube(
                format!("remove finalizer from nodeclaim {claim_name}"),
                err,
            ));
        }
    }
    let nodepool = claim.nodepool_name().unwrap_or_default().to_string();
    ctx.metrics
        .nodeclaims_terminated
        .get_or_create(&NodeClaimLabels {
            nodepool: nodepool.clone(),
            capacity_type: claim
                .labels()
                .get(CAPACITY_TYPE_LABEL)
                .cloned()
                .unwrap_or_default(),
            zone: claim
                .labels()
                .get(karpenter_api::well_known::ZONE_LABEL)
                .cloned()
                .unwrap_or_default(),
        })
        .inc();
    if let Some(seconds) = seconds_since(claim.metadata.deletion_timestamp.as_ref(), ctx.now()) {
        ctx.metrics
            .nodeclaims_termination_duration
            .get_or_create(&NodePoolLabels { nodepool })
            .observe(seconds);
    }
    tracing::info!(nodeclaim = %claim_name, "deleted nodeclaim");
    Ok(())
}

/// `karpenter_nodeclaims_instance_termination_duration_seconds`: from the first delete call (the
/// `InstanceTerminating` condition's transition) to the provider's answer that the instance is
/// gone.
fn record_instance_termination(ctx: &Leader, claim: &NodeClaim) {
    let since = claim
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == NODECLAIM_CONDITION_INSTANCE_TERMINATING)
        })
        .and_then(|c| {
            c.last_transition_time
                .as_deref()?
                .parse::<jiff::Timestamp>()
                .ok()
        });
    if let Some(since) = since {
        ctx.metrics
            .x
            .nodeclaims_instance_termination_duration
            .get_or_create(&crate::metrics::NodePoolOnlyLabels {
                nodepool: claim.nodepool_name().unwrap_or_default().to_string(),
            })
            .observe(ctx.now().duration_since(since).as_secs_f64().max(0.0));
    }
}
