//! The `sim` cloud on a cluster, as `karpenter controller --cloud-provider sim` runs it: the
//! provider with its ledger in a ConfigMap (restored at start, so a restarted controller finds
//! its instances) and the sim kubelet for its "machines", which writes only while this replica
//! leads.

use std::sync::Arc;

use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::CloudProvider;
use karpenter_sim::SimCloudProvider;
use tokio::sync::watch;

use super::{LedgerError, LedgerStore, PersistentSimProvider, SimKubelet, SimKubeletOptions};
use crate::context::Context;

/// The sim provider (persistent) and its kubelet.
#[derive(Clone, Debug)]
pub struct SimCloud {
    pub provider: PersistentSimProvider,
    pub kubelet: SimKubelet,
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
            configmap = %format!("{namespace}/{}", super::LEDGER_CONFIGMAP),
            restored = found,
            instances = sim.instances().len(),
            "sim cloud ledger loaded"
        );
        let sync_period = options.sync_period;
        let kubelet = SimKubelet::new(client, sim.clone(), clock, options);
        Ok(SimCloud {
            provider: PersistentSimProvider::new(sim, store),
            kubelet,
            sync_period,
        })
    }

    /// The provider to hand to [`Context::new`].
    pub fn cloud_provider(&self) -> Arc<dyn CloudProvider> {
        Arc::new(self.provider.clone())
    }

    /// Runs the sim kubelet while `ctx` leads, until `shutdown`.
    /// [`crate::run::RunningController::start_with_sim`] calls it, after making the provider
    /// follow `ctx`'s leadership (so a takeover reloads the ledger the previous leader wrote).
    pub async fn run(self, ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(self.sync_period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = crate::nodeclaim::stopped(&mut shutdown) => break,
                _ = ticker.tick() => {
                    if !ctx.is_leader() {
                        continue;
                    }
                    if let Err(err) = self.provider.refresh_if_stale().await {
                        tracing::warn!(error = %err, "sim kubelet: cannot reload the ledger; retrying");
                        continue;
                    }
                    if let Err(err) = self.kubelet.sync().await {
                        tracing::warn!(error = %err, "sim kubelet sync failed; retrying");
                    }
                }
            }
        }
    }
}
