//! NodeOverlays behind the `NodeOverlay` feature gate: a watcher keeps them in an
//! [`OverlayStore`]; [`crate::provisioning::provisioner::resolve_instance_types`] (provisioning,
//! consolidation, drift) applies them through the pure
//! [`karpenter_core::node_overlay::evaluate`]; [`run`] writes each overlay's
//! `ValidationSucceeded`/`Ready` conditions (upstream's `nodeoverlay.controller`). With the gate
//! off none of this runs and NodeOverlay objects are not read.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use karpenter_api::v1alpha1::{CAPACITY_OVERLAY_APPLIED_ANNOTATION, NodeOverlay};
use karpenter_api::{NodeClaim, NodePool, well_known};
use karpenter_core::cloud_provider::CapacityOverlay;
use karpenter_core::instance_type::InstanceType;
use karpenter_core::node_overlay::{self, Evaluation};
use kube::ResourceExt;
use kube::api::{Api, Patch};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::{Notify, watch};

use crate::context::Context;
use crate::provisioning::provisioner::{disruption_pools, resolve_offered, usable_pools};
use crate::timeouts;

/// How often the statuses are recomputed without a change (upstream requeues every 6 h; the
/// catalogue, hence a conflict, can change in between).
pub const STATUS_PERIOD: Duration = Duration::from_secs(300);

/// The NodeOverlays of the cluster, by name, as the watcher last saw them.
#[derive(Debug, Default)]
pub struct OverlayStore {
    overlays: RwLock<BTreeMap<String, NodeOverlay>>,
    /// Something changed: statuses and prices are recomputed.
    pub changed: Notify,
}

impl OverlayStore {
    /// Every overlay, in name order.
    pub fn list(&self) -> Vec<NodeOverlay> {
        self.overlays
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    fn replace(&self, overlays: Vec<NodeOverlay>) {
        let map = overlays.into_iter().map(|o| (o.name_any(), o)).collect();
        *self.overlays.write().unwrap_or_else(|e| e.into_inner()) = map;
        self.changed.notify_one();
    }

    fn apply(&self, overlay: NodeOverlay) {
        self.overlays
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(overlay.name_any(), overlay);
        self.changed.notify_one();
    }

    fn delete(&self, overlay: &NodeOverlay) {
        self.overlays
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&overlay.name_any());
        self.changed.notify_one();
    }
}

/// The offered types with the cluster's overlays applied (the gate is checked by the caller).
pub fn apply(
    ctx: &Context,
    offered: Vec<(NodePool, Vec<Arc<InstanceType>>)>,
) -> Vec<(NodePool, Vec<Arc<InstanceType>>)> {
    let overlays = ctx.overlays.list();
    if overlays.is_empty() {
        return offered;
    }
    node_overlay::evaluate(&overlays, &offered).apply_all(offered)
}

/// The capacity the cluster's NodeOverlays add to the types of `claim`'s NodePool, for its
/// launch: only with the gate on and for a NodeClaim planned on overlaid capacity (it carries
/// `karpenter.sh/capacity-overlay-applied`), evaluated as the provisioner evaluates it (the
/// usable pools, the provider's catalogue). `None` when there is nothing to add.
pub async fn capacity_for_launch(ctx: &Context, claim: &NodeClaim) -> Option<CapacityOverlay> {
    if !ctx.settings.feature_gates.node_overlay {
        return None;
    }
    claim
        .annotations()
        .get(CAPACITY_OVERLAY_APPLIED_ANNOTATION)?;
    let pool = claim.labels().get(well_known::NODEPOOL_LABEL)?.clone();
    let pools = usable_pools(&ctx.state.read());
    let offered = resolve_offered(ctx, pools).await;
    let overlay = node_overlay::evaluate(&ctx.overlays.list(), &offered).capacity_added(&pool);
    (!overlay.is_empty()).then_some(overlay)
}

/// Watches NodeOverlays into `ctx.overlays` until aborted. A change also wakes the disruption
/// loop (prices moved: consolidation decisions may differ, as upstream marks the cluster
/// unconsolidated).
pub async fn watch(ctx: Arc<Context>) {
    let api: Api<NodeOverlay> = Api::all(ctx.client.clone());
    let stream = watcher::watcher(api, karpenter_kube::watch::config()).default_backoff();
    futures::pin_mut!(stream);
    let mut initial = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => initial.clear(),
            Ok(Event::InitApply(overlay)) => initial.push(overlay),
            Ok(Event::InitDone) => ctx.overlays.replace(std::mem::take(&mut initial)),
            Ok(Event::Apply(overlay)) => ctx.overlays.apply(overlay),
            Ok(Event::Delete(overlay)) => ctx.overlays.delete(&overlay),
            Err(err) => {
                tracing::warn!(kind = "NodeOverlay", error = %err, "watch failed, retrying");
                continue;
            }
        }
        ctx.templates_changed.notify_one();
    }
}

/// Evaluates every overlay against every NodePool's catalogue and writes the statuses that
/// changed. Writes only as leader.
pub async fn reconcile(ctx: &Arc<Context>) -> crate::Result<Evaluation> {
    let pools = disruption_pools(&ctx.state.read());
    let offered = resolve_offered(ctx, pools).await;
    let overlays = ctx.overlays.list();
    let evaluation = node_overlay::evaluate(&overlays, &offered);
    let Some(leader) = ctx.leader() else {
        return Ok(evaluation);
    };
    let api: Api<NodeOverlay> = Api::all(leader.writer());
    let now = ctx.now().to_string();
    for overlay in &overlays {
        let name = overlay.name_any();
        let Some(verdict) = evaluation.verdict(&name) else {
            continue;
        };
        if *verdict != node_overlay::Verdict::Applied {
            tracing::warn!(nodeoverlay = %name, verdict = %verdict, "nodeoverlay not applied");
        }
        let Some(status) = node_overlay::desired_status(overlay, verdict, &now) else {
            continue;
        };
        let patch = json!({ "status": status });
        match timeouts::api(api.patch_status(
            &name,
            &karpenter_kube::identity::patch_params(),
            &Patch::Merge(&patch),
        ))
        .await
        {
            Ok(_) => {}
            // Deleted meanwhile: the watcher will drop it.
            Err(kube::Error::Api(response)) if response.code == 404 => {}
            Err(err) => {
                return Err(crate::Error::kube(
                    format!("update status of nodeoverlay {name}"),
                    err,
                ));
            }
        }
    }
    Ok(evaluation)
}

/// Recomputes the statuses when an overlay changes, when leadership starts, and every
/// [`STATUS_PERIOD`], until `shutdown` turns true.
pub async fn run(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut starts = ctx.work_starts();
    loop {
        if ctx.state.read().synced()
            && let Err(err) = reconcile(&ctx).await
        {
            tracing::error!(error = %err, "failed to reconcile nodeoverlays");
        }
        tokio::select! {
            () = ctx.overlays.changed.notified() => {}
            () = starts.next() => {}
            () = tokio::time::sleep(STATUS_PERIOD) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}
