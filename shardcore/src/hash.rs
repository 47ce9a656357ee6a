//! The stable channel hash and what is derived from it: jump consistent
//! hashing for client-side shards and the per-channel worker choice.
//!
//! # The channel hash (frozen)
//!
//! [`channel_hash`] is FNV-1a 64 (offset basis `0xcbf29ce484222325`, prime
//! `0x100000001b3`) over the channel bytes, followed by the 64-bit finalizer of
//! MurmurHash3 (`fmix64`). Why:
//!
//! - both halves are public, byte-exact specifications with no key, no seed and
//!   no platform dependence, so any implementation in any language can
//!   reproduce them — every node of a fleet must agree forever;
//! - FNV-1a alone mixes its high bits poorly on short inputs; `fmix64` gives
//!   full avalanche, so every output bit is usable (partitions use the high
//!   bits, jump hash feeds all of them into its generator);
//! - channel names are short (tens of bytes), where a byte-at-a-time hash is
//!   as fast as any block hash.
//!
//! It is not DoS-resistant: an attacker who picks channel names can pile them
//! into one partition or shard. Channel names are chosen by the application.
//!
//! Changing any of these functions silently moves channels across a live
//! fleet; golden tests pin their outputs.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Decorrelates [`worker_of`] from [`shard_of`] and partitions: channels that
/// share a shard or a partition still spread over all workers.
const WORKER_SALT: u64 = 0x9e37_79b9_7f4a_7c15;

/// MurmurHash3's 64-bit finalizer.
const fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// FNV-1a 64 of `bytes`, unfinalized (exposed for its test vectors).
#[must_use]
pub const fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(FNV_PRIME);
        i += 1;
    }
    h
}

/// The stable 64-bit hash of a channel name: `fmix64(fnv1a64(channel))`.
/// Frozen forever; see the module documentation.
///
/// ```
/// use shardcore::{channel_hash, fnv1a64};
/// assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
/// assert_ne!(channel_hash(b"news"), channel_hash(b"sports"));
/// ```
#[must_use]
pub const fn channel_hash(channel: &[u8]) -> u64 {
    fmix64(fnv1a64(channel))
}

/// Jump consistent hash (Lamping & Veach, 2014): maps `key` to a bucket in
/// `0..buckets` so that growing from n to n+1 buckets moves only about
/// 1/(n+1) of the keys, all of them into the new bucket.
///
/// `buckets == 0` is treated as 1 (returns 0).
///
/// ```
/// use shardcore::jump_consistent_hash;
/// assert_eq!(jump_consistent_hash(42, 1), 0);
/// assert!(jump_consistent_hash(42, 10) < 10);
/// ```
#[must_use]
pub fn jump_consistent_hash(mut key: u64, buckets: u32) -> u32 {
    let buckets = i64::from(buckets.max(1));
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < buckets {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_789).wrapping_add(1);
        let r = ((key >> 33) + 1) as f64;
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / r)) as i64;
    }
    // 0 <= b < buckets <= u32::MAX.
    b as u32
}

/// The client-side shard of a channel among `shards` independent servers:
/// `jump_consistent_hash(channel_hash(channel), shards)`. `shards == 0` is
/// treated as 1.
#[must_use]
pub fn shard_of(channel: &[u8], shards: u32) -> u32 {
    jump_consistent_hash(channel_hash(channel), shards)
}

/// A channel's worker among `workers` by hash: a jump hash of
/// `fmix64(channel_hash ^ salt)`, independent of [`shard_of`] and of the
/// partition. `workers == 0` is treated as 1. Not on the wire: kept for the
/// wire vectors and for splitting resubscribe commands by worker (a setting
/// for comparison). The `shardsub` client does not deliver by it: a channel
/// is handled on its lane's home worker (the worker of the subscribe
/// connection that first carried it).
#[must_use]
pub fn worker_of(channel: &[u8], workers: u32) -> u32 {
    jump_consistent_hash(fmix64(channel_hash(channel) ^ WORKER_SALT), workers)
}

/// Maps a 64-bit hash onto `0..n` by its high bits (Lemire's multiply-shift
/// reduction): uniform when the hash is, and cheaper than a modulo.
#[must_use]
pub(crate) const fn reduce(hash: u64, n: u32) -> u32 {
    ((hash as u128 * n as u128) >> 64) as u32
}
