//! Subscribing 1M channels on one server (time, client RSS, server memory)
//! and recovering from `CLIENT KILL TYPE pubsub` with 1M channels
//! subscribed (time until every channel is active again, and until every
//! channel has delivered a message published after the kill). Each server
//! first runs the same two steps as a raw pipe of `SUBSCRIBE` commands of
//! 512 channels over 4 plain sockets (`pubsub_support/raw_pipe.rs`): the
//! server's own limit in the same run, and the ratios to it.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-pubsub cargo bench -p shardsub --bench pubsub_subscribe
//! ```
//!
//! Env: `PUBSUB_BENCH_CHANNELS` (default 1,000,000; 10,000 with
//! `-- --test`); `SHARDSUB_SERVERS`
//! selects server kinds. Every wait is bounded (60 s).

#[path = "pubsub_support/raw_pipe.rs"]
mod raw_pipe;
#[path = "pubsub_support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::PubSub;
use support::{channel, process_cpu, rss_bytes, server_cpu, server_memory};
use testkit::threads::{cpu_by_thread, cpu_since};
use testkit::{kinds, Server};

const BOUND: Duration = Duration::from_secs(60);

fn wait_seen(seen: &AtomicU64, target: u64) -> bool {
    let deadline = Instant::now() + BOUND;
    while seen.load(Ordering::Relaxed) < target {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("PUBSUB_BENCH_CHANNELS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if std::env::args().any(|a| a == "--test") {
            10_000 // `cargo bench -- --test`: prove it works, quickly
        } else {
            1_000_000
        });
    println!("| server | step | time | notes |");
    println!("|---|---|---|---|");
    for kind in kinds() {
        let chans: Vec<Vec<u8>> = (0..n).map(channel).collect();
        let name = kind.name();
        // The server's own limit: the raw pipe on a fresh server.
        let raw = {
            let server = Server::start(kind).unwrap();
            let (sub, socks) = raw_pipe::subscribe_all(server.addr(), 4, &chans, BOUND);
            let t0 = Instant::now();
            let _ = server.cmd(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"]);
            drop(socks);
            let (again, _socks) = raw_pipe::subscribe_all(server.addr(), 4, &chans, BOUND);
            let again = again.map(|_| t0.elapsed());
            for (what, d) in [("subscribe", sub), ("resubscribe after the kill", again)] {
                println!(
                    "| {name} | raw pipe: {what}, SUBSCRIBE of {} over 4 sockets | {} | the server's limit |",
                    raw_pipe::BATCH,
                    d.map_or("timed out".to_string(), |d| format!("{:.0} ms", ms(d)))
                );
            }
            (sub, again)
        };
        let server = Server::start(kind).unwrap();
        let names: usize = chans.iter().map(Vec::len).sum();
        let seen = Arc::new(AtomicU64::new(0));
        let s2 = seen.clone();
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .subscribe_connections(4)
            .workers(2)
            .queue_capacity(1 << 20)
            .handler(move |_: &[u8], _: &[u8]| {
                s2.fetch_add(1, Ordering::Relaxed);
            })
            .build()
            .unwrap();
        let rss_before = rss_bytes();
        let mem_before = server_memory(&server);
        let cpu_before = process_cpu();
        let threads_before = cpu_by_thread();
        let scpu_before = server_cpu(&server);
        let t0 = Instant::now();
        ps.subscribe(&chans).unwrap();
        let queued = t0.elapsed();
        let ok = ps.wait_active(&chans, BOUND).is_ok();
        let active = t0.elapsed();
        let cpu = (process_cpu() - cpu_before).as_secs_f64();
        let split = by_thread(&threads_before);
        let scpu = server_cpu(&server) - scpu_before;
        let subscribe_cpu = cpu / scpu.max(1e-9);
        let rss = rss_bytes().saturating_sub(rss_before);
        let server_mem = server_memory(&server) - mem_before;
        let m = ps.metrics();
        let subscribed = active;
        println!(
            "| {name} | `subscribe()` returns | {:.0} ms | |",
            ms(queued)
        );
        println!(
            "| {name} | … all confirmed (`wait_active`) | {:.0} ms | ok={ok}, {} SUBSCRIBEs, client CPU {cpu:.2} s ({split}), server CPU {scpu:.2} s |",
            ms(active),
            m.subscribe_commands
        );
        println!(
            "| {name} | client RSS growth | {:.0} MB | {:.0} B/channel with the {:.1}-byte names; {:.0} beyond them (target ≤ 64) |",
            rss as f64 / 1e6,
            rss as f64 / n as f64,
            names as f64 / n as f64,
            (rss as f64 - names as f64) / n as f64
        );
        println!(
            "| {name} | server used_memory growth | {:.0} MB | {:.0} B/channel |",
            server_mem / 1e6,
            server_mem / n as f64
        );

        // Kill every subscribe connection; the engine reconnects,
        // signals the gap and resubscribes everything.
        let cpu_before = process_cpu();
        let threads_before = cpu_by_thread();
        let scpu_before = server_cpu(&server);
        let t0 = Instant::now();
        let _ = server.cmd(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"]);
        // Wait for all 4 reconnects to be handled (resubscribes sent), then
        // for every confirmation.
        let deadline = Instant::now() + BOUND;
        while ps.metrics().reconnects < 4 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let ok = ps.wait_active(&chans, BOUND).is_ok();
        let active = t0.elapsed();
        let cpu = (process_cpu() - cpu_before).as_secs_f64();
        let split = by_thread(&threads_before);
        let scpu = server_cpu(&server) - scpu_before;
        let recover_cpu = cpu / scpu.max(1e-9);
        let before = seen.load(Ordering::Relaxed);
        for c in &chans {
            while ps.publish(c, b"after-kill").is_err() {
                std::thread::yield_now();
            }
        }
        let delivered = wait_seen(&seen, before + n as u64);
        let all = t0.elapsed();
        let m = ps.metrics();
        println!(
            "| {name} | `CLIENT KILL TYPE pubsub` → all confirmed again | {:.0} ms | ok={ok}, {} reconnects, {} channels in gaps, client CPU {cpu:.2} s ({split}), server CPU {scpu:.2} s |",
            ms(active),
            m.reconnects,
            m.gap_channels
        );
        println!(
            "| {name} | … and a message to each channel delivered | {:.0} ms | ok={delivered}, dropped {} |",
            ms(all),
            m.dropped.total()
        );
        let ratio = |ours: Duration, theirs: Option<Duration>| {
            theirs.map_or("-".to_string(), |t| {
                format!("{:.2}", ours.as_secs_f64() / t.as_secs_f64().max(1e-9))
            })
        };
        println!(
            "| {name} | ÷ raw pipe: subscribe, recover | {} , {} | target ≤ 1.10 |",
            ratio(subscribed, raw.0),
            ratio(active, raw.1)
        );
        println!(
            "| {name} | client ÷ server CPU: subscribe, recover | {subscribe_cpu:.2} , {:.2} | target ≤ 0.5 |",
            recover_cpu
        );
        ps.shutdown();
    }
}

/// The client's CPU since `before` by thread: the caller (this process's
/// own threads: subscribing and waiting), the control thread, the I/O
/// threads and the workers, in seconds.
fn by_thread(before: &BTreeMap<String, f64>) -> String {
    let spent = cpu_since(before, &cpu_by_thread());
    let of = |name: &str| spent.get(name).copied().unwrap_or(0.0);
    let caller: f64 = spent
        .iter()
        .filter(|(name, _)| !name.starts_with("shardsub-"))
        .map(|(_, s)| s)
        .sum();
    format!(
        "caller {caller:.2}, control {:.2}, I/O {:.2}, workers {:.2}",
        of("shardsub-contro"),
        of("shardsub-io"),
        of("shardsub-worker")
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
