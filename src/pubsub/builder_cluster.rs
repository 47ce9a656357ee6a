//! The cluster placement's setters on [`PubSubBuilder`] (the settings they
//! fill are the cluster layer's, [`crate::cluster::builder`]).

use std::time::Duration;

use crate::control_loop::{Mode, ResubscribeSplit};
use crate::pubsub::PubSubBuilder;

/// The cluster placement's setters. Each one applies to a cluster only:
/// [`PubSubBuilder::build`] refuses it with servers given by
/// [`PubSubBuilder::address`].
impl PubSubBuilder {
    /// Places the instance on a Redis/Valkey Cluster and adds a seed node
    /// (`host:port`): any node of the cluster, asked for the topology at
    /// start and when every known primary fails to answer. Not with
    /// [`PubSubBuilder::address`].
    pub fn seed(mut self, addr: impl Into<String>) -> Self {
        self.seeds.push(addr.into());
        self
    }

    /// Adds several seeds (see [`PubSubBuilder::seed`]).
    pub fn seeds<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.seeds.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// App-level partitions (default 128). Every publisher and subscriber
    /// of a fleet must use the same count: it decides channel names.
    ///
    /// `0` turns partitions off: every channel keeps its own name on the
    /// cluster (`SSUBSCRIBE room:1`), so any client's `SPUBLISH room:1`
    /// reaches it, and channels spread over the nodes as keys do (the
    /// finest, most even spread). Subscriptions stay grouped per node (one
    /// connection per primary), one `SSUBSCRIBE` per slot (split at the
    /// batch size); the price is at a failover or a slot move: a
    /// resubscribe takes a command per slot holding channels on the node,
    /// up to the slots it owns, where partitions take one per partition
    /// (BENCHMARKS.md, `cluster_resubscribe`). Not with
    /// [`Mode::PerPartition`] (a connection per slot) nor with recoverable
    /// channels (their keys need the partition's tag).
    ///
    /// [`Mode::PerPartition`]: crate::cluster::Mode::PerPartition
    pub fn partitions(mut self, n: u32) -> Self {
        self.cluster.partitions = n;
        self.cluster_only("partitions")
    }

    /// Channels that start with `prefix` keep their names on the cluster
    /// (`SSUBSCRIBE room:1`, so any client's `SPUBLISH room:1` reaches
    /// them), as with [`PubSubBuilder::partitions`]`(0)`, while every
    /// other channel stays partitioned (`{TAG}.news:1`). Pick it when a
    /// few prefixes are shared with clients that know nothing of shardsub
    /// and the rest should keep the partitions' cheap resubscribes.
    /// Repeatable, one prefix per call; every instance of a fleet must
    /// give the same ones (they decide channel names).
    ///
    /// Those channels are subscribed and resubscribed per slot, on the
    /// same connections (one per primary), as with partitions off. Not
    /// with `partitions(0)` (redundant), [`Mode::PerPartition`] (a
    /// connection per slot) or [`Mode::Classic`] (it keeps every name),
    /// nor with a recoverable channel prefix that overlaps it (their keys
    /// need the partition's tag). An empty prefix, or one containing `{`,
    /// fails `build`.
    ///
    /// ```no_run
    /// # use shardsub::PubSub;
    /// let ps = PubSub::builder()
    ///     .seed("10.0.1.1:7000")
    ///     .raw_names("room:") // a foreign `SPUBLISH room:1` reaches "room:1"
    ///     .on_message(|_channel, _payload| {})
    ///     .build()?;
    /// assert_eq!(ps.server_channel(b"room:1"), b"room:1");
    /// # Ok::<(), shardsub::Error>(())
    /// ```
    ///
    /// [`Mode::PerPartition`]: crate::cluster::Mode::PerPartition
    /// [`Mode::Classic`]: crate::cluster::Mode::Classic
    pub fn raw_names(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.cluster.raw_names.push(prefix.as_ref().to_vec());
        self.cluster_only("raw_names")
    }

    /// Sharded node-grouped (default), per-partition, or classic.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.cluster.mode = mode;
        self.cluster_only("mode")
    }

    /// How long `build` waits for a seed to give a usable slot map
    /// (default 10 s); past it, `build` fails with [`Error::Discovery`]
    /// naming each seed and why it failed.
    ///
    /// [`Error::Discovery`]: crate::Error::Discovery
    pub fn discovery_timeout(mut self, d: Duration) -> Self {
        self.cluster.discovery_timeout = d;
        self.cluster_only("discovery_timeout")
    }

    /// How often the slot map is read when nothing else triggers a rebuild
    /// (default 30 s).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.cluster.poll_interval = d;
        self.cluster_only("poll_interval")
    }

    /// How soon a rebuild is retried while the layout is incomplete (a
    /// slot without a reachable owner, a connection not up, a dropped
    /// subscription not yet moved) (default 200 ms).
    pub fn degraded_retry(mut self, d: Duration) -> Self {
        self.cluster.degraded_retry = d;
        self.cluster_only("degraded_retry")
    }

    /// How resubscribes divide channels into commands (default
    /// [`ResubscribeSplit::Partitions`]).
    pub fn resubscribe_split(mut self, split: ResubscribeSplit) -> Self {
        self.cluster.split = split;
        self.cluster_only("resubscribe_split")
    }

    /// Resubscribe workers the planner divides partitions over (default 16).
    pub fn resubscribe_workers(mut self, n: u32) -> Self {
        self.cluster.resubscribe_workers = n;
        self.cluster_only("resubscribe_workers")
    }

    /// Most `MOVED`/`ASK` redirects one publish follows (default 5).
    pub fn max_redirects(mut self, n: u32) -> Self {
        self.cluster.max_redirects = n;
        self.cluster_only("max_redirects")
    }

    /// How long a publish is retried on `TRYAGAIN`/`CLUSTERDOWN` or while
    /// its slot has no known owner (default 2 s), counted from its first
    /// such refusal (time held before it, in the publish hold, does not
    /// count).
    pub fn retry_window(mut self, d: Duration) -> Self {
        self.cluster.retry_window = d;
        self.cluster_only("retry_window")
    }

    /// How long a publish waits for its slot's owner while that owner
    /// cannot be reached (default 5 s; [`Duration::ZERO`] fails at once,
    /// with the connection's error, as without a hold).
    ///
    /// A publish whose owner's connection is down (or broke before the
    /// publish was written), or whose slot has no known owner, is held, in
    /// publish order, with every later publish to
    /// the same slot; once the topology names a reachable owner (the
    /// promoted replica after a `kill -9` of a primary) they are sent there
    /// oldest first, the oldest alone until the owner took it (a node just
    /// promoted may still refuse one and take the next), and their
    /// outcomes reported. A publish still held after
    /// this long fails with [`Error::OwnerUnreachable`](crate::Error::OwnerUnreachable). A publish already
    /// written when its connection broke (or was closed) before the reply
    /// is never held: it may have run and been delivered, so it fails
    /// with [`Error::ConnectionLost`](crate::Error::ConnectionLost) rather than arrive twice. Set the hold above the
    /// cluster's failover time (`cluster-node-timeout` plus the election)
    /// for no publish taken after the break was seen to fail across a
    /// failover (those written before it was seen still fail with
    /// `ConnectionLost`). Memory is bounded by
    /// [`PubSubBuilder::publish_hold_limit`].
    pub fn publish_hold(mut self, d: Duration) -> Self {
        self.cluster.publish_hold = d;
        self.cluster_only("publish_hold")
    }

    /// Most publishes, and most channel-plus-payload bytes, held at once
    /// over all slots (defaults 100,000 and 64 MiB); a publish that would
    /// pass either fails at once with [`Error::HoldFull`](crate::Error::HoldFull).
    pub fn publish_hold_limit(mut self, messages: usize, bytes: usize) -> Self {
        self.cluster.hold_messages = messages;
        self.cluster.hold_bytes = bytes;
        self.cluster_only("publish_hold_limit")
    }
}
