//! Subscribers side by side: the same publisher drives each.
//!
//! Full speed (the default): `redis-benchmark -P 32 -c 2 -r 10000 PUBLISH
//! bench:__rand_int__ <256 B>` publishes 256-byte messages over 10,000
//! channels into one server while one subscriber drains them. Like with
//! like: every row names its protocol and its subscribe connections, and
//! each peer row has a shardsub row with the same ones. shardsub's
//! `PubSub` runs with its defaults (one subscribe connection, RESP3, 2
//! workers here, the busy subscribe connection's 1 ms delivery delay; a
//! 65,536-message queue), then with 2 subscribe connections, then on
//! RESP2, then with the delivery delay off (what arrives is read at once);
//! the `redis` crate's async Pub/Sub (one connection, tokio with 2 worker
//! threads) on RESP2 (its default) and on RESP3. Only that subscriber
//! runs in this process (with the measuring thread, taken off), so
//! `getrusage` gives its CPU, and its context switches (voluntary +
//! involuntary). Every phase is bounded.
//!
//! `--rates` (`rates.rs`): one subscriber at paced rates and at the
//! maximum, with the lag of stamped messages; `--idle` (`idle.rs`): idle
//! subscribers' wake-ups and CPU; `--grid` (`grid.rs`): five subscribers,
//! each a process, at once on the same traffic over rates × channels ×
//! publisher shapes (`--grid-subscribe` and `--grid-publish` are its
//! child processes). The publishers are in `load.rs`.
//!
//! ```text
//! cd benches/peers
//! CARGO_TARGET_DIR=/work/target-pubsub-peers cargo run --release --bin pubsub_cmp [messages]
//! cargo run --release --bin pubsub_cmp -- --rates | --idle
//! ```
//!
//! `PUBSUB_CMP_DEFAULT_ONLY=1` runs only shardsub's default row, once per
//! server (for profiling it). `SHARDSUB_SERVERS=redis|valkey` picks the
//! servers, as for the tests.

use std::time::Duration;

mod grid;
mod idle;
mod load;
mod rates;
mod subscribers;
mod usage;

use load::{measure, Load, Row};
use shardsub::Protocol::{Resp2, Resp3};
use subscribers::Who;
use testkit::kinds;

/// Rounds of the full-speed table.
const ROUNDS: usize = 2;

/// CPU seconds per million delivered.
fn cpu_per_m(row: &Row) -> f64 {
    row.used.cpu.as_secs_f64() * 1e6 / row.seen.max(1) as f64
}

/// Prints a row with each round's figures side by side, and its CPU's
/// ratio to `peer`'s, round by round, where given.
fn report(kind: &str, who: &str, protocol: &str, rounds: &[Row], peer: Option<&[Row]>) {
    let each = |f: &dyn Fn(&Row) -> String| {
        let v: Vec<String> = rounds.iter().map(f).collect();
        v.join(" / ")
    };
    let lost: u64 = rounds
        .iter()
        .map(|r| r.published.saturating_sub(r.seen))
        .sum();
    let lost = if lost > 0 {
        format!(" ({lost} lost)")
    } else {
        String::new()
    };
    let ratio = peer.map_or(String::new(), |peer| {
        let v: Vec<String> = rounds
            .iter()
            .zip(peer)
            .map(|(a, b)| format!("{:.2}", cpu_per_m(a) / cpu_per_m(b)))
            .collect();
        v.join(" / ")
    });
    println!(
        "| {kind} | {who} | {protocol} | {} | {}{lost} | {} | {ratio} | {} |",
        rounds.first().map_or(0, |r| r.connections),
        each(&|r| format!("{:.0}", r.seen as f64 / r.secs)),
        each(&|r| format!("{:.2}", cpu_per_m(r))),
        each(&|r| format!(
            "{:.0}",
            r.used.switches() as f64 * 1e6 / r.seen.max(1) as f64
        )),
    );
}

/// shardsub as the full-speed table runs it: 2 workers, a 65,536-message
/// queue, the rest as given.
fn tuned(connections: usize, protocol: shardsub::Protocol, delay: Option<Duration>) -> Who {
    Who::Shardsub {
        connections,
        protocol,
        delay,
        tuned: true,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    match first.as_deref() {
        Some("--rates") => return rates::run(),
        Some("--idle") => return idle::run(),
        Some("--idle-one") => return idle::one(args.collect()),
        Some("--grid") => return grid::run(),
        Some("--grid-subscribe") => return grid::subscribe(args.collect()),
        Some("--grid-publish") => return grid::publish(args.collect()),
        _ => {}
    }
    let n: u64 = first.and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let load = Load::C { n, probes: 0.0 };
    println!(
        "| server | subscriber | protocol | connections | delivered/s, round 1 / 2 \
         | CPU s per 1M | ÷ crate's, same protocol | context switches per 1M |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    if std::env::var_os("PUBSUB_CMP_DEFAULT_ONLY").is_some() {
        // Profiling aid: only shardsub's default row, once per server.
        for kind in kinds() {
            let row = measure(kind, tuned(1, Resp3, None), load);
            report(
                kind.name(),
                "shardsub PubSub (default)",
                "RESP3",
                &[row],
                None,
            );
        }
        return;
    }
    let rows = [
        ("shardsub PubSub (default)", "RESP3", tuned(1, Resp3, None)),
        ("shardsub PubSub", "RESP3", tuned(2, Resp3, None)),
        ("shardsub PubSub", "RESP2", tuned(1, Resp2, None)),
        (
            "shardsub PubSub, delivery_delay 0",
            "RESP3",
            tuned(1, Resp3, Some(Duration::ZERO)),
        ),
        (
            "redis 1.8.1 async pubsub (default)",
            "RESP2",
            Who::redis_default(2),
        ),
        (
            "redis 1.8.1 async pubsub",
            "RESP3",
            Who::Redis {
                resp3: true,
                workers: 2,
            },
        ),
    ];
    // The rows compared with the crate's: shardsub's default (RESP3) with
    // the crate on RESP3, shardsub on RESP2 with the crate's default.
    let peer_of = |row: usize| match row {
        0 => Some(5),
        2 => Some(4),
        _ => None,
    };
    for kind in kinds() {
        let name = kind.name();
        // runs[row]: one per round; the rows take turns within a round.
        let mut runs: Vec<Vec<Row>> = rows.iter().map(|_| Vec::new()).collect();
        for round in 0..ROUNDS {
            for ((who, protocol, w), runs) in rows.iter().zip(&mut runs) {
                let row = measure(kind, *w, load);
                eprintln!(
                    "{name} round {round} {who} {protocol}: {}/{} delivered, {:.2} CPU s per 1M",
                    row.seen,
                    row.published,
                    cpu_per_m(&row)
                );
                runs.push(row);
            }
        }
        for (i, ((who, protocol, _), rounds)) in rows.iter().zip(&runs).enumerate() {
            let peer = peer_of(i).map(|p| runs[p].as_slice());
            report(name, who, protocol, rounds, peer);
        }
    }
}
