//! Renderer tests on the synthetic report.

use crate::chart::tests::assert_well_formed;
use crate::sample::synthetic;
use crate::{render_html, render_markdown};

#[test]
fn html_is_one_self_contained_well_formed_page() {
    let html = render_html(&synthetic());
    let body = html
        .split_once("<body>")
        .and_then(|(_, b)| b.split_once("</body>"))
        .map(|(b, _)| b)
        .expect("body");
    assert_well_formed(body);
    assert!(!html.contains("<script"), "no scripts");
    // The only address on the page is the SVG namespace.
    let links = html.matches("http").count();
    assert_eq!(
        links,
        html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
    );
    assert!(
        !html.contains(" src=") && !html.contains("<link"),
        "loads nothing"
    );
    for want in [
        "Throughput over time",
        "Publish-to-delivery lag over time",
        "Lag distribution over the whole run (CDF)",
        "Connections per server node",
        "Subscribe commands per server node",
        "failover @ 14 s",
        "shared this machine&#39;s 2 CPUs",
        "Assumptions",
    ] {
        assert!(html.contains(want), "missing {want}");
    }
    assert!(!html.contains("NaN"), "no NaN on the page");
}

#[test]
fn silent_losses_and_failures_are_flagged() {
    let mut r = synthetic();
    let html = render_html(&r);
    assert!(
        !html.contains("class=\"bad\">0<"),
        "0 silent losses is not flagged"
    );
    r.totals.lost_silent = 3;
    r.result = "FAILED: 3 lost silently".into();
    let html = render_html(&r);
    assert!(
        html.contains("<td class=\"bad\">3</td>"),
        "silent losses flagged"
    );
    assert!(html.contains("class=\"fail\""));
    let md = render_markdown(&r);
    assert!(md.contains("**3 ⚠**"), "{md}");
}

#[test]
fn markdown_has_every_section() {
    let md = render_markdown(&synthetic());
    for want in [
        "## Settings and machine",
        "## Totals",
        "## Faults",
        "## Knee",
        "## Sizing",
        "## Server nodes",
        "## Per interval",
        "| 14.0 | 17k | 67.9k | 9.15 ms | 45.77 ms | 0 | 44 | 12 | 4 | 16.9k |",
        "| failover | 14.0 |",
        "Knee at 85.4k msg/s",
        "deliveries/s per server core (all nodes)",
    ] {
        assert!(md.contains(want), "missing {want}:\n{md}");
    }
}

#[test]
fn empty_report_renders() {
    let mut r = synthetic();
    r.samples.clear();
    r.faults.clear();
    r.lag_cdf.clear();
    r.nodes.clear();
    r.knee = None;
    let html = render_html(&r);
    assert!(html.contains("no data") && !html.contains("NaN"));
    assert!(render_markdown(&r).contains("(none)"));
}

#[test]
fn write_dir_writes_three_files_that_read_back() {
    let dir = std::env::temp_dir().join(format!("fleet-report-test-{}", std::process::id()));
    let r = synthetic();
    crate::write_dir(&dir, &r).expect("write");
    for f in ["report.json", "report.md", "report.html"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    assert_eq!(crate::read_run(dir.join("report.json")).expect("read"), r);
    std::fs::write(dir.join("bad.json"), "{\"meta\": 1}").expect("write bad");
    let err = crate::read_run(dir.join("bad.json")).expect_err("bad file");
    assert!(err.to_string().contains("not a run report"), "{err}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn compare_picks_the_cheapest_clean_mode_from_the_numbers() {
    use crate::sample::synthetic_compare;
    let c = synthetic_compare();
    let md = crate::render_compare_markdown(&c);
    assert!(md.contains("- Pick node-grouped:"), "{md}");
    assert!(
        md.contains("| mode | node-grouped | per-partition | classic | shards | single |"),
        "one column per mode:\n{md}"
    );
    assert!(
        md.contains("| subscribing connections per primary (max) | 4 | 172 | 4 | 4 | 1 |"),
        "{md}"
    );
    assert!(
        md.contains("per-partition:") && md.contains("172 subscribing"),
        "{md}"
    );
    // Break the winner: it must drop out and another mode win.
    let mut c = synthetic_compare();
    c.runs[0].totals.lost_silent = 2;
    let md = crate::render_compare_markdown(&c);
    assert!(md.contains("node-grouped is out"), "{md}");
    assert!(!md.contains("Pick node-grouped"), "{md}");
    assert!(md.contains("**2 ⚠**"), "{md}");
    let html = crate::render_compare_html(&c);
    assert!(!html.contains("<script") && !html.contains("NaN"));
    assert!(html.contains("CPU per million delivered messages, by mode"));
}

#[test]
fn compare_warns_when_scenarios_differ_and_handles_none() {
    let mut c = crate::sample::synthetic_compare();
    // Topology differs by mode by design: not a different scenario.
    c.runs[4].meta.masters = 1;
    c.runs[4].meta.replicas = 0;
    assert!(!crate::render_compare_markdown(&c).contains("not like for like"));
    c.runs[1].meta.channels = 10;
    assert!(crate::render_compare_markdown(&c).contains("not like for like"));
    let empty = crate::CompareReport { runs: vec![] };
    assert!(crate::render_compare_markdown(&empty).contains("No mode ran clean"));
    assert!(crate::render_compare_html(&empty).contains("no data"));
}

#[test]
fn scaling_plots_node_count_per_mode() {
    let all = crate::sample::synthetic_scaling();
    let html = crate::render_scaling_html(&all);
    assert!(html.contains("Throughput against node count, per mode"));
    assert!(html.contains(">primaries (nodes)<"));
    assert!(!html.contains("NaN"));
    let md = crate::render_scaling_markdown(&all);
    assert_eq!(md.matches("| node-grouped |").count(), 3, "{md}");
    assert!(
        md.contains("| knee |"),
        "ramped runs take throughput from the knee: {md}"
    );
}

#[test]
fn compare_rates_come_from_the_samples() {
    // The totals also count the demo's settling round: totals ÷ seconds
    // would overstate the rate.
    let mut c = crate::sample::synthetic_compare();
    c.runs[0].totals.published *= 2;
    let s = &c.runs[0].samples;
    let mean = s.iter().map(|s| s.published_per_s).sum::<f64>() / s.len() as f64;
    let md = crate::render_compare_markdown(&c);
    let row = format!("| published/s (mean) | {} |", crate::chart::fmt_num(mean));
    assert!(md.contains(&row), "{row}\n{md}");
}

#[test]
fn ramped_runs_are_picked_at_the_knee_flat_ones_over_the_run() {
    let c = crate::sample::synthetic_compare();
    let md = crate::render_compare_markdown(&c);
    assert!(
        md.contains("Pick node-grouped: it held 56.5k msg/s published before the knee"),
        "{md}"
    );
    assert!(
        md.contains("| knee (published msg/s) | 85.4k (lag) |"),
        "{md}"
    );
    // A cheaper mode that held far less does not win.
    let mut c = crate::sample::synthetic_compare();
    let single = c
        .runs
        .iter_mut()
        .find(|r| r.meta.mode == "single")
        .expect("single");
    let held = single
        .knee
        .as_mut()
        .and_then(|k| k.held.as_mut())
        .expect("held");
    held.published_per_s = 10_000.0;
    held.server_cpu_us_per_msg = Some(0.5);
    // And shards costs the same as node-grouped at its held step.
    let winner = c.runs[0].knee.as_ref().and_then(|k| k.held).expect("held");
    let shards = c
        .runs
        .iter_mut()
        .find(|r| r.meta.mode == "shards")
        .expect("shards");
    let held = shards
        .knee
        .as_mut()
        .and_then(|k| k.held.as_mut())
        .expect("held");
    held.server_cpu_us_per_msg = winner.server_cpu_us_per_msg;
    held.client_cpu_us_per_msg = winner.client_cpu_us_per_msg;
    let md = crate::render_compare_markdown(&c);
    assert!(md.contains("- Pick node-grouped:"), "{md}");
    assert!(md.contains("single: held 10k msg/s"), "{md}");
    assert!(
        md.contains("shards: held") && md.contains("(within 5 %: a tie at this load)"),
        "{md}"
    );
    // Without a ramp: CPU per million over the run, among those with lag
    // p99 within twice the best.
    let mut c = crate::sample::synthetic_compare();
    for r in &mut c.runs {
        r.meta.ramp = None;
    }
    let md = crate::render_compare_markdown(&c);
    assert!(md.contains("- Pick node-grouped: it delivered"), "{md}");
    assert!(md.contains("s of CPU per million delivered"), "{md}");
    assert!(md.contains("| knee (published msg/s) | no ramp |"), "{md}");
}
