//! Deterministic simulations of cluster changes, checked against golden
//! files in tests/golden/ (`UPDATE_GOLDEN=1 cargo test -p shardsub-topology
//! --test golden` rewrites them; review the diff before committing).
//!
//! Each state of the model cluster is encoded as a real reply with
//! `resp::encode_value` and parsed back, alternating commands and protocol
//! versions, so the parsers are part of every scenario.

mod common;

use common::{golden, Model};
use shardcore::Partitions;
use topology::{plan_rewire, probe_key_for_slot, Layout, NodeKey, RewirePlan, TopologyCommand};

const P: u32 = 64;

fn parts() -> Partitions {
    Partitions::new(P).unwrap()
}

struct Step {
    label: &'static str,
    cmd: TopologyCommand,
    resp3: bool,
}

const SLOTS2: Step = Step {
    label: "CLUSTER SLOTS, RESP2",
    cmd: TopologyCommand::ClusterSlots,
    resp3: false,
};
const SLOTS3: Step = Step {
    label: "CLUSTER SLOTS, RESP3",
    cmd: TopologyCommand::ClusterSlots,
    resp3: true,
};
const SHARDS2: Step = Step {
    label: "CLUSTER SHARDS, RESP2",
    cmd: TopologyCommand::ClusterShards,
    resp3: false,
};
const SHARDS3: Step = Step {
    label: "CLUSTER SHARDS, RESP3",
    cmd: TopologyCommand::ClusterShards,
    resp3: true,
};

struct Run {
    before: Layout,
    after: Layout,
    plan: RewirePlan,
    text: String,
}

/// Parses both states (each through its own command shape), computes the
/// layouts and the plan, checks the plan against both command shapes, and
/// renders everything.
fn simulate(title: &str, before: &Model, b: Step, after: &Model, a: Step) -> Run {
    let parts = parts();
    let map_b = before.parse(b.cmd, b.resp3);
    let map_a = after.parse(a.cmd, a.resp3);
    // The other command must describe the same primaries and slots.
    for (m, map) in [(before, &map_b), (after, &map_a)] {
        let other = match b.cmd {
            TopologyCommand::ClusterSlots => m.parse(TopologyCommand::ClusterShards, true),
            TopologyCommand::ClusterShards => m.parse(TopologyCommand::ClusterSlots, false),
        };
        assert_eq!(
            assignment(&Layout::compute(&other, &parts)),
            assignment(&Layout::compute(map, &parts)),
            "{title}: SLOTS and SHARDS disagree"
        );
    }
    let before_l = Layout::compute(&map_b, &parts);
    let after_l = Layout::compute(&map_a, &parts);
    let plan = plan_rewire(&before_l, &after_l);
    let text = format!(
        "# {title}\n\n== before ({})\n{map_b}\n{before_l}\n== after ({})\n{map_a}\n{after_l}\n== plan\n{plan}",
        b.label, a.label
    );
    Run {
        before: before_l,
        after: after_l,
        plan,
        text,
    }
}

/// Partition → node, without health (which only `CLUSTER SHARDS` reports).
fn assignment(l: &Layout) -> Vec<Option<NodeKey>> {
    (0..l.partition_count())
        .map(|p| l.node_of(p).cloned())
        .collect()
}

fn key(m: &Model, i: usize) -> NodeKey {
    let n = &m.masters[i].node;
    NodeKey {
        id: n.id.clone(),
        addr: topology::NodeAddr {
            host: n.ip.clone(),
            port: n.port,
        },
    }
}

fn partitions_in(slots: impl Fn(u16) -> bool) -> Vec<u32> {
    let parts = parts();
    (0..P).filter(|&p| slots(parts.slot(p))).collect()
}

fn moved(plan: &RewirePlan) -> Vec<u32> {
    plan.resubscribe.iter().map(|m| m.partition).collect()
}

#[test]
fn reshard_a_range() {
    let before = Model::new(3);
    let mut after = before.clone();
    after.assign(0..=1999, Some(1));
    let r = simulate(
        "slots 0-1999 move from m0 to m1",
        &before,
        SLOTS2,
        &after,
        SHARDS3,
    );
    assert!(r.plan.open.is_empty() && r.plan.close.is_empty() && r.plan.unowned.is_empty());
    assert_eq!(moved(&r.plan), partitions_in(|s| s <= 1999));
    assert!(!r.plan.resubscribe.is_empty());
    assert!(r
        .plan
        .resubscribe
        .iter()
        .all(|m| m.from == Some(key(&before, 0)) && m.to == key(&before, 1)));
    golden("reshard_range", &r.text);
}

#[test]
fn move_one_slot() {
    let before = Model::new(3);
    let slot = parts().slot(5);
    let mut after = before.clone();
    assert_eq!(after.owner[slot as usize], Some(0));
    after.assign(slot..=slot, Some(2));
    let r = simulate(
        &format!("slot {slot} (partition 5) moves from m0 to m2"),
        &before,
        SHARDS2,
        &after,
        SLOTS3,
    );
    assert_eq!(moved(&r.plan), partitions_in(|s| s == slot));
    assert_eq!(moved(&r.plan), vec![5]);
    assert!(r.plan.open.is_empty() && r.plan.close.is_empty());
    golden("move_one_slot", &r.text);
}

#[test]
fn failover_replica_promoted() {
    let before = Model::new(3);
    let mut after = before.clone();
    after.failover(1);
    let r = simulate(
        "m1 fails over to its replica r1: same slots, new primary",
        &before,
        SLOTS3,
        &after,
        SHARDS3,
    );
    assert_eq!(r.plan.open, vec![key(&after, 1)]);
    assert_eq!(r.plan.close, vec![key(&before, 1)]);
    let old = r.before.node(&key(&before, 1)).unwrap();
    assert_eq!(moved(&r.plan), old.partitions);
    assert_eq!(
        r.after.node(&key(&after, 1)).unwrap().partitions,
        old.partitions
    );
    golden("failover", &r.text);
}

#[test]
fn node_added_and_rebalanced() {
    let before = Model::new(3);
    let mut after = before.clone();
    let m3 = after.add_master("m3", 7003);
    // `redis-cli --cluster rebalance` fills the new master from the end of
    // every range: 4096 slots in all, 1365 or 1366 from each.
    let ranges = shardcore::cluster_create_ranges(3);
    for (r, give) in ranges.iter().zip([1366u16, 1365, 1365]) {
        after.assign(r.end() - give + 1..=*r.end(), Some(m3));
    }
    assert_eq!(after.owner.iter().filter(|o| **o == Some(m3)).count(), 4096);
    let r = simulate(
        "m3 joins and takes 4096 slots from m0, m1, m2",
        &before,
        SLOTS2,
        &after,
        SHARDS3,
    );
    assert_eq!(r.plan.open, vec![key(&after, m3)]);
    assert!(r.plan.close.is_empty());
    assert!(r.plan.resubscribe.iter().all(|m| m.to == key(&after, m3)));
    assert_eq!(
        moved(&r.plan),
        r.after.node(&key(&after, m3)).unwrap().partitions
    );
    golden("node_added", &r.text);
}

#[test]
fn node_removed() {
    let before = Model::new(4);
    let mut after = before.clone();
    let r3 = shardcore::cluster_create_ranges(4)[3].clone();
    // Its slots go to the other three in thirds, then it leaves the cluster.
    let third = (r3.end() - r3.start() + 1) / 3;
    after.assign(*r3.start()..=r3.start() + third - 1, Some(0));
    after.assign(r3.start() + third..=r3.start() + 2 * third - 1, Some(1));
    after.assign(r3.start() + 2 * third..=*r3.end(), Some(2));
    after.masters.pop();
    let r = simulate(
        "m3 gives its slots to m0, m1, m2 and leaves",
        &before,
        SHARDS3,
        &after,
        SLOTS2,
    );
    assert!(r.plan.open.is_empty());
    assert_eq!(r.plan.close, vec![key(&before, 3)]);
    assert_eq!(
        moved(&r.plan),
        r.before.node(&key(&before, 3)).unwrap().partitions
    );
    golden("node_removed", &r.text);
}

#[test]
fn slot_with_no_owner_then_new_owner() {
    let before = Model::new(3);
    let slot = parts().slot(40);
    let mut lost = before.clone();
    lost.assign(slot..=slot, None);
    lost.assign(4900..=5100, None);
    let r = simulate(
        &format!("slot {slot} (partition 40) and slots 4900-5100 lose their owner"),
        &before,
        SLOTS2,
        &lost,
        SHARDS2,
    );
    let expect = partitions_in(|s| s == slot || (4900..=5100).contains(&s));
    assert_eq!(
        r.plan
            .unowned
            .iter()
            .map(|o| o.partition)
            .collect::<Vec<_>>(),
        expect
    );
    assert!(r.plan.resubscribe.is_empty() && r.plan.open.is_empty() && r.plan.close.is_empty());
    let unresolved: Vec<u32> = r.after.unresolved().iter().map(|u| u.partition).collect();
    assert_eq!(unresolved, expect);
    let probes = r.after.slots_to_probe();
    assert!(probes.contains(&slot));
    let mut text = r.text;
    text += "\n== probe keys\n";
    for s in &probes {
        let k = probe_key_for_slot(*s);
        assert_eq!(shardcore::key_slot(&k), *s);
        text += &format!("  slot {s}: GET {}\n", String::from_utf8_lossy(&k));
    }

    // The probe's MOVED names a node that just joined; the next refresh has it.
    let mut found = lost.clone();
    let m3 = found.add_master("m3", 7003);
    found.assign(slot..=slot, Some(m3));
    found.assign(4900..=5100, Some(m3));
    let r2 = simulate(
        "the lost slots turn up on m3, a node that just joined",
        &lost,
        SHARDS2,
        &found,
        SLOTS3,
    );
    assert_eq!(r2.plan.open, vec![key(&found, m3)]);
    assert_eq!(moved(&r2.plan), expect);
    assert!(r2.plan.resubscribe.iter().all(|m| m.from.is_none()));
    text += "\n";
    text += &r2.text;
    golden("slot_no_owner", &text);
}

#[test]
fn same_cluster_from_either_command_plans_nothing() {
    let m = Model::new(6);
    let parts = parts();
    let a = Layout::compute(&m.parse(TopologyCommand::ClusterSlots, false), &parts);
    let b = Layout::compute(&m.parse(TopologyCommand::ClusterShards, true), &parts);
    let plan = plan_rewire(&a, &b);
    assert!(plan.is_empty(), "{plan}");
}
