//! The controller's side of the cluster state: the pure index lives in
//! [`karpenter_core::state`]; this module adds the watchers that feed it
//! ([`reflector`]), the lock every controller shares it through ([`SharedState`]), and the
//! reporting of objects it cannot decode ([`ignored`]).

pub mod ignored;
pub mod reflector;

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::watch;

use karpenter_core::state::ClusterState;

/// The state behind a lock, shared by every controller.
#[derive(Debug)]
pub struct SharedState {
    inner: RwLock<ClusterState>,
    /// Whether every kind has been listed ([`ClusterState::synced`]), for loops that start
    /// work the moment the caches are synced ([`crate::context::WorkStarts`]).
    synced: watch::Sender<bool>,
}

impl Default for SharedState {
    fn default() -> Self {
        Self::new(ClusterState::default())
    }
}

impl SharedState {
    pub fn new(state: ClusterState) -> Self {
        let synced = state.synced();
        SharedState {
            inner: RwLock::new(state),
            synced: watch::Sender::new(synced),
        }
    }

    /// Publishes the state's sync status (the watchers call it after each initial list).
    pub fn publish_synced(&self) {
        let synced = self.read().synced();
        self.synced.send_if_modified(|published| {
            let changed = *published != synced;
            *published = synced;
            changed
        });
    }

    /// Follows the state's sync status (see [`SharedState::publish_synced`]).
    pub fn synced_changes(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// A poisoned lock only means a panic elsewhere; the data is still consistent enough to read.
    pub fn read(&self) -> RwLockReadGuard<'_, ClusterState> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether anyone holds the lock now (a reader or the writer): for checks that long work
    /// runs on a copy, not under the lock (`disruption::pass`).
    pub fn is_held(&self) -> bool {
        matches!(
            self.inner.try_write(),
            Err(std::sync::TryLockError::WouldBlock)
        )
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, ClusterState> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
pub(crate) use karpenter_core::state::fixtures;
