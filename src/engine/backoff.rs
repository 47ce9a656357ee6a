//! Reconnect delays: exponential backoff with jitter, from injected randomness.

use std::time::{Duration, Instant};

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
///
/// A finished handshake alone does not reset the schedule: a server that
/// accepts `HELLO` and then fails every connection at once would otherwise
/// be reconnected to at the base rate forever. The schedule restarts once a
/// connection proves healthy: a request completed on it
/// ([`Backoff::healthy`]), or it stayed up at least `max` (the longest
/// delay) before it ended.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
    rng: Rng,
    /// When the current connection finished its handshake, until it proves
    /// healthy.
    up_since: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(base: Duration, max: Duration, seed: u64) -> Self {
        Backoff {
            base,
            max: max.max(base),
            attempt: 0,
            rng: Rng::new(seed),
            up_since: None,
        }
    }

    /// The connection ended at `now`: the delay before the next attempt.
    /// A connection that stayed up at least `max` since its handshake
    /// counts as healthy, and the schedule starts over.
    pub(crate) fn next_delay_after(&mut self, now: Instant) -> Duration {
        if let Some(up) = self.up_since.take() {
            if now.saturating_duration_since(up) >= self.max {
                self.attempt = 0;
            }
        }
        self.next_delay()
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

    /// A connection finished its handshake at `now`. The schedule goes on
    /// until it proves healthy.
    pub(crate) fn connected(&mut self, now: Instant) {
        self.up_since = Some(now);
    }

    /// A request completed on the current connection: it works, and the
    /// next failure starts the schedule over.
    pub(crate) fn healthy(&mut self) {
        self.attempt = 0;
        self.up_since = None;
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
        b.healthy();
        assert!(b.next_delay() <= ms(100));
    }

    #[test]
    fn a_handshake_alone_does_not_reset_the_schedule() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut b = Backoff::new(ms(100), ms(1000), 9);
        let mut now = t0;
        // Each connection fails 10 ms after its handshake: the delays keep
        // growing to the cap.
        for ceiling in [100, 200, 400, 800, 1000, 1000] {
            b.connected(now);
            now += ms(10);
            let d = b.next_delay_after(now);
            assert!(
                d >= ms(ceiling) / 2 && d <= ms(ceiling),
                "{d:?} vs {ceiling}"
            );
            now += d;
        }
        // A completed request proves the connection healthy.
        b.connected(now);
        b.healthy();
        assert!(b.next_delay_after(now + ms(10)) <= ms(100));
        // So does staying up as long as the longest delay.
        b.connected(now);
        assert!(b.next_delay_after(now + ms(10)) > ms(100));
        b.connected(now);
        assert!(b.next_delay_after(now + ms(1000)) <= ms(100));
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
