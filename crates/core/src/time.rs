//! Time as the engine sees it: injected by the caller, never read from a clock.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
pub use core::time::Duration;

/// A point in time, in microseconds since an arbitrary epoch chosen by the
/// caller (the runtime uses process start; simulations use 0).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant {
    micros: u64,
}

impl Instant {
    pub const ZERO: Instant = Instant { micros: 0 };

    pub const fn from_micros(micros: u64) -> Self {
        Instant { micros }
    }
    pub const fn from_millis(millis: u64) -> Self {
        Instant {
            micros: millis.saturating_mul(1000),
        }
    }
    pub const fn from_secs(secs: u64) -> Self {
        Instant {
            micros: secs.saturating_mul(1_000_000),
        }
    }
    pub const fn total_micros(self) -> u64 {
        self.micros
    }
    pub const fn total_millis(self) -> u64 {
        self.micros / 1000
    }
    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.micros.saturating_sub(earlier.micros))
    }
    pub fn checked_sub(self, d: Duration) -> Option<Instant> {
        let d = u64::try_from(d.as_micros()).ok()?;
        self.micros.checked_sub(d).map(Instant::from_micros)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        let d = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Instant {
            micros: self.micros.saturating_add(d),
        }
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        let d = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Instant {
            micros: self.micros.saturating_sub(d),
        }
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an earlier minus a later instant is zero.
    fn sub(self, other: Instant) -> Duration {
        self.saturating_duration_since(other)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:06}s",
            self.micros / 1_000_000,
            self.micros % 1_000_000
        )
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let a = Instant::from_millis(5);
        assert_eq!((a + Duration::from_millis(3)).total_millis(), 8);
        assert_eq!(a - Instant::from_millis(7), Duration::ZERO);
        assert_eq!((a - Duration::from_secs(1)), Instant::ZERO);
        assert_eq!(Instant::from_secs(1) - a, Duration::from_millis(995));
    }
}
