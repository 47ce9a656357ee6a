//! The fleet demo as a sizing tool: a fleet of subscriber instances and
//! publishers on Redis/Valkey, in a chosen placement, with faults on
//! demand, a live view, and a report of what the servers themselves count.
//!
//! ```text
//! cargo run --release -p shardsub --example fanout -- [--mode node-grouped|per-partition|
//!     classic|shards|single] [--server valkey|redis] [--masters 3] [--replicas 1]
//!     [--engines 4] [--publishers 1] [--channels 20000] [--partitions 128] [--seconds 8]
//!     [--rate 50000 (0 = flat out)] [--ramp START:FACTOR:STEP_S] [--knee-lag-ms 100]
//!     [--payload 256] [--url redis://host:port[?cluster=true]]... [--failover AT] [--kill AT]
//!     [--storm AT] [--reshard AT] [--reshard-atomic AT] [--add-node AT] [--history]
//!     [--report DIR] [--target MSG/S] [--no-live] [--io-threads 2] [--seed 1] [--quick]
//! ```
//!
//! What it does, in order:
//!
//! 1. starts the servers on loopback through `testkit` (a cluster of
//!    `--masters` × (1 + `--replicas`) for the cluster modes, `--masters`
//!    standalone servers for `shards`, one for `single`), or takes existing
//!    ones from `--url` (it then only reads them, and refuses faults);
//! 2. builds `--engines` subscriber instances, each a full `PubSub` with its
//!    own connections, as separate app nodes would have, all on one shared
//!    `shardsub::Runtime` (`--io-threads`) with one worker thread each; and
//!    `--publishers` publisher instances. Channel `i` belongs to engine
//!    `i % E`, and every other block of `E` channels also to the next one
//!    (fan-out ≈ 1.5). Every engine subscribes at once;
//! 3. the publishers publish random channels of their share (channel `i` is
//!    publisher `i % P`'s) at `--rate`, or along `--ramp` (stopping at the
//!    knee: lag p99 past `--knee-lag-ms` or drops), or flat out; each
//!    payload carries the publish time (`shardsub::pubsub::envelope`) and
//!    the channel's sequence number (`testkit::accounting`);
//! 4. the live view: a block redrawn four times a second on a terminal, one
//!    line a second otherwise (published/s, delivered/s, lag p50/p99, drops,
//!    gaps, connections, rebuilds);
//! 5. the faults, each at its second: what it did, what moved, the gap
//!    events, how soon delivery was back for every engine (its library
//!    confirmed every channel again and fresh messages arrived); after
//!    `--storm` the SSUBSCRIBE calls per node;
//! 6. one last message on every channel, a bounded wait for each to land;
//!    then every expected message of every (engine, channel) is classified:
//!    delivered in order, lost inside a signalled window (a gap or drop
//!    event), lost silently, duplicated, reordered (the last three must be
//!    0);
//! 7. the summary and the report (`--report DIR`: report.json, and
//!    report.md and report.html): per node the connections (`CLIENT LIST`),
//!    commands (`INFO commandstats`) and CPU (`INFO CPU`) as the servers
//!    count them, CPU per million delivered on both sides, the faults, the
//!    knee of a ramp.
//!
//! It ends with one `result:` line and exits non-zero when a check failed.
//! Every wait is bounded; servers the demo started are stopped on every
//! exit path. On a small machine the servers share the cores with the
//! fleet; the report says so (`meta.local`). `--quick` is a small run for
//! CI: 3 engines, 2,000 channels, 3 s, 5,000/s.
//!
//! Known: with `--history`, a `--kill` stops publishing on Redis (the
//! publisher blocks in `publish_pending`, so the run does not end) and shows
//! reordered recovered messages on Valkey; without `--history` every
//! fault runs clean on both.
//!
//! Files: this one runs the phases; `options.rs` the flags; `target.rs` the
//! servers; `fleet.rs` the instances; `publish.rs` the publishers and the
//! sampler; `live.rs` the view; `faults.rs` the faults; `node.rs` a
//! subscriber's handler and the lag histogram; `account.rs` the stamps and
//! the ledger; `servers.rs` what is read from the servers and `getrusage`;
//! `report.rs` the report; `summary.rs` the closing lines and the checks.

mod account;
mod faults;
mod fleet;
mod live;
mod node;
mod options;
mod publish;
mod report;
mod servers;
mod summary;
mod target;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use node::Lag;
use options::{parse_options, Options};
use servers::n;
use target::{Local, Target};

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // `run` owns the servers: they are stopped before it returns, on
    // success and on every error.
    match run(&options) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fanout: error: {e}");
            println!("result: error={}", e.replace(' ', "_"));
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Options) -> Result<bool, String> {
    let date_utc = report::now_utc();
    let started = Instant::now();
    println!(
        "== {} mode, {} on {}",
        o.mode.name(),
        o.kind,
        if o.local() {
            "loopback (started here: the servers share this machine's cores with the fleet)"
                .to_string()
        } else {
            format!("existing servers {:?} (read only)", o.urls)
        }
    );
    let mut target = Target::open(o)?;
    let nodes = target.probe.nodes();
    let first = nodes.first().ok_or("no server answers")?.addr;
    let version = servers::version(first);
    let parts = options::partitions(o.partitions).map_err(|e| format!("--partitions: {e}"))?;
    println!(
        "{} {version}: {} nodes up after {:.1} s",
        o.kind,
        nodes.len(),
        started.elapsed().as_secs_f64()
    );
    for v in nodes.iter().filter(|v| v.role == "primary") {
        let owned = (0..parts.count())
            .filter(|&p| {
                v.slots
                    .iter()
                    .any(|&(a, b)| (a..=b).contains(&parts.slot(p)))
            })
            .count();
        let unit = match parts.is_raw() {
            true => "slots (partitions off)",
            false => "partitions",
        };
        println!("  primary {}: {owned} of {} {unit}", v.addr, parts.count());
    }

    // The fleet.
    let names: Vec<Vec<u8>> = (0..o.channels)
        .map(|i| format!("room:{i}").into_bytes())
        .collect();
    let lag = Arc::new(Lag::new());
    let books = account::Books::new(&names, o.engines, o.payload);
    let counters_start = servers::snapshot(&target.probe);
    let t = Instant::now();
    let inst = fleet::build(o, &target.probe, &parts, &names, &books, &lag)?;
    println!(
        "\n== {} subscriber engines and {} publisher(s) on one runtime ({} I/O threads, one \
         worker each), built in {:.1} s; subscribing {} channels …",
        o.engines,
        o.publishers,
        inst.runtime.io_threads(),
        t.elapsed().as_secs_f64(),
        n(o.channels as u64)
    );
    fleet::subscribe_all(&inst.fleet, &names)?;

    // Publishing, the live view and the faults.
    let mut schedule = o.faults.clone();
    if !o.local() && !schedule.is_empty() {
        println!("-- faults skipped: the demo changes nothing in servers given by --url");
        schedule.clear();
    }
    schedule.sort_by(|a, b| a.1.total_cmp(&b.1));
    println!(
        "\n== publishing {}-byte messages at {}{} for {} s …",
        books.payload_len(),
        match (o.ramp, o.rate) {
            (Some(r), _) => format!("{}/s × {} every {} s", n(r.start), r.factor, r.step_s),
            (None, 0) => "full speed".into(),
            (None, r) => format!("{}/s", n(r)),
        },
        if schedule.is_empty() {
            String::new()
        } else {
            let s: Vec<String> = schedule
                .iter()
                .map(|(k, at)| format!("{} at {at} s", k.name()))
                .collect();
            format!(", {}", s.join(", "))
        },
        o.seconds
    );
    let (client_before, library_before) = (servers::client_cpu(), servers::library_cpu());
    let run = publish::Run::new();
    let faults_done = AtomicBool::new(schedule.is_empty());
    let ledger = books.ledger.clone();
    let clock = move || ledger.elapsed();
    let probe = &target.probe;
    let (samples, early, faults) = std::thread::scope(|s| {
        let fault_thread = match &mut target.local {
            Local::Cluster(c) if !schedule.is_empty() => {
                let cx = faults::Ctx {
                    fleet: &inst.fleet,
                    parts: &parts,
                    begin: run.begin,
                    stop: &run.stop,
                    ledger_clock: &clock,
                };
                let (schedule, done) = (&schedule, &faults_done);
                Some(s.spawn(move || {
                    let r = faults::run(c, schedule, &cx);
                    done.store(true, Ordering::Relaxed);
                    r
                }))
            }
            _ => None,
        };
        let done = || faults_done.load(Ordering::Relaxed);
        let (samples, early) = publish::phase(o, probe, &inst, &books, &names, &lag, &run, &done);
        let faults = fault_thread.map_or(Ok(Vec::new()), |h| {
            h.join()
                .unwrap_or_else(|_| Err("the fault thread panicked".into()))
        });
        (samples, early, faults)
    });
    let faults = faults?;
    if let Some(why) = &early {
        println!("-- stopped early: {why}");
    }
    let publishing_secs = run.begin.elapsed().as_secs_f64();

    // Let what is in flight land, then read the servers while every
    // instance is still connected.
    let rate = Some(publish::target_at(o, publishing_secs)).filter(|r| *r > 0.0);
    let settled =
        books.last_round_and_settle(&inst.publishers, &names, rate, Duration::from_secs(20));
    let library_cpu = servers::library_cpu() - library_before;
    let demo_cpu = (servers::client_cpu() - client_before - library_cpu).max(0.0);
    for ps in inst
        .publishers
        .iter()
        .chain(inst.fleet.iter().map(|f| &f.ps))
    {
        ps.refresh();
    }
    let conns = summary::settle_conns(o, &target.probe, &inst);
    let counters = servers::delta(&servers::snapshot(&target.probe), &counters_start);
    let views = target.probe.nodes();
    let fleet_metrics: Vec<_> = inst.fleet.iter().map(|f| f.ps.metrics()).collect();
    let measured = report::Measured {
        date_utc,
        version,
        samples,
        faults,
        lag: lag.totals(),
        accounting: books.report(),
        expected: books.expected.load(Ordering::Relaxed),
        received: node::total(&inst.fleet, |x| &x.delivered),
        dropped: node::dropped(&inst.fleet),
        recovered: fleet_metrics.iter().map(|m| m.recovered).sum(),
        unrecoverable: fleet_metrics.iter().map(|m| m.unrecoverable).sum(),
        gap_events: node::total(&inst.fleet, |x| &x.gap_events),
        client_cpu: library_cpu,
        demo_cpu,
        library_threads: testkit::threads::threads_named("shardsub-"),
        nodes: views
            .into_iter()
            .map(|v| {
                let k = counters.get(&v.addr).copied().unwrap_or_default();
                let c = conns.per_node.get(&v.addr).copied().unwrap_or_default();
                (v, k, c)
            })
            .collect(),
        publishing_secs,
        partitions: o.partitions,
        engines: o.engines,
    };
    let mut rep = report::build(o, &parts, &measured);
    let ok = summary::print_and_check(o, &inst, &measured, &conns, settled, &mut rep);
    report::size(o, &mut rep);
    if let Some(dir) = &o.report {
        report::write(std::path::Path::new(dir), &rep)?;
        println!("report: {dir}/report.json, report.md, report.html");
    }
    println!(
        "result: {}",
        summary::result_line(o, &measured, &conns, &rep)
    );
    // The instances first, then the servers (dropping `target`).
    drop(inst);
    drop(target);
    Ok(ok)
}
