//! The subscriber grid (`--grid`): five subscribers at once on the same
//! traffic, each a process of its own subscribed to exactly the cell's
//! channels: shardsub's defaults, shardsub with `delivery_delay` 0, the
//! `redis` crate on a current-thread and on a 2-worker tokio runtime, and
//! `fred` (current thread). A publisher, a process of its own too, sends
//! 64-byte messages stamped with `CLOCK_MONOTONIC` to random channels of
//! the cell's, in one of two shapes: one `PUBLISH` a write, each when due;
//! or a pipelined batch every 1 ms.
//!
//! Cells: rate {1k, 10k, 50k msg/s} × channels {1, 100, 10,000} × shape,
//! on each server (`SHARDSUB_SERVERS`), a fresh server a cell. A cell
//! publishes [`WARMUP_S`] s of warm-up, then the [`WINDOW_S`] s window,
//! over which this process reads each subscriber's `/proc/<pid>`: CPU
//! (`task/*/schedstat`) and context switches (`task/*/status`, voluntary
//! and involuntary, by thread role); and counts its threads' syscalls
//! (the `raw_syscalls:sys_enter` tracepoint, where tracefs is mounted and
//! we may count it; `–` otherwise).
//! Each subscriber then reports how many of the window's messages it
//! handled and their lag (publish to handler), p50 and p99.
//!
//! [`REPS`] repetitions, the repetition loop outermost; ratios are taken
//! within one repetition (the same messages, the same noise), then the
//! median and the worst over the repetitions. "crate" in a row is, in each
//! repetition, the `redis` row that spent less CPU per message.
//!
//! `SUBSCRIBER_GRID_CELLS` picks cells (see [`cells`]),
//! `SUBSCRIBER_GRID_REPS` the repetitions and `SUBSCRIBER_GRID_SERVERS`
//! the servers (see [`servers`]): a smoke run of one cell on one server
//! takes about 10 s, and says it is one under its table.
//!
//! ```text
//! SUBSCRIBER_GRID_SERVERS=redis SUBSCRIBER_GRID_CELLS=1k:100:batch SUBSCRIBER_GRID_REPS=1 \
//!     cargo xtask bench --only subscriber_grid --lock /tmp/bench.lock
//! ```

use std::io::{BufRead, BufReader, Lines, Write};
use std::net::SocketAddr;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use testkit::{ChildGuard, Server, ServerKind};

use crate::load::{drain, pace_here, wait_subscribed, Pace, Shape};
use crate::rates::{
    median_worst, num, pair, quantile_ms, top_roles, verdict, CPU_TARGET, CPU_TARGET_MAX,
    LAG_TARGET_MS,
};
use crate::subscribers::{Delivery, Who};
use crate::usage::{Snapshot, Spent};
use shardsub_peer_benches::syscalls;

/// Seconds of warm-up before the window, and of the window.
const WARMUP_S: u64 = 1;
const WINDOW_S: u64 = 4;
/// Payload bytes, stamp included.
const PAYLOAD: usize = 64;
/// Repetitions of the whole grid, unless `SUBSCRIBER_GRID_REPS` says.
const REPS: usize = 3;
/// The grid's rates (messages a second) and channel counts.
const RATES: [u64; 3] = [1_000, 10_000, 50_000];
const CHANNELS: [usize; 3] = [1, 100, 10_000];
/// The batch shape's period.
const BATCH: Duration = Duration::from_millis(1);
/// Targets for shardsub's defaults beside the rates table's (CPU per
/// message, [`CPU_TARGET_MAX`] from this rate up, and lag): context
/// switches per message at most [`SWITCHES_TARGET`] at 1k/s.
const FAST: u64 = 50_000;
const SWITCHES_TARGET: f64 = 1.1;

/// The subscribers: the name `--grid-subscribe` takes, and what it runs.
const SUBSCRIBERS: [(&str, Who); 5] = [
    ("shardsub", Who::shardsub_default(None)),
    (
        "shardsub-delay0",
        Who::shardsub_default(Some(Duration::ZERO)),
    ),
    ("redis-1", Who::redis_default(0)),
    ("redis-2", Who::redis_default(2)),
    ("fred", Who::Fred),
];
/// Indices into [`SUBSCRIBERS`].
const SHARDSUB: usize = 0;
const REDIS: [usize; 2] = [2, 3];

/// One cell of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub rate: u64,
    pub channels: usize,
    /// One `PUBLISH` a write (`true`) or a batch every [`BATCH`].
    pub per_write: bool,
}

impl Cell {
    fn shape(self) -> Shape {
        if self.per_write {
            Shape::PerWrite
        } else {
            Shape::Every(BATCH)
        }
    }

    fn shape_name(self) -> &'static str {
        if self.per_write {
            "write"
        } else {
            "batch"
        }
    }

    /// Messages published in all, and the first of the window's.
    fn seqs(self) -> (u64, u64) {
        (self.rate * (WARMUP_S + WINDOW_S), self.rate * WARMUP_S)
    }
}

/// `1k` or `1000` → 1000.
fn parse_rate(s: &str) -> Option<u64> {
    match s.strip_suffix('k') {
        Some(k) => k.parse::<u64>().ok()?.checked_mul(1000),
        None => s.parse().ok(),
    }
}

/// The grid's cells, shape by shape, rate by rate, channels last; with a
/// `filter`, only those matching one of its comma-separated patterns
/// `RATE[:CHANNELS[:SHAPE]]`, each part a value of the grid or `*`
/// (`1k:100:batch`, `*:1`, `50k:*:write`). Rates may be written `1k` or
/// `1000`; shapes are `write` and `batch`.
///
/// # Errors
///
/// A pattern that does not parse, or that matches no cell.
pub fn cells(filter: Option<&str>) -> Result<Vec<Cell>, String> {
    let mut all = Vec::new();
    for per_write in [true, false] {
        for rate in RATES {
            for channels in CHANNELS {
                all.push(Cell {
                    rate,
                    channels,
                    per_write,
                });
            }
        }
    }
    let Some(filter) = filter else {
        return Ok(all);
    };
    let mut keep = vec![false; all.len()];
    for pattern in filter.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parts: Vec<&str> = pattern.split(':').collect();
        let bad = || {
            format!(
                "bad cell pattern {pattern:?}: RATE[:CHANNELS[:SHAPE]], e.g. 1k:100:batch \
                 (rates {RATES:?}, channels {CHANNELS:?}, shapes write, batch, or *)"
            )
        };
        if parts.len() > 3 {
            return Err(bad());
        }
        let part = |i: usize| parts.get(i).copied().filter(|p| *p != "*");
        let rate = part(0).map(|p| parse_rate(p).ok_or_else(bad)).transpose()?;
        let channels = part(1)
            .map(|p| p.parse::<usize>().map_err(|_| bad()))
            .transpose()?;
        let per_write = match part(2) {
            None => None,
            Some("write") => Some(true),
            Some("batch") => Some(false),
            Some(_) => return Err(bad()),
        };
        let mut any = false;
        for (cell, keep) in all.iter().zip(&mut keep) {
            if rate.is_none_or(|r| r == cell.rate)
                && channels.is_none_or(|c| c == cell.channels)
                && per_write.is_none_or(|w| w == cell.per_write)
            {
                *keep = true;
                any = true;
            }
        }
        if !any {
            return Err(format!("no cell of the grid matches {pattern:?}"));
        }
    }
    let picked: Vec<Cell> = all
        .into_iter()
        .zip(keep)
        .filter_map(|(c, k)| k.then_some(c))
        .collect();
    if picked.is_empty() {
        return Err("SUBSCRIBER_GRID_CELLS names no cell".into());
    }
    Ok(picked)
}

/// The servers `list` names (comma-separated `redis`, `valkey`); without
/// one, `SHARDSUB_SERVERS`' (`cargo xtask bench` sets it to both).
///
/// # Errors
///
/// A name that is no server's, or none at all.
pub fn servers(list: Option<&str>) -> Result<Vec<ServerKind>, String> {
    let Some(list) = list else {
        return Ok(testkit::kinds());
    };
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let kind = ServerKind::from_name(name)
            .ok_or_else(|| format!("SUBSCRIBER_GRID_SERVERS: {name:?} is not redis or valkey"))?;
        if !out.contains(&kind) {
            out.push(kind);
        }
    }
    if out.is_empty() {
        return Err("SUBSCRIBER_GRID_SERVERS names no server".into());
    }
    Ok(out)
}

/// A child process of this binary, its stdin and stdout piped.
struct Child {
    guard: ChildGuard,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Child {
    fn spawn(args: &[String]) -> Child {
        let exe = std::env::current_exe().expect("this binary");
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("grid child starts");
        let stdin = child.stdin.take().expect("stdin piped");
        let stdout = child.stdout.take().expect("stdout piped");
        Child {
            guard: ChildGuard::new(child, None),
            stdin,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// Its next line; panics if it ended first.
    fn line(&mut self, what: &str) -> String {
        match self.lines.next() {
            Some(Ok(line)) => line,
            _ => panic!("grid child ended before {what}"),
        }
    }

    /// Waits for it to exit (the subscribers drain for at most a minute);
    /// panics if it failed.
    fn end(mut self) {
        let status = self.guard.child().wait().expect("grid child ends");
        assert!(status.success(), "grid child failed: {status}");
    }
}

/// What one subscriber did over one cell's window.
struct Seen {
    spent: Spent,
    /// Syscalls over the window, where they could be counted.
    syscalls: Option<u64>,
    /// The window's messages it handled.
    delivered: u64,
    p50_ms: f64,
    p99_ms: f64,
    dropped: u64,
}

impl Seen {
    fn per_msg(&self, n: u64) -> f64 {
        n as f64 / self.delivered.max(1) as f64
    }

    fn cpu_us(&self) -> f64 {
        self.per_msg(self.spent.cpu_ns) / 1000.0
    }

    fn switches(&self) -> f64 {
        self.per_msg(self.spent.switches())
    }

    /// Syscalls per message; `NaN` where they were not counted.
    fn syscalls(&self) -> f64 {
        self.syscalls.map_or(f64::NAN, |n| self.per_msg(n))
    }
}

/// One cell, once: every subscriber, in [`SUBSCRIBERS`] order.
struct Run {
    seen: Vec<Seen>,
    /// Messages in the window.
    window: u64,
}

impl Run {
    /// The `redis` row that spent less CPU per message.
    fn better_redis(&self) -> &Seen {
        let [a, b] = REDIS.map(|i| &self.seen[i]);
        if a.cpu_us() <= b.cpu_us() {
            a
        } else {
            b
        }
    }
}

fn env_reps() -> usize {
    std::env::var("SUBSCRIBER_GRID_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(REPS)
}

/// Runs the grid and prints a row per server and cell.
pub fn run() {
    let filter = std::env::var("SUBSCRIBER_GRID_CELLS").ok();
    let cells = cells(filter.as_deref()).unwrap_or_else(|e| panic!("{e}"));
    let reps = env_reps();
    let only = std::env::var("SUBSCRIBER_GRID_SERVERS").ok();
    let kinds = servers(only.as_deref()).unwrap_or_else(|e| panic!("{e}"));
    // runs[kind][cell]: one per repetition.
    let mut runs: Vec<Vec<Vec<Run>>> = kinds
        .iter()
        .map(|_| cells.iter().map(|_| Vec::new()).collect())
        .collect();
    for rep in 0..reps {
        for (k, kind) in kinds.iter().enumerate() {
            for (c, cell) in cells.iter().enumerate() {
                let run = measure(*kind, *cell);
                let figures: Vec<String> = SUBSCRIBERS
                    .iter()
                    .zip(&run.seen)
                    .map(|((name, _), s)| {
                        format!(
                            "{name} {:.2} µs {:.2} sw {}/{}",
                            s.cpu_us(),
                            s.per_msg(s.spent.switches()),
                            s.delivered,
                            run.window
                        )
                    })
                    .collect();
                eprintln!(
                    "{} rep {rep} {}/s {} ch {}: {}",
                    kind.name(),
                    cell.rate,
                    cell.channels,
                    cell.shape_name(),
                    figures.join("; ")
                );
                runs[k][c].push(run);
            }
        }
    }
    println!(
        "| server | shape | rate | channels \
         | CPU µs/msg: shardsub, delay 0, redis 1 thread, redis 2 workers, fred \
         | shardsub ÷ crate (worst) | switches/msg: shardsub (by thread), crate \
         | syscalls/msg: shardsub, crate | lag p50 ms: shardsub, delay 0, crate \
         | p99 − crate's, ms (worst) | verdict |"
    );
    println!("|---|---|---|---:|---|---|---|---|---|---|---|");
    for (kind, runs) in kinds.iter().zip(&runs) {
        for (cell, runs) in cells.iter().zip(runs) {
            print_row(kind.name(), *cell, runs);
        }
    }
    if filter.is_some() || reps != REPS || only.is_some() {
        // A table of its own, so that `cargo xtask bench` keeps it.
        println!(
            "\n| smoke run |\n|---|\n| {} of the grid's {} cells, {reps} of {REPS} repetitions, \
             on {}: not the full table |",
            cells.len(),
            RATES.len() * CHANNELS.len() * 2,
            kinds
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
}

/// One cell on a fresh server: starts the subscribers, waits until the
/// server has them all, publishes, and reads their `/proc` at the
/// window's ends.
fn measure(kind: ServerKind, cell: Cell) -> Run {
    let server = Server::start(kind).unwrap();
    let addr = server.addr().to_string();
    let (total, first) = cell.seqs();
    let mut subs: Vec<Child> = SUBSCRIBERS
        .iter()
        .map(|(name, _)| {
            let args = [
                "--grid-subscribe",
                &addr,
                name,
                &cell.channels.to_string(),
                &total.to_string(),
                &first.to_string(),
            ];
            Child::spawn(&args.map(str::to_string))
        })
        .collect();
    for s in &mut subs {
        let line = s.line("subscribing");
        assert_eq!(line, "ready", "a subscriber said {line:?}");
    }
    wait_subscribed(&server, cell.channels, SUBSCRIBERS.len() as i64);
    let args = [
        "--grid-publish",
        &addr,
        &cell.rate.to_string(),
        &cell.channels.to_string(),
        cell.shape_name(),
    ];
    let mut publisher = Child::spawn(&args.map(str::to_string));
    assert_eq!(publisher.line("starting"), "start");
    let start = Instant::now();
    let snapshot = |subs: &[Child]| -> Vec<Snapshot> {
        subs.iter().map(|s| Snapshot::of(s.guard.id())).collect()
    };
    let sleep_until = |at: Duration| {
        if let Some(wait) = (start + at).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    };
    sleep_until(Duration::from_secs(WARMUP_S));
    let counters: Vec<_> = subs
        .iter()
        .map(|s| syscalls::Process::open(s.guard.id()))
        .collect();
    let before = snapshot(&subs);
    sleep_until(Duration::from_secs(WARMUP_S + WINDOW_S));
    let after = snapshot(&subs);
    let calls: Vec<Option<u64>> = counters
        .iter()
        .map(|c| c.as_ref().map(|c| c.read()))
        .collect();
    let done = publisher.line("its count");
    publisher.end();
    let (sent, writes) = done
        .split_once(' ')
        .and_then(|(s, w)| Some((s.parse::<u64>().ok()?, w.parse::<u64>().ok()?)))
        .expect("the publisher's count");
    assert_eq!(sent, total, "the publisher fell behind its bound");
    eprintln!(
        "  publisher: {sent} messages in {writes} writes ({:.2} a write)",
        sent as f64 / writes.max(1) as f64
    );
    let mut seen = Vec::new();
    for (((mut s, before), after), syscalls) in subs.into_iter().zip(&before).zip(&after).zip(calls)
    {
        writeln!(s.stdin, "report").expect("subscriber reads");
        let line = s.line("its report");
        let f: Vec<f64> = line
            .split(' ')
            .map(|x| x.parse().expect("a report number"))
            .collect();
        let [delivered, p50_ms, p99_ms, dropped] = f[..] else {
            panic!("bad report {line:?}");
        };
        s.end();
        seen.push(Seen {
            spent: after.since(before),
            syscalls,
            delivered: delivered as u64,
            p50_ms,
            p99_ms,
            dropped: dropped as u64,
        });
    }
    Run {
        seen,
        window: total - first,
    }
}

/// `--grid-subscribe ADDR WHO CHANNELS TOTAL FIRST`: one subscriber. Says
/// `ready` once subscribed; on a line from stdin, waits (bounded) for the
/// `TOTAL` messages and prints how many of `FIRST..TOTAL` it handled,
/// their lag p50 and p99 in ms, and shardsub's drops.
pub fn subscribe(args: Vec<String>) {
    let [addr, who, channels, total, first] = &args[..] else {
        panic!("--grid-subscribe ADDR WHO CHANNELS TOTAL FIRST");
    };
    let addr: SocketAddr = addr.parse().expect("an address");
    let Some((_, w)) = SUBSCRIBERS.iter().find(|(name, _)| name == who) else {
        panic!("unknown subscriber {who}");
    };
    let (channels, total, first): (usize, usize, usize) = (
        channels.parse().expect("channels"),
        total.parse().expect("total"),
        first.parse().expect("first"),
    );
    let delivery = Delivery::new(total);
    let sub = w.start(addr, channels, &delivery);
    println!("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("stdin");
    drain(&delivery, total as u64);
    let lags = delivery.lags_us_in(first..total);
    println!(
        "{} {:.3} {:.3} {}",
        lags.len(),
        quantile_ms(&lags, 0.5),
        quantile_ms(&lags, 0.99),
        sub.dropped()
    );
    sub.stop();
}

/// `--grid-publish ADDR RATE CHANNELS write|batch`: the publisher. Says
/// `start`, publishes the cell's messages, then prints how many and in how
/// many writes.
pub fn publish(args: Vec<String>) {
    let [addr, rate, channels, shape] = &args[..] else {
        panic!("--grid-publish ADDR RATE CHANNELS write|batch");
    };
    let cell = Cell {
        rate: rate.parse().expect("rate"),
        channels: channels.parse().expect("channels"),
        per_write: shape == "write",
    };
    let p = Pace {
        rate: cell.rate as f64,
        n: cell.seqs().0,
        channels: cell.channels,
        payload: PAYLOAD,
        shape: cell.shape(),
    };
    println!("start");
    std::io::stdout().flush().expect("stdout");
    let (sent, writes) = pace_here(
        addr.parse().expect("an address"),
        &p,
        &AtomicBool::new(false),
    );
    println!("{sent} {writes}");
}

/// A count per message: two decimals, three below 0.1 (the fast rows'
/// switches), `–` where not counted.
fn count(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else if x < 0.1 {
        format!("{x:.3}")
    } else {
        format!("{x:.2}")
    }
}

/// `(median, worst)` over the repetitions of `f`.
fn over(runs: &[Run], f: impl Fn(&Run) -> f64) -> (f64, f64) {
    median_worst(runs.iter().map(f).collect())
}

/// The two roles of shardsub's threads that switched most, per message,
/// over every repetition.
fn switches_by_role(runs: &[Run]) -> String {
    let delivered: u64 = runs.iter().map(|r| r.seen[SHARDSUB].delivered).sum();
    top_roles(
        runs.iter()
            .flat_map(|r| &r.seen[SHARDSUB].spent.switches_by_role),
        |n| n as f64 / delivered.max(1) as f64,
    )
}

/// The count that limits shardsub against the crate: context switches or
/// syscalls per message, whichever is further above the crate's; where
/// neither is above, instructions (see the `subscribe_cost` table).
fn limiting(runs: &[Run]) -> String {
    let ratio = |f: fn(&Seen) -> f64| {
        let r = over(runs, |r| {
            f(&r.seen[SHARDSUB]) / f(r.better_redis()).max(1e-9)
        })
        .0;
        if r.is_nan() {
            0.0
        } else {
            r
        }
    };
    let switches = ratio(Seen::switches);
    let syscalls = ratio(Seen::syscalls);
    if switches.max(syscalls) <= 1.0 {
        "instructions per message".into()
    } else if switches >= syscalls {
        format!("switches {switches:.2}× the crate's")
    } else {
        format!("syscalls {syscalls:.2}× the crate's")
    }
}

/// One cell on one server: medians of the repetitions, the worst beside
/// the figures the targets judge.
fn print_row(server: &str, cell: Cell, runs: &[Run]) {
    let cpu: Vec<String> = (0..SUBSCRIBERS.len())
        .map(|i| num(over(runs, |r| r.seen[i].cpu_us()).0))
        .collect();
    let ratio = over(runs, |r| {
        r.seen[SHARDSUB].cpu_us() / r.better_redis().cpu_us()
    });
    let per = |f: fn(&Seen) -> f64| {
        (
            over(runs, |r| f(&r.seen[SHARDSUB])).0,
            over(runs, |r| f(r.better_redis())).0,
        )
    };
    let switches = over(runs, |r| r.seen[SHARDSUB].switches());
    let crate_switches = per(Seen::switches).1;
    let syscalls = per(Seen::syscalls);
    let p50 = [
        over(runs, |r| r.seen[SHARDSUB].p50_ms).0,
        over(runs, |r| r.seen[SHARDSUB + 1].p50_ms).0,
        over(runs, |r| r.better_redis().p50_ms).0,
    ]
    .map(|x| format!("{x:.2}"));
    let lag = over(runs, |r| r.seen[SHARDSUB].p99_ms - r.better_redis().p99_ms);
    let limit = if cell.rate >= FAST {
        CPU_TARGET_MAX
    } else {
        CPU_TARGET
    };
    let mut missed = Vec::new();
    let cpu_verdict = verdict(ratio, limit, "×");
    if cpu_verdict != "met" {
        missed.push(format!("CPU {cpu_verdict}, limit: {}", limiting(runs)));
    }
    if cell.rate == RATES[0] {
        let v = verdict(switches, SWITCHES_TARGET, "");
        if v != "met" {
            missed.push(format!("switches/msg {v}"));
        }
    }
    let lag_verdict = verdict(lag, LAG_TARGET_MS, " ms");
    if lag_verdict != "met" {
        missed.push(format!("lag {lag_verdict}"));
    }
    for (i, (name, _)) in SUBSCRIBERS.iter().enumerate() {
        let lost: u64 = runs
            .iter()
            .map(|r| r.window.saturating_sub(r.seen[i].delivered))
            .sum();
        let dropped: u64 = runs.iter().map(|r| r.seen[i].dropped).sum();
        if lost > 0 {
            missed.push(format!("{name}: {lost} not delivered ({dropped} dropped)"));
        }
    }
    let verdict = if missed.is_empty() {
        "met".to_string()
    } else {
        missed.join("; ")
    };
    let shape = if cell.per_write {
        "one per write"
    } else {
        "1 ms batch"
    };
    println!(
        "| {server} | {shape} | {}k/s | {} | {} | {} | {} ({}), {} | {}, {} | {} | {} | {verdict} |",
        cell.rate / 1000,
        cell.channels,
        cpu.join(", "),
        pair(ratio, 2),
        count(switches.0),
        switches_by_role(runs),
        count(crate_switches),
        count(syscalls.0),
        count(syscalls.1),
        p50.join(", "),
        pair(lag, 2),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_grid_is_eighteen_cells_shape_first() {
        let all = cells(None).unwrap();
        assert_eq!(all.len(), 18);
        assert!(all[..9].iter().all(|c| c.per_write));
        assert_eq!(
            all[9],
            Cell {
                rate: 1_000,
                channels: 1,
                per_write: false
            }
        );
        assert_eq!(cells(Some("*")).unwrap(), all);
    }

    #[test]
    fn a_filter_picks_cells_in_grid_order() {
        let one = cells(Some("1k:100:batch")).unwrap();
        assert_eq!(
            one,
            [Cell {
                rate: 1_000,
                channels: 100,
                per_write: false
            }]
        );
        assert_eq!(cells(Some("1000:100:batch")).unwrap(), one);
        let two = cells(Some(" 50k:*:write , 1k:100:batch")).unwrap();
        assert_eq!(two.len(), 4);
        assert!(two[..3].iter().all(|c| c.rate == 50_000 && c.per_write));
        assert_eq!(two[3], one[0]);
        assert_eq!(cells(Some("10k")).unwrap().len(), 6);
        assert_eq!(cells(Some("*:1")).unwrap().len(), 6);
        // The same cell twice is measured once.
        assert_eq!(cells(Some("1k:100:batch,1k:100")).unwrap().len(), 2);
    }

    #[test]
    fn a_bad_filter_says_why() {
        for (filter, want) in [
            ("2k", "no cell"),
            ("1k:7", "no cell"),
            ("1k:100:sometimes", "bad cell pattern"),
            ("fast", "bad cell pattern"),
            ("1k:1:write:x", "bad cell pattern"),
            ("1k:many", "bad cell pattern"),
            (",", "names no cell"),
        ] {
            let err = cells(Some(filter)).unwrap_err();
            assert!(err.contains(want), "{filter}: {err}");
        }
    }

    #[test]
    fn servers_are_named_or_taken_from_the_suite() {
        assert_eq!(
            servers(Some("valkey, redis,valkey")).unwrap(),
            [ServerKind::Valkey, ServerKind::Redis]
        );
        assert_eq!(servers(None).unwrap(), testkit::kinds());
        assert!(servers(Some("memcached"))
            .unwrap_err()
            .contains("memcached"));
        assert!(servers(Some(" , ")).unwrap_err().contains("no server"));
    }

    #[test]
    fn rates_take_a_k() {
        assert_eq!(parse_rate("1k"), Some(1_000));
        assert_eq!(parse_rate("50000"), Some(50_000));
        assert_eq!(parse_rate("k"), None);
        assert_eq!(parse_rate("99999999999999999999k"), None);
    }
}
