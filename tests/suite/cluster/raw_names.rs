//! Partitions off (`partitions(0)`) on real clusters (Redis 7 and Valkey
//! 9): channels keep their names on the server (`SSUBSCRIBE room:1`);
//! every message delivers once and in order through the accounting
//! checker, from this instance and from a foreign client's `SPUBLISH` of
//! the plain name; subscriptions stay one connection per primary, one
//! `SSUBSCRIBE` per slot; a primary killed under load is followed with
//! every loss signalled.

use std::sync::Arc;
use std::time::Duration;

use shardsub::PubSub;
use testkit::accounting::Ledger;
use testkit::{Cluster, Value};

use crate::support::accounted;
use crate::support::accounted::{Accounted, PublishFn};
use crate::support::channels;
use crate::support::cluster::{builder, named_clients};

const BOUND: Duration = Duration::from_secs(30);

/// A client that knows nothing of shardsub: `SPUBLISH` of the plain name
/// on the slot's owner.
fn foreign(cluster: &Arc<Cluster>) -> Arc<PublishFn> {
    let cluster = cluster.clone();
    Arc::new(move |ledger, stamp, channel, payload| {
        let slot = shardcore::key_slot(channel);
        let r = match cluster.owner_of_slot(slot) {
            Some(i) => cluster
                .node(i)
                .cmd(&[b"SPUBLISH", channel, payload])
                .map_err(|e| shardsub::Error::InvalidArgument(e.to_string().into())),
            None => Err(shardsub::Error::InvalidArgument("no owner".into())),
        };
        accounted::record(ledger, stamp, &r, true);
    })
}

#[test]
fn channels_keep_their_names_and_deliver_from_any_publisher() {
    for kind in testkit::kinds() {
        let cluster = Arc::new(Cluster::start(kind, 3, 0).unwrap());
        let chans = channels("room", 2_000);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "raw");
        let ps = Arc::new(
            builder(&cluster, handler.clone())
                .partitions(0)
                .build()
                .unwrap(),
        );
        assert_eq!(ps.server_channel(b"room:1"), b"room:1");
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        let what = format!("{kind:?} partitions off");
        accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
        // Two publishers on two connections have no order between them:
        // the foreign round starts once every publish of ours is answered.
        ledger.wait_outcomes(BOUND).unwrap();
        accounted::round(&ledger, &*foreign(&cluster));
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(report.counts.delivered, 2 * 2_000, "{what}: {report}");
        // One subscribe connection per primary; the server holds the
        // plain names, each in its own slot.
        for i in 0..3 {
            assert_eq!(
                named_clients(&cluster, i, "shardsub-sub"),
                1,
                "{what}: node {i}"
            );
        }
        let n = cluster
            .node(
                cluster
                    .owner_of_slot(shardcore::key_slot(b"room:7"))
                    .unwrap(),
            )
            .cmd(&[b"PUBSUB", b"SHARDNUMSUB", b"room:7"])
            .unwrap();
        assert_eq!(
            n,
            Value::Array(vec![Value::Bulk(b"room:7".to_vec()), Value::Integer(1)]),
            "{what}"
        );
    }
}

#[test]
fn a_killed_primary_is_followed_with_every_loss_signalled() {
    for kind in testkit::kinds() {
        let mut cluster = Cluster::start(kind, 3, 1).unwrap();
        let chans = channels("rk", 1_000);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "raw kill");
        let ps = Arc::new(
            builder(&cluster, handler.clone())
                .partitions(0)
                .build()
                .unwrap(),
        );
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        let publisher = accounted::publishing(
            &ledger,
            accounted::via_cluster(ps.clone()),
            &handler,
            Duration::from_millis(5),
            BOUND,
        );
        cluster.kill_primary(0).unwrap();
        testkit::wait_for("a gap for the dead primary's channels", BOUND, || {
            Ok((!handler.gap_channels.lock().is_empty()).then_some(()))
        })
        .unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        accounted::delivered_more(
            &ledger,
            &handler,
            2,
            BOUND,
            "rounds delivered after the failover",
        );
        publisher.stop();
        accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
        let what = format!("{kind:?} partitions off, a primary killed");
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert!(report.counts.signals > 0, "{what}: {report}");
        eprintln!("{what}: {report}");
    }
}

#[test]
fn partitions_off_refuses_what_needs_partitions() {
    let cluster = Cluster::start(testkit::kinds()[0], 1, 0).unwrap();
    let seeds: Vec<String> = cluster.seed_addrs().iter().map(|a| a.to_string()).collect();
    let e = PubSub::builder()
        .seeds(seeds.clone())
        .partitions(0)
        .mode(shardsub::cluster::Mode::PerPartition)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("a connection per slot"), "{e}");
    let e = PubSub::builder()
        .seeds(seeds)
        .partitions(0)
        .history(
            "h:",
            shardsub::history::HistoryOptions {
                max_len: 100,
                max_age: Duration::from_secs(60),
            },
        )
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("recoverable channels"), "{e}");
}
