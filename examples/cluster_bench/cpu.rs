//! `cpu` and `cpu-per-primary`: server CPU per million delivered messages
//! with 1, 3 and 6 masters, sharded node-grouped vs classic Pub/Sub, at a
//! fixed total load or at the same load per primary.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::cluster::Mode;
use shardsub::PubSub;
use testkit::{Cluster, ServerKind};

pub fn info_f64(cluster: &Cluster, i: usize, section: &str, field: &str) -> f64 {
    let v = cluster
        .node(i)
        .cmd(&[b"INFO", section.as_bytes()])
        .expect("info");
    let t = testkit::values::text(&v).unwrap_or_default();
    testkit::values::info_field(&t, field)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0)
}

pub fn server_cpu(cluster: &Cluster) -> f64 {
    cluster
        .masters()
        .iter()
        .map(|&i| {
            info_f64(cluster, i, "cpu", "used_cpu_sys")
                + info_f64(cluster, i, "cpu", "used_cpu_user")
        })
        .sum()
}

/// Reads and writes the masters' event loops processed (`INFO stats`).
fn reads_writes(cluster: &Cluster) -> (f64, f64) {
    cluster.masters().iter().fold((0.0, 0.0), |(r, w), &i| {
        (
            r + info_f64(cluster, i, "stats", "total_reads_processed"),
            w + info_f64(cluster, i, "stats", "total_writes_processed"),
        )
    })
}

/// One measured (masters, mode) cell.
struct Cell {
    sent: u64,
    delivered: u64,
    lost: u64,
    elapsed: Duration,
    used: f64,
    idle: f64,
    reads: f64,
    writes: f64,
}

impl Cell {
    fn per_m(&self, cpu: f64) -> f64 {
        cpu / (self.delivered.max(1) as f64 / 1e6)
    }
}

/// One instance subscribes to 1,000 channels and publishes `messages`
/// 64-byte messages over them, `window` at a time: it waits until all but
/// one window is delivered before the next, so nothing drops.
fn measure(cluster: &Cluster, mode: Mode, messages: u64, window: u64) -> Cell {
    let count = Arc::new(AtomicU64::new(0));
    let c2 = count.clone();
    let ps = PubSub::builder()
        .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
        .mode(mode)
        .workers(1)
        .queue_capacity(65_536.max(2 * window as usize))
        .handler(move |_: &[u8], _: &[u8]| {
            c2.fetch_add(1, Ordering::Relaxed);
        })
        .build()
        .expect("cluster pubsub");
    let chans: Vec<Vec<u8>> = (0..1000).map(|i| format!("cpu:{i}").into_bytes()).collect();
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, Duration::from_secs(20)).unwrap();
    let payload = [b'x'; 64];
    let before = server_cpu(cluster);
    let (r0, w0) = reads_writes(cluster);
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < messages && start.elapsed() < Duration::from_secs(120) {
        for c in chans.iter().cycle().take(window as usize) {
            ps.publish(c, payload).unwrap();
        }
        sent += window;
        let wait = Instant::now();
        while count.load(Ordering::Relaxed) + window < sent
            && wait.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let wait = Instant::now();
    while count.load(Ordering::Relaxed) < sent && wait.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let delivered = count.load(Ordering::Relaxed);
    let used = server_cpu(cluster) - before;
    let (r1, w1) = reads_writes(cluster);
    let elapsed = start.elapsed();
    // Idle baseline (cron, cluster bus), measured over up to 3 s with the
    // connections still open and scaled to the run's time.
    let idle_start = server_cpu(cluster);
    let idle_for = elapsed.min(Duration::from_secs(3));
    std::thread::sleep(idle_for);
    let idle = (server_cpu(cluster) - idle_start) * elapsed.as_secs_f64()
        / idle_for.as_secs_f64().max(1e-3);
    let all = ps.metrics();
    let m = all.cluster.as_ref().unwrap();
    ps.shutdown();
    Cell {
        sent,
        delivered,
        lost: all.dropped.total() + m.publish_failed,
        elapsed,
        used,
        idle,
        reads: r1 - r0,
        writes: w1 - w0,
    }
}

/// `cpu`: the same total load (`messages` in windows of 5,000) on 1, 3 and
/// 6 masters.
pub fn run_fixed_total(kind: ServerKind, messages: u64) {
    println!("| masters | mode | published | delivered | dropped+failed | run | server CPU s | idle CPU s (same time) | CPU s per 1M delivered | minus idle | server reads+writes per delivered |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for masters in [1usize, 3, 6] {
        let cluster = Cluster::start(kind, masters, 0).expect("cluster");
        for mode in [Mode::Sharded, Mode::Classic] {
            let c = measure(&cluster, mode, messages, 5000);
            println!(
                "| {masters} | {mode:?} | {} | {} | {} | {:.2?} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} |",
                c.sent,
                c.delivered,
                c.lost,
                c.elapsed,
                c.used,
                c.idle,
                c.per_m(c.used),
                c.per_m((c.used - c.idle).max(0.0)),
                (c.reads + c.writes) / c.delivered.max(1) as f64
            );
        }
    }
}

/// `cpu-per-primary`: the same load per primary: N masters get N ×
/// `per_primary` messages in windows of N × 5,000. Server CPU per million
/// delivered, its ratio to the 1-master row of the same mode, and the
/// batches the masters see (messages per read, per write). Sharded rows
/// are the median of `reps` runs (their spread in a column: a run's CPU is
/// counted in scheduler ticks); classic rows are one run of a third of the
/// messages (they cost 5-20× more, which one run shows). Each cluster gets
/// an unmeasured warm-up run of a third of the messages first.
pub fn run_per_primary(kind: ServerKind, per_primary: u64, reps: usize) {
    println!("| masters | mode | window | published | delivered | dropped+failed | run | server CPU s per 1M delivered (minus idle) | min–max over runs | vs 1 master | delivered per server read | delivered per server write |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut base: [Option<f64>; 2] = [None, None];
    for masters in [1usize, 3, 6] {
        let cluster = Cluster::start(kind, masters, 0).expect("cluster");
        // A first run on a new cluster costs the servers more (in some
        // runs twice as much at one master): not measured.
        let _ = measure(
            &cluster,
            Mode::Sharded,
            per_primary * masters as u64 / 3,
            5000 * masters as u64,
        );
        for (m, mode) in [Mode::Sharded, Mode::Classic].into_iter().enumerate() {
            let window = 5000 * masters as u64;
            let (runs, messages) = match mode {
                Mode::Sharded => (reps.max(1), per_primary * masters as u64),
                _ => (1, (per_primary / 3).max(window) * masters as u64),
            };
            let mut cells: Vec<(f64, Cell)> = (0..runs)
                .map(|_| {
                    let c = measure(&cluster, mode, messages, window);
                    (c.per_m((c.used - c.idle).max(0.0)), c)
                })
                .collect();
            cells.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (lo, hi) = (cells[0].0, cells[cells.len() - 1].0);
            let (per_m, c) = cells.swap_remove(cells.len() / 2);
            let ratio = per_m / *base[m].get_or_insert(per_m);
            let d = c.delivered.max(1) as f64;
            let spread = match runs {
                1 => "one run".to_string(),
                n => format!("{lo:.2}–{hi:.2} ({n})"),
            };
            println!(
                "| {masters} | {mode:?} | {window} | {} | {} | {} | {:.2?} | {per_m:.2} | {spread} | {ratio:.2} | {:.0} | {:.0} |",
                c.sent,
                c.delivered,
                c.lost,
                c.elapsed,
                d / c.reads.max(1.0),
                d / c.writes.max(1.0),
            );
        }
    }
}
