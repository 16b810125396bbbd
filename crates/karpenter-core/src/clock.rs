//! Injectable time, so controllers, tests and simulations can run in virtual time.

use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};

/// A source of the current time.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct FakeClock {
    now: Mutex<Timestamp>,
}

impl FakeClock {
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// Moves time forward by `by`.
    pub fn advance(&self, by: SignedDuration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now = now.saturating_add(by).unwrap_or(*now);
    }

    pub fn set(&self, to: Timestamp) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        // 2024-01-01T00:00:00Z: a fixed, readable origin for virtual time.
        Self::new(Timestamp::from_second(1_704_067_200).unwrap_or(Timestamp::UNIX_EPOCH))
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_advanced() {
        let clock = FakeClock::default();
        let t0 = clock.now();
        assert_eq!(clock.now(), t0);
        clock.advance(SignedDuration::from_secs(90));
        assert_eq!(
            clock.now().duration_since(t0),
            SignedDuration::from_secs(90)
        );
    }
}
