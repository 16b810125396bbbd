//! Leader election on a `coordination.k8s.io/v1` Lease (client-go's algorithm, ~150 lines).
//!
//! Every replica runs the watchers and keeps its state warm; only the leader writes. A replica
//! takes the lease when it is free (no holder, e.g. released on shutdown) or when the holder
//! has not renewed it for `lease_duration`, measured on this replica's own clock from when it
//! last saw the record change (so clock skew between replicas does not matter). Updates use the
//! Lease's resourceVersion, so two replicas can never both win the same round. A leader that
//! cannot renew within `renew_deadline` steps down, also when the API server does not answer
//! at all (see [`run`]). Every call is bounded by [`crate::timeouts`].

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use karpenter_core::clock::Clock;
use kube::{Api, ResourceExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::context::Context;
use karpenter_kube::{is_conflict, is_not_found};

use crate::timeouts::{self, TimeoutError};

/// Lease timing, upstream/client-go defaults: 15 s lease, 10 s renew deadline, 2 s retry.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseConfig {
    pub fn from_settings(settings: &crate::Settings) -> Self {
        LeaseConfig {
            name: settings.leader_election_name.clone(),
            namespace: settings.leader_election_namespace.clone(),
            identity: settings.identity.clone(),
            lease_duration: settings.lease_duration,
            renew_deadline: settings.renew_deadline,
            retry_period: settings.retry_period,
        }
    }
}

/// What this replica last saw in the Lease, and when (on its own clock).
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    at: Instant,
}

/// One replica's side of the election.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    clock: Arc<dyn Clock>,
    observed: Option<Observed>,
}

impl LeaderElector {
    pub fn new(client: kube::Client, config: LeaseConfig, clock: Arc<dyn Clock>) -> Self {
        let api = Api::namespaced(client, &config.namespace);
        LeaderElector {
            api,
            config,
            clock,
            observed: None,
        }
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs())
            .unwrap_or(i32::MAX)
            .max(1)
    }

    /// One round: `Ok(true)` when this replica holds the lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(self.clock.now());
        let existing = match timeouts::api(self.api.get(&self.config.name)).await {
            Ok(lease) => lease,
            Err(err) if is_not_found(&err) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.config.identity.clone()),
                        lease_duration_seconds: Some(self.lease_seconds()),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                return match timeouts::api(
                    self.api
                        .create(&karpenter_kube::identity::post_params(), &lease),
                )
                .await
                {
                    Ok(_) => Ok(true),
                    Err(err) if is_conflict(&err) => Ok(false),
                    Err(err) => Err(err),
                };
            }
            Err(err) => return Err(err),
        };
        let spec = existing.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let seen = Observed {
            holder: holder.clone(),
            renew_time: spec.renew_time.clone(),
            at: Instant::now(),
        };
        if self
            .observed
            .as_ref()
            .is_none_or(|o| o.holder != seen.holder || o.renew_time != seen.renew_time)
        {
            self.observed = Some(seen);
        }
        let held_by_me = holder.as_deref() == Some(self.config.identity.as_str());
        let expired = self
            .observed
            .as_ref()
            .is_none_or(|o| o.at.elapsed() >= self.config.lease_duration);
        if holder.is_some() && !held_by_me && !expired {
            return Ok(false);
        }
        let mut lease = existing;
        let mut new_spec = spec.clone();
        if !held_by_me {
            new_spec.acquire_time = Some(now.clone());
            new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        new_spec.holder_identity = Some(self.config.identity.clone());
        new_spec.lease_duration_seconds = Some(self.lease_seconds());
        new_spec.renew_time = Some(now);
        lease.spec = Some(new_spec);
        match timeouts::api(self.api.replace(
            &self.config.name,
            &karpenter_kube::identity::post_params(),
            &lease,
        ))
        .await
        {
            Ok(updated) => {
                let spec = updated.spec.unwrap_or_default();
                self.observed = Some(Observed {
                    holder: spec.holder_identity,
                    renew_time: spec.renew_time,
                    at: Instant::now(),
                });
                Ok(true)
            }
            Err(err) if is_conflict(&err) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Gives the lease up (on graceful shutdown) so a follower takes over at its next retry.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let mut lease = timeouts::api(self.api.get(&self.config.name)).await?;
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(self.clock.now()));
        timeouts::api(self.api.replace(
            &lease.name_any(),
            &karpenter_kube::identity::post_params(),
            &lease,
        ))
        .await
        .map(|_| ())
    }
}

/// Runs the election for this replica until `shutdown`, flipping [`Context::is_leader`] and
/// opening or closing the write term behind [`Context::leader`] (see [`crate::writes`]). With
/// leader election disabled this replica simply leads.
///
/// Never two writers, also when the API server hangs instead of failing: a leader's renewal
/// round must finish before `renew_deadline`, counted from when its last successful renewal was
/// *sent* (the server applied it no earlier, so no follower can see the lease expire before
/// that + `lease_duration`). A round still unanswered at that moment is abandoned and the
/// replica steps down at once, `lease_duration - renew_deadline` (5 s by default) before any
/// follower may take over.
pub async fn run(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    if ctx.settings.disable_leader_election {
        ctx.set_leader(true);
        let _ = shutdown.wait_for(|stop| *stop).await;
        return;
    }
    let config = LeaseConfig::from_settings(&ctx.settings);
    let mut elector =
        LeaderElector::new(ctx.raw_client().clone(), config.clone(), ctx.clock.clone());
    // When the last successful round was sent; leading is only valid until + renew_deadline.
    let mut renewed_at: Option<Instant> = None;
    loop {
        let round_started = Instant::now();
        let deadline = renewed_at
            .filter(|_| ctx.is_leader())
            .map(|at| at + config.renew_deadline);
        let round = async {
            match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, elector.try_acquire_or_renew())
                    .await
                    .unwrap_or_else(|_| Err(kube::Error::timed_out(config.renew_deadline))),
                None => elector.try_acquire_or_renew().await,
            }
        };
        let result = tokio::select! {
            result = round => Some(result),
            _ = shutdown.wait_for(|stop| *stop) => None,
        };
        let Some(result) = result else { break };
        match result {
            Ok(true) => {
                renewed_at = Some(round_started);
                if !ctx.is_leader() {
                    tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "successfully acquired lease");
                    ctx.set_leader(true);
                }
            }
            Ok(false) => {
                if ctx.is_leader() {
                    tracing::warn!(identity = %config.identity, "lost leader lease");
                    ctx.set_leader(false);
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "failed to acquire or renew leader lease");
                if ctx.is_leader() && deadline.is_none_or(|d| Instant::now() >= d) {
                    tracing::warn!(identity = %config.identity, "could not renew the leader lease before the renew deadline, stepping down");
                    ctx.set_leader(false);
                }
            }
        }
        // While leading, never sleep past the renew deadline.
        let mut next = Instant::now() + config.retry_period;
        if let (true, Some(at)) = (ctx.is_leader(), renewed_at) {
            next = next.min(at + config.renew_deadline);
        }
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            _ = shutdown.wait_for(|stop| *stop) => break,
        }
    }
    if ctx.is_leader() {
        ctx.set_leader(false);
        match elector.release().await {
            Ok(()) => tracing::info!(identity = %config.identity, "released leader lease"),
            Err(err) => tracing::warn!(error = %err, "failed to release leader lease"),
        }
    }
}
