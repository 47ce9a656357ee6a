//! Pure SVG chart functions: each takes a description and returns one
//! `<svg>` element as a string, for inline use in an HTML page.
//!
//! Axes get "nice" ticks (1-2-5 steps on linear axes, decades and 1-2-5 on
//! log axes), labels with units (the caller puts the unit in the label),
//! legends, and escaped text. Non-finite points are skipped, and an empty
//! chart says "no data" instead of failing: nothing here panics on odd
//! numbers.

mod bar;
mod line;
mod scale;

pub use bar::{bar_chart, BarChart};
pub use line::{line_chart, LineChart, Marker, Series};
pub use scale::{fmt_num, log_ticks, nice_ticks, Scale};

/// Chart width, px.
pub const WIDTH: f64 = 900.0;
/// Chart height, px.
pub const HEIGHT: f64 = 330.0;
/// Left margin (y tick labels and the y axis label), px.
const LEFT: f64 = 78.0;
/// Right margin, px.
const RIGHT: f64 = 24.0;
/// Top margin (title and legend), px.
const TOP: f64 = 58.0;
/// Bottom margin (x tick labels and the x axis label), px.
const BOTTOM: f64 = 52.0;

/// Series colours (a colour-blind-safe palette), in order.
pub const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// The colour of series `i`.
pub fn color(i: usize) -> &'static str {
    PALETTE.get(i % PALETTE.len()).copied().unwrap_or("#000")
}

/// Escapes text for SVG/HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

/// Opens an `<svg>` of the standard size with its title (also the
/// accessible name) drawn at the top left.
fn open(out: &mut String, title: &str) {
    let t = escape(title);
    out.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
         width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" aria-label=\"{t}\" \
         font-family=\"sans-serif\" font-size=\"12\">\
         <title>{t}</title>\
         <rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#fff\"/>\
         <text x=\"{LEFT}\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{t}</text>"
    ));
}

/// Draws a one-row legend under the title; wraps to a second row when
/// the names are long.
fn legend(out: &mut String, names: &[(String, &str, bool)]) {
    let mut x = LEFT;
    let mut y = 40.0;
    for (name, colour, dashed) in names {
        let w = 30.0 + 6.8 * name.chars().count() as f64;
        if x + w > WIDTH - RIGHT && x > LEFT {
            x = LEFT;
            y += 15.0;
        }
        let dash = if *dashed {
            " stroke-dasharray=\"5 3\""
        } else {
            ""
        };
        out.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" \
             stroke-width=\"3\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            y - 4.0,
            x + 18.0,
            y - 4.0,
            x + 22.0,
            y,
            escape(name)
        ));
        x += w + 12.0;
    }
}

/// The plot area: (left, top, right, bottom) in px.
fn area() -> (f64, f64, f64, f64) {
    (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)
}

/// Draws the axis labels: x centred under the plot, y rotated on the left.
fn axis_labels(out: &mut String, x_label: &str, y_label: &str) {
    let (l, t, r, b) = area();
    out.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        (l + r) / 2.0,
        HEIGHT - 10.0,
        escape(x_label)
    ));
    out.push_str(&format!(
        "<text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        (t + b) / 2.0,
        escape(y_label)
    ));
}

/// Writes "no data" in the middle of the plot area.
fn no_data(out: &mut String) {
    let (l, t, r, b) = area();
    out.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#888\">no data</text>",
        (l + r) / 2.0,
        (t + b) / 2.0
    ));
}

#[cfg(test)]
pub(crate) mod tests;
