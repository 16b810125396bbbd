//! Registration: the Node with the NodeClaim's providerID joins; it gets the NodeClaim's labels,
//! taints, owner reference and finalizer ([`registered_node`]).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::v1::{
    CONDITION_FALSE, CONDITION_TRUE, CONDITION_UNKNOWN, NODECLAIM_CONDITION_REGISTERED,
};
use karpenter_api::well_known::{NODE_REGISTERED_LABEL, UNREGISTERED_TAINT_KEY, ZONE_LABEL};
use karpenter_api::{NodeClaim, NodeClaimStatus};
use karpenter_core::nodeclaim_lifecycle::{is_registered, registered_node, set_condition};
use karpenter_kube::{is_conflict, is_not_found};
use kube::{Api, ResourceExt};

use super::{REASON_UNREGISTERED_TAINT_MISSING, remember, resync};
use crate::events::{EventRecord, EventType};
use crate::nodeclaim::name;
use crate::timeouts;
use crate::writes::Leader;

pub(super) async fn register(
    ctx: &Leader,
    claim: &mut NodeClaim,
    nodes: &[Node],
    now: Timestamp,
) -> crate::Result<()> {
    if is_registered(claim) {
        return Ok(());
    }
    let node = match nodes {
        [] => {
            set_condition(
                claim,
                NODECLAIM_CONDITION_REGISTERED,
                CONDITION_UNKNOWN,
                "NodeNotFound",
                "Node not registered with cluster",
                now,
            );
            return Ok(());
        }
        [node] => node,
        _ => {
            set_condition(
                claim,
                NODECLAIM_CONDITION_REGISTERED,
                CONDITION_FALSE,
                "MultipleNodesFound",
                "Invariant violated, matched multiple nodes",
                now,
            );
            return Ok(());
        }
    };
    let has_unregistered_taint = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == UNREGISTERED_TAINT_KEY));
    if !has_unregistered_taint && !node.labels().contains_key(NODE_REGISTERED_LABEL) {
        ctx.events
            .publish(EventRecord::new(
                node,
                EventType::Warning,
                REASON_UNREGISTERED_TAINT_MISSING,
                format!("Missing {UNREGISTERED_TAINT_KEY} taint which prevents registration related race conditions on Karpenter-managed nodes"),
            ))
            .await;
    }
    let desired = registered_node(node, claim);
    let node_name = node.name_any();
    if desired != *node {
        let node_api = Api::<Node>::all(ctx.writer());
        match timeouts::api(node_api.replace(
            &node_name,
            &karpenter_kube::identity::post_params(),
            &desired,
        ))
        .await
        {
            Ok(updated) => remember(ctx, &updated),
            Err(err) if is_conflict(&err) || is_not_found(&err) => {
                resync(ctx, &node_api, node).await;
                return Ok(());
            }
            Err(err) => {
                registration_failed(ctx, claim, true);
                return Err(crate::Error::kube(format!("sync node {node_name}"), err));
            }
        }
    }
    claim
        .status
        .get_or_insert_with(NodeClaimStatus::default)
        .node_name = Some(node_name.clone());
    set_condition(
        claim,
        NODECLAIM_CONDITION_REGISTERED,
        CONDITION_TRUE,
        NODECLAIM_CONDITION_REGISTERED,
        "",
        now,
    );
    ctx.metrics
        .nodes_created
        .get_or_create(&crate::metrics::NodePoolZoneLabels {
            nodepool: claim.nodepool_name().unwrap_or_default().to_string(),
            zone: claim.labels().get(ZONE_LABEL).cloned().unwrap_or_default(),
        })
        .inc();
    registration_failed(ctx, claim, false);
    tracing::info!(nodeclaim = %name(claim), node = %node_name, "registered nodeclaim");
    Ok(())
}

/// Records whether `claim`'s last registration attempt failed (the provisioner stops counting
/// a Node as capacity only once its registration was tried and failed, past the grace).
fn registration_failed(ctx: &Leader, claim: &NodeClaim, failed: bool) {
    let mut failures = ctx
        .registration_failures
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if failed {
        failures.insert(name(claim));
    } else {
        failures.remove(&name(claim));
    }
}
