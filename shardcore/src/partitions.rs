//! App-level partitions: every channel belongs to one of P partitions, and
//! all channels of a partition share one hash tag, hence one slot.

use alloc::borrow::Cow;
use alloc::vec::Vec;
use core::fmt;
use core::ops::RangeInclusive;

use crate::hash::{channel_hash, reduce};
use crate::tag_gen::{self, TagCell};

mod tables {
    include!(concat!(env!("OUT_DIR"), "/tag_tables.rs"));
}

/// The largest partition count (one partition per slot).
pub const MAX_PARTITIONS: u32 = 16384;

/// Why a [`Partitions`] could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionError {
    /// The partition count is outside `1..=16384`.
    InvalidCount(u32),
    /// The channel-name prefix contains `{`, which would make Redis hash the
    /// wrong part of the name.
    PrefixHasBrace,
    /// A raw prefix ([`Partitions::raw_prefix`]) is empty: every channel
    /// would keep its name, which is [`Partitions::raw`].
    RawPrefixEmpty,
    /// A raw prefix contains `{`: its names could read as tagged ones.
    RawPrefixHasBrace,
    /// A raw prefix was given to a table whose channels all keep their
    /// names already ([`Partitions::raw`]).
    RawPrefixOnRaw,
}

impl fmt::Display for PartitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidCount(n) => write!(f, "partition count {n} is outside 1..=16384"),
            Self::PrefixHasBrace => f.write_str("channel-name prefix must not contain '{'"),
            Self::RawPrefixEmpty => f.write_str(
                "a raw prefix must not be empty (for every channel raw, turn partitions off)",
            ),
            Self::RawPrefixHasBrace => f.write_str("a raw prefix must not contain '{'"),
            Self::RawPrefixOnRaw => {
                f.write_str("a raw prefix on a table without partitions (every name is raw)")
            }
        }
    }
}

impl core::error::Error for PartitionError {}

/// The tag of slot `slot` from the baked slot → tag index.
fn slot_tag(slot: u16) -> &'static [u8] {
    let at = usize::from(slot) * tag_gen::MAX_TAG_LEN;
    let cell: &TagCell = tables::SLOT_TAGS
        .get(at..at + tag_gen::MAX_TAG_LEN)
        .and_then(|s| s.try_into().ok())
        .unwrap_or(&[b'0', 0, 0]);
    tag_gen::tag_bytes(cell)
}

/// P partitions with their tags, and the Redis channel names built from them.
///
/// A channel's partition is `⌊channel_hash · P / 2^64⌋`; the Redis name of
/// `channel` in partition `p` is `<prefix>{TAG_p}.<channel>`. The tag is the
/// first `{…}` of the name and contains no `}`, so Redis hashes only the tag,
/// whatever braces the channel itself contains.
///
/// Tags are balanced: when P is a power of two and the 16384 slots are split
/// over N masters the way `redis-cli --cluster create` splits them, each
/// master holds ⌊P/N⌋ or ⌈P/N⌉ partitions, for every N up to P (up to
/// P = 4096 exactly; at 8192 and 16384 only where redis-cli's own float
/// arithmetic gives masters slot counts that differ by 2 or more, past 2,687
/// masters, does the partition count follow that unevenness). Powers of two
/// come from tables baked in at build time. Other counts are computed once in
/// [`Partitions::new`] by the same code; their spread is at most 2, and at
/// most 1 for P ≤ 169 (P ≤ 145 on the float-free [`ideal_ranges`](crate::ideal_ranges) split). Any contiguous slot range of length L holds fewer than
/// `L·P/16384 + 1` partitions, so after resharding no master is more than one
/// partition above its proportional share.
///
/// ```
/// use shardcore::{key_slot, Partitions};
/// let parts = Partitions::new(128)?;
/// let name = parts.redis_channel(b"news");
/// let p = parts.partition_of(b"news");
/// assert_eq!(key_slot(&name), parts.slot(p));
/// assert_eq!(parts.user_channel(&name), Some((p, &b"news"[..])));
/// # Ok::<(), shardcore::PartitionError>(())
/// ```
///
/// Channels can also keep their names: all of them ([`Partitions::raw`]),
/// or those that start with a raw prefix ([`Partitions::raw_prefix`]). A
/// channel that keeps its name is `<prefix><channel>` on the servers, and
/// its partition (its lane) is `P + slot`, where `P` is
/// [`tagged_count`](Self::tagged_count) (0 when every name is kept) and
/// `slot` that name's key slot. Lanes `0..P` are the tagged partitions,
/// lanes `P..P + 16384` one per slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitions {
    /// Slot of each lane: the tagged partitions' (strictly increasing),
    /// then, where names are kept, 0..16384 (lane `tagged + s` at slot `s`).
    slots: Cow<'static, [u16]>,
    /// P, the number of tagged partitions (0 when `raw`).
    tagged: u32,
    prefix: Vec<u8>,
    /// Partitions off ([`Partitions::raw`]): channels keep their names, and
    /// a channel's "partition" is its own slot.
    raw: bool,
    /// Channels starting with one of these keep their names (sorted, no
    /// duplicates, none empty or with `{`).
    raw_prefixes: Vec<Vec<u8>>,
}

impl Partitions {
    /// `count` partitions with no channel-name prefix.
    ///
    /// # Errors
    /// [`PartitionError::InvalidCount`] unless `1 <= count <= 16384`.
    pub fn new(count: u32) -> Result<Self, PartitionError> {
        Self::with_prefix(count, b"")
    }

    /// `count` partitions whose Redis channel names start with `prefix`
    /// (`<prefix>{TAG}.<channel>`).
    ///
    /// # Errors
    /// [`PartitionError::InvalidCount`] unless `1 <= count <= 16384`;
    /// [`PartitionError::PrefixHasBrace`] if `prefix` contains `{`.
    pub fn with_prefix(count: u32, prefix: &[u8]) -> Result<Self, PartitionError> {
        if count == 0 || count > MAX_PARTITIONS {
            return Err(PartitionError::InvalidCount(count));
        }
        if prefix.contains(&b'{') {
            return Err(PartitionError::PrefixHasBrace);
        }
        let slots = if count.is_power_of_two() {
            let at = count as usize - 1;
            Cow::Borrowed(
                tables::TABLE_SLOTS
                    .get(at..at + count as usize)
                    .unwrap_or_default(),
            )
        } else {
            Cow::Owned(tag_gen::target_slots(count))
        };
        Ok(Self {
            slots,
            tagged: count,
            prefix: prefix.to_vec(),
            raw: false,
            raw_prefixes: Vec::new(),
        })
    }

    /// Adds a raw prefix: every channel that starts with `raw_prefix` keeps
    /// its own name on the servers (after the table's prefix), as with
    /// [`Partitions::raw`], so a foreign `SPUBLISH room:1` reaches it; the
    /// other channels stay partitioned. The first raw prefix adds 16384
    /// lanes, one per slot, after the P tagged partitions. Can be called
    /// again for more prefixes (one given twice counts once); every node
    /// of a fleet must give the same ones.
    ///
    /// ```
    /// use shardcore::{key_slot, Partitions};
    /// let parts = Partitions::new(128)?.raw_prefix(b"room:")?;
    /// assert_eq!(parts.count(), 128 + 16384);
    /// // Kept: the plain name, lane 128 + its slot.
    /// let p = parts.partition_of(b"room:1");
    /// assert_eq!(p, 128 + u32::from(key_slot(b"room:1")));
    /// assert_eq!(parts.redis_channel(b"room:1"), b"room:1");
    /// assert_eq!(parts.slot(p), key_slot(b"room:1"));
    /// assert_eq!(parts.user_channel(b"room:1"), Some((p, &b"room:1"[..])));
    /// // Partitioned, as without the raw prefix.
    /// let name = parts.redis_channel(b"news:1");
    /// assert!(name.starts_with(b"{"));
    /// assert!(parts.partition_of(b"news:1") < 128);
    /// assert_eq!(parts.user_channel(b"news:1"), None);
    /// # Ok::<(), shardcore::PartitionError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`PartitionError::RawPrefixEmpty`] for an empty prefix (use
    /// [`Partitions::raw`]); [`PartitionError::RawPrefixHasBrace`] if it
    /// contains `{`; [`PartitionError::RawPrefixOnRaw`] on a table that
    /// keeps every name already.
    pub fn raw_prefix(mut self, raw_prefix: &[u8]) -> Result<Self, PartitionError> {
        if self.raw {
            return Err(PartitionError::RawPrefixOnRaw);
        }
        if raw_prefix.is_empty() {
            return Err(PartitionError::RawPrefixEmpty);
        }
        if raw_prefix.contains(&b'{') {
            return Err(PartitionError::RawPrefixHasBrace);
        }
        if self.raw_prefixes.is_empty() {
            self.slots.to_mut().extend(0..crate::SLOT_COUNT);
        }
        if let Err(at) = self
            .raw_prefixes
            .binary_search_by(|p| p.as_slice().cmp(raw_prefix))
        {
            self.raw_prefixes.insert(at, raw_prefix.to_vec());
        }
        Ok(self)
    }

    /// The raw prefixes ([`Partitions::raw_prefix`]), in byte order.
    pub fn raw_prefixes(&self) -> impl Iterator<Item = &[u8]> {
        self.raw_prefixes.iter().map(Vec::as_slice)
    }

    /// Whether `channel` keeps its name: every channel of a raw table, a
    /// channel starting with a raw prefix otherwise.
    #[must_use]
    pub fn keeps_name(&self, channel: &[u8]) -> bool {
        self.raw || self.raw_prefixes.iter().any(|p| channel.starts_with(p))
    }

    /// Partitions off: every channel keeps its own name (after `prefix`),
    /// hashed by Redis as any key is (hash tags included), and its
    /// "partition" is that slot: 16384 of them, partition `p` at slot `p`.
    /// The finest, most even spread, and resubscribes grouped per slot
    /// rather than per partition (more commands after a failover). A
    /// channel published by any client under its plain name (`SPUBLISH
    /// room:1`) reaches subscribers of this layout.
    ///
    /// ```
    /// use shardcore::{key_slot, Partitions};
    /// let raw = Partitions::raw(b"")?;
    /// assert_eq!(raw.redis_channel(b"room:1"), b"room:1");
    /// assert_eq!(raw.partition_of(b"room:1"), u32::from(key_slot(b"room:1")));
    /// assert_eq!(raw.slot(raw.partition_of(b"room:1")), key_slot(b"room:1"));
    /// assert_eq!(raw.user_channel(b"room:1"), Some((u32::from(key_slot(b"room:1")), &b"room:1"[..])));
    /// # Ok::<(), shardcore::PartitionError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`PartitionError::PrefixHasBrace`] if `prefix` contains `{`.
    pub fn raw(prefix: &[u8]) -> Result<Self, PartitionError> {
        if prefix.contains(&b'{') {
            return Err(PartitionError::PrefixHasBrace);
        }
        Ok(Self {
            slots: Cow::Owned((0..crate::SLOT_COUNT).collect()),
            tagged: 0,
            prefix: prefix.to_vec(),
            raw: true,
            raw_prefixes: Vec::new(),
        })
    }

    /// Whether partitions are off ([`Partitions::raw`]).
    #[must_use]
    pub fn is_raw(&self) -> bool {
        self.raw
    }

    /// The number of partitions (lanes): P, plus 16384 with raw prefixes;
    /// 16384 for a raw table.
    #[must_use]
    pub fn count(&self) -> u32 {
        // Never above 16384.
        self.slots.len() as u32
    }

    /// The number of tagged partitions, P: the lanes `0..P`, before those
    /// of channels that keep their names (0 for a raw table).
    #[must_use]
    pub fn tagged_count(&self) -> u32 {
        self.tagged
    }

    /// The channel-name prefix.
    #[must_use]
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The partition of a user channel, in `0..count()`.
    #[must_use]
    pub fn partition_of(&self, channel: &[u8]) -> u32 {
        if self.keeps_name(channel) {
            return self.tagged + u32::from(crate::slot::prefixed_key_slot(&self.prefix, channel));
        }
        reduce(channel_hash(channel), self.tagged)
    }

    /// Whether partition `p` (wrapped modulo `count()`) is the lane of a
    /// slot whose channels keep their names.
    fn is_raw_lane(&self, p: u32) -> bool {
        self.raw || (!self.raw_prefixes.is_empty() && p % self.count() >= self.tagged)
    }

    /// The tag of partition `p` (1 to 3 alphanumeric bytes). Out-of-range
    /// partitions wrap modulo `count()`. The names of a lane whose channels
    /// keep them carry no tag (this is then its slot's tag, unused).
    #[must_use]
    pub fn tag(&self, p: u32) -> &'static [u8] {
        slot_tag(self.slot(p))
    }

    /// The hash slot of partition `p`. Out-of-range partitions wrap modulo
    /// `count()`.
    #[must_use]
    pub fn slot(&self, p: u32) -> u16 {
        let i = (p % self.count()) as usize;
        self.slots.get(i).copied().unwrap_or(0)
    }

    /// The slots of all partitions, in partition order: the tagged
    /// partitions' (strictly increasing), then, where channels keep their
    /// names, 0..16384.
    #[must_use]
    pub fn slots(&self) -> &[u16] {
        &self.slots
    }

    /// The partition whose slot is `slot`, if any: the tagged partition
    /// (the lane of the channels that keep their names at `slot` is
    /// `tagged_count() + slot`); for a raw table, `slot` itself.
    #[must_use]
    pub fn partition_at_slot(&self, slot: u16) -> Option<u32> {
        if self.raw {
            return (slot < crate::SLOT_COUNT).then_some(u32::from(slot));
        }
        self.slots
            .get(..self.tagged as usize)?
            .binary_search(&slot)
            .ok()
            .map(|i| i as u32)
    }

    /// Appends the Redis channel name of `channel` to `out`:
    /// `<prefix>{TAG}.<channel>` with TAG the tag of `channel`'s partition,
    /// or `<prefix><channel>` for a channel that keeps its name. Does not
    /// allocate when `out` has room.
    pub fn redis_channel_into(&self, channel: &[u8], out: &mut Vec<u8>) {
        self.redis_channel_at(self.partition_of(channel), channel, out);
    }

    /// [`redis_channel_into`](Self::redis_channel_into) for a channel whose
    /// partition `p` the caller already has (`p` must be
    /// `partition_of(channel)` for the name to round-trip through
    /// [`user_channel`](Self::user_channel)): saves hashing it again.
    pub fn redis_channel_at(&self, p: u32, channel: &[u8], out: &mut Vec<u8>) {
        if self.is_raw_lane(p) {
            out.reserve(self.prefix.len() + channel.len());
            out.extend_from_slice(&self.prefix);
            out.extend_from_slice(channel);
            return;
        }
        let tag = self.tag(p);
        // `{`, the tag (1 to 3 bytes) and `}.` in one copy.
        let mut mid = [b'{', 0, 0, 0, 0, 0];
        let n = tag.len().min(3);
        if let (Some(dst), Some(src)) = (mid.get_mut(1..=n), tag.get(..n)) {
            dst.copy_from_slice(src);
        }
        if let Some(end) = mid.get_mut(n + 1..n + 3) {
            end.copy_from_slice(b"}.");
        }
        out.reserve(self.prefix.len() + n + 3 + channel.len());
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(mid.get(..n + 3).unwrap_or_default());
        out.extend_from_slice(channel);
    }

    /// The Redis channel name of `channel` in a new vector; see
    /// [`redis_channel_into`](Self::redis_channel_into).
    #[must_use]
    pub fn redis_channel(&self, channel: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.redis_channel_into(channel, &mut out);
        out
    }

    /// The inverse of [`redis_channel`](Self::redis_channel): the partition
    /// and user channel of a `<prefix>{TAG}.<channel>` name. `None` if the
    /// name does not have that shape, or its tag is not this table's tag for
    /// its partition, or the channel is not in that partition. A name
    /// without a tag is `<prefix><channel>` for a channel that keeps its
    /// name (`None` for any other).
    #[must_use]
    pub fn user_channel<'a>(&self, redis_channel: &'a [u8]) -> Option<(u32, &'a [u8])> {
        let rest = redis_channel.strip_prefix(self.prefix.as_slice())?;
        let Some(rest) = rest.strip_prefix(b"{").filter(|_| !self.raw) else {
            // Untagged: a raw table's name, or (no raw prefix has a `{`)
            // a kept name or a foreign one.
            return self
                .keeps_name(rest)
                .then(|| (self.partition_of(rest), rest));
        };
        let close = rest
            .iter()
            .take(tag_gen::MAX_TAG_LEN + 1)
            .position(|&b| b == b'}')?;
        let tag = rest.get(..close)?;
        let channel = rest.get(close + 1..)?.strip_prefix(b".")?;
        let p = self.partition_at_slot(crate::key_slot(tag))?;
        (self.tag(p) == tag && self.partition_of(channel) == p).then_some((p, channel))
    }

    /// How many partitions each slot range holds, for ranges such as those of
    /// [`cluster_create_ranges`](crate::cluster_create_ranges).
    #[must_use]
    pub fn counts_per_range(&self, ranges: &[RangeInclusive<u16>]) -> Vec<u32> {
        // Two ascending runs: the tagged partitions, then the slot lanes.
        let (tagged, kept) = self
            .slots
            .split_at((self.tagged as usize).min(self.slots.len()));
        let within = |run: &[u16], r: &RangeInclusive<u16>| {
            let lo = run.partition_point(|s| s < r.start());
            let hi = run.partition_point(|s| s <= r.end());
            hi.saturating_sub(lo) as u32
        };
        ranges
            .iter()
            .map(|r| within(tagged, r) + within(kept, r))
            .collect()
    }
}
