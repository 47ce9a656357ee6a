//! The chaos suite: a real cluster with replicas (Redis 7 and Valkey 9)
//! under steady publishing to thousands of channels, several subscriber
//! instances (separate `PubSub`s, each with its own accounting tap),
//! and a seeded schedule of faults: slot migrations (legacy `SETSLOT` and,
//! on Valkey, atomic `MIGRATESLOTS`), `CLUSTER FAILOVER`, `kill -9` of a
//! primary (restarted as a replica), `CLIENT KILL TYPE pubsub` on every
//! primary, a primary added and one removed, a primary black-holed behind
//! its proxy. After every fault every subscriber must deliver again on every
//! channel (a message published after the fault); at the end
//! nothing may be lost silently, duplicated, reordered, corrupted or split
//! over threads, and every pair that lost messages must have resumed.
//!
//! The default run is short (1 minute of faults per server). Environment:
//!
//! - `CHAOS_MINUTES` (default 1): minutes of faults per server;
//! - `CHAOS_SEED` (default: from the clock, printed): the schedule's seed;
//! - `CHAOS_SERVERS` (default: `testkit::kinds()`): `redis`, `valkey`;
//! - `CHAOS_CHANNELS` (2000), `CHAOS_SUBSCRIBERS` (3), `CHAOS_PACE_MS` (250);
//! - `CHAOS_REPORT`: a file to write the per-fault tables to, as Markdown;
//! - `CHAOS_HISTORY=1`: half the channels are recoverable (`hist:N`, with
//!   history caps no run reaches), under the strict verdict: every message
//!   published with success delivered exactly once, in order, or inside
//!   the window of an `Unrecoverable` event, and then only if the
//!   channel's history on the server no longer holds it (checked at the
//!   end, message by message, with a read of the whole history). Gap and
//!   drop events excuse no
//!   loss there. Publishes that failed (their reply lost: they may have
//!   been applied) may arrive or not, and are counted.
//!
//! `chaos_history` runs that recovery mode short (`CHAOS_HISTORY_MINUTES`,
//! default 1, 1000 channels); the two tests take turns (one cluster at a
//! time).
//!
//! `cargo xtask chaos --minutes N --seed S [--server redis|valkey]
//! [--history]` runs it in release mode.

use std::time::{Duration, Instant};

use testkit::ServerKind;

use crate::support::chaos_kit::rig::Rig;
use crate::support::chaos_kit::table::{self, FaultRecord};
use crate::support::chaos_kit::{faults, peak_rss_kib, Schedule, Settings};

/// Every subscriber must deliver, on every channel, a message published
/// after a fault's operation ended, this soon after it ended.
const RECOVERY_BOUND: Duration = Duration::from_secs(30);

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} does not parse")),
    )
}

fn settings() -> Settings {
    let seed = env("CHAOS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let minutes: f64 = env("CHAOS_MINUTES").unwrap_or(1.0);
    let servers = match std::env::var("CHAOS_SERVERS") {
        Ok(list) => list
            .split(',')
            .map(|s| {
                ServerKind::from_name(s.trim())
                    .unwrap_or_else(|| panic!("CHAOS_SERVERS: unknown server {s:?}"))
            })
            .collect(),
        Err(_) => testkit::kinds(),
    };
    Settings {
        seed,
        duration: Duration::from_secs_f64(minutes * 60.0),
        servers,
        channels: env("CHAOS_CHANNELS").unwrap_or(2_000),
        subscribers: env("CHAOS_SUBSCRIBERS").unwrap_or(3),
        pace: Duration::from_millis(env("CHAOS_PACE_MS").unwrap_or(250)),
        report: std::env::var_os("CHAOS_REPORT").map(Into::into),
        history: 0,
        raw: env::<u8>("CHAOS_RAW").unwrap_or(0) > 0,
    }
    .with_history(env::<u8>("CHAOS_HISTORY").unwrap_or(0) > 0)
}

/// One chaos run at a time in this process (each starts a cluster).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One server's run: its Markdown section and whether it was clean.
fn run(kind: ServerKind, s: &Settings) -> (String, Result<(), String>) {
    let seed = s.seed;
    let mode = match (s.history > 0, s.raw) {
        (true, _) => " history",
        (false, true) => " partitions off",
        (false, false) => "",
    };
    let tag = format!("chaos{mode} {kind} seed {seed}");
    let mut rig = Rig::start(kind, s).unwrap_or_else(|e| panic!("{tag}: rig: {e}"));
    let mut schedule = Schedule::new(seed, kind);
    let mut faults_done: Vec<FaultRecord> = Vec::new();
    let deadline = Instant::now() + s.duration;
    // Publishing settles first: the window before the first fault is
    // clean, and every subscriber has delivered a message of every channel
    // (recovery starts from the first message a worker saw).
    rig.ledger
        .wait_fresh(Duration::ZERO, RECOVERY_BOUND)
        .and_then(|_| rig.ledger.wait_caught_up(RECOVERY_BOUND))
        .unwrap_or_else(|e| panic!("{tag}: before any fault: {e}"));
    while Instant::now() < deadline {
        let (drawn, mut rng) = schedule.next();
        let at = rig.ledger.elapsed();
        let start = Instant::now();
        let done = faults::inject(&mut rig, drawn, &mut rng)
            .unwrap_or_else(|e| panic!("{tag}: fault #{} {drawn:?}: {e}", faults_done.len() + 1));
        let op = start.elapsed();
        let ended = rig.ledger.elapsed();
        if let Err(e) = rig.ledger.wait_fresh(ended, RECOVERY_BOUND) {
            panic!(
                "{tag}: after fault #{} {:?} ({}): subscribers not delivering again: {e}\n{}\n{}",
                faults_done.len() + 1,
                done.kind,
                done.detail,
                rig.ledger.report(),
                rig.metrics()
            );
        }
        let record = FaultRecord {
            kind: done.kind,
            detail: done.detail,
            at,
            op,
            delivering: start.elapsed(),
            rss_kib: peak_rss_kib(),
        };
        eprintln!(
            "{tag}: #{} at {:.1} s {} ({}): op {:.2} s, delivering again {:.2} s",
            faults_done.len() + 1,
            at.as_secs_f64(),
            record.kind.name(),
            record.detail,
            op.as_secs_f64(),
            record.delivering.as_secs_f64()
        );
        faults_done.push(record);
        // A quiet spell: this fault's losses end before the next starts.
        std::thread::sleep(Duration::from_millis(rng.range(1_000, 2_500)));
    }
    let rounds = rig.stop_publishing();
    let settle = |what: &str, r: Result<(), testkit::Error>| {
        r.unwrap_or_else(|e| panic!("{tag}: {what}: {e}\n{}", rig.ledger.report()))
    };
    settle(
        "outcomes",
        rig.ledger.wait_outcomes(Duration::from_secs(60)),
    );
    settle(
        "catch up",
        rig.ledger.wait_caught_up(Duration::from_secs(60)),
    );
    let report = rig.ledger.report();
    let failures = rig
        .failures
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let stats = table::attribute(&report, &faults_done, &failures);
    let version = rig.version();
    let server = format!("{} {version}", kind.name());
    let peak = peak_rss_kib();
    let md = table::markdown(&table::Run {
        server: &server,
        seed,
        minutes: s.duration.as_secs_f64() / 60.0,
        subscribers: s.subscribers,
        channels: s.channels,
        pace: s.pace,
        date: &table::today(),
        report: &report,
        faults: &faults_done,
        stats: &stats,
        peak_rss_kib: peak,
    });
    eprintln!("{tag}: {rounds} publish rounds\n{report}\n{md}");
    let not_resumed: usize = stats.iter().map(|s| s.not_resumed).sum();
    let (md, unjustified) = if s.history > 0 {
        let unjustified = history_verdict(&rig, &report, &tag);
        let line = md_history(&rig, &report, &unjustified);
        eprintln!("{tag}: {line}");
        (format!("{md}\n{line}"), unjustified)
    } else {
        (md, Vec::new())
    };
    let verdict = if !report.is_clean() {
        Err(format!(
            "{tag}: delivery accounting failed:\n{report}\n{}",
            rig.metrics()
        ))
    } else if !unjustified.is_empty() {
        Err(format!(
            "{tag}: unrecoverable losses on channels whose history is whole on the server: \
             {unjustified:?}\n{report}"
        ))
    } else if not_resumed > 0 || report.pending > 0 {
        Err(format!(
            "{tag}: {not_resumed} (subscriber, channel) pairs never resumed, {} publishes \
             without an outcome",
            report.pending
        ))
    } else {
        Ok(())
    };
    (md, verdict)
}

/// Messages lost under an unrecoverable event that the channel's history
/// on the server still holds (so the event was not owed for them: the
/// history had not lost them), as (channel, count).
fn history_verdict(
    rig: &Rig,
    report: &testkit::accounting::Report,
    tag: &str,
) -> Vec<(String, u64)> {
    let mut lost: std::collections::BTreeMap<usize, Vec<(u32, u32)>> = Default::default();
    for i in &report.incidents {
        if i.fate == testkit::accounting::Fate::Unrecoverable {
            lost.entry(i.channel)
                .or_default()
                .push((i.first_seq, i.last_seq));
        }
    }
    let mut unjustified = Vec::new();
    for (&c, runs) in &lost {
        let held = rig
            .history_seqs(c)
            .unwrap_or_else(|err| panic!("{tag}: {err}"));
        let n = runs
            .iter()
            .flat_map(|&(a, b)| a..=b)
            .filter(|s| held.contains(s))
            .count() as u64;
        if n > 0 {
            unjustified.push((String::from_utf8_lossy(rig.ledger.name(c)).into_owned(), n));
        }
    }
    unjustified
}

/// The recovery mode's summary line, as Markdown.
fn md_history(
    rig: &Rig,
    report: &testkit::accounting::Report,
    unjustified: &[(String, u64)],
) -> String {
    let r = &report.recoverable;
    let (recovered, duplicates, unrecoverable) = rig.recovery_counts();
    let mut reasons = std::collections::BTreeMap::<String, u64>::new();
    for sub in &rig.subs {
        for (k, v) in sub.handler.unrecoverable_reasons.lock().iter() {
            *reasons.entry(k.clone()).or_default() += v;
        }
    }
    format!(
        "Recoverable channels (history on): delivered {}, recovered from history {recovered}, \
         duplicates passed over {duplicates}, unrecoverable events {unrecoverable}, lost under \
         them {} (of which the server's history still held {}), \
         **lost {}**, duplicated {}, reordered {}; publishes that failed {} (of which \
         delivered {}); unrecoverable events by reason: {reasons:?}.\n",
        r.delivered,
        r.lost_unrecoverable,
        unjustified.iter().map(|u| u.1).sum::<u64>(),
        r.lost_silent,
        r.duplicated,
        r.reordered,
        report.failed_total(),
        report.counts.delivered_failed,
    )
}

#[test]
fn chaos() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    chaos_with(settings());
}

/// The recovery mode, short: 1000 channels, half recoverable, under the
/// strict verdict (longer: `cargo xtask chaos --history`).
#[test]
fn chaos_history() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = settings();
    s.channels = env("CHAOS_CHANNELS").unwrap_or(1_000);
    s.duration = Duration::from_secs_f64(env("CHAOS_HISTORY_MINUTES").unwrap_or(1.0) * 60.0);
    chaos_with(s.with_history(true));
}

/// Partitions off, short: channels keep their names on the cluster, so a
/// slot move or a failover resubscribes per slot (`CHAOS_RAW_MINUTES`,
/// default 0.5 per server; longer: `cargo xtask chaos --raw`).
#[test]
fn chaos_raw() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = settings();
    s.duration = Duration::from_secs_f64(env("CHAOS_RAW_MINUTES").unwrap_or(0.5) * 60.0);
    s.raw = true;
    chaos_with(s.with_history(false));
}

fn chaos_with(s: Settings) {
    eprintln!(
        "chaos: seed {} (CHAOS_SEED={} reproduces the schedule), {:.1} min per server, \
         servers {:?}",
        s.seed,
        s.seed,
        s.duration.as_secs_f64() / 60.0,
        s.servers
    );
    let mut sections = Vec::new();
    let mut failed = Vec::new();
    for &kind in &s.servers {
        let (md, verdict) = run(kind, &s);
        sections.push(md);
        if let Err(e) = verdict {
            failed.push(e);
        }
    }
    if let Some(path) = &s.report {
        std::fs::write(path, sections.join("\n"))
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
    assert!(
        failed.is_empty(),
        "chaos seed {}:\n{}",
        s.seed,
        failed.join("\n")
    );
}
