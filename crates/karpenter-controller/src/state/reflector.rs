//! Watch streams → [`ClusterState`]. One task per kind; all replicas run them.

use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

use super::{SharedState, Tracked};

/// Applies watch events of one kind to the state until the stream ends (never, with backoff) or
/// the task is aborted. `on_change` runs after each applied object (outside the state lock), so
/// callers can wake controllers.
pub async fn reflect<K>(api: Api<K>, state: Arc<SharedState>, on_change: impl Fn(&K) + Send)
where
    K: Tracked + DeserializeOwned + Debug,
{
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut initial: Vec<K> = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => initial.clear(),
            Ok(Event::InitApply(obj)) => initial.push(obj),
            Ok(Event::InitDone) => {
                let objs = std::mem::take(&mut initial);
                state.write().reset(objs.clone());
                tracing::debug!(kind = ?K::KIND, count = objs.len(), "listed");
                for obj in &objs {
                    on_change(obj);
                }
            }
            Ok(Event::Apply(obj)) => {
                state.write().apply(obj.clone());
                on_change(&obj);
            }
            Ok(Event::Delete(obj)) => {
                state.write().delete(&obj);
                on_change(&obj);
            }
            // The backoff retries; log so a missing RBAC rule is visible.
            Err(err) => tracing::warn!(kind = ?K::KIND, error = %err, "watch failed, retrying"),
        }
    }
}
