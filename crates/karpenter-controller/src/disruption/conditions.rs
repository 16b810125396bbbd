//! The NodeClaim condition `Consolidatable` (karpenter-core §1.2 `nodeclaim.disruption`): `True`
//! once `consolidateAfter` has passed since the node's last pod event (or its initialization),
//! cleared while it has not or when the NodePool never consolidates. Written only when it
//! changes, so a steady cluster costs no writes.
//!
//! Only candidates are looked at: a node that cannot be disrupted anyway (not initialized,
//! deleting, …) keeps whatever it had.

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_api::NodeClaim;
use karpenter_api::v1::{CONDITION_TRUE, ConditionsExt, NODECLAIM_CONDITION_CONSOLIDATABLE};
use karpenter_core::disruption::candidates::{DisruptionClass, candidates};
use karpenter_core::disruption::emptiness::consolidation_block;
use karpenter_core::instance_type::InstanceType;
use karpenter_kube::{is_conflict, is_not_found};
use kube::api::PostParams;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::timeouts;

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
    ctx: &Context,
    instance_types: &BTreeMap<String, Vec<Arc<InstanceType>>>,
) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for (name, wanted) in consolidatable_changes(ctx, instance_types) {
        let Some(mut claim) = ctx.state.read().nodeclaim(&name).cloned() else {
            continue;
        };
        let generation = claim.metadata.generation;
        let status = claim.status.get_or_insert_with(Default::default);
        if wanted {
            status.set_condition(
                NODECLAIM_CONDITION_CONSOLIDATABLE,
                CONDITION_TRUE,
                NODECLAIM_CONDITION_CONSOLIDATABLE,
                "",
                &ctx.now().to_string(),
                generation,
            );
        } else {
            status.clear_condition(NODECLAIM_CONDITION_CONSOLIDATABLE);
        }
        match timeouts::api(api.replace_status(&name, &PostParams::default(), &claim)).await {
            Ok(updated) => {
                ctx.state.write().remember(updated);
            }
            Err(err) if is_conflict(&err) || is_not_found(&err) => {}
            Err(err) => {
                tracing::warn!(nodeclaim = %name, error = %err, "failed to update Consolidatable condition")
            }
        }
    }
}
