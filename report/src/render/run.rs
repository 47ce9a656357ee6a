//! One run as Markdown and as one self-contained HTML page.

use super::figures;
use super::tables::{self, knee_text, machine_note, sizing_table, sizings};
use crate::chart::escape;
use crate::model::RunReport;

/// The page's style sheet (inline: the page loads nothing).
const CSS: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1080px;margin:24px auto;\
padding:0 16px;color:#222;line-height:1.45}\
h1{font-size:1.6em;margin-bottom:4px}h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:8px 0 16px;font-size:14px;display:block;overflow-x:auto;max-width:100%}\
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}\
th{background:#f3f3f3}td.bad{background:#fdd;color:#900;font-weight:bold}\
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:8px 12px;margin:12px 0}\
.ok{color:#176f2c;font-weight:bold}.fail{color:#b00;font-weight:bold}\
svg.chart{display:block;max-width:100%;height:auto;margin:8px 0 20px;border:1px solid #eee}\
ul.assume li{margin:2px 0}.none{color:#888}";

/// Wraps `body` in a complete HTML page with the inline style sheet.
pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{}</title><style>{CSS}</style></head><body>\n{body}\n</body></html>\n",
        escape(title)
    )
}

/// The page title for a run.
fn title(r: &RunReport) -> String {
    let m = &r.meta;
    format!(
        "shardsub fleet demo: {} on {} {}, {} primaries, {}",
        m.mode, m.server.kind, m.server.version, m.masters, m.date_utc
    )
}

fn threshold(r: &RunReport) -> u64 {
    crate::run_knee(r).0.threshold_us
}

/// One run as Markdown: the same tables as the HTML page; the plots are in
/// `report.html`.
pub fn render_markdown(r: &RunReport) -> String {
    let mut out = format!("# {}\n\n", title(r));
    out.push_str(&format!("**Result: {}**\n\n", r.result));
    out.push_str(&format!("> {}\n\n", machine_note(r)));
    out.push_str(
        "The plots (throughput and lag over time with the faults marked, the lag CDF, \
                  the knee, connections and subscribe commands per node) are in `report.html`.\n\n",
    );
    out.push_str("## Settings and machine\n\n");
    out.push_str(&tables::settings(r).markdown());
    out.push_str("\n## Totals\n\n");
    out.push_str(&tables::totals(r).markdown());
    out.push_str("\n## Faults\n\n");
    out.push_str(&tables::faults(r).markdown());
    out.push_str("\n## Knee\n\n");
    out.push_str(&knee_text(r));
    out.push_str("\n\n");
    let (steps, _) = tables::steps(r, threshold(r));
    out.push_str(&steps.markdown());
    out.push_str("\n## Sizing\n\n");
    let all = sizings(r);
    out.push_str(&sizing_table(&all, r.meta.engines).markdown());
    out.push_str("\nAssumptions:\n\n");
    for a in all.first().map(|s| s.assumptions.as_slice()).unwrap_or(&[]) {
        out.push_str(&format!("- {a}\n"));
    }
    out.push_str("\n## Server nodes\n\n");
    out.push_str(&tables::nodes(r).markdown());
    out.push_str("\n## Per interval\n\n");
    out.push_str(&tables::samples(r).markdown());
    out
}

/// One run as one self-contained HTML page: inline CSS and SVG, no
/// scripts, nothing loaded from elsewhere.
pub fn render_html(r: &RunReport) -> String {
    let mut b = format!("<h1>{}</h1>\n", escape(&title(r)));
    let ok = r.result.starts_with("ok");
    b.push_str(&format!(
        "<p>Result: <span class=\"{}\">{}</span></p>\n",
        if ok { "ok" } else { "fail" },
        escape(&r.result)
    ));
    b.push_str(&format!(
        "<p class=\"note\">{}</p>\n",
        escape(&machine_note(r))
    ));
    b.push_str("<h2>Settings and machine</h2>\n");
    b.push_str(&tables::settings(r).html());
    b.push_str("<h2>Totals</h2>\n");
    b.push_str(&tables::totals(r).html());
    b.push_str("<h2>Faults</h2>\n");
    b.push_str(&tables::faults(r).html());
    b.push_str("<h2>Over time</h2>\n");
    b.push_str(&figures::throughput(r));
    b.push_str(&figures::lag(r));
    b.push_str("<h2>Lag distribution</h2>\n");
    b.push_str(&figures::cdf(r));
    b.push_str("<h2>Knee</h2>\n");
    b.push_str(&format!("<p>{}</p>\n", escape(&knee_text(r))));
    let (table, steps) = tables::steps(r, threshold(r));
    b.push_str(&table.html());
    if let Some((lag, cpu)) = figures::knee(r, &steps) {
        b.push_str(&lag);
        b.push_str(&cpu);
    }
    b.push_str("<h2>Sizing</h2>\n");
    let all = sizings(r);
    b.push_str(&sizing_table(&all, r.meta.engines).html());
    b.push_str("<p>Assumptions:</p><ul class=\"assume\">");
    for a in all.first().map(|s| s.assumptions.as_slice()).unwrap_or(&[]) {
        b.push_str(&format!("<li>{}</li>", escape(a)));
    }
    b.push_str("</ul>\n");
    b.push_str("<h2>Server nodes</h2>\n");
    b.push_str(&tables::nodes(r).html());
    b.push_str(&figures::connections(r));
    b.push_str(&figures::subscribe_calls(r));
    page(&title(r), &b)
}
