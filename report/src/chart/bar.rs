//! Grouped bar charts: one group per category (a node), one bar per series.

use super::scale::{fmt_num, nice_ticks};
use super::{area, axis_labels, color, escape, legend, no_data, open};

/// A grouped bar chart.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BarChart {
    /// Title, drawn at the top.
    pub title: String,
    /// The x axis label (what the categories are).
    pub x_label: String,
    /// The y axis label, with its unit.
    pub y_label: String,
    /// Category names, drawn under each group; a `\n` starts a second line.
    pub categories: Vec<String>,
    /// `(name, one value per category)`; missing or non-finite values draw
    /// no bar.
    pub series: Vec<(String, Vec<f64>)>,
}

/// Renders `chart` as one `<svg>` element.
pub fn bar_chart(chart: &BarChart) -> String {
    let c = chart;
    let mut out = String::new();
    open(&mut out, &c.title);
    let ok = |v: &f64| v.is_finite() && *v >= 0.0;
    let max = c
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().copied().filter(ok))
        .fold(0.0, f64::max);
    let any = !c.categories.is_empty() && c.series.iter().any(|(_, v)| v.iter().any(ok));
    let (ticks, _) = nice_ticks(0.0, if max > 0.0 { max } else { 1.0 }, 5, max >= 5.0);
    let top = ticks.last().copied().unwrap_or(1.0).max(f64::MIN_POSITIVE);
    let (l, t, r, b) = area();
    let py = |v: f64| b - (v / top).clamp(0.0, 1.0) * (b - t);
    for v in &ticks {
        let y = py(*v);
        out.push_str(&format!(
            "<line x1=\"{l:.1}\" y1=\"{y:.1}\" x2=\"{r:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            l - 6.0,
            y + 4.0,
            fmt_num(*v)
        ));
    }
    out.push_str(&format!(
        "<rect x=\"{l:.1}\" y=\"{t:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#999\"/>",
        r - l,
        b - t
    ));
    axis_labels(&mut out, &c.x_label, &c.y_label);
    if !any {
        no_data(&mut out);
        out.push_str("</svg>");
        return out;
    }
    let groups = c.categories.len() as f64;
    let group_w = (r - l) / groups;
    let bars = c.series.len().max(1) as f64;
    let bar_w = (group_w * 0.8 / bars).min(60.0);
    let longest = c
        .categories
        .iter()
        .flat_map(|s| s.lines())
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0) as f64;
    let font = if longest * 6.6 > group_w { 9.5 } else { 12.0 };
    // Too crowded even small: the last `:`-part of the first line (a port),
    // rotated.
    let crowded = longest * 5.3 > group_w;
    for (g, name) in c.categories.iter().enumerate() {
        let gx = l + group_w * g as f64;
        let start = gx + (group_w - bar_w * bars) / 2.0;
        for (i, (_, values)) in c.series.iter().enumerate() {
            let Some(&v) = values.get(g).filter(|v| ok(v)) else {
                continue;
            };
            let x = start + bar_w * i as f64;
            let y = py(v);
            out.push_str(&format!(
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
                (bar_w - 2.0).max(1.0),
                (b - y).max(0.0),
                color(i),
                escape(&format!("{}: {}", name.replace('\n', " "), fmt_num(v)))
            ));
            if bar_w >= 18.0 {
                out.push_str(&format!(
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
                    x + bar_w / 2.0 - 1.0,
                    y - 3.0,
                    fmt_num(v)
                ));
            }
        }
        if crowded {
            let first = name.lines().next().unwrap_or("");
            let short = first.rsplit(':').next().unwrap_or(first);
            let short: String = short.chars().take(8).collect();
            let (x, y) = (gx + group_w / 2.0 + 3.0, b + 8.0);
            out.push_str(&format!(
                "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"end\" font-size=\"9\" \
                 transform=\"rotate(-60 {x:.1} {y:.1})\">{}</text>",
                escape(&short)
            ));
            continue;
        }
        for (k, line) in name.lines().enumerate() {
            out.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"{font}\">{}</text>",
                gx + group_w / 2.0,
                b + 15.0 + 12.0 * k as f64,
                escape(line)
            ));
        }
    }
    let names: Vec<(String, &str, bool)> = c
        .series
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.clone(), color(i), false))
        .collect();
    legend(&mut out, &names);
    out.push_str("</svg>");
    out
}
