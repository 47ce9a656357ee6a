//! A plain publish that ran on a primary whose reply was lost when the
//! primary was `kill -9`ed (Redis 7 and Valkey 9, 3 masters with a replica
//! each): it is not sent again to the promoted replica, so no subscriber
//! gets it twice; every publish call learns that its outcome is unknown
//! (`ConnectionLost`, or counted for a fire-and-forget one).
//!
//! The victim master is reached through a [`FaultProxy`] (it announces the
//! proxy's port). Once the publisher's connections through the proxy are
//! up, the proxy swallows the replies on those connections only: the
//! publishes written next run on the victim and are delivered by it to the
//! subscriber (whose connections through the same proxy pass everything),
//! and no reply comes back. Every one of them is seen delivered before the
//! victim is killed, so the run has them "written, ran, reply lost" every
//! time, not by a lucky race. Before the fix they were held and, once the
//! replica was promoted, sent there again: the subscriber got them twice.

use std::sync::Arc;
use std::time::Duration;

use shardsub::PubSub;
use testkit::accounting::Ledger;
use testkit::{Cluster, Direction, FaultProxy, ServerKind};

use crate::support::accounted::{self, Accounted};
use crate::support::cluster::{builder, log_from_env};

const BOUND: Duration = Duration::from_secs(30);
const PARTITIONS: u32 = 64;
/// Channels, all on the victim's slots.
const CHANNELS: usize = 12;

/// `n` channels whose partitions' slots master `node` owns.
fn channels_on(cluster: &Cluster, node: usize, n: usize) -> Vec<Vec<u8>> {
    let parts = shardcore::Partitions::new(PARTITIONS).expect("partitions");
    (0..100_000)
        .map(|i| format!("lost:{i}").into_bytes())
        .filter(|ch| cluster.owner_of_slot(parts.slot(parts.partition_of(ch))) == Some(node))
        .take(n)
        .collect()
}

/// Puts master `i` behind a new proxy: it announces the proxy's port to
/// clients (the bus stays direct), known everywhere before this returns.
fn behind_proxy(cluster: &Cluster, i: usize) -> FaultProxy {
    let node = cluster.node(i);
    let proxy = FaultProxy::start(node.addr()).expect("proxy");
    let bus = (u32::from(node.port()) + 10_000).to_string();
    let port = proxy.addr().port().to_string();
    node.cmd_str(&["CONFIG", "SET", "cluster-announce-bus-port", &bus])
        .expect("announce bus port");
    node.cmd_str(&["CONFIG", "SET", "cluster-announce-port", &port])
        .expect("announce port");
    testkit::wait_for("the proxy's port in CLUSTER SLOTS", BOUND, || {
        for n in cluster.live() {
            let slots = cluster.node(n).cmd(&[b"CLUSTER", b"SLOTS"])?;
            if !format!("{slots:?}").contains(&port) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .expect("announced");
    proxy
}

fn no_resend_after_kill(kind: ServerKind) {
    log_from_env();
    let mut cluster = Cluster::start(kind, 3, 1).expect("cluster");
    let victim = cluster.masters()[0];
    let proxy = behind_proxy(&cluster, victim);
    let chans = channels_on(&cluster, victim, CHANNELS);
    let n = chans.len() as u64;
    let ledger = Arc::new(Ledger::new(&chans));
    let handler = Accounted::new(&ledger, "subscriber");
    let sub = builder(&cluster, handler.clone())
        .partitions(PARTITIONS)
        .build()
        .expect("subscriber");
    sub.subscribe(&chans).unwrap();
    sub.wait_active(&chans, BOUND).unwrap();

    // The publisher's connections through the proxy are the ones opened
    // from here on. Its request timeout is longer than the test: a lost
    // reply ends with the kill, not a timeout.
    let before = proxy.connections();
    let publ = Arc::new(
        PubSub::builder()
            .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
            .handler(|_: &[u8], _: &[u8]| {})
            .workers(1)
            .partitions(PARTITIONS)
            .request_timeout(Duration::from_secs(120))
            .publish_hold(Duration::from_secs(20))
            // Slower than the subscriber to follow the promotion, so that
            // a publish sent again there would reach it.
            .degraded_retry(Duration::from_secs(1))
            .build()
            .expect("publisher"),
    );
    // A first round, acknowledged: the publish connection is up and the
    // subscriber gets the victim's messages.
    accounted::acked_round(&ledger, &publ, BOUND);
    let publisher_conns: Vec<u64> = proxy
        .connections()
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert!(
        !publisher_conns.is_empty(),
        "{kind:?}: no publisher connection"
    );
    let errors_before = publ.metrics().publish_errors;

    // From now on the victim runs the publisher's requests and its replies
    // are lost.
    proxy.blackhole_connections(&publisher_conns, Direction::ToClient, true);
    let (stalled, waiting) = accounted::publish_unanswered(&ledger, &publ, &handler, BOUND);

    // kill -9: the replies are lost with the victim; its replica is
    // promoted. The subscriber follows (a gap); the publisher must not
    // send what the victim ran again.
    let promoted = cluster.kill_primary(victim).expect("kill primary");
    let waited = waiting.join().expect("publish_wait thread");
    ledger
        .wait_outcomes(BOUND * 2)
        .unwrap_or_else(|e| panic!("{kind:?}: {e}\n{}", ledger.report()));
    sub.wait_active(&chans, BOUND).unwrap();
    // Delivery goes on through the promoted replica.
    accounted::acked_round(&ledger, &publ, BOUND);
    let report = ledger.report();
    let m = publ.cluster_metrics().expect("a cluster");
    eprintln!(
        "{kind:?}: victim {victim}, promoted {promoted}; {}\n{m:?}",
        report
    );
    let what = format!("{kind:?}");
    accounted::assert_not_sent_again(&what, &report, &waited);
    // Those with a handle failed with the error that says their outcome
    // is unknown (above); the fire-and-forget ones were counted.
    assert_eq!(report.failed_total(), n + 1, "{kind:?}: {report}");
    let errors = publ.metrics().publish_errors - errors_before;
    assert_eq!(errors, stalled, "{kind:?}: publish_errors");
    assert_eq!(m.publish_failed, stalled, "{kind:?}: {m:?}");
    publ.shutdown();
    sub.shutdown();
}

#[test]
fn a_publish_that_ran_before_a_primary_kill_is_not_sent_again() {
    for kind in testkit::kinds() {
        no_resend_after_kill(kind);
    }
}
