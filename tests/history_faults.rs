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
//!   checker (see `tests/chaos.rs`).

use std::time::Duration;

use shardsub::history::HistoryOptions;
use shardsub::{handler_fn, PubSub, PubSubBuilder};
use testkit::{Cluster, Server};

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

/// A publish the slot's owner refuses with `CLUSTERDOWN` is retried after
/// a backoff; publishes of the same slot made meanwhile wait behind it
/// (before: they went straight to the owner once it served the slot
/// again, ahead of the retry, and took lower offsets).
#[test]
fn a_publish_retried_after_clusterdown_keeps_its_place() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).unwrap();
        let ps = build(PubSub::builder().seeds(cluster.seed_addrs().iter().map(|a| a.to_string())));
        let channel = "room:order";
        ps.publish_wait(channel, b"m0", BOUND).unwrap();
        let wire = ps.server_channel(channel.as_bytes());
        let slot = shardcore::key_slot(&wire);
        let owner = cluster.owner_of_slot(slot).unwrap();
        let node = cluster.node(owner);
        let s = slot.to_string();
        node.cmd_str(&["CLUSTER", "DELSLOTS", &s]).unwrap();
        let refused = |ps: &PubSub| ps.cluster_metrics().unwrap().redirects.cluster_down;
        let before = refused(&ps);
        let (tx, rx) = std::sync::mpsc::channel();
        ps.publish_then(channel, b"m1", move |r| {
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
        assert_eq!(
            history_order(&ps, channel),
            (0..12).collect::<Vec<u32>>(),
            "{kind:?}: the history's order is not the publish order"
        );
        ps.shutdown();
    }
}
