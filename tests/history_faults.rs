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

mod accounted;

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
