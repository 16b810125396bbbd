//! Liveness: a NodeClaim that did not launch or register in time is deleted
//! ([`karpenter_core::nodeclaim_lifecycle::liveness_verdict`]).

use jiff::Timestamp;
use karpenter_api::NodeClaim;
use karpenter_core::nodeclaim_lifecycle::liveness_verdict_with;

use super::launch::delete_claim;
use crate::nodeclaim::name;
use crate::writes::Leader;

pub(super) async fn check_liveness(
    ctx: &Leader,
    claim: &NodeClaim,
    now: Timestamp,
) -> crate::Result<()> {
    let ttl = jiff::SignedDuration::try_from(ctx.settings.registration_ttl)
        .unwrap_or(karpenter_core::nodeclaim_lifecycle::REGISTRATION_TIMEOUT);
    let Some(reason) = liveness_verdict_with(claim, now, ttl) else {
        return Ok(());
    };
    tracing::info!(nodeclaim = %name(claim), %reason, "deleting nodeclaim that did not come up in time");
    delete_claim(ctx, claim, reason).await
}
