//! Pub/Sub throughput: 256-byte messages over 10,000 channels, one
//! publisher `PubSub` and one subscriber `PubSub` in this process, on 1, 2
//! and 4 client-side shards; plus a C load, `redis-benchmark` publishing
//! while the same subscriber drains. Every row says what limits it: the
//! busy share of the server's core (`INFO CPU` / wall time) and of the
//! client's cores (`getrusage` / wall time), and the server-bound ceiling
//! for that row's per-message server cost (a single-threaded server
//! cannot deliver faster than one core / its CPU per message).
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-pubsub cargo bench -p shardsub --bench pubsub_throughput
//! ```
//!
//! Env: `PUBSUB_BENCH_SECS` (default 3; 0.2 with `-- --test`) per phase; `SHARDSUB_SERVERS`
//! selects server kinds as for the tests. Every phase is bounded in time.

#[path = "pubsub_support/mod.rs"]
mod support;

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::PubSub;
use support::{channel, process_cpu, server_cpu, PAYLOAD};
use testkit::{kinds, ServerKind, Servers};

const CHANNELS: usize = 10_000;
/// Messages in flight (published, not yet handled) in the closed loop.
const WINDOW: u64 = 20_000;

struct Row {
    what: String,
    delivered: u64,
    secs: f64,
    client_cpu: f64,
    server_cpu: f64,
    dropped: u64,
    lag: Option<shardsub::LagSnapshot>,
    /// Busy share of every CPU of the machine over the row (`/proc/stat`).
    machine_busy: f64,
}

/// The machine's CPUs, for the client's busy share.
fn cpus() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// Busy and total jiffies of every CPU so far (`/proc/stat`), so a row can
/// say whether the whole machine, other processes included, was busy.
fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The machine's busy share since `before` (from [`machine_jiffies`]).
fn busy_since(before: (u64, u64)) -> f64 {
    let now = machine_jiffies();
    let total = now.1.saturating_sub(before.1);
    now.0.saturating_sub(before.0) as f64 / total.max(1) as f64
}

/// How a row's messages were published.
#[derive(Clone, Copy, PartialEq)]
enum Load {
    /// `redis-benchmark`, as fast as it goes.
    C,
    /// The closed loop: at most `WINDOW` published and not yet handled.
    Closed,
    /// Paced at a fixed rate.
    Paced,
}

impl Row {
    fn print(&self, shards: usize, load: Load) {
        let per_m = |cpu: f64| cpu / (self.delivered.max(1) as f64 / 1e6);
        let lag = self.lag.map_or("-".to_string(), |l| {
            format!("{:.1} / {:.1} / {:.1}", ms(l.p50), ms(l.p99), ms(l.max))
        });
        // Each server is one thread: its busy share is of one core (the
        // mean over the shards); the client's is of the whole machine.
        let server_busy = self.server_cpu / self.secs / shards as f64;
        let client_busy = self.client_cpu / self.secs / cpus();
        let machine_busy = self.machine_busy;
        let ceiling = shards as f64 * 1e6 / per_m(self.server_cpu).max(1e-9);
        let limit = if server_busy >= 0.9 {
            "the server (its core busy)"
        } else if machine_busy >= 0.9 {
            "the machine (every core busy: servers, client, anything else)"
        } else {
            match load {
                Load::C => "the C publisher (its connections' round trips)",
                Load::Closed => "the window (20,000 in flight ÷ publish-to-handler time)",
                Load::Paced => "the pacing",
            }
        };
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {:.0}% | {:.0}% | {:.0}% | {:.0} | {limit} |",
            self.what,
            self.delivered,
            self.delivered as f64 / self.secs,
            per_m(self.client_cpu),
            per_m(self.server_cpu),
            self.dropped,
            lag,
            server_busy * 100.0,
            client_busy * 100.0,
            machine_busy * 100.0,
            ceiling,
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn subscriber(addrs: &[String], seen: &Arc<AtomicU64>) -> PubSub {
    let s = seen.clone();
    let ps = PubSub::builder()
        .addresses(addrs.iter().cloned())
        .workers(2)
        .queue_capacity(1 << 16)
        .envelope(true)
        .handler(move |_: &[u8], _: &[u8]| {
            s.fetch_add(1, Ordering::Relaxed);
        })
        .build()
        .expect("subscriber");
    let chans: Vec<Vec<u8>> = (0..CHANNELS).map(channel).collect();
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, Duration::from_secs(30)).unwrap();
    ps
}

fn publisher(addrs: &[String]) -> PubSub {
    PubSub::builder()
        .addresses(addrs.iter().cloned())
        .subscribe_connections(1)
        .workers(1)
        .envelope(true)
        .handler(|_: &[u8], _: &[u8]| {})
        .build()
        .expect("publisher")
}

/// Waits (bounded) until `seen` stops short of `target` no more.
fn drain(seen: &AtomicU64, target: u64, sub: &PubSub) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.load(Ordering::Relaxed) < target && Instant::now() < deadline {
        let m = sub.metrics();
        if m.delivered + m.dropped.total() >= target {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Publishes for `secs`, at most `rate` messages/s (0: as fast as the
/// window allows), and returns the row.
fn run(what: String, servers: &Servers, secs: f64, rate: f64) -> Row {
    let addrs: Vec<String> = servers.addrs().iter().map(|a| a.to_string()).collect();
    let seen = Arc::new(AtomicU64::new(0));
    let sub = subscriber(&addrs, &seen);
    let publ = publisher(&addrs);
    let chans: Vec<Vec<u8>> = (0..CHANNELS).map(channel).collect();
    let server_before: f64 = servers.iter().map(server_cpu).sum();
    let cpu_before = process_cpu();
    let jiffies_before = machine_jiffies();
    let start = Instant::now();
    let stop = start + Duration::from_secs_f64(secs);
    let mut published = 0u64;
    let mut i = 0usize;
    'outer: loop {
        let now = Instant::now();
        if now >= stop {
            break;
        }
        let allowed = if rate > 0.0 {
            (now.duration_since(start).as_secs_f64() * rate) as u64
        } else {
            seen.load(Ordering::Relaxed) + WINDOW
        };
        if published >= allowed {
            // Sleep rather than spin, so the client CPU is the engines'.
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        for _ in 0..(allowed - published).min(256) {
            if publ.publish(&chans[i], PAYLOAD).is_err() {
                continue 'outer;
            }
            i = (i + 1) % CHANNELS;
            published += 1;
        }
    }
    drain(&seen, published, &sub);
    let secs = start.elapsed().as_secs_f64();
    let client_cpu = (process_cpu() - cpu_before).as_secs_f64();
    let server_cpu = servers.iter().map(server_cpu).sum::<f64>() - server_before;
    let m = sub.metrics();
    publ.shutdown();
    sub.shutdown();
    Row {
        what,
        delivered: m.delivered,
        secs,
        client_cpu,
        server_cpu,
        dropped: m.dropped.total(),
        lag: m.lag,
        machine_busy: busy_since(jiffies_before),
    }
}

/// The C load: redis-benchmark publishes (pipelined, 2 clients) to random
/// channels of the 10,000 while our subscriber drains. Not a ceiling on
/// this machine: redis-benchmark needs a core of its own.
fn c_load(kind: ServerKind, secs: f64) -> (Row, f64) {
    let servers = Servers::start(kind, 1).unwrap();
    let addr = servers[0].addr();
    let seen = Arc::new(AtomicU64::new(0));
    let sub = subscriber(&[addr.to_string()], &seen);
    let n = (secs * 400_000.0) as u64;
    let payload = String::from_utf8(PAYLOAD.to_vec()).unwrap();
    let server_before = server_cpu(&servers[0]);
    let cpu_before = process_cpu();
    let jiffies_before = machine_jiffies();
    let start = Instant::now();
    let out = Command::new("timeout")
        .args([&format!("{}", (secs * 10.0) as u64 + 10), "redis-benchmark"])
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args([
            "-n",
            &n.to_string(),
            "-P",
            "32",
            "-c",
            "2",
            "-r",
            "10000",
            "-q",
        ])
        .args(["PUBLISH", "bench:__rand_int__", &payload])
        .output()
        .expect("redis-benchmark runs");
    let bench_secs = start.elapsed().as_secs_f64();
    drain(&seen, n, &sub);
    let secs = start.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .rsplit("requests per second")
        .nth(1)
        .and_then(|s| s.rsplit(": ").next())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(n as f64 / bench_secs);
    let m = sub.metrics();
    let row = Row {
        what: format!(
            "{} C load: redis-benchmark -P 32 -c 2 publishing",
            kind.name()
        ),
        delivered: m.delivered,
        secs,
        client_cpu: (process_cpu() - cpu_before).as_secs_f64(),
        server_cpu: server_cpu(&servers[0]) - server_before,
        dropped: m.dropped.total(),
        lag: None,
        machine_busy: busy_since(jiffies_before),
    };
    sub.shutdown();
    (row, rps)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` probes harness=false benches
    }
    // `cargo bench -- --test` (the test command's "benches once") runs
    // each phase briefly, to prove the bench works.
    let smoke = std::env::args().any(|a| a == "--test");
    let secs: f64 = std::env::var("PUBSUB_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if smoke { 0.2 } else { 3.0 });
    println!(
        "| run | delivered | delivered/s | client CPU s per 1M | server CPU s per 1M | dropped \
         | lag p50 / p99 / max ms | server core busy | client cores busy | machine busy \
         | server-bound ceiling msg/s | what limits it |"
    );
    println!("|---|---|---|---|---|---|---|---:|---:|---:|---:|---|");
    for kind in kinds() {
        let (row, rps) = c_load(kind, secs);
        row.print(1, Load::C);
        println!(
            "| {} redis-benchmark reported | {rps:.0} PUBLISH/s | | | | | | | | | | |",
            kind.name()
        );
        let mut max_rate = 0.0;
        for shards in [1, 2, 4] {
            let servers = Servers::start(kind, shards).unwrap();
            let row = run(
                format!("{} shardsub, {shards} shard(s), closed loop", kind.name()),
                &servers,
                secs,
                0.0,
            );
            row.print(shards, Load::Closed);
            if shards == 1 {
                max_rate = row.delivered as f64 / row.secs;
            }
        }
        let servers = Servers::start(kind, 1).unwrap();
        let half = run(
            format!("{} shardsub, 1 shard, 50% of max rate", kind.name()),
            &servers,
            secs,
            max_rate / 2.0,
        );
        half.print(1, Load::Paced);
    }
}
