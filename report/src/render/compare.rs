//! The same scenario in several modes: one side-by-side table, a short
//! "which mode to pick" derived from the numbers, and bar charts.

use super::run::page;
use super::tables::{count, fixed, flag, ms, Cell, Table};
use crate::chart::{bar_chart, escape, fmt_num, BarChart};
use crate::model::{CompareReport, RunReport};

/// What one run comes to, for side-by-side tables.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    pub mode: String,
    pub masters: usize,
    pub published_per_s: f64,
    pub delivered_per_s: f64,
    pub lag_p50_us: u64,
    pub lag_p99_us: u64,
    /// Most subscribing connections on one primary.
    pub sub_conns_per_primary: u64,
    /// Most connections on one node.
    pub conns_per_node: u64,
    /// Most SSUBSCRIBE + SUBSCRIBE calls on one node.
    pub sub_calls_per_node: u64,
    /// True when nothing was lost silently, duplicated or reordered and
    /// the run's own checks passed.
    pub clean: bool,
}

/// The smallest lag with at least `q` of the deliveries at or under it
/// (None for an empty CDF).
pub(crate) fn quantile(cdf: &[(u64, f64)], q: f64) -> Option<u64> {
    cdf.iter()
        .find(|&&(_, f)| f >= q)
        .or(cdf.last())
        .map(|&(us, _)| us)
}

/// Summarizes one run.
pub(crate) fn summarize(r: &RunReport) -> Summary {
    // Rates from the samples: the totals also count the demo's last
    // (settling) round, which is not part of the timed publishing.
    let secs = r.meta.seconds as f64;
    let per_s = |n: u64, field: fn(&crate::Sample) -> f64| {
        if !r.samples.is_empty() {
            r.samples
                .iter()
                .map(field)
                .filter(|v| v.is_finite())
                .sum::<f64>()
                / r.samples.len() as f64
        } else if secs > 0.0 {
            n as f64 / secs
        } else {
            0.0
        }
    };
    let mut p99s: Vec<u64> = r.samples.iter().map(|s| s.lag_p99_us).collect();
    p99s.sort_unstable();
    let mut p50s: Vec<u64> = r.samples.iter().map(|s| s.lag_p50_us).collect();
    p50s.sort_unstable();
    let mid = |v: &[u64]| v.get(v.len() / 2).copied().unwrap_or(0);
    let primaries = r.nodes.iter().filter(|n| n.role != "replica");
    let t = &r.totals;
    Summary {
        mode: r.meta.mode.clone(),
        masters: r.meta.masters,
        published_per_s: per_s(t.published, |s| s.published_per_s),
        delivered_per_s: per_s(t.delivered, |s| s.delivered_per_s),
        lag_p50_us: quantile(&r.lag_cdf, 0.5).unwrap_or_else(|| mid(&p50s)),
        lag_p99_us: quantile(&r.lag_cdf, 0.99).unwrap_or_else(|| mid(&p99s)),
        sub_conns_per_primary: primaries
            .map(|n| n.subscribe_connections)
            .max()
            .unwrap_or(0),
        conns_per_node: r.nodes.iter().map(|n| n.connections).max().unwrap_or(0),
        sub_calls_per_node: r
            .nodes
            .iter()
            .map(|n| n.ssubscribe_calls + n.subscribe_calls)
            .max()
            .unwrap_or(0),
        clean: t.lost_silent == 0
            && t.duplicated == 0
            && t.reordered == 0
            && r.result.starts_with("ok"),
    }
}

/// The side-by-side table: one column per run, one row per measure.
pub(crate) fn table(runs: &[RunReport]) -> Table {
    const ROWS: [&str; 17] = [
        "servers",
        "knee (published msg/s)",
        "CPU µs per delivered msg at the knee's held step (server + client)",
        "published/s (mean)",
        "delivered/s (mean)",
        "lag p50",
        "lag p99",
        "client CPU s per 1M delivered",
        "server CPU s per 1M delivered",
        "connections per node (max)",
        "subscribing connections per primary (max)",
        "subscribe calls per node (max)",
        "lost silently (must be 0)",
        "lost, signalled",
        "duplicated / reordered",
        "drops",
        "result",
    ];
    let columns: Vec<Vec<Cell>> = runs
        .iter()
        .map(|r| {
            let s = summarize(r);
            let x = &r.totals;
            vec![
                servers(r).into(),
                knee_cell(r).into(),
                held(r)
                    .map_or("–".into(), |(_, s, c)| {
                        format!("{} + {}", fixed(s, 2), fixed(c, 2))
                    })
                    .into(),
                fmt_num(s.published_per_s).into(),
                fmt_num(s.delivered_per_s).into(),
                ms(s.lag_p50_us).into(),
                ms(s.lag_p99_us).into(),
                fixed(x.client_cpu_s_per_million, 2).into(),
                fixed(x.server_cpu_s_per_million, 2).into(),
                count(s.conns_per_node).into(),
                count(s.sub_conns_per_primary).into(),
                count(s.sub_calls_per_node).into(),
                flag(count(x.lost_silent), x.lost_silent > 0),
                count(x.lost_signalled).into(),
                flag(
                    format!("{} / {}", count(x.duplicated), count(x.reordered)),
                    x.duplicated + x.reordered > 0,
                ),
                count(x.drops).into(),
                flag(short(&r.result), !r.result.starts_with("ok")),
            ]
        })
        .collect();
    let mut head = vec!["mode"];
    head.extend(runs.iter().map(|r| r.meta.mode.as_str()));
    let mut t = Table::new(&head);
    for (i, name) in ROWS.iter().enumerate() {
        let mut row: Vec<Cell> = vec![(*name).into()];
        row.extend(
            columns
                .iter()
                .map(|c| c.get(i).cloned().unwrap_or_else(|| "".into())),
        );
        t.row(row);
    }
    if runs.is_empty() {
        t.rows.clear();
    }
    t
}

/// A result cut to fit a table cell (the whole text is in the pick list).
fn short(result: &str) -> String {
    const MAX: usize = 60;
    if result.chars().count() <= MAX {
        result.to_string()
    } else {
        let cut: String = result.chars().take(MAX).collect();
        format!("{cut}… (see below)")
    }
}

/// The run's servers in words, from what the nodes reported.
fn servers(r: &RunReport) -> String {
    let m = &r.meta;
    if !r.nodes.is_empty() && r.nodes.iter().all(|n| n.role == "server") {
        format!("{} standalone", r.nodes.len())
    } else {
        format!("{} primaries × {} replica(s)", m.masters, m.replicas)
    }
}

/// The knee's held step of a ramped run, with CPU measured there:
/// (published msg/s held, server µs, client µs per delivered message).
fn held(r: &RunReport) -> Option<(f64, f64, f64)> {
    r.meta.ramp?;
    let h = r.knee.as_ref()?.held.as_ref()?;
    Some((
        h.published_per_s,
        h.server_cpu_us_per_msg?,
        h.client_cpu_us_per_msg?,
    ))
}

/// The knee column: where it was, or that the ramp ended first.
fn knee_cell(r: &RunReport) -> String {
    match (&r.meta.ramp, &r.knee) {
        (None, _) => "no ramp".into(),
        (Some(_), None) => "not computed".into(),
        (Some(_), Some(k)) if k.reason == "not reached" => {
            format!("not reached (≥ {})", fmt_num(k.rate))
        }
        (Some(_), Some(k)) => format!("{} ({})", fmt_num(k.rate), k.reason),
    }
}

type Clean<'a> = (&'a RunReport, Summary);

/// Flat-rate runs: the least CPU per million among those that kept lag p99
/// within twice the best and delivered at least 95 % of the best rate.
fn pick_flat<'a>(clean: &'a [Clean<'a>], out: &mut Vec<String>) -> Option<&'a Clean<'a>> {
    let best_p99 = clean.iter().map(|(_, s)| s.lag_p99_us).min().unwrap_or(0);
    let best_rate = clean
        .iter()
        .map(|(_, s)| s.delivered_per_s)
        .fold(0.0, f64::max);
    let fit = clean
        .iter()
        .filter(|(_, s)| {
            s.lag_p99_us <= best_p99.saturating_mul(2).max(1)
                && s.delivered_per_s >= best_rate * 0.95
        })
        .min_by(|a, b| cpu(a.0).total_cmp(&cpu(b.0)));
    let (winner, ws) = fit?;
    out.push(format!(
        "Pick {}: it delivered {} msg/s with lag p99 {} for {} s of CPU per million delivered \
         ({} s server + {} s client), the least among the modes that kept lag p99 within twice \
         the best ({}) and delivered at least 95 % of the best rate.",
        ws.mode,
        fmt_num(ws.delivered_per_s),
        ms(ws.lag_p99_us),
        fixed(cpu(winner), 2),
        fixed(winner.totals.server_cpu_s_per_million, 2),
        fixed(winner.totals.client_cpu_s_per_million, 2),
        ms(best_p99)
    ));
    for (r, s) in clean.iter().filter(|(r, _)| !std::ptr::eq(*r, *winner)) {
        let extra = if cpu(winner) > 0.0 {
            (cpu(r) / cpu(winner) - 1.0) * 100.0
        } else {
            f64::NAN
        };
        let tie = if extra.abs() < 5.0 {
            " (within 5 %: a tie at this load)"
        } else {
            ""
        };
        out.push(format!(
            "{}: {} s of CPU per million delivered ({}{} % against {}){tie}, lag p99 {}, {} \
             subscribing connections on the busiest primary (against {}), {} subscribe calls on \
             the busiest node.",
            s.mode,
            fixed(cpu(r), 2),
            if extra >= 0.0 { "+" } else { "" },
            fixed(extra, 0),
            ws.mode,
            ms(s.lag_p99_us),
            s.sub_conns_per_primary,
            ws.sub_conns_per_primary,
            count(s.sub_calls_per_node)
        ));
    }
    fit
}

/// Ramped runs: among those that held at least 90 % of the highest rate
/// before the knee, the least CPU per delivered message at the held step.
fn pick_at_knee<'a>(clean: &'a [Clean<'a>], out: &mut Vec<String>) -> Option<&'a Clean<'a>> {
    let point = |r: &RunReport| held(r).unwrap_or((0.0, f64::INFINITY, f64::INFINITY));
    let us = |r: &RunReport| {
        let (_, s, c) = point(r);
        s + c
    };
    let best = clean.iter().map(|(r, _)| point(r).0).fold(0.0, f64::max);
    let fit = clean
        .iter()
        .filter(|(r, _)| point(r).0 >= best * 0.9)
        .min_by(|a, b| us(a.0).total_cmp(&us(b.0)))?;
    let (w, ws) = fit;
    let (rate, server, client) = point(w);
    out.push(format!(
        "Pick {}: it held {} msg/s published before the knee (the most was {}; knee: {}) at \
         {} µs of CPU per delivered message there ({} µs server + {} µs client), the least \
         among the modes that held at least 90 % of the most.",
        ws.mode,
        fmt_num(rate),
        fmt_num(best),
        knee_cell(w),
        fixed(us(w), 2),
        fixed(server, 2),
        fixed(client, 2)
    ));
    for (r, s) in clean.iter().filter(|(r, _)| !std::ptr::eq(*r, *w)) {
        let extra = (us(r) / us(w) - 1.0) * 100.0;
        let tie = if extra.abs() < 5.0 {
            " (within 5 %: a tie at this load)"
        } else {
            ""
        };
        out.push(format!(
            "{}: held {} msg/s (knee: {}), {} µs per delivered message there ({}{} % against \
             {}){tie}, {} subscribing connections on the busiest primary (against {}).",
            s.mode,
            fmt_num(point(r).0),
            knee_cell(r),
            fixed(us(r), 2),
            if extra >= 0.0 { "+" } else { "" },
            fixed(extra, 0),
            ws.mode,
            s.sub_conns_per_primary,
            ws.sub_conns_per_primary
        ));
    }
    if clean
        .iter()
        .any(|(r, _)| r.knee.as_ref().is_some_and(|k| k.reason == "not reached"))
    {
        out.push(
            "Where the knee was not reached the ramp ended first: that mode holds at least \
             what it shows, and its CPU per message would fall further under more load."
                .into(),
        );
    }
    Some(fit)
}

/// CPU per million delivered, both sides (NaN-safe: non-finite is +∞).
fn cpu(r: &RunReport) -> f64 {
    let v = r.totals.client_cpu_s_per_million + r.totals.server_cpu_s_per_million;
    if v.is_finite() {
        v
    } else {
        f64::INFINITY
    }
}

/// "Which mode to pick", derived from the numbers: among clean runs that
/// kept lag p99 within twice the best and delivered at least 95 % of the
/// best rate, the one with the least CPU per million delivered.
pub(crate) fn pick(runs: &[RunReport]) -> Vec<String> {
    let mut out = Vec::new();
    let clean: Vec<(&RunReport, Summary)> = runs
        .iter()
        .map(|r| (r, summarize(r)))
        .filter(|(_, s)| s.clean)
        .collect();
    for r in runs.iter().filter(|r| !summarize(r).clean) {
        out.push(format!(
            "{} is out: {} (lost silently {}, duplicated {}, reordered {}).",
            r.meta.mode, r.result, r.totals.lost_silent, r.totals.duplicated, r.totals.reordered
        ));
    }
    let ramped = !clean.is_empty() && clean.iter().all(|(r, _)| held(r).is_some());
    let winner = if ramped {
        pick_at_knee(&clean, &mut out)
    } else {
        pick_flat(&clean, &mut out)
    };
    let Some((winner, ws)) = winner else {
        out.push("No mode ran clean: nothing to recommend.".into());
        return out;
    };
    let wm = &winner.meta;
    if wm.masters == 1 {
        out.push(format!(
            "{} ran on one server: every message went through one command loop, so it stops \
             scaling at one core; pick it only while the load fits one server with headroom.",
            ws.mode
        ));
    }
    if wm.replicas == 0 {
        out.push(format!(
            "{} ran without replicas: nothing takes over when a server fails.",
            ws.mode
        ));
    }
    let differ = |f: fn(&RunReport) -> String| {
        runs.iter()
            .map(f)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1
    };
    // Masters and replicas differ by mode (shards have no replicas,
    // single is one server); the scenario is the rest.
    if differ(|r| {
        let m = &r.meta;
        format!(
            "{} {} {} {} {} {:?} {} {} {} {}",
            m.server.kind,
            m.channels,
            m.partitions,
            m.engines,
            m.publishers,
            m.ramp,
            m.rate,
            m.payload,
            m.seconds,
            m.history
        )
    }) {
        out.push(
            "Warning: the runs did not all use the same scenario (server, channels, \
             partitions, engines, publishers, rate or ramp, payload, seconds or history \
             differ), so this comparison is not like for like."
                .into(),
        );
    }
    if runs.iter().any(|r| r.meta.local) {
        out.push(
            "Measured with servers and clients sharing this machine's cores: absolute rates are \
             lower than on dedicated machines; the ranking by CPU per message is what carries over."
                .into(),
        );
    }
    out
}

fn charts(runs: &[RunReport]) -> String {
    let modes: Vec<String> = runs.iter().map(|r| r.meta.mode.clone()).collect();
    let sums: Vec<Summary> = runs.iter().map(summarize).collect();
    let mut out = bar_chart(&BarChart {
        title: "CPU per million delivered messages, by mode".into(),
        x_label: "mode".into(),
        y_label: "CPU seconds per 1M delivered (s)".into(),
        categories: modes.clone(),
        series: vec![
            (
                "server (all nodes)".into(),
                runs.iter()
                    .map(|r| r.totals.server_cpu_s_per_million)
                    .collect(),
            ),
            (
                "client (demo process)".into(),
                runs.iter()
                    .map(|r| r.totals.client_cpu_s_per_million)
                    .collect(),
            ),
        ],
    });
    out.push_str(&bar_chart(&BarChart {
        title: "Lag over the whole run, by mode".into(),
        x_label: "mode".into(),
        y_label: "lag (ms)".into(),
        categories: modes.clone(),
        series: vec![
            (
                "p50".into(),
                sums.iter().map(|s| s.lag_p50_us as f64 / 1e3).collect(),
            ),
            (
                "p99".into(),
                sums.iter().map(|s| s.lag_p99_us as f64 / 1e3).collect(),
            ),
        ],
    }));
    out.push_str(&bar_chart(&BarChart {
        title: "Subscribing connections on the busiest primary, by mode".into(),
        x_label: "mode".into(),
        y_label: "connections".into(),
        categories: modes,
        series: vec![(
            "subscribing connections".into(),
            sums.iter()
                .map(|s| s.sub_conns_per_primary as f64)
                .collect(),
        )],
    }));
    out
}

fn scenario(runs: &[RunReport]) -> String {
    runs.first().map_or(String::new(), |r| {
        let m = &r.meta;
        format!(
            "{} {}, {} engines, {} channels in {} partitions, {} B payload, {} s, {}, on {} \
             CPUs ({}).",
            m.server.kind,
            m.server.version,
            m.engines,
            count(m.channels as u64),
            m.partitions,
            m.payload,
            m.seconds,
            match (&m.ramp, m.rate) {
                (Some(r), _) => format!(
                    "rate ramped from {} msg/s ×{} every {} s",
                    count(r.start),
                    r.factor,
                    r.step_s
                ),
                (None, 0) => "flat out".to_string(),
                (None, rate) => format!("at {} msg/s", count(rate)),
            },
            m.machine.cpus,
            if m.local {
                "servers and clients sharing the cores"
            } else {
                "servers elsewhere"
            }
        )
    })
}

/// The comparison as Markdown.
pub fn render_compare_markdown(c: &CompareReport) -> String {
    let mut out = String::from("# shardsub fleet demo: the modes side by side\n\n");
    out.push_str(&format!("Scenario: {}\n\n", scenario(&c.runs)));
    out.push_str(&table(&c.runs).markdown());
    out.push_str("\n## Which mode to pick\n\n");
    for line in pick(&c.runs) {
        out.push_str(&format!("- {line}\n"));
    }
    out.push_str(
        "\nEach mode's own report (plots included) is in its directory, `MODE/report.html`.\n",
    );
    out
}

/// The comparison as one self-contained HTML page.
pub fn render_compare_html(c: &CompareReport) -> String {
    let title = "shardsub fleet demo: the modes side by side";
    let mut b = format!("<h1>{title}</h1>\n");
    b.push_str(&format!(
        "<p>Scenario: {}</p>\n",
        escape(&scenario(&c.runs))
    ));
    b.push_str(&table(&c.runs).html());
    b.push_str("<h2>Which mode to pick</h2>\n<ul class=\"assume\">");
    for line in pick(&c.runs) {
        b.push_str(&format!("<li>{}</li>", escape(&line)));
    }
    b.push_str("</ul>\n<h2>By mode</h2>\n");
    b.push_str(&charts(&c.runs));
    b.push_str("<p>Each mode's own report, plots included:");
    for r in &c.runs {
        let m = escape(&r.meta.mode);
        b.push_str(&format!(" <a href=\"{m}/report.html\">{m}</a>"));
    }
    b.push_str("</p>");
    page(title, &b)
}
