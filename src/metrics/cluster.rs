//! The cluster's section of [`Metrics`](crate::Metrics)
//! ([`Metrics::cluster`](crate::Metrics::cluster)): topology rebuilds and
//! errors, publish redirects, the publish hold and route gates, nodes and
//! connections; and [`ClusterCounters`], the live counters behind what of
//! it the control core does not count itself.
//!
//! The control thread and the publish path bump the counters; the cluster
//! placement fills the section in when a snapshot is taken. Servers (one
//! server or shards) have no section.

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Duration;

/// Topology rebuilds, by what triggered them.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RebuildCounts {
    /// The first one, at build.
    pub startup: u64,
    /// The periodic poll.
    pub poll: u64,
    /// A server-pushed `sunsubscribe` of a channel still wanted.
    pub sunsubscribe: u64,
    /// A `MOVED` reply to a publish.
    pub moved: u64,
    /// A subscribe connection was lost.
    pub disconnect: u64,
    /// A subscribe command was refused (stale map).
    pub subscribe_error: u64,
    /// A retry while the layout was incomplete.
    pub retry: u64,
    /// [`PubSub::refresh`](crate::PubSub::refresh).
    pub manual: u64,
}

impl RebuildCounts {
    /// All rebuilds.
    pub fn total(&self) -> u64 {
        self.startup
            + self.poll
            + self.sunsubscribe
            + self.moved
            + self.disconnect
            + self.subscribe_error
            + self.retry
            + self.manual
    }
}

/// Topology errors, by the step that failed.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TopologyErrors {
    /// `INFO server` failed or carried no version.
    pub version: u64,
    /// `CLUSTER SHARDS`/`SLOTS` failed or returned no shard.
    pub fetch: u64,
    /// Its reply could not be parsed.
    pub parse: u64,
    /// A probe `GET` got neither a value nor a `MOVED`.
    pub probe: u64,
    /// A node could not be connected.
    pub connect: u64,
}

/// Redirects and refusals seen by publishes.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Redirects {
    /// `MOVED`.
    pub moved: u64,
    /// `ASK`.
    pub ask: u64,
    /// `TRYAGAIN`.
    pub try_again: u64,
    /// `CLUSTERDOWN`.
    pub cluster_down: u64,
}

/// The publish hold and route gates
/// ([`PubSubBuilder::publish_hold`](crate::PubSubBuilder::publish_hold)).
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Holds {
    /// Publishes held because their slot's owner was unreachable.
    pub held: u64,
    /// Held publishes that failed with
    /// [`Error::OwnerUnreachable`](crate::Error::OwnerUnreachable).
    pub expired: u64,
    /// Publishes refused with [`Error::HoldFull`](crate::Error::HoldFull).
    pub full: u64,
    /// Route changes that waited for a barrier on the old route.
    pub gates: u64,
    /// Gates opened by their timeout (1 s) instead of the barrier's reply.
    pub gate_timeouts: u64,
    /// Publishes held now.
    pub messages: usize,
    /// Their channel and payload bytes.
    pub bytes: usize,
}

/// The cluster's section of [`Metrics`](crate::Metrics): what only a
/// cluster placement counts (the delivery counters it shares with servers
/// are the fields of `Metrics` itself).
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterMetrics {
    /// Topology rebuilds by trigger.
    pub rebuilds: RebuildCounts,
    /// Topology errors by stage.
    pub topology_errors: TopologyErrors,
    /// Partitions whose slot had no reachable owner at the last rebuild.
    pub unknown_slot_owners: u64,
    /// From noticing a change to every wanted channel confirmed again,
    /// the last time.
    pub last_restore: Option<Duration>,
    /// The longest restore so far.
    pub max_restore: Option<Duration>,
    /// Restores measured.
    pub restores: u64,
    /// Partitions moved to another node by rewires.
    pub moved_partitions: u64,
    /// Subscribe commands a cluster node refused (also counted in
    /// [`Metrics::subscribe_errors`](crate::Metrics::subscribe_errors)).
    pub subscribe_errors: u64,
    /// Publish redirects and refusals.
    pub redirects: Redirects,
    /// Publishes that failed in the end.
    pub publish_failed: u64,
    /// The publish hold and route gates.
    pub holds: Holds,
    /// Primaries with a publish connection.
    pub nodes: usize,
    /// Subscribe connections open.
    pub subscribe_connections: usize,
}

/// The live counters behind [`ClusterMetrics`] (relaxed atomics) that the
/// control core does not count itself, and the received and dropped
/// counts of closed subscribe connections (every placement's).
#[derive(Default)]
pub(crate) struct ClusterCounters {
    /// A publish connection to a primary could not be opened.
    pub(crate) connect_errors: AtomicU64,
    /// Partitions with no known owner (the core's figure, for the start).
    pub(crate) unknown_owners: AtomicU64,
    pub(crate) moved: AtomicU64,
    pub(crate) ask: AtomicU64,
    pub(crate) try_again: AtomicU64,
    pub(crate) cluster_down: AtomicU64,
    pub(crate) publish_failed: AtomicU64,
    pub(crate) held: AtomicU64,
    pub(crate) hold_expired: AtomicU64,
    pub(crate) hold_full: AtomicU64,
    pub(crate) gates: AtomicU64,
    pub(crate) gate_timeouts: AtomicU64,
    pub(crate) nodes: AtomicUsize,
    /// Received and dropped counts of closed subscribe connections.
    pub(crate) retired_received: AtomicU64,
    pub(crate) retired_dropped: AtomicU64,
    pub(crate) retired_unenveloped: AtomicU64,
}
