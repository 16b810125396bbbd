//! NodeClaim controllers: the lifecycle (launch → registration → initialization, liveness and
//! the finalizer that terminates the instance) and garbage collection.
//!
//! Both run as loops over the shared cluster state (the watchers keep it warm), act only while
//! this replica leads (each NodeClaim reconciled in its own task, see [`crate::workers`]), and write with the object's resourceVersion so a stale view
//! can never overwrite a newer one: a conflict just means "look again on the next tick".

pub mod gc;
pub mod lifecycle;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::NodeClaim;
use karpenter_api::well_known::TERMINATION_FINALIZER;
use kube::ResourceExt;
use tokio::sync::watch;

use crate::backoff::BackoffPolicy;
use crate::context::Context;
use crate::workers::{MAX_CONCURRENT_RECONCILES, Workers, run_reconciler};

/// How often every NodeClaim is reconciled (upstream requeues registration/initialization and
/// instance-termination polls at 1–5 s; one period keeps the loop simple). A NodeClaim whose
/// reconcile failed waits out its own backoff instead (1 s → 5 min).
pub const RECONCILE_PERIOD: Duration = Duration::from_secs(1);

/// Whether this provider manages the NodeClaim (its NodeClass kind is one the provider serves).
pub fn is_managed(ctx: &Context, claim: &NodeClaim) -> bool {
    let class = &claim.spec.node_class_ref;
    ctx.cloud
        .supported_node_classes()
        .iter()
        .any(|k| k.group == class.group && k.kind == class.kind)
}

pub(crate) fn has_finalizer<K: kube::Resource>(obj: &K) -> bool {
    obj.finalizers().iter().any(|f| f == TERMINATION_FINALIZER)
}

pub(crate) fn rfc3339(t: Timestamp) -> String {
    t.to_string()
}

pub(crate) fn parse_time(raw: &str) -> Option<Timestamp> {
    raw.parse().ok()
}

/// Runs the lifecycle loop until `shutdown` turns true: every [`RECONCILE_PERIOD`] each managed
/// NodeClaim that is not already being reconciled and not backing off gets its own reconcile
/// task ([`Workers`]), so a slow or failing NodeClaim never delays the others.
pub async fn run(ctx: Arc<Context>, shutdown: watch::Receiver<bool>) {
    let workers = Workers::new(
        "nodeclaim",
        BackoffPolicy::RECONCILE,
        MAX_CONCURRENT_RECONCILES,
    );
    run_reconciler(
        ctx,
        shutdown,
        workers,
        RECONCILE_PERIOD,
        |leader, workers| {
            lifecycle::start_reconciles(leader, workers);
        },
    )
    .await;
}

/// The NodeClaim's name for logs.
pub(crate) fn name(claim: &NodeClaim) -> String {
    claim.name_any()
}
