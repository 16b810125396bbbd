//! Wiring: start every task of a controller replica, supervise them, stop them gracefully.
//!
//! Supervision: every task (watchers, leader election, the controller loops, the HTTP servers)
//! runs until shutdown. One that ends or panics earlier leaves a half-alive replica, so
//! [`run_until`] marks the replica failed (`/healthz` → 500), stops it (the leader releases its
//! Lease, so the other replica takes over at its next retry) and returns an error: the binary
//! exits non-zero and Kubernetes restarts the pod.
//!
//! Providers plug in here: besides the [`karpenter_core::cloud_provider::CloudProvider`] in the
//! [`Context`], a provider brings its own background loops (the sim kubelet; for aws the
//! NodeClass status, price refresh, interruption queue) as [`ProviderTask`]s in
//! [`Options::provider_tasks`], supervised like every other task.

use std::fmt::Debug;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    LimitRange, Namespace, Node, PersistentVolume, PersistentVolumeClaim,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::clock::Clock;
use karpenter_core::pod::{self, Pod};
use karpenter_core::state::Tracked;
use kube::{Api, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::context::Context;
use crate::metrics::Metrics;
use crate::provisioning::Batcher;
use crate::state::reflector::reflect;
use crate::{disruption, leader, nodeclaim, nodepool, provisioning, server, termination};

/// A running replica. Drop-safe, but call [`RunningController::stop`] for a graceful shutdown
/// (the leader releases its lease so a follower takes over at once).
pub struct RunningController {
    pub ctx: Arc<Context>,
    /// Bound addresses (`None` when the server is disabled with port 0 → see [`Options`]).
    pub metrics_address: Option<SocketAddr>,
    pub health_address: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    /// Tasks that stop on `shutdown` (by name, for supervision).
    graceful: Vec<(&'static str, JoinHandle<()>)>,
    /// Watchers: they run until aborted.
    watchers: Vec<(&'static str, JoinHandle<()>)>,
}

/// What a provider's background task gets: the API client, this replica's leadership (only the
/// leader may write), the shutdown signal (the task must return soon after it turns true), the
/// clock and the controller's metrics (where the provider registers its own).
#[derive(Clone)]
pub struct ProviderTaskContext {
    pub client: kube::Client,
    /// `true` while this replica leads. Cloned before the election starts: every change is seen.
    pub leadership: watch::Receiver<bool>,
    /// Turns `true` on shutdown ([`karpenter_kube::stopped`] waits for it).
    pub shutdown: watch::Receiver<bool>,
    pub clock: Arc<dyn Clock>,
    /// The replica's metrics: a task registers its provider's metrics here
    /// ([`Metrics::register_provider_metrics`]) before returning its future, so they are served
    /// on `/metrics` from the start.
    pub metrics: Arc<Metrics>,
}

type ProviderTaskStart = Box<dyn FnOnce(ProviderTaskContext) -> BoxFuture<'static, ()> + Send>;

/// One background loop of a cloud provider, run by the controller under its supervision: like
/// the controller's own loops it runs until shutdown, and one that ends earlier or panics fails
/// the replica (see [`run_until`]).
///
/// `start` is called synchronously while the replica starts, before leader election and the
/// controllers run; what it does before returning its future (subscribing to leadership, say) is
/// in place before the first cloud call.
pub struct ProviderTask {
    /// For logs and for the failure reason (`"<name> panicked: ..."`).
    pub name: &'static str,
    start: ProviderTaskStart,
}

impl ProviderTask {
    pub fn new<F, Fut>(name: &'static str, start: F) -> Self
    where
        F: FnOnce(ProviderTaskContext) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        ProviderTask {
            name,
            start: Box::new(move |cx| Box::pin(start(cx))),
        }
    }
}

impl Debug for ProviderTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderTask")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// How to start a replica.
#[derive(Debug, Default)]
pub struct Options {
    /// Serve `/metrics`, `/healthz`, `/readyz` (tests usually don't).
    pub serve_http: bool,
    /// Bind on 127.0.0.1 instead of 0.0.0.0 (tests).
    pub loopback_only: bool,
    /// Health probes already served by the caller (the binary serves them before its first
    /// API call): they are attached to this replica and not served again.
    pub probes: Option<Arc<server::Probes>>,
    /// The cloud provider's background tasks (see [`ProviderTask`]).
    pub provider_tasks: Vec<ProviderTask>,
}

/// How long a failed replica may take to stop gracefully before its tasks are aborted.
pub const FAILED_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

fn spawn_reflector<K>(
    ctx: &Arc<Context>,
    on_change: impl Fn(&Context, &K) + Send + Sync + 'static,
) -> (&'static str, JoinHandle<()>)
where
    K: Tracked + DeserializeOwned + Debug + kube::Resource<DynamicType = ()>,
    K::Scope: Send,
{
    let api: Api<K> = Api::all(ctx.client.clone());
    let state = ctx.state.clone();
    let hook_ctx = ctx.clone();
    let task =
        tokio::spawn(
            async move { reflect(api, state, move |obj| on_change(&hook_ctx, obj)).await },
        );
    (std::any::type_name::<K>(), task)
}

fn wake_nodepools<K>(ctx: &Context, _: &K) {
    ctx.nodepools_changed.notify_one();
}

/// NodePools and NodeClasses: their status and their NodeClaims' drift follow them.
fn on_template_change<K>(ctx: &Context, obj: &K) {
    wake_nodepools(ctx, obj);
    ctx.templates_changed.notify_one();
}

/// Nodes and NodeClaims: their changes move NodePool status; once marked for deletion, their
/// pods need a new home, so the provisioner plans for them right away (upstream's node trigger).
fn on_capacity_change<K: kube::Resource>(ctx: &Context, obj: &K) {
    wake_nodepools(ctx, obj);
    if obj.meta().deletion_timestamp.is_some() {
        ctx.provisioning_trigger
            .trigger(obj.meta().uid.clone().unwrap_or_default());
    }
}

fn ignore<K>(_: &Context, _: &K) {}

impl RunningController {
    /// Starts the provider's tasks, watchers, leader election, the provisioner, the NodePool
    /// controllers and (optionally) the HTTP servers.
    pub async fn start(
        ctx: Arc<Context>,
        batcher: Batcher,
        options: Options,
    ) -> crate::Result<Self> {
        let (shutdown, shutdown_rx) = watch::channel(false);
        // Before the election starts, so no leadership change goes unnoticed.
        let provider_tasks: Vec<(&'static str, JoinHandle<()>)> = options
            .provider_tasks
            .into_iter()
            .map(|task| {
                let future = (task.start)(ProviderTaskContext {
                    // The raw client: a provider's task follows `leadership` itself (it writes
                    // only while leading, see docs/controller.md "Writing a provider").
                    client: ctx.raw_client().clone(),
                    leadership: ctx.leadership(),
                    shutdown: shutdown_rx.clone(),
                    clock: ctx.clock.clone(),
                    metrics: ctx.metrics.clone(),
                });
                (task.name, tokio::spawn(future))
            })
            .collect();
        let mut watchers = vec![
            spawn_reflector::<Pod>(&ctx, |ctx, p| {
                if pod::is_provisionable(p) && p.metadata.deletion_timestamp.is_none() {
                    ctx.provisioning_trigger
                        .trigger(p.uid().unwrap_or_else(|| pod::key(p)));
                }
            }),
            spawn_reflector::<Node>(&ctx, on_capacity_change),
            spawn_reflector::<NodeClaim>(&ctx, on_capacity_change),
            spawn_reflector::<NodePool>(&ctx, on_template_change),
            spawn_reflector::<EC2NodeClass>(&ctx, on_template_change),
            spawn_reflector::<DaemonSet>(&ctx, ignore),
            spawn_reflector::<PodDisruptionBudget>(&ctx, ignore),
            spawn_reflector::<PersistentVolumeClaim>(&ctx, ignore),
            spawn_reflector::<PersistentVolume>(&ctx, ignore),
            spawn_reflector::<StorageClass>(&ctx, ignore),
            // Namespace labels feed pod-affinity `namespaceSelector`s.
            spawn_reflector::<Namespace>(&ctx, ignore),
            // LimitRange defaults give DaemonSet pods the requests admission will give them.
            spawn_reflector::<LimitRange>(&ctx, ignore),
        ];
        let node_overlays = ctx.settings.feature_gates.node_overlay;
        if node_overlays {
            watchers.push((
                "NodeOverlay watcher",
                tokio::spawn(crate::nodeoverlay::watch(ctx.clone())),
            ));
        }
        let capacity_buffers = ctx.settings.feature_gates.capacity_buffer;
        if capacity_buffers {
            watchers.push((
                "CapacityBuffer watcher",
                tokio::spawn(crate::capacitybuffer::watch(ctx.clone())),
            ));
        }
        let events = ctx.events.clone();
        let events_shutdown = shutdown_rx.clone();
        let mut graceful = vec![
            (
                "leader election",
                tokio::spawn(leader::run(ctx.clone(), shutdown_rx.clone())),
            ),
            (
                "provisioner",
                tokio::spawn(provisioning::run(ctx.clone(), batcher, shutdown_rx.clone())),
            ),
            (
                "nodepool",
                tokio::spawn(nodepool::run(ctx.clone(), shutdown_rx.clone())),
            ),
            (
                "nodeclaim lifecycle",
                tokio::spawn(nodeclaim::run(ctx.clone(), shutdown_rx.clone())),
            ),
            (
                "nodeclaim garbage collection",
                tokio::spawn(nodeclaim::gc::run(ctx.clone(), shutdown_rx.clone())),
            ),
            (
                "node termination",
                tokio::spawn(termination::run(ctx.clone(), shutdown_rx.clone())),
            ),
            (
                "disruption",
                tokio::spawn(disruption::run(ctx.clone(), shutdown_rx.clone())),
            ),
            (
                "event writer",
                tokio::spawn(async move { events.run_writer(events_shutdown).await }),
            ),
        ];
        if node_overlays {
            graceful.push((
                "nodeoverlay",
                tokio::spawn(crate::nodeoverlay::run(ctx.clone(), shutdown_rx.clone())),
            ));
        }
        if capacity_buffers {
            graceful.push((
                "capacitybuffer",
                tokio::spawn(crate::capacitybuffer::run(ctx.clone(), shutdown_rx.clone())),
            ));
        }
        graceful.extend(provider_tasks);
        let (mut metrics_address, mut health_address) = (None, None);
        if let Some(probes) = &options.probes {
            probes.attach(ctx.clone());
        }
        if options.serve_http {
            let host = if options.loopback_only {
                Ipv4Addr::LOCALHOST
            } else {
                Ipv4Addr::UNSPECIFIED
            };
            let (addr, task) = server::serve(
                "metrics",
                SocketAddr::from((host, ctx.settings.metrics_port)),
                server::metrics_router(ctx.clone()),
                shutdown_rx.clone(),
            )
            .await?;
            metrics_address = Some(addr);
            graceful.push(("metrics server", task));
            if options.probes.is_none() {
                let (addr, task) = server::serve(
                    "health probes",
                    SocketAddr::from((host, ctx.settings.health_probe_port)),
                    server::health_router(server::Probes::for_context(ctx.clone())),
                    shutdown_rx,
                )
                .await?;
                health_address = Some(addr);
                graceful.push(("health probe server", task));
            }
        }
        tracing::info!(
            cloud_provider = ctx.cloud.name(),
            identity = %ctx.settings.identity,
            leader_election = !ctx.settings.disable_leader_election,
            "starting controllers"
        );
        Ok(RunningController {
            ctx,
            metrics_address,
            health_address,
            shutdown,
            graceful,
            watchers,
        })
    }

    /// Stops every task; the leader releases its lease first.
    pub async fn stop(self) {
        self.shutdown.send_replace(true);
        for (_, task) in self.graceful {
            let _ = task.await;
        }
        for (_, task) in &self.watchers {
            task.abort();
        }
        tracing::info!("stopped controllers");
    }

    /// Simulates a crash: everything stops at once, nothing is released.
    pub fn abort(self) {
        for (_, task) in self.graceful.iter().chain(&self.watchers) {
            task.abort();
        }
        self.ctx.set_leader(false);
    }

    /// Resolves when the first task ends (before shutdown, that is a failure): its name and why.
    /// The finished task is removed, so [`RunningController::stop`] can still run.
    async fn first_exit(&mut self) -> (&'static str, String) {
        let names: Vec<&'static str> = self
            .graceful
            .iter()
            .chain(&self.watchers)
            .map(|(name, _)| *name)
            .collect();
        let tasks = self
            .graceful
            .iter_mut()
            .chain(self.watchers.iter_mut())
            .map(|(_, task)| task);
        let (outcome, index, _) = futures::future::select_all(tasks).await;
        let name = names.get(index).copied().unwrap_or("task");
        if index < self.graceful.len() {
            self.graceful.remove(index);
        } else if let Some(i) = index.checked_sub(self.graceful.len()) {
            self.watchers.remove(i);
        }
        let why = match outcome {
            Ok(()) => format!("{name} ended unexpectedly"),
            Err(err) if err.is_panic() => {
                let payload = err.into_panic();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-text panic".into());
                format!("{name} panicked: {message}")
            }
            Err(_) => format!("{name} was cancelled"),
        };
        (name, why)
    }
}

/// Runs `running` until `stop` resolves (then stops gracefully, `Ok`), or until any of its
/// tasks ends or panics: then the replica is marked failed (`/healthz` fails), stopped (the
/// leader releases its Lease; at most [`FAILED_STOP_TIMEOUT`], then everything is aborted) and
/// an error naming the task is returned, so the process exits non-zero.
pub async fn run_until(
    mut running: RunningController,
    stop: impl std::future::Future<Output = ()>,
) -> crate::Result<()> {
    let failed = tokio::select! {
        () = stop => None,
        (_, why) = running.first_exit() => Some(why),
    };
    let Some(why) = failed else {
        running.stop().await;
        return Ok(());
    };
    tracing::error!(reason = %why, "a controller task failed; stopping this replica");
    let ctx = running.ctx.clone();
    ctx.mark_failed(why.clone());
    let handles: Vec<tokio::task::AbortHandle> = running
        .graceful
        .iter()
        .map(|(_, task)| task.abort_handle())
        .collect();
    if tokio::time::timeout(FAILED_STOP_TIMEOUT, running.stop())
        .await
        .is_err()
    {
        for handle in handles {
            handle.abort();
        }
    }
    ctx.set_leader(false);
    Err(crate::Error::ControllerFailed(why))
}

/// Resolves on SIGTERM (Kubernetes' stop signal) or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("received SIGTERM, shutting down"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("received interrupt, shutting down"),
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops the controller");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs a replica (with the provider's background tasks) until SIGTERM/Ctrl-C, then shuts
/// down gracefully; returns an error when a controller task failed first (see [`run_until`]).
pub async fn run_until_signal(
    ctx: Arc<Context>,
    batcher: Batcher,
    provider_tasks: Vec<ProviderTask>,
) -> crate::Result<()> {
    run_until_signal_with(ctx, batcher, provider_tasks, None).await
}

/// [`run_until_signal`] with health probes the caller already serves (see
/// [`server::Probes`]). Returns an error when a controller task failed (see [`run_until`]).
pub async fn run_until_signal_with(
    ctx: Arc<Context>,
    batcher: Batcher,
    provider_tasks: Vec<ProviderTask>,
    probes: Option<Arc<server::Probes>>,
) -> crate::Result<()> {
    let running = RunningController::start(
        ctx,
        batcher,
        Options {
            serve_http: true,
            loopback_only: false,
            probes,
            provider_tasks,
        },
    )
    .await?;
    run_until(running, shutdown_signal()).await
}
