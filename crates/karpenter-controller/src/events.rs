//! Kubernetes events with upstream's reasons (`Nominated`, `FailedScheduling`, ...).
//!
//! A thin recorder instead of `kube::runtime::events::Recorder`: it writes `core/v1` Events
//! (what `kubectl describe` shows), de-duplicates like upstream (same object, reason and message
//! within a window) and keeps the last events in memory so tests can assert on them.
//!
//! Publishing never waits for the API server: events go onto a bounded queue
//! ([`EVENT_QUEUE_CAPACITY`]) that a background writer ([`Events::run_writer`], started with the
//! replica) drains; when the queue is full the event is dropped and counted
//! (`karpenter_events_dropped_total`), so a slow events API cannot stall provisioning.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, watch};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use karpenter_core::clock::Clock;
use karpenter_kube::{lock, stopped};
use kube::{Api, Resource, ResourceExt};

use crate::timeouts;

pub const REASON_NOMINATED: &str = "Nominated";
pub const REASON_FAILED_SCHEDULING: &str = "FailedScheduling";
pub const REASON_NO_COMPATIBLE_INSTANCE_TYPES: &str = "NoCompatibleInstanceTypes";
/// Disruption (upstream `pkg/controllers/disruption/events`), on the Node and its NodeClaim.
pub const REASON_DISRUPTION_BLOCKED: &str = "DisruptionBlocked";
pub const REASON_UNCONSOLIDATABLE: &str = "Unconsolidatable";
pub const REASON_CONSOLIDATION_CANDIDATE: &str = "ConsolidationCandidate";
/// A Balanced score approved a move (on the candidate's Node and NodeClaim; on the NodePool for
/// multi-node moves).
pub const REASON_CONSOLIDATION_APPROVED: &str = "ConsolidationApproved";
/// A move was refused: its Balanced score, or the validation before it runs.
pub const REASON_CONSOLIDATION_REJECTED: &str = "ConsolidationRejected";
pub const REASON_DISRUPTION_LAUNCHING: &str = "DisruptionLaunching";
pub const REASON_DISRUPTION_WAITING_READINESS: &str = "DisruptionWaitingReadiness";
pub const REASON_DISRUPTION_TERMINATING: &str = "DisruptionTerminating";
pub const REASON_NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";
/// On a pod whose `karpenter.sh/do-not-disrupt` is neither `"true"` nor a positive duration, so it
/// protects nothing.
pub const REASON_INVALID_DO_NOT_DISRUPT: &str = "InvalidDoNotDisrupt";

const COMPONENT: &str = "karpenter";
const KEEP_IN_MEMORY: usize = 1000;
/// Events waiting for the writer; more are dropped (and counted).
pub const EVENT_QUEUE_CAPACITY: usize = 1000;

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
        LONGEST_DEDUPE_WINDOW
    } else {
        SignedDuration::from_mins(1)
    }
}

/// When each recently sent event went out, for de-duplication. Keyed by a hash of (object,
/// reason, message) rather than the text: a provisioning pass of 10,000 pods sends 10,000
/// `Nominated` events, whose keys would otherwise hold megabytes for five minutes.
#[derive(Debug, Default)]
struct SentEvents {
    at: HashMap<u64, Timestamp>,
    /// Entries older than the longest window are dropped at most once a minute (a sweep per
    /// event would make a burst quadratic).
    next_sweep: Option<Timestamp>,
}

impl SentEvents {
    fn key(record: &EventRecord) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        record.involved.uid.hash(&mut hasher);
        record.involved.name.hash(&mut hasher);
        record.reason.hash(&mut hasher);
        record.message.hash(&mut hasher);
        hasher.finish()
    }

    /// Whether the event may go out now (and remembers it if so).
    fn admit(&mut self, record: &EventRecord, now: Timestamp) -> bool {
        let key = Self::key(record);
        if self
            .at
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < dedupe_window(&record.reason))
        {
            return false;
        }
        if self.next_sweep.is_none_or(|due| now >= due) {
            self.at
                .retain(|_, at| now.duration_since(*at) < LONGEST_DEDUPE_WINDOW);
            self.next_sweep = Some(now + SignedDuration::from_mins(1));
        }
        self.at.insert(key, now);
        true
    }
}

/// The longest [`dedupe_window`].
const LONGEST_DEDUPE_WINDOW: SignedDuration = SignedDuration::from_mins(5);

/// Publishes events; cheap to share.
pub struct Events {
    clock: Arc<dyn Clock>,
    recent: Mutex<VecDeque<EventRecord>>,
    last_sent: Mutex<SentEvents>,
    /// Where published events wait for the writer (`None`: memory only).
    queue: Option<mpsc::Sender<Event>>,
    /// The writer's end, taken by [`Events::run_writer`].
    writer: Mutex<Option<(kube::Client, mpsc::Receiver<Event>)>>,
    dropped: Counter,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// `client: None` records in memory only; `dropped` counts events the full queue refused.
    pub fn new(client: Option<kube::Client>, clock: Arc<dyn Clock>, dropped: Counter) -> Self {
        let (queue, writer) = match client {
            Some(client) => {
                let (tx, rx) = mpsc::channel(EVENT_QUEUE_CAPACITY);
                (Some(tx), Some((client, rx)))
            }
            None => (None, None),
        };
        Events {
            clock,
            recent: Mutex::default(),
            last_sent: Mutex::default(),
            queue,
            writer: Mutex::new(writer),
            dropped,
        }
    }

    /// Records the event and queues it for the API server, unless an identical one was sent
    /// within its de-duplication window. Never waits for the API server (async only so callers
    /// need not change should that ever be needed); a full queue drops the event and counts it.
    pub async fn publish(&self, record: EventRecord) {
        let now = self.clock.now();
        if !lock(&self.last_sent).admit(&record, now) {
            return;
        }
        {
            let mut recent = lock(&self.recent);
            if recent.len() == KEEP_IN_MEMORY {
                recent.pop_front();
            }
            recent.push_back(record.clone());
        }
        if let Some(queue) = &self.queue {
            let namespace = record
                .involved
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            match queue.try_send(to_k8s_event(&record, &namespace, now)) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.dropped.inc();
                    tracing::debug!(reason = %record.reason, "event queue full; dropping event");
                }
                // The writer has stopped (shutting down).
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
    }

    /// Writes queued events until `shutdown` (each create bounded by the API call timeout; a
    /// failure is logged and the event dropped). Runs once per `Events`; a second call returns
    /// at once.
    pub async fn run_writer(&self, mut shutdown: watch::Receiver<bool>) {
        let taken = lock(&self.writer).take();
        let Some((client, mut queue)) = taken else {
            return;
        };
        loop {
            let event = tokio::select! {
                biased;
                () = stopped(&mut shutdown) => break,
                event = queue.recv() => event,
            };
            let Some(event) = event else { break };
            let namespace = event.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
            let params = karpenter_kube::identity::post_params();
            let write = timeouts::api(api.create(&params, &event));
            tokio::select! {
                biased;
                () = stopped(&mut shutdown) => break,
                result = write => {
                    if let Err(err) = result {
                        tracing::warn!(reason = ?event.reason, error = %err, "failed to write event");
                    }
                }
            }
        }
    }

    /// The most recent events (oldest first).
    pub fn recent(&self) -> Vec<EventRecord> {
        lock(&self.recent).iter().cloned().collect()
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

    #[test]
    fn the_dedupe_table_forgets_events_past_the_longest_window() {
        let record = |name: &str| EventRecord {
            involved: ObjectReference {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..ObjectReference::default()
            },
            event_type: EventType::Normal,
            reason: REASON_NOMINATED.into(),
            message: "Pod should schedule on: nodeclaim/x".into(),
        };
        let t0 = Timestamp::from_second(1_704_067_200).unwrap();
        let mut sent = SentEvents::default();
        for i in 0..1000 {
            assert!(sent.admit(&record(&format!("p{i}")), t0));
        }
        assert!(!sent.admit(&record("p1"), t0), "the same event again");
        assert!(
            sent.admit(&record("p1"), t0 + SignedDuration::from_secs(61)),
            "Nominated: one minute"
        );
        let later = t0 + SignedDuration::from_mins(7);
        assert!(sent.admit(&record("new"), later));
        assert_eq!(sent.at.len(), 1, "older entries swept");
    }

    #[tokio::test]
    async fn deduplicates_identical_events_within_the_window() {
        let clock = Arc::new(FakeClock::default());
        let events = Events::new(None, clock.clone(), Counter::default());
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

    #[tokio::test(start_paused = true)]
    async fn a_hung_events_api_never_blocks_publish_and_a_full_queue_drops_with_a_metric() {
        let server = karpenter_testapi::TestApiServer::new();
        server.inject_hang(None, "events", usize::MAX);
        let clock = Arc::new(FakeClock::default());
        let dropped = Counter::default();
        let events = Arc::new(Events::new(
            Some(server.client()),
            clock.clone(),
            dropped.clone(),
        ));
        let (stop, stopped) = watch::channel(false);
        let writer = tokio::spawn({
            let events = events.clone();
            async move { events.run_writer(stopped).await }
        });
        let pod = pending_pod("a", "1");
        // The writer takes one event and hangs on it; the queue holds the capacity; one more
        // is dropped. None of it waits.
        for i in 0..=EVENT_QUEUE_CAPACITY + 1 {
            let record =
                EventRecord::new(&pod, EventType::Normal, REASON_NOMINATED, format!("n{i}"));
            tokio::time::timeout(std::time::Duration::from_millis(1), events.publish(record))
                .await
                .expect("publish waited for the API server");
            tokio::task::yield_now().await;
        }
        assert_eq!(dropped.get(), 1);
        assert_eq!(events.recent().len(), KEEP_IN_MEMORY);
        stop.send_replace(true);
        tokio::time::timeout(std::time::Duration::from_millis(10), writer)
            .await
            .expect("the writer stops at once, hung call or not")
            .unwrap();
    }
}
