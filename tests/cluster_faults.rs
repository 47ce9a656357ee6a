//! Following the cluster under continuous publishing, on real clusters
//! (Redis 7 and Valkey 9, 3 masters with a replica each): migrate a slot
//! range, add a master and move slots to it, remove it after moving them
//! away, `CLUSTER FAILOVER`, `kill -9` of a primary. After each, every
//! wanted channel delivers again within 2 s of the cluster reporting ok,
//! the channels of the moved partitions got a gap event, and no other
//! channel did. The topology poll stays at its 30 s default, so only the
//! triggers (sunsubscribe, MOVED, a lost connection) can explain recovery.

mod cluster_support;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_support::{
    channels, engine, named_clients, publish_round_and_wait, Publisher, Recorder,
};
use shardsub::cluster::ClusterPubSub;
use testkit::{Cluster, ServerKind};

/// Partition → owning node index, from the harness's view.
fn owners(cluster: &Cluster, ps: &ClusterPubSub) -> BTreeMap<u32, Option<usize>> {
    let parts = ps.partitions();
    (0..parts.count())
        .map(|p| (p, cluster.owner_of_slot(parts.slot(p))))
        .collect()
}

struct Case<'a> {
    kind: ServerKind,
    ps: &'a Arc<ClusterPubSub>,
    rec: &'a Recorder,
    chans: &'a [Vec<u8>],
    round: u64,
}

impl Case<'_> {
    /// Runs `change` (which returns once the cluster is ok again), then
    /// checks delivery within 2 s and the gap events.
    fn step(&mut self, what: &str, cluster: &mut Cluster, change: impl FnOnce(&mut Cluster)) {
        let before = owners(cluster, self.ps);
        self.rec.gaps.lock().clear();
        change(cluster);
        let ok_at = Instant::now();
        let after = owners(cluster, self.ps);
        let moved: HashSet<u32> = before
            .iter()
            .filter(|(p, o)| after.get(p) != Some(o))
            .map(|(p, _)| *p)
            .collect();
        assert!(!moved.is_empty(), "{what}: the change moved no partition");
        self.round += 1;
        let missing = publish_round_and_wait(
            self.ps,
            self.rec,
            self.chans,
            self.round,
            Duration::from_secs(2),
        );
        let took = ok_at.elapsed();
        assert!(
            missing.is_empty(),
            "{:?} {what}: {} channels not delivered within 2 s of cluster ok; {:?}",
            self.kind,
            missing.len(),
            self.ps.metrics()
        );
        let parts = self.ps.partitions();
        let expected: HashSet<Vec<u8>> = self
            .chans
            .iter()
            .filter(|c| moved.contains(&parts.partition_of(c)))
            .cloned()
            .collect();
        // Gap events travel before the messages that follow a resubscribe,
        // so every one is in by now.
        let gaps = self.rec.gaps.lock().clone();
        let extra: Vec<_> = gaps.difference(&expected).take(3).collect();
        let lacking = expected.difference(&gaps).count();
        assert!(
            extra.is_empty() && lacking == 0,
            "{:?} {what}: gap for channels that did not move: {extra:?} (+ {} more); \
             {lacking} moved channels got no gap ({} partitions moved)",
            self.kind,
            gaps.difference(&expected).count().saturating_sub(3),
            moved.len()
        );
        let m = self.ps.metrics();
        eprintln!(
            "{:?} {what}: {} partitions moved, delivery back {took:?} after cluster ok; \
             restore {:?}; rebuilds {:?}",
            self.kind,
            moved.len(),
            m.last_restore,
            m.rebuilds
        );
    }
}

fn follow(kind: ServerKind) {
    let mut cluster = Cluster::start(kind, 3, 1).expect("cluster");
    let rec = Arc::new(Recorder::default());
    let ps = Arc::new(engine(&cluster, &rec));
    let chans = channels(2_000, "f");
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, Duration::from_secs(20)).unwrap();
    let missing = publish_round_and_wait(&ps, &rec, &chans, 1, Duration::from_secs(10));
    assert!(missing.is_empty());
    let publisher = Publisher::start(ps.clone(), chans.clone());
    let mut case = Case {
        kind,
        ps: &ps,
        rec: &rec,
        chans: &chans,
        round: 1,
    };
    let parts = ps.partitions().clone();
    // Three partitions' slots of the first master, moved to the second.
    let masters = cluster.masters();
    let (m0, m1) = (masters[0], masters[1]);
    let first = *cluster.slots_of(m0)[0].start();
    let slots: Vec<u16> = parts
        .slots()
        .iter()
        .copied()
        .filter(|&s| s >= first)
        .take(3)
        .collect();
    let range = first..=slots[2];
    case.step("migrate a slot range", &mut cluster, |c| {
        c.migrate_slots(range.clone(), m0, m1).expect("migrate");
    });

    // A new master takes two partitions' slots from the second master.
    let mut added = 0;
    let mut moved_range = 0..=0;
    case.step("add a master and move slots to it", &mut cluster, |c| {
        added = c.add_master().expect("add master");
        let start = *c.slots_of(m1).last().unwrap().start();
        let end = *c.slots_of(m1).last().unwrap().end();
        let in_range: Vec<u16> = parts
            .slots()
            .iter()
            .copied()
            .filter(|&s| s >= start && s <= end)
            .take(2)
            .collect();
        moved_range = start..=in_range[1];
        c.migrate_slots(moved_range.clone(), m1, added)
            .expect("migrate to new");
    });
    let subs = named_clients(&cluster, added, "shardsub-sub");
    assert_eq!(subs, 1, "{kind:?}: subscribe connections on the new master");

    case.step(
        "remove a master after moving its slots away",
        &mut cluster,
        |c| {
            c.migrate_slots(moved_range.clone(), added, m1)
                .expect("migrate back");
            c.remove_master(added).expect("remove master");
        },
    );

    let replica = cluster.replicas_of(m0)[0];
    case.step("CLUSTER FAILOVER", &mut cluster, |c| {
        c.failover(replica).expect("failover");
    });

    case.step("kill -9 of a primary", &mut cluster, |c| {
        c.kill_primary(m1).expect("kill primary");
    });

    let sent = publisher.stop();
    let m = ps.metrics();
    eprintln!("{kind:?}: {sent} publishes during the faults; {m:?}");
    assert!(m.pubsub.dropped.total() == 0, "{m:?}");
    assert_eq!(m.rebuilds.poll, 0, "recovery must not need the 30 s poll");
    assert!(rec.gap_events.load(Ordering::Relaxed) > 0);
    ps.shutdown();
}

/// 6 masters with a replica each: failover and kill -9 under publishing.
fn follow_six(kind: ServerKind) {
    let mut cluster = Cluster::start(kind, 6, 1).expect("cluster");
    let rec = Arc::new(Recorder::default());
    let ps = Arc::new(engine(&cluster, &rec));
    let chans = channels(2_000, "s");
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, Duration::from_secs(20)).unwrap();
    assert!(publish_round_and_wait(&ps, &rec, &chans, 1, Duration::from_secs(10)).is_empty());
    let publisher = Publisher::start(ps.clone(), chans.clone());
    let mut case = Case {
        kind,
        ps: &ps,
        rec: &rec,
        chans: &chans,
        round: 1,
    };
    let masters = cluster.masters();
    let replica = cluster.replicas_of(masters[2])[0];
    case.step("6 masters: CLUSTER FAILOVER", &mut cluster, |c| {
        c.failover(replica).expect("failover");
    });
    case.step("6 masters: kill -9 of a primary", &mut cluster, |c| {
        c.kill_primary(masters[4]).expect("kill primary");
    });
    publisher.stop();
    assert_eq!(ps.metrics().rebuilds.poll, 0);
    ps.shutdown();
}

#[test]
fn six_masters_follow_failover_and_kill() {
    for kind in testkit::kinds() {
        follow_six(kind);
    }
}

#[test]
fn follows_migration_new_and_removed_masters_failover_and_kill() {
    for kind in testkit::kinds() {
        follow(kind);
    }
}
