//! [`Metrics`] and [`ClusterMetrics`] in the Prometheus text exposition
//! format (version 0.0.4), with no dependency: append to a `String`, serve
//! it as `text/plain; version=0.0.4`.
//!
//! Names follow the usual conventions: the `shardsub_` prefix (and
//! `shardsub_cluster_` for what only a cluster counts), `_total` on
//! counters, base units (`_seconds`, `_bytes`), per-index values as labels
//! (`worker`, `server`), reasons and kinds as labels rather than names.
//! Every family has one `# HELP` and one `# TYPE` line. The lag histogram
//! (with the envelope) is `shardsub_lag_seconds` with cumulative
//! `_bucket{le=…}` lines, `_sum` and `_count`. Families that have no value
//! (the lag without the envelope, a cluster's restore times before the
//! first restore) are left out rather than written as zero.

use std::fmt::Display;
use std::time::Duration;

use crate::cluster::ClusterMetrics;
use crate::metrics::Metrics;

/// Writes families, one at a time, into a caller's buffer.
struct Out<'a> {
    out: &'a mut String,
}

impl Out<'_> {
    /// `# HELP` and `# TYPE` of a family.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        self.out.push_str("# HELP ");
        self.out.push_str(name);
        self.out.push(' ');
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        self.out.push_str("\n# TYPE ");
        self.out.push_str(name);
        self.out.push(' ');
        self.out.push_str(kind);
        self.out.push('\n');
    }

    /// One sample line (label values here are indices and fixed words:
    /// nothing to escape).
    fn sample(&mut self, name: &str, labels: &[(&str, &dyn Display)], value: impl Display) {
        use std::fmt::Write;
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                // Writing to a String cannot fail.
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// A family of one unlabelled sample.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// A family of samples labelled `label`.
    fn labelled<V: Display>(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        label: &str,
        values: impl IntoIterator<Item = (impl Display, V)>,
    ) {
        self.family(name, kind, help);
        for (l, v) in values {
            self.sample(name, &[(label, &l)], v);
        }
    }
}

/// Seconds, as Prometheus reads them.
fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Metrics {
    /// Appends these metrics to `out` in the Prometheus text format (see
    /// [`PubSub::render_prometheus`](crate::PubSub::render_prometheus)).
    pub fn to_prometheus(&self, out: &mut String) {
        let mut o = Out { out };
        let m = self;
        let c = "counter";
        let g = "gauge";
        o.single(
            "shardsub_published_total",
            c,
            "Publishes taken (sent, or held on a cluster).",
            m.published,
        );
        o.single(
            "shardsub_publish_errors_total",
            c,
            "Publishes that failed, at once or later where the outcome is known.",
            m.publish_errors,
        );
        o.single(
            "shardsub_received_messages_total",
            c,
            "Messages received from the servers (service probes excluded).",
            m.received,
        );
        o.single(
            "shardsub_delivered_messages_total",
            c,
            "Messages handed to the handler.",
            m.delivered,
        );
        o.single(
            "shardsub_unwanted_messages_total",
            c,
            "Messages of channels given up, received after unsubscribe and passed over.",
            m.unwanted,
        );
        o.single(
            "shardsub_recovered_messages_total",
            c,
            "Messages of recoverable channels delivered from their history after a gap, drop or offset jump.",
            m.recovered,
        );
        o.single(
            "shardsub_duplicate_messages_total",
            c,
            "Messages of recoverable channels passed over as already delivered (by offset).",
            m.duplicates,
        );
        o.single(
            "shardsub_unrecoverable_total",
            c,
            "Unrecoverable events: a recoverable channel's missed range was gone from its history.",
            m.unrecoverable,
        );
        o.labelled(
            "shardsub_dropped_messages_total",
            c,
            "Messages dropped, by reason (a full worker queue, shutdown, late from a connection their channel had left).",
            "reason",
            [
                ("queue_full", m.dropped.queue_full),
                ("shutdown", m.dropped.shutdown),
                ("moved", m.dropped.moved),
            ],
        );
        o.labelled(
            "shardsub_worker_queue_messages",
            g,
            "Messages waiting in each worker's queue.",
            "worker",
            m.queue_depths.iter().enumerate(),
        );
        o.single(
            "shardsub_subscribe_commands_total",
            c,
            "Subscribe commands sent (resubscribes included).",
            m.subscribe_commands,
        );
        o.single(
            "shardsub_unsubscribe_commands_total",
            c,
            "Unsubscribe commands sent.",
            m.unsubscribe_commands,
        );
        o.single(
            "shardsub_subscribe_errors_total",
            c,
            "Subscribe commands the server refused with an error reply.",
            m.subscribe_errors,
        );
        o.single(
            "shardsub_refused_channels_total",
            c,
            "Channels the server refused to subscribe.",
            m.refused_channels,
        );
        o.single(
            "shardsub_confirmations_total",
            c,
            "Subscribe confirmations received (one per channel per command).",
            m.confirmations,
        );
        o.single("shardsub_channels", g, "Channels wanted now.", m.channels);
        o.single(
            "shardsub_reconnects_total",
            c,
            "Subscribe connections re-established after a loss.",
            m.reconnects,
        );
        o.single(
            "shardsub_gaps_total",
            c,
            "Gap events handed to workers.",
            m.gaps,
        );
        o.single(
            "shardsub_gap_channels_total",
            c,
            "Channels named in gap events.",
            m.gap_channels,
        );
        o.single(
            "shardsub_probes_sent_total",
            c,
            "Liveness probes published.",
            m.probes_sent,
        );
        o.single(
            "shardsub_probe_restarts_total",
            c,
            "Connections restarted because a probe did not come back in time.",
            m.probe_restarts,
        );
        o.labelled(
            "shardsub_subscribe_connections_open",
            g,
            "Open subscribe connections per server (builder order; per node on a cluster).",
            "server",
            m.active_connections.iter().enumerate(),
        );
        o.single(
            "shardsub_unenveloped_messages_total",
            c,
            "Messages without the envelope while it was on.",
            m.unenveloped,
        );
        o.single(
            "shardsub_thread_panics_total",
            c,
            "The library's own threads that panicked (restart the instance on any).",
            m.thread_panics,
        );
        if let Some(lag) = &m.lag {
            let name = "shardsub_lag_seconds";
            o.family(name, "histogram", "End-to-end lag, publish to handler.");
            let bucket = "shardsub_lag_seconds_bucket";
            for (bound, below) in lag.buckets() {
                o.sample(bucket, &[("le", &seconds(bound))], below);
            }
            o.sample(bucket, &[("le", &"+Inf")], lag.count);
            o.sample("shardsub_lag_seconds_sum", &[], seconds(lag.sum));
            o.sample("shardsub_lag_seconds_count", &[], lag.count);
        }
    }
}

impl ClusterMetrics {
    /// Appends these metrics to `out` in the Prometheus text format: the
    /// delivery families of [`Metrics::to_prometheus`], then the cluster's
    /// own (`shardsub_cluster_…`).
    pub fn to_prometheus(&self, out: &mut String) {
        self.pubsub.to_prometheus(out);
        let mut o = Out { out };
        let m = self;
        let (c, g) = ("counter", "gauge");
        let r = &m.rebuilds;
        o.labelled(
            "shardsub_cluster_rebuilds_total",
            c,
            "Topology rebuilds, by trigger.",
            "trigger",
            [
                ("startup", r.startup),
                ("poll", r.poll),
                ("sunsubscribe", r.sunsubscribe),
                ("moved", r.moved),
                ("disconnect", r.disconnect),
                ("subscribe_error", r.subscribe_error),
                ("retry", r.retry),
                ("manual", r.manual),
            ],
        );
        let e = &m.topology_errors;
        o.labelled(
            "shardsub_cluster_topology_errors_total",
            c,
            "Topology errors, by the step that failed.",
            "stage",
            [
                ("version", e.version),
                ("fetch", e.fetch),
                ("parse", e.parse),
                ("probe", e.probe),
                ("connect", e.connect),
            ],
        );
        o.single(
            "shardsub_cluster_unknown_slot_owners",
            g,
            "Partitions whose slot had no reachable owner at the last rebuild.",
            m.unknown_slot_owners,
        );
        if let Some(d) = m.last_restore {
            o.single(
                "shardsub_cluster_last_restore_seconds",
                g,
                "From noticing a change to every wanted channel confirmed again, the last time.",
                seconds(d),
            );
        }
        if let Some(d) = m.max_restore {
            o.single(
                "shardsub_cluster_max_restore_seconds",
                g,
                "The longest restore so far.",
                seconds(d),
            );
        }
        o.single(
            "shardsub_cluster_restores_total",
            c,
            "Restores measured.",
            m.restores,
        );
        o.single(
            "shardsub_cluster_moved_partitions_total",
            c,
            "Partitions moved to another node by rewires.",
            m.moved_partitions,
        );
        o.single(
            "shardsub_cluster_subscribe_errors_total",
            c,
            "Subscribe commands a cluster node refused.",
            m.subscribe_errors,
        );
        let d = &m.redirects;
        o.labelled(
            "shardsub_cluster_redirects_total",
            c,
            "Publish redirects and refusals, by kind.",
            "kind",
            [
                ("moved", d.moved),
                ("ask", d.ask),
                ("try_again", d.try_again),
                ("cluster_down", d.cluster_down),
            ],
        );
        o.single(
            "shardsub_cluster_publish_failed_total",
            c,
            "Publishes that failed in the end.",
            m.publish_failed,
        );
        let h = &m.holds;
        for (name, help, v) in [
            (
                "shardsub_cluster_held_publishes_total",
                "Publishes held because their slot's owner was unreachable.",
                h.held,
            ),
            (
                "shardsub_cluster_hold_expired_total",
                "Held publishes that failed with OwnerUnreachable.",
                h.expired,
            ),
            (
                "shardsub_cluster_hold_full_total",
                "Publishes refused because the hold was full.",
                h.full,
            ),
            (
                "shardsub_cluster_route_gates_total",
                "Route changes that waited for a barrier on the old route.",
                h.gates,
            ),
            (
                "shardsub_cluster_route_gate_timeouts_total",
                "Route gates opened by their timeout instead of the barrier's reply.",
                h.gate_timeouts,
            ),
        ] {
            o.single(name, c, help, v);
        }
        o.single(
            "shardsub_cluster_held_messages",
            g,
            "Publishes held now.",
            h.messages,
        );
        o.single(
            "shardsub_cluster_held_bytes",
            g,
            "Channel and payload bytes of the publishes held now.",
            h.bytes,
        );
        o.single(
            "shardsub_cluster_nodes",
            g,
            "Primaries with a publish connection.",
            m.nodes,
        );
        o.single(
            "shardsub_cluster_subscribe_connections",
            g,
            "Subscribe connections open.",
            m.subscribe_connections,
        );
    }
}

#[cfg(test)]
mod tests;
