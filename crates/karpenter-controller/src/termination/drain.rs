//! Draining a node: which pods to evict, in which order and when to force-delete them is pure
//! and lives in [`karpenter_core::drain`]; this module adds the per-pod
//! eviction retry backoff the termination controller keeps between passes.

use jiff::{SignedDuration, Timestamp};

use crate::backoff::{Backoff, BackoffPolicy};

/// Eviction retry backoff per pod (upstream 100 ms → 10 s).
pub const EVICTION_BACKOFF_MIN: SignedDuration = SignedDuration::from_millis(100);
pub const EVICTION_BACKOFF_MAX: SignedDuration = SignedDuration::from_secs(10);

/// Per-pod eviction retry backoff, keyed by `namespace/name` + UID: 100 ms → 10 s.
#[derive(Debug)]
pub struct EvictionBackoff(Backoff<(String, String)>);

impl Default for EvictionBackoff {
    fn default() -> Self {
        EvictionBackoff(Backoff::new(BackoffPolicy {
            base: EVICTION_BACKOFF_MIN,
            cap: EVICTION_BACKOFF_MAX,
        }))
    }
}

fn backoff_key(key: &str, uid: &str) -> (String, String) {
    (key.to_string(), uid.to_string())
}

impl EvictionBackoff {
    /// Whether the pod may be tried at `now`.
    pub fn ready(&self, key: &str, uid: &str, now: Timestamp) -> bool {
        self.0.ready(&backoff_key(key, uid), now)
    }

    /// Records a failed attempt: the next one waits twice as long as the last (capped).
    pub fn failed(&mut self, key: &str, uid: &str, now: Timestamp) {
        self.0.failed(backoff_key(key, uid), now);
    }

    pub fn forget(&mut self, key: &str, uid: &str) {
        self.0.succeeded(&backoff_key(key, uid));
    }

    /// Drops entries for pods no longer present.
    pub fn retain(&mut self, live: impl Fn(&str, &str) -> bool) {
        self.0.retain(|(key, uid)| live(key, uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_704_067_200).unwrap()
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut b = EvictionBackoff::default();
        b.failed("default/a", "u", t0());
        assert!(!b.ready("default/a", "u", t0()));
        assert!(b.ready(
            "default/a",
            "u",
            t0().checked_add(SignedDuration::from_millis(100)).unwrap()
        ));
        assert!(
            b.ready("default/a", "other-uid", t0()),
            "a new pod with the same name starts fresh"
        );
        for _ in 0..10 {
            b.failed("default/a", "u", t0());
        }
        assert!(b.ready(
            "default/a",
            "u",
            t0().checked_add(EVICTION_BACKOFF_MAX).unwrap()
        ));
        b.forget("default/a", "u");
        assert!(b.ready("default/a", "u", t0()));
    }
}
