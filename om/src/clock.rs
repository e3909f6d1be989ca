//! The om's clock for leases and liveness. Production uses the monotonic
//! system clock; tests drive a [`ManualClock`] so that "a datanode silent
//! for the dead interval" or "a session idle past its lease" is a step the
//! test takes, not a wait on real time.
//!
//! Times the om writes into the metadata store (an open session's last activity, which any
//! om sharing the store may judge) are wall-clock times, [`Clock::wall`]: an [`Instant`]
//! means nothing to another process.

use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A monotonic clock, with the wall-clock time that goes with it.
pub trait Clock: Send + Sync + Debug {
    /// Now.
    fn now(&self) -> Instant;

    /// Now on the wall clock (default: [`SystemTime::now`]). A clock whose [`now`](Self::now)
    /// moves by other means moves this with it.
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// `t` as milliseconds since the Unix epoch (0 before it, `u64::MAX` past what fits).
#[must_use]
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// [`Instant::now`].
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that stands still until [`advance`](ManualClock::advance)d; its wall time
/// starts at the real one when it is made and moves only with it.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Instant>,
    /// When it was made, on both clocks.
    start: (Instant, SystemTime),
}

impl Default for ManualClock {
    fn default() -> Self {
        let start = (Instant::now(), SystemTime::now());
        Self {
            now: Mutex::new(start.0),
            start,
        }
    }
}

impl ManualClock {
    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wall(&self) -> SystemTime {
        self.start.1 + self.now().saturating_duration_since(self.start.0)
    }
}
