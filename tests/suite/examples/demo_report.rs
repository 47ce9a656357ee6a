//! The fleet demo's report (`examples/fanout --report DIR`) against the
//! servers' own counts, read by this test itself: it starts a small
//! cluster (3 primaries, no replicas, so every `SPUBLISH` executes once),
//! runs the demo briefly against it by `--url` seeds, watches `CLIENT
//! LIST` while the demo runs, and compares `report.json` with `INFO
//! commandstats` deltas (`SSUBSCRIBE` and `SPUBLISH` calls per node) and
//! the subscribed connections it saw. Not the demo's own verdict: its
//! `result` is only printed on failure.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleet_report::RunReport;
use testkit::values::{info_field, text};
use testkit::{Client, Cluster};

use crate::support;

const ENGINES: usize = 5;
const PUBLISHERS: usize = 2;

fn cmd(addr: SocketAddr, args: &[&str]) -> String {
    let mut c = Client::connect(addr).expect("connect");
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    text(&c.cmd(&args).expect("command")).expect("text reply")
}

/// `calls=` of `cmdstat_<command>` on `addr`.
fn calls(addr: SocketAddr, command: &str) -> u64 {
    let stats = cmd(addr, &["INFO", "commandstats"]);
    info_field(&stats, &format!("cmdstat_{command}"))
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Connections on `addr` with a subscription (`sub`/`ssub` > 0 or flag
/// P): all of them, and those not named as the demo's publisher instances.
fn subscribed(addr: SocketAddr) -> (u64, u64) {
    let list = cmd(addr, &["CLIENT", "LIST"]);
    let with_subs: Vec<&str> = list
        .lines()
        .filter(|l| {
            l.split(' ').any(|f| {
                matches!(f.split_once('='), Some(("sub" | "ssub", n)) if n != "0")
                    || f.strip_prefix("flags=").is_some_and(|v| v.contains('P'))
            })
        })
        .collect();
    let engines = with_subs
        .iter()
        .filter(|l| !l.split(' ').any(|f| f == "name=fanout-publisher"))
        .count();
    (with_subs.len() as u64, engines as u64)
}

fn per_node<T>(addrs: &[SocketAddr], read: impl Fn(SocketAddr) -> T) -> BTreeMap<String, T> {
    addrs.iter().map(|&a| (a.to_string(), read(a))).collect()
}

fn run_on(kind: testkit::ServerKind) {
    let cluster = Cluster::start(kind, 3, 0).expect("cluster");
    let addrs: Vec<SocketAddr> = cluster.nodes().iter().map(|n| n.addr()).collect();
    let ss_before = per_node(&addrs, |a| calls(a, "ssubscribe"));
    let sp_before = per_node(&addrs, |a| calls(a, "spublish"));
    let dir = std::env::temp_dir().join(format!("demo-report-{}-{}", kind, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args: Vec<String> = [
        "--server",
        kind.name(),
        "--engines",
        &ENGINES.to_string(),
        "--publishers",
        &PUBLISHERS.to_string(),
        "--channels",
        "2000",
        "--seconds",
        "4",
        "--rate",
        "3000",
        "--no-live",
        "--report",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(dir.display().to_string());
    for a in &addrs {
        args.extend(["--url".into(), format!("redis://{a}?cluster=true")]);
    }
    let mut child = Command::new(support::examples::example_binary("fanout"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("demo starts");

    // While it runs: the subscribed connections per node as the servers
    // list them (the most seen; they only grow while the fleet starts).
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    let mut seen_engines: BTreeMap<String, u64> = BTreeMap::new();
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        assert!(start.elapsed() < Duration::from_secs(90), "the demo hangs");
        for (a, (all, engines)) in per_node(&addrs, subscribed) {
            let e = seen.entry(a.clone()).or_default();
            *e = (*e).max(all);
            let e = seen_engines.entry(a).or_default();
            *e = (*e).max(engines);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("demo output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ctx = format!(
        "{kind}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{ctx}");
    let json = std::fs::read_to_string(dir.join("report.json")).expect("report.json");
    let r: RunReport = serde_json::from_str(&json).expect("report.json parses");
    let ss = per_node(&addrs, |a| calls(a, "ssubscribe"));
    let sp = per_node(&addrs, |a| calls(a, "spublish"));

    // Every node is in the report, as the servers count it.
    let nodes: BTreeMap<&str, &fleet_report::NodeStats> =
        r.nodes.iter().map(|n| (n.addr.as_str(), n)).collect();
    assert_eq!(nodes.len(), addrs.len(), "{ctx}");
    let mut ss_total = 0;
    let mut sp_total = 0;
    for a in &addrs {
        let a = a.to_string();
        let n = nodes
            .get(a.as_str())
            .unwrap_or_else(|| panic!("{a} missing: {ctx}"));
        let ss_delta = ss[&a] - ss_before[&a];
        let sp_delta = sp[&a] - sp_before[&a];
        assert_eq!(n.ssubscribe_calls, ss_delta, "{a} SSUBSCRIBE calls: {ctx}");
        assert_eq!(n.publish_calls, sp_delta, "{a} SPUBLISH calls: {ctx}");
        // One subscribe connection per instance per primary (each of the
        // engines, and each publisher's, which holds a keep-alive).
        assert_eq!(seen[&a], (ENGINES + PUBLISHERS) as u64, "{a} seen: {ctx}");
        assert_eq!(n.subscribe_connections, seen[&a], "{a} subscribed: {ctx}");
        // The subscriber instances' own: one each, told apart by name.
        assert_eq!(seen_engines[&a], ENGINES as u64, "{a} engines seen: {ctx}");
        assert_eq!(
            n.engine_subscribe_connections, seen_engines[&a],
            "{a} engines' subscribed: {ctx}"
        );
        assert_eq!(n.role, "primary", "{ctx}");
        ss_total += ss_delta;
        sp_total += sp_delta;
    }
    assert!(ss_total >= (ENGINES * 128) as u64 / 2, "{ctx}");
    // What the servers executed is what the demo says it published (the
    // paced publishing and the settle round's one message per channel).
    assert_eq!(r.totals.published, sp_total, "{ctx}");
    assert!(r.totals.published > 4 * 3000 / 2 + 2000, "{ctx}");
    // Nothing faulted: every expected delivery arrived, nothing silent.
    let t = &r.totals;
    assert_eq!(
        (t.lost_silent, t.duplicated, t.reordered),
        (0, 0, 0),
        "{ctx}"
    );
    assert_eq!(t.delivered, t.expected, "{ctx}");
    assert!(t.expected > t.published, "fan-out 1.5: {ctx}");
    assert!(!r.meta.local, "{ctx}");
    assert_eq!(r.meta.engines, ENGINES, "{ctx}");
    assert!(r.samples.len() >= 3, "{ctx}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_report_matches_what_the_servers_counted() {
    for kind in testkit::kinds() {
        run_on(kind);
    }
}
