//! Offerings that recently failed with insufficient capacity (reference §4.6): the key is
//! (capacity type, instance type, zone); a mark lasts [`UNAVAILABLE_OFFERINGS_TTL`] of the
//! injected clock, so launches (and the scheduler, through the provider's offerings) go elsewhere
//! meanwhile and come back once EC2 may have capacity again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::{SignedDuration, Timestamp};
use karpenter_core::clock::Clock;

/// Upstream's `UnavailableOfferingsTTL`.
pub const UNAVAILABLE_OFFERINGS_TTL: SignedDuration = SignedDuration::from_secs(180);

/// One offering: what CreateFleet's overrides and errors name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OfferingKey {
    pub capacity_type: String,
    pub instance_type: String,
    pub zone: String,
}

impl OfferingKey {
    pub fn new(capacity_type: &str, instance_type: &str, zone: &str) -> Self {
        Self {
            capacity_type: capacity_type.to_string(),
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
        }
    }
}

impl std::fmt::Display for OfferingKey {
    /// `<capacity type>:<instance type>:<zone>`, upstream's cache key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.capacity_type, self.instance_type, self.zone
        )
    }
}

/// Shared by every launch of the provider; cheap to clone.
#[derive(Clone)]
pub struct UnavailableOfferings {
    clock: Arc<dyn Clock>,
    until: Arc<Mutex<BTreeMap<OfferingKey, Timestamp>>>,
}

impl std::fmt::Debug for UnavailableOfferings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnavailableOfferings")
            .field("until", &*self.entries())
            .finish()
    }
}

impl UnavailableOfferings {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            until: Arc::default(),
        }
    }

    fn entries(&self) -> MutexGuard<'_, BTreeMap<OfferingKey, Timestamp>> {
        self.until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `key` unavailable for the TTL from now (a later mark extends it).
    pub fn mark(&self, key: OfferingKey) {
        let now = self.clock.now();
        let until = now.saturating_add(UNAVAILABLE_OFFERINGS_TTL).unwrap_or(now);
        tracing::debug!(offering = %key, %until, "marking offering unavailable");
        self.entries().insert(key, until);
    }

    /// Whether `key` is marked and the mark has not expired; expired marks are dropped.
    pub fn is_unavailable(&self, key: &OfferingKey) -> bool {
        let now = self.clock.now();
        let mut entries = self.entries();
        entries.retain(|_, until| *until > now);
        entries.contains_key(key)
    }

    /// The keys marked now, for diagnostics and tests.
    pub fn marked(&self) -> Vec<OfferingKey> {
        let now = self.clock.now();
        let mut entries = self.entries();
        entries.retain(|_, until| *until > now);
        entries.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use karpenter_core::clock::FakeClock;

    use super::*;

    #[test]
    fn a_mark_lasts_three_minutes_of_virtual_time() {
        let clock = Arc::new(FakeClock::default());
        let cache = UnavailableOfferings::new(clock.clone());
        let key = OfferingKey::new("spot", "m5.large", "us-west-2a");
        assert!(!cache.is_unavailable(&key));
        cache.mark(key.clone());
        assert!(cache.is_unavailable(&key));
        assert!(!cache.is_unavailable(&OfferingKey::new("on-demand", "m5.large", "us-west-2a")));
        clock.advance(SignedDuration::from_secs(179));
        assert!(cache.is_unavailable(&key));
        clock.advance(SignedDuration::from_secs(1));
        assert!(!cache.is_unavailable(&key));
        assert!(cache.marked().is_empty());
        assert_eq!(key.to_string(), "spot:m5.large:us-west-2a");
    }
}
