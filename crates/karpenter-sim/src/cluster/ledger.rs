//! The sim provider's ledger in ConfigMaps of the controller's namespace, so a restarted
//! controller finds the instances it launched, and [`PersistentSimProvider`]: the sim provider
//! that writes the ledger after every launch and termination, before the caller can record
//! anything that depends on it.
//!
//! The ledger is split like a cloud keeps it: a head (`karpenter-sim-ledger`: region, sequence
//! number, offerings out of capacity) and one ConfigMap per running instance
//! (`karpenter-sim-instance-<id>`, labelled `karpenter-sim/ledger=instance`). An API server
//! refuses a ConfigMap over 1 MiB, which one ConfigMap of every instance (≈ 4 KB each) passed at
//! about 250 nodes; and a launch now writes one small object instead of the whole cloud.
//! A head written by an older version that still lists its instances is read as well; the next
//! save moves them into their own ConfigMaps.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::cloud_provider::{
    CapacityOverlay, CloudError, CloudProvider, DriftReason, NodeClassKind, RepairPolicy,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_kube::{delete_ignoring_not_found, is_conflict, is_not_found, lock, timeouts};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use tokio::sync::watch;

use super::nodeclass::SimNodeClasses;
use crate::SimCloudProvider;

/// Name of the ConfigMap holding the ledger's head.
pub const LEDGER_CONFIGMAP: &str = "karpenter-sim-ledger";
/// Key of the ledger JSON inside the head ConfigMap.
pub const LEDGER_KEY: &str = "ledger.json";
/// Prefix of the per-instance ConfigMaps' names (the instance ID follows).
pub const INSTANCE_CONFIGMAP_PREFIX: &str = "karpenter-sim-instance-";
/// Key of the instance JSON inside an instance ConfigMap.
pub const INSTANCE_KEY: &str = "instance.json";
/// The label that marks (and lists) the per-instance ConfigMaps.
pub const INSTANCE_LABEL: &str = "karpenter-sim/ledger";
const INSTANCE_LABEL_VALUE: &str = "instance";
/// Instance ConfigMaps per list page.
const LIST_PAGE: u32 = 500;
/// Instance ConfigMaps created or deleted at once by one save.
const WRITES_AT_ONCE: usize = 16;

/// Errors reading or writing the ledger.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("kubernetes API request failed: {action}")]
    Kube {
        action: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error(
        "ConfigMaps {namespace}/{LEDGER_CONFIGMAP} and {namespace}/{INSTANCE_CONFIGMAP_PREFIX}* do not hold a sim ledger ({source}); delete them to start with an empty cloud"
    )]
    Corrupt {
        namespace: String,
        #[source]
        source: crate::SimError,
    },
    #[error("failed to serialise the sim ledger")]
    Snapshot(#[source] crate::SimError),
}

/// The name of an instance's ConfigMap.
pub fn instance_configmap(id: &str) -> String {
    format!("{INSTANCE_CONFIGMAP_PREFIX}{id}")
}

/// What the ConfigMaps hold as far as this store knows: the head JSON last written or read,
/// and the IDs of the instance ConfigMaps (`None` until listed once).
#[derive(Debug, Default)]
struct Written {
    head: Option<String>,
    instances: Option<BTreeSet<String>>,
}

/// Reads and writes the ledger's ConfigMaps; remembers what it wrote so a save sends only
/// what changed (no request at all for an unchanged ledger).
#[derive(Clone)]
pub struct LedgerStore {
    api: Api<ConfigMap>,
    namespace: String,
    written: Arc<Mutex<Written>>,
    /// Saves run one at a time: two concurrent saves could otherwise let an older snapshot
    saving: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for LedgerStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl LedgerStore {
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        LedgerStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            written: Arc::default(),
            saving: Arc::default(),
        }
    }

    fn kube_error(&self, action: &str, name: &str) -> impl FnOnce(kube::Error) -> LedgerError {
        let action = format!("{action} ConfigMap {}/{name}", self.namespace);
        move |e| LedgerError::Kube {
            action,
            source: Box::new(e),
        }
    }

    /// Loads the persisted ledger into `provider`. Returns whether one was found.
    pub async fn restore(&self, provider: &SimCloudProvider) -> Result<bool, LedgerError> {
        let head = timeouts::api(self.api.get_opt(LEDGER_CONFIGMAP))
            .await
            .map_err(self.kube_error("read", LEDGER_CONFIGMAP))?
            .and_then(|cm| cm.data)
            .and_then(|mut d| d.remove(LEDGER_KEY));
        let instances = self.list_instances().await?;
        let ids: BTreeSet<String> = instances.keys().cloned().collect();
        if head.is_none() && instances.is_empty() {
            lock(&self.written).instances = Some(ids);
            return Ok(false);
        }
        // Instances without a head (it was deleted, or never written): an empty head.
        let head_json = match &head {
            Some(json) => json.clone(),
            None => provider.empty_head().map_err(LedgerError::Snapshot)?,
        };
        let jsons: Vec<String> = instances.into_values().collect();
        provider
            .restore_parts(&head_json, &jsons)
            .map_err(|source| LedgerError::Corrupt {
                namespace: self.namespace.clone(),
                source,
            })?;
        *lock(&self.written) = Written {
            head,
            instances: Some(ids),
        };
        Ok(true)
    }

    /// The instance ConfigMaps: instance ID → its JSON (paged, so a large cloud is not one
    /// response).
    async fn list_instances(&self) -> Result<BTreeMap<String, String>, LedgerError> {
        let mut params = ListParams::default()
            .labels(&format!("{INSTANCE_LABEL}={INSTANCE_LABEL_VALUE}"))
            .limit(LIST_PAGE);
        let mut out = BTreeMap::new();
        loop {
            let page = timeouts::api(self.api.list(&params))
                .await
                .map_err(self.kube_error("list", &format!("{INSTANCE_CONFIGMAP_PREFIX}*")))?;
            for cm in page.items {
                let id = cm
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| n.strip_prefix(INSTANCE_CONFIGMAP_PREFIX))
                    .map(str::to_string);
                let json = cm.data.and_then(|mut d| d.remove(INSTANCE_KEY));
                if let (Some(id), Some(json)) = (id, json) {
                    out.insert(id, json);
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(out),
            }
        }
    }

    /// Writes what changed in the provider's ledger since the last save: a ConfigMap for each
    /// new instance, the head if it changed, and deletes the ConfigMaps of terminated
    /// instances. `Ok` only when the ConfigMaps now hold this ledger. New instances are written
    /// before the head so a crash in between loses nothing (the restored sequence number
    /// follows the instances); a head conflict (someone wrote in between) re-reads and retries
    /// (up to [`SAVE_ATTEMPTS`] times); a missing namespace is an error.
    pub async fn save(&self, provider: &SimCloudProvider) -> Result<(), LedgerError> {
        let _turn = self.saving.lock().await;
        let known = lock(&self.written).instances.clone();
        let stored = match known {
            Some(ids) => ids,
            None => {
                let ids: BTreeSet<String> = self.list_instances().await?.into_keys().collect();
                lock(&self.written).instances = Some(ids.clone());
                ids
            }
        };
        let running = provider.instance_ids();
        let mut new = Vec::new();
        for id in running.difference(&stored) {
            // None: terminated meanwhile.
            if let Some(json) = provider.instance_json(id).map_err(LedgerError::Snapshot)? {
                new.push((id.clone(), json));
            }
        }
        let created = new.into_iter().map(|(id, json)| async move {
            let result = self.create_instance(&id, json).await;
            (id, result)
        });
        self.record_each(created, |ids, id| {
            ids.insert(id);
        })
        .await?;
        let head = provider.snapshot_head().map_err(LedgerError::Snapshot)?;
        if lock(&self.written).head.as_deref() != Some(head.as_str()) {
            self.write_head(&head).await?;
            lock(&self.written).head = Some(head);
        }
        // Owned IDs: a future borrowing the sets would not be `Send` for every lifetime.
        let gone: Vec<String> = stored.difference(&running).cloned().collect();
        let deleted = gone.into_iter().map(|id| async move {
            let name = instance_configmap(&id);
            let result =
                delete_ignoring_not_found(self.api.delete(&name, &DeleteParams::default()))
                    .await
                    .map(|_found| ())
                    .map_err(self.kube_error("delete", &name));
            (id, result)
        });
        self.record_each(deleted, |ids, id| {
            ids.remove(&id);
        })
        .await
    }

    /// Runs the instance ConfigMaps' writes [`WRITES_AT_ONCE`] at a time and records each
    /// one that succeeded in the written set (`record`); the first error once all are done.
    /// One after the other, a burst of 64 launches waited ~3 s on a busy API server for its
    /// instances' ConfigMaps, every launch of the burst behind the same save.
    async fn record_each<F>(
        &self,
        writes: impl Iterator<Item = F>,
        record: impl Fn(&mut BTreeSet<String>, String),
    ) -> Result<(), LedgerError>
    where
        F: std::future::Future<Output = (String, Result<(), LedgerError>)>,
    {
        let mut running = futures::stream::iter(writes).buffer_unordered(WRITES_AT_ONCE);
        let mut first_error = None;
        while let Some((id, result)) = running.next().await {
            match result {
                Ok(()) => {
                    if let Some(ids) = lock(&self.written).instances.as_mut() {
                        record(ids, id);
                    }
                }
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// An instance never changes once launched (IDs are not reused): one already written is
    /// left as it is.
    async fn create_instance(&self, id: &str, json: String) -> Result<(), LedgerError> {
        let name = instance_configmap(id);
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    INSTANCE_LABEL.to_string(),
                    INSTANCE_LABEL_VALUE.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(INSTANCE_KEY.to_string(), json)])),
            ..ConfigMap::default()
        };
        match timeouts::api(
            self.api
                .create(&karpenter_kube::identity::post_params(), &cm),
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(err) if is_conflict(&err) => Ok(()),
            Err(err) => Err(self.kube_error("create", &name)(err)),
        }
    }

    async fn write_head(&self, head: &str) -> Result<(), LedgerError> {
        let data = BTreeMap::from([(LEDGER_KEY.to_string(), head.to_string())]);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let last_attempt = attempt >= SAVE_ATTEMPTS;
            let current = timeouts::api(self.api.get_opt(LEDGER_CONFIGMAP))
                .await
                .map_err(self.kube_error("read", LEDGER_CONFIGMAP))?;
            let written = match current {
                Some(mut cm) => {
                    cm.data = Some(data.clone());
                    timeouts::api(self.api.replace(
                        LEDGER_CONFIGMAP,
                        &karpenter_kube::identity::post_params(),
                        &cm,
                    ))
                    .await
                    .map_err(|err| (err, "update"))
                }
                None => {
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(LEDGER_CONFIGMAP.into()),
                            namespace: Some(self.namespace.clone()),
                            ..ObjectMeta::default()
                        },
                        data: Some(data.clone()),
                        ..ConfigMap::default()
                    };
                    timeouts::api(
                        self.api
                            .create(&karpenter_kube::identity::post_params(), &cm),
                    )
                    .await
                    .map_err(|err| (err, "create"))
                }
            };
            match written {
                Ok(_) => return Ok(()),
                // Updated or created by someone else in between: read again and retry.
                Err((err, _)) if is_conflict(&err) && !last_attempt => continue,
                // A 404 on create is a missing namespace; on update, the ConfigMap was deleted
                // in between (retry creates it).
                Err((err, "update")) if is_not_found(&err) && !last_attempt => continue,
                Err((err, action)) => return Err(self.kube_error(action, LEDGER_CONFIGMAP)(err)),
            }
        }
    }
}

/// How often [`LedgerStore::save`] re-reads and retries after a conflict before giving up.
pub const SAVE_ATTEMPTS: u32 = 5;

/// The sim provider with a durable ledger: `create` and `delete` persist it before returning, so
/// a NodeClaim never records a providerID the restarted cloud would not know.
///
/// With [`PersistentSimProvider::follow_leadership`], the in-memory ledger is reloaded from the
/// ConfigMap before the first cloud call after any leadership change: another replica may have
/// launched or terminated instances while this one followed.
#[derive(Clone, Debug)]
pub struct PersistentSimProvider {
    pub sim: SimCloudProvider,
    pub store: LedgerStore,
    freshness: Arc<Freshness>,
    /// Checks each launch's NodeClass on the API server (see [`Self::with_node_classes`]).
    node_classes: Option<SimNodeClasses>,
}

/// Whether the in-memory ledger must be reloaded, and the leadership changes that make it so.
#[derive(Debug, Default)]
struct Freshness {
    /// A reload is due (leadership changed, or the last reload failed). Held across the reload
    /// so concurrent cloud calls wait for it instead of reloading twice.
    stale: tokio::sync::Mutex<bool>,
    /// Set once, synchronously, before the replica's election starts.
    leadership: Mutex<Option<watch::Receiver<bool>>>,
}

impl PersistentSimProvider {
    /// `sim` holds the current ledger (restored with [`LedgerStore::restore`], or new).
    pub fn new(sim: SimCloudProvider, store: LedgerStore) -> Self {
        PersistentSimProvider {
            sim,
            store,
            freshness: Arc::default(),
            node_classes: None,
        }
    }

    /// Refuses launches whose EC2NodeClass is missing or not Ready, as the aws provider does
    /// (the lifecycle then deletes the NodeClaim). Without it every launch goes ahead.
    pub fn with_node_classes(mut self, node_classes: SimNodeClasses) -> Self {
        self.node_classes = Some(node_classes);
        self
    }

    /// Reload the ledger before the next cloud call whenever `leadership` changes (give it
    /// the controller's leadership receiver before the replica starts, so no change is missed).
    ///
    /// Synchronous, so a caller can subscribe before anything else of the replica runs. Changes
    /// `leadership` saw before this call are not reloaded for: the ledger was restored at start.
    pub fn follow_leadership(&self, mut leadership: watch::Receiver<bool>) {
        leadership.mark_unchanged();
        *lock(&self.freshness.leadership) = Some(leadership);
    }

    /// Reloads the ledger from the ConfigMap if leadership changed since the last call (or a
    /// reload failed). Cloud calls do this first; the sim kubelet before each pass.
    pub async fn refresh_if_stale(&self) -> Result<(), CloudError> {
        let mut stale = self.freshness.stale.lock().await;
        if let Some(leadership) = lock(&self.freshness.leadership).as_mut()
            && leadership.has_changed().unwrap_or(false)
        {
            leadership.mark_unchanged();
            *stale = true;
        }
        if *stale {
            self.store
                .restore(&self.sim)
                .await
                .map_err(|e| CloudError::other_from("reloading the sim ledger", e))?;
            *stale = false;
            tracing::debug!("reloaded the sim ledger after a leadership change");
        }
        Ok(())
    }

    async fn persist(&self) -> Result<(), CloudError> {
        self.store
            .save(&self.sim)
            .await
            .map_err(|e| CloudError::other_from("persisting the sim ledger", e))
    }
}

#[async_trait]
impl CloudProvider for PersistentSimProvider {
    fn name(&self) -> &str {
        self.sim.name()
    }

    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        self.create_with_capacity_overlay(node_claim, &CapacityOverlay::default())
            .await
    }

    async fn create_with_capacity_overlay(
        &self,
        node_claim: &NodeClaim,
        overlay: &CapacityOverlay,
    ) -> Result<NodeClaim, CloudError> {
        if let Some(node_classes) = &self.node_classes {
            node_classes.check_launch(node_claim).await?;
        }
        self.refresh_if_stale().await?;
        let launched = self
            .sim
            .create_with_capacity_overlay(node_claim, overlay)
            .await;
        // Capacity marks change the ledger even when the launch fails.
        self.persist().await?;
        launched
    }

    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudError> {
        self.refresh_if_stale().await?;
        self.sim.delete(node_claim).await?;
        self.persist().await
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        self.refresh_if_stale().await?;
        self.sim.get(provider_id).await
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudError> {
        self.refresh_if_stale().await?;
        self.sim.list().await
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.sim.instance_types(node_pool, node_class).await
    }

    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudError> {
        self.sim.is_drifted(node_claim).await
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.sim.repair_policies()
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.sim.supported_node_classes()
    }
}
