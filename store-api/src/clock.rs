//! The injected clock: backends read time only through [`Clock`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// A source of the current time in milliseconds since the Unix epoch.
///
/// Backends never read the system time directly, so tests can drive leases,
/// retry delays and presence TTLs with a [`ManualClock`].
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in ms since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// A receiver that changes whenever the time is set, for a clock that
    /// moves only when told to: a waiter for a time on it waits for this
    /// instead of sleeping in real time. `None` (the default): the clock
    /// follows real time, so a waiter sleeps.
    fn changes(&self) -> Option<watch::Receiver<i64>> {
        None
    }
}

/// The system wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(elapsed) => i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX),
            // A clock set before 1970: report the negative offset.
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        }
    }
}

/// A clock that moves only when told to. Clones share the same time, and
/// waiters on it ([`Clock::changes`]) wake whenever it is set.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
    changes: Arc<watch::Sender<i64>>,
}

impl Default for ManualClock {
    /// A clock reading 0.
    fn default() -> Self {
        Self::new(0)
    }
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        Self {
            now: Arc::new(AtomicI64::new(start_ms)),
            changes: Arc::new(watch::Sender::new(start_ms)),
        }
    }

    /// Sets the time to `now_ms`.
    pub fn set(&self, now_ms: i64) {
        self.now.store(now_ms, Ordering::SeqCst);
        self.changes.send_replace(now_ms);
    }

    /// Moves the time forward by `delta_ms` and returns the new time.
    pub fn advance(&self, delta_ms: i64) -> i64 {
        let now = self.now.fetch_add(delta_ms, Ordering::SeqCst) + delta_ms;
        self.changes.send_replace(now);
        now
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }

    fn changes(&self) -> Option<watch::Receiver<i64>> {
        Some(self.changes.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let clock = ManualClock::new(1_000);
        let other = clock.clone();
        assert_eq!(clock.advance(500), 1_500);
        assert_eq!(other.now_ms(), 1_500);
        other.set(7);
        assert_eq!(clock.now_ms(), 7);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
