//! Retry delays: exponential backoff, capped, with optional jitter. The one
//! schedule behind every retry in shardsub: the engine's reconnects, the
//! control core's reconnects and topology fetches, and publishes the
//! cluster refused for now (`TRYAGAIN`, `CLUSTERDOWN`).
//!
//! It reads no clock: a caller asks for the next delay and waits it out
//! itself; the one rule that involves time ([`Backoff::ended_after`]) takes
//! the elapsed time as an argument.

use core::time::Duration;

use crate::rng::Rng;

/// How much of each delay is random.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// None: every delay is the ceiling, so a schedule is exact (the
    /// control core's, which the simulator and golden transcripts replay).
    None,
    /// "Equal jitter": half the ceiling fixed, half uniformly random, so a
    /// fleet that lost the same server does not come back in lockstep.
    Equal,
}

/// Delays between attempts: the ceiling for attempt `n` (from 0) is
/// `base · 2ⁿ`, at most `max`; [`Jitter`] says how much of it is random.
///
/// Used in one of two ways: the backoff counts attempts itself
/// ([`Backoff::next_delay`], [`Backoff::reset`]), or a caller that keeps
/// its own count per item asks for the delay of a given attempt
/// ([`Backoff::delay_at`]).
///
/// ```
/// use control::{Backoff, Jitter};
/// use core::time::Duration;
/// let ms = Duration::from_millis;
/// let mut b = Backoff::new(ms(100), ms(1000), Jitter::None, 0);
/// let delays: Vec<_> = (0..6).map(|_| b.next_delay()).collect();
/// assert_eq!(delays, [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]);
/// b.reset();
/// assert_eq!(b.next_delay(), ms(100));
/// ```
#[derive(Clone, Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    jitter: Jitter,
    /// Attempts since the last reset.
    attempt: u32,
    rng: Rng,
}

/// The largest doubling applied (the cap takes over long before it with
/// any sensible base; this only keeps the arithmetic bounded).
const MAX_SHIFT: u32 = 20;

impl Backoff {
    /// A schedule from `base` doubling up to `max` (the cap wins over
    /// `base` when it is smaller), its jitter drawn from a generator
    /// seeded with `seed`.
    pub const fn new(base: Duration, max: Duration, jitter: Jitter, seed: u64) -> Backoff {
        Backoff {
            base,
            max,
            jitter,
            attempt: 0,
            rng: Rng::new(seed),
        }
    }

    /// The longest delay.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// Attempts since the last reset.
    pub const fn attempts(&self) -> u32 {
        self.attempt
    }

    /// The ceiling of attempt `attempt` (from 0): `base · 2^attempt`, at
    /// most `max`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        self.base
            .saturating_mul(1 << attempt.min(MAX_SHIFT))
            .min(self.max)
    }

    /// The delay before attempt `attempt` (from 0) of a count the caller
    /// keeps; this backoff's own count is left alone.
    pub fn delay_at(&mut self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        match self.jitter {
            Jitter::None => ceiling,
            Jitter::Equal => {
                let half = ceiling / 2;
                let rest = ceiling - half;
                let nanos = u64::try_from(rest.as_nanos()).unwrap_or(u64::MAX);
                half + Duration::from_nanos(self.rng.range(0, nanos))
            }
        }
    }

    /// The delay before the next attempt; counts it.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.delay_at(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        d
    }

    /// The last attempt succeeded: the schedule starts over.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// A connection that had come up ended after `up_for`: the delay
    /// before the next attempt. Having come up alone does not reset the
    /// schedule (a server that accepts the handshake and then fails every
    /// connection at once would be retried at the base rate forever); one
    /// that stayed up at least [`Backoff::max`] counts as healthy, and the
    /// schedule starts over.
    pub fn ended_after(&mut self, up_for: Duration) -> Duration {
        if up_for >= self.max {
            self.reset();
        }
        self.next_delay()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn grows_exponentially_within_jitter_and_caps() {
        let mut b = Backoff::new(ms(100), ms(1000), Jitter::Equal, 42);
        for ceiling in [100, 200, 400, 800, 1000, 1000] {
            let d = b.next_delay();
            assert!(
                d >= ms(ceiling) / 2 && d <= ms(ceiling),
                "{d:?} vs {ceiling}"
            );
        }
        assert_eq!(b.attempts(), 6);
        b.reset();
        assert!(b.next_delay() <= ms(100));
    }

    #[test]
    fn without_jitter_the_schedule_is_exact() {
        let mut b = Backoff::new(ms(20), ms(500), Jitter::None, 0);
        let at: Vec<_> = (0..8).map(|n| b.delay_at(n)).collect();
        assert_eq!(at, [20, 40, 80, 160, 320, 500, 500, 500].map(ms));
        assert_eq!(b.attempts(), 0, "delay_at leaves the count alone");
        // A cap below the base wins.
        let mut b = Backoff::new(ms(200), ms(100), Jitter::None, 0);
        assert_eq!(b.next_delay(), ms(100));
        // Far past the largest doubling: the cap, no overflow.
        let mut b = Backoff::new(ms(1), Duration::MAX, Jitter::None, 0);
        assert_eq!(b.delay_at(u32::MAX), ms(1 << MAX_SHIFT));
    }

    #[test]
    fn only_a_long_enough_connection_resets_the_schedule() {
        let mut b = Backoff::new(ms(100), ms(1000), Jitter::Equal, 9);
        // Each connection fails 10 ms after it came up: the delays keep
        // growing to the cap.
        for ceiling in [100, 200, 400, 800, 1000, 1000] {
            let d = b.ended_after(ms(10));
            assert!(
                d >= ms(ceiling) / 2 && d <= ms(ceiling),
                "{d:?} vs {ceiling}"
            );
        }
        assert!(b.ended_after(ms(999)) > ms(100));
        // Staying up as long as the longest delay proves it healthy.
        assert!(b.ended_after(ms(1000)) <= ms(100));
    }

    #[test]
    fn same_seed_same_delays_different_seed_differs() {
        let run = |seed| {
            let mut b = Backoff::new(ms(100), ms(10_000), Jitter::Equal, seed);
            (0..8).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn zero_base_never_panics() {
        for jitter in [Jitter::None, Jitter::Equal] {
            let mut b = Backoff::new(Duration::ZERO, Duration::ZERO, jitter, 1);
            for _ in 0..40 {
                assert_eq!(b.next_delay(), Duration::ZERO);
            }
        }
    }
}
