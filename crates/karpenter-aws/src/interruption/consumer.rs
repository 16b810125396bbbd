//! The SQS loop of the interruption queue (reference §6.1): long-poll `ReceiveMessage` (10
//! messages, 20 s visibility, 20 s wait), handle each message, delete it after handling — and
//! after a parse failure too, so a malformed message never comes back. Nothing a message says
//! stops the loop: failures are logged, counted and the loop receives again.
//!
//! Handling ([`super::parse`] says what happened): the NodeClaims of the message's instances
//! (matched by the instance ID of `status.providerID`) are deleted — gracefully: the controller's
//! termination cordons and drains them — for spot interruptions, scheduled changes, stopping
//! and terminating instances; a spot interruption also marks its (spot, type, zone) offering
//! unavailable so the replacement goes elsewhere, and a capacity reservation interruption
//! marks the NodeClaim's reservation full; a rebalance recommendation is an event only — unless
//! `--spot-rebalance-replace` is on: then a spot NodeClaim is marked with
//! [`SPOT_REBALANCE_RECOMMENDATION_ANNOTATION`] and the disruption controller replaces it as a
//! drifted node, away from its spot pool (`karpenter_core::disruption::rebalance`).
//! A message whose NodeClaim deletion failed (API server down) is left on the queue: SQS
//! delivers it again after the visibility timeout.

use std::sync::Arc;

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use karpenter_api::NodeClaim;
use karpenter_api::well_known as wk;
use karpenter_core::clock::Clock;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use super::{Action, Interruption, parse};
use crate::instance::parse_provider_id;
use crate::reservations::ReservationAvailability;
use crate::unavailable::{OfferingKey, UnavailableOfferings};
use crate::{AwsClients, Error};

/// `ReceiveMessage` parameters (upstream's).
pub const MAX_MESSAGES: i32 = 10;
pub const VISIBILITY_TIMEOUT_SECONDS: i32 = 20;
pub const WAIT_TIME_SECONDS: i32 = 20;
/// Pause after a failed receive (queue gone, credentials expired) before the next one.
pub const RECEIVE_RETRY: std::time::Duration = std::time::Duration::from_secs(10);
/// How much longer than its wait a long-poll attempt may take (the answer's transfer).
pub const LONG_POLL_MARGIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Timeouts of one `ReceiveMessage`: the clients' attempt timeout (10 s by default) is shorter
/// than the 20 s long poll, which would cut every poll of an empty queue — and lose what SQS
/// handed to the cut connection until its visibility timeout. An attempt gets the wait plus
/// [`LONG_POLL_MARGIN`]; the call, room for one retry after a fast failure.
fn long_poll_timeouts(wait_time_seconds: i32) -> aws_sdk_sqs::config::Builder {
    let wait = std::time::Duration::from_secs(u64::try_from(wait_time_seconds).unwrap_or(0));
    let attempt = wait.saturating_add(LONG_POLL_MARGIN);
    aws_sdk_sqs::config::Builder::default().timeout_config(
        aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(attempt)
            .operation_timeout(attempt.saturating_add(attempt))
            .build(),
    )
}

/// Where the controller writes events about cluster-scoped objects.
pub const EVENT_NAMESPACE: &str = "default";

/// `message_type` label of the metrics: the interruption kind, or `parse_error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MessageTypeLabels {
    pub message_type: String,
}

/// Upstream's interruption metrics; [`InterruptionMetrics::register`] adds them to a registry
/// prefixed `karpenter` (the controller's).
#[derive(Clone, Debug)]
pub struct InterruptionMetrics {
    /// `karpenter_interruption_received_messages_total{message_type}`.
    pub received: Family<MessageTypeLabels, Counter>,
    /// `karpenter_interruption_deleted_messages_total`.
    pub deleted: Counter,
    /// `karpenter_interruption_message_queue_duration_seconds`: from the message's
    /// `SentTimestamp` to its deletion.
    pub queue_duration: Histogram,
}

impl Default for InterruptionMetrics {
    fn default() -> Self {
        Self {
            received: Family::default(),
            deleted: Counter::default(),
            queue_duration: Histogram::new(exponential_buckets(0.5, 2.0, 12)),
        }
    }
}

impl InterruptionMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "interruption_received_messages",
            "Interruption messages received from the queue, by message type.",
            self.received.clone(),
        );
        registry.register(
            "interruption_deleted_messages",
            "Interruption messages deleted from the queue.",
            self.deleted.clone(),
        );
        registry.register(
            "interruption_message_queue_duration_seconds",
            "Time from a message's arrival in the queue to its deletion by the controller.",
            self.queue_duration.clone(),
        );
    }
}

/// Why one message could not be handled (it stays on the queue).
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    #[error("NodeClaims: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Aws(#[from] Error),
}

/// What happened to one message (for logs and tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Parsed and acted upon (or nothing to do); deleted from the queue.
    Handled {
        kind: &'static str,
        deleted_node_claims: Vec<String>,
    },
    /// Not a valid message; deleted from the queue.
    Malformed(String),
    /// Handling failed; left on the queue for redelivery.
    Failed(String),
}

/// The interruption queue's consumer.
#[derive(Clone)]
pub struct InterruptionConsumer {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    unavailable: UnavailableOfferings,
    reservations: ReservationAvailability,
    clock: Arc<dyn Clock>,
    pub metrics: InterruptionMetrics,
    /// Long-poll wait of one receive ([`WAIT_TIME_SECONDS`]; tests shorten it).
    pub wait_time_seconds: i32,
    /// `--spot-rebalance-replace`: mark spot NodeClaims with a rebalance recommendation for
    /// replacement (off: an event only, as upstream).
    spot_rebalance_replace: bool,
}

impl std::fmt::Debug for InterruptionConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterruptionConsumer")
            .field("queue_url", &self.queue_url)
            .finish_non_exhaustive()
    }
}

impl InterruptionConsumer {
    /// Looks the queue up by name (`INTERRUPTION_QUEUE`); `unavailable` is the provider's
    /// cache ([`crate::provider::AwsCloudProvider::unavailable_offerings`]).
    pub async fn new(
        clients: &AwsClients,
        queue_name: &str,
        unavailable: UnavailableOfferings,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, Error> {
        let queue_url = clients
            .sqs
            .get_queue_url()
            .queue_name(queue_name)
            .send()
            .await
            .map_err(|e| Error::from_sdk("GetQueueUrl", e))?
            .queue_url
            .ok_or_else(|| Error::NotFound {
                message: format!("interruption queue {queue_name} has no URL"),
            })?;
        Ok(Self {
            sqs: aws_sdk_sqs::Client::clone(&clients.sqs),
            queue_url,
            reservations: ReservationAvailability::default(),
            unavailable,
            clock,
            metrics: InterruptionMetrics::default(),
            wait_time_seconds: WAIT_TIME_SECONDS,
            spot_rebalance_replace: false,
        })
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Receives once (long poll) and handles what came; returns each message's outcome.
    pub async fn poll_once(&self, client: &kube::Client) -> Result<Vec<Outcome>, Error> {
        let received = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(MAX_MESSAGES)
            .visibility_timeout(VISIBILITY_TIMEOUT_SECONDS)
            .wait_time_seconds(self.wait_time_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .message_attribute_names("All")
            .customize()
            .config_override(long_poll_timeouts(self.wait_time_seconds))
            .send()
            .await
            .map_err(|e| Error::from_sdk("ReceiveMessage", e))?;
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        // One listing for the batch: the instance → NodeClaim match of every message.
        // Read a page at a time; only launched NodeClaims can match, and their requirements
        // (up to 600 instance types each) are never read here.
        let listed = karpenter_kube::watch::list_paged(
            &Api::<NodeClaim>::all(client.clone()),
            &ListParams::default(),
            |mut claim: NodeClaim| {
                claim.status.as_ref()?.provider_id.as_ref()?;
                claim.spec.requirements.clear();
                Some(claim)
            },
        )
        .await;
        let node_claims = match listed {
            Ok(claims) => claims,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list NodeClaims; interruption messages stay queued");
                return Ok(messages
                    .iter()
                    .map(|_| Outcome::Failed(format!("listing NodeClaims: {e}")))
                    .collect());
            }
        };
        let handled = messages
            .iter()
            .map(|message| self.handle_and_delete(client, &node_claims, message));
        Ok(futures::future::join_all(handled).await)
    }

    async fn handle_and_delete(
        &self,
        client: &kube::Client,
        node_claims: &[NodeClaim],
        message: &Message,
    ) -> Outcome {
        let body = message.body().unwrap_or_default();
        let outcome = match parse(body) {
            Err(e) => {
                self.count_received("parse_error");
                tracing::error!(error = %e, message_id = ?message.message_id(), "malformed interruption message; deleting it");
                Outcome::Malformed(e.to_string())
            }
            Ok(interruption) => {
                self.count_received(interruption.kind());
                match self.handle(client, node_claims, &interruption).await {
                    Ok(deleted) => Outcome::Handled {
                        kind: interruption.kind(),
                        deleted_node_claims: deleted,
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, kind = interruption.kind(), "interruption not handled; it will be delivered again");
                        return Outcome::Failed(e.to_string());
                    }
                }
            }
        };
        if let Err(e) = self.delete_message(message).await {
            tracing::warn!(error = %e, "interruption message not deleted; it will be delivered again");
        }
        outcome
    }

    fn count_received(&self, message_type: &str) {
        self.metrics
            .received
            .get_or_create(&MessageTypeLabels {
                message_type: message_type.to_string(),
            })
            .inc();
    }

    async fn delete_message(&self, message: &Message) -> Result<(), Error> {
        let Some(receipt) = message.receipt_handle() else {
            return Ok(());
        };
        self.sqs
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| Error::from_sdk("DeleteMessage", e))?;
        self.metrics.deleted.inc();
        let sent_ms = message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
            .and_then(|t| t.parse::<i64>().ok());
        if let Some(sent_ms) = sent_ms {
            let now_ms = self.clock.now().as_millisecond();
            let waited = now_ms.saturating_sub(sent_ms).max(0);
            // Milliseconds to seconds (f64 precision is plenty for a queue wait).
            self.metrics.queue_duration.observe(waited as f64 / 1000.0);
        }
        Ok(())
    }

    /// Acts on one parsed message; returns the names of the NodeClaims it deleted.
    pub async fn handle(
        &self,
        client: &kube::Client,
        node_claims: &[NodeClaim],
        interruption: &Interruption,
    ) -> Result<Vec<String>, HandleError> {
        let mut deleted = Vec::new();
        for instance_id in interruption.instance_ids() {
            let Some(node_claim) = node_claims.iter().find(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .and_then(parse_provider_id)
                    == Some(instance_id)
            }) else {
                tracing::debug!(
                    instance = instance_id,
                    kind = interruption.kind(),
                    "no NodeClaim for the interrupted instance"
                );
                continue;
            };
            let name = node_claim.name_any();
            tracing::info!(node_claim = %name, instance = instance_id, kind = interruption.kind(), "interruption message");
            self.publish_events(client, node_claim, interruption).await;
            if interruption.marks_spot_offering_unavailable() {
                let labels = node_claim.labels();
                if let (Some(instance_type), Some(zone)) = (
                    labels.get(wk::INSTANCE_TYPE_LABEL),
                    labels.get(wk::ZONE_LABEL),
                ) {
                    self.unavailable.mark(OfferingKey::new(
                        wk::CAPACITY_TYPE_SPOT,
                        instance_type,
                        zone,
                    ));
                }
            }
            if interruption.marks_reservation_unavailable()
                && let Some(id) = node_claim
                    .labels()
                    .get(wk::AWS_CAPACITY_RESERVATION_ID_LABEL)
            {
                self.reservations.mark_unavailable(id);
            }
            if self.replaces_on(interruption, node_claim) {
                self.mark_for_replacement(client, node_claim).await?;
            }
            if interruption.action() == Action::DeleteNodeClaims
                && node_claim.metadata.deletion_timestamp.is_none()
            {
                let api = Api::<NodeClaim>::all(client.clone());
                karpenter_kube::delete_ignoring_not_found(
                    api.delete(&name, &DeleteParams::default()),
                )
                .await?;
                deleted.push(name);
            }
        }
        Ok(deleted)
    }

    /// With `on`, a rebalance recommendation for a spot node replaces it (see the module doc).
    pub fn with_spot_rebalance_replace(mut self, on: bool) -> Self {
        self.spot_rebalance_replace = on;
        self
    }

    /// Whether `interruption` marks `node_claim` for replacement: the setting is on, it is a
    /// rebalance recommendation, the node is spot, not going away and not marked already.
    fn replaces_on(&self, interruption: &Interruption, node_claim: &NodeClaim) -> bool {
        self.spot_rebalance_replace
            && matches!(interruption, Interruption::RebalanceRecommendation { .. })
            && node_claim.metadata.deletion_timestamp.is_none()
            && node_claim
                .labels()
                .get(wk::CAPACITY_TYPE_LABEL)
                .is_some_and(|ct| ct == wk::CAPACITY_TYPE_SPOT)
            && !node_claim
                .annotations()
                .contains_key(wk::SPOT_REBALANCE_RECOMMENDATION_ANNOTATION)
    }

    /// Annotates the NodeClaim (the disruption controller drifts it from then on) and says so
    /// in an event on the NodeClaim and its Node. A failed patch leaves the message queued.
    async fn mark_for_replacement(
        &self,
        client: &kube::Client,
        node_claim: &NodeClaim,
    ) -> Result<(), HandleError> {
        let name = node_claim.name_any();
        let patch = serde_json::json!({"metadata": {"annotations": {
            wk::SPOT_REBALANCE_RECOMMENDATION_ANNOTATION: self.clock.now().to_string(),
        }}});
        let api = Api::<NodeClaim>::all(client.clone());
        karpenter_kube::timeouts::api(api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        ))
        .await?;
        tracing::info!(node_claim = %name, "spot rebalance recommendation: the node will be replaced as drifted");
        self.write_events(client, node_claim, &[REPLACING_ON_REBALANCE])
            .await;
        Ok(())
    }

    /// Marks the reservation of interrupted reserved instances full in `availability` (the
    /// provider's, [`crate::provider::AwsCloudProvider::reservation_availability`]).
    pub fn with_reservations(mut self, availability: ReservationAvailability) -> Self {
        self.reservations = availability;
        self
    }

    /// Upstream's events on the NodeClaim and its Node; best effort (a failed write is logged).
    async fn publish_events(
        &self,
        client: &kube::Client,
        node_claim: &NodeClaim,
        interruption: &Interruption,
    ) {
        let mut events = vec![event_of(interruption)];
        if interruption.action() == Action::DeleteNodeClaims {
            events.push(TERMINATING_ON_INTERRUPTION);
        }
        self.write_events(client, node_claim, &events).await;
    }

    /// Writes each `(reason, message)` on the NodeClaim and its Node; best effort.
    async fn write_events(
        &self,
        client: &kube::Client,
        node_claim: &NodeClaim,
        events: &[(&str, &str)],
    ) {
        let mut targets = vec![reference(node_claim)];
        if let Some(node) = node_claim.status.as_ref().and_then(|s| s.node_name.clone()) {
            targets.push(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node),
                ..Default::default()
            });
        }
        let api = Api::<Event>::namespaced(client.clone(), EVENT_NAMESPACE);
        let now = self.clock.now();
        for target in &targets {
            for (reason, message) in events {
                let event = event(target, reason, message, now);
                if let Err(e) = karpenter_kube::timeouts::api(
                    api.create(&karpenter_kube::identity::post_params(), &event),
                )
                .await
                {
                    tracing::debug!(error = %e, reason, "interruption event not written");
                }
            }
        }
    }
}

const TERMINATING_ON_INTERRUPTION: (&str, &str) = (
    "TerminatingOnInterruption",
    "Interruption triggered termination for the NodeClaim/Node",
);

/// karpenter-rs (`--spot-rebalance-replace`): the node is replaced before its interruption.
pub const REPLACING_ON_REBALANCE: (&str, &str) = (
    "SpotRebalanceReplacing",
    "Spot rebalance recommendation: a replacement launches on another offering, then the node is drained (spot-rebalance-replace)",
);

/// Upstream's event reason and message for a kind of interruption.
pub fn event_of(interruption: &Interruption) -> (&'static str, &'static str) {
    match interruption {
        Interruption::SpotInterrupted { .. } => {
            ("SpotInterrupted", "Spot interruption warning was triggered")
        }
        Interruption::RebalanceRecommendation { .. } => (
            "SpotRebalanceRecommendation",
            "Spot rebalance recommendation was triggered",
        ),
        Interruption::ScheduledChange { .. } => (
            "InstanceUnhealthy",
            "An unhealthy warning was triggered for the instance",
        ),
        Interruption::InstanceStopped { .. } => ("InstanceStopping", "Instance is stopping"),
        Interruption::InstanceTerminated { .. } => {
            ("InstanceTerminating", "Instance is terminating")
        }
        Interruption::CapacityReservationInterrupted { .. } => (
            "CapacityReservationInterrupted",
            "Capacity reservation interruption warning was triggered",
        ),
        Interruption::NoAction { .. } => ("NoAction", "No action needed"),
    }
}

fn reference(node_claim: &NodeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some(NodeClaim::api_version(&()).into_owned()),
        kind: Some(NodeClaim::kind(&()).into_owned()),
        name: node_claim.metadata.name.clone(),
        uid: node_claim.metadata.uid.clone(),
        ..Default::default()
    }
}

fn event(target: &ObjectReference, reason: &str, message: &str, now: jiff::Timestamp) -> Event {
    // Unique per target, reason and instant (two events of one message share the instant).
    let name = format!(
        "{}.{}.{:x}",
        target.name.as_deref().unwrap_or("unknown"),
        reason.to_ascii_lowercase(),
        now.as_nanosecond()
    );
    Event {
        metadata: kube::api::ObjectMeta {
            name: Some(name),
            namespace: Some(EVENT_NAMESPACE.into()),
            ..Default::default()
        },
        involved_object: target.clone(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(
            if reason == "SpotRebalanceRecommendation" || reason == REPLACING_ON_REBALANCE.0 {
                "Normal".into()
            } else {
                "Warning".into()
            },
        ),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        reporting_component: Some("karpenter".into()),
        reporting_instance: Some("karpenter".into()),
        action: Some(reason.into()),
        count: Some(1),
        ..Default::default()
    }
}

/// The `interruption` provider task: waits until this replica leads (a message is handled
/// once, by the leader), then [`run_interruption`] until `shutdown`.
pub async fn run_interruption_when_leading(
    consumer: InterruptionConsumer,
    client: kube::Client,
    mut leadership: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::select! {
        () = karpenter_kube::stopped(&mut shutdown) => return,
        led = leadership.wait_for(|leading| *leading) => if led.is_err() { return },
    }
    run_interruption(consumer, client, shutdown).await;
}

/// Receives and handles interruption messages until `shutdown`.
pub async fn run_interruption(
    consumer: InterruptionConsumer,
    client: kube::Client,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let polled = tokio::select! {
            () = karpenter_kube::stopped(&mut shutdown) => return,
            polled = consumer.poll_once(&client) => polled,
        };
        if let Err(e) = polled {
            tracing::warn!(error = %e, "receiving interruption messages failed; retrying");
            tokio::select! {
                () = karpenter_kube::stopped(&mut shutdown) => return,
                () = tokio::time::sleep(RECEIVE_RETRY) => {}
            }
        }
    }
}
