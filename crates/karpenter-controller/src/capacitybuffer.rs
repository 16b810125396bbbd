//! CapacityBuffers behind the `CapacityBuffer` feature gate (upstream's
//! `controllers/capacitybuffer` and `state/virtualpods`): a watcher keeps the buffers in a
//! [`BufferStore`]; [`run`] resolves each one (its PodTemplate or workload, read from the API
//! server), writes `ReadyForProvisioning`, `replicas`, `podTemplateRef`, `podTemplateGeneration`
//! through the pure [`karpenter_core::capacity_buffer::resolve`], and keeps the buffer's virtual
//! pods in the store. The provisioner adds those pods to every pass's pending pods (no Pod object
//! is created), writes each buffer's `Provisioning` condition and records the nodes that hold
//! buffer capacity, which the disruption loop does not consolidate. With the gate off none of this
//! runs and CapacityBuffer objects are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec};
use karpenter_api::autoscaling::{CapacityBuffer, CapacityBufferStatus};
use karpenter_core::capacity_buffer::{self as core, Lookup, Placement};
use karpenter_core::pod::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::{Notify, watch};

use crate::context::Context;
use crate::timeouts;

/// How often every buffer is resolved again without a change to it: its PodTemplate or workload
/// may have changed (upstream watches PodTemplates and requeues every 30 s; a short period serves
/// both without another watch).
pub const RESOLVE_PERIOD: Duration = Duration::from_secs(2);

/// The trigger id the provisioner sees for buffer work.
pub const TRIGGER: &str = "capacity-buffer";

/// The cluster's CapacityBuffers, their virtual pods and the nodes holding them.
#[derive(Debug, Default)]
pub struct BufferStore {
    buffers: RwLock<BTreeMap<String, CapacityBuffer>>,
    /// Virtual pods of every ready buffer, by buffer key (`namespace/name`).
    pods: RwLock<BTreeMap<String, Vec<Arc<Pod>>>>,
    /// Nodes (or in-flight NodeClaims) the last provisioning pass placed virtual pods on.
    hosts: RwLock<BTreeSet<String>>,
    /// A buffer was added, changed or deleted.
    pub changed: Notify,
}

impl BufferStore {
    /// Every buffer, in key order.
    pub fn list(&self) -> Vec<CapacityBuffer> {
        read(&self.buffers).values().cloned().collect()
    }

    /// Every ready buffer's virtual pods.
    pub fn virtual_pods(&self) -> Vec<Arc<Pod>> {
        read(&self.pods).values().flatten().cloned().collect()
    }

    /// The nodes holding buffer capacity (empty once no buffer has virtual pods).
    pub fn hosts(&self) -> BTreeSet<String> {
        if read(&self.pods).values().all(Vec::is_empty) {
            return BTreeSet::new();
        }
        read(&self.hosts).clone()
    }

    /// Records where the last provisioning pass placed the virtual pods.
    pub fn set_hosts(&self, hosts: BTreeSet<String>) {
        *self.hosts.write().unwrap_or_else(|e| e.into_inner()) = hosts;
    }

    /// Adds a NodeClaim the provisioner just created for virtual pods: it holds buffer capacity
    /// from its creation on, before any pass places chunks on it as an existing node.
    pub fn add_host(&self, name: String) {
        self.hosts
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name);
    }

    /// Replaces a buffer's virtual pods; whether they changed. A buffer deleted while its
    /// reference was being read keeps no pods: the resolve loop works from a list taken before
    /// its lookups, and putting the pods back would hold capacity for a buffer that is gone,
    /// forever (the rapid create/delete regression case leaked its nodes that way). The buffers
    /// stay read-locked until the pods are written, so a delete either comes first and is seen,
    /// or waits and removes what this wrote.
    fn set_pods(&self, key: &str, pods: Vec<Pod>) -> bool {
        let buffers = read(&self.buffers);
        let mut all = self.pods.write().unwrap_or_else(|e| e.into_inner());
        if !buffers.contains_key(key) {
            return all.remove(key).is_some();
        }
        let unchanged = all.get(key).is_some_and(|old| {
            old.len() == pods.len() && old.iter().zip(&pods).all(|(a, b)| **a == *b)
        });
        if unchanged {
            return false;
        }
        if pods.is_empty() {
            all.remove(key).is_some()
        } else {
            all.insert(key.to_string(), pods.into_iter().map(Arc::new).collect());
            true
        }
    }

    fn replace(&self, buffers: Vec<CapacityBuffer>) {
        let map: BTreeMap<String, CapacityBuffer> =
            buffers.into_iter().map(|b| (core::key(&b), b)).collect();
        self.pods
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|key, _| map.contains_key(key));
        *self.buffers.write().unwrap_or_else(|e| e.into_inner()) = map;
        self.changed.notify_one();
    }

    fn apply(&self, buffer: CapacityBuffer) {
        self.buffers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(core::key(&buffer), buffer);
        self.changed.notify_one();
    }

    fn delete(&self, buffer: &CapacityBuffer) {
        let key = core::key(buffer);
        self.buffers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        self.pods
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        self.changed.notify_one();
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

/// Watches CapacityBuffers (every namespace) into `ctx.buffers` until aborted. A deleted buffer's
/// virtual pods go at once, and the provisioner runs so the nodes it held are freed.
pub async fn watch(ctx: Arc<Context>) {
    let api: Api<CapacityBuffer> = Api::all(ctx.client.clone());
    let stream = watcher::watcher(api, karpenter_kube::watch::config()).default_backoff();
    futures::pin_mut!(stream);
    let mut initial = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => initial.clear(),
            Ok(Event::InitApply(buffer)) => initial.push(buffer),
            Ok(Event::InitDone) => ctx.buffers.replace(std::mem::take(&mut initial)),
            Ok(Event::Apply(buffer)) => ctx.buffers.apply(buffer),
            Ok(Event::Delete(buffer)) => {
                ctx.buffers.delete(&buffer);
                ctx.provisioning_trigger.trigger(TRIGGER);
            }
            Err(err) => {
                tracing::warn!(kind = "CapacityBuffer", error = %err, "watch failed, retrying");
            }
        }
    }
}

/// Reads what a buffer's reference names (upstream's `ResolveCapacityBuffer`).
async fn lookup(ctx: &Context, buffer: &CapacityBuffer) -> crate::Result<Lookup> {
    let (kind, name) = match core::reference(buffer) {
        Ok(reference) => reference,
        Err(message) => return Ok(Lookup::Failed(message)),
    };
    let namespace = buffer.namespace().unwrap_or_default();
    let client = ctx.client.clone();
    let failed = |err| crate::Error::kube(format!("get {kind} {namespace}/{name}"), err);
    let workload = |replicas: Option<i32>, template: PodTemplateSpec| Lookup::Workload {
        replicas: replicas.unwrap_or(1),
        template,
    };
    let found = match kind {
        "PodTemplate" => {
            let api: Api<PodTemplate> = Api::namespaced(client, &namespace);
            timeouts::api(api.get_opt(name))
                .await
                .map_err(failed)?
                .map(|t| Lookup::PodTemplate {
                    name: t.name_any(),
                    generation: t.metadata.generation,
                    template: t.template.unwrap_or_default(),
                })
        }
        "Deployment" => {
            let api: Api<Deployment> = Api::namespaced(client, &namespace);
            timeouts::api(api.get_opt(name))
                .await
                .map_err(failed)?
                .and_then(|d| d.spec)
                .map(|s| workload(s.replicas, s.template))
        }
        "StatefulSet" => {
            let api: Api<StatefulSet> = Api::namespaced(client, &namespace);
            timeouts::api(api.get_opt(name))
                .await
                .map_err(failed)?
                .and_then(|d| d.spec)
                .map(|s| workload(s.replicas, s.template))
        }
        _ => {
            let api: Api<ReplicaSet> = Api::namespaced(client, &namespace);
            timeouts::api(api.get_opt(name))
                .await
                .map_err(failed)?
                .and_then(|d| d.spec)
                .map(|s| workload(s.replicas, s.template.unwrap_or_default()))
        }
    };
    Ok(found.unwrap_or_else(|| Lookup::NotFound(core::not_found_message(kind, name))))
}

/// Resolves every buffer, refreshes its virtual pods and (as leader) writes the statuses that
/// changed. Triggers the provisioner when some buffer's virtual pods changed.
pub async fn reconcile(ctx: &Arc<Context>) {
    let now = ctx.now().to_string();
    let mut pods_changed = false;
    for buffer in ctx.buffers.list() {
        let key = core::key(&buffer);
        let found = match lookup(ctx, &buffer).await {
            Ok(found) => found,
            Err(err) => {
                // Unexpected (not NotFound): keep the last pods, retry next period.
                tracing::error!(capacitybuffer = %key, error = %err, "failed to resolve capacitybuffer");
                continue;
            }
        };
        let resolution = core::resolve(&buffer, found, &now);
        let pods = match &resolution.chunks {
            Some((template, replicas)) => core::virtual_pods(&buffer, template, *replicas),
            None => Vec::new(),
        };
        pods_changed |= ctx.buffers.set_pods(&key, pods);
        if buffer.status.as_ref() != Some(&resolution.status) {
            write_status(ctx, &buffer, &resolution.status).await;
        }
    }
    if pods_changed {
        ctx.provisioning_trigger.trigger(TRIGGER);
    }
}

/// Writes a buffer's status as leader, with the resourceVersion it was computed from (a
/// conflict means a newer buffer is on its way: the next period writes from it).
pub async fn write_status(
    ctx: &Arc<Context>,
    buffer: &CapacityBuffer,
    status: &CapacityBufferStatus,
) {
    let Some(leader) = ctx.leader() else {
        return;
    };
    let key = core::key(buffer);
    let api: Api<CapacityBuffer> =
        Api::namespaced(leader.writer(), &buffer.namespace().unwrap_or_default());
    let patch = json!({
        "metadata": {"resourceVersion": buffer.resource_version()},
        "status": status,
    });
    match timeouts::api(api.patch_status(
        &buffer.name_any(),
        &karpenter_kube::identity::patch_params(),
        &Patch::Merge(&patch),
    ))
    .await
    {
        Ok(written) => ctx.buffers.apply(written),
        Err(kube::Error::Api(response)) if response.code == 404 || response.code == 409 => {}
        Err(err) => {
            tracing::warn!(capacitybuffer = %key, error = %err, "failed to update capacitybuffer status");
        }
    }
}

/// After a provisioning pass: each buffer's `Provisioning` condition from where its virtual pods
/// landed (`placements`, by buffer key).
pub async fn write_provisioning(ctx: &Arc<Context>, placements: &BTreeMap<String, Placement>) {
    let now = ctx.now().to_string();
    for buffer in ctx.buffers.list() {
        let placement = placements.get(&core::key(&buffer));
        if let Some(status) = core::with_provisioning_condition(&buffer, placement, &now) {
            write_status(ctx, &buffer, &status).await;
        }
    }
}

/// Resolves the buffers when one changes, when leadership starts, and every [`RESOLVE_PERIOD`],
/// until `shutdown` turns true.
pub async fn run(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut starts = ctx.work_starts();
    loop {
        reconcile(&ctx).await;
        tokio::select! {
            () = ctx.buffers.changed.notified() => {}
            () = starts.next() => {}
            () = tokio::time::sleep(RESOLVE_PERIOD) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn buffer(name: &str) -> CapacityBuffer {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"podTemplateRef": {"name": "t"}, "replicas": 1}
        }))
        .unwrap()
    }

    fn pod(name: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"}})).unwrap()
    }

    #[test]
    fn a_buffer_deleted_during_its_lookup_keeps_no_virtual_pods() {
        let store = BufferStore::default();
        let doomed = buffer("doomed");
        store.apply(doomed.clone());
        // The resolve loop lists the buffers, then the watch deletes one while its lookup runs.
        let listed = store.list();
        store.delete(&doomed);
        for b in &listed {
            store.set_pods(&core::key(b), vec![pod("virtual-0")]);
        }
        assert!(store.virtual_pods().is_empty());
        store.set_hosts(["node-a".to_string()].into());
        assert!(store.hosts().is_empty(), "no buffer holds a node");
    }

    #[test]
    fn a_live_buffer_gets_its_virtual_pods_and_loses_them_when_deleted() {
        let store = BufferStore::default();
        let live = buffer("live");
        store.apply(live.clone());
        assert!(store.set_pods(&core::key(&live), vec![pod("virtual-0")]));
        assert_eq!(store.virtual_pods().len(), 1);
        assert!(
            !store.set_pods(&core::key(&live), vec![pod("virtual-0")]),
            "unchanged"
        );
        store.delete(&live);
        assert!(store.virtual_pods().is_empty());
    }
}
