//! Virtual time: nanoseconds since an origin the driver chooses.

use core::fmt;
use core::ops::Add;
use core::time::Duration;

/// A point in time, in nanoseconds since an origin the driver picks (the
/// core never reads a clock). The engine maps `Instant`s onto it; the
/// simulator counts from zero.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

impl Time {
    /// The origin.
    pub const ZERO: Time = Time(0);

    /// `ms` milliseconds after the origin.
    pub const fn from_millis(ms: u64) -> Time {
        Time(ms.saturating_mul(1_000_000))
    }

    /// Whole milliseconds since the origin.
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    /// The time elapsed since `earlier` (zero when `earlier` is later).
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;

    fn add(self, d: Duration) -> Time {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(nanos))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0 / 1_000;
        write!(f, "{}.{:03}ms", us / 1_000, us % 1_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_and_saturates() {
        let t = Time::from_millis(5) + Duration::from_micros(1500);
        assert_eq!(t, Time(6_500_000));
        assert_eq!(t.to_string(), "6.500ms");
        assert_eq!(Time(u64::MAX - 1) + Duration::from_secs(1), Time(u64::MAX));
        assert_eq!(Time::ZERO.since(t), Duration::ZERO);
        assert_eq!(t.since(Time::from_millis(6)), Duration::from_micros(500));
    }
}
