//! Where "now" comes from: the system clock in production, a clock tests set and advance so a
//! test can roll the window through months in seconds.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::time::Timestamp;

/// A source of the current time in unix seconds.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now().timestamp()
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock reading `now`.
    pub fn new(now: Timestamp) -> ManualClock {
        ManualClock(AtomicI64::new(now))
    }

    /// Sets the time.
    pub fn set(&self, now: Timestamp) {
        self.0.store(now, Ordering::SeqCst);
    }

    /// Moves the time forward by `secs`.
    pub fn advance(&self, secs: i64) {
        self.0.fetch_add(secs, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        self.0.load(Ordering::SeqCst)
    }
}
