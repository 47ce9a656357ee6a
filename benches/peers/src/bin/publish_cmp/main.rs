//! Publish throughput side by side: shardsub, the `redis` crate's
//! multiplexed async connection, `fred` 10 and `redis-benchmark` (the C
//! reference), against one local server started through testkit, in one
//! run, clients taking turns.
//!
//! ```text
//! publish_cmp [--kinds redis,valkey] [--messages 1000000] [--reps 3]
//!             [--conc 1,64] [--only c,shardsub,shardsub-tasks,shardsub-async,redis,fred]
//!             [--warmup 50000]
//!             [--addr HOST:PORT] [--mode window|sequential]
//! publish_cmp --serve redis|valkey
//! ```
//!
//! `--mode sequential`: every submitter awaits each reply before its next
//! publish (`--conc` is then the number of such callers; `redis-benchmark`
//! runs with `-P 1`), and the table adds context switches and syscalls per
//! message.
//!
//! `shardsub-tasks` (not in the default set) runs the engine from tokio
//! tasks on the peers' runtime, each `.await`ing `publish_pending` (a
//! window of 64 of them for one task in window mode): the same callers as
//! the peers', where `shardsub` runs threads. `shardsub-async` (not in the
//! default set either) awaits `publish_async` instead (feature `tokio`: the
//! task writes and reads a lent connection itself); in window mode it runs
//! as `shardsub-tasks` does.
//!
//! `--addr` uses a running server instead of starting one (to strace the
//! client alone); `--serve` starts one, prints its address and keeps it
//! until its standard input closes.
//!
//! Prints one line per run as it goes, then a Markdown table of medians per
//! server. Per client: messages/s; client CPU seconds per million messages
//! (`getrusage`: `RUSAGE_SELF` deltas for the in-process Rust clients,
//! `RUSAGE_CHILDREN` for `redis-benchmark`); messages per socket write
//! syscall and eventfd wakes per message (kernel tracepoint counters, see
//! `src/syscalls.rs`; `redis-benchmark` included as our child); allocation
//! calls per message (counting global allocator, whole process); the
//! server's CPU (`INFO CPU`).

mod clients;
mod measure;

use std::collections::BTreeMap;

use clients::{Clients, Kind, WINDOW};
use measure::{Sample, Snapshot};
use testkit::alloc::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::new();

struct Options {
    kinds: Vec<testkit::ServerKind>,
    messages: u64,
    reps: usize,
    conc: Vec<usize>,
    only: Vec<Kind>,
    warmup: u64,
    payload: usize,
    addr: Option<std::net::SocketAddr>,
    serve: Option<testkit::ServerKind>,
    sequential: bool,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        kinds: vec![testkit::ServerKind::Redis, testkit::ServerKind::Valkey],
        messages: 1_000_000,
        reps: 3,
        conc: vec![1, 64],
        only: Kind::DEFAULT.to_vec(),
        warmup: 50_000,
        payload: 256,
        addr: None,
        serve: None,
        sequential: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--kinds" => {
                o.kinds = value
                    .split(',')
                    .map(|k| testkit::ServerKind::from_name(k).ok_or(format!("unknown server {k}")))
                    .collect::<Result<_, _>>()?
            }
            "--messages" => o.messages = num(&value)?.max(64),
            "--reps" => o.reps = num(&value)?.clamp(1, 20) as usize,
            "--warmup" => o.warmup = num(&value)?,
            "--addr" => o.addr = Some(value.parse().map_err(|_| format!("bad address {value}"))?),
            "--serve" => {
                o.serve = Some(
                    testkit::ServerKind::from_name(&value)
                        .ok_or(format!("unknown server {value}"))?,
                )
            }
            "--mode" => {
                o.sequential = match value.as_str() {
                    "window" => false,
                    "sequential" | "seq" => true,
                    _ => return Err(format!("unknown mode {value}")),
                }
            }
            "--payload" => o.payload = num(&value)?.clamp(1, 1 << 20) as usize,
            "--conc" => {
                o.conc = value
                    .split(',')
                    .map(|c| num(c).map(|n| n.clamp(1, 1024) as usize))
                    .collect::<Result<_, _>>()?
            }
            "--only" => {
                o.only = value
                    .split(',')
                    .map(|k| Kind::parse(k).ok_or(format!("unknown client {k}")))
                    .collect::<Result<_, _>>()?
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(o)
}

fn submitters(kind: Kind, conc: usize, sequential: bool) -> String {
    if sequential {
        return match (kind, conc) {
            (Kind::Reference, c) => format!("-c {c} -P 1"),
            (Kind::Shardsub, 1) => "1 thread, wait each".into(),
            (Kind::Shardsub, c) => format!("{c} threads, wait each"),
            (Kind::ShardsubTasks, 1) => "1 task, await each".into(),
            (Kind::ShardsubAsync, 1) => "1 task, await `publish_async`".into(),
            (Kind::ShardsubAsync, c) => format!("{c} tasks, await `publish_async`"),
            (_, 1) => "1 task, await each".into(),
            (_, c) => format!("{c} tasks, await each"),
        };
    }
    match (kind, conc) {
        (Kind::Reference, c) => format!("-c {c} -P {WINDOW}"),
        (Kind::Shardsub, 1) => "1 thread".into(),
        (Kind::Shardsub, c) => format!("{c} threads"),
        (Kind::ShardsubTasks, 1) => format!("1 task, {WINDOW} in flight"),
        (_, 1) => format!("1 task, {WINDOW} in flight"),
        (_, c) => format!("{c} tasks"),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Medians of one client at one concurrency.
struct Row {
    rate: f64,
    /// Each repetition's rate, in repetition order.
    rates: Vec<f64>,
    cpu_per_m: f64,
    /// Messages per socket write syscall.
    per_write: Option<f64>,
    /// Messages per write that moved bytes, as the engine counts them.
    per_engine_write: Option<f64>,
    wakes: Option<f64>,
    allocs: Option<f64>,
    server_per_m: f64,
    switches: Option<f64>,
    syscalls: Option<f64>,
}

fn row(samples: &[Sample]) -> Row {
    let per_msg = |f: &dyn Fn(&Sample) -> Option<u64>| {
        samples
            .iter()
            .map(|s| f(s).map(|v| v as f64 / s.messages as f64))
            .collect::<Option<Vec<f64>>>()
            .map(median)
    };
    let rates: Vec<f64> = samples.iter().map(|s| s.messages as f64 / s.secs).collect();
    Row {
        rate: median(rates.clone()),
        rates,
        cpu_per_m: median(
            samples
                .iter()
                .map(|s| s.cpu / s.messages as f64 * 1e6)
                .collect(),
        ),
        per_write: per_msg(&|s| s.socket_writes).map(|w| 1.0 / w),
        wakes: per_msg(&|s| s.wakes),
        per_engine_write: per_msg(&|s| s.engine_writes).map(|w| 1.0 / w),
        allocs: per_msg(&|s| s.allocs),
        switches: per_msg(&|s| s.switches),
        syscalls: per_msg(&|s| s.syscalls),
        server_per_m: median(
            samples
                .iter()
                .map(|s| s.server_cpu / s.messages as f64 * 1e6)
                .collect(),
        ),
    }
}

/// `min–max` of `v` with `digits` decimals (`–` when empty).
fn spread(v: impl IntoIterator<Item = f64>, digits: usize) -> String {
    let (lo, hi) = v
        .into_iter()
        .filter(|x| x.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    match lo <= hi {
        true => format!("{lo:.digits$}–{hi:.digits$}"),
        false => "–".into(),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// Rows of one concurrency, in `Kind::ALL` order, with the best Rust
/// peer's rate and CPU.
fn rows_of(
    conc: usize,
    samples: &BTreeMap<(usize, usize), Vec<Sample>>,
) -> (Vec<(Kind, Row)>, f64, f64) {
    let rows: Vec<(Kind, Row)> = Kind::ALL
        .iter()
        .enumerate()
        .filter_map(|(k, &kind)| samples.get(&(conc, k)).map(|s| (kind, row(s))))
        .collect();
    let peers = || {
        rows.iter()
            .filter(|(k, _)| matches!(k, Kind::RedisRs | Kind::Fred))
    };
    let best_rate = peers().map(|(_, r)| r.rate).fold(f64::NAN, f64::max);
    let best_cpu = peers().map(|(_, r)| r.cpu_per_m).fold(f64::NAN, f64::min);
    (rows, best_rate, best_cpu)
}

/// Each client's worst repetition against the best Rust peer of that same
/// repetition: the lowest rate ratio and the highest CPU ratio.
fn worst_reps(
    conc: usize,
    samples: &BTreeMap<(usize, usize), Vec<Sample>>,
) -> BTreeMap<usize, (f64, f64)> {
    let of = |k: usize| samples.get(&(conc, k)).map(Vec::as_slice).unwrap_or(&[]);
    let peers: Vec<usize> = Kind::ALL
        .iter()
        .enumerate()
        .filter(|(_, k)| matches!(k, Kind::RedisRs | Kind::Fred))
        .map(|(i, _)| i)
        .collect();
    let rate = |s: &Sample| s.messages as f64 / s.secs;
    let cpu = |s: &Sample| s.cpu / s.messages as f64;
    let mut out = BTreeMap::new();
    for k in 0..Kind::ALL.len() {
        let mine = of(k);
        if mine.is_empty() {
            continue;
        }
        let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
        for (rep, s) in mine.iter().enumerate() {
            let in_rep = || peers.iter().filter_map(|&p| of(p).get(rep));
            let best_rate = in_rep().map(rate).fold(f64::NAN, f64::max);
            let best_cpu = in_rep().map(cpu).fold(f64::NAN, f64::min);
            low = low.min(rate(s) / best_rate);
            high = high.max(cpu(s) / best_cpu);
        }
        out.insert(k, (low, high));
    }
    out
}

fn print_sequential(server: &str, o: &Options, samples: &BTreeMap<(usize, usize), Vec<Sample>>) {
    println!("\n### {server}, sequential\n");
    println!(
        "| publisher | callers | msg/s | vs best Rust peer | worst rep | client CPU µs / msg | \
         CPU vs best peer | worst rep | context switches / msg | syscalls / msg | \
         eventfd wakes / msg | allocs / msg | server CPU µs / msg |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &conc in &o.conc {
        let (rows, best_rate, best_cpu) = rows_of(conc, samples);
        let worst = worst_reps(conc, samples);
        for (kind, r) in &rows {
            let k = Kind::ALL
                .iter()
                .position(|x| x == kind)
                .unwrap_or(usize::MAX);
            let (low, high) = worst.get(&k).copied().unwrap_or((f64::NAN, f64::NAN));
            println!(
                "| {} | {} | {:.0} | {:.2} | {:.2} | {:.1} | {:.2} | {:.2} | {} | {} | {} | {} | {:.1} |",
                kind.name(),
                submitters(*kind, conc, true),
                r.rate,
                r.rate / best_rate,
                low,
                r.cpu_per_m,
                r.cpu_per_m / best_cpu,
                high,
                opt(r.switches, 2),
                opt(r.syscalls, 1),
                opt(r.wakes, 2),
                opt(r.allocs, 1),
                r.server_per_m,
            );
        }
    }
}

fn print_table(server: &str, o: &Options, samples: &BTreeMap<(usize, usize), Vec<Sample>>) {
    if o.sequential {
        return print_sequential(server, o, samples);
    }
    println!("\n### {server}\n");
    println!(
        "| publisher | submitters | msg/s | msg/s over {} reps (min–max) | vs C | \
         vs C per rep (min–max) | vs best Rust peer | client CPU s / 1M | \
         CPU vs best peer | msgs / socket write syscall | msgs / successful write (engine) | \
         eventfd wakes / msg | \
         allocs / msg | server CPU s / 1M |",
        o.reps
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &conc in &o.conc {
        let (rows, best_rate, best_cpu) = rows_of(conc, samples);
        let of = |want: Kind| rows.iter().find(|(k, _)| *k == want).map(|(_, r)| r);
        let c_rate = of(Kind::Reference).map_or(f64::NAN, |r| r.rate);
        let c_rates = of(Kind::Reference).map_or(&[][..], |r| &r.rates[..]);
        for (kind, r) in &rows {
            // Each repetition against C's of the same repetition (they
            // ran back to back).
            let per_rep = r.rates.iter().zip(c_rates).map(|(a, c)| a / c);
            println!(
                "| {} | {} | {:.0} | {} | {:.2} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {:.2} |",
                kind.name(),
                submitters(*kind, conc, false),
                r.rate,
                spread(r.rates.iter().copied(), 0),
                r.rate / c_rate,
                spread(per_rep, 2),
                r.rate / best_rate,
                r.cpu_per_m,
                r.cpu_per_m / best_cpu,
                opt(r.per_write, 1),
                opt(r.per_engine_write, 0),
                opt(r.wakes, 3),
                opt(r.allocs, 4),
                r.server_per_m,
            );
        }
    }
}

fn run_server(addr: std::net::SocketAddr, label: &str, o: &Options) -> Result<(), String> {
    let info = |section: &str| -> String {
        testkit::Client::connect(addr)
            .and_then(|mut c| c.cmd(&[b"INFO", section.as_bytes()]))
            .ok()
            .and_then(|v| testkit::values::text(&v))
            .unwrap_or_default()
    };
    let server_info = info("SERVER");
    let version = testkit::values::info_field(&server_info, "valkey_version")
        .or_else(|| testkit::values::info_field(&server_info, "redis_version"))
        .unwrap_or_default();
    let pid = testkit::values::info_field(&server_info, "process_id").unwrap_or_default();
    // Counters before any client thread exists (they count later threads
    // and children), after the server started (it must not be counted).
    let counters = shardsub_peer_benches::syscalls::Counters::open();
    if counters.is_none() {
        println!("no tracepoint counters (needs tracefs and root): write counts absent");
    }
    let clients = Clients::connect(addr, o.payload)?;
    let list = testkit::Client::connect(addr)
        .and_then(|mut c| c.cmd(&[b"CLIENT", b"LIST"]))
        .ok()
        .and_then(|v| testkit::values::text(&v))
        .unwrap_or_default();
    let tids = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    println!(
        "server {label} {version} on {addr} (server_tids={tids}); {} connections speak RESP3 (resp=3)",
        list.matches("resp=3").count(),
    );
    let mut samples: BTreeMap<(usize, usize), Vec<Sample>> = BTreeMap::new();
    let kinds: Vec<(usize, Kind)> = Kind::ALL
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, k)| o.only.contains(k))
        .collect();
    let measure = |k: Kind, conc: usize, n: u64| -> Result<Sample, String> {
        let children = k == Kind::Reference;
        let snap = || Snapshot::take(addr, children, counters.as_ref());
        let w0 = clients.engine().stats().writes;
        let (a, b) = clients.run(k, conc, n, o.sequential, &snap)?;
        let mut s = Sample::between(&a, &b, n, !children);
        if matches!(
            k,
            Kind::Shardsub | Kind::ShardsubTasks | Kind::ShardsubAsync
        ) {
            s.engine_writes = Some(clients.engine().stats().writes - w0);
        }
        Ok(s)
    };
    if o.warmup > 0 {
        for &conc in &o.conc {
            for &(_, k) in &kinds {
                measure(k, conc, o.warmup.max(conc as u64))?;
            }
        }
    }
    for rep in 0..o.reps {
        for &conc in &o.conc {
            // Alternate, and rotate who goes first from one repetition to the next.
            let mut order = kinds.clone();
            let len = order.len();
            order.rotate_left(rep % len.max(1));
            for (k_index, k) in order {
                let n = o.messages / conc as u64 * conc as u64;
                let s = measure(k, conc, n)?;
                println!(
                    "rep {rep} {:<16} {:<22} {:>9.0} msg/s  cpu {:.2} s/1M  msgs/socket write {} (engine: {})  wakes/msg {}  allocs {} ({}/msg)  server {:.2} s/1M  switches/msg {}  syscalls/msg {}",
                    k.name(),
                    submitters(k, conc, o.sequential),
                    s.messages as f64 / s.secs,
                    s.cpu / s.messages as f64 * 1e6,
                    opt(s.socket_writes.map(|w| s.messages as f64 / w as f64), 1),
                    opt(s.engine_writes.map(|w| s.messages as f64 / w as f64), 1),
                    opt(s.wakes.map(|w| w as f64 / s.messages as f64), 3),
                    opt(s.allocs.map(|a| a as f64), 0),
                    opt(s.allocs.map(|a| a as f64 / s.messages as f64), 4),
                    s.server_cpu / s.messages as f64 * 1e6,
                    opt(s.switches.map(|w| w as f64 / s.messages as f64), 2),
                    opt(s.syscalls.map(|w| w as f64 / s.messages as f64), 1),
                );
                samples.entry((conc, k_index)).or_default().push(s);
            }
        }
    }
    clients.engine().shutdown();
    print_table(&format!("{label} {version}"), o, &samples);
    Ok(())
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("publish_cmp: {e}");
            std::process::exit(2);
        }
    };
    let started = std::time::Instant::now();
    let result = match (o.serve, o.addr) {
        (Some(kind), _) => serve(kind),
        (None, Some(addr)) => run_server(addr, "given", &o),
        (None, None) => o.kinds.iter().try_for_each(|&kind| {
            let server =
                testkit::Server::start(kind).map_err(|e| format!("{}: {e}", kind.name()))?;
            run_server(server.addr(), kind.name(), &o)
        }),
    };
    if let Err(e) = result {
        eprintln!("publish_cmp: {e}");
        std::process::exit(1);
    }
    println!("\ntotal {:.0} s", started.elapsed().as_secs_f64());
}

/// Starts a server, prints its address, and stops it when standard input
/// closes (testkit stops it on drop).
fn serve(kind: testkit::ServerKind) -> Result<(), String> {
    let server = testkit::Server::start(kind).map_err(|e| format!("{}: {e}", kind.name()))?;
    println!("{}", server.addr());
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    drop(server);
    Ok(())
}
