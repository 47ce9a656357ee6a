//! A recoverable channel's publish that the server applied but whose reply
//! was lost, when its node's publish connection is then closed by a
//! rewire (Redis 7 and Valkey 9): it must not be stored twice.
//!
//! A third master, reached through a [`FaultProxy`], owns one slot: the
//! slot of a recoverable channel. A first publish goes through. Then the
//! proxy swallows the node's replies (requests still reach it), a second
//! publish runs there (its entry is in the stream, read on a direct
//! connection), and the slot moves back to the first master with its
//! keys. The refreshed map names the third node an owner of nothing: its
//! publish engine is closed (after the gate on its old route gives up and
//! the shutdown timeout passes), and the publish still waiting for its
//! reply fails there. It was written and may have run, so it is not sent
//! again to the slot's new owner (which would append a second copy under
//! another offset, delivered to subscribers twice): it fails with the
//! error that says its outcome is unknown, and the channel's history holds
//! it once.

use std::sync::mpsc;
use std::time::Duration;

use shardsub::history::HistoryOptions;
use shardsub::{handler_fn, Error, PubSub, Value};
use testkit::{Cluster, Direction, FaultProxy, ServerKind};

use crate::support::cluster::log_from_env;

const BOUND: Duration = Duration::from_secs(30);
const PARTITIONS: u32 = 16;

fn xlen(cluster: &Cluster, node: usize, key: &[u8]) -> i64 {
    match cluster.node(node).cmd(&[b"XLEN", key]).expect("XLEN") {
        Value::Integer(n) => n,
        v => panic!("XLEN: {v:?}"),
    }
}

fn applied_once_when_its_node_engine_closes(kind: ServerKind) {
    log_from_env();
    let mut cluster = Cluster::start(kind, 2, 0).expect("cluster");
    let first = cluster.masters()[0];
    let third = cluster.add_master().expect("a third master");

    // A recoverable channel and the keys of its slot.
    let parts = shardcore::Partitions::new(PARTITIONS).unwrap();
    let channel = b"room:twice".to_vec();
    let p = parts.partition_of(&channel);
    let slot = parts.slot(p);
    let mut base = Vec::new();
    parts.redis_channel_at(p, &channel, &mut base);
    let (mut meta, mut stream) = (Vec::new(), Vec::new());
    shardsub::history::keys_into(&base, &mut meta, &mut stream);
    assert_eq!(shardcore::key_slot(&stream), slot);
    let owner = cluster.owner_of_slot(slot).expect("an owner");

    // The third master, behind the proxy, owns the channel's slot.
    let node = cluster.node(third);
    let proxy = FaultProxy::start(node.addr()).expect("proxy");
    let bus = (u32::from(node.port()) + 10_000).to_string();
    let port = proxy.addr().port().to_string();
    node.cmd_str(&["CONFIG", "SET", "cluster-announce-bus-port", &bus])
        .unwrap();
    node.cmd_str(&["CONFIG", "SET", "cluster-announce-port", &port])
        .unwrap();
    cluster
        .migrate_slots(slot..=slot, owner, third)
        .expect("migrate to the third master");
    testkit::wait_for("the proxy's port in CLUSTER SLOTS", BOUND, || {
        for i in cluster.live() {
            let slots = cluster.node(i).cmd(&[b"CLUSTER", b"SLOTS"])?;
            if !format!("{slots:?}").contains(&port) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .unwrap();

    // Topology from the first master only (direct): never through the
    // proxy. No poll: only the explicit refresh below changes the map.
    // The request timeout is longer than the rest of the test: the lost
    // reply ends with the engine's close, not a timeout.
    let ps = PubSub::builder()
        .seeds([cluster.node(first).addr().to_string()])
        .partitions(PARTITIONS)
        .history(
            "room:",
            HistoryOptions {
                max_len: 100,
                max_age: Duration::from_secs(60),
            },
        )
        .handler(handler_fn(|_, _| {}))
        .poll_interval(Duration::from_secs(3600))
        .request_timeout(Duration::from_secs(120))
        .build()
        .expect("cluster pubsub");
    ps.publish_wait(&channel, "before", BOUND)
        .expect("a publish through the proxy");
    assert_eq!(xlen(&cluster, third, &stream), 1, "{kind:?}");

    // The node runs the next publish; its reply is lost.
    proxy.blackhole_toward(Direction::ToClient, true);
    let (tx, rx) = mpsc::channel();
    ps.publish_pending(&channel, "twice?").then(move |r| {
        let _ = tx.send(r);
    });
    testkit::wait_for("the publish to run on the third master", BOUND, || {
        Ok((xlen(&cluster, third, &stream) == 2).then_some(()))
    })
    .unwrap();

    // The slot moves back with its keys; the third master owns nothing,
    // and the refreshed map closes its publish engine.
    cluster
        .migrate_slots(slot..=slot, third, owner)
        .expect("migrate back");
    ps.refresh();
    let outcome = rx.recv_timeout(BOUND).expect("the publish's outcome");
    let copies = |what: &str| {
        let h = ps.history(&channel, None, 100).expect("history");
        let n = h.messages.iter().filter(|m| m.payload == b"twice?").count();
        eprintln!("{kind:?} {what}: {n} copies, {outcome:?}, {h:?}");
        n
    };
    assert_eq!(
        copies("after the outcome"),
        1,
        "{kind:?}: the applied publish was stored once"
    );
    assert!(
        matches!(outcome, Err(Error::ConnectionLost { .. })),
        "{kind:?}: the outcome is unknown, not {outcome:?}"
    );
    assert_eq!(xlen(&cluster, owner, &stream), 2, "{kind:?}");
    // A publish after the move goes to the new owner, once.
    ps.publish_wait(&channel, "after", BOUND)
        .expect("a publish after the move");
    assert_eq!(xlen(&cluster, owner, &stream), 3, "{kind:?}");
    ps.shutdown();
}

#[test]
fn a_history_publish_applied_before_its_node_engine_closes_is_stored_once() {
    for kind in testkit::kinds() {
        applied_once_when_its_node_engine_closes(kind);
    }
}
