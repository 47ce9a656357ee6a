//! Reconnect delays: exponential backoff with jitter, from injected randomness.

use std::time::Duration;

/// A small seedable generator (SplitMix64); enough for jitter, and
/// deterministic for tests.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Delays between reconnect attempts: `base · 2^attempt`, capped at `max`,
/// with "equal jitter" (half fixed, half random) so a fleet that lost the same
/// server does not come back in lockstep.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
    rng: Rng,
}

impl Backoff {
    pub(crate) fn new(base: Duration, max: Duration, seed: u64) -> Self {
        Backoff {
            base,
            max: max.max(base),
            attempt: 0,
            rng: Rng::new(seed),
        }
    }

    /// The delay before the next attempt.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let factor = 1u32 << self.attempt.min(20);
        let ceiling = self.base.saturating_mul(factor).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let half = ceiling / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let jitter = if nanos == 0 {
            0
        } else {
            self.rng.next_u64() % (nanos + 1)
        };
        half + Duration::from_nanos(jitter)
    }

    /// Attempts since the last success.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Called after a successful connect.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_within_jitter_and_caps() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(1000), 42);
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
    fn same_seed_same_delays_different_seed_differs() {
        let ms = Duration::from_millis;
        let run = |seed| {
            let mut b = Backoff::new(ms(100), ms(10_000), seed);
            (0..8).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn zero_base_never_panics() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO, 1);
        for _ in 0..40 {
            assert_eq!(b.next_delay(), Duration::ZERO);
        }
    }
}
