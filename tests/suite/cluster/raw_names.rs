//! Partitions off (`partitions(0)`) on real clusters (Redis 7 and Valkey
//! 9): channels keep their names on the server (`SSUBSCRIBE room:1`);
//! every message delivers once and in order through the accounting
//! checker, from this instance and from a foreign client's `SPUBLISH` of
//! the plain name; subscriptions stay one connection per primary, one
//! `SSUBSCRIBE` per slot; a primary killed under load is followed with
//! every loss signalled. Mixed (`raw_names("room:")`): the `room:`
//! channels keep their names and the rest stay partitioned, on one
//! instance, with the same promises.

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

/// A primary killed under load, `chans` named as `setup` says: followed,
/// with every loss signalled. Each prefix of `gapped` has a channel with a
/// gap event.
fn killed_primary(
    chans: &[Vec<u8>],
    setup: impl Fn(shardsub::PubSubBuilder) -> shardsub::PubSubBuilder,
    gapped: &[&[u8]],
    what: &str,
) {
    for kind in testkit::kinds() {
        let mut cluster = Cluster::start(kind, 3, 1).unwrap();
        let ledger = Arc::new(Ledger::new(chans));
        let handler = Accounted::new(&ledger, what);
        let ps = Arc::new(setup(builder(&cluster, handler.clone())).build().unwrap());
        ps.subscribe(chans).unwrap();
        ps.wait_active(chans, BOUND).unwrap();
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
        ps.wait_active(chans, BOUND).unwrap();
        accounted::delivered_more(
            &ledger,
            &handler,
            2,
            BOUND,
            "rounds delivered after the failover",
        );
        publisher.stop();
        accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
        let what = format!("{kind:?} {what}, a primary killed");
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert!(report.counts.signals > 0, "{what}: {report}");
        let gaps = handler.gap_channels.lock();
        for prefix in gapped {
            assert!(
                gaps.iter().any(|c| c.starts_with(prefix)),
                "{what}: no gap for a {} channel",
                String::from_utf8_lossy(prefix)
            );
        }
        drop(gaps);
        eprintln!("{what}: {report}");
    }
}

#[test]
fn a_killed_primary_is_followed_with_every_loss_signalled() {
    killed_primary(
        &channels("rk", 1_000),
        |b| b.partitions(0),
        &[b"rk:"],
        "partitions off",
    );
}

#[test]
fn a_killed_primary_is_followed_with_raw_prefixes_too() {
    let mut chans = channels("room", 500);
    chans.extend(channels("news", 500));
    // Both kinds of lanes lose their node: the slots' and the partitions'.
    killed_primary(
        &chans,
        |b| b.raw_names("room:"),
        &[b"room:", b"news:"],
        "raw_names(\"room:\")",
    );
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

/// `PUBSUB SHARDNUMSUB name` on the owner of `name`'s slot.
fn shard_subscribers(cluster: &Cluster, name: &[u8]) -> Value {
    let owner = cluster.owner_of_slot(shardcore::key_slot(name)).unwrap();
    cluster
        .node(owner)
        .cmd(&[b"PUBSUB", b"SHARDNUMSUB", name])
        .unwrap()
}

#[test]
fn raw_prefixes_keep_their_names_beside_partitioned_channels() {
    for kind in testkit::kinds() {
        let cluster = Arc::new(Cluster::start(kind, 3, 0).unwrap());
        let mut chans = channels("room", 1_000);
        chans.extend(channels("news", 1_000));
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "mixed");
        let ps = Arc::new(
            builder(&cluster, handler.clone())
                .raw_names("room:")
                .build()
                .unwrap(),
        );
        let what = format!("{kind:?} raw_names(\"room:\")");
        assert_eq!(ps.server_channel(b"room:7"), b"room:7", "{what}");
        let news = ps.server_channel(b"news:7");
        assert!(
            news.starts_with(b"{") && news.ends_with(b"}.news:7"),
            "{what}: {}",
            String::from_utf8_lossy(&news)
        );
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
        ledger.wait_outcomes(BOUND).unwrap();
        // A client that knows nothing of shardsub reaches the kept names.
        accounted::round_where(&ledger, &*foreign(&cluster), |c| c.starts_with(b"room:"));
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(report.counts.delivered, 2_000 + 1_000, "{what}: {report}");
        // Every publish went straight to its slot's owner.
        let m = ps.cluster_metrics().unwrap();
        assert_eq!(m.redirects.moved, 0, "{what}: {m:?}");
        for i in 0..3 {
            assert_eq!(
                named_clients(&cluster, i, "shardsub-sub"),
                1,
                "{what}: node {i}"
            );
        }
        // The server holds `room:7` under its plain name, `news:7` under
        // its tagged one only.
        let held =
            |name: &[u8], n: i64| Value::Array(vec![Value::Bulk(name.to_vec()), Value::Integer(n)]);
        assert_eq!(
            shard_subscribers(&cluster, b"room:7"),
            held(b"room:7", 1),
            "{what}"
        );
        assert_eq!(shard_subscribers(&cluster, &news), held(&news, 1), "{what}");
        assert_eq!(
            shard_subscribers(&cluster, b"news:7"),
            held(b"news:7", 0),
            "{what}"
        );
    }
}

#[test]
fn raw_names_refuses_what_it_cannot_keep() {
    let cluster = Cluster::start(testkit::kinds()[0], 1, 0).unwrap();
    let seeds: Vec<String> = cluster.seed_addrs().iter().map(|a| a.to_string()).collect();
    let history = shardsub::history::HistoryOptions {
        max_len: 100,
        max_age: Duration::from_secs(60),
    };
    let base = || PubSub::builder().seeds(seeds.clone()).raw_names("room:");
    let refused = |b: shardsub::PubSubBuilder, want: &str| {
        let e = b.build().unwrap_err();
        assert!(e.to_string().contains(want), "{want}: {e}");
    };
    refused(base().partitions(0), "redundant");
    refused(
        base().mode(shardsub::cluster::Mode::PerPartition),
        "a connection per slot",
    );
    refused(base().mode(shardsub::cluster::Mode::Classic), "redundant");
    // A recoverable channel could keep its name: longer or shorter prefix.
    refused(base().history("room:vip", history), "recoverable channels");
    refused(base().history("ro", history), "recoverable channels");
    refused(base().raw_names(""), "must not be empty");
    refused(base().raw_names("a{b"), "must not contain '{'");
    // Recoverable channels apart from the raw prefix are fine.
    let ps = base().history("news:", history).build().unwrap();
    assert_eq!(ps.server_channel(b"room:1"), b"room:1");
}
