//! Line charts: several series over a linear or log x axis, with vertical
//! markers (faults) and horizontal ones (thresholds).

use super::scale::{fmt_num, log_ticks, nice_ticks, Scale};
use super::{area, axis_labels, color, escape, legend, no_data, open};

/// One line.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// The legend's name for it.
    pub name: String,
    /// `(x, y)` points, drawn in the given order; non-finite ones (and
    /// values ≤ 0 on a log axis) are skipped.
    pub points: Vec<(f64, f64)>,
    /// Dashed instead of solid.
    pub dashed: bool,
}

/// A labelled reference line across the plot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Marker {
    /// Where, in axis units.
    pub at: f64,
    /// Its label.
    pub label: String,
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// Title, drawn at the top.
    pub title: String,
    /// The x axis label, with its unit.
    pub x_label: String,
    /// The y axis label, with its unit.
    pub y_label: String,
    /// The x axis scale.
    pub x_scale: Scale,
    /// The y axis scale.
    pub y_scale: Scale,
    /// The lines.
    pub series: Vec<Series>,
    /// Vertical lines (e.g. faults), labelled at the top.
    pub x_markers: Vec<Marker>,
    /// Horizontal lines (e.g. a threshold), labelled at the right.
    pub y_markers: Vec<Marker>,
    /// Start a linear y axis at 0.
    pub y_zero: bool,
    /// Whole-number x ticks (node counts).
    pub integer_x: bool,
    /// Draw a dot at every point.
    pub dots: bool,
}

impl Default for LineChart {
    fn default() -> Self {
        LineChart {
            title: String::new(),
            x_label: String::new(),
            y_label: String::new(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: Vec::new(),
            x_markers: Vec::new(),
            y_markers: Vec::new(),
            y_zero: true,
            integer_x: false,
            dots: false,
        }
    }
}

/// One axis: its ticks and a value-to-pixel map.
struct Axis {
    scale: Scale,
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    labels: Vec<String>,
}

impl Axis {
    fn new(scale: Scale, values: &[f64], zero: bool, integer: bool) -> Axis {
        let finite = values.iter().copied().filter(|v| usable(scale, *v));
        let (mut lo, mut hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
        if lo > hi {
            (lo, hi) = if scale == Scale::Log {
                (1.0, 10.0)
            } else {
                (0.0, 1.0)
            };
        }
        match scale {
            Scale::Linear => {
                if zero {
                    lo = lo.min(0.0);
                }
                let (ticks, step) = nice_ticks(lo, hi, 5, integer);
                let labels = ticks.iter().map(|&t| tick_label(t, step)).collect();
                let lo = ticks.first().copied().unwrap_or(0.0);
                let hi = ticks.last().copied().unwrap_or(1.0);
                Axis {
                    scale,
                    lo,
                    hi,
                    ticks,
                    labels,
                }
            }
            Scale::Log => {
                let ticks = log_ticks(lo, hi);
                let labels = ticks.iter().map(|&t| fmt_num(t)).collect();
                Axis {
                    scale,
                    lo: ticks.first().copied().unwrap_or(1.0),
                    hi: ticks.last().copied().unwrap_or(10.0),
                    ticks,
                    labels,
                }
            }
        }
    }

    /// Where `v` falls, 0..=1 along the axis (clamped).
    fn frac(&self, v: f64) -> f64 {
        let f = match self.scale {
            Scale::Linear => (v - self.lo) / (self.hi - self.lo),
            Scale::Log => (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10()),
        };
        if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
}

/// A tick label with no more decimals than the step needs.
fn tick_label(v: f64, step: f64) -> String {
    if v.abs() < step * 1e-9 {
        return "0".into();
    }
    if step < 1.0 {
        let decimals = (-step.log10().floor()).clamp(0.0, 9.0) as usize;
        return format!("{v:.decimals$}");
    }
    fmt_num(v)
}

fn usable(scale: Scale, v: f64) -> bool {
    v.is_finite() && (scale == Scale::Linear || v > 0.0)
}

/// Renders `chart` as one `<svg>` element.
pub fn line_chart(chart: &LineChart) -> String {
    let c = chart;
    let mut out = String::new();
    open(&mut out, &c.title);
    let pts = |s: &Series| -> Vec<(f64, f64)> {
        s.points
            .iter()
            .copied()
            .filter(|&(x, y)| usable(c.x_scale, x) && usable(c.y_scale, y))
            .collect()
    };
    let series: Vec<Vec<(f64, f64)>> = c.series.iter().map(pts).collect();
    let any = series.iter().any(|s| !s.is_empty());
    let mut xs: Vec<f64> = series.iter().flatten().map(|p| p.0).collect();
    let mut ys: Vec<f64> = series.iter().flatten().map(|p| p.1).collect();
    if any {
        xs.extend(c.x_markers.iter().map(|m| m.at));
        ys.extend(c.y_markers.iter().map(|m| m.at));
    }
    let xa = Axis::new(c.x_scale, &xs, false, c.integer_x);
    let ya = Axis::new(c.y_scale, &ys, c.y_zero, false);
    let (l, t, r, b) = area();
    let px = |v: f64| l + xa.frac(v) * (r - l);
    let py = |v: f64| b - ya.frac(v) * (b - t);
    // Grid and ticks.
    for (v, label) in ya.ticks.iter().zip(&ya.labels) {
        let y = py(*v);
        out.push_str(&format!(
            "<line x1=\"{l:.1}\" y1=\"{y:.1}\" x2=\"{r:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            l - 6.0,
            y + 4.0,
            escape(label)
        ));
    }
    for (v, label) in xa.ticks.iter().zip(&xa.labels) {
        let x = px(*v);
        out.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{t:.1}\" x2=\"{x:.1}\" y2=\"{b:.1}\" stroke=\"#f0f0f0\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            b + 16.0,
            escape(label)
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
    // Reference lines under the data.
    for m in c.y_markers.iter().filter(|m| usable(c.y_scale, m.at)) {
        let y = py(m.at);
        out.push_str(&format!(
            "<line x1=\"{l:.1}\" y1=\"{y:.1}\" x2=\"{r:.1}\" y2=\"{y:.1}\" stroke=\"#555\" \
             stroke-dasharray=\"6 4\"/><text x=\"{:.1}\" y=\"{:.1}\" \
             fill=\"#333\" stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\">{}</text>",
            l + 6.0,
            y - 5.0,
            escape(&m.label)
        ));
    }
    for (i, m) in c
        .x_markers
        .iter()
        .filter(|m| usable(c.x_scale, m.at))
        .enumerate()
    {
        let x = px(m.at);
        let (tx, anchor) = if x > r - 160.0 {
            (x - 4.0, "end")
        } else {
            (x + 4.0, "start")
        };
        out.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{t:.1}\" x2=\"{x:.1}\" y2=\"{b:.1}\" stroke=\"#b00\" \
             stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/><text x=\"{tx:.1}\" y=\"{:.1}\" \
             text-anchor=\"{anchor}\" fill=\"#b00\" stroke=\"#fff\" stroke-width=\"3\" \
             paint-order=\"stroke\">{}</text>",
            t + 14.0 + 14.0 * (i % 3) as f64,
            escape(&m.label)
        ));
    }
    for (i, (s, pts)) in c.series.iter().zip(&series).enumerate() {
        let colour = color(i);
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let dash = if s.dashed {
            " stroke-dasharray=\"6 3\""
        } else {
            ""
        };
        if path.len() > 1 {
            out.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{dash} points=\"{}\"/>",
                path.join(" ")
            ));
        }
        if c.dots || path.len() == 1 {
            for &(x, y) in pts {
                out.push_str(&format!(
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{colour}\"/>",
                    px(x),
                    py(y)
                ));
            }
        }
    }
    let names: Vec<(String, &str, bool)> = c
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), color(i), s.dashed))
        .collect();
    legend(&mut out, &names);
    out.push_str("</svg>");
    out
}
