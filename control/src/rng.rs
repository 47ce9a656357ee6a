//! The library's seeded generator (SplitMix64): deterministic, no
//! dependency, one `u64` of state. Backoff jitter, the engine's per
//! connection seeds and the simulator's schedules all draw from it; tests
//! get it through `testkit::Rng`.
//!
//! It is not for secrets: the sequence follows from the seed.

/// SplitMix64 (Steele, Lea, Flood 2014): passes BigCrush, one `u64` of
/// state. The same seed gives the same sequence on every platform.
///
/// ```
/// let (mut a, mut b) = (control::Rng::new(7), control::Rng::new(7));
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) < 10);
/// ```
#[derive(Clone, Debug)]
pub struct Rng(u64);

/// SplitMix64's increment (the golden ratio in 64 bits).
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

impl Rng {
    /// A generator seeded with `seed`.
    pub const fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        Rng::mix(self.0)
    }

    /// SplitMix64's finaliser: a bijection on `u64` whose every output bit
    /// depends on every input bit. For turning a poorly spread value (a
    /// counter, a hash's low bits, a time) into a seed or a hash.
    pub const fn mix(z: u64) -> u64 {
        let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// A number in `lo..=hi` (`lo` when `hi` < `lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi < lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.next_u64() % span,
            None => self.next_u64(), // the whole of u64
        }
    }

    /// An index below `len` (0 when `len` is 0).
    pub fn index(&mut self, len: usize) -> usize {
        // usize is at most 64 bits on every target this builds for.
        self.below(len as u64) as usize
    }

    /// A copy of one element of `items`; `None` when it is empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        items.get(self.index(items.len())).copied()
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.index(i + 1));
        }
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Fills `out` with random bytes.
    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_deterministic_and_spread() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs[0], xs[1]);
        let mut hits = [0u32; 4];
        for _ in 0..4000 {
            hits[a.below(4) as usize] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
        assert_eq!(a.below(0), 0);
    }

    #[test]
    fn matches_the_reference_sequence() {
        // SplitMix64 seeded with 0: the reference implementation's first
        // outputs.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(Rng::mix(GOLDEN), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn ranges_stay_inside() {
        let mut r = Rng::new(3);
        for _ in 0..1000 {
            assert!((5..=9).contains(&r.range(5, 9)));
        }
        assert_eq!(r.range(4, 4), 4);
        assert_eq!(r.range(9, 5), 9);
        let _ = r.range(0, u64::MAX);
        let mut buf = [0u8; 13];
        r.fill(&mut buf);
        assert!(buf.iter().any(|&b| b != 0));
    }

    #[test]
    fn index_pick_and_shuffle_stay_in_bounds_and_keep_every_element() {
        let mut r = Rng::new(3);
        assert_eq!(r.index(0), 0);
        assert_eq!(r.pick::<u8>(&[]), None);
        for _ in 0..100 {
            assert!(r.index(5) < 5);
            assert!(matches!(r.pick(&[1, 2, 3]), Some(1..=3)));
        }
        let mut v: Vec<u32> = (0..20).collect();
        r.shuffle(&mut v);
        assert_ne!(v, (0..20).collect::<Vec<_>>(), "seed 3 moves something");
        v.sort_unstable();
        assert_eq!(v, (0..20).collect::<Vec<_>>());
    }
}
