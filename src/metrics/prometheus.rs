//! [`Metrics`] in the Prometheus text exposition format (version 0.0.4),
//! with no dependency: append to a `String`, serve it as `text/plain;
//! version=0.0.4`.
//!
//! The families are one table, [`FAMILIES`]: a name, a help text, a type
//! and a getter that reads the family's samples from a snapshot; [`render`]
//! writes any such table. Names follow the usual conventions: the
//! `shardsub_` prefix (and `shardsub_cluster_` for what only a cluster
//! counts), `_total` on counters, base units (`_seconds`, `_bytes`),
//! per-index values as labels (`worker`, `server`), reasons and kinds as
//! labels rather than names. Every family has one `# HELP` and one
//! `# TYPE` line. The lag histogram (with the envelope) is
//! `shardsub_lag_seconds` with cumulative `_bucket{le=…}` lines, `_sum` and
//! `_count`. Families that have no value (the lag without the envelope, a
//! cluster's restore times before the first restore, the cluster's
//! families on servers) are left out rather than written as zero.

use std::fmt::{Display, Write};
use std::time::Duration;

use crate::metrics::{ClusterMetrics, LagSnapshot, Metrics};

/// A family's type.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// The word on the `# TYPE` line.
    fn word(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One sample's value.
#[derive(Copy, Clone, Debug)]
enum Num {
    /// A count (written as an integer).
    Count(u64),
    /// A duration, written in seconds.
    Seconds(Duration),
}

impl Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::Count(n) => n.fmt(f),
            Num::Seconds(d) => d.as_secs_f64().fmt(f),
        }
    }
}

/// A label value: a fixed word (a reason, a kind), an index (a worker, a
/// server) or a histogram bucket's bound (in seconds).
#[derive(Copy, Clone, Debug)]
enum Label {
    Word(&'static str),
    Index(usize),
    Bound(Duration),
}

/// What a getter reads from a snapshot: the family's samples.
enum Samples<'a> {
    /// No value now: the family is left out.
    Absent,
    /// One unlabelled sample.
    One(Num),
    /// One sample per value of the label named first (none: the family's
    /// `# HELP` and `# TYPE` alone).
    Labelled(&'static str, Vec<(Label, Num)>),
    /// Cumulative buckets, `_sum` and `_count`.
    Histogram(&'a LagSnapshot),
}

/// One family of the table.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    get: fn(&Metrics) -> Samples<'_>,
}

/// One count.
fn count(n: u64) -> Samples<'static> {
    Samples::One(Num::Count(n))
}

/// One size (a count of things held now).
fn size(n: usize) -> Samples<'static> {
    count(n as u64)
}

/// Samples labelled `label` with fixed words.
fn by_word<const N: usize>(
    label: &'static str,
    values: [(&'static str, u64); N],
) -> Samples<'static> {
    let values = values
        .into_iter()
        .map(|(w, n)| (Label::Word(w), Num::Count(n)));
    Samples::Labelled(label, values.collect())
}

/// Samples labelled `label` with their index.
fn by_index(label: &'static str, values: &[usize]) -> Samples<'static> {
    let values = values.iter().enumerate();
    Samples::Labelled(
        label,
        values
            .map(|(i, &n)| (Label::Index(i), Num::Count(n as u64)))
            .collect(),
    )
}

/// A family of the cluster's section: absent on servers.
fn cluster<'a>(m: &'a Metrics, get: impl FnOnce(&'a ClusterMetrics) -> Samples<'a>) -> Samples<'a> {
    m.cluster.as_ref().map_or(Samples::Absent, get)
}

/// A cluster's duration gauge: absent until measured.
fn cluster_seconds(
    m: &Metrics,
    get: impl FnOnce(&ClusterMetrics) -> Option<Duration>,
) -> Samples<'_> {
    cluster(m, |c| {
        get(c).map_or(Samples::Absent, |d| Samples::One(Num::Seconds(d)))
    })
}

/// Every family, in the order written.
const FAMILIES: &[Family] = &[
    Family {
        name: "shardsub_published_total",
        help: "Publishes taken (sent, or held on a cluster).",
        kind: Kind::Counter,
        get: |m| count(m.published),
    },
    Family {
        name: "shardsub_publish_errors_total",
        help: "Publishes that failed, at once or later where the outcome is known.",
        kind: Kind::Counter,
        get: |m| count(m.publish_errors),
    },
    Family {
        name: "shardsub_received_messages_total",
        help: "Messages received from the servers (service probes excluded).",
        kind: Kind::Counter,
        get: |m| count(m.received),
    },
    Family {
        name: "shardsub_delivered_messages_total",
        help: "Messages handed to the handler.",
        kind: Kind::Counter,
        get: |m| count(m.delivered),
    },
    Family {
        name: "shardsub_unwanted_messages_total",
        help: "Messages of channels given up, received after unsubscribe and passed over.",
        kind: Kind::Counter,
        get: |m| count(m.unwanted),
    },
    Family {
        name: "shardsub_recovered_messages_total",
        help: "Messages of recoverable channels delivered from their history after a gap, drop or offset jump.",
        kind: Kind::Counter,
        get: |m| count(m.recovered),
    },
    Family {
        name: "shardsub_duplicate_messages_total",
        help: "Messages of recoverable channels passed over as already delivered (by offset).",
        kind: Kind::Counter,
        get: |m| count(m.duplicates),
    },
    Family {
        name: "shardsub_unrecoverable_total",
        help: "Unrecoverable events: a recoverable channel's missed range was gone from its history.",
        kind: Kind::Counter,
        get: |m| count(m.unrecoverable),
    },
    Family {
        name: "shardsub_dropped_messages_total",
        help: "Messages dropped, by reason (a full worker queue, shutdown, late from a connection their channel had left).",
        kind: Kind::Counter,
        get: |m| {
            let d = &m.dropped;
            by_word(
                "reason",
                [
                    ("queue_full", d.queue_full),
                    ("shutdown", d.shutdown),
                    ("moved", d.moved),
                ],
            )
        },
    },
    Family {
        name: "shardsub_worker_queue_messages",
        help: "Messages waiting in each worker's queue.",
        kind: Kind::Gauge,
        get: |m| by_index("worker", &m.queue_depths),
    },
    Family {
        name: "shardsub_subscribe_commands_total",
        help: "Subscribe commands sent (resubscribes included).",
        kind: Kind::Counter,
        get: |m| count(m.subscribe_commands),
    },
    Family {
        name: "shardsub_unsubscribe_commands_total",
        help: "Unsubscribe commands sent.",
        kind: Kind::Counter,
        get: |m| count(m.unsubscribe_commands),
    },
    Family {
        name: "shardsub_subscribe_errors_total",
        help: "Subscribe commands the server refused with an error reply.",
        kind: Kind::Counter,
        get: |m| count(m.subscribe_errors),
    },
    Family {
        name: "shardsub_refused_channels_total",
        help: "Channels the server refused to subscribe.",
        kind: Kind::Counter,
        get: |m| count(m.refused_channels),
    },
    Family {
        name: "shardsub_confirmations_total",
        help: "Subscribe confirmations received (one per channel per command).",
        kind: Kind::Counter,
        get: |m| count(m.confirmations),
    },
    Family {
        name: "shardsub_channels",
        help: "Channels wanted now.",
        kind: Kind::Gauge,
        get: |m| count(m.channels),
    },
    Family {
        name: "shardsub_reconnects_total",
        help: "Subscribe connections re-established after a loss.",
        kind: Kind::Counter,
        get: |m| count(m.reconnects),
    },
    Family {
        name: "shardsub_gaps_total",
        help: "Gap events handed to workers.",
        kind: Kind::Counter,
        get: |m| count(m.gaps),
    },
    Family {
        name: "shardsub_gap_channels_total",
        help: "Channels named in gap events.",
        kind: Kind::Counter,
        get: |m| count(m.gap_channels),
    },
    Family {
        name: "shardsub_probes_sent_total",
        help: "Liveness probes published.",
        kind: Kind::Counter,
        get: |m| count(m.probes_sent),
    },
    Family {
        name: "shardsub_probe_restarts_total",
        help: "Connections restarted because a probe did not come back in time.",
        kind: Kind::Counter,
        get: |m| count(m.probe_restarts),
    },
    Family {
        name: "shardsub_subscribe_connections_open",
        help: "Open subscribe connections per server (builder order; per node on a cluster).",
        kind: Kind::Gauge,
        get: |m| by_index("server", &m.active_connections),
    },
    Family {
        name: "shardsub_unenveloped_messages_total",
        help: "Messages without the envelope while it was on.",
        kind: Kind::Counter,
        get: |m| count(m.unenveloped),
    },
    Family {
        name: "shardsub_thread_panics_total",
        help: "The library's own threads that panicked (restart the instance on any).",
        kind: Kind::Counter,
        get: |m| count(m.thread_panics),
    },
    Family {
        name: "shardsub_slow_turns_total",
        help: "Turns of the handler or the control loop that held a shared runtime thread for 200 ms or more.",
        kind: Kind::Counter,
        get: |m| count(m.slow_turns),
    },
    Family {
        name: "shardsub_lag_seconds",
        help: "End-to-end lag, publish to handler.",
        kind: Kind::Histogram,
        get: |m| m.lag.as_ref().map_or(Samples::Absent, Samples::Histogram),
    },
    Family {
        name: "shardsub_cluster_rebuilds_total",
        help: "Topology rebuilds, by trigger.",
        kind: Kind::Counter,
        get: |m| {
            cluster(m, |c| {
                let r = &c.rebuilds;
                by_word(
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
                )
            })
        },
    },
    Family {
        name: "shardsub_cluster_topology_errors_total",
        help: "Topology errors, by the step that failed.",
        kind: Kind::Counter,
        get: |m| {
            cluster(m, |c| {
                let e = &c.topology_errors;
                by_word(
                    "stage",
                    [
                        ("version", e.version),
                        ("fetch", e.fetch),
                        ("parse", e.parse),
                        ("probe", e.probe),
                        ("connect", e.connect),
                    ],
                )
            })
        },
    },
    Family {
        name: "shardsub_cluster_unknown_slot_owners",
        help: "Partitions whose slot had no reachable owner at the last rebuild.",
        kind: Kind::Gauge,
        get: |m| cluster(m, |c| count(c.unknown_slot_owners)),
    },
    Family {
        name: "shardsub_cluster_last_restore_seconds",
        help: "From noticing a change to every wanted channel confirmed again, the last time.",
        kind: Kind::Gauge,
        get: |m| cluster_seconds(m, |c| c.last_restore),
    },
    Family {
        name: "shardsub_cluster_max_restore_seconds",
        help: "The longest restore so far.",
        kind: Kind::Gauge,
        get: |m| cluster_seconds(m, |c| c.max_restore),
    },
    Family {
        name: "shardsub_cluster_restores_total",
        help: "Restores measured.",
        kind: Kind::Counter,
        get: |m| cluster(m, |c| count(c.restores)),
    },
    Family {
        name: "shardsub_cluster_moved_partitions_total",
        help: "Partitions moved to another node by rewires.",
        kind: Kind::Counter,
        get: |m| cluster(m, |c| count(c.moved_partitions)),
    },
    Family {
        name: "shardsub_cluster_subscribe_errors_total",
        help: "Subscribe commands a cluster node refused.",
        kind: Kind::Counter,
        get: |m| cluster(m, |c| count(c.subscribe_errors)),
    },
    Family {
        name: "shardsub_cluster_redirects_total",
        help: "Publish redirects and refusals, by kind.",
        kind: Kind::Counter,
        get: |m| {
            cluster(m, |c| {
                let d = &c.redirects;
                by_word(
                    "kind",
                    [
                        ("moved", d.moved),
                        ("ask", d.ask),
                        ("try_again", d.try_again),
                        ("cluster_down", d.cluster_down),
                    ],
                )
            })
        },
    },
    Family {
        name: "shardsub_cluster_publish_failed_total",
        help: "Publishes that failed in the end.",
        kind: Kind::Counter,
        get: |m| cluster(m, |c| count(c.publish_failed)),
    },
    Family {
        name: "shardsub_cluster_held_publishes_total",
        help: "Publishes held because their slot's owner was unreachable.",
        kind: Kind::Counter,
        get: |m| cluster(m, |c| count(c.holds.held)),
    },
    Family {
        name: "shardsub_cluster_hold_expired_total",
        help: "Held publishes that failed with OwnerUnreachable.",
        kind: Kind::Counter,
        get: |m| cluster(m, |c| count(c.holds.expired)),
    },
    Family {
        name: "shardsub_cluster_hold_full_total",
        help: "Publishes refused because the hold was full.",
        kind: Kind::Counter,
        get: |m| cluster(m, |c| count(c.holds.full)),
    },
    Family {
        name: "shardsub_cluster_route_gates_total",
        help: "Route changes that waited for a barrier on the old route.",
        kind: Kind::Counter,
        get: |m| cluster(m, |c| count(c.holds.gates)),
    },
    Family {
        name: "shardsub_cluster_route_gate_timeouts_total",
        help: "Route gates opened by their timeout instead of the barrier's reply.",
        kind: Kind::Counter,
        get: |m| cluster(m, |c| count(c.holds.gate_timeouts)),
    },
    Family {
        name: "shardsub_cluster_held_messages",
        help: "Publishes held now.",
        kind: Kind::Gauge,
        get: |m| cluster(m, |c| size(c.holds.messages)),
    },
    Family {
        name: "shardsub_cluster_held_bytes",
        help: "Channel and payload bytes of the publishes held now.",
        kind: Kind::Gauge,
        get: |m| cluster(m, |c| size(c.holds.bytes)),
    },
    Family {
        name: "shardsub_cluster_nodes",
        help: "Primaries with a publish connection.",
        kind: Kind::Gauge,
        get: |m| cluster(m, |c| size(c.nodes)),
    },
    Family {
        name: "shardsub_cluster_subscribe_connections",
        help: "Subscribe connections open.",
        kind: Kind::Gauge,
        get: |m| cluster(m, |c| size(c.subscribe_connections)),
    },
];

/// Appends `text` with `\` and newline escaped (and `"` too in a label
/// value, `quote`).
fn escaped(out: &mut String, text: &str, quote: bool) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// One sample line: `name` and `suffix`, the label if any, the value.
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    label: Option<(&str, Label)>,
    value: impl Display,
) {
    out.push_str(name);
    out.push_str(suffix);
    if let Some((key, value)) = label {
        out.push('{');
        out.push_str(key);
        out.push_str("=\"");
        match value {
            Label::Word(w) => escaped(out, w, true),
            // Writing to a String cannot fail.
            Label::Index(i) => _ = write!(out, "{i}"),
            Label::Bound(d) => _ = write!(out, "{}", Num::Seconds(d)),
        }
        out.push_str("\"}");
    }
    _ = writeln!(out, " {value}");
}

/// Writes the families of `table` that have a value in `m`, in order.
fn render(table: &[Family], m: &Metrics, out: &mut String) {
    for family in table {
        let samples = (family.get)(m);
        if matches!(samples, Samples::Absent) {
            continue;
        }
        let name = family.name;
        out.push_str("# HELP ");
        out.push_str(name);
        out.push(' ');
        escaped(out, family.help, false);
        out.push_str("\n# TYPE ");
        out.push_str(name);
        out.push(' ');
        out.push_str(family.kind.word());
        out.push('\n');
        match samples {
            Samples::Absent => {}
            Samples::One(v) => sample(out, name, "", None, v),
            Samples::Labelled(label, values) => {
                for (l, v) in values {
                    sample(out, name, "", Some((label, l)), v);
                }
            }
            Samples::Histogram(h) => {
                for (bound, below) in h.buckets() {
                    sample(
                        out,
                        name,
                        "_bucket",
                        Some(("le", Label::Bound(bound))),
                        below,
                    );
                }
                sample(
                    out,
                    name,
                    "_bucket",
                    Some(("le", Label::Word("+Inf"))),
                    h.count,
                );
                sample(out, name, "_sum", None, Num::Seconds(h.sum));
                sample(out, name, "_count", None, h.count);
            }
        }
    }
}

impl Metrics {
    /// Appends these metrics to `out` in the Prometheus text format (see
    /// [`PubSub::render_prometheus`](crate::PubSub::render_prometheus)):
    /// the delivery families, then on a cluster its own
    /// (`shardsub_cluster_…`).
    pub fn to_prometheus(&self, out: &mut String) {
        render(FAMILIES, self, out);
    }
}

#[cfg(test)]
mod tests;
