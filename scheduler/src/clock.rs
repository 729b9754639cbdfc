//! Time as the scheduler sees it. Production reads the system clock; the simulator and the tests
//! move a `ManualClock` by hand, so the same control loop runs in virtual time, deterministically.

use std::sync::atomic::{AtomicI64, Ordering};

/// A source of the current time in Unix milliseconds. Nothing in `scheduler` reads the system
/// clock directly.
pub trait Clock: Send + Sync {
    /// Now, in Unix milliseconds.
    fn now_ms(&self) -> i64;

    /// What this clock is, so that people can be told whether a time is today's.
    fn kind(&self) -> ClockKind;
}

/// How a clock relates to real time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClockKind {
    /// The wall clock.
    Wall,
    /// A simulated clock running this many times faster than real time.
    Scaled(f64),
    /// Virtual time moved by hand (the simulator, tests).
    Manual,
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
    }

    fn kind(&self) -> ClockKind {
        ClockKind::Wall
    }
}

/// A clock that only moves when told to: virtual time for the simulator and the tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// A clock showing `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        ManualClock { now_ms: AtomicI64::new(start_ms) }
    }

    /// Moves time forward by `ms` (never backwards).
    pub fn advance_ms(&self, ms: i64) {
        self.now_ms.fetch_add(ms.max(0), Ordering::SeqCst);
    }

    /// Sets the time; ignored if it would move the clock backwards.
    pub fn set_ms(&self, ms: i64) {
        self.now_ms.fetch_max(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    fn kind(&self) -> ClockKind {
        ClockKind::Manual
    }
}

/// A clock that runs `speedup` times faster than the wall clock from the moment it was made:
/// `spillway serve`'s simulated cloud uses it so a newcomer sees hours of cloud behaviour in minutes.
#[derive(Debug)]
pub struct ScaledClock {
    origin_wall_ms: i64,
    origin_ms: i64,
    speedup: f64,
}

impl ScaledClock {
    /// Starts at `start_ms` and runs `speedup` times faster than real time (1.0 = real time).
    pub fn new(start_ms: i64, speedup: f64) -> Self {
        ScaledClock { origin_wall_ms: SystemClock.now_ms(), origin_ms: start_ms, speedup: speedup.max(0.0) }
    }
}

impl Clock for ScaledClock {
    fn now_ms(&self) -> i64 {
        let elapsed = (SystemClock.now_ms() - self.origin_wall_ms) as f64 * self.speedup;
        self.origin_ms + elapsed as i64
    }

    fn kind(&self) -> ClockKind {
        ClockKind::Scaled(self.speedup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_never_goes_back() {
        let c = ManualClock::new(1_000);
        c.advance_ms(500);
        assert_eq!(c.now_ms(), 1_500);
        c.set_ms(1_200);
        assert_eq!(c.now_ms(), 1_500);
        c.advance_ms(-10);
        assert_eq!(c.now_ms(), 1_500);
    }
}
