//! Wiring: start every task of a controller replica, stop them gracefully.

use std::fmt::Debug;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::{NodeClaim, NodePool};
use kube::{Api, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::context::Context;
use crate::provisioning::Batcher;
use crate::sim_kubelet::SimCloud;
use crate::state::reflector::reflect;
use crate::state::{Tracked, pod};
use crate::{leader, nodeclaim, nodepool, provisioning, server, termination};

/// A running replica. Drop-safe, but call [`RunningController::stop`] for a graceful shutdown
/// (the leader releases its lease so a follower takes over at once).
pub struct RunningController {
    pub ctx: Arc<Context>,
    /// Bound addresses (`None` when the server is disabled with port 0 → see [`Options`]).
    pub metrics_address: Option<SocketAddr>,
    pub health_address: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    graceful: Vec<JoinHandle<()>>,
    watchers: Vec<JoinHandle<()>>,
}

/// How to start a replica.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Serve `/metrics`, `/healthz`, `/readyz` (tests usually don't).
    pub serve_http: bool,
    /// Bind on 127.0.0.1 instead of 0.0.0.0 (tests).
    pub loopback_only: bool,
}

fn spawn_reflector<K>(
    ctx: &Arc<Context>,
    on_change: impl Fn(&Context, &K) + Send + Sync + 'static,
) -> JoinHandle<()>
where
    K: Tracked + DeserializeOwned + Debug + kube::Resource<DynamicType = ()>,
    K::Scope: Send,
{
    let api: Api<K> = Api::all(ctx.client.clone());
    let state = ctx.state.clone();
    let hook_ctx = ctx.clone();
    tokio::spawn(async move { reflect(api, state, move |obj| on_change(&hook_ctx, obj)).await })
}

fn wake_nodepools<K>(ctx: &Context, _: &K) {
    ctx.nodepools_changed.notify_one();
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
    /// Starts watchers, leader election, the provisioner, the NodePool controllers and
    /// (optionally) the HTTP servers.
    pub async fn start(
        ctx: Arc<Context>,
        batcher: Batcher,
        options: Options,
    ) -> crate::Result<Self> {
        Self::start_with_sim(ctx, batcher, options, None).await
    }

    /// [`RunningController::start`], plus the sim cloud's kubelet when `sim` is given (its
    /// provider must be `ctx.cloud`): the ledger follows this replica's leadership and the
    /// kubelet writes only while it leads.
    pub async fn start_with_sim(
        ctx: Arc<Context>,
        batcher: Batcher,
        options: Options,
        sim: Option<SimCloud>,
    ) -> crate::Result<Self> {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let sim_task = match sim {
            Some(sim) => {
                // Before the election starts, so no leadership change goes unnoticed.
                sim.provider.follow_leadership(ctx.leadership()).await;
                Some(tokio::spawn(sim.run(ctx.clone(), shutdown_rx.clone())))
            }
            None => None,
        };
        let watchers = vec![
            spawn_reflector::<Pod>(&ctx, |ctx, p| {
                if pod::is_provisionable(p) && p.metadata.deletion_timestamp.is_none() {
                    ctx.provisioning_trigger
                        .trigger(p.uid().unwrap_or_else(|| pod::pod_key(p)));
                }
            }),
            spawn_reflector::<Node>(&ctx, on_capacity_change),
            spawn_reflector::<NodeClaim>(&ctx, on_capacity_change),
            spawn_reflector::<NodePool>(&ctx, wake_nodepools),
            spawn_reflector::<EC2NodeClass>(&ctx, wake_nodepools),
            spawn_reflector::<DaemonSet>(&ctx, ignore),
            spawn_reflector::<PodDisruptionBudget>(&ctx, ignore),
            spawn_reflector::<PersistentVolumeClaim>(&ctx, ignore),
            spawn_reflector::<PersistentVolume>(&ctx, ignore),
            spawn_reflector::<StorageClass>(&ctx, ignore),
        ];
        let mut graceful = vec![
            tokio::spawn(leader::run(ctx.clone(), shutdown_rx.clone())),
            tokio::spawn(provisioning::run(ctx.clone(), batcher, shutdown_rx.clone())),
            tokio::spawn(nodepool::run(ctx.clone(), shutdown_rx.clone())),
            tokio::spawn(nodeclaim::run(ctx.clone(), shutdown_rx.clone())),
            tokio::spawn(termination::run(ctx.clone(), shutdown_rx.clone())),
        ];
        graceful.extend(sim_task);
        let (mut metrics_address, mut health_address) = (None, None);
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
            graceful.push(task);
            let (addr, task) = server::serve(
                "health probes",
                SocketAddr::from((host, ctx.settings.health_probe_port)),
                server::health_router(ctx.clone()),
                shutdown_rx,
            )
            .await?;
            health_address = Some(addr);
            graceful.push(task);
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
        for task in self.graceful {
            let _ = task.await;
        }
        for task in &self.watchers {
            task.abort();
        }
        tracing::info!("stopped controllers");
    }

    /// Simulates a crash: everything stops at once, nothing is released.
    pub fn abort(self) {
        for task in self.graceful.iter().chain(&self.watchers) {
            task.abort();
        }
        self.ctx.set_leader(false);
    }
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

/// Runs a replica (with the sim cloud's kubelet when given) until SIGTERM/Ctrl-C, then shuts
/// down gracefully.
pub async fn run_until_signal(
    ctx: Arc<Context>,
    batcher: Batcher,
    sim: Option<SimCloud>,
) -> crate::Result<()> {
    let running = RunningController::start_with_sim(
        ctx,
        batcher,
        Options {
            serve_http: true,
            loopback_only: false,
        },
        sim,
    )
    .await?;
    shutdown_signal().await;
    running.stop().await;
    Ok(())
}
