//! Subscribing on replicas (`PubSubBuilder::subscribe_on_replicas`), on
//! real clusters (Redis 7 and Valkey 9, 3 masters with a replica each),
//! under continuous publishing: the subscribe connections sit on the
//! replicas and none on the primaries; then a serving replica is killed,
//! another is re-pointed to a different master (`CLUSTER REPLICATE`: Redis
//! tells its subscribers nothing), and a third is promoted
//! (`CLUSTER FAILOVER`: Valkey drops its subscribers, and on Redis, which
//! keeps them, the slot changing primary under the serving node restarts
//! its connection; the shard stays on it as primary).
//! After each, exactly the channels of the shard whose serving node
//! changed get a gap event, every channel delivers a fresh message again, the subscribe connections sit where the rule says,
//! and at the end the accounting checker finds every message delivered
//! once in order or lost inside a signalled window (none silently).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use shardsub::PubSub;
use testkit::accounting::Ledger;
use testkit::{Cluster, ServerKind};

use crate::support;
use crate::support::accounted;
use crate::support::accounted::{Accounted, Background};
use crate::support::channels;
use crate::support::cluster::{builder, named_clients};

/// The slot map poll: the only thing that tells Redis clients a replica
/// changed shard.
const POLL: Duration = Duration::from_secs(1);
/// Delivery must be back on every channel within this of the cluster
/// settling (a poll, a refresh and a resubscribe; the margin is for a
/// loaded machine).
const RECOVERY: Duration = Duration::from_secs(5);
const BOUND: Duration = Duration::from_secs(20);
const SUB: &str = "shardsub-sub";

struct Case<'a> {
    kind: ServerKind,
    ps: &'a Arc<PubSub>,
    handler: &'a Accounted,
    ledger: &'a Ledger,
}

impl Case<'_> {
    /// The channels whose slot master `m` owns.
    fn channels_of(&self, cluster: &Cluster, m: usize) -> HashSet<usize> {
        let parts = self.ps.partitions().expect("a cluster");
        (0..self.ledger.names().len())
            .filter(|&c| {
                let slot = parts.slot(parts.partition_of(self.ledger.name(c)));
                cluster.owner_of_slot(slot) == Some(m)
            })
            .collect()
    }

    /// Runs `change` (which returns once the cluster is ok again, with
    /// the master whose shard is affected) under publishing; waits for two
    /// polls and until the subscribe connections sit on `fixed` and one of
    /// `one_of`; then
    /// every channel must deliver a message published after that within
    /// [`RECOVERY`], and exactly the channels of the affected shard must
    /// have got a gap event.
    fn step(
        &self,
        what: &str,
        cluster: &mut Cluster,
        change: impl FnOnce(&mut Cluster) -> usize,
        placed: impl FnOnce(&Cluster) -> (Vec<usize>, Vec<usize>),
    ) {
        let started = self.ledger.elapsed();
        let shard = change(cluster);
        // Two polls after the cluster settled, the core has read a map
        // that shows the change (a Redis replica re-pointed or promoted
        // keeps delivering or goes silent without a word: only the map
        // tells).
        let polls = self.ps.cluster_metrics().unwrap().rebuilds.poll;
        testkit::wait_for("two more polls", BOUND, || {
            let now = self.ps.cluster_metrics().unwrap().rebuilds.poll;
            Ok((now >= polls + 2).then_some(()))
        })
        .expect("polls");
        let (fixed, one_of) = placed(cluster);
        expect_subscribers(self.kind, what, cluster, &fixed, &one_of, self.ps);
        let ok_at = self.ledger.elapsed();
        let took = self.ledger.wait_fresh(ok_at, RECOVERY).unwrap_or_else(|e| {
            panic!(
                "{:?} {what}: not delivering everywhere within {RECOVERY:?}: {e}; {:?}",
                self.kind,
                self.ps.cluster_metrics().unwrap()
            )
        });
        let expected = self.channels_of(cluster, shard);
        assert!(!expected.is_empty(), "{what}: the shard carries no channel");
        let gaps: HashSet<usize> = self.handler.tap.gapped_since(started).into_iter().collect();
        let extra = gaps.difference(&expected).count();
        let lacking = expected.difference(&gaps).count();
        assert!(
            extra == 0 && lacking == 0,
            "{:?} {what}: {extra} channels of other shards got a gap, {lacking} of the \
             shard's {} got none; {:?}",
            self.kind,
            expected.len(),
            self.ps.cluster_metrics().unwrap()
        );
        let m = self.ps.cluster_metrics().unwrap();
        eprintln!(
            "{:?} {what}: {} channels gapped, delivery back {took:?} after the connections \
             moved; rebuilds {:?}",
            self.kind,
            gaps.len(),
            m.rebuilds
        );
    }
}

/// Waits until one subscribe connection sits on each node of `fixed`, one
/// on exactly one node of `one_of`, and none on any other live node.
fn expect_subscribers(
    kind: ServerKind,
    what: &str,
    cluster: &Cluster,
    fixed: &[usize],
    one_of: &[usize],
    ps: &PubSub,
) {
    let mut seen = BTreeMap::new();
    let found = testkit::wait_for("subscribe connections in place", BOUND, || {
        seen = cluster
            .live()
            .into_iter()
            .map(|i| (i, named_clients(cluster, i, SUB)))
            .collect::<BTreeMap<usize, usize>>();
        let others = seen
            .iter()
            .filter(|(i, _)| !fixed.contains(i) && !one_of.contains(i))
            .all(|(_, &n)| n == 0);
        let fixed_ok = fixed.iter().all(|i| seen.get(i) == Some(&1));
        let one: usize = one_of.iter().filter_map(|i| seen.get(i)).sum();
        let one_ok = one_of.is_empty() || one == 1;
        Ok((others && fixed_ok && one_ok).then_some(()))
    });
    assert!(
        found.is_ok(),
        "{kind:?} {what}: subscribe connections per node {seen:?}, expected one on each of \
         {fixed:?} and one of {one_of:?} (masters {:?}, replicas {:?}); {:?}",
        cluster.masters(),
        cluster
            .masters()
            .iter()
            .map(|&m| (m, cluster.replicas_of(m)))
            .collect::<Vec<_>>(),
        ps.cluster_metrics()
    );
}

/// Writes a key on every master and waits until every node's
/// `CLUSTER SLOTS` lists a replica for `want` slot ranges: Redis 7.0
/// leaves out a replica that has not received a byte of replication yet
/// (a fresh cluster's, a just demoted primary's).
fn replicas_listed(cluster: &Cluster, want: usize) {
    for m in cluster.masters() {
        let slot = *cluster.slots_of(m)[0].start();
        let key = topology::probe_key_for_slot(slot);
        cluster.node(m).cmd(&[b"SET", &key, b"1"]).expect("SET");
    }
    testkit::wait_for("replicas in CLUSTER SLOTS", BOUND, || {
        for i in cluster.live() {
            let v = cluster.node(i).cmd(&[b"CLUSTER", b"SLOTS"])?;
            let ranges = testkit::values::items(&v).unwrap_or_default();
            let with_replica = ranges
                .iter()
                .filter(|r| testkit::values::items(r).is_some_and(|r| r.len() >= 4))
                .count();
            if with_replica < want {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .expect("replicas listed");
}

fn replicas(kind: ServerKind) {
    support::cluster::log_from_env();
    let mut cluster = Cluster::start(kind, 3, 1).expect("cluster");
    replicas_listed(&cluster, 3);
    let chans = channels("r", 600);
    let ledger = Arc::new(Ledger::new(&chans));
    let handler = Accounted::new(&ledger, "sub");
    let ps = builder(&cluster, handler.clone())
        .subscribe_on_replicas(true)
        .poll_interval(POLL)
        .build()
        .expect("cluster pubsub");
    let ps = Arc::new(ps);
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, BOUND).unwrap();
    let publisher = Background::start(
        ledger.clone(),
        accounted::via_cluster(ps.clone()),
        Duration::from_millis(25),
        Duration::from_secs(300),
    );
    ledger
        .wait_fresh(Duration::ZERO, BOUND)
        .expect("delivery before the faults");
    let case = Case {
        kind,
        ps: &ps,
        handler: &handler,
        ledger: &ledger,
    };
    let [ma, mb, mc] = cluster.masters()[..] else {
        panic!("three masters")
    };
    let (ra, rb, rc) = (
        cluster.replicas_of(ma)[0],
        cluster.replicas_of(mb)[0],
        cluster.replicas_of(mc)[0],
    );
    // (1) On the replicas only, delivering.
    expect_subscribers(kind, "start", &cluster, &[ra, rb, rc], &[], &ps);

    // (2) A serving replica dies: its shard falls back to its primary (it
    // has no other replica).
    case.step(
        "kill a serving replica",
        &mut cluster,
        |c| {
            c.kill_replica(ra).expect("kill replica");
            ma
        },
        |_| (vec![ma, rb, rc], vec![]),
    );

    // (3) A serving replica follows another master: its old shard falls
    // back to its primary; the new shard keeps its own replica.
    case.step(
        "CLUSTER REPLICATE a serving replica",
        &mut cluster,
        |c| {
            c.replicate(rb, mc).expect("replicate");
            mb
        },
        |_| (vec![ma, mb, rc], vec![]),
    );

    // (4) A serving replica is promoted. Valkey drops its subscribers
    // (`sunsubscribe`); Redis keeps them, but two slot maps cannot tell a
    // promotion from a replica that moved and whose slots followed it
    // (silent on Redis), so its connection restarts. Either way: a gap for
    // each channel of the shard, which stays on rc, now its primary (the
    // old primary, resyncing behind it, would deliver messages twice).
    case.step(
        "CLUSTER FAILOVER of a serving replica",
        &mut cluster,
        |c| {
            c.failover(rc).expect("failover");
            rc
        },
        |_| (vec![ma, mb, rc], vec![]),
    );
    assert_eq!(
        cluster.replicas_of(rc).len(),
        2,
        "{kind:?}: {:?}",
        cluster.masters()
    );

    let rounds = publisher.stop();
    accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
    let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
    eprintln!("{kind:?}: {rounds} rounds;\n{report}");
    assert_eq!(report.counts.lost_silent, 0);
    ps.shutdown();
}

#[test]
fn subscribe_on_replicas_follows_kill_replicate_and_failover() {
    for kind in testkit::kinds() {
        replicas(kind);
    }
}

#[test]
fn subscribe_on_replicas_is_refused_where_it_cannot_apply() {
    let handler = shardsub::handler_fn(|_, _| {});
    let err = PubSub::builder()
        .address("127.0.0.1:1")
        .handler(handler)
        .subscribe_on_replicas(true)
        .build()
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("subscribe_on_replicas")),
        "{err:?}"
    );
    let handler = shardsub::handler_fn(|_, _| {});
    let err = PubSub::builder()
        .seed("127.0.0.1:1")
        .handler(handler)
        .mode(shardsub::cluster::Mode::Classic)
        .subscribe_on_replicas(true)
        .build()
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref().is_some_and(|e| e.contains("sharded")),
        "{err:?}"
    );
    let handler = shardsub::handler_fn(|_, _| {});
    let err = PubSub::builder()
        .seed("127.0.0.1:1")
        .handler(handler)
        .replica_seed(3)
        .build()
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref().is_some_and(|e| e.contains("replica_seed")),
        "{err:?}"
    );
}
