//! The clocks the trace reads: a monotonic clock for intervals, flush cadence and the envelope's
//! `timestamp`, and the wall clock for `observed_at_unix_ms`. Tests substitute a
//! [`ManualClock`] so that every timing decision is deterministic and nothing sleeps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of monotonic and wall-clock time.
pub trait Clock: Send + Sync {
    /// Monotonic time since an arbitrary fixed origin; never goes backwards.
    fn monotonic(&self) -> Duration;

    /// Wall-clock milliseconds since the Unix epoch (0 when the clock is before the epoch).
    fn unix_ms(&self) -> u64;
}

/// The real clocks: `Instant` (origin: creation of this value) and `SystemTime`.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A system clock whose monotonic origin is now.
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }

    fn unix_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock moved only by [`ManualClock::advance`]: both readings start where the test puts them
/// and advance together.
#[derive(Debug, Default)]
pub struct ManualClock {
    mono_nanos: AtomicU64,
    unix_ms: AtomicU64,
}

impl ManualClock {
    /// A clock at monotonic 0 and wall-clock `unix_ms`.
    pub fn new(unix_ms: u64) -> ManualClock {
        ManualClock {
            mono_nanos: AtomicU64::new(0),
            unix_ms: AtomicU64::new(unix_ms),
        }
    }

    /// Moves both clocks forward by `by`.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.mono_nanos.fetch_add(nanos, Ordering::SeqCst);
        self.unix_ms.fetch_add(
            u64::try_from(by.as_millis()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    /// Moves both clocks forward by `ms` milliseconds.
    pub fn advance_ms(&self, ms: u64) {
        self.advance(Duration::from_millis(ms));
    }
}

impl Clock for ManualClock {
    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.mono_nanos.load(Ordering::SeqCst))
    }

    fn unix_ms(&self) -> u64 {
        self.unix_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.monotonic(), Duration::ZERO);
        c.advance_ms(250);
        assert_eq!(c.monotonic(), Duration::from_millis(250));
        assert_eq!(c.unix_ms(), 1_250);
    }

    #[test]
    fn system_clock_is_monotonic_and_after_the_epoch() {
        let c = SystemClock::new();
        let a = c.monotonic();
        assert!(c.monotonic() >= a);
        assert!(c.unix_ms() > 1_600_000_000_000);
    }
}
