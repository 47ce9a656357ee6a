//! The one map between the wall clock and the control cores' [`Time`]:
//! nanoseconds since a process-wide epoch (the first look at the clock).
//! The control thread reads the clock here and hands the cores `Time`;
//! [`Stamp`] is the compact moment a message in flight keeps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use control::Time;

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The time now.
pub(crate) fn now() -> Time {
    time_of(Instant::now())
}

/// The time of `t` (the epoch for an instant before it).
pub(crate) fn time_of(t: Instant) -> Time {
    let ns = t.saturating_duration_since(epoch()).as_nanos();
    Time(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// The instant of `t`.
pub(crate) fn instant_of(t: Time) -> Instant {
    epoch() + Duration::from_nanos(t.0)
}

/// A seed that differs between calls, instances and processes (the wall
/// clock, the process id and a counter, mixed): for hash seeds, jitter and
/// replica ranks where the application gave none.
pub(crate) fn seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    control::Rng::mix(t ^ (u64::from(std::process::id()) << 32) ^ control::Rng::mix(n))
}

/// A moment that may be unset, in 8 bytes (an `Option<Time>` takes 16),
/// so a publish in flight stays small enough to move without a `memcpy`
/// call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamp(u64);

impl Stamp {
    pub(crate) const UNSET: Stamp = Stamp(0);

    /// The moment, if set.
    pub(crate) fn get(self) -> Option<Time> {
        (self.0 != 0).then(|| Time(self.0 - 1))
    }

    /// Sets the moment to `t` unless it was set.
    pub(crate) fn set_once(&mut self, t: Time) {
        if self.0 == 0 {
            self.0 = t.0.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_and_times_map_both_ways() {
        let t = now();
        let i = instant_of(t);
        assert_eq!(time_of(i), t);
        assert!(now() >= t);
        assert_eq!(time_of(epoch() - Duration::from_secs(1)), Time::ZERO);
    }

    #[test]
    fn seeds_differ() {
        assert_ne!(seed(), seed());
    }

    #[test]
    fn a_stamp_is_unset_until_set_and_keeps_its_moment() {
        let mut st = Stamp::UNSET;
        assert_eq!(st.get(), None);
        let t = now();
        st.set_once(t);
        st.set_once(t + Duration::from_millis(2));
        assert_eq!(st.get(), Some(t), "set once");
        st.set_once(Time::ZERO);
        assert_eq!(st.get(), Some(t));
        let mut zero = Stamp::UNSET;
        zero.set_once(Time::ZERO);
        assert_eq!(zero.get(), Some(Time::ZERO));
    }
}
