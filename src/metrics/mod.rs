//! Pub/Sub metrics: the one model of what an instance counts, and its
//! rendering.
//!
//! [`Metrics`] is the snapshot read by
//! [`PubSub::metrics`](crate::PubSub::metrics): the delivery counters every
//! placement shares, and on a cluster its own section ([`ClusterMetrics`]).
//! Behind it are the live counters (`Counters`, relaxed atomics, with the
//! cluster's in `ClusterCounters`) and a lag histogram. The layers above
//! only bump counters; the placement fills in a snapshot.
//! [`Metrics::to_prometheus`] writes a snapshot in the Prometheus text
//! format from one table of families.
//!
//! Counters are bumped per batch where the code has batches (a worker adds
//! its delivered count once per drained batch), and never take a lock.
//!
//! The low-level [`Engine`](crate::engine::Engine)'s own per-connection counters
//! ([`EngineStats`](crate::engine::EngineStats)) are a different thing, kept by
//! the engine.

mod cluster;
mod histogram;
mod prometheus;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(crate) use histogram::Histogram;

use crate::threads::PanicCount;
pub(crate) use cluster::ClusterCounters;
pub use cluster::{ClusterMetrics, Holds, RebuildCounts, Redirects, TopologyErrors};
pub use histogram::LagSnapshot;

/// Why messages were dropped (delivery is at most once; a drop is counted,
/// never silent).
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// The channel's worker queue was full (the handler is too slow).
    pub queue_full: u64,
    /// Still queued when the engine shut down.
    pub shutdown: u64,
    /// Arrived late on a connection their channel had left (its slot
    /// moved, or its connection was replaced): the new connection's
    /// messages may already be delivered, so these would be out of order.
    /// Signalled like a full queue's, with [`Event::Dropped`](crate::Event::Dropped).
    pub moved: u64,
}

impl Dropped {
    /// All drops, whatever the reason.
    pub fn total(&self) -> u64 {
        self.queue_full + self.shutdown + self.moved
    }
}

/// One server's subscribe connections, from
/// [`PubSub::health`](crate::PubSub::health): one per server in a fixed
/// placement, one per primary the instance subscribes on in a cluster.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerHealth {
    /// The server's address as configured or announced (`host:port`).
    pub server: String,
    /// What it resolved to last, if it did.
    pub addr: Option<crate::addr::ServerAddr>,
    /// Whether every subscribe connection to it is up.
    pub connected: bool,
    /// Subscribe connections kept to it now, up or opening.
    pub subscribe_connections: usize,
    /// Of those, the ones up.
    pub subscribe_connections_up: usize,
    /// Subscribe connections to it that ended or failed to open, whatever
    /// the reason (lost, refused, closed for not answering a probe).
    pub failures: u64,
    /// Why the last one ended or failed.
    pub last_error: Option<String>,
    /// How long it has been in its current state (connected or not).
    pub since: std::time::Duration,
}

/// A snapshot of a [`PubSub`](crate::PubSub)'s counters.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Publishes taken (see [`PubSub::publish`](crate::PubSub::publish):
    /// sent or, on a cluster, held).
    pub published: u64,
    /// Publishes that failed: refused at once (an `Err` from
    /// [`PubSub::publish`](crate::PubSub::publish)), or failed after they
    /// were taken (an error reply, a connection lost before the reply,
    /// a hold expired, redirects exhausted), each counted once, in every
    /// placement and for every publish call.
    pub publish_errors: u64,
    /// Messages received from the servers (service probes excluded).
    pub received: u64,
    /// Messages handed to the handler.
    pub delivered: u64,
    /// Messages received for channels given up, after
    /// [`PubSub::unsubscribe`](crate::PubSub::unsubscribe) returned, and
    /// passed over (never handed to the handler).
    pub unwanted: u64,
    /// Messages dropped, by reason.
    pub dropped: Dropped,
    /// Messages of recoverable channels delivered from their history
    /// after a gap, a drop or an offset jump (see
    /// [`PubSubBuilder::history`](crate::PubSubBuilder::history)).
    pub recovered: u64,
    /// Messages of recoverable channels passed over because their offset
    /// had been delivered already (a recovered one arriving live too).
    pub duplicates: u64,
    /// [`Event::Unrecoverable`](crate::Event::Unrecoverable) events.
    pub unrecoverable: u64,
    /// Messages waiting in each worker's queue now.
    pub queue_depths: Vec<usize>,
    /// `SUBSCRIBE` commands sent (resubscribes included).
    pub subscribe_commands: u64,
    /// `UNSUBSCRIBE` commands sent.
    pub unsubscribe_commands: u64,
    /// Subscribe commands the server refused with an error reply (for
    /// example an ACL denial). Each is logged; a command of several
    /// channels is split and sent again until the refused channels stand
    /// alone (counted in `refused_channels`), so the others get through.
    pub subscribe_errors: u64,
    /// Channels the server refused to subscribe, each isolated and
    /// reported in an [`Event::Refused`](crate::Event::Refused).
    pub refused_channels: u64,
    /// Subscribe confirmations received (one per channel per command).
    pub confirmations: u64,
    /// Channels wanted now (the registry's size, pending unsubscribes aside).
    pub channels: u64,
    /// Subscribe connections opened again after one ended, whatever ended
    /// it (lost, failed to open, closed because a probe went unanswered):
    /// each attempt counts.
    pub reconnects: u64,
    /// Gap events handed to workers (one per worker per resubscribe).
    pub gaps: u64,
    /// Channels named in gap events.
    pub gap_channels: u64,
    /// Liveness probes published.
    pub probes_sent: u64,
    /// Connections restarted because a probe did not come back in time.
    pub probe_restarts: u64,
    /// Open subscribe connections per server (builder order). Empty on a
    /// cluster, which counts them in
    /// [`ClusterMetrics::subscribe_connections`].
    pub active_connections: Vec<usize>,
    /// End-to-end lag (publish to handler), when the envelope is on.
    pub lag: Option<LagSnapshot>,
    /// Messages whose payload lacked the envelope while it was on
    /// (delivered unchanged, not timed).
    pub unenveloped: u64,
    /// The library's own threads that panicked: I/O, control and worker
    /// threads (a handler's panic is caught per message and not counted
    /// here). Each is logged with `log::error!`, naming the thread and the
    /// panic message. A panicked thread has stopped and what it served
    /// stops with it: alert on any non-zero value and restart the instance.
    pub thread_panics: u64,
    /// Turns of this instance's code on a runtime's shared threads that
    /// held the thread for [`SLOW_TURN`] or longer: a worker's turn (the handler's `on_message`/`on_event`
    /// calls) or a control turn (the control loop, with the
    /// [`Pending::then`](crate::Pending::then) callbacks and wakers it
    /// runs). Everything else on that thread waited meanwhile, other
    /// instances' work included. Each is logged with `log::warn!`, naming
    /// the instance and what ran (see GUIDE.md, "What runs where").
    pub slow_turns: u64,
    /// What only a cluster counts (topology, redirects, the publish hold,
    /// nodes); `None` on servers (one server or shards).
    pub cluster: Option<ClusterMetrics>,
}

/// The live counters behind [`Metrics`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) published: AtomicU64,
    pub(crate) publish_errors: AtomicU64,
    pub(crate) delivered: AtomicU64,
    pub(crate) unwanted: AtomicU64,
    pub(crate) dropped_shutdown: AtomicU64,
    pub(crate) recovered: AtomicU64,
    pub(crate) duplicates: AtomicU64,
    pub(crate) unrecoverable: AtomicU64,
    pub(crate) subscribe_commands: AtomicU64,
    pub(crate) unsubscribe_commands: AtomicU64,
    pub(crate) subscribe_errors: AtomicU64,
    pub(crate) refused_channels: AtomicU64,
    pub(crate) confirmations: AtomicU64,
    pub(crate) gaps: AtomicU64,
    pub(crate) gap_channels: AtomicU64,
    pub(crate) probes_sent: AtomicU64,
    pub(crate) probe_restarts: AtomicU64,
    /// See [`Metrics::slow_turns`].
    pub(crate) slow_turns: AtomicU64,
    /// How the logs name the instance: its client name, or its servers.
    pub(crate) instance: std::sync::OnceLock<String>,
    pub(crate) lag: Histogram,
    /// The instance's own threads (workers, control) and, when the instance
    /// built its own runtime, that runtime's I/O threads.
    pub(crate) thread_panics: PanicCount,
    /// The I/O thread panics of a runtime given by the caller (shared with
    /// other instances), added to the count of the instance's own.
    pub(crate) runtime_panics: std::sync::OnceLock<PanicCount>,
    /// What only the cluster placement counts, and the counts of closed
    /// subscribe connections.
    pub(crate) cluster: ClusterCounters,
}

/// How long a turn on a runtime's shared thread (a worker's, the control
/// thread's) may hold it before it is logged and counted in
/// [`Metrics::slow_turns`].
pub const SLOW_TURN: std::time::Duration = std::time::Duration::from_millis(200);

/// Adds `n` to a counter (relaxed).
#[inline]
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    if n != 0 {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

impl Counters {
    /// Counters for an instance that the logs name `client_name` (when
    /// given) or after its servers.
    pub(crate) fn named(client_name: Option<&[u8]>, servers: &[String]) -> Arc<Counters> {
        let c = Counters::default();
        let name = match client_name {
            Some(n) => String::from_utf8_lossy(n).into_owned(),
            None => servers.join(","),
        };
        let _ = c.instance.set(name);
        Arc::new(c)
    }

    /// The instance's name in logs.
    pub(crate) fn instance(&self) -> &str {
        self.instance.get().map_or("?", String::as_str)
    }

    /// A turn of this instance held a shared thread for `took`: counted,
    /// and logged as `what` ran on `thread`.
    pub(crate) fn slow_turn(&self, thread: &str, what: &str, took: std::time::Duration) {
        self.slow_turns.fetch_add(1, Ordering::Relaxed);
        log::warn!(
            "instance {}: {what} held the shared thread {thread} for {} ms \
             (everything else on it waited; see GUIDE.md, \"What runs where\")",
            self.instance(),
            took.as_millis()
        );
    }
    /// The counters' part of a snapshot; the caller fills in what is
    /// counted per connection (received, queue-full drops, unenveloped),
    /// queue depths, connections, the channel count and the cluster's
    /// section.
    pub(crate) fn snapshot(&self, with_lag: bool) -> Metrics {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Metrics {
            published: g(&self.published),
            publish_errors: g(&self.publish_errors),
            received: 0,
            delivered: g(&self.delivered),
            unwanted: g(&self.unwanted),
            dropped: Dropped {
                queue_full: 0,
                shutdown: g(&self.dropped_shutdown),
                // Lane moves are the placement's (see `LaneOwners`).
                moved: 0,
            },
            recovered: g(&self.recovered),
            duplicates: g(&self.duplicates),
            unrecoverable: g(&self.unrecoverable),
            queue_depths: Vec::new(),
            subscribe_commands: g(&self.subscribe_commands),
            unsubscribe_commands: g(&self.unsubscribe_commands),
            subscribe_errors: g(&self.subscribe_errors),
            refused_channels: g(&self.refused_channels),
            confirmations: g(&self.confirmations),
            channels: 0,
            reconnects: 0,
            gaps: g(&self.gaps),
            gap_channels: g(&self.gap_channels),
            probes_sent: g(&self.probes_sent),
            probe_restarts: g(&self.probe_restarts),
            active_connections: Vec::new(),
            lag: with_lag.then(|| self.lag.snapshot()),
            unenveloped: 0,
            thread_panics: self.thread_panics.get()
                + self.runtime_panics.get().map_or(0, PanicCount::get),
            slow_turns: g(&self.slow_turns),
            cluster: None,
        }
    }
}
