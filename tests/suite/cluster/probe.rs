//! The liveness probe on real clusters (Redis 7 and Valkey 9, 3 masters):
//! a subscribe connection whose node stops answering (`CLIENT PAUSE … ALL`)
//! is pinged, restarted when the `PING` goes unanswered, and its partitions
//! are resubscribed with a gap event once the node answers again.

use std::sync::Arc;
use std::time::Duration;

use shardsub::PubSub;
use testkit::accounting::Ledger;
use testkit::{Cluster, ServerKind};

use crate::support::accounted;
use crate::support::accounted::{Accounted, Background};

fn probe(kind: ServerKind) {
    let cluster = Cluster::start(kind, 3, 0).expect("cluster");
    let parts = shardcore::Partitions::new(128).expect("128 partitions");
    let a = cluster.masters()[0];
    let on_a: Vec<u8> = (0..100_000)
        .map(|i| format!("p:{i}").into_bytes())
        .find(|ch| cluster.owner_of_slot(parts.slot(parts.partition_of(ch))) == Some(a))
        .expect("a channel on the node");
    let chans = vec![on_a.clone()];
    let ledger = Arc::new(Ledger::new(&chans));
    let handler = Accounted::new(&ledger, "sub");
    let ps = Arc::new(
        PubSub::builder()
            .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
            .handler_arc(handler.clone())
            .probe_interval(Duration::from_millis(300))
            .workers(1)
            .build()
            .expect("cluster pubsub"),
    );
    assert_eq!(ps.partitions(), Some(&parts));
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, Duration::from_secs(5)).unwrap();
    // Idle: pings go out and come back; nothing restarts.
    testkit::wait_for("a probe", Duration::from_secs(5), || {
        Ok((ps.metrics().probes_sent >= 2).then_some(()))
    })
    .unwrap();
    assert_eq!(ps.metrics().probe_restarts, 0, "{kind:?}");
    // Publishing all along: whatever the pause costs must be signalled.
    let publisher = Background::start(
        ledger.clone(),
        accounted::via_cluster(ps.clone()),
        Duration::from_millis(10),
        Duration::from_secs(60),
    );
    ledger
        .wait_fresh(Duration::ZERO, Duration::from_secs(5))
        .expect("delivery before the pause");
    // The node stops answering for 7 s (longer than the 5 s request timeout).
    cluster
        .node(a)
        .cmd(&[b"CLIENT", b"PAUSE", b"7000", b"ALL"])
        .unwrap();
    testkit::wait_for("the probe to restart", Duration::from_secs(15), || {
        Ok((ps.metrics().probe_restarts >= 1).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{kind:?}: {e}; {:?}", ps.cluster_metrics().unwrap()));
    ps.wait_active(&chans, Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{kind:?}: {e}; {:?}", ps.cluster_metrics().unwrap()));
    let rounds = publisher.stop();
    accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
    let report =
        accounted::settle_and_check(&ledger, Duration::from_secs(20), &format!("{kind:?}"));
    eprintln!("{kind:?}: {rounds} rounds; {report}");
    assert!(
        handler.gap_channels.lock().contains(&on_a),
        "{kind:?}: no gap event"
    );
    let m = ps.cluster_metrics().unwrap();
    eprintln!("{kind:?}: {m:?}");
    ps.shutdown();
}

#[test]
fn silent_node_is_probed_restarted_and_resubscribed() {
    for kind in testkit::kinds() {
        probe(kind);
    }
}
