//! The run's plots, as SVG strings.

use crate::chart::{bar_chart, line_chart, BarChart, LineChart, Marker, Scale, Series};
use crate::model::{RunReport, Step};

const TIME: &str = "time since publishing started (s)";

fn fault_markers(r: &RunReport) -> Vec<Marker> {
    r.faults
        .iter()
        .map(|f| Marker {
            at: f.at_s,
            label: format!("{} @ {:.0} s", f.kind, f.at_s),
        })
        .collect()
}

fn series(name: &str, points: Vec<(f64, f64)>, dashed: bool) -> Series {
    Series {
        name: name.into(),
        points,
        dashed,
    }
}

/// Published, delivered and target rate over time, faults marked.
pub(crate) fn throughput(r: &RunReport) -> String {
    let s = &r.samples;
    let mut lines = vec![
        series(
            "delivered/s (all engines)",
            s.iter().map(|x| (x.t_s, x.delivered_per_s)).collect(),
            false,
        ),
        series(
            "published/s",
            s.iter().map(|x| (x.t_s, x.published_per_s)).collect(),
            false,
        ),
    ];
    if s.iter().any(|x| x.rate_target > 0.0) {
        lines.push(series(
            "target publish rate",
            s.iter().map(|x| (x.t_s, x.rate_target)).collect(),
            true,
        ));
    }
    line_chart(&LineChart {
        title: "Throughput over time".into(),
        x_label: TIME.into(),
        y_label: "messages per second (msg/s)".into(),
        series: lines,
        x_markers: fault_markers(r),
        ..LineChart::default()
    })
}

/// Lag p50 and p99 over time (log y), faults and the threshold marked.
pub(crate) fn lag(r: &RunReport) -> String {
    let s = &r.samples;
    let ms = |us: u64| us as f64 / 1000.0;
    let threshold = r.knee.as_ref().map(|k| k.threshold_us).filter(|&t| t > 0);
    line_chart(&LineChart {
        title: "Publish-to-delivery lag over time".into(),
        x_label: TIME.into(),
        y_label: "lag (ms, log scale)".into(),
        y_scale: Scale::Log,
        series: vec![
            series(
                "lag p99",
                s.iter().map(|x| (x.t_s, ms(x.lag_p99_us))).collect(),
                false,
            ),
            series(
                "lag p50",
                s.iter().map(|x| (x.t_s, ms(x.lag_p50_us))).collect(),
                false,
            ),
        ],
        x_markers: fault_markers(r),
        y_markers: threshold
            .map(|t| Marker {
                at: ms(t),
                label: format!("knee threshold {} ms", ms(t)),
            })
            .into_iter()
            .collect(),
        y_zero: false,
        ..LineChart::default()
    })
}

/// The lag distribution over the whole run, log x.
pub(crate) fn cdf(r: &RunReport) -> String {
    line_chart(&LineChart {
        title: "Lag distribution over the whole run (CDF)".into(),
        x_label: "lag (ms, log scale)".into(),
        y_label: "deliveries with lag ≤ x (%)".into(),
        x_scale: Scale::Log,
        series: vec![series(
            "all deliveries",
            r.lag_cdf
                .iter()
                .map(|&(us, f)| (us as f64 / 1000.0, f * 100.0))
                .collect(),
            false,
        )],
        y_markers: vec![
            Marker {
                at: 50.0,
                label: "p50".into(),
            },
            Marker {
                at: 99.0,
                label: "p99".into(),
            },
        ],
        ..LineChart::default()
    })
}

/// Lag p99 and CPU per message against the rate, one point per step.
/// None with fewer than two steps (nothing to compare).
pub(crate) fn knee(r: &RunReport, steps: &[Step]) -> Option<(String, String)> {
    if steps.len() < 2 {
        return None;
    }
    let k = r.knee.as_ref();
    let marker = k.filter(|k| k.reason != "not reached").map(|k| Marker {
        at: k.rate,
        label: format!("knee ({})", k.reason),
    });
    let lag = line_chart(&LineChart {
        title: "Lag p99 against the publish rate, per ramp step".into(),
        x_label: "published (msg/s)".into(),
        y_label: "lag p99, lower median over the step (ms, log)".into(),
        y_scale: Scale::Log,
        series: vec![series(
            "lag p99",
            steps
                .iter()
                .map(|s| (s.published_per_s, s.lag_p99_us as f64 / 1000.0))
                .collect(),
            false,
        )],
        x_markers: marker.clone().into_iter().collect(),
        y_markers: k
            .map(|k| Marker {
                at: k.threshold_us as f64 / 1000.0,
                label: "threshold".into(),
            })
            .into_iter()
            .collect(),
        y_zero: false,
        dots: true,
        ..LineChart::default()
    });
    let per_msg = |f: fn(&Step) -> Option<f64>| -> Vec<(f64, f64)> {
        steps
            .iter()
            .filter_map(|s| f(s).map(|v| (s.published_per_s, v)))
            .collect()
    };
    let cpu = line_chart(&LineChart {
        title: "CPU per delivered message against the publish rate, per ramp step".into(),
        x_label: "published (msg/s)".into(),
        y_label: "CPU per delivered message (µs)".into(),
        series: vec![
            series(
                "server (all nodes)",
                per_msg(|s| s.server_cpu_us_per_msg),
                false,
            ),
            series(
                "client (demo process)",
                per_msg(|s| s.client_cpu_us_per_msg),
                false,
            ),
        ],
        x_markers: marker
            .into_iter()
            .chain(k.and_then(|k| k.held.as_ref()).map(|h| Marker {
                at: h.published_per_s,
                label: "used for sizing".into(),
            }))
            .collect(),
        dots: true,
        ..LineChart::default()
    });
    Some((lag, cpu))
}

fn node_names(r: &RunReport) -> Vec<String> {
    r.nodes
        .iter()
        .map(|n| format!("{}\n{}", n.addr, n.role))
        .collect()
}

/// Connections per node, total and subscribing.
pub(crate) fn connections(r: &RunReport) -> String {
    bar_chart(&BarChart {
        title: "Connections per server node (CLIENT LIST, at the end)".into(),
        x_label: "server node".into(),
        y_label: "connections".into(),
        categories: node_names(r),
        series: vec![
            (
                "all connections".into(),
                r.nodes.iter().map(|n| n.connections as f64).collect(),
            ),
            (
                "with subscriptions".into(),
                r.nodes
                    .iter()
                    .map(|n| n.subscribe_connections as f64)
                    .collect(),
            ),
            (
                "subscriber instances'".into(),
                r.nodes
                    .iter()
                    .map(|n| n.engine_subscribe_connections as f64)
                    .collect(),
            ),
        ],
    })
}

/// (Re)subscribe calls per node.
pub(crate) fn subscribe_calls(r: &RunReport) -> String {
    let mut series = vec![
        (
            "SSUBSCRIBE calls".into(),
            r.nodes.iter().map(|n| n.ssubscribe_calls as f64).collect(),
        ),
        (
            "SUBSCRIBE calls".into(),
            r.nodes.iter().map(|n| n.subscribe_calls as f64).collect(),
        ),
    ];
    if r.nodes.iter().any(|n| n.resubscribe_calls.is_some()) {
        series.push((
            "resubscribe calls in the storm window".into(),
            r.nodes
                .iter()
                .map(|n| n.resubscribe_calls.map_or(f64::NAN, |v| v as f64))
                .collect(),
        ));
    }
    bar_chart(&BarChart {
        title: "Subscribe commands per server node (INFO commandstats, over the run)".into(),
        x_label: "server node".into(),
        y_label: "commands".into(),
        categories: node_names(r),
        series,
    })
}
