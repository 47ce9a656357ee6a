//! A slot that moves while its old node's messages are still on their way
//! (Redis 7 and Valkey 9, 2 masters). The subscriber reaches the source
//! node through a [`FaultProxy`] that holds every chunk back for seconds;
//! messages published to the source before the move are still in the
//! proxy when the subscriber has followed the move (an explicit refresh,
//! answered by the target, which is reached directly: the first primary by
//! node id, where the engine asks) and the target has
//! delivered messages published after it. Those late messages must not be
//! delivered after the newer ones: they are dropped and signalled, and the
//! accounting checker finds no reordering and no silent loss.

use std::sync::atomic::Ordering;
use std::time::Duration;

use testkit::accounting::{Ledger, Outcome};
use testkit::{Cluster, FaultProxy, ServerKind};

use crate::support;
use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::cluster::builder;

const BOUND: Duration = Duration::from_secs(20);
const PAYLOAD_LEN: usize = 32;
/// How long the proxy holds each chunk from the source: more than the
/// move, the refresh and the target's round trips take on a loaded
/// machine, less than the engine's request timeout.
const HOLD: Duration = Duration::from_millis(2500);
const PARTITIONS: u32 = 16;

/// Publishes one stamped message per channel to `node` with `SPUBLISH`
/// (acknowledged, so the server has it before this returns).
fn round(ledger: &Ledger, cluster: &Cluster, node: usize, wire: &[Vec<u8>]) {
    let mut payload = Vec::with_capacity(PAYLOAD_LEN);
    for (c, w) in wire.iter().enumerate() {
        let stamp = ledger.stamp(c, &mut payload, PAYLOAD_LEN);
        cluster
            .node(node)
            .cmd(&[b"SPUBLISH", w, &payload])
            .expect("spublish");
        ledger.outcome(stamp, Outcome::Acked);
    }
}

fn late_messages_of_the_old_node(kind: ServerKind) {
    support::cluster::log_from_env();
    let mut cluster = Cluster::start(kind, 2, 0).expect("cluster");
    // Topology fetches go to the first primary of the map, which sorts
    // them by node id: the target. The source is the other master, behind
    // the proxy.
    let masters = cluster.masters();
    let target = *masters
        .iter()
        .min_by_key(|&&m| cluster.node_id(m).map(str::to_string))
        .expect("two masters");
    let source = *masters.iter().find(|&&m| m != target).expect("two masters");
    let node = cluster.node(source);
    let proxy = FaultProxy::start(node.addr()).expect("proxy");
    let bus = (u32::from(node.port()) + 10_000).to_string();
    let port = proxy.addr().port();
    node.cmd_str(&["CONFIG", "SET", "cluster-announce-bus-port", &bus])
        .unwrap();
    node.cmd_str(&["CONFIG", "SET", "cluster-announce-port", &port.to_string()])
        .unwrap();
    testkit::wait_for("the proxy's port in CLUSTER SLOTS", BOUND, || {
        for i in cluster.live() {
            let slots = cluster.node(i).cmd(&[b"CLUSTER", b"SLOTS"])?;
            let text = format!("{slots:?}");
            if !text.contains(&port.to_string()) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .unwrap();

    // Four channels of one partition the source owns.
    let parts = shardcore::Partitions::new(PARTITIONS).unwrap();
    let owned = |ch: &[u8]| cluster.owner_of_slot(parts.slot(parts.partition_of(ch)));
    let first = (0..)
        .map(|i| format!("lm:{i}").into_bytes())
        .find(|ch| owned(ch) == Some(source))
        .unwrap();
    let partition = parts.partition_of(&first);
    let names: Vec<Vec<u8>> = (0..)
        .map(|i| format!("lm:{i}").into_bytes())
        .filter(|ch| parts.partition_of(ch) == partition)
        .take(4)
        .collect();
    let wire: Vec<Vec<u8>> = names.iter().map(|n| parts.redis_channel(n)).collect();
    let slot = parts.slot(partition);

    let ledger = Ledger::new(&names);
    let handler = Accounted::new(&ledger, "sub");
    // No poll and no liveness probe while the proxy holds bytes back:
    // only the explicit refresh moves the lane.
    let ps = builder(&cluster, handler.clone())
        .partitions(PARTITIONS)
        .poll_interval(Duration::from_secs(3600))
        .probe_interval(Duration::from_secs(3600))
        .build()
        .expect("cluster pubsub");
    ps.subscribe(&names).unwrap();
    ps.wait_active(&names, BOUND).unwrap();
    round(&ledger, &cluster, source, &wire);
    ledger
        .wait_caught_up(BOUND)
        .expect("delivery before the move");

    // Messages on their way through the proxy when the slot moves.
    proxy.delay(HOLD);
    let held_at = ledger.elapsed();
    for _ in 0..5 {
        round(&ledger, &cluster, source, &wire);
    }
    let late_from = ps.metrics().received;
    cluster
        .migrate_slots(slot..=slot, source, target)
        .expect("migrate");
    let migrated = ledger.elapsed() - held_at;
    let gaps = handler.gap_events.load(Ordering::Relaxed);
    ps.refresh();
    testkit::wait_for("the move's gap event", BOUND, || {
        Ok((handler.gap_events.load(Ordering::Relaxed) > gaps).then_some(()))
    })
    .unwrap();
    ps.wait_active(&names, BOUND).unwrap();
    let active = ledger.elapsed() - held_at;
    for _ in 0..5 {
        round(&ledger, &cluster, target, &wire);
    }
    // The target's messages are in before the source's late ones: the
    // case this test is about.
    ledger.wait_caught_up(BOUND).expect("the target delivers");
    let took = ledger.elapsed() - held_at;
    assert_eq!(
        ps.metrics().received,
        late_from + 5 * names.len() as u64,
        "{kind:?}: the target's messages came before the held ones (held {HOLD:?}, the move took {took:?}: migrated {migrated:?}, active {active:?})"
    );
    eprintln!("{kind:?}: the move and the target's messages took {took:?} of the {HOLD:?} hold");
    // Then the held messages and the source's sunsubscribe arrive.
    proxy.delay(Duration::ZERO);
    let all = late_from + 10 * names.len() as u64;
    testkit::wait_for("the held messages", BOUND, || {
        Ok((ps.metrics().received >= all).then_some(()))
    })
    .unwrap();
    round(&ledger, &cluster, target, &wire);
    let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
    let dropped = ps.metrics().dropped;
    eprintln!("{kind:?}: {dropped:?}\n{report}");
    assert_eq!(
        dropped.moved,
        5 * names.len() as u64,
        "{kind:?}: every held message dropped as late"
    );
    assert_eq!(dropped.queue_full, 0);
    assert!(handler.drop_events.load(Ordering::Relaxed) > 0);
    ps.shutdown();
}

#[test]
fn messages_held_on_the_old_node_of_a_moved_slot_are_dropped_and_signalled_not_reordered() {
    for kind in testkit::kinds() {
        late_messages_of_the_old_node(kind);
    }
}
