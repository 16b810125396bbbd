//! The `sim` cloud on a cluster, as `karpenter controller --cloud-provider sim` runs it: the
//! provider with its ledger in a ConfigMap (restored at start, so a restarted controller finds
//! its instances) and the sim kubelet for its "machines" ([`kubelet`]), which writes only while
//! this replica leads.
//!
//! The controller knows none of this: the binary hands it the provider ([`SimCloud::cloud_provider`])
//! and one background task, [`SimCloud::run`], through the controller's provider hook.

pub mod kubelet;
pub mod ledger;
pub mod nodeclass;
mod watched;

use std::sync::Arc;

use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::CloudProvider;
use karpenter_kube::stopped;
use tokio::sync::watch;

pub use kubelet::{NODE_LEASE_NAMESPACE, SimKubelet, SimKubeletError, SimKubeletOptions};
pub use ledger::{LEDGER_CONFIGMAP, LedgerError, LedgerStore, PersistentSimProvider};
pub use nodeclass::SimNodeClasses;
pub use watched::node_view;

use crate::SimCloudProvider;

/// The sim provider (persistent) and its kubelet.
#[derive(Clone, Debug)]
pub struct SimCloud {
    pub provider: PersistentSimProvider,
    pub kubelet: SimKubelet,
    /// The EC2NodeClass status writer (the aws provider's NodeClass controller, for the sim).
    pub node_classes: SimNodeClasses,
    sync_period: std::time::Duration,
}

impl SimCloud {
    /// Loads the ledger from ConfigMap `karpenter-sim-ledger` in `namespace` into `sim` (an
    /// unreadable ledger is an error: starting empty would orphan the recorded instances).
    pub async fn restore(
        client: kube::Client,
        sim: SimCloudProvider,
        namespace: &str,
        clock: Arc<dyn Clock>,
        options: SimKubeletOptions,
    ) -> Result<Self, LedgerError> {
        let store = LedgerStore::new(client.clone(), namespace);
        let found = store.restore(&sim).await?;
        tracing::info!(
            configmap = %format!("{namespace}/{}", LEDGER_CONFIGMAP),
            restored = found,
            instances = sim.instances().len(),
            "sim cloud ledger loaded"
        );
        let sync_period = options.sync_period;
        let node_classes = SimNodeClasses::new(client.clone(), clock.clone());
        let kubelet = SimKubelet::new(client, sim.clone(), clock, options);
        Ok(SimCloud {
            provider: PersistentSimProvider::new(sim, store)
                .with_node_classes(node_classes.clone()),
            kubelet,
            node_classes,
            sync_period,
        })
    }

    /// The provider to hand to the controller.
    pub fn cloud_provider(&self) -> Arc<dyn CloudProvider> {
        Arc::new(self.provider.clone())
    }

    /// Makes the provider reload its ledger before the next cloud call after every change of
    /// `leadership` (another replica may have launched or terminated instances meanwhile).
    /// Call it before the replica's leader election starts, so no change is missed.
    pub fn follow_leadership(&self, leadership: watch::Receiver<bool>) {
        self.provider.follow_leadership(leadership);
    }

    /// Runs the sim kubelet and the EC2NodeClass status writer while `leadership` says this
    /// replica leads, until `shutdown` (the kubelet's watches run throughout, so a new leader
    /// starts from a synced view).
    pub async fn run(self, leadership: watch::Receiver<bool>, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(self.sync_period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let watching = self.kubelet.watch();
        futures::pin_mut!(watching);
        loop {
            tokio::select! {
                () = stopped(&mut shutdown) => break,
                () = &mut watching => break,
                _ = ticker.tick() => {
                    if !*leadership.borrow() {
                        continue;
                    }
                    if let Err(err) = self.provider.refresh_if_stale().await {
                        tracing::warn!(error = %err, "sim kubelet: cannot reload the ledger; retrying");
                        continue;
                    }
                    if let Err(err) = self.kubelet.sync().await {
                        tracing::warn!(error = %err, "sim kubelet sync failed; retrying");
                    }
                    if let Err(err) = self.node_classes.sync().await {
                        tracing::warn!(error = %err, "sim: cannot list EC2NodeClasses; retrying");
                    }
                }
            }
        }
    }
}
