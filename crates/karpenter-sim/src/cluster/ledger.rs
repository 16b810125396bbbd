//! The sim provider's ledger in a ConfigMap (`karpenter-sim-ledger` in the controller's
//! namespace), so a restarted controller finds the instances it launched, and
//! [`PersistentSimProvider`]: the sim provider that writes the ledger after every launch and
//! termination, before the caller can record anything that depends on it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::cloud_provider::{
    CloudError, CloudProvider, DriftReason, NodeClassKind, RepairPolicy,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_kube::{is_conflict, is_not_found, lock, timeouts};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;

use crate::SimCloudProvider;

/// Name of the ConfigMap holding the ledger.
pub const LEDGER_CONFIGMAP: &str = "karpenter-sim-ledger";
/// Key of the ledger JSON inside the ConfigMap.
pub const LEDGER_KEY: &str = "ledger.json";

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
        "ConfigMap {namespace}/{LEDGER_CONFIGMAP} does not hold a sim ledger ({source}); delete it to start with an empty cloud"
    )]
    Corrupt {
        namespace: String,
        #[source]
        source: crate::SimError,
    },
    #[error("failed to serialise the sim ledger")]
    Snapshot(#[source] crate::SimError),
}

/// Reads and writes the ledger ConfigMap; remembers the last JSON written so unchanged ledgers
/// cost no request.
#[derive(Clone)]
pub struct LedgerStore {
    api: Api<ConfigMap>,
    namespace: String,
    last_written: Arc<Mutex<Option<String>>>,
    /// Saves run one at a time: two concurrent saves could otherwise let an older snapshot
    /// land last, and a restart would restore instances that were already terminated.
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
            last_written: Arc::default(),
            saving: Arc::default(),
        }
    }

    /// Loads the persisted ledger into `provider`. Returns whether one was found.
    pub async fn restore(&self, provider: &SimCloudProvider) -> Result<bool, LedgerError> {
        let found = timeouts::api(self.api.get_opt(LEDGER_CONFIGMAP))
            .await
            .map_err(|e| LedgerError::Kube {
                action: format!("read ConfigMap {}/{LEDGER_CONFIGMAP}", self.namespace),
                source: Box::new(e),
            })?;
        let Some(json) = found
            .and_then(|cm| cm.data)
            .and_then(|mut d| d.remove(LEDGER_KEY))
        else {
            return Ok(false);
        };
        provider
            .restore(&json)
            .map_err(|source| LedgerError::Corrupt {
                namespace: self.namespace.clone(),
                source,
            })?;
        *lock(&self.last_written) = Some(json);
        Ok(true)
    }

    /// Writes the provider's ledger if it changed since the last write. `Ok` only when the
    /// ConfigMap now holds this ledger: a conflict (someone wrote in between) re-reads and
    /// retries (up to [`SAVE_ATTEMPTS`] times), and a missing namespace is an error.
    pub async fn save(&self, provider: &SimCloudProvider) -> Result<(), LedgerError> {
        let _turn = self.saving.lock().await;
        let json = provider.snapshot().map_err(LedgerError::Snapshot)?;
        if lock(&self.last_written).as_deref() == Some(json.as_str()) {
            return Ok(());
        }
        let kube_err = |action: &str| {
            let action = format!("{action} ConfigMap {}/{LEDGER_CONFIGMAP}", self.namespace);
            move |e| LedgerError::Kube {
                action,
                source: Box::new(e),
            }
        };
        let data = BTreeMap::from([(LEDGER_KEY.to_string(), json.clone())]);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let last_attempt = attempt >= SAVE_ATTEMPTS;
            let current = timeouts::api(self.api.get_opt(LEDGER_CONFIGMAP))
                .await
                .map_err(kube_err("read"))?;
            let written = match current {
                Some(mut cm) => {
                    cm.data = Some(data.clone());
                    timeouts::api(
                        self.api
                            .replace(LEDGER_CONFIGMAP, &PostParams::default(), &cm),
                    )
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
                    timeouts::api(self.api.create(&PostParams::default(), &cm))
                        .await
                        .map_err(|err| (err, "create"))
                }
            };
            match written {
                Ok(_) => break,
                // Updated or created by someone else in between: read again and retry.
                Err((err, _)) if is_conflict(&err) && !last_attempt => continue,
                // A 404 on create is a missing namespace; on update, the ConfigMap was deleted
                // in between (retry creates it).
                Err((err, "update")) if is_not_found(&err) && !last_attempt => continue,
                Err((err, action)) => return Err(kube_err(action)(err)),
            }
        }
        *lock(&self.last_written) = Some(json);
        Ok(())
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
        }
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
        self.refresh_if_stale().await?;
        let launched = self.sim.create(node_claim).await;
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
