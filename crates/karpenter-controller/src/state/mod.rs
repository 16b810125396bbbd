//! The controller's side of the cluster state: the pure index lives in
//! [`karpenter_core::state`] (re-exported here); this module adds the watchers that feed it
//! ([`reflector`]), the lock every controller shares it through ([`SharedState`]), and the
//! reporting of objects it cannot decode ([`ignored`]).

pub mod ignored;
pub mod pod;
pub mod reflector;

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use karpenter_core::state::{
    ClusterState, Kind, Nomination, Source, StateNode, Tracked, node, object_key, version,
};

/// The state behind a lock, shared by every controller.
#[derive(Debug, Default)]
pub struct SharedState {
    inner: RwLock<ClusterState>,
}

impl SharedState {
    pub fn new(state: ClusterState) -> Self {
        SharedState {
            inner: RwLock::new(state),
        }
    }

    /// A poisoned lock only means a panic elsewhere; the data is still consistent enough to read.
    pub fn read(&self) -> RwLockReadGuard<'_, ClusterState> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, ClusterState> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
pub(crate) use karpenter_core::state::fixtures;
