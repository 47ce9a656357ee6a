//! Cluster measurements for BENCHMARKS.md, on real local clusters.
//!
//! ```text
//! cargo run --release --example cluster_bench -- cpu [redis|valkey] [messages]
//! cargo run --release --example cluster_bench -- cpu-per-primary [redis|valkey] [messages-per-primary] [runs]
//! cargo run --release --example cluster_bench -- resubscribe [redis|valkey] [engines] [channels]
//! cargo run --release --example cluster_bench -- publish-cost [redis|valkey] [messages]
//! valgrind --tool=callgrind --zero-before='*instr_begin*' --dump-after='*instr_end*' \
//!     target/release/examples/cluster_bench publish-instr [redis|valkey] [messages]
//! ```
//!
//! `publish-instr` (see `run_publish_instr`): under callgrind, two dumps
//! (`callgrind.out.<pid>.1` for the engine, `.2` for the cluster), each
//! holding every thread's instructions of one counted window; its
//! `totals:` line divided by `messages` is instructions per publish.
//!
//! `cpu`: server CPU (`INFO CPU` used_cpu_sys + used_cpu_user, summed over
//! all masters) per million delivered messages, with 1, 3 and 6 masters,
//! sharded node-grouped vs classic Pub/Sub. One instance subscribes to
//! 1,000 channels and publishes `messages` 64-byte messages over them in
//! windows of 5,000 (it waits for delivery to catch up, so nothing drops).
//!
//! `cpu-per-primary`: the same, at the same load per primary: with N
//! masters it publishes N × `messages-per-primary` messages in windows of
//! N × 5,000, so every master sees the same batches as the one master
//! does, and the table gives each master's messages per read and per write.
//! Sharded rows are the median of `runs` runs (3 by default), with their
//! spread; classic rows one run of a third of the messages.
//!
//! `resubscribe`: `engines` instances each subscribe to `channels` channels
//! on 6 masters; `CLIENT KILL TYPE pubsub` on every master makes them all
//! resubscribe at once. Where the channels live (per master) and the
//! `SSUBSCRIBE` calls per master (from `INFO commandstats`), over 16
//! resubscribe workers, for 128 partitions split by partition and by
//! channel, and for partitions off (names kept: split by slot).

mod cpu;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cpu::server_cpu;

use shardsub::cluster::ResubscribeSplit;
use shardsub::PubSub;
use testkit::{Cluster, ServerKind};

fn ssubscribe_calls(cluster: &Cluster, i: usize) -> u64 {
    let v = cluster
        .node(i)
        .cmd(&[b"INFO", b"commandstats"])
        .expect("info");
    let t = testkit::values::text(&v).unwrap_or_default();
    testkit::values::info_field(&t, "cmdstat_ssubscribe")
        .and_then(|s| {
            s.split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn kind_arg(arg: Option<&String>) -> ServerKind {
    arg.and_then(|a| ServerKind::from_name(a))
        .unwrap_or(ServerKind::Redis)
}

fn run_resubscribe(kind: ServerKind, engines: usize, channels: usize) {
    let cluster = Cluster::start(kind, 6, 0).expect("cluster");
    let masters = cluster.masters();
    println!(
        "| layout | engines | channels each | channels per master (min–max) \
         | SSUBSCRIBE per master (min–max) | total | restored in |"
    );
    println!("|---|---:|---:|---|---|---:|---:|");
    let layouts = [
        ("128 partitions, grouped", 128, ResubscribeSplit::Partitions),
        (
            "128 partitions, per channel",
            128,
            ResubscribeSplit::Channels,
        ),
        (
            "partitions off (names kept)",
            0,
            ResubscribeSplit::Partitions,
        ),
    ];
    for (layout, partitions, split) in layouts {
        let chans: Vec<Vec<u8>> = (0..channels)
            .map(|i| format!("rs:{i}").into_bytes())
            .collect();
        let insts: Vec<PubSub> = (0..engines)
            .map(|_| {
                PubSub::builder()
                    .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
                    .partitions(partitions)
                    .resubscribe_split(split)
                    .resubscribe_workers(16)
                    .workers(1)
                    .handler(|_: &[u8], _: &[u8]| {})
                    .build()
                    .expect("cluster pubsub")
            })
            .collect();
        for ps in &insts {
            ps.subscribe(&chans).unwrap();
            ps.wait_active(&chans, Duration::from_secs(30)).unwrap();
        }
        // Where the channels live: their server names' slots' owners.
        let mut per_master = vec![0u64; masters.len()];
        for c in &chans {
            let slot = shardcore::key_slot(&insts[0].server_channel(c));
            let owner = cluster.owner_of_slot(slot).expect("an owner");
            if let Some(i) = masters.iter().position(|&m| m == owner) {
                per_master[i] += 1;
            }
        }
        let before: Vec<u64> = masters
            .iter()
            .map(|&m| ssubscribe_calls(&cluster, m))
            .collect();
        let start = Instant::now();
        for &m in &masters {
            cluster
                .node(m)
                .cmd(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"])
                .expect("client kill");
        }
        // Wait until every instance has reconnected and resubscribed.
        let deadline = Instant::now() + Duration::from_secs(60);
        for ps in &insts {
            while ps.metrics().reconnects < masters.len() as u64 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            ps.wait_active(&chans, Duration::from_secs(30)).unwrap();
        }
        let took = start.elapsed();
        let per: Vec<u64> = masters
            .iter()
            .zip(&before)
            .map(|(&m, b)| ssubscribe_calls(&cluster, m) - b)
            .collect();
        let spread = |v: &[u64]| {
            let (min, max) = (v.iter().min().unwrap(), v.iter().max().unwrap());
            format!("{min}–{max}")
        };
        println!(
            "| {layout} | {engines} | {channels} | {} | {} | {} | {took:.2?} |",
            spread(&per_master),
            spread(&per),
            per.iter().sum::<u64>()
        );
        drop(insts);
    }
}

/// This process's user + system CPU seconds (from /proc/self/stat).
fn process_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

/// Repetitions of `publish-cost` after its warm-up round.
const COST_REPS: usize = 5;

/// Client CPU and wall time per publish on a 1-master cluster:
/// `PubSub::publish_pending` with a callback (slot routing, redirect-safe
/// copy, a pooled handle and a callback per publish) and fire-and-forget `PubSub::publish` against the plain
/// engine's `SPUBLISH` to the same node (zero-allocation path), all waited
/// for (no subscribers). A warm-up round, then [`COST_REPS`] rounds of the
/// three paths in turn; the table gives each path's median and spread, and
/// its ratio to the engine's round by round.
fn run_publish_cost(kind: ServerKind, messages: u64) {
    let cluster = Cluster::start(kind, 1, 0).expect("cluster");
    let addr = cluster.seed_addrs()[0].to_string();
    let chans: Vec<Vec<u8>> = (0..1000).map(|i| format!("pc:{i}").into_bytes()).collect();
    let payload = [b'x'; 64];
    // Per path: (client CPU ns per publish, server CPU s, wall s) per round.
    let mut runs: [Vec<(f64, f64, f64)>; 3] = Default::default();
    for round in 0..=COST_REPS {
        let mut record = |path: usize, c: f64, s: f64, wall: Duration| {
            if round > 0 {
                runs[path].push((c * 1e9 / messages as f64, s, wall.as_secs_f64()));
            }
        };
        // Engine: fire-and-forget SPUBLISH of the same server names.
        let engine = shardsub::engine::Engine::builder()
            .address(addr.clone())
            .io_threads(1)
            .build()
            .expect("engine");
        let parts = shardcore::Partitions::new(128).unwrap();
        let names: Vec<Vec<u8>> = chans.iter().map(|c| parts.redis_channel(c)).collect();
        let (c0, s0, t0) = (process_cpu(), server_cpu(&cluster), Instant::now());
        for n in names.iter().cycle().take(messages as usize) {
            while engine
                .publish_with(n, &payload, shardsub::engine::PublishOptions::sharded())
                .is_err()
            {
                std::thread::yield_now();
            }
        }
        while engine.stats().replies < messages && t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(1));
        }
        record(
            0,
            process_cpu() - c0,
            server_cpu(&cluster) - s0,
            t0.elapsed(),
        );
        engine.shutdown();
        // PubSub: routed, redirect-safe; completion counted.
        let done = Arc::new(AtomicU64::new(0));
        let ps = PubSub::builder()
            .seed(addr.clone())
            .workers(1)
            .handler(|_: &[u8], _: &[u8]| {})
            .build()
            .expect("cluster pubsub");
        let (c0, s0, t0) = (process_cpu(), server_cpu(&cluster), Instant::now());
        for c in chans.iter().cycle().take(messages as usize) {
            let d = done.clone();
            ps.publish_pending(c, payload).then(move |_| {
                d.fetch_add(1, Ordering::Relaxed);
            });
        }
        while done.load(Ordering::Relaxed) < messages && t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(1));
        }
        record(
            1,
            process_cpu() - c0,
            server_cpu(&cluster) - s0,
            t0.elapsed(),
        );
        // PubSub (cluster) fire-and-forget: the same routing, no callback; the
        // last reply awaited through one acknowledged publish after them.
        let (c0, s0, t0) = (process_cpu(), server_cpu(&cluster), Instant::now());
        for c in chans.iter().cycle().take(messages as usize) {
            ps.publish(c, payload).expect("publish");
        }
        let end = ps.publish_wait(b"end", b"end", Duration::from_secs(60));
        end.expect("end marker");
        record(
            2,
            process_cpu() - c0,
            server_cpu(&cluster) - s0,
            t0.elapsed(),
        );
        ps.shutdown();
    }
    println!(
        "| path | messages per round | client CPU ns per publish, median (min–max of {COST_REPS}) | ÷ engine, median (min–max, round by round) | wall s, median | server CPU s, median |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let names = [
        "Engine::publish_with (SPUBLISH, no redirects)",
        "PubSub::publish_pending + then (routed, redirect-safe)",
        "PubSub::publish on a cluster (fire-and-forget, routed, redirect-safe)",
    ];
    for (path, name) in names.iter().enumerate() {
        let cpu: Vec<f64> = runs[path].iter().map(|r| r.0).collect();
        let ratio: Vec<f64> = runs[path]
            .iter()
            .zip(&runs[0])
            .map(|(r, e)| r.0 / e.0.max(1.0))
            .collect();
        let (c, c_lo, c_hi) = spread(&cpu);
        let (r, r_lo, r_hi) = spread(&ratio);
        let ratio = if path == 0 {
            "1".to_string()
        } else {
            format!("{r:.2} ({r_lo:.2}–{r_hi:.2})")
        };
        let wall = spread(&runs[path].iter().map(|r| r.2).collect::<Vec<_>>()).0;
        let server = spread(&runs[path].iter().map(|r| r.1).collect::<Vec<_>>()).0;
        println!(
            "| {name} | {messages} | {c:.0} ({c_lo:.0}–{c_hi:.0}) | {ratio} | {wall:.2} | {server:.2} |"
        );
    }
}

/// Median, minimum and maximum of `v` (zeros when empty).
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match (s.first(), s.last()) {
        (Some(&lo), Some(&hi)) => (s[s.len() / 2], lo, hi),
        _ => (0.0, 0.0, 0.0),
    }
}

/// Marks the start of a counted window: callgrind's
/// `--zero-before='*instr_begin*'` zeroes every thread's counts here.
#[inline(never)]
fn instr_begin(path: &str) {
    std::hint::black_box(path);
}

/// Marks the end of a counted window: `--dump-after='*instr_end*'` writes
/// every thread's counts since [`instr_begin`] (one dump file per window).
#[inline(never)]
fn instr_end(path: &str) -> usize {
    // Not the same body as `instr_begin`, or the two would be folded into
    // one symbol.
    std::hint::black_box(path.len())
}

/// Three rounds of `n`, the second while the node is paused (for 1.5 × the
/// first round's time, 0.3 to 3 s), so every buffer, queue and pool on the path reaches
/// the depth of a whole round in flight: no window after it can go deeper
/// (and allocate), however the threads are scheduled.
fn warm_up(cluster: &Cluster, round: &dyn Fn(usize), n: usize) {
    let t0 = Instant::now();
    round(n);
    // At most 3 s: a publish waiting longer than the node engine's request
    // timeout (5 s) would fail, as can happen under callgrind.
    let ms = (t0.elapsed().as_millis() * 3 / 2)
        .clamp(300, 3000)
        .to_string();
    let paused = cluster
        .node(0)
        .cmd(&[b"CLIENT", b"PAUSE", ms.as_bytes(), b"ALL"]);
    paused.expect("client pause");
    round(n);
    round(n);
}

/// Instructions per publish, for callgrind: the same `messages` 64-byte
/// messages over 1,000 channels to a 1-master cluster, fire-and-forget,
/// first with `Engine::publish_with(.., sharded)` (the server names
/// precomputed), then with `PubSub::publish` on a cluster. Each path is warmed up
/// ([`warm_up`]), then one window runs between [`instr_begin`] and
/// [`instr_end`]: the loop and the wait for every reply (one acknowledged
/// marker publish on the same connection), so the I/O thread's work is in
/// it. The cluster's periodic control work (topology poll, liveness probe)
/// is switched off so it cannot fall into the window. Outside callgrind it
/// runs as a plain benchmark.
fn run_publish_instr(kind: ServerKind, messages: u64) {
    let cluster = Cluster::start(kind, 1, 0).expect("cluster");
    let addr = cluster.seed_addrs()[0].to_string();
    let chans: Vec<Vec<u8>> = (0..1000).map(|i| format!("pc:{i}").into_bytes()).collect();
    let payload = [b'x'; 64];
    let n = messages as usize;

    let engine = shardsub::engine::Engine::builder()
        .address(addr.clone())
        .io_threads(1)
        .build()
        .expect("engine");
    let parts = shardcore::Partitions::new(128).unwrap();
    let names: Vec<Vec<u8>> = chans.iter().map(|c| parts.redis_channel(c)).collect();
    let engine_round = |n: usize| {
        for name in names.iter().cycle().take(n) {
            while engine
                .publish_with(name, &payload, shardsub::engine::PublishOptions::sharded())
                .is_err()
            {
                std::thread::yield_now();
            }
        }
        let end = engine.publish_pending(
            b"{x}.end",
            b"end",
            shardsub::engine::PublishOptions::sharded(),
        );
        end.wait().expect("engine end marker");
    };
    warm_up(&cluster, &engine_round, n);
    let t0 = Instant::now();
    instr_begin("engine");
    engine_round(n);
    let _ = instr_end("engine");
    println!("engine: {messages} publishes in {:.2?}", t0.elapsed());
    engine.shutdown();

    let ps = PubSub::builder()
        .seed(addr)
        .workers(1)
        .handler(|_: &[u8], _: &[u8]| {})
        .poll_interval(Duration::from_secs(3600))
        .probe_interval(Duration::ZERO)
        .build()
        .expect("cluster pubsub");
    let cluster_round = |n: usize| {
        for c in chans.iter().cycle().take(n) {
            ps.publish(c, payload).expect("publish");
        }
        let end = ps.publish_wait(b"end", b"end", Duration::from_secs(600));
        end.expect("cluster end marker");
    };
    warm_up(&cluster, &cluster_round, n);
    let t0 = Instant::now();
    instr_begin("cluster");
    cluster_round(n);
    let _ = instr_end("cluster");
    println!("cluster: {messages} publishes in {:.2?}", t0.elapsed());
    let m = ps.cluster_metrics().expect("a cluster");
    println!("cluster publish_failed: {}", m.publish_failed);
    ps.shutdown();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = kind_arg(args.get(1));
    match args.first().map(String::as_str) {
        Some("cpu") => {
            let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200_000);
            cpu::run_fixed_total(kind, n);
        }
        Some("cpu-per-primary") => {
            let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(150_000);
            let reps = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
            cpu::run_per_primary(kind, n, reps);
        }
        Some("resubscribe") => {
            let e = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
            let c = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5_000);
            run_resubscribe(kind, e, c);
        }
        Some("publish-cost") => {
            let n = args
                .get(2)
                .and_then(|s| s.parse().ok())
                .unwrap_or(1_000_000);
            run_publish_cost(kind, n);
        }
        Some("publish-instr") => {
            let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
            run_publish_instr(kind, n);
        }
        _ => eprintln!(
            "usage: cluster_bench cpu|cpu-per-primary|resubscribe|publish-cost|publish-instr \
             [redis|valkey] [...]"
        ),
    }
}
