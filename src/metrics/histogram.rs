//! A lock-free log-linear latency histogram (microsecond resolution).
//!
//! Values below 16 µs get a bucket each; above, every power of two is split
//! into 8 linear sub-buckets, so a reported quantile is at most 12.5 % above
//! the true value. Recording is two relaxed atomic adds and a `fetch_max`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const LINEAR: u64 = 16;
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Enough for values up to 2^64 µs.
const BUCKETS: usize = (LINEAR + (64 - 4) * SUB) as usize;
/// Export bounds: 2^4 µs (16 µs) up to 2^24 µs (about 16.8 s), each a
/// bucket edge, so the count below each is exact.
const FIRST_BOUND_EXP: u32 = 4;
/// How many export bounds.
pub(crate) const LAG_BOUNDS: usize = 21;

/// Quantiles of the end-to-end lag histogram at one moment (log-linear
/// buckets: a quantile is reported as its bucket's upper bound, at most
/// 12.5 % above the true value; `max` is exact).
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LagSnapshot {
    /// Values recorded.
    pub count: u64,
    /// Median (upper bound of its bucket).
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
    /// Largest value recorded (exact).
    pub max: Duration,
    /// Sum of the values recorded (microsecond resolution).
    pub sum: Duration,
    /// Values below each export bound (see [`LagSnapshot::buckets`]).
    below: [u64; LAG_BOUNDS],
}

impl LagSnapshot {
    /// Cumulative counts at fixed bounds, for exporters: `(bound, values
    /// below it)` for bounds 16 µs, 32 µs, … doubling up to 2^24 µs (about
    /// 16.8 s); `count` is the total, above every bound. Exact (every
    /// bound is a bucket edge of the histogram; values are kept in whole
    /// microseconds, so "below" and "at most" differ by under 1 µs).
    pub fn buckets(&self) -> impl Iterator<Item = (Duration, u64)> + '_ {
        self.below
            .iter()
            .enumerate()
            .map(|(i, &n)| (Duration::from_micros(1 << (FIRST_BOUND_EXP + i as u32)), n))
    }
}

/// Counts of values per bucket.
pub(crate) struct Histogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    max: AtomicU64,
    sum: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            max: AtomicU64::new(0),
            sum: AtomicU64::new(0),
        }
    }
}

fn bucket_of(us: u64) -> usize {
    if us < LINEAR {
        return us as usize;
    }
    let e = 63 - us.leading_zeros(); // >= 4
    let sub = (us >> (e - SUB_BITS)) & (SUB - 1);
    (LINEAR + u64::from(e - 4) * SUB + sub) as usize
}

/// The largest value that falls in bucket `b`.
fn upper_of(b: usize) -> u64 {
    let b = b as u64;
    if b < LINEAR {
        return b;
    }
    let e = (b - LINEAR) / SUB + 4;
    let sub = (b - LINEAR) % SUB;
    let low = (1u64 << e) | (sub << (e - u64::from(SUB_BITS)));
    low.saturating_add((1u64 << (e - u64::from(SUB_BITS))) - 1)
}

impl Histogram {
    /// Records one value in microseconds.
    pub(crate) fn record_us(&self, us: u64) {
        if let Some(b) = self.buckets.get(bucket_of(us)) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(us, Ordering::Relaxed);
        self.sum.fetch_add(us, Ordering::Relaxed);
    }

    /// The quantiles now.
    pub(crate) fn snapshot(&self) -> LagSnapshot {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let max = self.max.load(Ordering::Relaxed);
        let quantile = |q: f64| -> Duration {
            if total == 0 {
                return Duration::ZERO;
            }
            let rank = ((total as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0u64;
            for (b, &c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return Duration::from_micros(upper_of(b).min(max));
                }
            }
            Duration::from_micros(max)
        };
        let mut below = [0u64; LAG_BOUNDS];
        for (i, b) in below.iter_mut().enumerate() {
            let first_above = bucket_of(1 << (FIRST_BOUND_EXP + i as u32));
            *b = counts.iter().take(first_above).sum();
        }
        LagSnapshot {
            count: total,
            sum: Duration::from_micros(self.sum.load(Ordering::Relaxed)),
            below,
            p50: quantile(0.50),
            p99: quantile(0.99),
            p999: quantile(0.999),
            max: Duration::from_micros(max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_bound_their_values() {
        let mut last = 0;
        for us in (0..100_000u64).chain([1 << 40, u64::MAX / 2, u64::MAX]) {
            let b = bucket_of(us);
            assert!(b < BUCKETS, "{us}");
            assert!(b >= last, "{us}");
            last = b;
            assert!(upper_of(b) >= us, "{us} in {b} ≤ {}", upper_of(b));
            // Relative error at most 1/8.
            assert!(upper_of(b) - us <= us / 8 + 1, "{us} {}", upper_of(b));
        }
    }

    #[test]
    fn quantiles() {
        let h = Histogram::default();
        assert_eq!(h.snapshot().count, 0);
        for us in 1..=1000 {
            h.record_us(us);
        }
        let s = h.snapshot();
        assert_eq!(s.count, 1000);
        assert_eq!(s.max, Duration::from_micros(1000));
        let p50 = s.p50.as_micros() as u64;
        assert!((500..=563).contains(&p50), "{s:?}");
        let p99 = s.p99.as_micros() as u64;
        assert!((990..=1000).contains(&p99), "{s:?}");
        assert!(s.p999 <= s.max);
        assert_eq!(s.sum, Duration::from_micros(500_500));
    }

    #[test]
    fn export_buckets_count_the_values_below_each_bound_exactly() {
        let h = Histogram::default();
        // On both sides of every bound, and past the last one.
        let mut values = vec![0, 1, 15, 16, 17, 20_000_000, u64::MAX / 4];
        for k in 4..=24u32 {
            values.extend([(1u64 << k) - 1, 1 << k, (1 << k) + 1]);
        }
        for &v in &values {
            h.record_us(v);
        }
        let s = h.snapshot();
        assert_eq!(s.buckets().count(), LAG_BOUNDS);
        let mut last = 0;
        for (bound, n) in s.buckets() {
            let want = values
                .iter()
                .filter(|&&v| u128::from(v) < bound.as_micros())
                .count();
            assert_eq!(n, want as u64, "below {bound:?}");
            assert!(n >= last);
            last = n;
        }
        assert_eq!(
            s.buckets().last().map(|b| b.0),
            Some(Duration::from_micros(1 << 24))
        );
        assert_eq!(s.count, values.len() as u64);
    }
}
