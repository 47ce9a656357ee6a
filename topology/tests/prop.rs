//! Properties over random contiguous layouts: the layout agrees with slot
//! ownership for every partition, and a rewire plan turns one layout into
//! the other, touching only what changed. A failure prints the seed.

mod common;

use std::collections::BTreeSet;

use common::{n, Master, Model};
use proptest::prelude::*;
use shardcore::Partitions;
use testkit::Rng;
use topology::{plan_rewire, Layout, NodeAddr, NodeKey, TopologyCommand};

/// Node pool: m0…m11 on ports 7000…, and m0…m3 again on ports 8000… (the
/// same id at a new address is a different node for the engine).
fn pool(i: usize) -> (String, u16) {
    if i < 12 {
        (format!("m{i}"), 7000 + i as u16)
    } else {
        (format!("m{}", i - 12), 8000 + i as u16)
    }
}

/// A random cluster: up to 8 masters with distinct ids from the pool, the
/// slots cut into contiguous ranges, each range owned by a random master
/// (about one in ten ranges by no one).
fn random_model(rng: &mut Rng) -> Model {
    let mut ids = BTreeSet::new();
    let mut masters = Vec::new();
    let want = 1 + rng.below(8) as usize;
    while masters.len() < want {
        let (id, port) = pool(rng.below(16) as usize);
        if ids.insert(id.clone()) {
            let mut node = n(&id, port);
            node.ip = "10.1.0.1".into();
            masters.push(Master {
                node,
                replicas: vec![],
            });
        }
    }
    let cuts = masters.len() + rng.below(6) as usize;
    let mut points: BTreeSet<u16> = (0..cuts).map(|_| 1 + rng.below(16383) as u16).collect();
    points.insert(16384u16);
    let mut owner = vec![None; 16384];
    let mut start = 0usize;
    for p in points {
        let o = if rng.below(10) == 0 {
            None
        } else {
            Some(rng.below(masters.len() as u64) as usize)
        };
        for slot in owner.iter_mut().take(p as usize).skip(start) {
            *slot = o;
        }
        start = p as usize;
    }
    Model { masters, owner }
}

/// A small change: a range moves to another master (or to no one), or a
/// master fails over to a fresh node.
fn edit(m: &Model, rng: &mut Rng) -> Model {
    let mut m = m.clone();
    if rng.below(2) == 0 {
        let a = rng.below(16384) as u16;
        let b = (a as u64 + rng.below(3000)).min(16383) as u16;
        let to = if rng.below(8) == 0 {
            None
        } else {
            Some(rng.below(m.masters.len() as u64) as usize)
        };
        m.assign(a..=b, to);
    } else {
        let i = rng.below(m.masters.len() as u64) as usize;
        m.masters[i].node = n(&format!("f{i}"), 9000 + i as u16);
    }
    m
}

fn key_of(m: &Model, i: usize) -> NodeKey {
    let node = &m.masters[i].node;
    NodeKey {
        id: node.id.clone(),
        addr: NodeAddr {
            host: node.ip.clone(),
            port: node.port,
        },
    }
}

fn layout(m: &Model, slots: &[u16], rng: &mut Rng) -> Layout {
    let cmd = if rng.below(2) == 0 {
        TopologyCommand::ClusterSlots
    } else {
        TopologyCommand::ClusterShards
    };
    Layout::for_slots(&m.parse(cmd, rng.below(2) == 0), slots)
}

/// Partition slots: from a real [`Partitions`] (table and computed counts)
/// two times in three, else a random list of slots (any count, repeats
/// allowed) through [`Layout::for_slots`].
fn partition_slots(rng: &mut Rng) -> Vec<u16> {
    if rng.below(3) < 2 {
        let parts = Partitions::new(COUNTS[rng.below(COUNTS.len() as u64) as usize]).unwrap();
        let slots = parts.slots().to_vec();
        assert_eq!(
            Layout::compute(&topology::SlotMap::new(), &parts).partition_count() as usize,
            slots.len()
        );
        slots
    } else {
        (0..1 + rng.below(300))
            .map(|_| rng.below(16384) as u16)
            .collect()
    }
}

fn state(l: &Layout) -> (Vec<Option<NodeKey>>, BTreeSet<NodeKey>) {
    (
        (0..l.partition_count())
            .map(|p| l.node_of(p).cloned())
            .collect(),
        l.nodes().iter().map(|n| n.key.clone()).collect(),
    )
}

const COUNTS: [u32; 9] = [1, 2, 3, 16, 64, 100, 128, 1000, 4096];

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn layout_agrees_with_slot_ownership(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let slots = partition_slots(&mut rng);
        let m = random_model(&mut rng);
        let l = layout(&m, &slots, &mut rng);
        let mut seen = BTreeSet::new();
        for (p, &slot) in (0u32..).zip(&slots) {
            let want = m.owner[slot as usize].map(|i| key_of(&m, i));
            prop_assert_eq!(l.node_of(p), want.as_ref(), "partition {}", p);
            if want.is_none() {
                prop_assert!(l.unresolved().iter().any(|u| u.partition == p));
            }
        }
        for node in l.nodes() {
            prop_assert!(!node.partitions.is_empty());
            prop_assert!(node.partitions.windows(2).all(|w| w[0] < w[1]));
            for &p in &node.partitions {
                prop_assert!(seen.insert(p), "partition {} on two nodes", p);
                prop_assert_eq!(l.node_of(p), Some(&node.key));
            }
        }
        prop_assert_eq!(seen.len() + l.unresolved().len(), slots.len());
    }

    #[test]
    fn plan_applied_to_old_gives_new(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let slots = partition_slots(&mut rng);
        let a_model = random_model(&mut rng);
        // Half the time the new cluster is a random edit of the old one
        // (a range moves, a failover), else an unrelated cluster.
        let b_model = if rng.below(2) == 0 { edit(&a_model, &mut rng) } else { random_model(&mut rng) };
        let (a, b) = (layout(&a_model, &slots, &mut rng), layout(&b_model, &slots, &mut rng));
        let plan = plan_rewire(&a, &b);
        prop_assert_eq!(&plan, &plan_rewire(&a, &b), "deterministic");
        let (mut assign, mut nodes) = state(&a);
        for k in &plan.close {
            prop_assert!(nodes.remove(k), "closing a node that was not open: {}", k);
        }
        for k in &plan.open {
            prop_assert!(nodes.insert(k.clone()), "opening a node twice: {}", k);
        }
        prop_assert!(plan.open.windows(2).all(|w| w[0] < w[1]));
        prop_assert!(plan.close.windows(2).all(|w| w[0] < w[1]));
        prop_assert!(plan.resubscribe.windows(2).all(|w| w[0].partition < w[1].partition));
        prop_assert!(plan.unowned.windows(2).all(|w| w[0].partition < w[1].partition));
        let mut touched = BTreeSet::new();
        for mv in &plan.resubscribe {
            let slot = &mut assign[mv.partition as usize];
            prop_assert_eq!(slot.as_ref(), mv.from.as_ref());
            prop_assert!(mv.from.as_ref() != Some(&mv.to), "a move to the same node");
            prop_assert!(nodes.contains(&mv.to));
            *slot = Some(mv.to.clone());
            touched.insert(mv.partition);
        }
        for o in &plan.unowned {
            let slot = &mut assign[o.partition as usize];
            prop_assert_eq!(slot.as_ref(), Some(&o.from));
            *slot = None;
            prop_assert!(touched.insert(o.partition));
        }
        prop_assert_eq!((assign, nodes), state(&b));
        // Partitions not in the plan did not change node.
        for p in 0..slots.len() as u32 {
            if !touched.contains(&p) {
                prop_assert_eq!(a.node_of(p), b.node_of(p));
            }
        }
        prop_assert!(plan_rewire(&b, &b).is_empty());
    }
}
