//! The rendering checked line by line against the text format's grammar
//! (a small checker below, itself tested on broken texts).

use std::collections::{BTreeMap, BTreeSet};

use crate::metrics::{ClusterMetrics, Histogram, Metrics};

/// Label names and values, in order.
type Labels = Vec<(String, String)>;

/// A family seen by the checker: its type and samples (name, sorted
/// labels, value).
#[derive(Debug, Default)]
struct Family {
    kind: String,
    samples: Vec<(String, Labels, f64)>,
}

fn valid_name(n: &str, colon: bool) -> bool {
    let mut cs = n.chars();
    let ok_first = |c: char| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':');
    cs.next().is_some_and(ok_first)
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => v.parse::<f64>().map_err(|_| format!("value {v:?}")),
    }
}

/// `{a="x",b="y"}` after a name: the labels and the rest of the line.
fn parse_labels(s: &str) -> Result<(Labels, &str), String> {
    let Some(mut rest) = s.strip_prefix('{') else {
        return Ok((Vec::new(), s));
    };
    let mut labels = Vec::new();
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without '='")?;
        let (name, r) = rest.split_at(eq);
        if !valid_name(name, false) || name.starts_with("__") {
            return Err(format!("label name {name:?}"));
        }
        let mut r = r.strip_prefix("=\"").ok_or("label value not quoted")?;
        let mut value = String::new();
        loop {
            let mut cs = r.chars();
            match cs.next() {
                None => return Err("unterminated label value".into()),
                Some('"') => break,
                Some('\\') => match cs.next() {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    _ => return Err("bad escape in label value".into()),
                },
                Some('\n') => return Err("newline in label value".into()),
                Some(c) => value.push(c),
            }
            r = cs.as_str();
        }
        r = r.get(1..).ok_or("label value end")?;
        if labels.iter().any(|(n, _): &(String, String)| n == name) {
            return Err(format!("label {name} twice"));
        }
        labels.push((name.to_string(), value));
        rest = match r.strip_prefix(',') {
            Some(r) => r,
            None if r.starts_with('}') => r,
            None => return Err("labels not separated by ','".into()),
        };
    }
}

/// Checks `text` against the text exposition format and the naming
/// rules; returns the families by name.
fn check(text: &str) -> Result<BTreeMap<String, Family>, String> {
    if !text.ends_with('\n') {
        return Err("the text does not end with a newline".into());
    }
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut helped = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut seen = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let err = |e: String| format!("line {}: {e}: {line:?}", i + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if !valid_name(name, true) || !helped.insert(name.to_string()) {
                return Err(err("HELP name invalid or repeated".into()));
            }
            let mut cs = help.chars();
            while let Some(c) = cs.next() {
                if c == '\\' && !matches!(cs.next(), Some('\\' | 'n')) {
                    return Err(err("bad escape in HELP".into()));
                }
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or_else(|| err("TYPE".into()))?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(err(format!("type {kind:?}")));
            }
            if !valid_name(name, true) || families.contains_key(name) {
                return Err(err("TYPE name invalid or repeated".into()));
            }
            if kind == "counter" && !name.ends_with("_total") {
                return Err(err("a counter's name does not end in _total".into()));
            }
            if !name.starts_with("shardsub_") {
                return Err(err("no shardsub_ prefix".into()));
            }
            families.insert(
                name.to_string(),
                Family {
                    kind: kind.to_string(),
                    ..Family::default()
                },
            );
            current = Some(name.to_string());
        } else if line.starts_with('#') {
            continue;
        } else {
            let end = line
                .find(['{', ' '])
                .ok_or_else(|| err("no value".into()))?;
            let (name, rest) = line.split_at(end);
            if !valid_name(name, true) {
                return Err(err(format!("metric name {name:?}")));
            }
            let (mut labels, rest) = parse_labels(rest).map_err(err)?;
            let mut parts = rest
                .strip_prefix(' ')
                .ok_or_else(|| err("no space".into()))?
                .split(' ');
            let value = parse_value(parts.next().unwrap_or("")).map_err(err)?;
            if let Some(ts) = parts.next() {
                ts.parse::<i64>().map_err(|_| err("timestamp".into()))?;
            }
            if parts.next().is_some() {
                return Err(err("trailing text".into()));
            }
            let fam_name = current
                .clone()
                .ok_or_else(|| err("a sample before any TYPE".into()))?;
            let fam = families
                .get_mut(&fam_name)
                .ok_or_else(|| err("family".into()))?;
            let belongs = name == fam_name
                || (fam.kind == "histogram"
                    && ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| name.strip_suffix(s) == Some(&fam_name)));
            if !belongs {
                return Err(err(format!("a sample outside its family ({fam_name})")));
            }
            if fam.kind == "counter" && (value.is_nan() || value < 0.0) {
                return Err(err("a negative counter".into()));
            }
            labels.sort();
            if !seen.insert((name.to_string(), labels.clone())) {
                return Err(err("a sample repeated".into()));
            }
            fam.samples.push((name.to_string(), labels, value));
        }
    }
    for (name, fam) in &families {
        if !helped.contains(name) {
            return Err(format!("{name}: no HELP"));
        }
        if fam.kind == "histogram" {
            check_histogram(name, fam)?;
        }
    }
    Ok(families)
}

/// Buckets ascending in `le`, cumulative, ending at `+Inf` = `_count`, and
/// a `_sum`.
fn check_histogram(name: &str, fam: &Family) -> Result<(), String> {
    let mut last = (f64::NEG_INFINITY, 0.0);
    let mut count = None;
    let mut sum = false;
    for (n, labels, v) in &fam.samples {
        if n.ends_with("_bucket") {
            let le = labels
                .iter()
                .find(|(k, _)| k == "le")
                .ok_or(format!("{name}: a bucket without le"))?;
            let le = parse_value(&le.1)?;
            if le <= last.0 || *v < last.1 {
                return Err(format!(
                    "{name}: bucket le={le} not ascending or not cumulative"
                ));
            }
            last = (le, *v);
        } else if n.ends_with("_count") {
            count = Some(*v);
        } else {
            sum = true;
        }
    }
    if last.0 != f64::INFINITY || count != Some(last.1) || !sum {
        return Err(format!(
            "{name}: needs +Inf = _count ({count:?} vs {}) and _sum",
            last.1
        ));
    }
    Ok(())
}

fn rendered(m: &Metrics) -> String {
    let mut out = String::new();
    m.to_prometheus(&mut out);
    out
}

fn sample_metrics() -> Metrics {
    let h = Histogram::default();
    for us in [3, 20, 20, 900, 5_000, 40_000_000] {
        h.record_us(us);
    }
    Metrics {
        published: 7,
        received: 5,
        delivered: 4,
        queue_depths: vec![0, 3],
        active_connections: vec![2, 1],
        lag: Some(h.snapshot()),
        ..Metrics::default()
    }
}

#[test]
fn metrics_follow_the_text_format_and_the_naming_rules() {
    let text = rendered(&sample_metrics());
    let fams = check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for line in [
        "shardsub_published_total 7",
        "shardsub_delivered_messages_total 4",
        "shardsub_dropped_messages_total{reason=\"queue_full\"} 0",
        "shardsub_worker_queue_messages{worker=\"1\"} 3",
        "shardsub_subscribe_connections_open{server=\"0\"} 2",
        "shardsub_lag_seconds_bucket{le=\"0.000016\"} 1",
        "shardsub_lag_seconds_bucket{le=\"0.000032\"} 3",
        "shardsub_lag_seconds_bucket{le=\"16.777216\"} 5",
        "shardsub_lag_seconds_bucket{le=\"+Inf\"} 6",
        "shardsub_lag_seconds_sum 40.005943",
        "shardsub_lag_seconds_count 6",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    assert_eq!(fams["shardsub_lag_seconds"].kind, "histogram");
    assert_eq!(fams.len(), 26, "{:?}", fams.keys());
    // Without the envelope there is no lag family, not a zero one.
    let text = rendered(&Metrics::default());
    let fams = check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(!fams.contains_key("shardsub_lag_seconds"));
    assert_eq!(fams.len(), 25);
}

#[test]
fn cluster_metrics_add_their_own_families_once() {
    let mut c = ClusterMetrics::default();
    c.rebuilds.startup = 1;
    c.redirects.moved = 2;
    c.last_restore = Some(std::time::Duration::from_millis(250));
    c.max_restore = Some(std::time::Duration::from_millis(1500));
    c.nodes = 3;
    let m = Metrics {
        cluster: Some(c),
        ..sample_metrics()
    };
    let mut text = String::new();
    m.to_prometheus(&mut text);
    let fams = check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for line in [
        "shardsub_published_total 7",
        "shardsub_cluster_rebuilds_total{trigger=\"startup\"} 1",
        "shardsub_cluster_redirects_total{kind=\"moved\"} 2",
        "shardsub_cluster_last_restore_seconds 0.25",
        "shardsub_cluster_max_restore_seconds 1.5",
        "shardsub_cluster_nodes 3",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    assert_eq!(fams.len(), 26 + 19, "{:?}", fams.keys());
    // Before the first restore the restore gauges are left out.
    let mut text = String::new();
    fresh_cluster().to_prometheus(&mut text);
    let fams = check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(!fams.contains_key("shardsub_cluster_last_restore_seconds"));
}

#[test]
fn the_checker_refuses_broken_texts() {
    let ok = "# HELP shardsub_x_total X.\n# TYPE shardsub_x_total counter\nshardsub_x_total 1\n";
    check(ok).unwrap();
    let h = "# HELP shardsub_h H.\n# TYPE shardsub_h histogram\n";
    for (bad, why) in [
        ("# HELP shardsub_x X.\n# TYPE shardsub_x counter\nshardsub_x 1\n", "_total"),
        (&format!("{ok}# TYPE shardsub_x_total counter\n"), "repeated"),
        ("shardsub_x 1\n", "before any TYPE"),
        ("# HELP shardsub_g G.\n# TYPE shardsub_g gauge\nshardsub_h 1\n", "outside its family"),
        ("# HELP shardsub_g G.\n# TYPE shardsub_g gauge\nshardsub_g{a=\"1\" 1\n", "separated"),
        ("# HELP shardsub_g G.\n# TYPE shardsub_g gauge\nshardsub_g{a=1} 1\n", "not quoted"),
        ("# HELP shardsub_g G.\n# TYPE shardsub_g gauge\nshardsub_g one\n", "value"),
        ("# HELP shardsub_g G.\n# TYPE shardsub_g gauge\nshardsub_g 1\nshardsub_g 2\n", "repeated"),
        ("# TYPE shardsub_g gauge\nshardsub_g 1\n", "no HELP"),
        ("# HELP shardsub_x_total X.\n# TYPE shardsub_x_total counter\nshardsub_x_total -1\n", "negative"),
        (&format!("{h}shardsub_h_bucket{{le=\"1\"}} 2\nshardsub_h_bucket{{le=\"+Inf\"}} 1\nshardsub_h_sum 1\nshardsub_h_count 1\n"), "cumulative"),
        (&format!("{h}shardsub_h_bucket{{le=\"1\"}} 1\nshardsub_h_sum 1\nshardsub_h_count 1\n"), "+Inf"),
        (&format!("{h}shardsub_h_bucket{{le=\"+Inf\"}} 2\nshardsub_h_sum 1\nshardsub_h_count 1\n"), "+Inf"),
        ("# HELP shardsub_g G.\n# TYPE shardsub_g gauge\nshardsub_g 1", "newline"),
    ] {
        let e = check(bad).expect_err(bad);
        assert!(e.contains(why), "{bad:?}: {e}");
    }
}

/// Every counter of `Metrics` set to its own value (a wrong getter in the
/// table shows as a wrong number), with the lag histogram.
fn distinct_metrics() -> Metrics {
    let mut m = sample_metrics();
    let mut n = 100u64;
    let mut next = || {
        n += 1;
        n
    };
    m.published = next();
    m.publish_errors = next();
    m.received = next();
    m.delivered = next();
    m.unwanted = next();
    m.dropped.queue_full = next();
    m.dropped.shutdown = next();
    m.dropped.moved = next();
    m.recovered = next();
    m.duplicates = next();
    m.unrecoverable = next();
    m.queue_depths = vec![next() as usize, next() as usize, 0];
    m.subscribe_commands = next();
    m.unsubscribe_commands = next();
    m.subscribe_errors = next();
    m.refused_channels = next();
    m.confirmations = next();
    m.channels = next();
    m.reconnects = next();
    m.gaps = next();
    m.gap_channels = next();
    m.probes_sent = next();
    m.probe_restarts = next();
    m.active_connections = vec![next() as usize, 0, next() as usize];
    m.unenveloped = next();
    m.thread_panics = next();
    m.slow_turns = next();
    m
}

/// A cluster placement's metrics before anything was counted.
fn fresh_cluster() -> Metrics {
    Metrics {
        cluster: Some(ClusterMetrics::default()),
        ..Metrics::default()
    }
}

/// Every field of the cluster's section (and of the rest) set to its own
/// value.
fn distinct_cluster() -> Metrics {
    let mut c = ClusterMetrics::default();
    let mut n = 200u64;
    let mut next = || {
        n += 1;
        n
    };
    let r = &mut c.rebuilds;
    for f in [
        &mut r.startup,
        &mut r.poll,
        &mut r.sunsubscribe,
        &mut r.moved,
        &mut r.disconnect,
        &mut r.subscribe_error,
        &mut r.retry,
        &mut r.manual,
    ] {
        *f = next();
    }
    let e = &mut c.topology_errors;
    for f in [
        &mut e.version,
        &mut e.fetch,
        &mut e.parse,
        &mut e.probe,
        &mut e.connect,
    ] {
        *f = next();
    }
    c.unknown_slot_owners = next();
    c.last_restore = Some(std::time::Duration::from_micros(1_250_375));
    c.max_restore = Some(std::time::Duration::from_millis(4_500));
    c.restores = next();
    c.moved_partitions = next();
    c.subscribe_errors = next();
    let d = &mut c.redirects;
    for f in [
        &mut d.moved,
        &mut d.ask,
        &mut d.try_again,
        &mut d.cluster_down,
    ] {
        *f = next();
    }
    c.publish_failed = next();
    let h = &mut c.holds;
    for f in [
        &mut h.held,
        &mut h.expired,
        &mut h.full,
        &mut h.gates,
        &mut h.gate_timeouts,
    ] {
        *f = next();
    }
    h.messages = next() as usize;
    h.bytes = next() as usize;
    c.nodes = next() as usize;
    c.subscribe_connections = next() as usize;
    Metrics {
        cluster: Some(c),
        ..distinct_metrics()
    }
}

/// The renderings of representative states, byte for byte, against the
/// files in `golden/` (`UPDATE_GOLDEN=1` rewrites them): a fresh instance
/// on servers, servers with every counter set and the lag on, a fresh
/// cluster, and a cluster with every counter set.
#[test]
fn renderings_match_the_golden_files() {
    let mut cases: Vec<(&str, String)> = Vec::new();
    let mut render = |name, f: &dyn Fn(&mut String)| {
        let mut out = String::new();
        f(&mut out);
        check(&out).unwrap_or_else(|e| panic!("{name}: {e}\n{out}"));
        cases.push((name, out));
    };
    render("servers_fresh", &|o| Metrics::default().to_prometheus(o));
    render("servers_counted", &|o| distinct_metrics().to_prometheus(o));
    render("cluster_fresh", &|o| fresh_cluster().to_prometheus(o));
    render("cluster_counted", &|o| distinct_cluster().to_prometheus(o));
    // The counted cluster has a value in every family of the table.
    let (_, all) = cases.last().unwrap();
    assert_eq!(check(all).unwrap().len(), super::FAMILIES.len());
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/metrics/prometheus/golden");
    for (name, text) in cases {
        let path = dir.join(format!("{name}.prom"));
        if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 creates it)", path.display()));
        if want != text {
            let line = want
                .lines()
                .zip(text.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(want.lines().count().min(text.lines().count()));
            panic!(
                "{name}: differs from {} at line {}:\n--- want\n{}\n--- got\n{}",
                path.display(),
                line + 1,
                want.lines().nth(line).unwrap_or("<end>"),
                text.lines().nth(line).unwrap_or("<end>"),
            );
        }
    }
}

#[test]
fn help_texts_and_label_values_are_escaped() {
    let mut out = String::new();
    super::escaped(&mut out, "a\"b\\c\nd", true);
    assert_eq!(out, "a\\\"b\\\\c\\nd");
    out.clear();
    super::escaped(&mut out, "a\"b\\c\nd", false);
    assert_eq!(out, "a\"b\\\\c\\nd");
}
