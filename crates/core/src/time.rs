//! Time as the engine sees it: injected by the caller, never read from a clock.

use core::fmt;
use core::num::NonZeroU64;
use core::ops::{Add, AddAssign, Sub};
pub use core::time::Duration;

/// A point in time, in microseconds since an arbitrary epoch chosen by the
/// caller (the runtime uses process start; simulations use 0).
///
/// Stored bit-inverted in a `NonZeroU64`, so that `Option<Instant>` takes
/// 8 bytes, not 16 (a connection holds a dozen of them); the one value
/// this cannot hold, `u64::MAX` µs (584,000 years), saturates to the one
/// below.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Instant {
    inv: NonZeroU64,
}

/// The latest representable instant, in microseconds.
const MAX_MICROS: u64 = u64::MAX - 1;

impl Instant {
    pub const ZERO: Instant = Instant::from_micros(0);

    pub const fn from_micros(micros: u64) -> Self {
        let m = if micros > MAX_MICROS {
            MAX_MICROS
        } else {
            micros
        };
        match NonZeroU64::new(!m) {
            Some(inv) => Instant { inv },
            // Unreachable: `m` is at most `u64::MAX - 1`.
            None => Instant {
                inv: NonZeroU64::MIN,
            },
        }
    }
    pub const fn from_millis(millis: u64) -> Self {
        Instant::from_micros(millis.saturating_mul(1000))
    }
    pub const fn from_secs(secs: u64) -> Self {
        Instant::from_micros(secs.saturating_mul(1_000_000))
    }
    pub const fn total_micros(self) -> u64 {
        !self.inv.get()
    }
    pub const fn total_millis(self) -> u64 {
        self.total_micros() / 1000
    }
    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.total_micros().saturating_sub(earlier.total_micros()))
    }
    pub fn checked_sub(self, d: Duration) -> Option<Instant> {
        let d = u64::try_from(d.as_micros()).ok()?;
        self.total_micros().checked_sub(d).map(Instant::from_micros)
    }
}

impl Default for Instant {
    fn default() -> Self {
        Instant::ZERO
    }
}

impl PartialOrd for Instant {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Instant {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.total_micros().cmp(&other.total_micros())
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        let d = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Instant::from_micros(self.total_micros().saturating_add(d))
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
        Instant::from_micros(self.total_micros().saturating_sub(d))
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
            self.total_micros() / 1_000_000,
            self.total_micros() % 1_000_000
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
        let end = Instant::from_micros(u64::MAX);
        assert_eq!(end.total_micros(), u64::MAX - 1);
        assert_eq!(end + Duration::from_secs(1), end);
        assert!(Instant::ZERO < a && a < end);
        assert_eq!(Instant::default(), Instant::ZERO);
    }

    #[test]
    fn an_optional_instant_takes_no_more_room() {
        assert_eq!(core::mem::size_of::<Option<Instant>>(), 8);
    }
}
