//! Subscribers side by side: the same C publisher drives both.
//!
//! `redis-benchmark -P 32 -c 2 -r 10000 PUBLISH bench:__rand_int__ <256 B>`
//! publishes 256-byte messages over 10,000 channels into one server while
//! one subscriber drains them: shardsub's `PubSub` (2 subscribe
//! connections, 2 workers) or the `redis` crate's async Pub/Sub (one
//! connection, tokio with 2 worker threads). Only that subscriber runs in
//! this process, so `getrusage` gives its CPU. Every phase is bounded.
//!
//! ```text
//! cd benches/peers
//! CARGO_TARGET_DIR=/work/target-pubsub-peers cargo run --release --bin pubsub_cmp [messages]
//! ```

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use testkit::{kinds, Server};

const CHANNELS: usize = 10_000;
const BOUND: Duration = Duration::from_secs(60);

fn cpu() -> Duration {
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_SELF is valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
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

fn report(kind: &str, who: &str, n: u64, seen: u64, secs: f64, cpu: Duration) {
    println!(
        "| {kind} | {who} | {n} | {seen} | {:.0} | {:.2} |",
        seen as f64 / secs,
        cpu.as_secs_f64() / (seen.max(1) as f64 / 1e6)
    );
}

fn shardsub_run(server: &Server, n: u64) -> (u64, f64, Duration) {
    let seen = Arc::new(AtomicU64::new(0));
    let s2 = seen.clone();
    let ps = shardsub::PubSub::builder()
        .address(server.addr().to_string())
        .subscribe_connections(2)
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
    wait_subscribed(server);
    let cpu0 = cpu();
    let start = Instant::now();
    publish(server, n);
    drain(&seen, n);
    let r = (
        seen.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64(),
        cpu() - cpu0,
    );
    ps.shutdown();
    r
}

fn redis_rs_run(server: &Server, n: u64) -> (u64, f64, Duration) {
    let seen = Arc::new(AtomicU64::new(0));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = format!("redis://{}/", server.addr());
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
    wait_subscribed(server);
    let cpu0 = cpu();
    let start = Instant::now();
    publish(server, n);
    drain(&seen, n);
    let r = (
        seen.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64(),
        cpu() - cpu0,
    );
    task.abort();
    rt.shutdown_timeout(Duration::from_secs(2));
    r
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    println!(
        "| server | subscriber | published | delivered | delivered/s | subscriber CPU s per 1M |"
    );
    println!("|---|---|---|---|---|---|");
    for kind in kinds() {
        for _round in 0..2 {
            let server = Server::start(kind).unwrap();
            let (seen, secs, c) = shardsub_run(&server, n);
            report(kind.name(), "shardsub PubSub", n, seen, secs, c);
            let server = Server::start(kind).unwrap();
            let (seen, secs, c) = redis_rs_run(&server, n);
            report(kind.name(), "redis 1.8.1 async pubsub", n, seen, secs, c);
        }
    }
}
