//! HTTP endpoints: `/metrics` on METRICS_PORT, `/healthz` and `/readyz` on HEALTH_PROBE_PORT.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::context::Context;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// OpenMetrics, unless the client asks for Prometheus's classic text format only (an `Accept`
/// naming `text/plain` and not OpenMetrics, as `promtool` and old scrapers send).
async fn metrics(
    State(ctx): State<Arc<Context>>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    refresh_gauges(&ctx);
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if accept.contains("text/plain") && !accept.contains("application/openmetrics-text") {
        (
            [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
            ctx.metrics.encode_text(),
        )
    } else {
        ([(header::CONTENT_TYPE, OPENMETRICS)], ctx.metrics.encode())
    }
}

/// Gauges derived from the state, computed at scrape time (see [`crate::metrics::scrape`]).
pub fn refresh_gauges(ctx: &Context) {
    let now = ctx.now();
    let state = ctx.state.read();
    crate::metrics::scrape::refresh(
        &ctx.metrics,
        &state,
        now,
        ctx.is_leader(),
        &ctx.settings.leader_election_name,
    );
}

/// What the health probes look at. Served before the controller exists (the binary starts the
/// probe server before its first API call, so a silent API server cannot keep `/healthz` from
/// answering); [`Probes::attach`] hands it the running replica's context.
#[derive(Debug, Default)]
pub struct Probes {
    ctx: std::sync::OnceLock<Arc<Context>>,
}

impl Probes {
    pub fn new() -> Arc<Self> {
        Arc::new(Probes::default())
    }

    /// From now on the probes report on this replica. Only the first call counts.
    pub fn attach(&self, ctx: Arc<Context>) {
        let _ = self.ctx.set(ctx);
    }

    /// Probes already attached to `ctx`.
    pub fn for_context(ctx: Arc<Context>) -> Arc<Self> {
        let probes = Probes::new();
        probes.attach(ctx);
        probes
    }
}

/// Live unless a controller loop died (supervision marks the context failed; Kubernetes then
/// restarts the pod). Starting up counts as live.
async fn healthz(State(probes): State<Arc<Probes>>) -> (StatusCode, String) {
    match probes.ctx.get().and_then(|ctx| ctx.failure()) {
        Some(why) => (StatusCode::INTERNAL_SERVER_ERROR, format!("failed: {why}")),
        None => (StatusCode::OK, "ok".into()),
    }
}

/// Ready once the state has listed everything (followers too: they must be able to take over);
/// not while starting or after a failure.
async fn readyz(State(probes): State<Arc<Probes>>) -> (StatusCode, String) {
    let Some(ctx) = probes.ctx.get() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: the controller is not running yet".into(),
        );
    };
    if let Some(why) = ctx.failure() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("failed: {why}"));
    }
    let state = ctx.state.read();
    if state.synced() {
        (StatusCode::OK, "ok".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "waiting for cluster state sync: {:?}",
                state.unsynced_kinds()
            ),
        )
    }
}

pub fn metrics_router(ctx: Arc<Context>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(ctx)
}

pub fn health_router(probes: Arc<Probes>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(probes)
}

/// Binds `address` (port 0 picks a free one) and serves `router` until `shutdown` turns true.
/// Returns the bound address and the serving task.
pub async fn serve(
    what: &'static str,
    address: SocketAddr,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) -> crate::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let serve_error = |source| crate::Error::Serve {
        what,
        address: address.to_string(),
        source,
    };
    let listener = TcpListener::bind(address).await.map_err(serve_error)?;
    let bound = listener.local_addr().map_err(serve_error)?;
    let task = tokio::spawn(async move {
        let stop = async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        };
        if let Err(err) = axum::serve(listener, router)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::error!(what, error = %err, "http server failed");
        }
    });
    Ok((bound, task))
}
