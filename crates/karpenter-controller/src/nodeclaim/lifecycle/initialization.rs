//! Initialization: the Node is Ready, its startup and ephemeral taints are gone and every
//! requested resource is registered ([`initialization_blocker`]); it gets the initialized label.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::v1::{
    CONDITION_TRUE, CONDITION_UNKNOWN, ConditionsExt, NODECLAIM_CONDITION_INITIALIZED,
};
use karpenter_api::well_known::NODE_INITIALIZED_LABEL;
use karpenter_core::nodeclaim_lifecycle::{initialization_blocker, is_registered, set_condition};
use karpenter_kube::{is_conflict, is_not_found};
use kube::{Api, ResourceExt};

use super::{remember, resync};
use crate::nodeclaim::name;
use crate::timeouts;
use crate::writes::Leader;

pub(super) async fn initialize(
    ctx: &Leader,
    claim: &mut NodeClaim,
    nodes: &[Node],
    now: Timestamp,
) -> crate::Result<()> {
    let initialized = claim
        .status
        .as_ref()
        .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_INITIALIZED));
    if !is_registered(claim) || initialized {
        return Ok(());
    }
    let [node] = nodes else {
        set_condition(
            claim,
            NODECLAIM_CONDITION_INITIALIZED,
            CONDITION_UNKNOWN,
            "NodeNotFound",
            "Node not registered with cluster",
            now,
        );
        return Ok(());
    };
    if let Some((reason, message)) = initialization_blocker(claim, node) {
        set_condition(
            claim,
            NODECLAIM_CONDITION_INITIALIZED,
            CONDITION_UNKNOWN,
            reason,
            &message,
            now,
        );
        return Ok(());
    }
    if node
        .labels()
        .get(NODE_INITIALIZED_LABEL)
        .is_none_or(|v| v != "true")
    {
        let mut desired = node.clone();
        desired
            .metadata
            .labels
            .get_or_insert_default()
            .insert(NODE_INITIALIZED_LABEL.into(), "true".into());
        let node_name = node.name_any();
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
                return Err(crate::Error::kube(
                    format!("label node {node_name} initialized"),
                    err,
                ));
            }
        }
    }
    set_condition(
        claim,
        NODECLAIM_CONDITION_INITIALIZED,
        CONDITION_TRUE,
        NODECLAIM_CONDITION_INITIALIZED,
        "",
        now,
    );
    tracing::info!(nodeclaim = %name(claim), "initialized nodeclaim");
    Ok(())
}
