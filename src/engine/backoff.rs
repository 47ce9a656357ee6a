//! Reconnect delays: [`control::Backoff`] with equal jitter, and when the
//! connection came up, for its rule that only a healthy connection resets
//! the schedule.

use std::time::{Duration, Instant};

use control::{Backoff, Jitter};

/// Delays between reconnect attempts: `base · 2^attempt`, capped at `max`,
/// with equal jitter (half fixed, half random) so a fleet that lost the
/// same server does not come back in lockstep.
///
/// A finished handshake alone does not reset the schedule: a server that
/// accepts `HELLO` and then fails every connection at once would otherwise
/// be reconnected to at the base rate forever. The schedule restarts once a
/// connection proves healthy: a request completed on it
/// ([`Reconnect::healthy`]), or it stayed up at least `max` (the longest
/// delay) before it ended ([`Backoff::ended_after`]).
#[derive(Clone, Debug)]
pub(crate) struct Reconnect {
    schedule: Backoff,
    /// When the current connection finished its handshake, until it proves
    /// healthy.
    up_since: Option<Instant>,
}

impl Reconnect {
    /// From `base` up to `max` (at least `base`), jitter seeded by `seed`.
    pub(crate) fn new(base: Duration, max: Duration, seed: u64) -> Self {
        Reconnect {
            schedule: Backoff::new(base, max.max(base), Jitter::Equal, seed),
            up_since: None,
        }
    }

    /// The connection ended at `now`: the delay before the next attempt.
    /// A connection that stayed up at least `max` since its handshake
    /// counts as healthy, and the schedule starts over.
    pub(crate) fn next_delay_after(&mut self, now: Instant) -> Duration {
        match self.up_since.take() {
            Some(up) => self.schedule.ended_after(now.saturating_duration_since(up)),
            None => self.schedule.next_delay(),
        }
    }

    /// Attempts since the last success.
    pub(crate) fn attempts(&self) -> u32 {
        self.schedule.attempts()
    }

    /// A connection finished its handshake at `now`. The schedule goes on
    /// until it proves healthy.
    pub(crate) fn connected(&mut self, now: Instant) {
        self.up_since = Some(now);
    }

    /// A request completed on the current connection: it works, and the
    /// next failure starts the schedule over.
    pub(crate) fn healthy(&mut self) {
        self.schedule.reset();
        self.up_since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handshake_alone_does_not_reset_the_schedule() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut b = Reconnect::new(ms(100), ms(1000), 9);
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
        assert_eq!(b.attempts(), 6);
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
    fn the_cap_is_at_least_the_base() {
        let ms = Duration::from_millis;
        let mut b = Reconnect::new(ms(100), ms(10), 1);
        let d = b.next_delay_after(Instant::now());
        assert!(d >= ms(50) && d <= ms(100), "{d:?}");
    }
}
