//! One bound for every Kubernetes and cloud call: the limits and the kube side live in
//! [`karpenter_kube::timeouts`] (shared with the providers' own loops); this module adds the
//! cloud side, where a call that got no answer in time fails as [`CloudError::Other`] carrying
//! [`TimedOut`] as its source, which callers retry with backoff ([`CloudError::is_retryable`]).
//!
//! The list of call sites and their limits is in `docs/controller.md` ("Timeouts and retries").

use std::future::Future;
use std::sync::Arc;

use karpenter_core::cloud_provider::CloudError;
pub use karpenter_kube::timeouts::{
    API_CALL_TIMEOUT, CLOUD_CALL_TIMEOUT, TimedOut, TimeoutError, api, is_timeout, within,
    within_or,
};

/// A cloud provider call bounded by [`CLOUD_CALL_TIMEOUT`].
pub async fn cloud<T>(call: impl Future<Output = Result<T, CloudError>>) -> Result<T, CloudError> {
    within_or(CLOUD_CALL_TIMEOUT, call, |timed_out| CloudError::Other {
        message: timed_out.to_string(),
        source: Some(Arc::new(timed_out)),
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_cloud_call_that_never_answers_fails_retryably_after_the_limit() {
        let started = tokio::time::Instant::now();
        let err = cloud::<()>(std::future::pending()).await.unwrap_err();
        assert_eq!(started.elapsed(), CLOUD_CALL_TIMEOUT);
        assert!(err.is_retryable(), "{err}");
        let source = std::error::Error::source(&err).expect("the timeout is kept as the source");
        assert_eq!(
            source.downcast_ref::<TimedOut>(),
            Some(&TimedOut(CLOUD_CALL_TIMEOUT))
        );
    }
}
