//! Settings of the core.

use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use shardcore::Partitions;
use topology::NodeAddr;

/// What the core is configured with. Build with [`Config::new`] and adjust
/// the public fields; [`Core::new`](crate::Core::new) checks them.
#[derive(Clone, Debug)]
pub struct Config {
    /// The app-level partitions (lane = partition).
    pub partitions: Partitions,
    /// Where to fetch the first slot map (tried in turn after the known
    /// primaries).
    pub seeds: Vec<NodeAddr>,
    /// How subscribe connections are laid out.
    pub mode: ConnLayout,
    /// Subscribe connections per primary in [`ConnLayout::NodeGrouped`];
    /// partition `p` rides on connection `p % multiplier` of its node (at
    /// least 1). In [`ConnLayout::Classic`]: the number of lanes (connections).
    pub multiplier: u32,
    /// Most channels in one `SSUBSCRIBE` (at least 1).
    pub batch: usize,
    /// Resubscribe workers per node for the planner (at least 1).
    pub workers: u32,
    /// How a resubscribe divides channels into commands.
    pub split: ResubscribeSplit,
    /// Slot map poll interval.
    pub poll_interval: Duration,
    /// Delay of the fast refresh while degraded (an unowned partition, a
    /// lost partition, a connection down, `TRYAGAIN` / `CLUSTERDOWN`); it
    /// also starts the backoff of failing fetches.
    pub degraded_retry: Duration,
    /// The most a failing fetch waits before the next try.
    pub retry_max: Duration,
    /// The least time between two fetch starts (a storm of triggers costs
    /// one fetch per gap).
    pub min_refresh_gap: Duration,
    /// How long a fetch or probe may take before it counts as failed.
    pub fetch_timeout: Duration,
    /// How long a connection may take to open.
    pub connect_timeout: Duration,
    /// How long a subscribe reply may take before the connection is
    /// presumed dead (closed and reopened).
    pub reply_timeout: Duration,
    /// First reconnect delay (doubles per failure up to `retry_max`).
    pub reconnect_base: Duration,
    /// A connection silent this long gets a liveness `PING`; one that does
    /// not answer within `ping_timeout` is closed and reopened (zero: no
    /// pings).
    pub ping_interval: Duration,
    /// How long a liveness `PING` may take.
    pub ping_timeout: Duration,
    /// Refreshes in a row that may leave a lost partition (its channels
    /// dropped by the server, its node unchanged in the map) in place
    /// before it is resubscribed where the map says it lives.
    pub stale_rounds: u32,
    /// Most probes in flight.
    pub max_probes: usize,
    /// Subscribe on replicas (node-grouped and per-partition modes):
    /// `Some(seed)` places each shard's subscriptions on one of its
    /// healthy replicas instead of its primary, falling back to the
    /// primary while it has none. The replica is kept while it stays a
    /// healthy replica of that shard; otherwise one is chosen by a
    /// rendezvous hash of `seed` and the replicas' ids, so instances with
    /// different seeds spread over a shard's replicas. `None` (the
    /// default): primaries only.
    pub replicas: Option<u64>,
}

impl Config {
    /// Defaults: node-grouped, 1 connection per node, batch 512, 1 worker
    /// (partition-grouped split), 30 s poll,
    /// 100 ms degraded retry, 2 s timeouts (pings too), 30 s pings, 5 stale rounds,
    /// 16 probes.
    pub fn new(partitions: Partitions, seeds: Vec<NodeAddr>) -> Config {
        Config {
            partitions,
            seeds,
            mode: ConnLayout::NodeGrouped,
            multiplier: 1,
            batch: shardcore::plan::DEFAULT_BATCH,
            workers: 1,
            split: ResubscribeSplit::Partitions,
            poll_interval: Duration::from_secs(30),
            degraded_retry: Duration::from_millis(100),
            retry_max: Duration::from_secs(2),
            min_refresh_gap: Duration::from_millis(20),
            fetch_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            reply_timeout: Duration::from_secs(2),
            ping_timeout: Duration::from_secs(2),
            reconnect_base: Duration::from_millis(50),
            ping_interval: Duration::from_secs(30),
            stale_rounds: 5,
            max_probes: 16,
            replicas: None,
        }
    }

    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// The first setting that is out of range.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.seeds.is_empty() {
            return Err(ConfigError::NoSeeds);
        }
        if self.multiplier == 0 {
            return Err(ConfigError::ZeroMultiplier);
        }
        if self.batch == 0 {
            return Err(ConfigError::ZeroBatch);
        }
        if self.workers == 0 {
            return Err(ConfigError::ZeroWorkers);
        }
        if self.replicas.is_some() && matches!(self.mode, ConnLayout::Classic | ConnLayout::Fixed) {
            return Err(ConfigError::ReplicasMode);
        }
        if self.mode == ConnLayout::Fixed && self.seeds.len() > usize::from(shardcore::SLOT_COUNT) {
            return Err(ConfigError::TooManyServers);
        }
        let delays = [
            self.min_refresh_gap,
            self.degraded_retry,
            self.fetch_timeout,
            self.connect_timeout,
            self.reply_timeout,
            self.ping_timeout,
            self.reconnect_base,
            self.poll_interval,
        ];
        if delays.iter().any(Duration::is_zero) {
            return Err(ConfigError::ZeroDelay);
        }
        Ok(())
    }
}

/// How the subscribe connections are laid out. The engine's public
/// `Mode` (sharded node-grouped, per partition, classic) picks one of the
/// cluster's three; [`ConnLayout::Fixed`] is the one-server and N-shard
/// placements'.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ConnLayout {
    /// `multiplier` connections per primary, shared by its partitions
    /// (partition `p` on connection `p % multiplier`).
    #[default]
    NodeGrouped,
    /// One connection per partition, to the partition's primary; a moved
    /// partition closes its connection and opens one to its new node.
    PerPartition,
    /// Classic `SUBSCRIBE`: `multiplier` lanes, each one connection, all to
    /// one primary (kept while it stays a primary that owns a partition's
    /// slot; otherwise every lane moves to the first such primary by key).
    /// A channel's lane is its hash ([`Core::lane_of`](crate::Core::lane_of)).
    /// The driver sends `SUBSCRIBE` / `UNSUBSCRIBE` for the core's
    /// [`Command::Subscribe`](crate::Command::Subscribe) /
    /// [`Command::Unsubscribe`](crate::Command::Unsubscribe), whose
    /// `partition` is the lane and `slot` 0 (no slot constraint); no slot
    /// is probed.
    Classic,
    /// Fixed servers (one server, or N client-side shards): the
    /// [`Config::seeds`] are the servers, never asked for a slot map; each
    /// gets `multiplier` connections. A channel's lane is its server
    /// ([`shardcore::shard_of`] over the servers) times `multiplier` plus
    /// its hash lane among the server's connections
    /// ([`Core::lane_of`](crate::Core::lane_of)); lane `l` rides on
    /// connection `l % multiplier` of server `l / multiplier`. The driver
    /// sends `SUBSCRIBE` / `UNSUBSCRIBE` (whose `slot` is the server
    /// number). No fetch, probe or stale-map round ever runs; a connection
    /// that goes down is reopened after its backoff, its channels resent
    /// with a gap first.
    Fixed,
}

/// How a resubscribe divides a connection's channels into commands (also
/// the engine's public `shardsub::cluster::ResubscribeSplit`).
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ResubscribeSplit {
    /// Whole partitions per worker: one `SSUBSCRIBE` per partition (split
    /// only past the batch size). The default.
    #[default]
    Partitions,
    /// Channels split over the workers by hash ([`shardcore::worker_of`])
    /// first, each worker sending one command per partition of its share
    /// (split past the batch size): W times the commands. For comparison
    /// only.
    Channels,
}

/// A setting out of range.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// [`Config::seeds`] is empty.
    NoSeeds,
    /// [`Config::multiplier`] is 0.
    ZeroMultiplier,
    /// [`Config::batch`] is 0.
    ZeroBatch,
    /// [`Config::workers`] is 0.
    ZeroWorkers,
    /// A delay or timeout is 0 (the core would spin).
    ZeroDelay,
    /// [`ConnLayout::Fixed`] with more servers than there are hash slots.
    TooManyServers,
    /// [`Config::replicas`] with [`ConnLayout::Classic`] or [`ConnLayout::Fixed`]
    /// (only sharded subscriptions are placed on replicas).
    ReplicasMode,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigError::NoSeeds => "no seed node",
            ConfigError::ZeroMultiplier => "connection multiplier must be at least 1",
            ConfigError::ZeroBatch => "subscribe batch size must be at least 1",
            ConfigError::ZeroWorkers => "resubscribe workers must be at least 1",
            ConfigError::ZeroDelay => "refresh delays must not be zero",
            ConfigError::TooManyServers => "more fixed servers than hash slots (16384)",
            ConfigError::ReplicasMode => {
                "subscribing on replicas needs sharded (node-grouped or per-partition) mode"
            }
        })
    }
}

impl core::error::Error for ConfigError {}
