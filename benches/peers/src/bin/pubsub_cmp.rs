//! Subscribers side by side: the same C publisher drives each.
//!
//! `redis-benchmark -P 32 -c 2 -r 10000 PUBLISH bench:__rand_int__ <256 B>`
//! publishes 256-byte messages over 10,000 channels into one server while
//! one subscriber drains them. Like with like: every row names its protocol
//! and its subscribe connections, and each peer row has a shardsub row with
//! the same ones. shardsub's `PubSub` runs with its defaults (one subscribe
//! connection, RESP3, 2 workers here, the busy subscribe connection's 1 ms
//! delivery delay), then with 2 subscribe connections, then on RESP2, then
//! with the delivery delay off (what arrives is read at once); the `redis`
//! crate's async Pub/Sub (one connection, tokio with 2 worker threads) on
//! RESP2 (its default) and on RESP3. Only that
//! subscriber runs in this process, so `getrusage` gives its CPU, and its
//! context switches (voluntary + involuntary). Every phase is bounded.
//!
//! ```text
//! cd benches/peers
//! CARGO_TARGET_DIR=/work/target-pubsub-peers cargo run --release --bin pubsub_cmp [messages]
//! ```
//!
//! `PUBSUB_CMP_DEFAULT_ONLY=1` runs only shardsub's default row, once per
//! server (for profiling it).

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use testkit::{kinds, Server};

const CHANNELS: usize = 10_000;
const BOUND: Duration = Duration::from_secs(60);

/// CPU time and context switches (voluntary + involuntary) of this
/// process so far.
#[derive(Clone, Copy)]
struct Usage {
    cpu: Duration,
    switches: u64,
}

impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, o: Usage) -> Usage {
        Usage {
            cpu: self.cpu - o.cpu,
            switches: self.switches - o.switches,
        }
    }
}

fn usage() -> Usage {
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_SELF is valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    Usage {
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        switches: (usage.ru_nvcsw + usage.ru_nivcsw) as u64,
    }
}

fn channel(i: usize) -> String {
    format!("bench:{i:012}")
}

/// Waits until the server reports the first and last channels subscribed.
fn wait_subscribed(server: &Server) {
    let deadline = Instant::now() + BOUND;
    let (first, last) = (channel(0), channel(CHANNELS - 1));
    loop {
        let ones = match server.cmd(&[b"PUBSUB", b"NUMSUB", first.as_bytes(), last.as_bytes()]) {
            Ok(testkit::Value::Array(v)) => v
                .iter()
                .filter(|x| matches!(x, testkit::Value::Integer(1)))
                .count(),
            Ok(testkit::Value::Map(v)) => v
                .iter()
                .filter(|(_, x)| matches!(x, testkit::Value::Integer(1)))
                .count(),
            _ => 0,
        };
        if ones == 2 {
            return;
        }
        assert!(Instant::now() < deadline, "subscriptions not confirmed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs the C publisher; returns its wall time.
fn publish(server: &Server, n: u64) -> Duration {
    let payload = "x".repeat(256);
    let start = Instant::now();
    let status = Command::new("timeout")
        .arg("120")
        .arg("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
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
        .expect("redis-benchmark");
    assert!(status.status.success(), "redis-benchmark failed");
    start.elapsed()
}

/// Waits (bounded) until `seen` reaches `n` or stops moving for 2 s.
fn drain(seen: &AtomicU64, n: u64) {
    let deadline = Instant::now() + BOUND;
    let (mut last, mut still) = (0, Instant::now());
    while seen.load(Ordering::Relaxed) < n && Instant::now() < deadline {
        let now = seen.load(Ordering::Relaxed);
        if now != last {
            (last, still) = (now, Instant::now());
        } else if still.elapsed() > Duration::from_secs(2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One measured row: what ran, and what it cost.
struct Row {
    seen: u64,
    secs: f64,
    used: Usage,
    /// Subscribe connections the server lists for this subscriber.
    connections: usize,
}

/// Prints a row; returns its CPU seconds per million delivered.
fn report(kind: &str, who: &str, protocol: &str, n: u64, row: &Row) -> f64 {
    let per_m = row.seen.max(1) as f64 / 1e6;
    let cpu = row.used.cpu.as_secs_f64() / per_m;
    println!(
        "| {kind} | {who} | {protocol} | {} | {n} | {} | {:.0} | {cpu:.2} | {:.0} |",
        row.connections,
        row.seen,
        row.seen as f64 / row.secs,
        row.used.switches as f64 / per_m
    );
    cpu
}

/// Connections the server lists with at least one channel subscribed.
fn subscribe_connections(server: &Server) -> usize {
    let list = server
        .cmd(&[b"CLIENT", b"LIST"])
        .ok()
        .and_then(|v| testkit::values::text(&v))
        .unwrap_or_default();
    list.lines()
        .filter(|l| l.split(' ').any(|f| f.starts_with("sub=") && f != "sub=0"))
        .count()
}

/// Publishes `n` with the C publisher while `seen` counts, and measures.
fn measure(server: &Server, seen: &AtomicU64, n: u64) -> Row {
    wait_subscribed(server);
    let connections = subscribe_connections(server);
    let before = usage();
    let start = Instant::now();
    publish(server, n);
    drain(seen, n);
    Row {
        seen: seen.load(Ordering::Relaxed),
        secs: start.elapsed().as_secs_f64(),
        used: usage() - before,
        connections,
    }
}

/// One shardsub row: its defaults but for the subscribe connections, the
/// protocol and, where given, the delivery delay.
fn shardsub_run(
    server: &Server,
    n: u64,
    connections: usize,
    protocol: shardsub::Protocol,
    delay: Option<Duration>,
) -> Row {
    let seen = Arc::new(AtomicU64::new(0));
    let s2 = seen.clone();
    let mut b = shardsub::PubSub::builder();
    if let Some(d) = delay {
        b = b.delivery_delay(d);
    }
    let ps = b
        .address(server.addr().to_string())
        .subscribe_connections(connections)
        .protocol(protocol)
        .workers(2)
        .queue_capacity(1 << 16)
        .handler(move |_: &[u8], p: &[u8]| {
            std::hint::black_box(p);
            s2.fetch_add(1, Ordering::Relaxed);
        })
        .build()
        .expect("shardsub connects");
    let chans: Vec<String> = (0..CHANNELS).map(channel).collect();
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, BOUND).unwrap();
    let row = measure(server, &seen, n);
    ps.shutdown();
    row
}

fn redis_rs_run(server: &Server, n: u64, resp3: bool) -> Row {
    let seen = Arc::new(AtomicU64::new(0));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let protocol = if resp3 { "?protocol=resp3" } else { "" };
    let url = format!("redis://{}/{protocol}", server.addr());
    let s2 = seen.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let task = rt.spawn(async move {
        let client = redis::Client::open(url).unwrap();
        let mut pubsub = client.get_async_pubsub().await.unwrap();
        let chans: Vec<String> = (0..CHANNELS).map(channel).collect();
        pubsub.subscribe(&chans).await.unwrap();
        ready_tx.send(()).unwrap();
        let mut stream = pubsub.on_message();
        while let Some(msg) = stream.next().await {
            std::hint::black_box(msg.get_payload_bytes());
            s2.fetch_add(1, Ordering::Relaxed);
        }
    });
    ready_rx
        .recv_timeout(BOUND)
        .expect("redis crate subscribed");
    let row = measure(server, &seen, n);
    task.abort();
    rt.shutdown_timeout(Duration::from_secs(2));
    row
}

fn main() {
    use shardsub::Protocol::{Resp2, Resp3};
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    println!(
        "| server | subscriber | protocol | subscribe connections | published | delivered \
         | delivered/s | subscriber CPU s per 1M | context switches per 1M |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|");
    let mut ratios: Vec<(String, f64)> = Vec::new();
    if std::env::var_os("PUBSUB_CMP_DEFAULT_ONLY").is_some() {
        // Profiling aid: only shardsub's default row, once per server.
        for kind in kinds() {
            let server = Server::start(kind).unwrap();
            let row = shardsub_run(&server, n, 1, Resp3, None);
            report(kind.name(), "shardsub PubSub (default)", "RESP3", n, &row);
        }
        return;
    }
    for kind in kinds() {
        for _round in 0..2 {
            let name = kind.name();
            let fresh = || Server::start(kind).unwrap();
            let one = report(
                name,
                "shardsub PubSub (default)",
                "RESP3",
                n,
                &shardsub_run(&fresh(), n, 1, Resp3, None),
            );
            report(
                name,
                "shardsub PubSub",
                "RESP3",
                n,
                &shardsub_run(&fresh(), n, 2, Resp3, None),
            );
            let one2 = report(
                name,
                "shardsub PubSub",
                "RESP2",
                n,
                &shardsub_run(&fresh(), n, 1, Resp2, None),
            );
            report(
                name,
                "shardsub PubSub, delivery_delay 0",
                "RESP3",
                n,
                &shardsub_run(&fresh(), n, 1, Resp3, Some(Duration::ZERO)),
            );
            let peer2 = report(
                name,
                "redis 1.8.1 async pubsub (default)",
                "RESP2",
                n,
                &redis_rs_run(&fresh(), n, false),
            );
            let peer3 = report(
                name,
                "redis 1.8.1 async pubsub",
                "RESP3",
                n,
                &redis_rs_run(&fresh(), n, true),
            );
            ratios.push((format!("{name} RESP2"), one2 / peer2));
            ratios.push((format!("{name} RESP3"), one / peer3));
        }
    }
    println!();
    println!("| round | shardsub CPU / redis crate CPU, same protocol, one connection each |");
    println!("|---|---:|");
    for (what, r) in ratios {
        println!("| {what} | {r:.2} |");
    }
}
