//! One bound for every Kubernetes and cloud call.
//!
//! kube's HTTP client has connect/read timeouts only when it is built from a `Config`, and the
//! in-process test client has none; a call that is never answered would then hang its loop for
//! ever. Every call site wraps its future in [`api`] (or [`within`] / [`within_or`] with an
//! explicit limit, e.g. the leader's renew deadline, or [`CLOUD_CALL_TIMEOUT`] for cloud calls).
//! A timeout surfaces as the call's own error type, so callers keep one error path: for kube, a
//! `kube::Error::Service` carrying [`TimedOut`] (the variant kube itself uses for client-side
//! timeouts).
//!
//! The list of call sites and their limits is in `docs/controller.md` ("Timeouts and retries").

use std::future::Future;
use std::time::Duration;

/// Limit of one Kubernetes API request (get, list, create, update, patch, delete, eviction).
pub const API_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Limit of one cloud provider call (create may wait for the instance to be accepted).
pub const CLOUD_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The error a call that got no answer in time fails with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no answer within {0:?}")]
pub struct TimedOut(pub Duration);

/// Error types a timed-out call can be reported as.
pub trait TimeoutError {
    fn timed_out(limit: Duration) -> Self;
}

impl TimeoutError for kube::Error {
    fn timed_out(limit: Duration) -> Self {
        kube::Error::Service(Box::new(TimedOut(limit)))
    }
}

/// Runs `call`, failing with `on_timeout(TimedOut(limit))` when it has not finished within
/// `limit` (the call's future is dropped, so nothing of it runs afterwards on this side).
pub async fn within_or<T, E>(
    limit: Duration,
    call: impl Future<Output = Result<T, E>>,
    on_timeout: impl FnOnce(TimedOut) -> E,
) -> Result<T, E> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => Err(on_timeout(TimedOut(limit))),
    }
}

/// [`within_or`] for error types that know how to say "timed out".
pub async fn within<T, E: TimeoutError>(
    limit: Duration,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    within_or(limit, call, |TimedOut(limit)| E::timed_out(limit)).await
}

/// A Kubernetes API call bounded by [`API_CALL_TIMEOUT`].
pub async fn api<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, kube::Error> {
    within(API_CALL_TIMEOUT, call).await
}

/// Whether a kube error is one of our timeouts.
pub fn is_timeout(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Service(source) if source.downcast_ref::<TimedOut>().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_fails_after_the_limit() {
        let started = tokio::time::Instant::now();
        let result: Result<(), kube::Error> = api(std::future::pending()).await;
        let err = result.unwrap_err();
        assert!(is_timeout(&err), "{err}");
        assert_eq!(started.elapsed(), API_CALL_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn within_or_reports_the_limit_in_the_callers_error() {
        let started = tokio::time::Instant::now();
        let err = within_or::<(), String>(CLOUD_CALL_TIMEOUT, std::future::pending(), |t| {
            t.to_string()
        })
        .await
        .unwrap_err();
        assert_eq!(err, "no answer within 60s");
        assert_eq!(started.elapsed(), CLOUD_CALL_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_passes_through() {
        let ok: Result<u8, kube::Error> = api(async { Ok(7) }).await;
        assert_eq!(ok.unwrap(), 7);
        let other = api::<()>(async { Err(crate::errors::api_error(500)) })
            .await
            .unwrap_err();
        assert!(!is_timeout(&other));
    }
}
