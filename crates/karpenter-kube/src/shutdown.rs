//! The shutdown signal every long-running loop selects on.

use tokio::sync::watch;

/// Resolves once `shutdown` turns true (or its sender is gone). Returns `()` so `select!` never
/// holds the channel's read guard across the other branches' awaits.
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolves_on_true_and_when_the_sender_is_gone() {
        let (tx, mut rx) = watch::channel(false);
        let waiting = tokio::spawn(async move { stopped(&mut rx).await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        tx.send_replace(true);
        waiting.await.unwrap();

        let (tx, mut rx) = watch::channel(false);
        drop(tx);
        stopped(&mut rx).await;
    }
}
