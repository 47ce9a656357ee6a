//! Cluster Pub/Sub against real clusters (Redis 7 and Valkey 9): every
//! message to 10,000 channels is delivered once, in order, across nodes
//! (the accounting checker counts each); publishes reach the slot owner
//! (receivers counted per node), and subscribe connections per master are
//! exactly one per engine, in every mode.

use std::sync::Arc;
use std::time::Duration;

use shardsub::cluster::Mode;
use shardsub::PubSub;
use testkit::accounting::Ledger;
use testkit::{Cluster, ServerKind};

use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;
use crate::support::cluster::{builder, named_clients};

const BOUND: Duration = Duration::from_secs(20);

/// `rounds` acknowledged rounds to every channel of `ledger` through `ps`,
/// then every tap must have everything, once and in order.
fn publish_and_check(ps: &Arc<PubSub>, ledger: &Arc<Ledger>, rounds: usize, what: &str) {
    let publish = accounted::via_cluster(ps.clone());
    for _ in 0..rounds {
        accounted::round(ledger, &*publish);
    }
    let report = accounted::settle_and_check(ledger, BOUND, what);
    assert_eq!(report.failed_total(), 0, "{what}: {report}");
    assert_eq!(report.counts.signals, 0, "{what}: {report}");
}

fn delivery(kind: ServerKind, masters: usize) {
    let cluster = Cluster::start(kind, masters, 1).expect("cluster");
    let chans = channels("d", 10_000);
    let ledger = Arc::new(Ledger::new(&chans));
    let handler = Accounted::new(&ledger, "sub");
    let ps = Arc::new(builder(&cluster, handler.clone()).build().unwrap());
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, BOUND)
        .unwrap_or_else(|e| panic!("{kind:?}: {e}; {:?}", ps.cluster_metrics().unwrap()));
    publish_and_check(&ps, &ledger, 2, &format!("{kind:?} {masters} masters"));
    let all = ps.metrics();
    let m = all.cluster.as_ref().unwrap();
    assert_eq!(m.nodes, masters, "{m:?}");
    assert_eq!(m.subscribe_connections, masters, "{m:?}");
    assert_eq!(all.gap_channels, 0, "{m:?}");
    assert_eq!(handler.threads.lock().len(), 2, "both workers deliver");
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

/// A fresh engine of `mode` etc. with its own tap, subscribed and checked.
fn check_variant(
    cluster: &Cluster,
    chans: &[Vec<u8>],
    what: &str,
    configure: impl FnOnce(shardsub::PubSubBuilder) -> shardsub::PubSubBuilder,
) -> Arc<PubSub> {
    let ledger = Arc::new(Ledger::new(chans));
    let handler = Accounted::new(&ledger, what);
    let ps = Arc::new(configure(builder(cluster, handler)).build().unwrap());
    ps.subscribe(chans).unwrap();
    ps.wait_active(chans, BOUND)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    publish_and_check(&ps, &ledger, 2, what);
    ps
}

/// [`check_variant`] for classic mode, whose messages cross the servers'
/// cluster bus: a loss is only excused (and the check run once more) when a
/// bus link was re-created during the check (see
/// [`Cluster::newest_bus_link_ms`]), which no client can see. Any other
/// loss fails.
fn check_classic(cluster: &Cluster, chans: &[Vec<u8>], what: &str) -> Arc<PubSub> {
    for attempt in 0..2 {
        let links = cluster.newest_bus_link_ms().expect("CLUSTER LINKS");
        let ledger = Arc::new(Ledger::new(chans));
        let handler = Accounted::new(&ledger, what);
        let ps = builder(cluster, handler).partitions(16).mode(Mode::Classic);
        let ps = Arc::new(ps.build().unwrap());
        ps.subscribe(chans).unwrap();
        ps.wait_active(chans, BOUND)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let publish = accounted::via_cluster(ps.clone());
        for _ in 0..2 {
            accounted::round(&ledger, &*publish);
        }
        ledger
            .wait_outcomes(BOUND)
            .unwrap_or_else(|e| panic!("{what}: {e}\n{}", ledger.report()));
        let caught_up = ledger.wait_caught_up(BOUND);
        let report = ledger.report();
        if caught_up.is_ok() && report.is_clean() {
            assert_eq!(report.counts.signals, 0, "{what}: {report}");
            return ps;
        }
        let relinked = cluster.newest_bus_link_ms().expect("CLUSTER LINKS") > links;
        assert!(
            relinked && attempt == 0,
            "{what}: loss without a cluster bus link re-created (attempt {attempt}): \
             {caught_up:?}\n{report}"
        );
        eprintln!(
            "{what}: a cluster bus link was re-created during the check, so classic \
             Pub/Sub lost messages on the servers; checking once more\n{report}"
        );
    }
    unreachable!("the second attempt returns or fails")
}

#[test]
fn connection_count_is_one_per_engine_per_master_and_modes_deliver() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let chans = channels("c", 500);
        // Three engines, each its own subscriber: every one gets everything.
        let ledger = Arc::new(Ledger::new(&chans));
        let engines: Vec<Arc<PubSub>> = (0..3)
            .map(|i| {
                let h = Accounted::new(&ledger, &format!("engine {i}"));
                Arc::new(builder(&cluster, h).build().unwrap())
            })
            .collect();
        for e in &engines {
            e.subscribe(&chans).unwrap();
            e.wait_active(&chans, BOUND).unwrap();
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
        // Published through one engine, received by all three.
        publish_and_check(&engines[0], &ledger, 2, &format!("{kind:?} 3 engines"));
        drop(engines);
        // RESP2: subscribe arrays read as pushes, topology replies as
        // arrays instead of maps.
        let ps = check_variant(&cluster, &chans, &format!("{kind:?} RESP2"), |b| {
            b.protocol(shardsub::Protocol::Resp2)
        });
        assert_eq!(
            ps.publish_wait(&chans[0], b"9", Duration::from_secs(2))
                .ok(),
            Some(1)
        );
        ps.shutdown(); // before the next instance counts its clients
        drop(ps);
        // A multiplier of 2: two subscribe connections per master.
        let ps = check_variant(&cluster, &chans, &format!("{kind:?} x2"), |b| {
            b.subscribe_connections(2)
        });
        for &i in &cluster.masters() {
            assert_eq!(
                named_clients(&cluster, i, "shardsub-sub"),
                2,
                "{kind:?} master {i}"
            );
        }
        ps.shutdown(); // before the next instance counts its clients
        drop(ps);
        // Comparison modes deliver too.
        for mode in [Mode::Classic, Mode::PerPartition] {
            let what = format!("{kind:?} {mode:?}");
            let ps = if mode == Mode::Classic {
                check_classic(&cluster, &chans, &what)
            } else {
                check_variant(&cluster, &chans, &what, |b| b.partitions(16).mode(mode))
            };
            let subs: usize = cluster
                .masters()
                .iter()
                .map(|&i| named_clients(&cluster, i, "shardsub-sub"))
                .sum();
            let want = if mode == Mode::Classic { 1 } else { 16 };
            assert_eq!(subs, want, "{kind:?} {mode:?}");
            ps.shutdown();
            drop(ps);
        }
    }
}

#[test]
fn ten_thousand_channels_on_six_masters() {
    for kind in testkit::kinds() {
        delivery(kind, 6);
    }
}

/// With active events on, the handler hears once per channel when its
/// first subscribe is confirmed, and again after the gaps of every
/// resubscribe (several gaps before one confirmation owe one active event;
/// an active event never comes without a gap): a connection kill
/// resubscribes exactly the victim's channels, in cluster mode as in the
/// others.
#[test]
fn active_events_follow_the_first_subscribe_and_every_resubscribe() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let chans = channels("act", 300);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let ps = builder(&cluster, handler.clone())
            .active_events(true)
            .build()
            .unwrap();
        let ps = Arc::new(ps);
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        let events = |c: &Vec<u8>| {
            handler
                .per_channel
                .lock()
                .get(c)
                .copied()
                .unwrap_or_default()
        };
        testkit::wait_for("an active event per channel", BOUND, || {
            Ok(chans.iter().all(|c| events(c).actives >= 1).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let before: Vec<u64> = chans.iter().map(|c| events(c).gaps).collect();
        // Kill the subscribe connection on one master: its channels are
        // resubscribed after a gap.
        let victim = cluster.masters()[0];
        let on_victim: Vec<bool> = chans
            .iter()
            .map(|c| {
                let slot = shardcore::key_slot(&ps.server_channel(c));
                cluster.owner_of_slot(slot) == Some(victim)
            })
            .collect();
        assert!(on_victim.iter().any(|&v| v));
        cluster
            .node(victim)
            .cmd(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"])
            .unwrap();
        testkit::wait_for("active again after the resubscribe", BOUND, || {
            let back = chans
                .iter()
                .zip(&before)
                .zip(&on_victim)
                .all(|((c, &b), &v)| {
                    let e = events(c);
                    !v || (e.gaps > b && !e.awaiting)
                });
            Ok(back.then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}; {:?}", ps.cluster_metrics().unwrap()));
        ps.wait_active(&chans, BOUND).unwrap();
        let publish = accounted::via_cluster(ps.clone());
        accounted::round(&ledger, &*publish);
        accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
        for ((c, &b), &v) in chans.iter().zip(&before).zip(&on_victim) {
            let e = events(c);
            let name = String::from_utf8_lossy(c);
            assert!(!e.awaiting && e.actives >= 1, "{kind:?} {name}: {e:?}");
            assert!(e.actives <= 1 + e.gaps, "{kind:?} {name}: {e:?}");
            assert_eq!(e.unprompted, 0, "{kind:?} {name}: {e:?}");
            assert_eq!(
                e.gaps > b,
                v,
                "{kind:?} {name}: gapped iff on the victim: {e:?}"
            );
        }
    }
}

/// A subscribe connection killed on a cluster node (`CLIENT KILL`) is
/// told as the README says: `Disconnected` for that node, then
/// `Connected`, then the gap of its channels, and nothing for the other
/// nodes; every message accounted.
#[test]
fn a_killed_subscribe_connection_is_disconnected_then_connected_then_a_gap() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let chans = channels("conn", 300);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        // One worker: events and gaps are in order per worker, and the
        // handler's timeline interleaves workers in no promised order.
        let ps = Arc::new(
            builder(&cluster, handler.clone())
                .workers(1)
                .build()
                .unwrap(),
        );
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        let victim = cluster.masters()[0];
        let server = cluster.node(victim).addr().to_string();
        let before = handler.timeline.lock().len();
        let n = cluster
            .node(victim)
            .cmd(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"])
            .unwrap();
        assert_eq!(n, testkit::Value::Integer(1), "{kind:?}: one killed");
        // The gap comes whether or not the connection events do: once it
        // is in, the events must be before it.
        let gap = format!("gap {server}");
        let timeline = testkit::wait_for("the victim's gap", BOUND, || {
            let t = handler.timeline.lock();
            let since = t.get(before..).unwrap_or_default();
            Ok(since.contains(&gap).then(|| since.to_vec()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}: {:?}", handler.timeline.lock()));
        let what = format!("{kind:?}: events after the kill on {server}: {timeline:?}");
        let down = format!("down {server}: ");
        let at_gap = timeline.iter().position(|e| *e == gap);
        let at_down = timeline.iter().position(|e| e.starts_with(&down));
        let at_up = timeline.iter().position(|e| *e == format!("up {server}"));
        assert!(at_down.is_some(), "{what}: no Disconnected");
        assert!(at_up.is_some(), "{what}: no Connected");
        assert!(at_down < at_up && at_up < at_gap, "{what}: out of order");
        let others = timeline.iter().filter(|e| !e.contains(&server)).count();
        assert_eq!(others, 0, "{what}: events for the nodes left alone");
        ps.wait_active(&chans, BOUND).unwrap();
        publish_and_check_signalled(&ps, &ledger, &format!("{kind:?} CLIENT KILL"));
    }
}

/// A round through `ps`, settled: nothing lost silently (losses before
/// it were signalled).
fn publish_and_check_signalled(ps: &Arc<PubSub>, ledger: &Arc<Ledger>, what: &str) {
    accounted::round(ledger, &*accounted::via_cluster(ps.clone()));
    let report = accounted::settle_and_check(ledger, BOUND, what);
    assert_eq!(report.failed_total(), 0, "{what}: {report}");
}

/// The envelope on a cluster, as on servers: payloads arrive without the
/// header (the accounting stamps check out), and the lag is measured.
#[test]
fn the_envelope_measures_lag_on_a_cluster() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let chans = channels("env", 300);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let ps = Arc::new(
            builder(&cluster, handler.clone())
                .envelope(true)
                .build()
                .unwrap(),
        );
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        publish_and_check(&ps, &ledger, 3, &format!("{kind:?} envelope"));
        let m = ps.metrics();
        let lag = m.lag.unwrap_or_else(|| panic!("{kind:?}: no lag: {m:?}"));
        assert_eq!(lag.count, 900, "{kind:?}: {lag:?}");
        assert!(
            lag.p50 <= lag.p99 && lag.max < Duration::from_secs(10),
            "{lag:?}"
        );
        assert_eq!(m.unenveloped, 0, "{kind:?}");
    }
}
