//! One bound for every Kubernetes and cloud call.
//!
//! kube's HTTP client has connect/read timeouts only when it is built from a `Config`, and the
//! in-process test client has none; a call that is never answered would then hang its loop for
//! ever. Every call site wraps its future in [`api`] or [`cloud`] (or [`within`] with an explicit
//! limit, e.g. the leader's renew deadline). A timeout surfaces as the call's own error type, so
//! callers keep one error path: a `kube::Error::Service` carrying [`TimedOut`] (the variant kube
//! itself uses for client-side timeouts) or `CloudError::Other`, which callers retry with backoff.
//!
//! The list of call sites and their limits is in `docs/controller.md` ("Timeouts and retries").

use std::future::Future;
use std::time::Duration;

use karpenter_core::cloud_provider::CloudError;

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

impl TimeoutError for CloudError {
    fn timed_out(limit: Duration) -> Self {
        CloudError::Other(TimedOut(limit).to_string())
    }
}

/// Runs `call`, failing with `E::timed_out(limit)` when it has not finished within `limit`
/// (the call's future is dropped, so nothing of it runs afterwards on this side).
pub async fn within<T, E: TimeoutError>(
    limit: Duration,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => Err(E::timed_out(limit)),
    }
}

/// A Kubernetes API call bounded by [`API_CALL_TIMEOUT`].
pub async fn api<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, kube::Error> {
    within(API_CALL_TIMEOUT, call).await
}

/// A cloud provider call bounded by [`CLOUD_CALL_TIMEOUT`].
pub async fn cloud<T>(call: impl Future<Output = Result<T, CloudError>>) -> Result<T, CloudError> {
    within(CLOUD_CALL_TIMEOUT, call).await
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
        let cloud_err = cloud::<()>(std::future::pending()).await.unwrap_err();
        assert!(matches!(cloud_err, CloudError::Other(m) if m.contains("no answer within")));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_passes_through() {
        let ok: Result<u8, kube::Error> = api(async { Ok(7) }).await;
        assert_eq!(ok.unwrap(), 7);
    }
}
