//! Polling until a condition holds, the one wait of the real-cluster tests.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// Polls `check` every 250 ms until it returns `Some`, or fails after `limit` with `what`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                after: limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
