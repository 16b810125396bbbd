//! Batching of provisioning triggers, upstream's `Batcher`: the window opens on the first
//! trigger, stays open while new triggers keep arriving within the idle duration, and closes at
//! the max duration at the latest. A trigger already in the window (same UID) does not extend
//! it. All timing uses tokio time, so paused-clock tests run in virtual time.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

/// The sending side: anything that may need capacity triggers with its UID.
#[derive(Clone, Debug)]
pub struct Trigger {
    tx: mpsc::UnboundedSender<String>,
}

impl Trigger {
    pub fn trigger(&self, uid: impl Into<String>) {
        // The batcher outlives every sender in practice; a closed channel only means shutdown.
        let _ = self.tx.send(uid.into());
    }
}

/// One closed batch window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchWindow {
    /// Distinct trigger UIDs seen in the window.
    pub triggers: BTreeSet<String>,
    pub opened: Instant,
    pub closed: Instant,
}

/// The receiving side, owned by the provisioner loop.
#[derive(Debug)]
pub struct Batcher {
    rx: mpsc::UnboundedReceiver<String>,
    idle: Duration,
    max: Duration,
}

impl Batcher {
    pub fn new(idle: Duration, max: Duration) -> (Trigger, Batcher) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Trigger { tx }, Batcher { rx, idle, max })
    }

    /// Waits for the first trigger, then for the window to close. `None` once every [`Trigger`]
    /// is dropped.
    pub async fn wait(&mut self) -> Option<BatchWindow> {
        let first = self.rx.recv().await?;
        let opened = Instant::now();
        let max_deadline = opened + self.max;
        let mut idle_deadline = opened + self.idle;
        let mut triggers = BTreeSet::from([first]);
        loop {
            let deadline = idle_deadline.min(max_deadline);
            tokio::select! {
                received = self.rx.recv() => match received {
                    Some(uid) => {
                        if triggers.insert(uid) {
                            idle_deadline = Instant::now() + self.idle;
                        }
                    }
                    None => {
                        // Every sender is gone (shutdown); still honour the window's timing.
                        sleep_until(deadline).await;
                        break;
                    }
                },
                () = sleep_until(deadline) => break,
            }
        }
        Some(BatchWindow {
            triggers,
            opened,
            closed: Instant::now(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(10);

    async fn trigger_at(trigger: Trigger, times_ms: Vec<(u64, &'static str)>) {
        let start = Instant::now();
        for (at, uid) in times_ms {
            sleep_until(start + Duration::from_millis(at)).await;
            trigger.trigger(uid);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn single_trigger_closes_after_idle() {
        let (trigger, mut batcher) = Batcher::new(IDLE, MAX);
        trigger.trigger("a");
        let window = batcher.wait().await.unwrap();
        assert_eq!(window.closed - window.opened, IDLE);
        assert_eq!(window.triggers.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn same_uid_does_not_extend_the_window() {
        let (trigger, mut batcher) = Batcher::new(IDLE, MAX);
        tokio::spawn(trigger_at(trigger, vec![(0, "a"), (500, "a"), (900, "a")]));
        let window = batcher.wait().await.unwrap();
        assert_eq!(window.closed - window.opened, IDLE);
    }

    #[tokio::test(start_paused = true)]
    async fn new_uids_extend_the_window() {
        let (trigger, mut batcher) = Batcher::new(IDLE, MAX);
        tokio::spawn(trigger_at(trigger, vec![(0, "a"), (500, "b"), (1200, "c")]));
        let window = batcher.wait().await.unwrap();
        assert_eq!(window.closed - window.opened, Duration::from_millis(2200));
        assert_eq!(window.triggers.len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn window_is_capped_at_max_duration() {
        let (trigger, mut batcher) = Batcher::new(IDLE, MAX);
        let steady: Vec<(u64, &'static str)> = (0..40u64)
            .map(|i| {
                (
                    i * 500,
                    ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"][(i % 10) as usize],
                )
            })
            .collect();
        // Distinct UIDs only for the first 10 triggers; after that the same pods re-trigger.
        tokio::spawn(trigger_at(trigger.clone(), steady));
        let window = batcher.wait().await.unwrap();
        assert!(window.closed - window.opened <= MAX);
        // Re-triggers of the same ten pods stopped extending it: it closed 1s after the 10th.
        assert_eq!(window.closed - window.opened, Duration::from_millis(5500));

        let (trigger, mut batcher) = Batcher::new(IDLE, MAX);
        let unique: Vec<(u64, &'static str)> = (0..40u64)
            .map(|i| (i * 500, leak(format!("pod-{i}"))))
            .collect();
        tokio::spawn(trigger_at(trigger, unique));
        let window = batcher.wait().await.unwrap();
        assert_eq!(
            window.closed - window.opened,
            MAX,
            "never idle, so the max closes it"
        );
    }

    fn leak(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }

    #[tokio::test(start_paused = true)]
    async fn returns_none_when_all_triggers_are_gone() {
        let (trigger, mut batcher) = Batcher::new(IDLE, MAX);
        drop(trigger);
        assert!(batcher.wait().await.is_none());
    }
}
