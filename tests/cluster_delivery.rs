//! Cluster Pub/Sub against real clusters (Redis 7 and Valkey 9): every
//! channel of 10,000 delivers across nodes, publishes reach the slot owner
//! (receivers counted per node), and subscribe connections per master are
//! exactly one per engine.

mod cluster_support;

use std::sync::Arc;
use std::time::Duration;

use cluster_support::{channels, engine, named_clients, publish_round_and_wait, Recorder};
use shardsub::cluster::{ClusterPubSub, Mode};
use testkit::{Cluster, ServerKind};

fn delivery(kind: ServerKind, masters: usize) {
    let cluster = Cluster::start(kind, masters, 1).expect("cluster");
    let rec = Arc::new(Recorder::default());
    let ps = engine(&cluster, &rec);
    let chans = channels(10_000, "d");
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{kind:?}: {e}; {:?}", ps.metrics()));
    let missing = publish_round_and_wait(&ps, &rec, &chans, 1, Duration::from_secs(20));
    assert!(
        missing.is_empty(),
        "{kind:?} {masters}: {} channels never delivered",
        missing.len()
    );
    let m = ps.metrics();
    assert_eq!(m.nodes, masters, "{m:?}");
    assert_eq!(m.subscribe_connections, masters, "{m:?}");
    assert_eq!(m.pubsub.gap_channels, 0, "{m:?}");
    // Every master carries channels: delivery really spans the nodes.
    for &i in &cluster.masters() {
        assert_eq!(
            named_clients(&cluster, i, "shardsub-sub"),
            1,
            "{kind:?} master {i}"
        );
        let info = cluster.node(i).cmd(&[b"INFO", b"commandstats"]).unwrap();
        let info = testkit::values::text(&info).unwrap_or_default();
        let ssub = testkit::values::info_field(&info, "cmdstat_ssubscribe");
        assert!(ssub.is_some(), "{kind:?}: master {i} got no SSUBSCRIBE");
    }
    // A publish reports its receivers on the owning node.
    let r = ps
        .publish_wait(&chans[0], b"2", Duration::from_secs(2))
        .unwrap();
    assert_eq!(r, 1, "{kind:?}");
    ps.shutdown();
}

#[test]
fn ten_thousand_channels_on_three_masters() {
    for kind in testkit::kinds() {
        delivery(kind, 3);
    }
}

#[test]
fn connection_count_is_one_per_engine_per_master_and_modes_deliver() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let recs: Vec<Arc<Recorder>> = (0..3).map(|_| Arc::new(Recorder::default())).collect();
        let engines: Vec<ClusterPubSub> = recs.iter().map(|r| engine(&cluster, r)).collect();
        let chans = channels(500, "c");
        for e in &engines {
            e.subscribe(&chans).unwrap();
            e.wait_active(&chans, Duration::from_secs(10)).unwrap();
        }
        for &i in &cluster.masters() {
            assert_eq!(
                named_clients(&cluster, i, "shardsub-sub"),
                3,
                "{kind:?} master {i}"
            );
            assert_eq!(
                named_clients(&cluster, i, "shardsub-pub"),
                3,
                "{kind:?} master {i}"
            );
        }
        for (e, r) in engines.iter().zip(&recs) {
            let missing = publish_round_and_wait(e, r, &chans, 1, Duration::from_secs(10));
            assert!(missing.is_empty(), "{kind:?}");
        }
        drop(engines);
        // RESP2: subscribe arrays read as pushes, topology replies as
        // arrays instead of maps.
        let rec = Arc::new(Recorder::default());
        let ps = ClusterPubSub::builder()
            .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
            .handler_arc(rec.clone())
            .protocol(shardsub::Protocol::Resp2)
            .workers(2)
            .build()
            .unwrap();
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, Duration::from_secs(10)).unwrap();
        let missing = publish_round_and_wait(&ps, &rec, &chans, 1, Duration::from_secs(10));
        assert!(missing.is_empty(), "{kind:?} RESP2");
        assert_eq!(
            ps.publish_wait(&chans[0], b"9", Duration::from_secs(2))
                .ok(),
            Some(1)
        );
        drop(ps);
        // A multiplier of 2: two subscribe connections per master.
        let rec = Arc::new(Recorder::default());
        let ps = ClusterPubSub::builder()
            .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
            .handler_arc(rec.clone())
            .subscribe_multiplier(2)
            .workers(2)
            .build()
            .unwrap();
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, Duration::from_secs(10)).unwrap();
        for &i in &cluster.masters() {
            assert_eq!(
                named_clients(&cluster, i, "shardsub-sub"),
                2,
                "{kind:?} master {i}"
            );
        }
        let missing = publish_round_and_wait(&ps, &rec, &chans, 1, Duration::from_secs(10));
        assert!(missing.is_empty(), "{kind:?} multiplier 2");
        drop(ps);
        // Comparison modes deliver too.
        for mode in [Mode::Classic, Mode::PerPartition] {
            let rec = Arc::new(Recorder::default());
            let ps = ClusterPubSub::builder()
                .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
                .handler_arc(rec.clone())
                .partitions(16)
                .mode(mode)
                .workers(2)
                .build()
                .unwrap();
            ps.subscribe(&chans).unwrap();
            ps.wait_active(&chans, Duration::from_secs(10)).unwrap();
            let missing = publish_round_and_wait(&ps, &rec, &chans, 1, Duration::from_secs(10));
            assert!(missing.is_empty(), "{kind:?} {mode:?}");
            let subs: usize = cluster
                .masters()
                .iter()
                .map(|&i| named_clients(&cluster, i, "shardsub-sub"))
                .sum();
            let want = if mode == Mode::Classic { 1 } else { 16 };
            assert_eq!(subs, want, "{kind:?} {mode:?}");
        }
    }
}

#[test]
fn ten_thousand_channels_on_six_masters() {
    for kind in testkit::kinds() {
        delivery(kind, 6);
    }
}
