//! One or more modes over a node count: throughput and server CPU per
//! message against the number of primaries.

use super::compare::summarize;
use super::run::page;
use super::tables::{count, fixed, ms, Table};
use crate::chart::{escape, fmt_num, line_chart, LineChart, Series};
use crate::model::{RunReport, ScalingReport};

/// Throughput for a scaling point: at the knee's held step when the run
/// ramped (its capacity), else the run's mean delivered rate.
fn throughput(r: &RunReport) -> (f64, &'static str) {
    match r.knee.as_ref().and_then(|k| k.held.as_ref()) {
        Some(h) if r.meta.ramp.is_some() => (h.delivered_per_s, "knee"),
        _ => (summarize(r).delivered_per_s, "mean"),
    }
}

/// Server CPU per delivered message, µs (= s per 1M): at the knee's held
/// step when measured there, else over the whole run.
fn server_us(r: &RunReport) -> (f64, &'static str) {
    match r
        .knee
        .as_ref()
        .and_then(|k| k.held.as_ref())
        .and_then(|h| h.server_cpu_us_per_msg)
    {
        Some(v) => (v, "knee"),
        None => (r.totals.server_cpu_s_per_million, "run"),
    }
}

fn table(all: &[ScalingReport]) -> Table {
    let mut t = Table::new(&[
        "mode",
        "primaries",
        "delivered/s",
        "from",
        "server CPU µs / delivered msg",
        "from",
        "client CPU s / 1M",
        "lag p99",
        "subscribing conns per primary (max)",
        "lost silently",
    ]);
    for s in all {
        for r in &s.runs {
            let (rate, rate_from) = throughput(r);
            let (us, us_from) = server_us(r);
            let sum = summarize(r);
            t.row(vec![
                s.mode.clone().into(),
                r.meta.masters.to_string().into(),
                fmt_num(rate).into(),
                rate_from.into(),
                fixed(us, 2).into(),
                us_from.into(),
                fixed(r.totals.client_cpu_s_per_million, 2).into(),
                ms(sum.lag_p99_us).into(),
                count(sum.sub_conns_per_primary).into(),
                super::tables::flag(count(r.totals.lost_silent), r.totals.lost_silent > 0),
            ]);
        }
    }
    t
}

fn charts(all: &[ScalingReport]) -> String {
    let curve = |f: fn(&RunReport) -> f64| -> Vec<Series> {
        all.iter()
            .map(|s| Series {
                name: s.mode.clone(),
                points: s
                    .runs
                    .iter()
                    .map(|r| (r.meta.masters as f64, f(r)))
                    .collect(),
                dashed: false,
            })
            .collect()
    };
    let mut out = line_chart(&LineChart {
        title: "Throughput against node count, per mode".into(),
        x_label: "primaries (nodes)".into(),
        y_label: "delivered (msg/s)".into(),
        series: curve(|r| throughput(r).0),
        integer_x: true,
        dots: true,
        ..LineChart::default()
    });
    out.push_str(&line_chart(&LineChart {
        title: "Server CPU per delivered message against node count, per mode".into(),
        x_label: "primaries (nodes)".into(),
        y_label: "server CPU per delivered message (µs)".into(),
        series: curve(|r| server_us(r).0),
        integer_x: true,
        dots: true,
        ..LineChart::default()
    }));
    out
}

const TITLE: &str = "shardsub fleet demo: scaling over the node count";

const NOTE: &str = "Throughput is the delivered rate at the knee's last held step when the \
    run ramped (\"knee\"), else the run's mean (\"mean\", a lower bound on capacity). Server \
    CPU per message is taken at the same step when measured per interval.";

/// The scaling series as Markdown.
pub fn render_scaling_markdown(all: &[ScalingReport]) -> String {
    let mut out = format!("# {TITLE}\n\n{NOTE}\n\n");
    out.push_str(&table(all).markdown());
    if all.iter().flat_map(|s| &s.runs).any(|r| r.meta.local) {
        out.push_str(
            "\nMeasured with servers and clients sharing this machine's cores: more nodes \
             on one machine share the same CPUs, so the curve flattens sooner than on \
             dedicated machines.\n",
        );
    }
    out
}

/// The scaling series as one self-contained HTML page.
pub fn render_scaling_html(all: &[ScalingReport]) -> String {
    let mut b = format!("<h1>{TITLE}</h1>\n<p>{}</p>\n", escape(NOTE));
    if all.iter().flat_map(|s| &s.runs).any(|r| r.meta.local) {
        b.push_str(
            "<p class=\"note\">Measured with servers and clients sharing this machine's cores: \
             more nodes on one machine share the same CPUs, so the curve flattens sooner than \
             on dedicated machines.</p>\n",
        );
    }
    b.push_str(&table(all).html());
    b.push_str(&charts(all));
    page(TITLE, &b)
}
