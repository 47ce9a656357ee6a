//! [`ClusterMetrics`]: what the cluster layer counts.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::cluster::shared::{Shared, Stage};
use crate::metrics::Metrics;

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

/// A snapshot of a cluster [`PubSub`](crate::PubSub)'s
/// counters.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterMetrics {
    /// Delivery counters shared with [`PubSub`](crate::PubSub) (lag and
    /// probes stay empty; `active_connections` holds one entry per node;
    /// `thread_panics` covers the control thread, the workers and every
    /// node engine's I/O thread).
    pub pubsub: Metrics,
    /// Topology rebuilds by trigger.
    pub rebuilds: RebuildCounts,
    /// Topology errors by stage.
    pub topology_errors: TopologyErrors,
    /// Partitions whose slot had no reachable owner at the last rebuild.
    pub unknown_slot_owners: u64,
    /// From noticing a change to every wanted channel confirmed again:
    /// the last time, and the longest.
    pub last_restore: Option<Duration>,
    /// The longest restore so far.
    pub max_restore: Option<Duration>,
    /// Restores measured.
    pub restores: u64,
    /// Partitions moved to another node by rewires.
    pub moved_partitions: u64,
    /// Subscribe commands the server refused.
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

pub(crate) fn snapshot(s: &Shared) -> ClusterMetrics {
    let c = &s.cluster;
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let e = |st: Stage| g(&c.errors[st as usize]);
    let core = *s.core_stats.lock();
    let mut m = s.counters.snapshot(s.config.envelope);
    m.queue_depths = s.queues.iter().map(|q| q.depth()).collect();
    m.channels = s.registry.len() as u64;
    m.received = g(&c.retired_received);
    m.dropped.queue_full = g(&c.retired_dropped);
    m.unenveloped = g(&c.retired_unenveloped);
    m.dropped.moved = s.lane_owners.late();
    m.probe_restarts += core.ping_restarts;
    m.subscribe_errors += core.subscribe_errors;
    {
        let conns = s.lane_conn.read();
        let mut seen = std::collections::BTreeSet::new();
        for c in conns.iter().flatten() {
            if seen.insert(c.id) {
                m.received += c.received.load(Ordering::Relaxed);
                m.dropped.queue_full += c.dropped.load(Ordering::Relaxed);
                m.unenveloped += c.unenveloped.load(Ordering::Relaxed);
            }
        }
    }
    let r = core.rebuilds;
    let t = core.topology_errors;
    ClusterMetrics {
        pubsub: m,
        rebuilds: RebuildCounts {
            startup: r.startup,
            poll: r.poll,
            sunsubscribe: r.sunsubscribe,
            moved: r.moved,
            disconnect: r.disconnect,
            subscribe_error: r.subscribe_error,
            retry: r.retry,
            manual: r.manual,
        },
        topology_errors: TopologyErrors {
            version: e(Stage::Version),
            fetch: t.fetch,
            parse: t.parse,
            probe: t.probe,
            connect: t.connect + e(Stage::Connect),
        },
        unknown_slot_owners: core.unknown_slot_owners,
        last_restore: core.last_restore,
        max_restore: core.max_restore,
        restores: core.restores,
        moved_partitions: core.moved_partitions,
        subscribe_errors: core.subscribe_errors,
        redirects: Redirects {
            moved: g(&c.moved),
            ask: g(&c.ask),
            try_again: g(&c.try_again),
            cluster_down: g(&c.cluster_down),
        },
        publish_failed: g(&c.publish_failed),
        holds: {
            let (messages, bytes) = s.hold.size();
            Holds {
                held: g(&c.held),
                expired: g(&c.hold_expired),
                full: g(&c.hold_full),
                gates: g(&c.gates),
                gate_timeouts: g(&c.gate_timeouts),
                messages,
                bytes,
            }
        },
        nodes: c.nodes.load(Ordering::Relaxed),
        subscribe_connections: core.subscribe_connections,
    }
}
