//! Chart tests: structure (well-formed markup), tick choice, odd inputs.

use super::*;

/// Checks that `svg` is well-formed enough for a browser: tags balance,
/// attribute values are quoted, text holds no raw `<` or bare `&`.
pub(crate) fn assert_well_formed(svg: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        check_text(&rest[..open]);
        let close = rest[open..].find('>').expect("unclosed tag") + open;
        let tag = &rest[open + 1..close];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
        } else if !tag.starts_with('!') {
            let name: String = tag
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '/')
                .collect();
            assert!(!name.is_empty(), "empty tag in {tag}");
            assert_eq!(
                tag.matches('"').count() % 2,
                0,
                "unbalanced quotes in <{tag}>"
            );
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        rest = &rest[close + 1..];
    }
    check_text(rest);
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

fn check_text(text: &str) {
    assert!(!text.contains('>'), "raw > in text {text:?}");
    for (i, _) in text.match_indices('&') {
        let entity = &text[i..text.len().min(i + 8)];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                .iter()
                .any(|e| entity.starts_with(e)),
            "bare & in {text:?}"
        );
    }
}

fn chart(series: Vec<Series>) -> LineChart {
    LineChart {
        title: "t <&> \"q\"".into(),
        x_label: "time (s)".into(),
        y_label: "msg/s".into(),
        series,
        ..LineChart::default()
    }
}

fn series(points: Vec<(f64, f64)>) -> Series {
    Series {
        name: "s".into(),
        points,
        dashed: false,
    }
}

#[test]
fn linear_ticks_step_1_2_5() {
    assert_eq!(
        nice_ticks(0.0, 97.0, 5, false),
        (vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0], 20.0)
    );
    let (t, step) = nice_ticks(0.0, 1.3, 5, false);
    assert!((step - 0.2).abs() < 1e-12, "{step}");
    assert_eq!(t.len(), 8);
    assert_eq!(nice_ticks(0.0, 340_000.0, 5, false).1, 50_000.0);
    assert_eq!(nice_ticks(1.0, 3.0, 5, true), (vec![1.0, 2.0, 3.0], 1.0));
}

#[test]
fn degenerate_ranges_are_widened() {
    let (t, _) = nice_ticks(5.0, 5.0, 5, false);
    assert!(
        t.len() >= 2 && t[0] <= 5.0 && *t.last().unwrap() > 5.0,
        "{t:?}"
    );
    let (t, _) = nice_ticks(0.0, 0.0, 5, false);
    assert_eq!((t[0], *t.last().unwrap()), (0.0, 1.0));
    let (t, _) = nice_ticks(f64::NAN, f64::INFINITY, 5, false);
    assert_eq!((t[0], *t.last().unwrap()), (0.0, 1.0));
}

#[test]
fn log_ticks_use_decades_and_1_2_5() {
    assert_eq!(log_ticks(150.0, 120_000.0), vec![100.0, 1e3, 1e4, 1e5, 1e6]);
    let t = log_ticks(0.15, 12.0);
    assert_eq!(t.len(), 8, "{t:?}");
    assert!(
        (t[0] - 0.1).abs() < 1e-12 && (t[7] - 20.0).abs() < 1e-9,
        "{t:?}"
    );
    assert_eq!(log_ticks(-1.0, 5.0), vec![1.0, 10.0]);
    assert_eq!(log_ticks(3.0, 3.0), vec![2.0, 5.0]);
}

#[test]
fn numbers_are_compact() {
    let cases = [
        (0.0, "0"),
        (3.0, "3"),
        (0.25, "0.25"),
        (12.5, "12.5"),
        (2_500.0, "2.5k"),
        (999.0, "999"),
        (20_000.0, "20k"),
        (1_500_000.0, "1.5M"),
        (f64::NAN, "–"),
    ];
    for (v, want) in cases {
        assert_eq!(fmt_num(v), want, "{v}");
    }
}

#[test]
fn line_chart_is_well_formed_and_escaped() {
    let mut c = chart(vec![series(vec![(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)])]);
    c.x_markers.push(Marker {
        at: 1.0,
        label: "failover <a&b>".into(),
    });
    c.y_markers.push(Marker {
        at: 2.5,
        label: "threshold".into(),
    });
    let svg = line_chart(&c);
    assert_well_formed(&svg);
    assert!(svg.contains("failover &lt;a&amp;b&gt;"), "{svg}");
    assert!(svg.contains("t &lt;&amp;&gt; &quot;q&quot;"));
    assert!(svg.contains("<polyline") && svg.contains(">time (s)<") && svg.contains(">msg/s<"));
    assert_eq!(
        svg.matches("stroke-dasharray=\"4 3\"").count(),
        1,
        "one fault marker"
    );
}

#[test]
fn empty_single_and_nan_inputs_never_panic() {
    for pts in [
        vec![],
        vec![(1.0, 1.0)],
        vec![(f64::NAN, 1.0), (2.0, f64::INFINITY)],
        vec![(1.0, 5.0), (1.0, 5.0)],
    ] {
        for (xs, ys) in [(Scale::Linear, Scale::Linear), (Scale::Log, Scale::Log)] {
            let mut c = chart(vec![series(pts.clone())]);
            c.x_scale = xs;
            c.y_scale = ys;
            let svg = line_chart(&c);
            assert_well_formed(&svg);
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        }
    }
    let svg = line_chart(&chart(vec![]));
    assert!(svg.contains("no data"));
    let one = line_chart(&chart(vec![series(vec![(1.0, 1.0)])]));
    assert!(one.contains("<circle") && !one.contains("<polyline"));
}

#[test]
fn log_axis_skips_non_positive_points() {
    let mut c = chart(vec![series(vec![(0.0, 0.5), (100.0, 0.9), (1000.0, 1.0)])]);
    c.x_scale = Scale::Log;
    let svg = line_chart(&c);
    assert_well_formed(&svg);
    let points = svg
        .split("points=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert_eq!(points.split(' ').count(), 2, "{points}");
}

#[test]
fn bar_chart_groups_and_odd_values() {
    let c = BarChart {
        title: "per node".into(),
        x_label: "node".into(),
        y_label: "connections".into(),
        categories: vec!["127.0.0.1:7000\nprimary".into(), "b".into()],
        series: vec![
            ("total".into(), vec![5.0, 1.0]),
            ("subscribing".into(), vec![4.0, f64::NAN]),
        ],
    };
    let svg = bar_chart(&c);
    assert_well_formed(&svg);
    assert_eq!(svg.matches("<rect x=").count(), 4, "frame + 3 bars: {svg}");
    assert!(svg.contains(">primary<"));
    let empty = bar_chart(&BarChart::default());
    assert_well_formed(&empty);
    assert!(empty.contains("no data"));
    let short = bar_chart(&BarChart {
        categories: vec!["a".into(), "b".into()],
        series: vec![("x".into(), vec![1.0])],
        ..BarChart::default()
    });
    assert_well_formed(&short);
}

#[test]
fn escape_covers_markup_and_controls() {
    assert_eq!(escape("a<b>&\"'\u{7}"), "a&lt;b&gt;&amp;&quot;&#39;");
}

#[test]
fn crowded_bar_labels_shrink_to_the_port_and_rotate() {
    let c = BarChart {
        categories: (0..48)
            .map(|i| format!("127.0.0.1:{}\nprimary", 7000 + i))
            .collect(),
        series: vec![("x".into(), (0..48).map(f64::from).collect())],
        ..BarChart::default()
    };
    let svg = bar_chart(&c);
    assert_well_formed(&svg);
    assert!(
        svg.contains(">7047</text>") && svg.contains("rotate(-60"),
        "{svg}"
    );
    assert!(!svg.contains(">127.0.0.1:7047<"));
}
