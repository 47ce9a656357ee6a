//! Recoverable channels under faults on servers (one, or N shards) and a
//! cluster, against real servers (Redis 7 and Valkey 9).
//!
//! - A publish connection that reconnects to a server without the publish
//!   script (restarted, flushed, a new primary) loads it in its handshake,
//!   before any `EVALSHA`: a `NOSCRIPT` there would resend that publish as
//!   `EVAL` while later ones of the same channel ran first (out of order).
//! - `history_fault_loop`: a seeded loop of the faults that apply to
//!   servers (`CLIENT KILL TYPE pubsub`, a subscribe connection cut or
//!   black-holed at its proxy, `kill -9` and restart without persistence,
//!   a full worker queue) under the strict verdict of the accounting
//!   checker (see `tests/suite/chaos.rs`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::history::HistoryOptions;
use shardsub::{handler_fn, PubSub, PubSubBuilder};
use testkit::accounting::{Fate, Ledger};
use testkit::{Cluster, FaultProxy, Server, ServerKind, Servers};

use crate::support::accounted;
use crate::support::accounted::{Accounted, Background};
use crate::support::chaos_kit::Rng;

const BOUND: Duration = Duration::from_secs(20);

fn caps() -> HistoryOptions {
    HistoryOptions {
        max_len: 100_000,
        max_age: Duration::from_secs(600),
    }
}

/// `NOSCRIPT` errors the server has answered so far.
fn noscript_errors(server: &Server) -> u64 {
    let info = server
        .cmd(&[b"INFO", b"errorstats"])
        .ok()
        .and_then(|v| testkit::values::text(&v))
        .unwrap_or_default();
    testkit::values::info_field(&info, "errorstat_NOSCRIPT")
        .and_then(|v| v.strip_prefix("count=")?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Flushes the scripts of `servers` and kills their normal clients (the
/// instance's publish connections, not the test's own): the publish
/// connections reconnect to servers that lack the script.
fn flush_and_cut<'a>(servers: impl IntoIterator<Item = &'a Server>) {
    for s in servers {
        s.cmd(&[b"SCRIPT", b"FLUSH"]).expect("SCRIPT FLUSH");
        s.cmd(&[b"CLIENT", b"KILL", b"TYPE", b"normal", b"SKIPME", b"yes"])
            .expect("CLIENT KILL");
    }
}

/// Publishes to `room:N` until one is acknowledged on a reconnected
/// publish connection, then `n` more, each waited for.
fn publish_some(ps: &PubSub, n: usize) {
    testkit::wait_for("a publish after the reconnect", BOUND, || {
        Ok(ps.publish_wait("room:0", b"first", BOUND).ok())
    })
    .expect("publishing again");
    for i in 0..n {
        let ch = format!("room:{}", i % 7);
        ps.publish_wait(&ch, b"x", BOUND).expect("publish");
    }
}

fn build(b: PubSubBuilder) -> PubSub {
    b.history("room:", caps())
        .handler(handler_fn(|_, _| {}))
        .workers(1)
        .build()
        .expect("pubsub")
}

#[test]
fn a_reconnected_publish_connection_loads_the_script_before_any_evalsha() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).unwrap();
        let ps = build(PubSub::builder().address(server.addr().to_string()));
        publish_some(&ps, 3);
        flush_and_cut([&server]);
        let before = noscript_errors(&server);
        publish_some(&ps, 20);
        assert_eq!(
            noscript_errors(&server) - before,
            0,
            "{kind:?}: NOSCRIPT answered on a reconnected publish connection"
        );
        ps.shutdown();

        let cluster = Cluster::start(kind, 3, 0).unwrap();
        let ps = build(PubSub::builder().seeds(cluster.seed_addrs().iter().map(|a| a.to_string())));
        publish_some(&ps, 3);
        let nodes: Vec<&Server> = cluster
            .live()
            .into_iter()
            .map(|i| cluster.node(i))
            .collect();
        flush_and_cut(nodes.iter().copied());
        let before: u64 = nodes.iter().map(|s| noscript_errors(s)).sum();
        publish_some(&ps, 20);
        let after: u64 = nodes.iter().map(|s| noscript_errors(s)).sum();
        assert_eq!(
            after - before,
            0,
            "{kind:?} cluster: NOSCRIPT answered on a reconnected publish connection"
        );
        ps.shutdown();
    }
}

/// Channels of the loop: the first half recoverable.
const LOOP_CHANNELS: usize = 40;

/// The faults that apply to servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// `CLIENT KILL TYPE pubsub` on every server.
    ClientKill,
    /// A server's subscribe connections cut at its proxy.
    Cut,
    /// A server black-holed at its proxy until every subscriber's probe
    /// restarted a connection to it.
    BlackHole,
    /// `kill -9` of a server, restarted on its port without persistence:
    /// its streams are gone (a new epoch).
    KillRestart,
    /// A subscriber's handler held until its worker queue dropped.
    QueueFull,
}

const FAULTS: [Fault; 5] = [
    Fault::ClientKill,
    Fault::Cut,
    Fault::BlackHole,
    Fault::KillRestart,
    Fault::QueueFull,
];

/// A handler that can be held shut (for the queue-full fault).
struct Holdable {
    shut: parking_lot::Mutex<bool>,
    cond: parking_lot::Condvar,
    inner: Arc<Accounted>,
}

impl shardsub::Handler for Holdable {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        let mut shut = self.shut.lock();
        let deadline = Instant::now() + BOUND;
        while *shut && !self.cond.wait_until(&mut shut, deadline).timed_out() {}
        drop(shut);
        self.inner.on_message(channel, payload);
    }

    fn on_event(&self, event: shardsub::Event<'_>) {
        self.inner.on_event(event);
    }
}

impl Holdable {
    fn set(&self, shut: bool) {
        *self.shut.lock() = shut;
        self.cond.notify_all();
    }
}

/// One (server kind, server count) run of the loop; returns its summary.
fn fault_loop(kind: ServerKind, n: usize, seed: u64, duration: Duration) -> String {
    let tag = format!("history faults {kind:?} x{n} seed {seed}");
    let mut servers = Servers::start(kind, n).unwrap();
    let proxies: Vec<FaultProxy> = servers
        .addrs()
        .into_iter()
        .map(|a| FaultProxy::start(a).unwrap())
        .collect();
    let names: Vec<String> = (0..LOOP_CHANNELS)
        .map(|i| match i < LOOP_CHANNELS / 2 {
            true => format!("room:{i}"),
            false => format!("plain:{i}"),
        })
        .collect();
    let ledger = Arc::new(Ledger::new(&names));
    ledger.mark_recoverable(&(0..LOOP_CHANNELS / 2).collect::<Vec<_>>());
    let mut subs = Vec::new();
    for s in 0..2 {
        let h = Arc::new(Holdable {
            shut: parking_lot::Mutex::new(false),
            cond: parking_lot::Condvar::new(),
            inner: Accounted::new(&ledger, &format!("sub{s}")),
        });
        let ps = PubSub::builder()
            .addresses(proxies.iter().map(|p| p.addr().to_string()))
            .history("room:", caps())
            .subscribe_connections(1)
            .workers(2)
            .queue_capacity(64)
            .probe_interval(Duration::from_millis(300))
            .connect_timeout(Duration::from_millis(500))
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(200))
            .handler_arc(h.clone())
            .build()
            .unwrap();
        ps.subscribe(&names).unwrap();
        ps.wait_active(&names, BOUND).unwrap();
        subs.push((ps, h));
    }
    let publisher = Arc::new(
        PubSub::builder()
            .addresses(servers.addrs().iter().map(|a| a.to_string()))
            .history("room:", caps())
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(200))
            .handler(handler_fn(|_, _| {}))
            .workers(1)
            .build()
            .unwrap(),
    );
    let background = Background::start(
        ledger.clone(),
        accounted::via_cluster(publisher.clone()),
        Duration::from_millis(20),
        duration + Duration::from_secs(120),
    );
    // Every subscriber has delivered a message of every channel before the
    // first fault: recovery starts from the first message a worker saw
    // (see the `history` module's limits).
    ledger
        .wait_fresh(Duration::ZERO, BOUND)
        .unwrap_or_else(|e| panic!("{tag}: before any fault: {e}"));
    let mut rng = Rng::new(seed ^ kind as u64 ^ (n as u64) << 8);
    let mut order = FAULTS.to_vec();
    let mut done = Vec::new();
    let deadline = Instant::now() + duration;
    while Instant::now() < deadline || done.len() < FAULTS.len() {
        if done.len() % FAULTS.len() == 0 {
            rng.shuffle(&mut order);
        }
        let fault = order[done.len() % FAULTS.len()];
        let i = rng.index(n);
        match fault {
            Fault::ClientKill => {
                for s in servers.iter() {
                    s.cmd(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"]).unwrap();
                }
            }
            Fault::Cut => {
                proxies[i].cut_all();
            }
            Fault::BlackHole => {
                let restarts = |s: &[(PubSub, Arc<Holdable>)]| -> Vec<u64> {
                    s.iter()
                        .map(|(ps, _)| ps.metrics().probe_restarts)
                        .collect()
                };
                let before = restarts(&subs);
                proxies[i].blackhole(true);
                testkit::wait_for("every subscriber's probe restart", BOUND, || {
                    let now = restarts(&subs);
                    Ok(now.iter().zip(&before).all(|(a, b)| a > b).then_some(()))
                })
                .unwrap_or_else(|e| panic!("{tag}: black hole: {e}"));
                proxies[i].blackhole(false);
                proxies[i].cut_all();
            }
            Fault::KillRestart => {
                let s = servers.get_mut(i).unwrap();
                s.kill();
                s.restart()
                    .unwrap_or_else(|e| panic!("{tag}: restart: {e}"));
            }
            Fault::QueueFull => {
                let (ps, h) = &subs[rng.index(subs.len())];
                let before = ps.metrics().dropped.queue_full;
                h.set(true);
                let r = testkit::wait_for("a full worker queue", BOUND, || {
                    Ok((ps.metrics().dropped.queue_full > before).then_some(()))
                });
                h.set(false);
                r.unwrap_or_else(|e| panic!("{tag}: queue full: {e}"));
            }
        }
        let ended = ledger.elapsed();
        ledger
            .wait_fresh(ended, BOUND)
            .unwrap_or_else(|e| panic!("{tag}: after {fault:?} on {i}: {e}\n{}", ledger.report()));
        done.push(fault);
    }
    background.stop();
    ledger
        .wait_outcomes(BOUND)
        .unwrap_or_else(|e| panic!("{tag}: {e}"));
    ledger
        .wait_caught_up(BOUND)
        .unwrap_or_else(|e| panic!("{tag}: {e}\n{}", ledger.report()));
    let report = ledger.report();
    // Lost under an unrecoverable event, yet still in the server's stream.
    let mut unjustified = 0;
    for inc in &report.incidents {
        if inc.fate != Fate::Unrecoverable {
            continue;
        }
        let h = publisher
            .history(ledger.name(inc.channel), None, 100_000)
            .unwrap();
        let held: HashSet<u32> = h
            .messages
            .iter()
            .filter_map(|m| Some(u64::from_le_bytes(m.payload.get(0..8)?.try_into().ok()?) as u32))
            .collect();
        unjustified += (inc.first_seq..=inc.last_seq)
            .filter(|s| held.contains(s))
            .count();
    }
    let r = &report.recoverable;
    let (recovered, unrecoverable) = subs.iter().fold((0, 0), |(a, b), (ps, _)| {
        let m = ps.metrics();
        (a + m.recovered, b + m.unrecoverable)
    });
    let summary = format!(
        "{tag}: {} faults {done:?}; recoverable channels: delivered {}, recovered {recovered}, \
         unrecoverable events {unrecoverable}, lost under them {} (still in the stream: \
         {unjustified}), lost {}, duplicated {}, reordered {}; publishes failed {}",
        done.len(),
        r.delivered,
        r.lost_unrecoverable,
        r.lost_silent,
        r.duplicated,
        r.reordered,
        report.failed_total()
    );
    let mut reasons = std::collections::BTreeMap::<String, u64>::new();
    for (_, h) in &subs {
        for (k, v) in h.inner.unrecoverable_reasons.lock().iter() {
            *reasons.entry(k.clone()).or_default() += v;
        }
    }
    let summary = format!("{summary}; unrecoverable by reason {reasons:?}");
    eprintln!("{summary}");
    assert!(report.is_clean(), "{tag}: accounting failed:\n{report}");
    assert_eq!(
        unjustified, 0,
        "{tag}: unrecoverable events not owed\n{report}"
    );
    for (ps, _) in &subs {
        ps.shutdown();
    }
    publisher.shutdown();
    summary
}

/// The seeded loop on one server and on three shards, both servers.
/// `HISTORY_FAULTS_SECONDS` (default 15) per run, `HISTORY_FAULTS_SEED`.
#[test]
fn history_fault_loop() {
    let seconds: f64 = std::env::var("HISTORY_FAULTS_SECONDS")
        .ok()
        .map(|v| v.parse().expect("HISTORY_FAULTS_SECONDS: seconds"))
        .unwrap_or(15.0);
    let seed: u64 = std::env::var("HISTORY_FAULTS_SEED")
        .ok()
        .map(|v| v.parse().expect("HISTORY_FAULTS_SEED: a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("history_fault_loop: seed {seed} (HISTORY_FAULTS_SEED reproduces it)");
    for kind in testkit::kinds() {
        for n in [1, 3] {
            fault_loop(kind, n, seed, Duration::from_secs_f64(seconds));
        }
    }
}

/// The offsets' order of `channel`'s history, as the payloads (`mN`) say.
fn history_order(ps: &PubSub, channel: &str) -> Vec<u32> {
    ps.history(channel, None, 1000)
        .unwrap()
        .messages
        .iter()
        .filter_map(|m| {
            std::str::from_utf8(&m.payload)
                .ok()?
                .strip_prefix('m')?
                .parse()
                .ok()
        })
        .collect()
}

/// The channel's history holds `m0..=m{last}`, in that order.
fn assert_history_is_m0_to(ps: &PubSub, channel: &str, last: u32, kind: ServerKind) {
    assert_eq!(
        history_order(ps, channel),
        (0..=last).collect::<Vec<u32>>(),
        "{kind:?}: the history's order is not the publish order"
    );
}

/// A cluster of 3 primaries, an instance with history on `room:`, `m0`
/// published to `channel`, and the channel's server name and slot.
fn cluster_and_channel(kind: ServerKind, channel: &str) -> (Cluster, PubSub, Vec<u8>, u16) {
    let cluster = Cluster::start(kind, 3, 0).unwrap();
    let ps = build(PubSub::builder().seeds(cluster.seed_addrs().iter().map(|a| a.to_string())));
    ps.publish_wait(channel, b"m0", BOUND).unwrap();
    let wire = ps.server_channel(channel.as_bytes());
    let slot = shardcore::key_slot(&wire);
    (cluster, ps, wire, slot)
}

/// A publish the slot's owner refuses with `CLUSTERDOWN` is retried after
/// a backoff; publishes of the same slot made meanwhile wait behind it
/// (before: they went straight to the owner once it served the slot
/// again, ahead of the retry, and took lower offsets).
#[test]
fn a_publish_retried_after_clusterdown_keeps_its_place() {
    for kind in testkit::kinds() {
        let channel = "room:order";
        let (cluster, ps, _, slot) = cluster_and_channel(kind, channel);
        let owner = cluster.owner_of_slot(slot).unwrap();
        let node = cluster.node(owner);
        let s = slot.to_string();
        node.cmd_str(&["CLUSTER", "DELSLOTS", &s]).unwrap();
        let refused = |ps: &PubSub| ps.cluster_metrics().unwrap().redirects.cluster_down;
        let before = refused(&ps);
        let (tx, rx) = std::sync::mpsc::channel();
        ps.publish_pending(channel, b"m1").then(move |r| {
            let _ = tx.send(r);
        });
        testkit::wait_for("m1 refused twice", BOUND, || {
            Ok((refused(&ps) >= before + 2).then_some(()))
        })
        .unwrap();
        node.cmd_str(&["CLUSTER", "ADDSLOTS", &s]).unwrap();
        testkit::wait_for("the slot served again", BOUND, || {
            let info = node.cmd_str(&["CLUSTER", "INFO"])?;
            let text = testkit::values::text(&info).unwrap_or_default();
            Ok(
                (testkit::values::info_field(&text, "cluster_state").as_deref() == Some("ok"))
                    .then_some(()),
            )
        })
        .unwrap();
        for i in 2..12 {
            ps.publish_wait(channel, format!("m{i}"), BOUND).unwrap();
        }
        rx.recv_timeout(BOUND).unwrap().unwrap();
        assert_history_is_m0_to(&ps, channel, 11, kind);
        ps.shutdown();
    }
}

/// While a refused publish waits for its retry, the slot's later
/// publishes are not sent at all, not even with the retry: it goes alone,
/// and they follow once it was taken. (Sent with it, a node whose state
/// changed between two reads could refuse it and take them: a reorder.)
/// The refusal: the channel's slot half migrated, its stream key moved and
/// its meta key not, so the publish script's two keys get `TRYAGAIN` from
/// the owner, whose route stays. Counted at the client: only the retries
/// of the first publish are refused.
#[test]
fn a_refused_publish_is_retried_alone_until_it_is_taken() {
    for kind in testkit::kinds() {
        let channel = "room:alone";
        let (cluster, ps, wire, slot) = cluster_and_channel(kind, channel);
        let from = cluster.owner_of_slot(slot).unwrap();
        let to = *cluster.masters().iter().find(|&&m| m != from).unwrap();
        let (src, dst) = (cluster.node(from), cluster.node(to));
        let (src_id, dst_id) = (cluster.node_id(from).unwrap(), cluster.node_id(to).unwrap());
        let s = slot.to_string();
        dst.cmd_str(&["CLUSTER", "SETSLOT", &s, "IMPORTING", src_id])
            .unwrap();
        src.cmd_str(&["CLUSTER", "SETSLOT", &s, "MIGRATING", dst_id])
            .unwrap();
        let (mut meta, mut stream) = (Vec::new(), Vec::new());
        shardsub::history::keys_into(&wire, &mut meta, &mut stream);
        let port = dst.port().to_string();
        let migrate = |key: &[u8]| {
            src.cmd(&[
                b"MIGRATE",
                b"127.0.0.1",
                port.as_bytes(),
                key,
                b"0",
                b"5000",
            ])
            .unwrap();
        };
        migrate(&stream);
        let refused = |ps: &PubSub| ps.cluster_metrics().unwrap().redirects.try_again;
        let base = refused(&ps);
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 1..12 {
            let tx = tx.clone();
            ps.publish_pending(channel, format!("m{i}")).then(move |r| {
                let _ = tx.send(r);
            });
            if i == 1 {
                // Twice: the first refusal parked the slot before the
                // retry went out.
                testkit::wait_for("m1 refused twice", BOUND, || {
                    Ok((refused(&ps) >= base + 2).then_some(()))
                })
                .unwrap();
            }
        }
        let after = refused(&ps);
        testkit::wait_for("two more retries", BOUND, || {
            Ok((refused(&ps) >= after + 2).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}: {:?}", ps.cluster_metrics()));
        let n = refused(&ps) - after;
        assert_eq!(
            n, 2,
            "{kind:?}: {n} refusals where m1's two retries were due: later publishes were sent"
        );
        // The move completes; the publishes follow it, in order.
        migrate(&meta);
        for node in cluster.masters() {
            cluster
                .node(node)
                .cmd_str(&["CLUSTER", "SETSLOT", &s, "NODE", dst_id])
                .unwrap();
        }
        for _ in 1..12 {
            rx.recv_timeout(BOUND).unwrap().unwrap();
        }
        assert_history_is_m0_to(&ps, channel, 11, kind);
        ps.shutdown();
    }
}
