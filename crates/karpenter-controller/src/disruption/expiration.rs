//! Expiration (karpenter-core §1.2 `nodeclaim.expiration`): a NodeClaim past its
//! `spec.expireAfter` is deleted, forcefully — no budgets, no do-not-disrupt check before the
//! deletion starts (the drain still respects PDBs and do-not-disrupt pods up to
//! `terminationGracePeriod`). Its pods are provisioned for as usual. Upstream publishes no event
//! for it; the metric reason is `expired`.

use jiff::Timestamp;
use karpenter_api::NodeClaim;
use karpenter_core::disruption::expiration::{expired, next_expiry};
use karpenter_kube::is_not_found;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use crate::metrics::NodeClaimDisruptedLabels;
use crate::nodeclaim::is_managed;
use crate::timeouts;
use crate::writes::Leader;

/// Deletes every expired NodeClaim this provider manages; returns the next instant one expires
/// (when the loop should look again).
pub async fn delete_expired(ctx: &Leader) -> Option<Timestamp> {
    let now = ctx.now();
    let (expired, next): (Vec<NodeClaim>, Option<Timestamp>) = {
        let state = ctx.state.read();
        let claims = expired(&state, now)
            .iter()
            .filter_map(|name| state.nodeclaim(name))
            .filter(|claim| is_managed(ctx, claim))
            .cloned()
            .collect();
        (claims, next_expiry(&state, now))
    };
    let api: Api<NodeClaim> = Api::all(ctx.writer());
    for claim in expired {
        let name = claim.name_any();
        match timeouts::api(api.delete(&name, &DeleteParams::default())).await {
            Ok(_) => {
                tracing::info!(nodeclaim = %name, "deleting expired nodeclaim");
                ctx.metrics
                    .nodeclaims_disrupted
                    .get_or_create(&NodeClaimDisruptedLabels::for_claim("expired", &claim))
                    .inc();
            }
            Err(err) if is_not_found(&err) => {}
            Err(err) => {
                tracing::warn!(nodeclaim = %name, error = %err, "failed to delete expired nodeclaim")
            }
        }
    }
    next
}
