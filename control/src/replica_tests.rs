//! Subscribing on replicas: which node serves each shard, and the rig the
//! tests of following a serving replica (`replica_move_tests`) share.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use shardcore::Partitions;
use topology::{Health, Node, NodeKey, Role, Shard, SlotMap};

use crate::test_maps::addr;
use crate::{Command, Config, ConfigError, ConnId, ConnLayout, Core, SubscribeReply, Time};

pub(crate) fn node(id: &str, role: Role, health: Health) -> Node {
    Node {
        id: id.into(),
        addr: Some(addr(id)),
        hostname: None,
        tls_port: None,
        role,
        health,
        replication_offset: None,
    }
}

pub(crate) fn key(id: &str) -> NodeKey {
    NodeKey {
        id: id.into(),
        addr: addr(id),
    }
}

/// Two shards, `(primary, [(replica, health)])`: the first owns slots
/// 0..=8191, the second the rest. Node ids double as host names.
pub(crate) fn map2(a: (&str, &[(&str, Health)]), b: (&str, &[(&str, Health)])) -> SlotMap {
    let mut m = SlotMap::new();
    for ((p, reps), range) in [(a, 0..=8191u16), (b, 8192..=16383)] {
        let shard = Shard {
            primary: node(p, Role::Primary, Health::Online),
            replicas: reps
                .iter()
                .map(|&(r, h)| node(r, Role::Replica, h))
                .collect(),
        };
        let i = m.push_shard(shard);
        m.assign(range, i);
    }
    m
}

pub(crate) const ON: Health = Health::Online;

/// A core in replica mode whose connections come up and whose subscribes
/// are confirmed as soon as they are sent.
pub(crate) struct Rig {
    pub(crate) core: Core,
    pub(crate) t: u64,
    /// Open connections and their nodes.
    pub(crate) conns: BTreeMap<ConnId, NodeKey>,
    pub(crate) fetch: Option<u64>,
}

impl Rig {
    pub(crate) fn new(seed: u64) -> Rig {
        let mut cfg = Config::new(Partitions::new(16).unwrap(), vec![addr("seed")]);
        cfg.replicas = Some(seed);
        let core = Core::new(cfg, Time::ZERO).unwrap();
        let mut rig = Rig {
            core,
            t: 0,
            conns: BTreeMap::new(),
            fetch: None,
        };
        rig.settle();
        rig
    }

    pub(crate) fn now(&mut self) -> Time {
        self.t += 1_000_000_000; // past every gap and backoff
        Time(self.t)
    }

    /// Carries out every command (and what it leads to); returns them.
    pub(crate) fn settle(&mut self) -> Vec<Command> {
        let mut seen = Vec::new();
        while let Some(c) = self.core.poll_command() {
            match &c {
                Command::Open { conn, node } => {
                    self.conns.insert(*conn, node.clone());
                    let t = Time(self.t);
                    self.core.handle_conn_up(t, *conn);
                }
                Command::Close { conn } => {
                    self.conns.remove(conn);
                }
                Command::Subscribe { conn, .. } => {
                    let t = Time(self.t);
                    self.core
                        .handle_subscribe_reply(t, *conn, SubscribeReply::Ok);
                }
                Command::AskVersion { id, .. } => {
                    let t = Time(self.t);
                    self.core
                        .handle_version(t, *id, Ok(crate::test_maps::REDIS_7_INFO));
                }
                Command::FetchTopology { id, .. } => self.fetch = Some(*id),
                _ => {}
            }
            seen.push(c);
        }
        seen
    }

    /// A refresh answered with `map`; the commands it led to.
    pub(crate) fn apply(&mut self, map: SlotMap) -> Vec<Command> {
        let now = self.now();
        if self.fetch.is_none() {
            self.core.handle_refresh(now);
            self.settle();
        }
        let id = self.fetch.take().expect("a fetch in flight");
        self.core.handle_topology(now, id, Ok(map));
        self.settle()
    }

    pub(crate) fn want(&mut self, n: usize) -> Vec<Vec<u8>> {
        let names: Vec<Vec<u8>> = (0..n)
            .map(|i| alloc::format!("c{i}").into_bytes())
            .collect();
        let now = self.now();
        self.core.handle_want(now, names.iter().map(Vec::as_slice));
        self.settle();
        assert!(self.core.is_settled());
        names
    }

    /// The node each open connection goes to.
    pub(crate) fn nodes(&self) -> BTreeSet<String> {
        self.conns.values().map(|k| k.id.clone()).collect()
    }

    /// The node `channel` is confirmed on.
    pub(crate) fn served_by(&self, channel: &[u8]) -> String {
        let conn = self.core.subscribed_on(channel).expect("active");
        self.conns.get(&conn).expect("open").id.clone()
    }
}

/// Channels named by gap events, and by subscribes, in `cmds`.
pub(crate) fn gapped(cmds: &[Command]) -> BTreeSet<Vec<u8>> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Gap { channels, .. } => Some(channels.iter().map(|c| c.to_vec())),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Which shard (0: first half of the slots) `channel` lives in.
pub(crate) fn shard_of(channel: &[u8]) -> usize {
    let parts = Partitions::new(16).unwrap();
    usize::from(parts.slot(parts.partition_of(channel)) >= 8192)
}

#[test]
fn each_shard_is_served_by_a_replica_not_its_primary() {
    let mut rig = Rig::new(7);
    rig.apply(map2(("pa", &[("ra", ON)]), ("pb", &[("rb", ON)])));
    assert_eq!(rig.nodes(), ["ra", "rb"].map(String::from).into());
    let names = rig.want(64);
    for n in &names {
        let want = if shard_of(n) == 0 { "ra" } else { "rb" };
        assert_eq!(rig.served_by(n), want);
    }
}

#[test]
fn seeds_spread_instances_over_a_shards_replicas() {
    let m = || map2(("pa", &[("r1", ON), ("r2", ON), ("r3", ON)]), ("pb", &[]));
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for seed in 0..300 {
        let mut rig = Rig::new(seed);
        rig.apply(m());
        let chosen: Vec<String> = rig.nodes().into_iter().filter(|n| n != "pb").collect();
        assert_eq!(chosen.len(), 1, "one replica of shard a: {chosen:?}");
        *counts.entry(chosen[0].clone()).or_default() += 1;
        // The same seed chooses the same replica every time.
        let mut again = Rig::new(seed);
        again.apply(m());
        assert_eq!(again.nodes(), rig.nodes());
    }
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert!(
        counts.values().all(|&n| (60..=140).contains(&n)),
        "{counts:?}"
    );
}

#[test]
fn a_shard_without_a_usable_replica_is_served_by_its_primary() {
    let mut rig = Rig::new(1);
    let failed = [("ra", Health::Failed)];
    rig.apply(map2(("pa", &failed), ("pb", &[])));
    assert_eq!(rig.nodes(), ["pa", "pb"].map(String::from).into());
    let names = rig.want(32);
    let a: BTreeSet<Vec<u8>> = names.iter().filter(|n| shard_of(n) == 0).cloned().collect();
    // The replica recovers: the primary keeps the shard while its
    // subscriptions are live (the replica may lag behind it: moving now
    // could deliver a message twice).
    let healthy = || map2(("pa", &[("ra", ON)]), ("pb", &[]));
    let cmds = rig.apply(healthy());
    assert!(gapped(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(rig.served_by(a.first().unwrap()), "pa");
    // Nor once they break (the primary's connection drops): the replica
    // may lag it. A shard with no wanted channel goes to the replica.
    let conn = rig.core.subscribed_on(a.first().unwrap()).unwrap();
    let now = rig.now();
    rig.core.handle_conn_down(now, conn);
    rig.conns.remove(&conn);
    rig.settle();
    rig.apply(healthy());
    for _ in 0..10 {
        if rig.core.is_settled() {
            break;
        }
        let t = rig.core.poll_timeout().unwrap();
        rig.t = rig.t.max(t.0);
        rig.core.handle_timeout(t);
        rig.settle();
    }
    for n in &a {
        assert_eq!(rig.served_by(n), "pa");
    }
    let mut empty = Rig::new(1);
    empty.apply(map2(("pa", &failed), ("pb", &[])));
    empty.apply(healthy());
    assert_eq!(empty.nodes(), ["pb", "ra"].map(String::from).into());
}

#[test]
fn a_loading_replica_serves() {
    // Redis 7.0 reports a replica that never got a write as `loading`; a
    // loading replica accepts SSUBSCRIBE and delivers once loaded.
    let mut rig = Rig::new(1);
    rig.apply(map2(("pa", &[("ra", Health::Loading)]), ("pb", &[])));
    assert_eq!(rig.nodes(), ["pb", "ra"].map(String::from).into());
}

#[test]
fn a_replica_joining_does_not_move_a_served_shard() {
    for seed in 0..20 {
        let mut rig = Rig::new(seed);
        rig.apply(map2(("pa", &[("r1", ON)]), ("pb", &[])));
        rig.want(16);
        let cmds = rig.apply(map2(("pa", &[("r1", ON), ("r2", ON)]), ("pb", &[])));
        assert!(gapped(&cmds).is_empty(), "seed {seed}: {cmds:?}");
        assert!(rig.nodes().contains("r1"));
    }
}

#[test]
fn replicas_need_sharded_mode() {
    for mode in [ConnLayout::Classic, ConnLayout::Fixed] {
        let mut cfg = Config::new(Partitions::new(4).unwrap(), vec![addr("n0")]);
        cfg.mode = mode;
        cfg.replicas = Some(0);
        assert_eq!(
            Core::new(cfg, Time::ZERO).err(),
            Some(ConfigError::ReplicasMode)
        );
    }
    let mut cfg = Config::new(Partitions::new(4).unwrap(), vec![addr("n0")]);
    cfg.mode = ConnLayout::PerPartition;
    cfg.replicas = Some(0);
    assert!(Core::new(cfg, Time::ZERO).is_ok());
}

#[test]
fn replicas_off_keeps_primaries() {
    let mut cfg = Config::new(Partitions::new(16).unwrap(), vec![addr("seed")]);
    cfg.replicas = None;
    let mut core = Core::new(cfg, Time::ZERO).unwrap();
    let Some(Command::FetchTopology { id, .. }) =
        crate::test_maps::next_after_version(&mut core, Time::ZERO)
    else {
        panic!("no fetch first")
    };
    core.handle_topology(Time(1), id, Ok(map2(("pa", &[("ra", ON)]), ("pb", &[]))));
    let opened: BTreeSet<NodeKey> = core::iter::from_fn(|| core.poll_command())
        .filter_map(|c| match c {
            Command::Open { node, .. } => Some(node),
            _ => None,
        })
        .collect();
    assert_eq!(opened, [key("pa"), key("pb")].into());
}

#[test]
fn per_partition_connections_go_to_the_serving_replica() {
    let mut cfg = Config::new(Partitions::new(16).unwrap(), vec![addr("seed")]);
    cfg.mode = ConnLayout::PerPartition;
    cfg.replicas = Some(2);
    let mut core = Core::new(cfg, Time::ZERO).unwrap();
    let Some(Command::FetchTopology { id, .. }) =
        crate::test_maps::next_after_version(&mut core, Time::ZERO)
    else {
        panic!("no fetch first")
    };
    let m = map2(("pa", &[("ra", ON)]), ("pb", &[("rb", ON)]));
    core.handle_topology(Time(1), id, Ok(m));
    core.handle_want(
        Time(2),
        (0..64)
            .map(|i| alloc::format!("c{i}").into_bytes())
            .collect::<Vec<_>>()
            .iter()
            .map(Vec::as_slice),
    );
    let opened: BTreeSet<NodeKey> = core::iter::from_fn(|| core.poll_command())
        .filter_map(|c| match c {
            Command::Open { node, .. } => Some(node),
            _ => None,
        })
        .collect();
    assert_eq!(opened, [key("ra"), key("rb")].into());
}
