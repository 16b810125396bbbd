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
use karpenter_kube::stopped;
use kube::ResourceExt;
use tokio::sync::watch;

use crate::backoff::BackoffPolicy;
use crate::context::Context;
use crate::workers::{MAX_CONCURRENT_RECONCILES, Workers};

pub use lifecycle::{LAUNCH_TIMEOUT, REGISTRATION_TIMEOUT};

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
pub async fn run(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut workers = Workers::new(
        "nodeclaim",
        BackoffPolicy::RECONCILE,
        MAX_CONCURRENT_RECONCILES,
    );
    let mut lifecycle = tokio::time::interval(RECONCILE_PERIOD);
    lifecycle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leadership = ctx.leadership();
    let mut starts = ctx.work_starts();
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => break,
            done = workers.next_finished() => workers.finished(done, ctx.now()),
            // A new leader resumes launches and registrations at once.
            () = starts.next() => lifecycle::start_reconciles(&ctx, &mut workers),
            // A replica that stopped leading drops its in-flight writes at once.
            Ok(()) = leadership.changed() => {
                if !ctx.is_leader() {
                    workers.stop();
                }
            }
            _ = lifecycle.tick() => {
                if ctx.is_leader() && ctx.state.read().synced() {
                    lifecycle::start_reconciles(&ctx, &mut workers);
                }
            }
        }
    }
    workers.stop();
}

/// The NodeClaim's name for logs.
pub(crate) fn name(claim: &NodeClaim) -> String {
    claim.name_any()
}
