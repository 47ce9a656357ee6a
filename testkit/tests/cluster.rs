//! Real clusters: creation, slot coverage, resharding, failover.

use std::time::Duration;

use testkit::{Cluster, Value};

fn slot_total(cluster: &Cluster) -> u32 {
    cluster
        .masters()
        .iter()
        .flat_map(|&m| cluster.slots_of(m))
        .map(|r| u32::from(*r.end()) - u32::from(*r.start()) + 1)
        .sum()
}

#[test]
fn three_masters_one_replica_each_come_up_ok() -> Result<(), testkit::Error> {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 1)?;
        assert_eq!(cluster.nodes().len(), 6);
        let masters = cluster.masters();
        assert_eq!(masters.len(), 3, "{kind}");
        assert_eq!(cluster.replicas().len(), 3, "{kind}");
        assert_eq!(slot_total(&cluster), 16384, "{kind}");
        let firsts: Vec<Vec<_>> = masters.iter().map(|&m| cluster.slots_of(m)).collect();
        assert_eq!(
            firsts,
            vec![vec![0..=5460], vec![5461..=10922], vec![10923..=16383]]
        );
        for &m in &masters {
            assert_eq!(cluster.replicas_of(m).len(), 1, "{kind}: master {m}");
        }
        for node in cluster.nodes() {
            let info = node.cmd(&[b"CLUSTER", b"INFO"])?;
            let text = testkit::values::text(&info).unwrap_or_default();
            assert!(text.contains("cluster_state:ok"), "{kind}: {text}");
        }
        // The slot owner serves the key; another master redirects.
        let slot = cluster.node(0).cmd(&[b"CLUSTER", b"KEYSLOT", b"foo"])?;
        assert_eq!(slot, Value::Integer(12182));
        let owner = cluster
            .owner_of_slot(12182)
            .expect("slot 12182 has an owner");
        cluster.node(owner).cmd(&[b"SET", b"foo", b"bar"])?;
        let other = masters
            .iter()
            .copied()
            .find(|&m| m != owner)
            .unwrap_or(owner);
        let err = cluster
            .node(other)
            .cmd(&[b"GET", b"foo"])
            .expect_err("MOVED");
        assert!(err.to_string().contains("MOVED 12182"), "{kind}: {err}");
        assert_eq!(cluster.seed_addrs().len(), 6);
    }
    Ok(())
}

#[test]
fn one_master_cluster_is_created_by_hand() -> Result<(), testkit::Error> {
    let kind = testkit::kinds()[0];
    let cluster = Cluster::start(kind, 1, 1)?;
    assert_eq!(cluster.masters().len(), 1);
    assert_eq!(cluster.slots_of(cluster.masters()[0]), vec![0..=16383]);
    assert_eq!(cluster.replicas().len(), 1);
    Ok(())
}

#[test]
fn reshard_add_and_remove_a_master() -> Result<(), testkit::Error> {
    for kind in testkit::kinds() {
        let mut cluster = Cluster::start(kind, 3, 0)?;
        let first = cluster.masters()[0];
        cluster.node(first).cmd(&[b"SET", b"{06S}k", b"v"])?; // slot 0
        let new = cluster.add_master()?;
        assert_eq!(cluster.masters().len(), 4);
        assert!(cluster.slots_of(new).is_empty());
        cluster.migrate_slots(0..=99, first, new)?;
        assert_eq!(cluster.slots_of(new), vec![0..=99], "{kind}");
        assert_eq!(cluster.slots_of(first), vec![100..=5460], "{kind}");
        assert_eq!(
            cluster.node(new).cmd(&[b"GET", b"{06S}k"])?,
            Value::Bulk(b"v".to_vec())
        );
        cluster.migrate_slots(0..=99, new, first)?;
        // Having given away its last slot, the new node may now be a replica.
        assert!(cluster.slots_of(new).is_empty());
        cluster.remove_master(new)?;
        assert!(!cluster.is_live(new));
        assert_eq!(cluster.masters().len(), 3);
        assert_eq!(slot_total(&cluster), 16384);
        assert!(cluster.remove_master(first).is_err(), "a master with slots");
    }
    Ok(())
}

#[test]
fn failover_and_kill_primary() -> Result<(), testkit::Error> {
    for kind in testkit::kinds() {
        let mut cluster = Cluster::start(kind, 3, 1)?;
        let master = cluster.masters()[0];
        let replica = cluster.replicas_of(master)[0];
        cluster.failover(replica)?;
        assert_eq!(cluster.slots_of(replica), vec![0..=5460], "{kind}");
        assert_eq!(cluster.master_of(master), Some(replica), "{kind}");
        let promoted = cluster.kill_primary(replica)?;
        assert_eq!(promoted, master, "{kind}");
        assert_eq!(cluster.slots_of(master), vec![0..=5460]);
        assert!(!cluster.is_live(replica));
        cluster.restart_node(replica)?;
        assert_eq!(cluster.master_of(replica), Some(master), "{kind}");
    }
    Ok(())
}

/// Valkey's atomic migration moves a range with its keys and hands the
/// slots over; on Redis the helper says the command does not exist.
#[test]
fn atomic_slot_migration_moves_keys_and_ownership() -> Result<(), testkit::Error> {
    for kind in testkit::kinds() {
        let mut cluster = Cluster::start(kind, 2, 0)?;
        let [a, b] = cluster.masters()[..] else {
            panic!("{kind}: two masters expected");
        };
        if kind != testkit::ServerKind::Valkey {
            let err = cluster
                .migrate_slots_atomic(0..=9, a, b)
                .expect_err("Redis has no MIGRATESLOTS");
            assert!(err.to_string().contains("needs Valkey"), "{kind}: {err}");
            continue;
        }
        // "{06S}" hashes to slot 0.
        cluster.node(a).cmd(&[b"SET", b"{06S}k", b"v"])?;
        cluster.migrate_slots_atomic(0..=9, a, b)?;
        assert_eq!(cluster.owner_of_slot(0), Some(b), "{kind}");
        assert_eq!(cluster.owner_of_slot(10), Some(a), "{kind}");
        assert_eq!(
            cluster.node(b).cmd(&[b"GET", b"{06S}k"])?,
            Value::Bulk(b"v".to_vec()),
            "{kind}"
        );
        // A range the source does not own is refused before any command.
        assert!(cluster.migrate_slots_atomic(0..=9, a, b).is_err());
        // And back again: a second job for the same range is told apart.
        cluster.migrate_slots_atomic(0..=9, b, a)?;
        assert_eq!(cluster.owner_of_slot(0), Some(a), "{kind}");
    }
    Ok(())
}

#[test]
fn a_stalled_node_makes_its_peers_recreate_their_bus_links() -> Result<(), testkit::Error> {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0)?;
        let before = cluster.newest_bus_link_ms()?;
        assert!(before > 0, "{kind:?}: links have creation times");
        // Longer than the node timeout: the peers' pings go unanswered past
        // half of it, so they drop their links to it and dial again.
        let stall = format!(
            "{}",
            f64::from(testkit::CLUSTER_NODE_TIMEOUT_MS) / 1000.0 * 1.5
        );
        cluster.node(0).cmd_str(&["DEBUG", "SLEEP", &stall])?;
        testkit::wait_for("a re-created bus link", Duration::from_secs(10), || {
            Ok((cluster.newest_bus_link_ms()? > before).then_some(()))
        })?;
    }
    Ok(())
}
