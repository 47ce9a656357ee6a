//! What history costs per publish, in one run: the same messages published
//! to plain channels and to recoverable ones (alternately, twice), with
//! one subscriber instance receiving them all. For each phase it prints
//! the server's CPU (`INFO CPU`, user + system) and this process's CPU
//! (`/proc/self/stat`, publisher and subscriber together) per message, and
//! the server memory each stored message holds (`INFO MEMORY`
//! `used_memory` after the history phase, over the messages kept).
//!
//! ```text
//! cargo run --release --example history_cost -- [--messages 20000] [--valkey]
//! ```
//!
//! It starts its own server through testkit (Redis 7 by default).

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

/// How many messages the first recoverable channel's stream holds.
fn xlen_of(server: &testkit::Server) -> f64 {
    match server.cmd_str(&["XLEN", "h:0:history"]).expect("xlen") {
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
    let kind = if std::env::args().any(|a| a == "--valkey") {
        testkit::ServerKind::Valkey
    } else {
        testkit::ServerKind::Redis
    };
    let server = testkit::Server::start(kind).expect("server");
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    let ps = PubSub::builder()
        .address(server.addr().to_string())
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
    // Warm-up: connections, buffers, the script cache.
    phase(&ps, &got, "p", 1000);
    phase(&ps, &got, "h", 1000);
    println!("{kind:?}, {n} messages of {PAYLOAD} bytes over {CHANNELS} channels per phase");
    println!("phase    server µs/msg  client µs/msg");
    let mem_before = info(&server, "memory", "used_memory");
    let xlen_before = xlen_of(&server);
    let (mut kept_mem, mut xlen) = (0.0, 0.0);
    for round in 0..2 {
        for prefix in ["p", "h"] {
            let (s0, c0) = (server_cpu(&server), own_cpu());
            phase(&ps, &got, prefix, n);
            let (s1, c1) = (server_cpu(&server), own_cpu());
            let per = |a: f64, b: f64| (b - a) * 1e6 / n as f64;
            let name = if prefix == "p" { "plain" } else { "history" };
            println!("{name:<8} {:>13.2}  {:>13.2}", per(s0, s1), per(c0, c1));
            if round == 0 && prefix == "h" {
                kept_mem = info(&server, "memory", "used_memory") - mem_before;
                xlen = xlen_of(&server);
            }
        }
    }
    println!(
        "after the first history phase: {xlen} messages kept per channel, server memory grew {:.0} bytes \
         over the first history phase, {:.0} bytes per added message ({PAYLOAD}-byte payloads)",
        kept_mem,
        kept_mem / ((xlen - xlen_before) * CHANNELS as f64).max(1.0)
    );
    ps.shutdown();
}
