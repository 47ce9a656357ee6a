//! The whole path against real clusters (Redis 7 and Valkey 9, through
//! testkit): version → command choice → reply → SlotMap → Layout, then
//! real resharding, failover and a new master, each checked with
//! plan_rewire against what the cluster did.

use std::collections::BTreeSet;

use resp::Value;
use shardcore::Partitions;
use testkit::{Cluster, Server};
use topology::{
    choose_command, parse_info_version, parse_topology_bytes, plan_rewire, Layout, NodeAddr,
    NodeKey, ParseOptions, SlotMap, TopologyCommand,
};

fn fetch(node: &Server, cmd: TopologyCommand, resp3: bool) -> SlotMap {
    let mut c = node.connect().unwrap();
    if resp3 {
        c.cmd(&[b"HELLO", b"3"]).unwrap();
    }
    let v = c.cmd(&cmd.args()).unwrap();
    let mut buf = Vec::new();
    resp::encode_value(&mut buf, &v);
    let host = node.addr().ip().to_string();
    let opts = ParseOptions {
        asked_host: Some(&host),
        prefer_hostname: false,
        prefer_tls_port: false,
    };
    parse_topology_bytes(cmd, &buf, &opts).unwrap_or_else(|e| panic!("{e}"))
}

/// The map from the command the version picks, checked against the other
/// command and against the cluster's own view of every slot owner.
fn refresh(cluster: &Cluster, seed: usize) -> SlotMap {
    let node = cluster.node(seed);
    let info = match node.cmd(&[b"INFO", b"server"]).unwrap() {
        Value::Bulk(b) | Value::Verbatim { text: b, .. } => b,
        other => panic!("INFO reply {other:?}"),
    };
    let version = parse_info_version(&info).expect("version in INFO");
    let chosen = choose_command(version);
    let map = fetch(node, chosen, true);
    let other = match chosen {
        TopologyCommand::ClusterSlots => TopologyCommand::ClusterShards,
        TopologyCommand::ClusterShards => TopologyCommand::ClusterSlots,
    };
    let check = fetch(node, other, false);
    assert_eq!(map.unowned_count(), 0);
    for slot in 0..16384u16 {
        let a = map.owner(slot).map(|s| &s.primary.id);
        assert_eq!(a, check.owner(slot).map(|s| &s.primary.id), "slot {slot}");
        let want = cluster.owner_of_slot(slot).and_then(|i| cluster.node_id(i));
        assert_eq!(a.map(String::as_str), want, "slot {slot}");
    }
    map
}

fn key(cluster: &Cluster, i: usize) -> NodeKey {
    let addr = cluster.node(i).addr();
    NodeKey {
        id: cluster.node_id(i).unwrap().to_string(),
        addr: NodeAddr {
            host: addr.ip().to_string(),
            port: addr.port(),
        },
    }
}

#[test]
fn follows_resharding_failover_and_a_new_master() {
    let parts = Partitions::new(128).unwrap();
    for kind in testkit::kinds() {
        let mut cluster = Cluster::start(kind, 3, 1).unwrap();
        let masters = cluster.masters();
        let (m0, m1, m2) = (masters[0], masters[1], masters[2]);
        let seed = m0;
        let mut layout = Layout::compute(&refresh(&cluster, seed), &parts);
        assert_eq!(layout.nodes().len(), 3, "{kind:?}");

        // Reshard: the first 600 slots of m0 go to m1.
        let start = *cluster.slots_of(m0)[0].start();
        let range = start..=start + 599;
        cluster.migrate_slots(range.clone(), m0, m1).unwrap();
        let next = Layout::compute(&refresh(&cluster, seed), &parts);
        let plan = plan_rewire(&layout, &next);
        let want: Vec<u32> = (0..128)
            .filter(|&p| range.contains(&parts.slot(p)))
            .collect();
        assert!(!want.is_empty());
        assert_eq!(
            plan.resubscribe
                .iter()
                .map(|m| m.partition)
                .collect::<Vec<_>>(),
            want,
            "{kind:?}"
        );
        assert!(plan.resubscribe.iter().all(|m| m.to == key(&cluster, m1)));
        assert!(plan.open.is_empty() && plan.close.is_empty() && plan.unowned.is_empty());
        layout = next;

        // Failover: m2's replica takes over.
        let replica = cluster.replicas_of(m2)[0];
        let before_m2: BTreeSet<u32> = layout
            .node(&key(&cluster, m2))
            .unwrap()
            .partitions
            .iter()
            .copied()
            .collect();
        let old_key = key(&cluster, m2);
        cluster.failover(replica).unwrap();
        let next = Layout::compute(&refresh(&cluster, seed), &parts);
        let plan = plan_rewire(&layout, &next);
        assert_eq!(plan.open, vec![key(&cluster, replica)], "{kind:?}");
        assert_eq!(plan.close, vec![old_key]);
        let moved: BTreeSet<u32> = plan.resubscribe.iter().map(|m| m.partition).collect();
        assert_eq!(moved, before_m2);
        layout = next;

        // A new master joins and takes a range from m1.
        let m3 = cluster.add_master().unwrap();
        let joined = Layout::compute(&refresh(&cluster, seed), &parts);
        assert!(
            plan_rewire(&layout, &joined).is_empty(),
            "an empty master changes nothing"
        );
        // (m1's own range, not the 600 slots it received above.)
        let own = cluster
            .slots_of(m1)
            .into_iter()
            .max_by_key(|r| r.end() - r.start())
            .unwrap();
        let start = *own.start();
        cluster.migrate_slots(start..=start + 999, m1, m3).unwrap();
        let next = Layout::compute(&refresh(&cluster, seed), &parts);
        let plan = plan_rewire(&layout, &next);
        assert_eq!(plan.open, vec![key(&cluster, m3)], "{kind:?}");
        assert!(plan.close.is_empty());
        let want: Vec<u32> = (0..128)
            .filter(|&p| (start..=start + 999).contains(&parts.slot(p)))
            .collect();
        assert_eq!(
            plan.resubscribe
                .iter()
                .map(|m| m.partition)
                .collect::<Vec<_>>(),
            want
        );
    }
}
