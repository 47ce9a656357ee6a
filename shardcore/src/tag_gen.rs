//! How the partition tags are chosen. Shared, word for word, by `build.rs`
//! (which bakes the power-of-two tables into the crate) and by the crate
//! itself (which computes other partition counts at run time), so both always
//! agree. It must stay dependency-free apart from `alloc` and the CRC function
//! passed in.
//!
//! # The construction
//!
//! 1. **Slot → tag index.** Enumerate strings over [`ALPHABET`] (digits, then
//!    upper case, then lower case letters), by length 1, 2, 3 and in
//!    lexicographic alphabet order within a length; the first string whose
//!    slot is `s` becomes the tag of slot `s`. Alphanumeric strings of at most
//!    3 bytes reach all 16384 slots (238,328 candidates), so every slot gets
//!    the shortest, smallest tag that hashes to it. Tags never contain braces.
//! 2. **Target slots.** Partition `k` of `P` sits at slot
//!    `⌊(2k + 1) · 16384 / (2P)⌋`, the midpoint of the k-th of P equal
//!    slices; slots increase with `k` and are distinct.
//!
//! Why this balances: `redis-cli` starts master `i` of N at slot
//! `c_i = round(i · 16384/N)`. When P is a power of two, `g = 16384/P` is an
//! integer, the partitions below slot `c` number `⌈c/g - ½⌉`, and rounding
//! `i·16384/N` to an integer and then `/g` to an integer is the same as
//! rounding `i·P/N` once: the partitions below master i number
//! `round(i·P/N)`, so every master holds ⌊P/N⌋ or ⌈P/N⌉. That holds for every
//! N ≤ P wherever redis-cli's float cursor has not drifted (see
//! `cluster_create_ranges`); the crate's tests check it exhaustively.
//!
//! For other P, `g` is not an integer and the two roundings can disagree by
//! one partition at some cuts: every N stays within a spread of 2, and within
//! 1 for all P ≤ 169 (≤ 145 on the float-free split). No placement does
//! better for every P: at P = 16383 one slot stays empty, and it would have
//! to sit in a larger-than-average master for every N; checked exhaustively,
//! no slot does for all of N = 1..=17. Prefer powers of two.
//!
//! Nothing here is random, so there is no seed to keep.

/// The bytes tags are made of: digits, upper-case and lower-case ASCII
/// letters, in that order.
pub const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The longest tag, in bytes.
pub const MAX_TAG_LEN: usize = 3;

/// Number of slots (duplicated from `slot` so `build.rs` can include this file
/// alone).
pub const SLOTS: usize = 16384;

/// A tag stored in a fixed 3-byte cell, padded with zero bytes (never part
/// of [`ALPHABET`]).
pub type TagCell = [u8; MAX_TAG_LEN];

/// The bytes of a padded tag cell.
#[must_use]
pub fn tag_bytes(cell: &TagCell) -> &[u8] {
    let len = cell.iter().position(|&b| b == 0).unwrap_or(MAX_TAG_LEN);
    cell.get(..len).unwrap_or(cell)
}

/// Builds the slot → shortest tag index (step 1). `crc16` must be the Redis
/// Cluster CRC16; the slot is `crc16 & 16383`. Returns `None` if some slot has
/// no tag (cannot happen with the Redis CRC16; checked by the build).
#[must_use]
pub fn slot_tag_index(crc16: fn(&[u8]) -> u16) -> Option<alloc::vec::Vec<TagCell>> {
    let mut index = alloc::vec![[0u8; MAX_TAG_LEN]; SLOTS];
    let mut found = alloc::vec![false; SLOTS];
    let mut missing = SLOTS;
    let n = ALPHABET.len();
    for len in 1..=MAX_TAG_LEN {
        let total = n.pow(len as u32);
        let mut cell = [0u8; MAX_TAG_LEN];
        for mut i in 0..total {
            // Digits of i in base n, most significant first.
            for pos in (0..len).rev() {
                cell[pos] = ALPHABET[i % n];
                i /= n;
            }
            let slot = usize::from(crc16(&cell[..len])) % SLOTS;
            if !found[slot] {
                found[slot] = true;
                index[slot] = cell;
                missing -= 1;
                if missing == 0 {
                    return Some(index);
                }
            }
        }
    }
    None
}

/// The target slot of partition `k` of `count` (step 2):
/// `⌊(2k + 1) · 16384 / (2·count)⌋`. Requires `k < count <= 16384`.
#[must_use]
pub fn target_slot(k: u32, count: u32) -> u16 {
    let count = u64::from(count.clamp(1, SLOTS as u32));
    let k = u64::from(k).min(count - 1);
    // Below 16384 since k < count.
    ((2 * k + 1) * SLOTS as u64 / (2 * count)) as u16
}

/// The target slots of all `count` partitions (step 2), strictly increasing
/// (consecutive targets are at least 16384/count >= 1 apart).
#[must_use]
pub fn target_slots(count: u32) -> alloc::vec::Vec<u16> {
    (0..count.clamp(1, SLOTS as u32))
        .map(|k| target_slot(k, count))
        .collect()
}
