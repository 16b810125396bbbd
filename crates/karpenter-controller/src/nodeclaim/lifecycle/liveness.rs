//! Liveness: a NodeClaim that did not launch or register in time is deleted
//! ([`liveness_verdict`]).

use jiff::Timestamp;
use karpenter_api::NodeClaim;
use karpenter_core::nodeclaim_lifecycle::liveness_verdict;

use super::launch::delete_claim;
use crate::nodeclaim::name;
use crate::writes::Leader;

pub(super) async fn check_liveness(
    ctx: &Leader,
    claim: &NodeClaim,
    now: Timestamp,
) -> crate::Result<()> {
    let Some(reason) = liveness_verdict(claim, now) else {
        return Ok(());
    };
    tracing::info!(nodeclaim = %name(claim), %reason, "deleting nodeclaim that did not come up in time");
    delete_claim(ctx, claim, reason).await
}
