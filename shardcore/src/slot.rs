//! Redis Cluster hash slots: CRC16, hash tags, and how `redis-cli --cluster
//! create` splits the slots over masters.

use alloc::vec::Vec;
use core::ops::RangeInclusive;

/// Number of hash slots in a Redis / Valkey cluster.
pub const SLOT_COUNT: u16 = 16384;

/// Slice-by-16 tables (8 KiB): several times faster than byte-at-a-time on
/// keys longer than a few bytes.
static CRC16: crc::Crc<u16, crc::Table<16>> =
    crc::Crc::<u16, crc::Table<16>>::new(&crc::CRC_16_XMODEM);

/// CRC16 as the Redis Cluster specification defines it (XMODEM: polynomial
/// 0x1021, initial value 0, no reflection, no final xor).
///
/// ```
/// assert_eq!(shardcore::crc16(b"123456789"), 0x31C3);
/// ```
#[must_use]
pub fn crc16(bytes: &[u8]) -> u16 {
    CRC16.checksum(bytes)
}

/// The part of `key` that Redis hashes: the bytes between the first `{` and
/// the first `}` after it, when that is non-empty; otherwise the whole key.
///
/// ```
/// use shardcore::hash_tag;
/// assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
/// assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
/// assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
/// ```
#[must_use]
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let rest = key.get(open + 1..).unwrap_or_default();
    match rest.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => rest.get(..close).unwrap_or(key),
        _ => key,
    }
}

/// The hash slot of `key` (`CLUSTER KEYSLOT`): `crc16(hash_tag(key)) % 16384`.
///
/// ```
/// use shardcore::key_slot;
/// assert_eq!(key_slot(b"123456789"), 0x31C3);
/// assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
/// ```
#[must_use]
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) & (SLOT_COUNT - 1)
}

/// The hash slot of `prefix` followed by `key`, without joining them: the
/// same as [`key_slot`] of the joined bytes when `prefix` has no `{`.
#[must_use]
pub(crate) fn prefixed_key_slot(prefix: &[u8], key: &[u8]) -> u16 {
    if prefix.is_empty() {
        return key_slot(key);
    }
    // A tag is strictly inside the key; none: the whole name is hashed.
    let tag = hash_tag(key);
    if tag.len() != key.len() {
        return crc16(tag) & (SLOT_COUNT - 1);
    }
    let mut d = CRC16.digest();
    d.update(prefix);
    d.update(key);
    d.finalize() & (SLOT_COUNT - 1)
}

/// Rounds half away from zero, like C's `lround` on a value that fits `i64`.
fn lround(x: f32) -> i64 {
    // `as` truncates toward zero; `x - t` is exact for |x| < 2^24.
    let t = x as i64;
    let frac = x - t as f32;
    if frac >= 0.5 {
        t + 1
    } else if frac <= -0.5 {
        t - 1
    } else {
        t
    }
}

/// The slot ranges `redis-cli --cluster create` gives to `masters` masters, in
/// master order: contiguous, starting at slot 0, ending at slot 16383.
///
/// This reproduces redis-cli's arithmetic exactly, single-precision float
/// included: `slots_per_node = 16384 / (float) N`, a float `cursor` advanced by
/// it, and `last = lround(cursor + slots_per_node - 1)`. Up to a few thousand
/// masters every master gets ⌊16384/N⌋ or ⌈16384/N⌉ slots; past about 2,688
/// masters the float cursor drifts and some masters get one or two slots more
/// or less than that (see [`ideal_ranges`] for the drift-free split); past
/// about 7,600 masters the last few may get no slot at all, shown as the empty
/// range `16384..=16383`.
///
/// Returns an empty vector for 0 masters or more than 16384.
///
/// ```
/// let r = shardcore::cluster_create_ranges(3);
/// assert_eq!(r, vec![0..=5460, 5461..=10922, 10923..=16383]);
/// ```
#[must_use]
pub fn cluster_create_ranges(masters: u16) -> Vec<RangeInclusive<u16>> {
    if masters == 0 || masters > SLOT_COUNT {
        return Vec::new();
    }
    let slots = i64::from(SLOT_COUNT);
    let per_node = f32::from(SLOT_COUNT) / f32::from(masters);
    let mut ranges = Vec::with_capacity(usize::from(masters));
    let mut first: i64 = 0;
    let mut cursor: f32 = 0.0;
    for i in 0..masters {
        let mut last = lround(cursor + per_node - 1.0);
        if last > slots || i == masters - 1 {
            last = slots - 1;
        }
        if last < first {
            last = first;
        }
        // Past ~7,600 masters the float cursor can run ahead, so the last
        // masters start past slot 16383: redis-cli then hands them no valid
        // slot. Such masters get the empty range 16384..=16383.
        let lo = u16::try_from(first.min(slots)).unwrap_or(SLOT_COUNT);
        let hi = u16::try_from(last.min(slots - 1)).unwrap_or(SLOT_COUNT - 1);
        ranges.push(lo..=hi);
        first = last + 1;
        cursor += per_node;
    }
    ranges
}

/// The split `redis-cli --cluster create` means, in exact arithmetic: master
/// `i` of N starts at slot `round(i·16384/N)` (halves rounded up). It differs
/// from [`cluster_create_ranges`] only where redis-cli's float cursor lands
/// on the other side of a half slot (by one slot, up to 2,687 masters) or
/// drifts further (past that); every master gets ⌊16384/N⌋ or ⌈16384/N⌉
/// slots, for every N.
///
/// Returns an empty vector for 0 masters or more than 16384.
#[must_use]
pub fn ideal_ranges(masters: u16) -> Vec<RangeInclusive<u16>> {
    if masters == 0 || masters > SLOT_COUNT {
        return Vec::new();
    }
    let n = u32::from(masters);
    let slots = u32::from(SLOT_COUNT);
    (0..n)
        .map(|i| {
            let lo = (2 * i * slots + n) / (2 * n);
            let hi = (2 * (i + 1) * slots + n) / (2 * n) - 1;
            // Both fit u16: they are below 16384.
            (lo as u16)..=(hi as u16)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn spec_vectors() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{foo}bar"), 12182);
    }

    #[test]
    fn hash_tag_edge_cases() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"", b""),
            (b"{", b"{"),
            (b"}", b"}"),
            (b"{}", b"{}"),
            (b"{a}", b"a"),
            (b"x{a}y{b}", b"a"),
            (b"foo{}{bar}", b"foo{}{bar}"),
            (b"foo{{bar}}zap", b"{bar"),
            (b"foo{bar}{zap}", b"bar"),
            (b"}{a}", b"a"),
            (b"{a", b"{a"),
            (b"a{b", b"a{b"),
            (b"{\x00\xff}", b"\x00\xff"),
        ];
        for (key, tag) in cases {
            assert_eq!(hash_tag(key), *tag, "key {key:?}");
        }
    }

    #[test]
    fn redis_cli_split_known_outputs() {
        // As printed by `redis-cli --cluster create` (7.0).
        assert_eq!(
            cluster_create_ranges(6),
            vec![
                0..=2730,
                2731..=5460,
                5461..=8191,
                8192..=10922,
                10923..=13652,
                13653..=16383
            ]
        );
        assert_eq!(cluster_create_ranges(1), vec![0..=16383]);
        // The float cursor moves a cut by at most one slot up to 2,687
        // masters (at N = 78 already, where a cut falls near a half slot).
        for n in 1..=2687 {
            for (a, b) in cluster_create_ranges(n).iter().zip(ideal_ranges(n)) {
                assert!(a.start().abs_diff(*b.start()) <= 1, "n={n}");
            }
        }
        assert_ne!(cluster_create_ranges(78), ideal_ranges(78));
        assert!(cluster_create_ranges(0).is_empty());
        assert!(cluster_create_ranges(16385).is_empty());
    }

    #[test]
    fn splits_are_contiguous_and_complete() {
        for n in (1..=SLOT_COUNT).step_by(29).chain([7652, SLOT_COUNT]) {
            for ranges in [cluster_create_ranges(n), ideal_ranges(n)] {
                assert_eq!(ranges.len(), usize::from(n));
                let mut next = 0u32;
                for r in &ranges {
                    if r.is_empty() {
                        // Only redis-cli's drifted tail, after all slots.
                        assert_eq!((*r.start(), next), (SLOT_COUNT, 16384), "n={n}");
                        continue;
                    }
                    assert_eq!(u32::from(*r.start()), next, "n={n}");
                    next = u32::from(*r.end()) + 1;
                }
                assert_eq!(next, 16384, "n={n}");
            }
        }
    }

    #[test]
    fn ideal_split_is_even() {
        for n in (1..=SLOT_COUNT)
            .step_by(11)
            .chain([3000, 8191, 16383, 16384])
        {
            let sizes = ideal_ranges(n)
                .iter()
                .map(|r| r.end() - r.start() + 1)
                .collect::<Vec<_>>();
            let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
            assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "n={n}");
        }
    }
}

#[cfg(test)]
mod prefixed_tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn a_prefixed_slot_is_the_slot_of_the_joined_name() {
        let keys: [&[u8]; 8] = [
            b"room:1",
            b"",
            b"{user1}.x",
            b"a{}b",
            b"a{b}c",
            b"{",
            b"x}{y}",
            b"{{z}}",
        ];
        for prefix in [&b""[..], b"app:", b"p"] {
            for key in keys {
                let mut joined = Vec::from(prefix);
                joined.extend_from_slice(key);
                assert_eq!(
                    prefixed_key_slot(prefix, key),
                    key_slot(&joined),
                    "{prefix:?} {key:?}"
                );
            }
        }
    }
}
