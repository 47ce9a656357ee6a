//! The fleet demo: a local Redis/Valkey Cluster, several subscriber "app
//! nodes" and one publisher, all through `shardsub::PubSub`,
//! with a `CLUSTER FAILOVER` half-way and a sizing estimate at the end.
//!
//! ```text
//! cargo run --release --example fanout -- [--server valkey|redis] [--masters 3]
//!     [--replicas 1] [--engines 4] [--multiplier 1] [--channels 20000]
//!     [--partitions 128] [--seconds 8] [--rate 50000] [--payload 256]
//!     [--no-failover] [--target 1000000] [--seed 1] [--quick]
//! ```
//!
//! What it does, in order:
//!
//! 1. starts a cluster of real servers on loopback through `testkit`
//!    (`--masters` × (1 + `--replicas`) processes) and prints its slot map
//!    with the app-level partitions each master owns;
//! 2. starts `--engines` subscriber instances, each its own
//!    `PubSub` as if it ran on a separate app node. Channel `i`
//!    belongs to engine `i % E`, and every other block of `E` channels also
//!    to the next engine, so every channel has one or two subscribers
//!    (fan-out ≈ 1.5). Each engine subscribes its share and reports how long
//!    until the server confirmed all of it;
//! 3. a publisher instance publishes random channels at `--rate` messages/s
//!    (paced, bounded by the engine's backpressure), each payload carrying
//!    the 12-byte publish-time envelope (`shardsub::pubsub::envelope`), so
//!    the subscribers measure end-to-end lag, and behind it the channel's
//!    sequence number (`testkit::accounting`), so every message is
//!    accounted for: each engine's handler hands what it gets, and every
//!    gap or drop event, to its own tap;
//! 4. every second: published/s, delivered/s, drops, lag p50/p99, gap events;
//! 5. half-way (unless `--no-failover`): `CLUSTER FAILOVER` on a replica of
//!    the first master. It prints which partitions moved, the gap events each
//!    engine got (and whether they named exactly the moved partitions), and
//!    how long until every engine had messages flowing again on every moved
//!    partition;
//! 6. one last message on every channel, and a bounded wait until every
//!    engine has the last one of each of its channels; then every expected
//!    message of every (engine, channel) is classified: delivered in order,
//!    lost inside a signalled window (a gap or drop event), lost silently,
//!    duplicated, reordered (the last three must be 0);
//! 7. a summary: connections per node (`CLIENT LIST`) against what one
//!    connection per partition would need, `SSUBSCRIBE` calls per node
//!    (`INFO commandstats`), server CPU (`INFO CPU`) and client CPU
//!    (`getrusage`) per million delivered messages, and a sizing estimate.
//!
//! It ends with one `result:` line (what the smoke test reads) and exits
//! non-zero when a check failed. Every wait is bounded; the servers are
//! stopped on every exit path (the `Cluster` is dropped, also on error; a
//! Ctrl-C in a terminal reaches them too, as they share its process group).
//! `--quick` is a small run for CI: 3 engines, 2,000 channels, 3 s, 5,000/s.

//!
//! Files: this one runs the phases; `options.rs` reads the flags; `node.rs` is a subscriber engine's
//! handler and the lag histogram, `account.rs` the stamps and the ledger, `failover.rs` the failover and its
//! measurements, `summary.rs` the closing numbers, `servers.rs` what is read
//! from the servers (`INFO`, `CLIENT LIST`) and from `getrusage`.

mod account;
mod failover;
mod node;
mod options;
mod servers;
mod summary;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardcore::Partitions;
use shardsub::PubSub;
use testkit::Cluster;

use node::{Fleet, Lag, Node};
use options::parse_options;
pub use options::Options;
use servers::{ms, n};

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // `run` owns the cluster: it is dropped, and the servers stopped, before
    // `run` returns, on success and on every error.
    match run(&options) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fanout: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Options) -> Result<bool, String> {
    // 1. The cluster, and where the partitions live.
    let started = Instant::now();
    println!(
        "== starting a {} cluster: {} masters × {} replica(s), on loopback …",
        o.kind, o.masters, o.replicas
    );
    let mut cluster =
        Cluster::start(o.kind, o.masters, o.replicas).map_err(|e| format!("cluster: {e}"))?;
    let masters_at_start = cluster.masters();
    let version = servers::version(&cluster, masters_at_start[0]);
    let parts = Partitions::new(o.partitions).map_err(|e| format!("--partitions: {e}"))?;
    println!(
        "{} {version}: cluster ok after {:.1} s; {} partitions (balanced tags) over the masters:",
        o.kind,
        started.elapsed().as_secs_f64(),
        o.partitions
    );
    print_slot_map(&cluster, &parts);

    // 2. The subscriber engines: one PubSub each, as separate app
    //    nodes would run them. They share nothing but the cluster.
    let seeds: Vec<String> = cluster.seed_addrs().iter().map(|a| a.to_string()).collect();
    let names: Vec<Vec<u8>> = (0..o.channels)
        .map(|i| format!("room:{i}").into_bytes())
        .collect();
    let lag = Arc::new(Lag::new());
    let books = account::Books::new(&names, o.engines, o.payload);
    let mut fleet = Vec::with_capacity(o.engines);
    for e in 0..o.engines {
        let channels: Vec<usize> = (0..o.channels)
            .filter(|&i| node::subscribers_of(i, o.engines).contains(&e))
            .collect();
        let node = Arc::new(Node::new(&parts, lag.clone(), books.tap(e, &channels)));
        let ps = PubSub::builder()
            .seeds(seeds.iter().cloned())
            .partitions(o.partitions)
            .subscribe_connections(o.multiplier)
            .handler_arc(node.clone())
            .build()
            .map_err(|e| format!("subscriber engine: {e}"))?;
        let mut holds = vec![false; parts.count() as usize];
        for &i in &channels {
            holds[parts.partition_of(&names[i]) as usize] = true;
        }
        fleet.push(Fleet {
            ps,
            node,
            channels,
            holds,
        });
    }
    let subscriptions: usize = fleet.iter().map(|f| f.channels.len()).sum();
    println!(
        "\n== {} subscriber engines subscribe {} channels ({} subscriptions, fan-out {:.2}), \
         all at once …",
        o.engines,
        n(o.channels as u64),
        n(subscriptions as u64),
        subscriptions as f64 / o.channels as f64
    );
    let ss_start = servers::per_node(&cluster, servers::ssubscribe_calls);
    subscribe_all(&fleet, &names)?;
    let ss_subscribed = servers::per_node(&cluster, servers::ssubscribe_calls);

    // 3. The publisher: one more instance, publishing only.
    let publisher = PubSub::builder()
        .seeds(seeds.iter().cloned())
        .partitions(o.partitions)
        .subscribe_connections(o.multiplier)
        .handler(|_: &[u8], _: &[u8]| {})
        .build()
        .map_err(|e| format!("publisher engine: {e}"))?;

    // 4./5. Publishing, a line a second, the failover half-way.
    let cpu_before = servers::per_node(&cluster, servers::server_cpu);
    let client_before = servers::client_cpu();
    let begin = Instant::now();
    let report = publish_phase(o, &mut cluster, &fleet, &publisher, &books, &names, &lag)?;
    // Gap events before any fault would be a bug: nothing was lost then.
    let gaps_before_failover = if o.failover {
        report.gaps_before
    } else {
        node::total(&fleet, |n| &n.gap_events)
    };

    // Let what is in flight land: one more message on every channel, and
    // every engine must get the last one of each of its channels (≤ 15 s).
    let publishing_secs = begin.elapsed().as_secs_f64();
    let settled = books.last_round_and_settle(&publisher, &names, Duration::from_secs(15));
    let client_cpu = servers::client_cpu() - client_before;
    let cpu_after = servers::per_node(&cluster, servers::server_cpu);

    // Connections as the servers count them. The publisher instance
    // subscribes nothing, so no `sunsubscribe` told it about the failover:
    // it would rewire at its next topology poll. Every instance is asked to
    // refresh now, and the counts must then be exact: per master one group
    // of `--multiplier` subscribe connections and one publish connection
    // per instance (the engines and the publisher), none elsewhere.
    let conns_before = servers::Conns::read(&cluster);
    publisher.refresh();
    for f in &fleet {
        f.ps.refresh();
    }
    let instances = o.engines + 1;
    let (conns, conns_settled) = servers::settle_conns(
        &cluster,
        instances * o.multiplier,
        instances,
        Duration::from_secs(5),
    );

    // 6. The summary.
    let measured = summary::Measured {
        version,
        masters_at_start,
        subscriptions,
        expected: books.expected.load(Ordering::Relaxed),
        accounting: books.report(),
        settled,
        received: node::total(&fleet, |n| &n.delivered),
        dropped: node::dropped(&fleet),
        unenveloped: node::total(&fleet, |n| &n.unenveloped),
        publishing_secs,
        lag: lag.totals(),
        server_cpu: cpu_after
            .iter()
            .zip(&cpu_before)
            .map(|(a, b)| (a - b).max(0.0))
            .collect(),
        client_cpu,
        ss_start,
        ss_subscribed,
        failover: report,
        gaps_before_failover,
        conns_before,
        conns,
        conns_settled,
    };
    let ok = summary::print(o, &cluster, &fleet, &publisher, &parts, &names, &measured);
    // Stop the instances first, then the servers (dropping `cluster`).
    drop(fleet);
    drop(publisher);
    drop(cluster);
    Ok(ok)
}

/// One line per master: address, slot ranges, partitions owned, replicas.
fn print_slot_map(cluster: &Cluster, parts: &Partitions) {
    for m in cluster.masters() {
        let ranges: Vec<String> = cluster
            .slots_of(m)
            .iter()
            .map(|r| format!("{}-{}", r.start(), r.end()))
            .collect();
        let owned = (0..parts.count())
            .filter(|&p| cluster.owner_of_slot(parts.slot(p)) == Some(m))
            .count();
        let replicas: Vec<String> = cluster
            .replicas_of(m)
            .iter()
            .map(|&r| cluster.node(r).addr().to_string())
            .collect();
        println!(
            "  master {}  slots {:<12} {owned:>4} partitions  replicas [{}]",
            cluster.node(m).addr(),
            ranges.join(","),
            replicas.join(", ")
        );
    }
}

/// Every engine subscribes its channels at the same moment (a fleet
/// starting up) and waits until the servers confirmed all of them.
fn subscribe_all(fleet: &[Fleet], names: &[Vec<u8>]) -> Result<(), String> {
    let start = Instant::now();
    let timings: Vec<Result<Duration, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = fleet
            .iter()
            .map(|f| {
                s.spawn(move || {
                    let mine: Vec<&[u8]> = f.channels.iter().map(|&i| &names[i][..]).collect();
                    let t = Instant::now();
                    f.ps.subscribe(&mine).map_err(|e| e.to_string())?;
                    f.ps.wait_active(&mine, Duration::from_secs(30))
                        .map_err(|e| e.to_string())?;
                    Ok(t.elapsed())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
            .collect()
    });
    for (e, (f, t)) in fleet.iter().zip(timings).enumerate() {
        let t = t.map_err(|why| format!("engine {e} subscribe: {why}"))?;
        let m = f.ps.cluster_metrics().unwrap();
        println!(
            "  engine {e}: {} channels active in {} ({} SSUBSCRIBE commands, {} connections)",
            n(f.channels.len() as u64),
            ms(t),
            m.pubsub.subscribe_commands,
            m.subscribe_connections
        );
    }
    println!("  all active after {}", ms(start.elapsed()));
    Ok(())
}

/// Publishes at the paced rate on one thread, fails over on another, and
/// prints a line a second on this one. Returns the failover's report.
fn publish_phase(
    o: &Options,
    cluster: &mut Cluster,
    fleet: &[Fleet],
    publisher: &PubSub,
    books: &account::Books,
    names: &[Vec<u8>],
    lag: &Lag,
) -> Result<failover::FailoverReport, String> {
    let parts = publisher.partitions().expect("a cluster");
    let failover_at = Duration::from_secs(o.seconds) / 2;
    println!(
        "\n== publishing {}-byte messages to random channels at {} msg/s for {} s{} …",
        books.payload_len(),
        n(o.rate),
        o.seconds,
        if o.failover {
            format!(", CLUSTER FAILOVER at {} s", failover_at.as_secs_f64())
        } else {
            String::new()
        }
    );
    println!(
        "{:>5} {:>12} {:>12} {:>8} {:>9} {:>9} {:>6}",
        "t", "published/s", "delivered/s", "dropped", "lag p50", "lag p99", "gaps"
    );
    let published = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let begin = Instant::now();
    // Publishing runs past --seconds while a failover is still being
    // measured, but never past this.
    let hard_end = Duration::from_secs(o.seconds + 25);

    std::thread::scope(|s| {
        // The paced publisher: random channels, the publish time in an
        // envelope in front of the channel's sequence number and filler.
        let pub_thread = s.spawn(|| -> Result<(), String> {
            let mut body = Vec::with_capacity(books.payload_len());
            let mut buf = Vec::with_capacity(books.payload_len());
            let mut rng = o.seed.max(1);
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) && begin.elapsed() < hard_end {
                let due = (begin.elapsed().as_secs_f64() * o.rate as f64) as u64;
                if sent >= due {
                    // Ahead of the pace: the only thing to wait for is time.
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                // Catch up in bounded bursts. `publish` waits by itself when
                // a connection has 4 MiB staged, so memory stays bounded.
                let burst = (due - sent).min(512);
                for _ in 0..burst {
                    rng ^= rng << 13; // xorshift64: repeatable, seeded
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let i = (rng % o.channels as u64) as usize;
                    books.publish(publisher, names, i, &mut body, &mut buf);
                }
                sent += burst;
                published.store(sent, Ordering::Relaxed);
            }
            Ok(())
        });

        // The failover, half-way, while publishing goes on.
        let fo_thread = o.failover.then(|| {
            let (stop, at) = (&stop, begin + failover_at);
            s.spawn(move || failover::run(cluster, fleet, parts, at, stop))
        });

        // The reporter: a line a second until time is up and the failover
        // has been measured.
        let mut last = (0u64, 0u64);
        for tick in 1.. {
            let next = begin + Duration::from_secs(tick);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            let p = published.load(Ordering::Relaxed);
            let d = node::total(fleet, |n| &n.delivered);
            let window = lag.take_window();
            println!(
                "{:>4}s {:>12} {:>12} {:>8} {:>9} {:>9} {:>6}",
                tick,
                n(p - last.0),
                n(d - last.1),
                n(node::dropped(fleet) + publisher.cluster_metrics().unwrap().publish_failed),
                node::quantile(&window, 0.5),
                node::quantile(&window, 0.99),
                node::total(fleet, |n| &n.gap_events)
            );
            last = (p, d);
            let failover_done = fo_thread.as_ref().is_none_or(|h| h.is_finished());
            let publisher_done = pub_thread.is_finished();
            if (tick >= o.seconds && failover_done) || publisher_done || begin.elapsed() >= hard_end
            {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let published_ok = pub_thread
            .join()
            .unwrap_or_else(|_| Err("the publisher panicked".into()));
        let report = match fo_thread.map(|h| h.join()) {
            None => Ok(failover::FailoverReport::default()),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the failover thread panicked".into()),
        };
        published_ok?;
        report
    })
}
