//! Publish redirects against real clusters (Redis 7 and Valkey 9, 3
//! masters): a publish to a migrating slot succeeds without changing the
//! route (Redis 7 and Valkey 9 serve `SPUBLISH` on the source and send no
//! `ASK`; `tests/suite/cluster/ask.rs` plays one with fake nodes), `MOVED` reroutes the
//! publish and the slot and schedules a refresh, a slot with no owner is
//! counted, probed and subscribed again once a node takes it (with a gap
//! event), and `CLUSTERDOWN` is
//! retried within the retry window and then fails with a clear error.

use std::sync::Arc;
use std::time::Duration;

use shardsub::cluster::Mode;
use shardsub::Error;
use shardsub::PubSub;
use testkit::accounting::Ledger;
use testkit::{Cluster, ServerKind};

use crate::support::accounted;
use crate::support::accounted::Accounted;

fn state_of(cluster: &Cluster, i: usize) -> String {
    let v = cluster
        .node(i)
        .cmd(&[b"CLUSTER", b"INFO"])
        .expect("cluster info");
    let t = testkit::values::text(&v).unwrap_or_default();
    testkit::values::info_field(&t, "cluster_state").unwrap_or_default()
}

/// A channel whose partition lives on master `node`.
fn channel_on(cluster: &Cluster, parts: &shardcore::Partitions, node: usize) -> Vec<u8> {
    (0..100_000)
        .map(|i| format!("r:{i}").into_bytes())
        .find(|ch| cluster.owner_of_slot(parts.slot(parts.partition_of(ch))) == Some(node))
        .expect("a channel on the node")
}

/// A publish of the next stamped message of `ledger`'s only channel, and
/// its outcome (recorded in the ledger).
fn stamped_wait(ps: &PubSub, ledger: &Ledger) -> Result<i64, Error> {
    let mut payload = Vec::new();
    let stamp = ledger.stamp(0, &mut payload, accounted::PAYLOAD_LEN);
    let r = ps.publish_wait(ledger.name(0), &payload, Duration::from_secs(3));
    accounted::record(ledger, stamp, &r, true);
    r
}

fn redirects(kind: ServerKind) {
    let mut cluster = Cluster::start(kind, 3, 0).expect("cluster");
    let parts = shardcore::Partitions::new(128).expect("128 partitions");
    let masters = cluster.masters();
    let (a, b, c) = (masters[0], masters[1], masters[2]);
    let on_a = channel_on(&cluster, &parts, a);
    let on_b = channel_on(&cluster, &parts, b);
    // Every message to on_a and to on_b is accounted for: the sharded
    // name of on_a (received by the per-partition instance), its classic
    // name (the classic instance: another namespace), and on_b (the main
    // instance).
    let ledger_a = Arc::new(Ledger::new([&on_a]));
    let ledger_c = Arc::new(Ledger::new([&on_a]));
    let ledger_b = Arc::new(Ledger::new([&on_b]));
    let handler = Accounted::new(&ledger_b, "main");
    let ps = PubSub::builder()
        .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
        .handler_arc(handler.clone())
        .workers(1)
        .retry_window(Duration::from_millis(400))
        .build()
        .expect("cluster pubsub");
    assert_eq!(ps.partitions(), Some(&parts));

    let slot = parts.slot(parts.partition_of(&on_a)).to_string();
    let (id_a, id_b) = (
        cluster.node_id(a).unwrap().to_string(),
        cluster.node_id(b).unwrap().to_string(),
    );

    // ASK: the slot is migrating from a to b; the publish still succeeds
    // and the route is left alone.
    cluster
        .node(b)
        .cmd_str(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id_a])
        .unwrap();
    cluster
        .node(a)
        .cmd_str(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id_b])
        .unwrap();
    let r = ps.publish_wait(&on_a, b"1", Duration::from_secs(3));
    assert!(r.is_ok(), "{kind:?}: {r:?}");
    let asks = ps.cluster_metrics().unwrap().redirects.ask;
    eprintln!("{kind:?}: SPUBLISH to a migrating slot: {r:?}, {asks} ASK redirects");
    for n in [a, b] {
        cluster
            .node(n)
            .cmd_str(&["CLUSTER", "SETSLOT", &slot, "STABLE"])
            .unwrap();
    }
    let m = ps.cluster_metrics().unwrap();
    assert_eq!(m.redirects.moved, 0, "{m:?}");

    // The comparison modes subscribed to the channel whose slot moves next:
    // per-partition mode reconnects that partition on the new owner (a gap),
    // classic mode is not affected (no gap).
    let others: Vec<(Mode, Arc<Accounted>, Arc<PubSub>)> = [Mode::PerPartition, Mode::Classic]
        .into_iter()
        .map(|mode| {
            let ledger = if mode == Mode::Classic {
                &ledger_c
            } else {
                &ledger_a
            };
            let h = Accounted::new(ledger, &format!("{mode:?}"));
            let ps = PubSub::builder()
                .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
                .handler_arc(h.clone())
                .mode(mode)
                .workers(1)
                .build()
                .expect("cluster pubsub");
            ps.subscribe([&on_a]).unwrap();
            ps.wait_active(&[&on_a], Duration::from_secs(5)).unwrap();
            (mode, h, Arc::new(ps))
        })
        .collect();

    // MOVED: the slot moves for good while this instance (no subscription
    // there, 30 s poll) still routes to a; the publish follows the redirect,
    // the route is fixed and a refresh runs.
    cluster
        .migrate_slots(
            parts.slot(parts.partition_of(&on_a))..=parts.slot(parts.partition_of(&on_a)),
            a,
            b,
        )
        .expect("migrate");
    let r = stamped_wait(&ps, &ledger_a);
    assert!(r.is_ok(), "{kind:?}: {r:?}");
    let m = ps.cluster_metrics().unwrap();
    assert!(m.redirects.moved >= 1, "{kind:?}: {m:?}");
    testkit::wait_for("a refresh after MOVED", Duration::from_secs(5), || {
        Ok((ps.cluster_metrics().unwrap().rebuilds.moved >= 1).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{kind:?}: {e}; {:?}", ps.cluster_metrics().unwrap()));
    let moved = ps.cluster_metrics().unwrap().redirects.moved;
    assert!(stamped_wait(&ps, &ledger_a).is_ok());
    assert_eq!(
        ps.cluster_metrics().unwrap().redirects.moved,
        moved,
        "{kind:?}: route not updated"
    );

    for (mode, h, other) in &others {
        let ledger = if *mode == Mode::Classic {
            &ledger_c
        } else {
            &ledger_a
        };
        if *mode == Mode::PerPartition {
            // Its partition moves with a gap: publish once it is
            // subscribed on the new owner (what was published before is
            // inside the signalled window, and the round's last message
            // would never come).
            testkit::wait_for("the moved partition's gap", Duration::from_secs(10), || {
                Ok(h.gap_channels.lock().contains(&on_a).then_some(()))
            })
            .unwrap_or_else(|e| panic!("{kind:?} {mode:?}: {e}"));
        }
        other
            .wait_active(&[&on_a], Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{kind:?} {mode:?}: {e}"));
        accounted::round(ledger, &*accounted::via_cluster(other.clone()));
        accounted::settle_and_check(
            ledger,
            Duration::from_secs(10),
            &format!("{kind:?} {mode:?}"),
        );
    }
    for (mode, h, _) in &others {
        let gapped = h.gap_channels.lock().contains(&on_a);
        assert_eq!(
            gapped,
            *mode == Mode::PerPartition,
            "{kind:?} {mode:?}: gap"
        );
    }
    drop(others);

    // A slot with no owner: its partition is unresolved (counted, probed),
    // and subscribed again once a node takes the slot.
    let p_b = parts.partition_of(&on_b);
    let slot_b = parts.slot(p_b).to_string();
    ps.subscribe([&on_b]).unwrap();
    ps.wait_active(&[&on_b], Duration::from_secs(5)).unwrap();
    for &n in &masters {
        cluster
            .node(n)
            .cmd_str(&["CLUSTER", "DELSLOTS", &slot_b])
            .unwrap();
    }
    ps.refresh();
    testkit::wait_for(
        "the slot to count as unowned",
        Duration::from_secs(10),
        || Ok((ps.cluster_metrics().unwrap().unknown_slot_owners == 1).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{kind:?}: {e}; {:?}", ps.cluster_metrics().unwrap()));
    assert!(!ps.is_active(&on_b), "{kind:?}: active without an owner");
    // The probe of the unowned slot is answered after the map that made
    // it unowned (its GET goes out once that map is in).
    testkit::wait_for(
        "a failed probe of the unowned slot",
        Duration::from_secs(10),
        || Ok((ps.cluster_metrics().unwrap().topology_errors.probe >= 1).then_some(())),
    )
    .unwrap_or_else(|e| {
        panic!(
            "{kind:?}: no probe: {e}; {:?}",
            ps.cluster_metrics().unwrap()
        )
    });
    cluster
        .node(c)
        .cmd_str(&["CLUSTER", "ADDSLOTS", &slot_b])
        .unwrap();
    cluster.wait_ok().expect("cluster ok after ADDSLOTS");
    ps.wait_active(&[&on_b], Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{kind:?}: {e}; {:?}", ps.cluster_metrics().unwrap()));
    assert_eq!(ps.cluster_metrics().unwrap().unknown_slot_owners, 0);
    assert_eq!(
        stamped_wait(&ps, &ledger_b).unwrap(),
        1,
        "{kind:?}: the new owner delivers"
    );
    accounted::settle_and_check(
        &ledger_b,
        Duration::from_secs(10),
        &format!("{kind:?} orphan"),
    );
    let gapped = handler.gap_channels.lock().contains(&on_b);
    assert!(gapped, "{kind:?}: the orphaned channel got no gap event");

    // CLUSTERDOWN: a master dies with no replica; a live master that does
    // not serve shard channels while down refuses with CLUSTERDOWN, retried
    // until the window closes.
    for n in [a, b] {
        cluster
            .node(n)
            .cmd_str(&["CONFIG", "SET", "cluster-allow-pubsubshard-when-down", "no"])
            .unwrap();
    }
    cluster.node_mut(c).unwrap().kill();
    testkit::wait_for("a's cluster_state to fail", Duration::from_secs(20), || {
        Ok((state_of(&cluster, a) == "fail" && state_of(&cluster, b) == "fail").then_some(()))
    })
    .expect("cluster down");
    let r = ps.publish_wait(&on_a, b"2", Duration::from_secs(5));
    match &r {
        Err(Error::Cluster { reason, .. }) => {
            assert!(reason.contains("CLUSTERDOWN"), "{kind:?}: {reason}");
        }
        other => panic!("{kind:?}: expected Error::Cluster, got {other:?}"),
    }
    let m = ps.cluster_metrics().unwrap();
    assert!(m.redirects.cluster_down >= 2, "{m:?}");
    assert!(m.publish_failed >= 1, "{m:?}");
    eprintln!("{kind:?}: CLUSTERDOWN past the window: {}", r.unwrap_err());
    ps.shutdown();
}

#[test]
fn migrating_slot_unowned_slot_and_clusterdown() {
    for kind in testkit::kinds() {
        redirects(kind);
    }
}
