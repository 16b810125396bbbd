//! The `sim` provider's kubelet, as kwok does it: for every sim instance it registers the Node
//! the provider describes, keeps it Ready with a `kube-node-lease` Lease heartbeat, marks pods
//! bound to it Running and Ready, and completes the deletion of its terminating pods (no real
//! kubelet will). [`SimKubelet::stop_heartbeats`] makes one node die like a real one.
//!
//! What a pod's containers would do is read from the pod, as kwok's stages do:
//! - a pod labelled `kwok.x-k8s.io/stage: unhealthy` ([`NEVER_READY_STAGE`]) runs but never
//!   turns Ready, like a pod whose readiness probe always fails (upstream's kwok regression suite
//!   uses the same label);
//! - a terminating pod with a `preStop` hook keeps running (and Ready) while the hook would:
//!   until its `sleep` ends, an `exec`/`httpGet` hook until the grace period ends, never past the
//!   pod's `deletionTimestamp` (the end of its grace period), as the kubelet kills it then. A pod
//!   without a hook exits at once (pause and most images honour SIGTERM).
//! - a Node the API server refuses to register (an admission policy, as upstream's
//!   `ExpectBlockNodeRegistration`) is retried every pass, like a kubelet, without holding up
//!   the other nodes.
//!
//! On a real cluster the node-lifecycle controller turns a node with a stale Lease NotReady and
//! taints it unreachable. The in-process test API server has no such controller, so
//! [`SimKubeletOptions::emulate_node_lifecycle`] does that part too (off on real clusters).
//!
//! It reads the cluster through watches ([`SimKubelet::watch`], [`super::watched`]), keeping only
//! small views, and GETs an object only before writing it: no list per pass.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, PodCondition, PodStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use karpenter_api::well_known::{NODE_NOT_READY_TAINT_KEY, NODE_UNREACHABLE_TAINT_KEY};
use karpenter_core::clock::Clock;
use karpenter_core::node::{node_ready_condition as ready_condition, pod_is_ready};
use karpenter_core::taints::{NO_EXECUTE, NO_SCHEDULE};
use karpenter_kube::{is_conflict, is_not_found, lock, stopped, timeouts};
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use super::watched::{self, PodWork, Watched, node_view};
use crate::{InstanceRef, SimCloudProvider};

/// Namespace of node heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// How the sim kubelet behaves.
#[derive(Clone, Debug)]
pub struct SimKubeletOptions {
    /// How often pods and nodes are looked at.
    pub sync_period: Duration,
    /// How often each node's Lease is renewed (the kubelet's default is 10 s).
    pub heartbeat_period: Duration,
    /// Lease duration; with node-lifecycle emulation, a node whose Lease is older is NotReady
    /// (kube-controller-manager's `node-monitor-grace-period`, 40 s).
    pub lease_duration: Duration,
    /// Play the node-lifecycle controller too (the test API server has none).
    pub emulate_node_lifecycle: bool,
}

impl Default for SimKubeletOptions {
    fn default() -> Self {
        SimKubeletOptions {
            sync_period: Duration::from_secs(1),
            heartbeat_period: Duration::from_secs(10),
            lease_duration: Duration::from_secs(40),
            emulate_node_lifecycle: false,
        }
    }
}

/// Errors of one sync pass.
#[derive(Debug, thiserror::Error)]
#[error("sim kubelet: {action}")]
pub struct SimKubeletError {
    action: String,
    #[source]
    source: Box<kube::Error>,
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> SimKubeletError {
    let action = action.into();
    move |e| SimKubeletError {
        action,
        source: Box::new(e),
    }
}

struct Inner {
    client: kube::Client,
    provider: SimCloudProvider,
    clock: Arc<dyn Clock>,
    options: SimKubeletOptions,
    stopped: Mutex<BTreeSet<String>>,
    last_heartbeat: Mutex<BTreeMap<String, Timestamp>>,
    watched: Mutex<Watched>,
    /// Terminating pods whose `preStop` hook still runs: `namespace/name` → (uid, when the
    /// deletion may complete).
    stopping: Mutex<BTreeMap<String, (Option<String>, Timestamp)>>,
}

/// The label (and value) that makes a pod run but never turn Ready (kwok's `unhealthy` stage).
pub const NEVER_READY_STAGE: (&str, &str) = ("kwok.x-k8s.io/stage", "unhealthy");

/// Whether a pod with these labels never turns Ready ([`NEVER_READY_STAGE`]).
pub fn never_ready(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(NEVER_READY_STAGE.0))
        .map(String::as_str)
        == Some(NEVER_READY_STAGE.1)
}

/// Whether the pod has been started (phase `Running`).
pub(crate) fn started(pod: &karpenter_core::pod::Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// When a terminating pod's deletion may complete: `None` at once (no `preStop` hook, or not
/// terminating), else when its longest hook ends, never later than `deletionTimestamp` (the
/// kubelet kills the containers when the grace period ends).
pub fn pre_stop_ends(pod: &Pod) -> Option<Timestamp> {
    let deadline = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
    let started = deadline - SignedDuration::from_secs(grace.max(0));
    let hooks: Vec<Timestamp> = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .filter_map(|c| c.lifecycle.as_ref()?.pre_stop.as_ref())
        .map(|hook| match &hook.sleep {
            Some(sleep) => started + SignedDuration::from_secs(sleep.seconds.max(0)),
            // An exec or HTTP hook: how long it takes is unknowable here; it may take it all.
            None => deadline,
        })
        .collect();
    hooks.into_iter().max().map(|end| end.min(deadline))
}

/// The kubelet of every sim node. Cheap to clone; clones share the heartbeat switches.
#[derive(Clone)]
pub struct SimKubelet {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SimKubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimKubelet")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

/// The status a started pod reports: Running, every condition True.
pub fn running_status(pod: &Pod, host_ip: &str, pod_ip: &str, now: Timestamp) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let time = Some(Time(now));
    status.phase = Some("Running".into());
    status.host_ip = Some(host_ip.to_string());
    status.pod_ip = Some(pod_ip.to_string());
    status.start_time = status.start_time.or_else(|| time.clone());
    status.conditions = Some(
        ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
            .into_iter()
            .map(|type_| PodCondition {
                type_: type_.to_string(),
                status: "True".into(),
                last_transition_time: time.clone(),
                ..PodCondition::default()
            })
            .collect(),
    );
    status
}

/// What the node-lifecycle controller does to a node given its Lease: `Some(node)` when it
/// changes. A stale Lease → Ready=Unknown plus the unreachable taints; a fresh one → Ready=True
/// and the not-ready/unreachable taints lifted.
pub fn node_lifecycle(
    node: &Node,
    renewed: Option<Timestamp>,
    now: Timestamp,
    grace: SignedDuration,
) -> Option<Node> {
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    let last = renewed.unwrap_or(created);
    let alive = now.duration_since(last) <= grace;
    let mut out = node.clone();
    let taints = out
        .spec
        .get_or_insert_default()
        .taints
        .get_or_insert_default();
    let conditions = out
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default();
    if alive {
        taints.retain(|t| t.key != NODE_NOT_READY_TAINT_KEY && t.key != NODE_UNREACHABLE_TAINT_KEY);
        if !ready_written_by_another(node) {
            conditions.retain(|c| c.type_ != "Ready");
            conditions.push(ready_true(node, now));
        }
    } else {
        conditions.retain(|c| c.type_ != "Ready");
        for effect in [NO_SCHEDULE, NO_EXECUTE] {
            if !taints
                .iter()
                .any(|t| t.key == NODE_UNREACHABLE_TAINT_KEY && t.effect == effect)
            {
                taints.push(Taint {
                    key: NODE_UNREACHABLE_TAINT_KEY.into(),
                    effect: effect.into(),
                    ..Taint::default()
                });
            }
        }
        let previous = ready_condition(node);
        let unchanged = previous.is_some_and(|c| c.status == "Unknown");
        conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: "Unknown".into(),
            reason: Some(NODE_STATUS_UNKNOWN_REASON.into()),
            message: Some("Kubelet stopped posting node status.".into()),
            last_heartbeat_time: previous.and_then(|c| c.last_heartbeat_time.clone()),
            last_transition_time: if unchanged {
                previous.and_then(|c| c.last_transition_time.clone())
            } else {
                Some(Time(now))
            },
        });
    }
    if out
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(Vec::is_empty)
    {
        out.spec.get_or_insert_default().taints = None;
    }
    let before_taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .filter(|t| !t.is_empty());
    let after_taints = out.spec.as_ref().and_then(|s| s.taints.clone());
    let ready_changed = ready_condition(node).map(|c| c.status.as_str())
        != ready_condition(&out).map(|c| c.status.as_str());
    (before_taints != after_taints || ready_changed).then_some(out)
}

/// The reason of the Ready condition the kubelet posts.
const KUBELET_READY_REASON: &str = "KubeletReady";
/// Objects worked on at once (nodes registered, Leases renewed, Node statuses posted, pods
/// started or finished deleting), as every node's kubelet works on its own: one after the other,
/// a 10,000-pod burst's 1,500 nodes took longer than the heartbeat period to renew their Leases,
/// the node-lifecycle controller marked them unreachable, and nothing was scheduled on them.
const WORKERS: usize = 32;

/// Runs `pass` every `period` (a late pass delays the next, never doubles it up), forever; a
/// failed pass is logged and tried again at the next tick.
async fn every<F, Fut>(period: Duration, part: &str, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), SimKubeletError>>,
{
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(err) = pass().await {
            tracing::warn!(error = %err, part, "sim kubelet sync failed; retrying");
        }
    }
}

/// Runs every piece of work, [`WORKERS`] at once. One failing does not hold up the others, as
/// one kubelet's trouble does not stop another's: the results that succeeded, and the first
/// error.
async fn all_of<T, F>(work: impl IntoIterator<Item = F>) -> (Vec<T>, Option<SimKubeletError>)
where
    F: std::future::Future<Output = Result<T, SimKubeletError>>,
{
    let mut running = futures::stream::iter(work).buffer_unordered(WORKERS);
    let (mut done, mut first_error) = (Vec::new(), None);
    while let Some(result) = running.next().await {
        match result {
            Ok(value) => done.push(value),
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    (done, first_error)
}
/// The reason the node-lifecycle controller gives a node whose Lease went stale.
const NODE_STATUS_UNKNOWN_REASON: &str = "NodeStatusUnknown";

/// Whether the node's Ready condition was written by someone other than this kubelet and the
/// node-lifecycle controller (a test or a health agent marking the node unhealthy). Like KWOK,
/// whose heartbeat only refreshes a node that is Ready, the sim kubelet keeps such a condition
/// instead of posting Ready=True over it: node repair acts on exactly those conditions.
pub fn ready_written_by_another(node: &Node) -> bool {
    ready_condition(node).is_some_and(|c| {
        let reason = c.reason.as_deref();
        let ours = c.status == "True" && reason == Some(KUBELET_READY_REASON);
        let lifecycle = c.status == "Unknown" && reason == Some(NODE_STATUS_UNKNOWN_REASON);
        !(ours || lifecycle)
    })
}

fn ready_true(node: &Node, now: Timestamp) -> NodeCondition {
    let previous = ready_condition(node);
    let unchanged = previous.is_some_and(|c| c.status == "True");
    NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: Some(KUBELET_READY_REASON.into()),
        message: Some("kubelet is posting ready status (simulated)".into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: if unchanged {
            previous.and_then(|c| c.last_transition_time.clone())
        } else {
            Some(Time(now))
        },
    }
}

/// The owner reference a kubelet puts on its node Lease.
fn node_owner_reference(node: &Node) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.name_any(),
        uid: node.metadata.uid.clone()?,
        controller: None,
        block_owner_deletion: None,
    })
}

impl SimKubelet {
    pub fn new(
        client: kube::Client,
        provider: SimCloudProvider,
        clock: Arc<dyn Clock>,
        options: SimKubeletOptions,
    ) -> Self {
        SimKubelet {
            inner: Arc::new(Inner {
                client,
                provider,
                clock,
                options,
                stopped: Mutex::default(),
                last_heartbeat: Mutex::default(),
                watched: Mutex::default(),
                stopping: Mutex::default(),
            }),
        }
    }

    /// The node's kubelet dies: no more Lease renewals, status updates or pod handling.
    pub fn stop_heartbeats(&self, node: &str) {
        lock(&self.inner.stopped).insert(node.to_string());
    }

    /// The node's kubelet comes back.
    pub fn resume_heartbeats(&self, node: &str) {
        lock(&self.inner.stopped).remove(node);
    }

    fn is_alive(&self, node: &str) -> bool {
        !lock(&self.inner.stopped).contains(node)
    }

    /// Runs the nodes' part of [`SimKubelet::sync`] and its pods' part every `sync_period`,
    /// each on its own, and [`SimKubelet::watch`], until `shutdown` turns true. Apart, as a
    /// node's heartbeat does not wait for its pods to start: a pass starting thousands of pods
    /// would otherwise hold up every Lease past the node-monitor grace period.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let period = self.inner.options.sync_period;
        let watching = self.watch();
        let nodes = every(period, "node", || self.sync_nodes());
        let pods = every(period, "pod", || self.sync_pods());
        futures::pin_mut!(watching, nodes, pods);
        tokio::select! {
            () = stopped(&mut shutdown) => {}
            () = &mut watching => {}
            _ = &mut nodes => {}
            _ = &mut pods => {}
        }
    }

    /// Follows the Nodes, NodeClaims, node Leases and bound pods [`SimKubelet::sync`] acts on
    /// (see [`super::watched`]); never returns. [`SimKubelet::run`] runs it beside the syncs;
    /// whoever calls `sync` directly must run it too.
    pub async fn watch(&self) {
        watched::follow_all(
            self.inner.client.clone(),
            NODE_LEASE_NAMESPACE,
            &self.inner.watched,
        )
        .await;
    }

    /// One pass: register Nodes for new instances, heartbeat, start pods, finish terminating pods
    /// and (when emulating) update node readiness from the Leases. Works from what
    /// [`SimKubelet::watch`] has seen; does nothing until every kind has been listed once.
    pub async fn sync(&self) -> Result<(), SimKubeletError> {
        let nodes = self.sync_nodes().await;
        let pods = self.sync_pods().await;
        nodes.and(pods)
    }

    /// The pods' part of a pass: start pods bound to live sim nodes, finish terminating ones.
    pub async fn sync_pods(&self) -> Result<(), SimKubeletError> {
        if !lock(&self.inner.watched).is_synced() {
            return Ok(());
        }
        let instances: BTreeMap<String, InstanceRef> = self
            .inner
            .provider
            .instance_refs()
            .into_iter()
            .map(|i| (i.node_name.clone(), i))
            .collect();
        self.run_pods(&instances, self.inner.clock.now()).await
    }

    /// The nodes' part of a pass: register Nodes for new instances, delete those whose instance
    /// is gone, heartbeat, post Ready (or, when emulating, play the node-lifecycle controller).
    /// Every node's work is tried; the first error is returned after.
    pub async fn sync_nodes(&self) -> Result<(), SimKubeletError> {
        let now = self.inner.clock.now();
        let node_api: Api<Node> = Api::all(self.inner.client.clone());
        // Nodes first, instances last: an instance missing its Node in this order is new, never
        // one whose Node was just released after the instance was terminated. (The watched
        // Nodes lag the API server, which keeps that order.)
        let (nodes, deleting_claims) = {
            let watched = lock(&self.inner.watched);
            if !watched.is_synced() {
                tracing::debug!("sim kubelet: waiting for the first lists");
                return Ok(());
            }
            (watched.nodes.0.clone(), watched.deleting_claims.0.clone())
        };
        let mut nodes = nodes;
        let instances: BTreeMap<String, InstanceRef> = self
            .inner
            .provider
            .instance_refs()
            .into_iter()
            .map(|i| (i.node_name.clone(), i))
            .collect();

        // Owned work items: each future then borrows only what outlives the pass.
        let new_nodes: Vec<(InstanceRef, Node)> = instances
            .iter()
            .filter(|(name, instance)| {
                // A terminating machine's kubelet does not join the cluster.
                !nodes.contains_key(*name)
                    && self.is_alive(name)
                    && !deleting_claims.contains(&instance.node_claim)
            })
            .filter_map(|(_, instance)| {
                let node = self
                    .inner
                    .provider
                    .registered_node(&instance.provider_id)
                    .ok()?;
                Some((instance.clone(), node))
            })
            .collect();
        let registering = new_nodes
            .into_iter()
            .map(|(instance, node)| self.register_node(&node_api, instance, node));
        let (registered, mut first_error) = all_of(registering).await;
        for created in registered.into_iter().flatten() {
            nodes.insert(created.name_any(), Arc::new(node_view(&created)));
        }
        let deleting = self.delete_nodes_without_instances(&node_api, &nodes, &instances);
        first_error = first_error.or(deleting.await.err());

        let (leases, renew_error) = self.heartbeat(&instances, &nodes, now).await;
        first_error = first_error.or(renew_error);

        let updates: Vec<_> = if self.inner.options.emulate_node_lifecycle {
            let grace = SignedDuration::try_from(self.inner.options.lease_duration)
                .unwrap_or(SignedDuration::from_secs(40));
            let changing: Vec<(String, Option<Timestamp>)> = nodes
                .iter()
                .filter(|(_, n)| self.owns(n))
                .map(|(name, node)| (name, node, leases.get(name).copied()))
                .filter(|(_, node, renewed)| node_lifecycle(node, *renewed, now, grace).is_some())
                .map(|(name, _, renewed)| (name.clone(), renewed))
                .collect();
            changing
                .into_iter()
                .map(|(name, renewed)| {
                    self.update_node(&node_api, name, move |current| {
                        node_lifecycle(current, renewed, now, grace)
                    })
                })
                .map(futures::future::Either::Left)
                .collect()
        } else {
            // On a real cluster only the kubelet's own Ready condition is ours to post: it
            // replaces the node-lifecycle controller's Unknown once heartbeats resume, never a
            // condition another actor wrote.
            let needs_ready = |n: &Node| {
                ready_condition(n).is_none_or(|c| c.status != "True")
                    && !ready_written_by_another(n)
            };
            let not_ready: Vec<String> = nodes
                .iter()
                .filter(|(n, node)| {
                    instances.contains_key(*n) && self.is_alive(n) && needs_ready(node)
                })
                .map(|(name, _)| name.clone())
                .collect();
            not_ready
                .into_iter()
                .map(|name| {
                    self.update_node(&node_api, name, move |current| {
                        if !needs_ready(current) {
                            return None;
                        }
                        let mut updated = current.clone();
                        let conditions = updated
                            .status
                            .get_or_insert_default()
                            .conditions
                            .get_or_insert_default();
                        conditions.retain(|c| c.type_ != "Ready");
                        conditions.push(ready_true(current, now));
                        Some(updated)
                    })
                })
                .map(futures::future::Either::Right)
                .collect()
        };
        let (_, update_error) = all_of(updates).await;
        first_error.or(update_error).map_or(Ok(()), Err)
    }

    /// Registers the Node of a new instance, as its kubelet does when it boots; the Node as
    /// created, `None` if it exists already or the API server refused it (tried again next pass).
    async fn register_node(
        &self,
        api: &Api<Node>,
        instance: InstanceRef,
        node: Node,
    ) -> Result<Option<Node>, SimKubeletError> {
        let name = &instance.node_name;
        match timeouts::api(api.create(&karpenter_kube::identity::post_params(), &node)).await {
            Ok(created) => {
                tracing::info!(node = %name, provider_id = %instance.provider_id, "sim kubelet registered node");
                self.remember_node(&created);
                Ok(Some(created))
            }
            Err(err) if is_conflict(&err) => Ok(None),
            // Refused (an admission policy, a webhook): a kubelet keeps trying, and the
            // other nodes' work goes on meanwhile.
            Err(kube::Error::Api(refused)) if matches!(refused.code, 400 | 403 | 422) => {
                tracing::warn!(node = %name, reason = %refused.message, "sim kubelet: node registration refused; retrying");
                Ok(None)
            }
            Err(err) => Err(kube_err(format!("register node {name}"))(err)),
        }
    }

    /// Records a Node the kubelet just wrote, so the next pass does not act on the watch's
    /// older copy.
    fn remember_node(&self, node: &Node) {
        lock(&self.inner.watched)
            .nodes
            .0
            .insert(node.name_any(), Arc::new(node_view(node)));
    }

    /// Reads the whole Node (the watched view is trimmed), lets `change` decide, and writes the
    /// result. A Node gone or changed meanwhile is left to the next pass.
    async fn update_node(
        &self,
        api: &Api<Node>,
        name: String,
        change: impl FnOnce(&Node) -> Option<Node>,
    ) -> Result<(), SimKubeletError> {
        let Some(current) = timeouts::api(api.get_opt(&name))
            .await
            .map_err(kube_err(format!("read node {name}")))?
        else {
            return Ok(());
        };
        let Some(desired) = change(&current) else {
            self.remember_node(&current);
            return Ok(());
        };
        if let Some(written) = self.write_node(api, &current, desired).await? {
            self.remember_node(&written);
        }
        Ok(())
    }

    /// The cloud's node controller: a Node of ours whose instance no longer exists is deleted
    /// (its finalizer, if registered, still runs the termination).
    async fn delete_nodes_without_instances(
        &self,
        api: &Api<Node>,
        nodes: &BTreeMap<String, Arc<Node>>,
        instances: &BTreeMap<String, InstanceRef>,
    ) -> Result<(), SimKubeletError> {
        let gone = nodes.iter().filter(|(name, node)| {
            self.owns(node)
                && node.metadata.deletion_timestamp.is_none()
                && !instances.contains_key(*name)
        });
        let gone: Vec<(String, Option<String>)> = gone
            .map(|(name, node)| (name.clone(), node.uid()))
            .collect();
        let deletions = gone
            .into_iter()
            .map(|(name, uid)| Self::delete_node(api, name, uid));
        all_of(deletions).await.1.map_or(Ok(()), Err)
    }

    async fn delete_node(
        api: &Api<Node>,
        name: String,
        uid: Option<String>,
    ) -> Result<(), SimKubeletError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match timeouts::api(api.delete(&name, &params)).await {
            Ok(_) => tracing::info!(node = %name, "deleted node whose sim instance is gone"),
            Err(err) if is_conflict(&err) || is_not_found(&err) => {}
            Err(err) => return Err(kube_err(format!("delete node {name}"))(err)),
        }
        Ok(())
    }

    /// A node this provider launched (its providerID is one of ours).
    fn owns(&self, node: &Node) -> bool {
        let prefix = format!("{}://", crate::provider::PROVIDER_NAME);
        node.spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|p| p.starts_with(&prefix))
    }

    /// Writes `desired`'s taints (spec) and Ready condition (status) over `before`; returns the
    /// Node as last written, `None` when it changed or went away meanwhile.
    async fn write_node(
        &self,
        api: &Api<Node>,
        before: &Node,
        mut desired: Node,
    ) -> Result<Option<Node>, SimKubeletError> {
        let name = before.name_any();
        let pp = karpenter_kube::identity::post_params();
        let mut current = before.clone();
        if before.spec.as_ref().and_then(|s| s.taints.as_ref())
            != desired.spec.as_ref().and_then(|s| s.taints.as_ref())
        {
            let mut spec_update = before.clone();
            spec_update.spec = desired.spec.clone();
            current = match timeouts::api(api.replace(&name, &pp, &spec_update)).await {
                Ok(updated) => updated,
                Err(err) if is_conflict(&err) || is_not_found(&err) => return Ok(None),
                Err(err) => return Err(kube_err(format!("update taints of node {name}"))(err)),
            };
        }
        if ready_condition(before) != ready_condition(&desired) {
            desired.metadata = current.metadata;
            desired.spec = current.spec;
            return match timeouts::api(api.replace_status(&name, &pp, &desired)).await {
                Ok(written) => Ok(Some(written)),
                Err(err) if is_conflict(&err) || is_not_found(&err) => Ok(None),
                Err(err) => Err(kube_err(format!("update status of node {name}"))(err)),
            };
        }
        Ok(Some(current))
    }

    /// Renews the Lease of every live node whose last renewal is older than the heartbeat period;
    /// returns every node's last renewal time as the Leases say, and the first renewal that
    /// failed (the others are renewed regardless).
    async fn heartbeat(
        &self,
        instances: &BTreeMap<String, InstanceRef>,
        nodes: &BTreeMap<String, Arc<Node>>,
        now: Timestamp,
    ) -> (BTreeMap<String, Timestamp>, Option<SimKubeletError>) {
        let api: Api<Lease> = Api::namespaced(self.inner.client.clone(), NODE_LEASE_NAMESPACE);
        let period = SignedDuration::try_from(self.inner.options.heartbeat_period)
            .unwrap_or(SignedDuration::from_secs(10));
        let mut renewed = lock(&self.inner.watched).leases.0.clone();
        let due: Vec<(String, OwnerReference)> = {
            let last = lock(&self.inner.last_heartbeat);
            instances
                .keys()
                .filter(|n| self.is_alive(n))
                .filter(|n| {
                    last.get(*n)
                        .is_none_or(|at| now.duration_since(*at) >= period)
                })
                // Like a kubelet, heartbeat only once registered: the Lease is owned by the
                // Node, so the garbage collector removes it with the Node.
                .filter_map(|n| {
                    Some((
                        n.clone(),
                        nodes
                            .get(n)
                            .map(Arc::as_ref)
                            .and_then(node_owner_reference)?,
                    ))
                })
                .collect()
        };
        let renewals = due
            .into_iter()
            .map(|(name, owner)| self.renew_lease(&api, name, owner, now));
        let (done, first_error) = all_of(renewals).await;
        for name in done.into_iter().flatten() {
            renewed.insert(name, now);
        }
        (renewed, first_error)
    }

    /// Renews one node's Lease (creating it the first time) with one request; the node's name
    /// once renewed, `None` when another writer won the race (renewed next pass).
    async fn renew_lease(
        &self,
        api: &Api<Lease>,
        name: String,
        owner: OwnerReference,
        now: Timestamp,
    ) -> Result<Option<String>, SimKubeletError> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                // A Lease of an earlier Node of the same name gets the current owner.
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(name.clone()),
                lease_duration_seconds: i32::try_from(self.inner.options.lease_duration.as_secs())
                    .ok(),
                renew_time: Some(MicroTime(now)),
                ..LeaseSpec::default()
            }),
        };
        let patch = kube::api::Patch::Merge(&lease);
        let result = match timeouts::api(api.patch(
            &name,
            &karpenter_kube::identity::patch_params(),
            &patch,
        ))
        .await
        {
            Err(err) if is_not_found(&err) => {
                timeouts::api(api.create(&karpenter_kube::identity::post_params(), &lease))
                    .await
                    .map(|_| ())
            }
            other => other.map(|_| ()),
        };
        match result {
            Ok(()) => {
                lock(&self.inner.last_heartbeat).insert(name.clone(), now);
                lock(&self.inner.watched).leases.0.insert(name.clone(), now);
                Ok(Some(name))
            }
            Err(err) if is_conflict(&err) => Ok(None),
            Err(err) => Err(kube_err(format!("renew lease {name}"))(err)),
        }
    }

    /// Starts pods bound to live sim nodes and completes the deletion of terminating ones.
    async fn run_pods(
        &self,
        instances: &BTreeMap<String, InstanceRef>,
        now: Timestamp,
    ) -> Result<(), SimKubeletError> {
        let work: Vec<(String, PodWork)> = lock(&self.inner.watched)
            .pods
            .0
            .iter()
            .filter(|(_, w)| instances.contains_key(&w.node) && self.is_alive(&w.node))
            .map(|(key, w)| (key.clone(), w.clone()))
            .collect();
        lock(&self.inner.stopping).retain(|key, _| work.iter().any(|(k, _)| k == key));
        // Pods start side by side, as a node's kubelet starts its pods and as many kubelets do at
        // once: one after the other, a burst of 1,000 bound pods took ~14 s to show Running.
        let runs = work.into_iter().filter_map(|(key, pod)| {
            let instance = instances.get(&pod.node)?;
            Some(self.run_pod(key, pod, instance, now))
        });
        all_of(runs).await.1.map_or(Ok(()), Err)
    }

    /// Starts one bound pod (Running, Ready), or completes its deletion once its `preStop` ends.
    async fn run_pod(
        &self,
        key: String,
        pod: PodWork,
        instance: &InstanceRef,
        now: Timestamp,
    ) -> Result<(), SimKubeletError> {
        let (namespace, name) = (&pod.namespace, &pod.name);
        let api: Api<Pod> = Api::namespaced(self.inner.client.clone(), namespace);
        if pod.deleting && self.still_stopping(&api, &key, &pod, now).await? {
            return Ok(());
        }
        if pod.deleting {
            // The containers "exit" at once; the deletion completes.
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match timeouts::api(api.delete(name, &params)).await {
                Ok(_) => {}
                Err(err) if is_conflict(&err) || is_not_found(&err) => {}
                Err(err) => {
                    return Err(kube_err(format!("finish deleting pod {namespace}/{name}"))(
                        err,
                    ));
                }
            }
            lock(&self.inner.stopping).remove(&key);
            self.forget_pod(&key, &pod);
            return Ok(());
        }
        // The watched view keeps no status: read the pod, and act only if it is still the
        // one we saw, still waiting to start.
        let Some(current) = timeouts::api(api.get_opt(name))
            .await
            .map_err(kube_err(format!("read pod {namespace}/{name}")))?
        else {
            self.forget_pod(&key, &pod);
            return Ok(());
        };
        let seen = karpenter_core::pod::Pod::from(current.clone());
        let unhealthy = never_ready(current.metadata.labels.as_ref());
        if current.metadata.uid != pod.uid
            || current.metadata.deletion_timestamp.is_some()
            || pod_is_ready(&seen)
            || (unhealthy && started(&seen))
            || karpenter_core::pod::is_terminal(&seen)
            || current.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(pod.node.as_str())
        {
            // The watch brings what changed; until then there is nothing to start.
            self.forget_pod(&key, &pod);
            return Ok(());
        }
        let mut updated = current;
        let seq = lock(&self.inner.last_heartbeat).len();
        let pod_ip = format!(
            "{}.{}",
            instance
                .private_ip
                .rsplit_once('.')
                .map_or("10.0.0", |(net, _)| net),
            100 + seq % 100
        );
        let mut status = running_status(&updated, &instance.private_ip, &pod_ip, now);
        if unhealthy {
            for condition in status.conditions.iter_mut().flatten() {
                if condition.type_ == "Ready" || condition.type_ == "ContainersReady" {
                    condition.status = "False".into();
                }
            }
        }
        updated.status = Some(status);
        match timeouts::api(api.replace_status(
            name,
            &karpenter_kube::identity::post_params(),
            &updated,
        ))
        .await
        {
            Ok(_) => self.forget_pod(&key, &pod),
            Err(err) if is_conflict(&err) || is_not_found(&err) => {}
            Err(err) => return Err(kube_err(format!("start pod {namespace}/{name}"))(err)),
        }
        Ok(())
    }

    /// Whether a terminating pod's `preStop` hook still runs ([`pre_stop_ends`]). The watched view
    /// keeps no containers: the pod is read once, and the end remembered.
    async fn still_stopping(
        &self,
        api: &Api<Pod>,
        key: &str,
        pod: &PodWork,
        now: Timestamp,
    ) -> Result<bool, SimKubeletError> {
        if let Some((uid, ends)) = lock(&self.inner.stopping).get(key)
            && *uid == pod.uid
        {
            return Ok(now < *ends);
        }
        let Some(current) = timeouts::api(api.get_opt(&pod.name))
            .await
            .map_err(kube_err(format!("read pod {}/{}", pod.namespace, pod.name)))?
        else {
            return Ok(false);
        };
        match pre_stop_ends(&current) {
            Some(ends) if now < ends && current.metadata.uid == pod.uid => {
                tracing::debug!(pod = %key, until = %ends, "sim kubelet: preStop hook running");
                lock(&self.inner.stopping).insert(key.to_string(), (pod.uid.clone(), ends));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Done with `pod` (started, deleted or no longer ours to handle). Only the entry we acted
    /// on goes: a newer one the watch brought meanwhile stays.
    fn forget_pod(&self, key: &str, pod: &PodWork) {
        let mut watched = lock(&self.inner.watched);
        if watched.pods.0.get(key) == Some(pod) {
            watched.pods.0.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_704_067_200).unwrap()
    }

    fn node(ready: &str, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"providerID": "sim://r/z/i-1", "taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    }

    #[test]
    fn stale_lease_makes_node_unreachable_and_fresh_lease_heals_it() {
        let grace = SignedDuration::from_secs(40);
        let later = t0().checked_add(SignedDuration::from_secs(60)).unwrap();
        let healthy = node("True", json!([]));
        assert!(
            node_lifecycle(&healthy, Some(later), later, grace).is_none(),
            "nothing to change"
        );
        let dead = node_lifecycle(&healthy, Some(t0()), later, grace).unwrap();
        assert_eq!(ready_condition(&dead).unwrap().status, "Unknown");
        let taints = dead.spec.as_ref().unwrap().taints.as_ref().unwrap();
        assert_eq!(
            taints
                .iter()
                .filter(|t| t.key == NODE_UNREACHABLE_TAINT_KEY)
                .count(),
            2
        );
        assert!(
            node_lifecycle(&dead, Some(t0()), later, grace).is_none(),
            "stable once dead"
        );
        let healed = node_lifecycle(&dead, Some(later), later, grace).unwrap();
        assert_eq!(ready_condition(&healed).unwrap().status, "True");
        assert!(healed.spec.as_ref().unwrap().taints.is_none());
        // The not-ready taint admission adds to new nodes goes once the node is Ready.
        let fresh = node(
            "True",
            json!([{"key": NODE_NOT_READY_TAINT_KEY, "effect": "NoSchedule"}]),
        );
        assert!(
            node_lifecycle(&fresh, Some(t0()), t0(), grace)
                .unwrap()
                .spec
                .unwrap()
                .taints
                .is_none()
        );
    }

    /// Upstream's repair tests mark a node Ready=False or Unknown themselves; KWOK leaves that
    /// condition alone, and so must the sim kubelet while its Lease stays fresh.
    #[test]
    fn a_ready_condition_written_by_another_actor_is_kept() {
        let grace = SignedDuration::from_secs(40);
        for status in ["False", "Unknown"] {
            let marked = node(status, json!([]));
            assert!(ready_written_by_another(&marked), "{status}");
            assert!(
                node_lifecycle(&marked, Some(t0()), t0(), grace).is_none(),
                "a fresh Lease does not overwrite Ready={status} set by someone else"
            );
        }
        // What the kubelet and the node-lifecycle controller wrote stays theirs to change.
        let ours: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
        }))
        .unwrap();
        assert!(!ready_written_by_another(&ours));
        let later = t0().checked_add(SignedDuration::from_secs(60)).unwrap();
        let dead = node_lifecycle(&ours, Some(t0()), later, grace).unwrap();
        assert!(!ready_written_by_another(&dead));
        assert_eq!(ready_condition(&dead).unwrap().status, "Unknown");
    }

    #[test]
    fn running_status_reports_ready() {
        let pod = Pod::default();
        let status = running_status(&pod, "10.0.0.1", "10.0.0.101", t0());
        let mut started = pod.clone();
        started.status = Some(status);
        assert!(pod_is_ready(&started.into()));
        assert!(!pod_is_ready(&pod.into()));
    }

    fn terminating(containers: serde_json::Value, grace: i64) -> Pod {
        let deadline = t0() + SignedDuration::from_secs(grace);
        serde_json::from_value(json!({
            "metadata": {"name": "p", "deletionTimestamp": deadline.to_string(),
                         "deletionGracePeriodSeconds": grace},
            "spec": {"containers": containers}
        }))
        .unwrap()
    }

    #[test]
    fn a_pre_stop_sleep_holds_the_deletion_until_it_ends_or_the_grace_period_does() {
        let sleep =
            |s: i64| json!({"name": "c", "lifecycle": {"preStop": {"sleep": {"seconds": s}}}});
        // upstream termination_test.go: preStop sleep 300 s, grace 30 s → killed at 30 s.
        let pod = terminating(json!([sleep(300)]), 30);
        assert_eq!(
            pre_stop_ends(&pod),
            Some(t0() + SignedDuration::from_secs(30))
        );
        // A short hook ends first.
        let pod = terminating(json!([sleep(5)]), 30);
        assert_eq!(
            pre_stop_ends(&pod),
            Some(t0() + SignedDuration::from_secs(5))
        );
        // Hooks of several containers run side by side: the longest counts.
        let pod = terminating(json!([sleep(5), sleep(12)]), 30);
        assert_eq!(
            pre_stop_ends(&pod),
            Some(t0() + SignedDuration::from_secs(12))
        );
        // An exec hook may take the whole grace period.
        let exec = json!({"name": "c", "lifecycle": {"preStop": {"exec": {"command": ["sh"]}}}});
        let pod = terminating(json!([exec]), 30);
        assert_eq!(
            pre_stop_ends(&pod),
            Some(t0() + SignedDuration::from_secs(30))
        );
    }

    #[test]
    fn a_pod_without_a_hook_or_not_terminating_exits_at_once() {
        let pod = terminating(json!([{"name": "c"}]), 30);
        assert_eq!(pre_stop_ends(&pod), None);
        let mut pod = terminating(
            json!([{"name": "c", "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}]),
            30,
        );
        pod.metadata.deletion_timestamp = None;
        assert_eq!(pre_stop_ends(&pod), None);
    }

    #[test]
    fn only_the_unhealthy_stage_label_keeps_a_pod_unready() {
        let labels = |v: &str| {
            Some(BTreeMap::from([(
                NEVER_READY_STAGE.0.to_string(),
                v.to_string(),
            )]))
        };
        assert!(never_ready(labels("unhealthy").as_ref()));
        assert!(!never_ready(labels("running").as_ref()));
        assert!(!never_ready(None));
    }
}
