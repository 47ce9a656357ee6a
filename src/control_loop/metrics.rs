//! The snapshot of a placement's [`Metrics`]: the live counters, the
//! control core's figures and what is counted per subscribe connection,
//! put together (the types and counters are the metrics module's).

use std::sync::atomic::Ordering;

use crate::control_loop::shared::Shared;
use crate::metrics::{ClusterMetrics, Holds, Metrics, RebuildCounts, Redirects, TopologyErrors};

/// A snapshot of `s`'s metrics; with the cluster's section unless `s` is
/// a fixed placement (servers).
pub(crate) fn snapshot(s: &Shared) -> Metrics {
    let c = &s.counters.cluster;
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let core = *s.core_stats.lock();
    let mut m = s.counters.snapshot(s.config.envelope);
    m.queue_depths = s.queues.iter().map(|q| q.depth()).collect();
    // Channels only: the pattern lanes come last.
    let channel_lanes = s.pattern_lane(0).unwrap_or(s.lanes_len());
    m.channels = s.registry.len_in(0..channel_lanes) as u64;
    m.received = g(&c.retired_received);
    m.dropped.queue_full = g(&c.retired_dropped);
    m.unenveloped = g(&c.retired_unenveloped);
    m.dropped.moved = s.lane_owners.late();
    m.probe_restarts += core.ping_restarts;
    m.reconnects = core.reconnects;
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
    if s.fixed() {
        return m;
    }
    let r = core.rebuilds;
    let t = core.topology_errors;
    m.cluster = Some(ClusterMetrics {
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
            version: t.version,
            fetch: t.fetch,
            parse: t.parse,
            probe: t.probe,
            connect: t.connect + g(&c.connect_errors),
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
    });
    m
}
