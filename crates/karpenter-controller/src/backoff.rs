//! Per-object exponential backoff: a failed object waits 1 s, 2 s, 4 s, ... (capped) before its
//! next attempt; a success forgets it. Pure (the caller passes `now` from the context's
//! `Clock`), so loops on virtual time and unit tests drive it alike. Used by the NodeClaim
//! lifecycle and node termination loops (per object) and the drain (per pod eviction).

use std::collections::HashMap;
use std::hash::Hash;

use jiff::{SignedDuration, Timestamp};

/// Delays after consecutive failures: `base`, `2·base`, `4·base`, ... up to `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    pub base: SignedDuration,
    pub cap: SignedDuration,
}

impl BackoffPolicy {
    /// Reconcile retries: 1 s → 5 min (controller-runtime's per-item limiter uses 5 ms → 1000 s;
    /// our loops already poll every second, so the first retry waits one period).
    pub const RECONCILE: BackoffPolicy = BackoffPolicy {
        base: SignedDuration::from_secs(1),
        cap: SignedDuration::from_secs(300),
    };

    /// The delay after `failures` consecutive failures (≥ 1).
    pub fn delay(&self, failures: u32) -> SignedDuration {
        let doublings = failures.saturating_sub(1).min(30);
        self.base
            .checked_mul(1i32 << doublings)
            .map_or(self.cap, |d| d.min(self.cap))
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    next: Timestamp,
}

/// Backoff state of many objects, keyed by `K` (a name or UID).
#[derive(Debug)]
pub struct Backoff<K> {
    policy: BackoffPolicy,
    entries: HashMap<K, Entry>,
}

impl<K: Eq + Hash> Backoff<K> {
    pub fn new(policy: BackoffPolicy) -> Self {
        Backoff {
            policy,
            entries: HashMap::new(),
        }
    }

    /// Whether `key` may be tried at `now` (never failed, or its delay is over).
    pub fn ready<Q>(&self, key: &Q, now: Timestamp) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.entries.get(key).is_none_or(|e| now >= e.next)
    }

    /// Records a failure at `now`; returns the delay before the next attempt.
    pub fn failed(&mut self, key: K, now: Timestamp) -> SignedDuration {
        let entry = self.entries.entry(key).or_insert(Entry {
            failures: 0,
            next: now,
        });
        entry.failures = entry.failures.saturating_add(1);
        let delay = self.policy.delay(entry.failures);
        entry.next = now.checked_add(delay).unwrap_or(now);
        delay
    }

    /// Records a success: the next failure starts from `base` again.
    pub fn succeeded(&mut self, key: &K) {
        self.entries.remove(key);
    }

    /// Consecutive failures of `key` so far.
    pub fn failures(&self, key: &K) -> u32 {
        self.entries.get(key).map_or(0, |e| e.failures)
    }

    /// Forgets every key `keep` rejects (objects that are gone).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.entries.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_reset_on_success() {
        let policy = BackoffPolicy::RECONCILE;
        let delays: Vec<i64> = (1..=11).map(|n| policy.delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(policy.delay(u32::MAX), policy.cap, "no overflow");

        let t0 = Timestamp::from_second(1_704_067_200).unwrap();
        let at = |s: i64| t0.checked_add(SignedDuration::from_secs(s)).unwrap();
        let mut backoff = Backoff::new(policy);
        assert!(backoff.ready(&"a", t0));
        assert_eq!(backoff.failed("a", t0), SignedDuration::from_secs(1));
        assert_eq!(backoff.failed("a", t0), SignedDuration::from_secs(2));
        assert!(!backoff.ready(&"a", at(1)));
        assert!(backoff.ready(&"a", at(2)));
        assert!(backoff.ready(&"b", t0), "keys are independent");
        backoff.succeeded(&"a");
        assert_eq!(backoff.failures(&"a"), 0);
        assert_eq!(backoff.failed("a", t0), SignedDuration::from_secs(1));
        backoff.retain(|k| *k != "a");
        assert!(backoff.ready(&"a", t0));
    }
}
