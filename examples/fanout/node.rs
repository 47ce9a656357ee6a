//! One subscriber "app node" of the demo: its `PubSub`, the handler
//! that counts what arrives and passes every message and every gap or drop
//! event to its accounting tap, and the lag histogram all handlers share.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use shardcore::Partitions;
use shardsub::pubsub::{envelope, Event};
use shardsub::Handler;
use shardsub::PubSub;
use testkit::accounting::{Signal, Tap};

/// Microseconds since the Unix epoch: the envelope's clock.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Which engines subscribe channel `i`: its home engine `i % E`, and for
/// every other block of `E` channels also the next one (fan-out ≈ 1.5).
pub fn subscribers_of(i: usize, engines: usize) -> Vec<usize> {
    let home = i % engines;
    if engines > 1 && (i / engines) % 2 == 0 {
        vec![home, (home + 1) % engines]
    } else {
        vec![home]
    }
}

// ---------------------------------------------------------------------------
// Lag: a lock-free log-linear histogram (12.5 % resolution) with a window the
// reporter empties every second, and a total.
// ---------------------------------------------------------------------------

const BUCKETS: usize = 16 + 60 * 8;

/// Below 16 µs one bucket per value; above, 8 per power of two.
fn bucket_of(us: u64) -> usize {
    if us < 16 {
        return us as usize;
    }
    let e = 63 - u64::from(us.leading_zeros()); // ≥ 4
    let sub = (us >> (e - 3)) & 7;
    (16 + (e - 4) * 8 + sub) as usize
}

/// The largest value that lands in bucket `b`.
fn upper_of(b: usize) -> u64 {
    let b = b as u64;
    if b < 16 {
        return b;
    }
    let (e, sub) = ((b - 16) / 8 + 4, (b - 16) % 8);
    ((8 + sub) << (e - 3)) + (1 << (e - 3)) - 1
}

pub struct Lag {
    window: Vec<AtomicU64>,
    total: Vec<AtomicU64>,
}

impl Lag {
    pub fn new() -> Lag {
        let zeros = || (0..BUCKETS).map(|_| AtomicU64::new(0)).collect();
        Lag {
            window: zeros(),
            total: zeros(),
        }
    }

    fn record(&self, us: u64) {
        let b = bucket_of(us).min(BUCKETS - 1);
        self.window[b].fetch_add(1, Ordering::Relaxed);
        self.total[b].fetch_add(1, Ordering::Relaxed);
    }

    /// The window's counts; the window starts again empty.
    pub fn take_window(&self) -> Vec<u64> {
        self.window
            .iter()
            .map(|c| c.swap(0, Ordering::Relaxed))
            .collect()
    }

    /// Every value recorded so far.
    pub fn totals(&self) -> Vec<u64> {
        self.total
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

/// The `q` quantile of bucket counts in µs (a bucket's upper bound), `None`
/// if empty.
pub fn quantile_us(counts: &[u64], q: f64) -> Option<u64> {
    let n: u64 = counts.iter().sum();
    let rank = ((q * n as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (b, &c) in counts.iter().enumerate() {
        seen += c;
        if n > 0 && seen >= rank {
            return Some(upper_of(b));
        }
    }
    None
}

/// The `q` quantile of bucket counts as text in milliseconds, `-` if empty.
pub fn quantile(counts: &[u64], q: f64) -> String {
    quantile_us(counts, q).map_or("-".into(), |us| format!("{:.2} ms", us as f64 / 1000.0))
}

/// `(lag_us, fraction at most that)` for every non-empty bucket.
pub fn cdf(counts: &[u64]) -> Vec<(u64, f64)> {
    let n: u64 = counts.iter().sum();
    let mut seen = 0;
    let mut out = Vec::new();
    for (b, &c) in counts.iter().enumerate() {
        if c > 0 {
            seen += c;
            out.push((upper_of(b), seen as f64 / n as f64));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The handler.
// ---------------------------------------------------------------------------

/// What a subscriber engine's handler counts. Every message (its payload
/// carries the ledger's stamp behind the envelope) and every gap or drop
/// event also goes to `tap`, which classifies them at the end.
pub struct Node {
    parts: Partitions,
    lag: Arc<Lag>,
    tap: Arc<Tap>,
    pub delivered: AtomicU64,
    pub unenveloped: AtomicU64,
    pub gap_events: AtomicU64,
    pub gap_channels: AtomicU64,
    /// `Dropped` events (a full worker queue) and the messages they count.
    pub drop_events: AtomicU64,
    pub drop_messages: AtomicU64,
    /// Partitions named by gap events.
    pub gap_parts: Vec<AtomicBool>,
    /// Per partition: the newest envelope publish time (µs) delivered, to
    /// see when delivery is back after the failover.
    pub newest: Vec<AtomicU64>,
}

impl Node {
    pub fn new(parts: &Partitions, lag: Arc<Lag>, tap: Arc<Tap>) -> Node {
        let n = parts.count() as usize;
        Node {
            parts: parts.clone(),
            lag,
            tap,
            delivered: AtomicU64::new(0),
            unenveloped: AtomicU64::new(0),
            gap_events: AtomicU64::new(0),
            gap_channels: AtomicU64::new(0),
            drop_events: AtomicU64::new(0),
            drop_messages: AtomicU64::new(0),
            gap_parts: (0..n).map(|_| AtomicBool::new(false)).collect(),
            newest: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Handler for Node {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        // The publisher put its clock in front of the payload. Cluster mode
        // hands payloads through unchanged, so the handler decodes it.
        let Some((sent_us, body)) = envelope::decode(payload) else {
            self.unenveloped.fetch_add(1, Ordering::Relaxed);
            self.tap.message(channel, payload); // counted as undecodable
            return;
        };
        self.lag.record(now_us().saturating_sub(sent_us));
        let p = self.parts.partition_of(channel) as usize;
        if let Some(newest) = self.newest.get(p) {
            newest.fetch_max(sent_us, Ordering::Relaxed);
        }
        // The body starts with (channel, sequence, time) from the ledger.
        self.tap.message(channel, body);
    }

    fn on_event(&self, event: Event<'_>) {
        match event {
            // A gap: these channels were resubscribed (moved or
            // reconnected) and may have missed messages; a real app
            // recovers them from history.
            Event::Gap { channels, .. } => {
                self.gap_events.fetch_add(1, Ordering::Relaxed);
                self.gap_channels
                    .fetch_add(channels.len() as u64, Ordering::Relaxed);
                for ch in channels.iter() {
                    self.tap.signal(ch, Signal::Gap);
                    let p = self.parts.partition_of(ch) as usize;
                    if let Some(flag) = self.gap_parts.get(p) {
                        flag.store(true, Ordering::Relaxed);
                    }
                }
            }
            // A full worker queue dropped messages of these channels.
            Event::Dropped { channels, messages } => {
                self.drop_events.fetch_add(1, Ordering::Relaxed);
                self.drop_messages.fetch_add(messages, Ordering::Relaxed);
                for ch in channels.iter() {
                    self.tap.signal(ch, Signal::Drop);
                }
            }
            _ => {}
        }
    }
}

/// One subscriber "app node": its instance, its handler, the indices of
/// its channels, and which partitions those fall in.
pub struct Fleet {
    pub ps: PubSub,
    pub node: Arc<Node>,
    pub channels: Vec<usize>,
    pub holds: Vec<bool>,
}

/// Sums a handler counter over the fleet.
pub fn total(fleet: &[Fleet], counter: impl Fn(&Node) -> &AtomicU64) -> u64 {
    fleet
        .iter()
        .map(|f| counter(&f.node).load(Ordering::Relaxed))
        .sum()
}

/// Messages the library dropped (queue full, shutdown), over the fleet.
pub fn dropped(fleet: &[Fleet]) -> u64 {
    fleet.iter().map(|f| f.ps.metrics().dropped.total()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_buckets_bound_their_values() {
        for us in [0, 1, 15, 16, 17, 18, 100, 1_000, 123_456, u64::MAX / 2] {
            let b = bucket_of(us);
            assert!(upper_of(b) >= us, "{us}");
            assert!(b == 0 || upper_of(b - 1) < us, "{us}");
        }
        let mut counts = vec![0; BUCKETS];
        counts[bucket_of(1_000)] = 99;
        counts[bucket_of(50_000)] = 1;
        assert_eq!(quantile(&counts, 0.5), "1.02 ms");
        assert_eq!(quantile(&counts, 0.999), "53.25 ms");
        assert_eq!(quantile(&[0; 4], 0.5), "-");
        let c = cdf(&counts);
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].1, 1.0);
        assert_eq!(subscribers_of(0, 4), vec![0, 1]);
        assert_eq!(subscribers_of(5, 4), vec![1]);
        assert_eq!(subscribers_of(7, 1), vec![0]);
    }
}
