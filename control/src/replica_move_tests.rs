//! Subscribing on replicas: how the core follows a serving replica that
//! fails, is promoted or changes shard (the rig and the placement tests
//! are in `replica_tests`).

use alloc::collections::BTreeSet;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use topology::{Health, Role, Shard, SlotMap};

use crate::replica_tests::{gapped, map2, node, shard_of, Rig, ON};
use crate::Command;

#[test]
fn a_replica_moved_to_another_shard_rewires_its_old_shard_with_gaps() {
    // Redis sends no `sunsubscribe` when `CLUSTER REPLICATE` re-points a
    // replica: the next map is all the core learns.
    let mut rig = Rig::new(3);
    rig.apply(map2(("pa", &[("ra", ON)]), ("pb", &[("rb", ON)])));
    let names = rig.want(64);
    let cmds = rig.apply(map2(("pa", &[]), ("pb", &[("ra", ON), ("rb", ON)])));
    let a: BTreeSet<Vec<u8>> = names.iter().filter(|n| shard_of(n) == 0).cloned().collect();
    assert!(!a.is_empty());
    assert_eq!(gapped(&cmds), a, "a gap for shard a's channels only");
    // Shard a falls back to its primary; shard b stays on rb (its
    // replica did not change), and ra now serves nothing.
    assert_eq!(rig.nodes(), ["pa", "rb"].map(String::from).into());
    for n in &names {
        let want = if shard_of(n) == 0 { "pa" } else { "rb" };
        assert_eq!(rig.served_by(n), want);
    }
    let gap_at = cmds.iter().position(|c| matches!(c, Command::Gap { .. }));
    let sub_at = cmds
        .iter()
        .rposition(|c| matches!(c, Command::Subscribe { .. }));
    assert!(gap_at < sub_at, "gaps before the resubscribes: {cmds:?}");
}

#[test]
fn a_failed_replica_connection_moves_its_shard_to_the_primary_without_waiting_for_the_map() {
    let mut rig = Rig::new(5);
    let m = || map2(("pa", &[("r1", ON), ("r2", ON)]), ("pb", &[]));
    rig.apply(m());
    let names = rig.want(32);
    let a: Vec<Vec<u8>> = names.into_iter().filter(|n| shard_of(n) == 0).collect();
    let first = rig.served_by(&a[0]);
    let conn = rig.core.subscribed_on(&a[0]).unwrap();
    let now = rig.now();
    rig.core.handle_conn_down(now, conn);
    rig.conns.remove(&conn);
    rig.settle();
    // The map still says the replica is online (the cluster has not
    // marked it failed yet): the shard moves anyway, to the primary (the
    // other replica might lag the failed one: messages twice).
    let cmds = rig.apply(m());
    let expect: BTreeSet<Vec<u8>> = a.iter().cloned().collect();
    assert_eq!(gapped(&cmds), expect, "a gap before each resubscribe");
    for n in &a {
        assert_eq!(rig.served_by(n), "pa");
    }
    assert!(!rig.nodes().contains(&first), "{:?}", rig.nodes());
    // It stays there when the failed one is listed healthy again.
    let cmds = rig.apply(m());
    assert!(
        !cmds.iter().any(|c| matches!(c, Command::Subscribe { .. })),
        "{cmds:?}"
    );
}

#[test]
fn a_slot_that_changes_primary_under_its_serving_node_restarts_its_connection() {
    // `ra` is promoted: two maps cannot tell that from `ra` having
    // followed another primary that the slots then migrated to (Redis
    // tells its subscribers nothing, and they come back to life once it
    // serves those slots again), so its connection restarts: a gap for
    // each channel, never a silent loss.
    let mut rig = Rig::new(9);
    rig.apply(map2(("pa", &[("ra", ON)]), ("pb", &[])));
    let names = rig.want(32);
    let a: BTreeSet<Vec<u8>> = names.iter().filter(|n| shard_of(n) == 0).cloned().collect();
    let conn = rig.core.subscribed_on(a.first().unwrap()).unwrap();
    let promoted = || map2(("ra", &[("pa", Health::Failed)]), ("pb", &[]));
    let cmds = rig.apply(promoted());
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Close { conn: c } if *c == conn)),
        "{cmds:?}"
    );
    rig.conns.remove(&conn);
    // The reconnect resubscribes there (no replica to move to), each
    // channel after its gap.
    let mut seen = Vec::new();
    for _ in 0..10 {
        let t = rig.core.poll_timeout().unwrap();
        rig.t = rig.t.max(t.0);
        rig.core.handle_timeout(t);
        seen.extend(rig.settle());
        if rig.core.is_settled() {
            break;
        }
    }
    assert_eq!(gapped(&seen), a);
    for n in &a {
        assert_eq!(rig.served_by(n), "ra");
    }
    // With its subscriptions live again, the old primary back as a
    // replica does not move it.
    let cmds = rig.apply(map2(("ra", &[("pa", ON)]), ("pb", &[])));
    assert!(gapped(&cmds).is_empty(), "{cmds:?}");
}

#[test]
fn a_promoted_replica_that_lost_its_subscriptions_serves_as_primary() {
    // Valkey drops them on promotion (`sunsubscribe`): they are subscribed
    // again there, each after a gap; the old primary, back as a replica
    // (and behind, resyncing), does not get the shard.
    let mut rig = Rig::new(9);
    rig.apply(map2(("pa", &[("ra", ON)]), ("pb", &[])));
    let names = rig.want(32);
    let a: BTreeSet<Vec<u8>> = names.iter().filter(|n| shard_of(n) == 0).cloned().collect();
    let now = rig.now();
    for n in &a {
        let conn = rig.core.subscribed_on(n).unwrap();
        rig.core.handle_sunsubscribe(now, conn, n);
    }
    rig.settle();
    // The map shows the promotion; the dropped channels are subscribed
    // again once a few maps agree they live there (stale rounds).
    let promoted = || map2(("ra", &[("pa", ON)]), ("pb", &[]));
    let mut seen = rig.apply(promoted());
    for _ in 0..20 {
        if rig.core.is_settled() {
            break;
        }
        if rig.fetch.is_some() {
            seen.extend(rig.apply(promoted()));
            continue;
        }
        let t = rig.core.poll_timeout().unwrap();
        rig.t = rig.t.max(t.0);
        rig.core.handle_timeout(t);
        seen.extend(rig.settle());
    }
    assert_eq!(gapped(&seen), a);
    for n in &a {
        assert_eq!(rig.served_by(n), "ra");
    }
}

#[test]
fn a_replica_whose_old_slots_followed_it_hands_them_over_with_gaps() {
    // Redis: `ra` re-pointed to `pb` (no word to its subscribers), then
    // shard a's slots migrate to `pb`: the next map shows `ra` a replica
    // of the shard that owns them again, and its old subscriptions revive
    // after a silent gap.
    let mut rig = Rig::new(4);
    rig.apply(map2(("pa", &[("ra", ON)]), ("pb", &[("rb", ON)])));
    let names = rig.want(64);
    let a: BTreeSet<Vec<u8>> = names.iter().filter(|n| shard_of(n) == 0).cloned().collect();
    let on_ra = rig.core.subscribed_on(a.first().unwrap()).unwrap();
    let mut m = SlotMap::new();
    let shard = Shard {
        primary: node("pb", Role::Primary, ON),
        replicas: vec![node("ra", Role::Replica, ON), node("rb", Role::Replica, ON)],
    };
    let i = m.push_shard(shard);
    m.assign(0..=16383, i);
    // The merged shard stays on `rb`, which served the slots that kept
    // their primary; shard a's channels move there, each after a gap.
    let cmds = rig.apply(m);
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Close { conn } if *conn == on_ra)),
        "{cmds:?}"
    );
    assert_eq!(
        gapped(&cmds),
        a,
        "a gap for each channel that was on ra, no other"
    );
    assert!(rig.core.is_settled());
    for n in &names {
        assert_eq!(rig.served_by(n), "rb");
    }
}

#[test]
fn a_serving_replica_missing_from_a_map_keeps_its_shard_until_it_shows_up_promoted() {
    // Valkey, `CLUSTER FAILOVER` of the serving replica: a map taken just
    // after the promotion's `sunsubscribe` can leave the node out (no
    // longer the primary's replica, not yet listed as a primary). The
    // shard must not move to the other replica (or the old primary) in
    // between: the next map shows the node as the shard's primary.
    let mut rig = Rig::new(5);
    rig.apply(map2(("pa", &[("r1", ON), ("r2", ON)]), ("pb", &[])));
    let names = rig.want(32);
    let a: Vec<Vec<u8>> = names.into_iter().filter(|n| shard_of(n) == 0).collect();
    let serving = rig.served_by(&a[0]);
    let other = if serving == "r1" { "r2" } else { "r1" };
    let without = || map2(("pa", &[(other, ON)]), ("pb", &[]));
    let cmds = rig.apply(without());
    assert!(
        !cmds
            .iter()
            .any(|c| matches!(c, Command::Open { .. } | Command::Subscribe { .. })),
        "{cmds:?}"
    );
    let soon = crate::Time(rig.t) + rig.core.cfg.degraded_retry;
    assert!(
        rig.core.poll_timeout().is_some_and(|t| t <= soon),
        "a fast refresh follows"
    );
    for n in &a {
        assert_eq!(rig.served_by(n), serving);
    }
    // Promoted: the shard stays there (its connection restarts, since
    // two maps cannot tell a promotion from a silent move).
    let promoted = map2((serving.as_str(), &[(other, ON), ("pa", ON)]), ("pb", &[]));
    let mut seen = rig.apply(promoted.clone());
    for _ in 0..10 {
        if rig.core.is_settled() {
            break;
        }
        if rig.fetch.is_some() {
            seen.extend(rig.apply(promoted.clone()));
            continue;
        }
        let t = rig.core.poll_timeout().unwrap();
        rig.t = rig.t.max(t.0);
        rig.core.handle_timeout(t);
        seen.extend(rig.settle());
    }
    let expect: BTreeSet<Vec<u8>> = a.iter().cloned().collect();
    assert_eq!(gapped(&seen), expect);
    for n in &a {
        assert_eq!(rig.served_by(n), serving);
    }
    assert!(!rig.nodes().contains(other), "{:?}", rig.nodes());
}

#[test]
fn a_serving_replica_missing_from_maps_past_the_stale_rounds_has_left() {
    let mut rig = Rig::new(5);
    rig.apply(map2(("pa", &[("r1", ON), ("r2", ON)]), ("pb", &[])));
    let names = rig.want(32);
    let a: BTreeSet<Vec<u8>> = names.into_iter().filter(|n| shard_of(n) == 0).collect();
    let serving = rig.served_by(a.first().unwrap());
    let other = if serving == "r1" { "r2" } else { "r1" };
    let without = || map2(("pa", &[(other, ON)]), ("pb", &[]));
    let rounds = rig.core.cfg.stale_rounds;
    for _ in 0..rounds {
        let cmds = rig.apply(without());
        assert!(gapped(&cmds).is_empty(), "{cmds:?}");
    }
    // One map more and it has left: the shard moves to its primary (the
    // other replica could lag the one left), each channel after a gap,
    // and nothing is held any longer.
    let cmds = rig.apply(without());
    assert_eq!(gapped(&cmds), a);
    for n in &a {
        assert_eq!(rig.served_by(n), "pa");
    }
    assert!(rig.core.is_settled(), "{cmds:?}");
}

/// Per-partition connections on replicas, a slot learnt by a probe (a node
/// known only by address), the serving replica avoided after one of its
/// connections failed, then a failover map that names the probed node and
/// gives it a second partition: that partition's connection on the old
/// serving replica is closed. The fuzzer's `replica_conn_leak`: naming
/// the node recomputed the current layout, which then served the shard
/// from its primary (the replica being avoided), so the plan to the new
/// map started from a node that held none of the connections and left
/// one open.
#[test]
fn naming_a_probed_node_after_a_replica_failed_leaves_no_connection_behind() {
    use alloc::collections::BTreeMap;
    use shardcore::Partitions;
    use topology::NodeAddr;

    use crate::test_maps::addr;
    use crate::{Config, ConnLayout, Core, ProbeReply, Time};

    let parts = Partitions::new(16).unwrap();
    let (s2, s6) = (parts.slot(2), parts.slot(6));
    let mut cfg = Config::new(parts, vec![addr("seed")]);
    cfg.mode = ConnLayout::PerPartition;
    cfg.replicas = Some(3);
    let mut rig = Rig {
        core: Core::new(cfg, Time::ZERO).unwrap(),
        t: 0,
        conns: BTreeMap::new(),
        fetch: None,
    };
    rig.settle();
    // Shard a (primary pa, replica ra) owns every slot but partition 2's.
    let mut first = map2(("pa", &[("ra", ON)]), ("pb", &[]));
    first.assign(0..=16383, Some(0));
    first.assign(s2..=s2, None);
    let cmds = rig.apply(first);
    let probe = cmds.iter().find_map(|c| match c {
        Command::ProbeSlot { id, slot, .. } if *slot == s2 => Some(*id),
        _ => None,
    });
    let now = rig.now();
    rig.core.handle_probe(
        now,
        probe.expect("partition 2's slot probed"),
        ProbeReply::Moved(addr("pn")),
    );
    rig.settle();
    let names = rig.want(64);
    let bare: Vec<NodeAddr> = rig
        .conns
        .values()
        .filter(|k| k.id.is_empty())
        .map(|k| k.addr.clone())
        .collect();
    assert_eq!(bare, [addr("pn")], "partition 2 on the probed node");
    assert_eq!(rig.nodes(), ["", "ra"].map(String::from).into());
    // One of ra's connections fails: ra is avoided for a poll interval.
    let on_ra = rig.core.conn_of(0).unwrap();
    let now = rig.now();
    rig.core.handle_conn_down(now, on_ra);
    rig.conns.remove(&on_ra);
    rig.settle();
    // Failover (ra promoted), and pn, named now, owns partitions 2 and 6.
    let mut next = SlotMap::new();
    let a = next.push_shard(Shard {
        primary: node("ra", Role::Primary, ON),
        replicas: vec![node("pa", Role::Replica, ON)],
    });
    let n = next.push_shard(Shard {
        primary: node("pn", Role::Primary, ON),
        replicas: Vec::new(),
    });
    next.assign(0..=16383, a);
    next.assign(s2..=s2, n);
    next.assign(s6..=s6, n);
    // (The degraded-mode fetch the probe's round started timed out
    // meanwhile: the rig's clock jumps a second per step.)
    rig.fetch = None;
    rig.apply(next);
    let now = rig.now();
    rig.core.handle_timeout(now); // the failed connection reopens
    rig.settle();
    assert!(rig.core.is_settled());
    assert_eq!(
        rig.conns.len(),
        16,
        "one connection per partition: {:?}",
        rig.conns
    );
    // (The rig keeps each connection's node as opened: pn's has no id.)
    let on_pn = rig.conns.values().filter(|k| k.addr == addr("pn")).count();
    assert_eq!(on_pn, 2, "partitions 2 and 6 on pn: {:?}", rig.conns);
    let parts = Partitions::new(16).unwrap();
    for n in &names {
        let p = parts.partition_of(n);
        let conn = rig.core.subscribed_on(n).expect("active");
        let on = &rig.conns.get(&conn).expect("open").addr.host;
        let want = if p == 2 || p == 6 { "pn" } else { "ra" };
        assert_eq!(on, want, "{n:?} (partition {p})");
    }
}
