//! Kubernetes events with upstream's reasons (`Nominated`, `FailedScheduling`, ...).
//!
//! A thin recorder instead of `kube::runtime::events::Recorder`: it writes `core/v1` Events
//! (what `kubectl describe` shows), de-duplicates like upstream (same object, reason and message
//! within a window) and keeps the last events in memory so tests can assert on them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use karpenter_core::clock::Clock;
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};

pub const REASON_NOMINATED: &str = "Nominated";
pub const REASON_FAILED_SCHEDULING: &str = "FailedScheduling";
pub const REASON_NO_COMPATIBLE_INSTANCE_TYPES: &str = "NoCompatibleInstanceTypes";

const COMPONENT: &str = "karpenter";
const KEEP_IN_MEMORY: usize = 1000;

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event about one object.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRecord {
    pub involved: ObjectReference,
    pub event_type: EventType,
    pub reason: String,
    pub message: String,
}

impl EventRecord {
    pub fn new<K: Resource<DynamicType = ()>>(
        obj: &K,
        event_type: EventType,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        EventRecord {
            involved: obj.object_ref(&()),
            event_type,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// How long an identical event is suppressed: FailedScheduling 5 min (upstream), others 1 min.
fn dedupe_window(reason: &str) -> SignedDuration {
    if reason == REASON_FAILED_SCHEDULING {
        SignedDuration::from_mins(5)
    } else {
        SignedDuration::from_mins(1)
    }
}

/// Publishes events; cheap to share.
pub struct Events {
    client: Option<kube::Client>,
    clock: Arc<dyn Clock>,
    recent: Mutex<VecDeque<EventRecord>>,
    last_sent: Mutex<HashMap<String, Timestamp>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// `client: None` records in memory only.
    pub fn new(client: Option<kube::Client>, clock: Arc<dyn Clock>) -> Self {
        Events {
            client,
            clock,
            recent: Mutex::default(),
            last_sent: Mutex::default(),
        }
    }

    /// Records and (when a client is set) writes the event, unless an identical one was sent
    /// within its de-duplication window. Failures to write are logged, never returned: an event
    /// is not worth failing a reconcile for.
    pub async fn publish(&self, record: EventRecord) {
        let now = self.clock.now();
        let key = format!(
            "{}/{}/{}/{}",
            record.involved.uid.as_deref().unwrap_or_default(),
            record.involved.name.as_deref().unwrap_or_default(),
            record.reason,
            record.message
        );
        {
            let mut last = self.last_sent.lock().unwrap_or_else(|e| e.into_inner());
            if last
                .get(&key)
                .is_some_and(|at| now.duration_since(*at) < dedupe_window(&record.reason))
            {
                return;
            }
            last.retain(|_, at| now.duration_since(*at) < SignedDuration::from_mins(5));
            last.insert(key, now);
        }
        {
            let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() == KEEP_IN_MEMORY {
                recent.pop_front();
            }
            recent.push_back(record.clone());
        }
        if let Some(client) = &self.client {
            let namespace = record
                .involved
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let event = to_k8s_event(&record, &namespace, now);
            let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
            if let Err(err) = api.create(&PostParams::default(), &event).await {
                tracing::warn!(reason = %record.reason, error = %err, "failed to write event");
            }
        }
    }

    /// The most recent events (oldest first).
    pub fn recent(&self) -> Vec<EventRecord> {
        self.recent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Recent events with this reason.
    pub fn with_reason(&self, reason: &str) -> Vec<EventRecord> {
        self.recent()
            .into_iter()
            .filter(|e| e.reason == reason)
            .collect()
    }
}

fn to_k8s_event(record: &EventRecord, namespace: &str, now: Timestamp) -> Event {
    let name = record.involved.name.as_deref().unwrap_or("object");
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        involved_object: record.involved.clone(),
        reason: Some(record.reason.clone()),
        message: Some(record.message.clone()),
        type_: Some(record.event_type.as_str().into()),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: None,
        }),
        reporting_component: Some(COMPONENT.into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Event::default()
    }
}

/// The object name with its kind, as upstream writes it in messages (`nodeclaim/default-abc`).
pub fn kind_name<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!("{}/{}", K::kind(&()).to_lowercase(), obj.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::pending_pod;
    use karpenter_core::clock::FakeClock;

    #[tokio::test]
    async fn deduplicates_identical_events_within_the_window() {
        let clock = Arc::new(FakeClock::default());
        let events = Events::new(None, clock.clone());
        let pod = pending_pod("a", "1");
        let failed = || {
            EventRecord::new(
                &pod,
                EventType::Warning,
                REASON_FAILED_SCHEDULING,
                "no nodepool",
            )
        };
        events.publish(failed()).await;
        events.publish(failed()).await;
        assert_eq!(events.with_reason(REASON_FAILED_SCHEDULING).len(), 1);
        events
            .publish(EventRecord::new(
                &pod,
                EventType::Warning,
                REASON_FAILED_SCHEDULING,
                "other",
            ))
            .await;
        assert_eq!(
            events.recent().len(),
            2,
            "a different message is a different event"
        );
        clock.advance(SignedDuration::from_mins(6));
        events.publish(failed()).await;
        assert_eq!(events.with_reason(REASON_FAILED_SCHEDULING).len(), 3);
        assert_eq!(events.recent()[0].involved.kind.as_deref(), Some("Pod"));
    }
}
