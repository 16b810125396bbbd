//! What every controller shares, handed out as `Arc<Context>`.
//!
//! Controllers written later (NodeClaim lifecycle, termination, the sim kubelet) plug in by
//! taking the same `Arc<Context>`: the API client, the cluster state, the cloud provider, the
//! clock, metrics, events, the leader flag and the provisioner trigger are all here.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::CloudProvider;
use tokio::sync::{Notify, watch};

use crate::events::Events;
use crate::metrics::Metrics;
use crate::provisioning::{Batcher, Solver, Trigger};
use crate::settings::Settings;
use crate::state::SharedState;
use crate::writes::{self, CloudReads, Leader, Terms};

/// A [`Clock`] that reads tokio's clock, offset from a fixed epoch. Under
/// `#[tokio::test(start_paused = true)]` tokio's auto-advance moves timers and timestamps
/// together, so tests run in virtual time; in production it follows the wall clock.
#[derive(Debug, Clone)]
pub struct TokioClock {
    epoch: Timestamp,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// Starts at the current wall time.
    pub fn wall() -> Self {
        Self::starting_at(Timestamp::now())
    }

    /// Starts at `epoch` (tests use a fixed one so timestamps are reproducible).
    pub fn starting_at(epoch: Timestamp) -> Self {
        TokioClock {
            epoch,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = SignedDuration::try_from(self.start.elapsed()).unwrap_or(SignedDuration::MAX);
        self.epoch.saturating_add(elapsed).unwrap_or(self.epoch)
    }
}

/// The moments a replica starts to work: it leads and its caches are synced, after not doing
/// both (start-up, a lease taken over from a crashed or stopped leader). The loops run a pass
/// at that moment instead of at their next tick: a new leader provisions the pods that waited
/// for it, collects orphaned instances and resumes launches and drains at once.
#[derive(Debug)]
pub struct WorkStarts {
    leadership: watch::Receiver<bool>,
    synced: watch::Receiver<bool>,
    /// Whether the last look saw the replica working (leading and synced).
    working: bool,
}

impl WorkStarts {
    /// Resolves when the replica starts to work (at once if it works and this is the first
    /// call). Cancel-safe: a `select!` may drop it; what it has seen stays seen.
    pub async fn next(&mut self) {
        loop {
            let working = *self.leadership.borrow_and_update() && *self.synced.borrow_and_update();
            let started = working && !self.working;
            self.working = working;
            if started {
                return;
            }
            // Both senders live in the `Context`; if one is gone the replica is stopping.
            tokio::select! {
                changed = self.leadership.changed() => if changed.is_err() { std::future::pending::<()>().await },
                changed = self.synced.changed() => if changed.is_err() { std::future::pending::<()>().await },
            }
        }
    }
}

/// Shared controller context. Reads only: what writes takes a [`Leader`] ([`Context::leader`],
/// see [`crate::writes`]).
pub struct Context {
    /// Reads the API server; a mutating request through it is refused.
    pub client: kube::Client,
    pub settings: Settings,
    pub state: Arc<SharedState>,
    /// The cloud's answers; launching and terminating go through [`Leader::cloud_writes`].
    pub cloud: CloudReads,
    /// The client as the binary built it: the lease and the provider's tasks write with it.
    raw_client: kube::Client,
    cloud_provider: Arc<dyn CloudProvider>,
    terms: Terms,
    pub solver: Arc<dyn Solver>,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
    pub events: Arc<Events>,
    /// Pods (by UID) that may need capacity; feeds the provisioner's batcher.
    pub provisioning_trigger: Trigger,
    /// Wakes the NodePool controllers (something their status depends on changed).
    pub nodepools_changed: Arc<Notify>,
    /// A NodePool or NodeClass changed: the disruption loop brings the NodeClaims' `Drifted`
    /// conditions up to date at once, as upstream's NodeClaim disruption controller reacts to
    /// its NodePool's events, instead of at its next 10 s pass.
    pub templates_changed: Arc<Notify>,
    /// NodeOverlays (watched only with the `NodeOverlay` gate on; empty otherwise).
    pub overlays: Arc<crate::nodeoverlay::OverlayStore>,
    /// NodeClaims (by name) whose last registration attempt failed: only their Nodes can be
    /// stuck unregistered (see `karpenter_core::provisioning::Snapshot::unregistered_grace`).
    pub registration_failures: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// CapacityBuffers and their virtual pods (watched only with the `CapacityBuffer` gate on;
    /// empty otherwise).
    pub buffers: Arc<crate::capacitybuffer::BufferStore>,
    leader_tx: watch::Sender<bool>,
    leader_rx: watch::Receiver<bool>,
    /// Why the replica is broken (a controller loop panicked or ended); `/healthz` fails.
    failure: std::sync::Mutex<Option<String>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// Builds the context and the provisioner's batcher (its receiving end).
    pub fn new(
        client: kube::Client,
        settings: Settings,
        cloud: Arc<dyn CloudProvider>,
        solver: Arc<dyn Solver>,
        clock: Arc<dyn Clock>,
    ) -> (Arc<Context>, Batcher) {
        let (trigger, batcher) =
            Batcher::new(settings.batch_idle_duration, settings.batch_max_duration);
        let (leader_tx, leader_rx) = watch::channel(settings.disable_leader_election);
        let metrics = Arc::new(Metrics::new());
        metrics
            .leader
            .set(i64::from(settings.disable_leader_election));
        let terms = Terms::new(settings.disable_leader_election);
        let ctx = Context {
            events: Arc::new(Events::new(
                Some(writes::events_client(&client, &terms, &metrics)),
                clock.clone(),
                metrics.events_dropped.clone(),
            )),
            client: writes::read_client(&client, &metrics),
            raw_client: client,
            settings,
            state: Arc::new(SharedState::default()),
            cloud: CloudReads::new(cloud.clone(), metrics.clone()),
            cloud_provider: cloud,
            terms,
            solver,
            clock,
            metrics,
            provisioning_trigger: trigger,
            nodepools_changed: Arc::new(Notify::new()),
            templates_changed: Arc::new(Notify::new()),
            overlays: Arc::default(),
            registration_failures: std::sync::Mutex::default(),
            buffers: Arc::default(),
            leader_tx,
            leader_rx,
            failure: std::sync::Mutex::new(None),
        };
        (Arc::new(ctx), batcher)
    }

    /// Whether this replica leads now (what loops react to; writing takes a [`Leader`] from
    /// [`Context::leader`]). Every replica keeps its state warm.
    pub fn is_leader(&self) -> bool {
        *self.leader_rx.borrow()
    }

    /// The right to write for the term open now: `None` unless this replica leads.
    pub fn leader(self: &Arc<Self>) -> Option<Leader> {
        Leader::of(self, &self.raw_client, &self.terms)
    }

    /// [`Context::leader`] once the caches are synced too: when the loops act.
    pub fn working(self: &Arc<Self>) -> Option<Leader> {
        self.leader().filter(|_| self.state.read().synced())
    }

    /// The client as the binary built it, for the lease and the provider's tasks only.
    pub(crate) fn raw_client(&self) -> &kube::Client {
        &self.raw_client
    }

    pub(crate) fn cloud_provider(&self) -> &dyn CloudProvider {
        self.cloud_provider.as_ref()
    }

    /// A receiver that changes when leadership is gained or lost.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.leader_rx.clone()
    }

    /// The moments this replica starts to work (see [`WorkStarts`]); each loop takes its own.
    pub fn work_starts(&self) -> WorkStarts {
        WorkStarts {
            leadership: self.leadership(),
            synced: self.state.synced_changes(),
            working: false,
        }
    }

    /// The lease task's switch: opens a write term on acquire, closes it on loss.
    pub(crate) fn set_leader(&self, leader: bool) {
        self.terms.set_leading(leader);
        self.metrics.leader.set(i64::from(leader));
        self.leader_tx.send_replace(leader);
    }

    /// Marks the replica broken (supervision, `run.rs`): `/healthz` fails from now on. The first
    /// reason is kept.
    pub fn mark_failed(&self, why: impl Into<String>) {
        let mut failure = karpenter_kube::lock(&self.failure);
        failure.get_or_insert_with(|| why.into());
    }

    /// Why the replica is broken, if it is.
    pub fn failure(&self) -> Option<String> {
        karpenter_kube::lock(&self.failure).clone()
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_starts_when_leading_and_synced_and_again_after_a_lost_lease() {
        let (leader, leadership) = watch::channel(false);
        let (synced_tx, synced) = watch::channel(false);
        let mut starts = WorkStarts {
            leadership,
            synced,
            working: false,
        };
        let mut started = || futures::FutureExt::now_or_never(starts.next()).is_some();
        assert!(!started(), "neither leading nor synced");
        leader.send_replace(true);
        assert!(!started(), "leading, caches not synced");
        synced_tx.send_replace(true);
        assert!(started(), "leading and synced");
        assert!(!started(), "once per start");
        leader.send_replace(false);
        assert!(!started());
        leader.send_replace(true);
        assert!(started(), "a lease taken again starts work again");
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_virtual_time() {
        let epoch = Timestamp::from_second(1_704_067_200).unwrap();
        let clock = TokioClock::starting_at(epoch);
        assert_eq!(clock.now(), epoch);
        tokio::time::sleep(std::time::Duration::from_secs(90)).await;
        assert_eq!(
            clock.now().duration_since(epoch),
            SignedDuration::from_secs(90)
        );
    }
}
