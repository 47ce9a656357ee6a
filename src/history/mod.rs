//! Recoverable channels: a capped history stream beside a channel, and an
//! offset in every message.
//!
//! A channel that starts with a prefix given to
//! [`PubSubBuilder::history`](crate::PubSubBuilder::history) is
//! *recoverable*: each publish to it runs one server-side script
//! (its `script` module) that, atomically on the channel's server (its slot's owner
//! on a cluster),
//!
//! 1. reads the channel's epoch from its meta hash, and starts a new epoch
//!    (the server's `TIME` in microseconds, and an empty stream) when the
//!    meta key is gone (evicted, expired, flushed, a failover that lost it);
//! 2. takes the next offset (`HINCRBY`, from 1 in each epoch);
//! 3. appends the payload to the stream with ID `offset-0` and
//!    `MAXLEN ~ max_len`, and refreshes both keys' `EXPIRE` (`max_age`);
//! 4. publishes the payload with a small header, epoch and offset
//!    (its `header` module), and returns the receiver count.
//!
//! ```text
//!  publish(ch, p) ─► EVALSHA publish.lua  2  meta  stream  wire  p  max_len  max_age  [S]PUBLISH
//!                      (NOSCRIPT: the same command as EVAL, which also caches it)
//!  server: HGET e ─► HINCRBY o ─► XADD MAXLEN ~ ─► EXPIRE ×2 ─► [S]PUBLISH wire "\0SH1<e>.<o>\n" p
//!  subscriber: strips the header (then the lag envelope, if on) ─► handler
//!  PubSub::history / position ─► EVALSHA read.lua (epoch, top offset, XRANGE/XREVRANGE)
//! ```
//!
//! Keys ([`keys_into`]): the channel's base name, then `:history` (the
//! stream) or `:history-meta` (the hash: `e` epoch, `o` last offset, and
//! on a cluster `n`, the node that wrote last, and `h`, the epochs it
//! continues). The
//! base is the channel itself on servers and `{TAG}.channel` on a cluster
//! (classic mode too), so both keys and the sharded channel share the
//! partition's slot.
//!
//! Scripts rather than functions: `EVALSHA` with an `EVAL` fallback works
//! the same on Redis 7.0 and Valkey 9.1, in every placement, and heals
//! itself on a node that never saw the script (a new primary after a
//! failover, a restart, `SCRIPT FLUSH`) with no per-node load step to
//! track; a function library would have to be loaded on each node as it
//! joins, and outlives the application's version.
//!
//! On a cluster the script also compares the node it runs on
//! (`CLUSTER MYID`) with the one that wrote the channel last. On another
//! node (a failover, a slot move) it begins a new epoch but keeps the
//! stream and counts on: a replica promoted after its primary died may
//! lack the primary's last acknowledged writes (replication is
//! asynchronous), and without the new epoch it would give their offsets
//! again to new messages, which subscribers that had the lost ones would
//! pass over as duplicates. A reader at an earlier epoch's offset reads on
//! from where that epoch ended on this node ([`History::earlier`],
//! [`History::resumes`]), so a lossless move costs nothing; a subscriber
//! that had offsets the new node never got is told with
//! [`Event::Unrecoverable`](crate::Event::Unrecoverable) (what was
//! published to the old node after them, if anything, is gone). The check
//! costs the script a `CLUSTER MYID` call (1.9–2.0 µs in a bare script under
//! `redis-benchmark`, see `BENCHMARKS.md`). What it does not catch: a node
//! restarted from a snapshot or an AOF that lacks its last writes keeps its
//! identity (on servers, one or N shards, there is no check at all), so
//! their offsets are given again. Every instance of a fleet must run a
//! version with this rule: an older subscriber reads a continued epoch
//! from its first offset and delivers the kept entries again.
//!
//! Subscribers strip the header and hand the position to the channel's
//! worker, which recovers gaps by itself: see `workers::recovery` (a
//! gap (once the server confirms the new subscription, so that the read
//! runs after it), a drop or an offset jump reads what follows the last
//! offset delivered, and delivers it before the live messages held
//! meanwhile;
//! [`Event::Unrecoverable`](crate::Event::Unrecoverable) when it is gone).
//! On a cluster the read goes to the slot's owner as the publish routes
//! know it, and one that fails there follows the slot on a helper thread.
//!
//! # When to turn history on
//!
//! Plain Pub/Sub delivers at most once: a reconnect, a failover, a slot
//! move or a full worker queue gives a `Gap` or `Dropped` event and the
//! messages in between are gone. History turns that into exactly once, in
//! order, for as far back as the caps reach. The chaos suite checks that
//! under every fault (`tests/suite/chaos.rs` with `CHAOS_HISTORY=1`,
//! `tests/suite/history/faults.rs`). Turn it on for channels where a missed
//! message matters and the rate is moderate: chat rooms, document edits,
//! order and state updates. Leave it off for firehoses of updates that
//! are stale within seconds (prices, positions, presence), where the next
//! message replaces the lost one anyway.
//!
//! What it costs (`BENCHMARKS.md`, "What history costs per publish"):
//!
//! - server CPU: each publish runs the script (an `HMGET`, `HINCRBY`,
//!   `XADD`, two `EXPIRE`s and the publish; `CLUSTER MYID` too on a
//!   cluster): about 9–15 times a plain publish over the last three runs
//!   of `history_cost` (11–33 µs against 0.8–3.6 µs on Redis 7.0 and
//!   Valkey 9.1), so a server sustains roughly a tenth of the publish rate
//!   on recoverable channels;
//! - server memory: about 70 bytes per stored 64-byte message (the stream
//!   entry; roughly payload + a few bytes), for up to `max_len` entries
//!   per channel, for `max_age` after its last publish;
//! - client: 1.3–10 times the CPU of a plain message (one allocation per
//!   publish, offset tracking in the workers);
//! - recovery: a subscriber that missed N messages reads them in pages of
//!   1,000 (one script call each) and delivers them before the live ones;
//!   a storm (every instance recovering at once) is one read per instance
//!   and channel plus one per 1,000 missed messages.
//!
//! # Sizing the caps
//!
//! - `max_len`: the longest outage you want to bridge without a loss,
//!   times the channel's peak rate, plus a margin (`XADD MAXLEN ~` trims
//!   whole stream nodes, so up to about 100 more are kept). A 30 s failover
//!   at 50 messages per second needs 1,500; a subscriber's worker queue
//!   that overflows while its handler stalls needs what the publishers
//!   send during the stall.
//! - `max_age`: a little past the longest reconnect you expect. It is an
//!   idle timeout: each publish refreshes both keys' `EXPIRE`; an idle
//!   channel's history goes when it passes, and its next publish starts a
//!   new epoch.
//! - memory: channels × min(`max_len`, what is published within `max_age`)
//!   × (payload + about 6 bytes). 10,000 channels × 1,000 entries × 64-byte
//!   payloads is about 700 MB; check it against `maxmemory` (an eviction
//!   of the meta key is a new epoch).
//!
//! Past the caps a subscriber gets
//! [`Event::Unrecoverable`](crate::Event::Unrecoverable) for the range the
//! stream no longer has (trimmed, expired, or the server lost the keys: a
//! restart without persistence, a failover to a replica that had not got
//! them), then what the stream still has, then the live messages, in
//! order. A new epoch is read from its first offset, so only the old
//! epoch's tail is reported lost.
//!
//! Limits, by design of this first version:
//!
//! - Recovery starts from the first message a worker delivers for the
//!   channel: a loss before any message was seen (a gap right after
//!   subscribing) is reported by the `Gap` event only.
//! - A read that fails (the server unreachable, a timeout) gives
//!   `Unrecoverable` at once (one per outage: further failures before a
//!   read succeeds give none), with no timed retry; the next gap or offset jump
//!   reads again from the last offset delivered, so what the stream still
//!   has is delivered then. Under faults most `Unrecoverable` events are of
//!   this kind and lose nothing (`tests/suite/history/faults.rs` counts them by
//!   reason).
//! - A publish whose reply was lost (the connection broke after it was
//!   sent) fails with [`Error::ConnectionLost`]
//!   but may have been applied: its subscribers may get it, once. It is
//!   not sent again (as no publish is, on any channel): a second run would
//!   append a second copy under another offset, and subscribers would get
//!   both. Whether to publish it again is the application's choice; the
//!   history says whether it was applied. The same holds for a publish on the
//!   connection of a node engine that a topology change closes before the
//!   reply (the engine tells one written before the close, which fails
//!   with `ConnectionLost`, from one never written, which goes to the
//!   slot's new owner; `tests/suite/history/rewire.rs`). (Before this rule a 5-minute chaos run on Redis saw 132 duplicate
//!   deliveries around `kill -9` of primaries.)
//! - A channel holds at most 4,096 live messages while its read is out;
//!   past that it gives up with `Unrecoverable`. The hold is per channel.
//! - A server that lost the script (a restart, `SCRIPT FLUSH`, a new
//!   primary) answers the first publishes `NOSCRIPT`; they are sent again
//!   as `EVAL`, and a later publish of the same channel that got there
//!   first runs first (offsets follow the server's order, so subscribers
//!   still see each channel in offset order). The script is loaded on
//!   every server (every primary) at build to keep this off the start.
//! - A channel given up and subscribed again is tracked afresh once a
//!   message of the old subscription was passed over (or its worker swept
//!   its map); otherwise its first new message reads what was published
//!   while it was not subscribed (up to the caps) and delivers it.
//! - Messages a [`Receiver`](crate::pubsub::Receiver)'s own queue drops
//!   are downstream of the worker and are not recovered (its
//!   `Delivery::Dropped` says so).

pub(crate) mod fixed;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod header;
#[cfg(not(feature = "internals"))]
pub(crate) mod header;
pub(crate) mod read;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod script;
#[cfg(not(feature = "internals"))]
pub(crate) mod script;

use std::time::Duration;

use crate::error::Error;

/// Caps of a recoverable channel's history stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HistoryOptions {
    /// About how many messages the stream keeps (`XADD MAXLEN ~`: the
    /// server trims whole stream nodes, so it may keep up to about 100
    /// more).
    pub max_len: u64,
    /// How long the history lives after the channel's last publish (both
    /// keys' `EXPIRE`, whole seconds, rounded up). An idle channel's history
    /// goes at once when it passes, and its next publish starts a new epoch.
    pub max_age: Duration,
}

/// A place in a channel's history: the epoch (a new one whenever the
/// history was lost) and the offset (1 for an epoch's first message).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The epoch: the server's time, in microseconds, when it began.
    pub epoch: u64,
    /// The offset within the epoch.
    pub offset: u64,
}

/// One message read from a channel's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryMessage {
    /// Its offset in the stream: offsets count on across the epochs of
    /// [`History::earlier`], so one at or below an earlier epoch's offset
    /// there was published in that epoch, the rest in
    /// [`History::position`]'s.
    pub offset: u64,
    /// The payload, as the handler would get it (the lag envelope, if on,
    /// stripped).
    pub payload: Vec<u8>,
}

/// What [`PubSub::history`](crate::PubSub::history) read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    /// The channel's position now: its epoch and last offset; `None` when
    /// it has no history (never published with history on, or expired).
    pub position: Option<Position>,
    /// The messages, oldest first.
    pub messages: Vec<HistoryMessage>,
    /// With a `since` position: whether `messages` follows it with nothing
    /// missing (the first message is the one after
    /// [`History::resumes`]`(since)`, or none was published since; false
    /// for an epoch this history does not continue). Without one, whether
    /// `messages` starts at offset 1 (the whole stream, earlier epochs
    /// included).
    pub continuous: bool,
    /// The epochs before `position`'s that this history continues, oldest
    /// first, each with the last offset it has of that epoch (at most 4).
    /// A new epoch that keeps the stream begins when another node writes
    /// the channel (a failover, a slot move: the new node may lack the old
    /// one's last writes, so its offsets are not the old epoch's); a
    /// reader at an earlier epoch's offset reads on from where that epoch
    /// ended here ([`History::resumes`]).
    pub earlier: Vec<Position>,
}

impl History {
    /// The offset of this history after which it follows what a reader at
    /// `since` has seen: `since`'s offset in the same epoch; in an epoch
    /// of [`History::earlier`], that offset or the epoch's last one here,
    /// whichever is sooner (offsets of that epoch past its end here were
    /// writes the node that now has the history never got); `None` for
    /// an epoch this history does not continue.
    pub fn resumes(&self, since: Position) -> Option<u64> {
        let now = self.position?;
        if now.epoch == since.epoch {
            return Some(since.offset);
        }
        self.earlier
            .iter()
            .find(|e| e.epoch == since.epoch)
            .map(|e| e.offset.min(since.offset))
    }

    /// The offset this history's epoch began after (0 when it has no
    /// earlier epochs).
    pub fn epoch_start(&self) -> u64 {
        self.earlier.last().map_or(0, |e| e.offset)
    }
}

/// The recoverable prefixes and their caps (longest prefix wins).
#[derive(Clone, Debug, Default)]
pub(crate) struct Rules {
    rules: Vec<(Vec<u8>, HistoryOptions)>,
}

impl Rules {
    /// Adds a prefix.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a zero cap, or a prefix given twice.
    pub(crate) fn add(&mut self, prefix: &[u8], o: HistoryOptions) -> Result<(), Error> {
        if o.max_len == 0 || o.max_age.is_zero() {
            return Err(Error::Config(
                "history: max_len and max_age must both be above zero".into(),
            ));
        }
        if self.rules.iter().any(|(p, _)| p == prefix) {
            return Err(Error::Config(
                format!(
                    "history: the prefix {:?} is given twice",
                    String::from_utf8_lossy(prefix)
                )
                .into(),
            ));
        }
        self.rules.push((prefix.to_vec(), o));
        // Longest first, so the first match is the longest.
        self.rules.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        Ok(())
    }

    /// Whether any channel is recoverable.
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The prefixes of recoverable channels, longest first.
    pub(crate) fn prefixes(&self) -> impl Iterator<Item = &[u8]> {
        self.rules.iter().map(|(p, _)| p.as_slice())
    }

    /// The caps of `channel`, if it is recoverable.
    pub(crate) fn of(&self, channel: &[u8]) -> Option<&HistoryOptions> {
        self.rules
            .iter()
            .find(|(p, _)| channel.starts_with(p))
            .map(|(_, o)| o)
    }
}

/// The stream key's suffix.
pub const STREAM_SUFFIX: &[u8] = b":history";
/// The meta hash key's suffix.
pub const META_SUFFIX: &[u8] = b":history-meta";

/// Appends the meta key to `meta` and the stream key to `stream`, for a
/// channel whose base name is `base` (see the module docs).
pub fn keys_into(base: &[u8], meta: &mut Vec<u8>, stream: &mut Vec<u8>) {
    meta.extend_from_slice(base);
    meta.extend_from_slice(META_SUFFIX);
    stream.extend_from_slice(base);
    stream.extend_from_slice(STREAM_SUFFIX);
}

/// `max_age` as `EXPIRE` seconds (rounded up, at least 1), in decimal.
pub(crate) fn ttl_arg(max_age: Duration) -> String {
    let s = max_age.as_secs() + u64::from(max_age.subsec_nanos() > 0);
    s.max(1).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(n: u64) -> HistoryOptions {
        HistoryOptions {
            max_len: n,
            max_age: Duration::from_millis(1500),
        }
    }

    #[test]
    fn longest_prefix_wins_and_bad_caps_are_refused() {
        let mut r = Rules::default();
        assert!(r.is_empty());
        r.add(b"room:", caps(10)).unwrap();
        r.add(b"room:vip:", caps(99)).unwrap();
        assert_eq!(r.of(b"room:vip:1").map(|o| o.max_len), Some(99));
        assert_eq!(r.of(b"room:1").map(|o| o.max_len), Some(10));
        assert_eq!(r.of(b"news"), None);
        assert!(matches!(r.add(b"room:", caps(1)), Err(Error::Config(_))));
        assert!(matches!(r.add(b"x", caps(0)), Err(Error::Config(_))));
        let zero_age = HistoryOptions {
            max_len: 1,
            max_age: Duration::ZERO,
        };
        assert!(matches!(r.add(b"y", zero_age), Err(Error::Config(_))));
    }

    #[test]
    fn keys_and_ttl() {
        let (mut m, mut s) = (Vec::new(), Vec::new());
        keys_into(b"{ab}.ch", &mut m, &mut s);
        assert_eq!(m, b"{ab}.ch:history-meta");
        assert_eq!(s, b"{ab}.ch:history");
        assert_eq!(
            shardcore::key_slot(&m),
            shardcore::key_slot(b"{ab}.ch"),
            "the keys share the channel's slot"
        );
        assert_eq!(ttl_arg(Duration::from_millis(1500)), "2");
        assert_eq!(ttl_arg(Duration::from_secs(60)), "60");
        assert_eq!(ttl_arg(Duration::from_millis(1)), "1");
    }
}
