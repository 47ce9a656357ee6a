//! The report's tables, built once and written as Markdown or HTML.

use crate::chart::{escape, fmt_num};
use crate::model::{RunReport, Step};
use crate::sizing::{sizing, Inputs, Sizing};

/// One table cell: its text and whether to flag it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cell {
    pub text: String,
    /// A value that must not be there (silent losses, failed checks).
    pub bad: bool,
}

impl<T: Into<String>> From<T> for Cell {
    fn from(text: T) -> Cell {
        Cell {
            text: text.into(),
            bad: false,
        }
    }
}

/// A flagged cell when `bad`.
pub(crate) fn flag(text: impl Into<String>, bad: bool) -> Cell {
    Cell {
        text: text.into(),
        bad,
    }
}

/// A table: header and rows of cells.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Table {
    pub head: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(head: &[&str]) -> Table {
        Table {
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    /// As a Markdown table; flagged cells in bold with a warning sign.
    pub fn markdown(&self) -> String {
        if self.rows.is_empty() {
            return "(none)\n".into();
        }
        let cell = |c: &Cell| {
            let t = c.text.replace('|', "\\|").replace('\n', " ");
            if c.bad {
                format!("**{t} ⚠**")
            } else {
                t
            }
        };
        let mut out = format!("| {} |\n", self.head.join(" | "));
        out.push_str(&format!("|{}\n", "---|".repeat(self.head.len())));
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(cell).collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        out
    }

    /// As an HTML table; flagged cells get class `bad`.
    pub fn html(&self) -> String {
        if self.rows.is_empty() {
            return "<p class=\"none\">(none)</p>\n".into();
        }
        let mut out = String::from("<table><thead><tr>");
        for h in &self.head {
            out.push_str(&format!("<th>{}</th>", escape(h)));
        }
        out.push_str("</tr></thead><tbody>");
        for row in &self.rows {
            out.push_str("<tr>");
            for c in row {
                let class = if c.bad { " class=\"bad\"" } else { "" };
                out.push_str(&format!("<td{class}>{}</td>", escape(&c.text)));
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>\n");
        out
    }
}

/// A count with thousands separators.
pub(crate) fn count(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A float with fixed decimals, `–` when not finite.
pub(crate) fn fixed(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "–".into()
    }
}

/// µs as ms with two decimals.
pub(crate) fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

/// The one-sentence machine note: says plainly when the cores were shared.
pub(crate) fn machine_note(r: &RunReport) -> String {
    let m = &r.meta;
    if m.local {
        format!(
            "Servers and clients shared this machine's {} CPUs: the demo started {} server \
             processes here next to its publisher and {} subscriber engines, so every figure \
             is for a shared machine. Per-core figures below come from the knee, not an idle run.",
            m.machine.cpus,
            r.nodes.len().max(m.masters * (1 + m.replicas)),
            m.engines
        )
    } else {
        "The servers ran elsewhere (--url); the clients had this machine to themselves.".into()
    }
}

/// The run's settings and machine, as rows.
pub(crate) fn settings(r: &RunReport) -> Table {
    let m = &r.meta;
    let mut t = Table::new(&["setting", "value"]);
    let mut kv = |k: &str, v: String| t.row(vec![k.into(), v.into()]);
    kv("date (UTC)", m.date_utc.clone());
    kv("commit", m.commit.clone());
    kv("mode", m.mode.clone());
    kv("server", format!("{} {}", m.server.kind, m.server.version));
    kv(
        "cluster",
        format!("{} primaries, {} replica(s) each", m.masters, m.replicas),
    );
    kv("subscriber engines (app nodes)", m.engines.to_string());
    kv("publishers", m.publishers.to_string());
    kv(
        "channels / partitions",
        format!("{} / {}", count(m.channels as u64), m.partitions),
    );
    kv("payload", format!("{} B", m.payload));
    kv("publishing", format!("{} s", m.seconds));
    let rate = match (&m.ramp, m.rate) {
        (Some(r), _) => format!(
            "ramp from {} msg/s, ×{} every {} s",
            count(r.start),
            r.factor,
            r.step_s
        ),
        (None, 0) => "flat out".into(),
        (None, rate) => format!("{} msg/s", count(rate)),
    };
    kv("target rate", rate);
    kv(
        "history (recoverable)",
        if m.history { "on" } else { "off" }.into(),
    );
    kv(
        "machine",
        format!(
            "{} CPUs, {}, {:.1} GiB",
            m.machine.cpus, m.machine.cpu_model, m.machine.ram_gib
        ),
    );
    kv(
        "servers",
        if m.local {
            "local: shared this machine's cores with the clients"
        } else {
            "remote (--url)"
        }
        .into(),
    );
    t
}

/// Totals; silent losses and failed results flagged.
pub(crate) fn totals(r: &RunReport) -> Table {
    let x = &r.totals;
    let mut t = Table::new(&["total", "value"]);
    let mut kv = |k: &str, v: Cell| t.row(vec![k.into(), v]);
    kv("published", count(x.published).into());
    kv("delivered", count(x.delivered).into());
    kv(
        "expected deliveries",
        flag(
            count(x.expected),
            x.delivered + x.lost_signalled < x.expected,
        ),
    );
    kv(
        "lost, signalled (gap events)",
        count(x.lost_signalled).into(),
    );
    kv(
        "lost silently (must be 0)",
        flag(count(x.lost_silent), x.lost_silent > 0),
    );
    kv("duplicated", flag(count(x.duplicated), x.duplicated > 0));
    kv("reordered", flag(count(x.reordered), x.reordered > 0));
    kv("recovered from history", count(x.recovered).into());
    kv("unrecoverable", count(x.unrecoverable).into());
    kv("gap events", count(x.gap_events).into());
    kv("drops (queues full, signalled)", count(x.drops).into());
    kv(
        "client CPU (library)",
        format!(
            "{} s ({} s per 1M delivered)",
            fixed(x.client_cpu_s, 2),
            fixed(x.client_cpu_s_per_million, 2)
        )
        .into(),
    );
    kv(
        "demo's own CPU (publishing loop, accounting)",
        format!("{} s", fixed(x.demo_cpu_s, 2)).into(),
    );
    kv(
        "server CPU",
        format!(
            "{} s ({} s per 1M delivered)",
            fixed(x.server_cpu_s, 2),
            fixed(x.server_cpu_s_per_million, 2)
        )
        .into(),
    );
    kv(
        "result",
        flag(r.result.clone(), !r.result.starts_with("ok")),
    );
    t
}

/// The faults, one row each.
pub(crate) fn faults(r: &RunReport) -> Table {
    let mut t = Table::new(&[
        "fault",
        "at (s)",
        "took (ms)",
        "what moved",
        "partitions moved",
        "gap events",
        "back after (ms)",
        "lost, signalled",
        "lost silently",
        "recovered",
    ]);
    for f in &r.faults {
        t.row(vec![
            f.kind.clone().into(),
            fixed(f.at_s, 1).into(),
            fixed(f.took_ms, 0).into(),
            f.detail.clone().into(),
            count(f.partitions_moved).into(),
            count(f.gap_events).into(),
            f.back_after_ms
                .map_or("not measured".into(), |v| fixed(v, 0))
                .into(),
            count(f.lost_signalled).into(),
            flag(count(f.lost_silent), f.lost_silent > 0),
            count(f.recovered).into(),
        ]);
    }
    t
}

/// Per server node.
pub(crate) fn nodes(r: &RunReport) -> Table {
    let mut t = Table::new(&[
        "node",
        "role",
        "partitions",
        "connections",
        "subscribing conns",
        "of subscriber instances",
        "SSUBSCRIBE calls",
        "SUBSCRIBE calls",
        "resubscribe calls (storm)",
        "PUBLISH calls",
        "server CPU (s)",
    ]);
    for n in &r.nodes {
        t.row(vec![
            n.addr.clone().into(),
            n.role.clone().into(),
            count(n.partitions_owned).into(),
            count(n.connections).into(),
            count(n.subscribe_connections).into(),
            count(n.engine_subscribe_connections).into(),
            count(n.ssubscribe_calls).into(),
            count(n.subscribe_calls).into(),
            n.resubscribe_calls.map_or("–".into(), count).into(),
            count(n.publish_calls).into(),
            fixed(n.server_cpu_s, 2).into(),
        ]);
    }
    t
}

/// One row per interval (the Markdown's stand-in for the plots).
pub(crate) fn samples(r: &RunReport) -> Table {
    let mut t = Table::new(&[
        "t (s)",
        "published/s",
        "delivered/s",
        "lag p50",
        "lag p99",
        "drops",
        "gaps",
        "conns",
        "rebuilds",
        "target/s",
    ]);
    for s in &r.samples {
        t.row(vec![
            fixed(s.t_s, 1).into(),
            fmt_num(s.published_per_s).into(),
            fmt_num(s.delivered_per_s).into(),
            ms(s.lag_p50_us).into(),
            ms(s.lag_p99_us).into(),
            count(s.drops).into(),
            count(s.gaps).into(),
            count(s.connections).into(),
            count(s.rebuilds).into(),
            if s.rate_target > 0.0 {
                fmt_num(s.rate_target)
            } else {
                "flat out".into()
            }
            .into(),
        ]);
    }
    t
}

/// The rate steps with their verdicts against the knee threshold.
pub(crate) fn steps(r: &RunReport, threshold_us: u64) -> (Table, Vec<Step>) {
    let steps: Vec<Step> = crate::steps(&r.samples)
        .into_iter()
        .map(crate::summarize)
        .collect();
    let mut t = Table::new(&[
        "target (msg/s)",
        "published/s",
        "delivered/s",
        "lag p99",
        "drops",
        "server µs/msg",
        "client µs/msg",
        "samples",
    ]);
    for s in &steps {
        let us = |v: Option<f64>| v.map_or("–".into(), |v| fixed(v, 2));
        t.row(vec![
            if s.rate_target > 0.0 {
                fmt_num(s.rate_target)
            } else {
                "flat out".into()
            }
            .into(),
            fmt_num(s.published_per_s).into(),
            fmt_num(s.delivered_per_s).into(),
            flag(ms(s.lag_p99_us), s.lag_p99_us > threshold_us),
            flag(count(s.drops), s.drops > 0),
            us(s.server_cpu_us_per_msg).into(),
            us(s.client_cpu_us_per_msg).into(),
            if s.judged == s.samples || s.judged == 0 {
                s.samples.to_string()
            } else {
                format!("{} ({} left out: a fault)", s.samples, s.samples - s.judged)
            }
            .into(),
        ]);
    }
    (t, steps)
}

/// The sizing answers: the run's own, or three round targets.
pub(crate) fn sizings(r: &RunReport) -> Vec<Sizing> {
    if let Some(s) = &r.sizing {
        return vec![s.clone()];
    }
    [100_000.0, 1_000_000.0, 10_000_000.0]
        .iter()
        .map(|&rate| sizing(&Inputs::from_run(r, rate)))
        .collect()
}

/// The sizing answers as a table.
pub(crate) fn sizing_table(all: &[Sizing], app_nodes: usize) -> Table {
    let mut t = Table::new(&[
        "target (msg/s published)",
        "deliveries/s",
        "primaries",
        "client cores, all nodes",
        "client cores per app node",
    ]);
    for s in all {
        let opt = |v: Option<u64>| v.map_or("not measured".into(), count);
        t.row(vec![
            fmt_num(s.target_rate).into(),
            fmt_num(s.deliveries_per_s).into(),
            opt(s.primaries).into(),
            s.client_cores_total
                .map_or("not measured".into(), |v| fixed(v, 1))
                .into(),
            format!("{} ({} nodes)", opt(s.client_cores_per_node), app_nodes).into(),
        ]);
    }
    t
}

/// The knee in one sentence.
pub(crate) fn knee_text(r: &RunReport) -> String {
    let (k, computed) = crate::run_knee(r);
    let mut prefix = String::new();
    if computed {
        prefix.push_str(&format!(
            "(The report carried no knee; computed here at a {} threshold.) ",
            ms(k.threshold_us)
        ));
    }
    if r.meta.ramp.is_none() {
        prefix.push_str("No --ramp: one rate only, so this is a point, not a knee search. ");
    }
    let held = k.held.as_ref().map_or(String::from("no step held"), |h| {
        let per_core = |us: Option<f64>| {
            us.filter(|u| *u > 0.0 && u.is_finite())
                .map(|u| fmt_num(1e6 / u))
        };
        let cores = match (
            per_core(h.server_cpu_us_per_msg),
            per_core(h.client_cpu_us_per_msg),
        ) {
            (Some(s), Some(c)) => format!(
                "; per core at that step: {s} deliveries/s per server core (all nodes), \
                 {c} deliveries/s per client core"
            ),
            _ => String::new(),
        };
        format!(
            "the last step that held published {} msg/s and delivered {} msg/s with lag p99 {}{cores}",
            fmt_num(h.published_per_s),
            fmt_num(h.delivered_per_s),
            ms(h.lag_p99_us)
        )
    });
    let text = match k.reason.as_str() {
        "not reached" => format!(
            "Knee not reached: lag p99 stayed under {} and nothing dropped up to {} msg/s; {held}.",
            ms(k.threshold_us),
            fmt_num(k.rate)
        ),
        reason => format!(
            "Knee at {} msg/s (step starting at {} s): {} (lag p99 {} against {}); {held}.",
            fmt_num(k.rate),
            fixed(k.at_s, 0),
            if reason == "drops" {
                "drops started"
            } else {
                "lag p99 crossed the threshold"
            },
            ms(k.lag_p99_us),
            ms(k.threshold_us)
        ),
    };
    prefix + &text
}
