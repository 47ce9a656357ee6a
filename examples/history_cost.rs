//! What history costs per publish, in one run: the same messages published
//! to plain channels and to recoverable ones (alternately, twice), with
//! one subscriber instance receiving them all. For each phase it measures
//! the server's CPU (`INFO CPU`, user + system) and this process's CPU
//! (`/proc/self/stat`, publisher and subscriber together) per message, and
//! the server memory each stored message holds (`INFO MEMORY`
//! `used_memory` after the first history phase, over the messages kept),
//! and prints them as Markdown table rows (`cargo xtask bench --only
//! history_cost` puts them in BENCHMARKS.md).
//!
//! ```text
//! cargo run --release --example history_cost -- [--messages 20000] [--valkey] [--cluster]
//! ```
//!
//! It starts its own server through testkit (Redis 7 by default); with
//! `--cluster`, a cluster of one primary (the cluster publish path, and the
//! publish script's node check).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::history::HistoryOptions;
use shardsub::{PubSub, Value};

const CHANNELS: usize = 100;
const PAYLOAD: usize = 64;
const MAX_LEN: u64 = 1000;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// This process's CPU seconds (user + system), from `/proc/self/stat`
/// (clock ticks of 1/100 s).
fn own_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or_default();
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

fn info(server: &testkit::Server, section: &str, field: &str) -> f64 {
    let v = server.cmd_str(&["INFO", section]).expect("info");
    let text = testkit::values::text(&v).unwrap_or_default();
    testkit::values::info_field(&text, field)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0)
}

/// "Redis 7.0.15" or "Valkey 9.1.2", from `INFO server`.
fn version_of(server: &testkit::Server) -> String {
    let v = server.cmd_str(&["INFO", "server"]).expect("info");
    let text = testkit::values::text(&v).unwrap_or_default();
    match testkit::values::info_field(&text, "valkey_version") {
        Some(v) => format!("Valkey {v}"),
        None => format!(
            "Redis {}",
            testkit::values::info_field(&text, "redis_version").unwrap_or_default()
        ),
    }
}

/// How many messages the stream `key` holds.
fn xlen_of(server: &testkit::Server, key: &[u8]) -> f64 {
    match server.cmd(&[b"XLEN", key]).expect("xlen") {
        Value::Integer(k) => k as f64,
        _ => 0.0,
    }
}

fn server_cpu(server: &testkit::Server) -> f64 {
    info(server, "cpu", "used_cpu_user") + info(server, "cpu", "used_cpu_sys")
}

/// Publishes `n` messages over the channels `prefix:0..CHANNELS`,
/// acknowledged every 1,000, and waits until the handler has them.
fn phase(ps: &PubSub, got: &AtomicU64, prefix: &str, n: u64) {
    let payload = vec![b'x'; PAYLOAD];
    let before = got.load(Ordering::Relaxed);
    for i in 0..n {
        let ch = format!("{prefix}:{}", i as usize % CHANNELS);
        if i % 1000 == 999 {
            ps.publish_wait(&ch, &payload, Duration::from_secs(10))
                .expect("publish");
        } else {
            ps.publish(&ch, &payload).expect("publish");
        }
    }
    let start = Instant::now();
    while got.load(Ordering::Relaxed) < before + n {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "messages missing"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn main() {
    let n: u64 = arg("--messages")
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let has = |flag: &str| std::env::args().any(|a| a == flag);
    let kind = if has("--valkey") {
        testkit::ServerKind::Valkey
    } else {
        testkit::ServerKind::Redis
    };
    // One server, or a cluster of one primary: either way one process
    // whose CPU and memory are read.
    let (_cluster, _single, builder);
    let server: &testkit::Server = if has("--cluster") {
        _cluster = testkit::Cluster::start(kind, 1, 0).expect("cluster");
        builder = PubSub::builder().seed(_cluster.node(0).addr().to_string());
        _cluster.node(0)
    } else {
        _single = testkit::Server::start(kind).expect("server");
        builder = PubSub::builder().address(_single.addr().to_string());
        &_single
    };
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    let ps = builder
        .history(
            "h:",
            HistoryOptions {
                max_len: MAX_LEN,
                max_age: Duration::from_secs(600),
            },
        )
        .handler(move |_: &[u8], _: &[u8]| {
            g.fetch_add(1, Ordering::Relaxed);
        })
        .workers(1)
        .io_threads(1)
        .build()
        .expect("pubsub");
    let chans: Vec<String> = ["p", "h"]
        .iter()
        .flat_map(|p| (0..CHANNELS).map(move |i| format!("{p}:{i}")))
        .collect();
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, Duration::from_secs(10)).unwrap();
    let mut stream = match ps.partitions() {
        Some(parts) => parts.redis_channel(b"h:0"),
        None => b"h:0".to_vec(),
    };
    stream.extend_from_slice(shardsub::history::STREAM_SUFFIX);
    // Warm-up: connections, buffers, the script cache.
    phase(&ps, &got, "p", 1000);
    phase(&ps, &got, "h", 1000);
    let mem_before = info(server, "memory", "used_memory");
    let xlen_before = xlen_of(server, &stream);
    let (mut kept_mem, mut xlen) = (0.0, 0.0);
    let mut cost: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..2 {
        for (k, prefix) in ["p", "h"].into_iter().enumerate() {
            let (s0, c0) = (server_cpu(server), own_cpu());
            phase(&ps, &got, prefix, n);
            let (s1, c1) = (server_cpu(server), own_cpu());
            let per = |a: f64, b: f64| (b - a) * 1e6 / n as f64;
            cost[k].push((per(s0, s1), per(c0, c1)));
            if round == 0 && prefix == "h" {
                kept_mem = info(server, "memory", "used_memory") - mem_before;
                xlen = xlen_of(server, &stream);
            }
        }
    }
    ps.shutdown();
    let per_msg = kept_mem / ((xlen - xlen_before) * CHANNELS as f64).max(1.0);
    let place = if has("--cluster") {
        "cluster, 1 primary"
    } else {
        "one server"
    };
    let version = version_of(server);
    println!(
        "| server | placement | phase | server CPU µs/msg | client CPU µs/msg | history / plain (server) | server bytes per stored message |"
    );
    println!("|---|---|---|---:|---:|---:|---:|");
    let pair = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| {
        v.iter()
            .map(|x| format!("{:.2}", f(x)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let mean = |v: &[(f64, f64)]| v.iter().map(|x| x.0).sum::<f64>() / v.len().max(1) as f64;
    for (k, name) in ["plain", "history"].into_iter().enumerate() {
        let ratio = match k {
            1 => format!("{:.1}×", mean(&cost[1]) / mean(&cost[0]).max(1e-9)),
            _ => String::new(),
        };
        let mem = match k {
            1 => format!("{per_msg:.0}"),
            _ => String::new(),
        };
        println!(
            "| {version} | {place} | {name} | {} | {} | {ratio} | {mem} |",
            pair(&cost[k], |x| x.0),
            pair(&cost[k], |x| x.1),
        );
    }
}
