//! Layouts, `topology::plan_rewire` and `shardcore::plan_resubscribe` on
//! arbitrary before/after cluster maps.
//!
//! Input: a mode byte (bit 0: maps from two RESP replies instead of the
//! compact form), a partition byte (a count from [`COUNTS`], or from 200 on
//! a list of arbitrary slots), planner settings (workers, batch), then the
//! two maps. In the compact form a map is a few shards over the
//! `redis-cli --cluster create` split plus edits (ranges reassigned,
//! `MOVED`s, failovers), and the second map is an edit of the first or a
//! new one. In reply mode each map is a `CLUSTER SLOTS` or `CLUSTER SHARDS`
//! reply (empty when it does not parse, as at start-up).
//!
//! Invariants: no panic; each layout agrees with its map for every
//! partition ([`check_layout`]); the rewire plan is deterministic, opens
//! and closes exactly the nodes that appeared and left, lists every
//! partition whose node changed exactly once (a move to its new node, or an
//! orphan) and no partition that stayed; the resubscribe plan for the moved
//! and orphaned partitions sends every channel exactly once, each partition
//! whole on one worker of the node the rewire named, in commands of at most
//! `batch` channels, with workers within one partition of each other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use resp::{Limits, Status};
use shardcore::plan::{plan_resubscribe, PlanError, PlanOptions};
use shardcore::{cluster_create_ranges, Partitions, SLOT_COUNT};
use topology::{
    parse_topology, plan_rewire, Health, Layout, Node, NodeAddr, NodeKey, ParseOptions, RewirePlan,
    Role, Shard, SlotMap, TopologyCommand, UnresolvedReason,
};

use crate::input::Input;

/// Partition counts a byte picks (tables and computed counts).
pub const COUNTS: [u32; 10] = [1, 2, 3, 16, 64, 100, 128, 1000, 4096, 16384];

/// Runs the input as described in the module docs and checks every invariant.
pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let slots = partition_slots(&mut input);
    let workers = u32::from(input.u8() % 9);
    let batch = input.pick(&[1, 2, 3, 7, 512, 0]);
    let sizes = input.u8();
    let (a, b) = if mode & 1 == 0 {
        let a = compact_map(&mut input);
        let b = if input.u8() & 1 == 0 {
            let mut b = a.clone();
            edit(&mut b, &mut input);
            b
        } else {
            compact_map(&mut input)
        };
        (a, b)
    } else {
        let rest = input.rest();
        let (a, used) = reply_map(mode & 2 != 0, rest);
        let (b, _) = reply_map(mode & 4 != 0, rest.get(used..).unwrap_or_default());
        (a, b)
    };
    let (old, new) = (Layout::for_slots(&a, &slots), Layout::for_slots(&b, &slots));
    check_layout(&a, &slots, &old);
    check_layout(&b, &slots, &new);
    let plan = plan_rewire(&old, &new);
    check_rewire(&old, &new, &plan);
    check_resubscribe(&new, &plan, PlanOptions { workers, batch }, sizes);
}

/// The [`Partitions`] of `COUNTS[i]`, built once (counts that are not
/// powers of two are computed, which takes a while).
pub fn partitions(i: usize) -> &'static Partitions {
    static CACHE: [OnceLock<Partitions>; COUNTS.len()] = [const { OnceLock::new() }; COUNTS.len()];
    let i = i % COUNTS.len();
    CACHE[i].get_or_init(|| Partitions::new(COUNTS[i]).expect("a valid count"))
}

fn partition_slots(input: &mut Input<'_>) -> Vec<u16> {
    let v = input.u8();
    if v < 200 {
        // 4096 and 16384 partitions, the slow checks, one time in eight.
        let i = match v % 16 {
            14 => 8,
            15 => 9,
            x => usize::from(x % 8),
        };
        return partitions(i).slots().to_vec();
    }
    let n = 1 + usize::from(input.u8());
    (0..n).map(|_| input.u16() % SLOT_COUNT).collect()
}

fn node(id: String, at: u8, role: Role) -> Node {
    Node {
        id,
        // One in eight announces no usable endpoint.
        addr: (at % 8 != 7).then(|| NodeAddr {
            host: "10.0.0.1".into(),
            port: 7000 + u16::from(at % 8),
        }),
        hostname: None,
        tls_port: None,
        role,
        health: [
            Health::Online,
            Health::Failed,
            Health::Loading,
            Health::Unknown,
        ][usize::from(at >> 6)],
        replication_offset: None,
    }
}

/// 1-8 shards (ids and addresses from small pools, so they collide) over
/// the `redis-cli` split, then edits.
fn compact_map(input: &mut Input<'_>) -> SlotMap {
    let count = 1 + input.below(8);
    let mut map = SlotMap::new();
    for _ in 0..count {
        let primary = node(format!("m{}", input.below(12)), input.u8(), Role::Primary);
        let replicas = (0..input.below(3))
            .map(|r| node(format!("r{r}"), input.u8(), Role::Replica))
            .collect();
        map.push_shard(Shard { primary, replicas });
    }
    for (i, r) in cluster_create_ranges(count as u16).into_iter().enumerate() {
        map.assign(r, Some(i));
    }
    edit(&mut map, input);
    map
}

/// Up to 7 edits: a range to another shard (or none), a `MOVED`, a failover
/// (a shard's primary replaced by a new node or moved to a new address).
fn edit(map: &mut SlotMap, input: &mut Input<'_>) {
    for _ in 0..input.below(8) {
        match input.u8() % 3 {
            0 => {
                let start = input.u16() % SLOT_COUNT;
                let end = start.saturating_add(input.u16() % 4096).min(SLOT_COUNT - 1);
                let owner = input.below(map.shards().len() + 1);
                map.assign(start..=end, (owner < map.shards().len()).then_some(owner));
            }
            1 => {
                let slot = input.u16() % SLOT_COUNT;
                let port = 7000 + u16::from(input.u8() % 10);
                map.apply_moved(
                    slot,
                    NodeAddr {
                        host: "10.0.0.1".into(),
                        port,
                    },
                );
            }
            _ => {
                let i = input.below(map.shards().len().max(1));
                let how = input.u8();
                let mut shards = map.shards().to_vec();
                if let Some(s) = shards.get_mut(i) {
                    let id = if how & 1 == 0 {
                        format!("f{i}")
                    } else {
                        s.primary.id.clone()
                    };
                    s.primary = node(id, how >> 1, Role::Primary);
                }
                let mut next = SlotMap::new();
                for s in shards {
                    next.push_shard(s);
                }
                for (range, owner) in map.ranges() {
                    next.assign(range, owner);
                }
                *map = next;
            }
        }
    }
}

/// The map of the first RESP frame of `wire` read as a topology reply, and
/// the bytes the frame took; an empty map when it does not parse.
fn reply_map(shards: bool, wire: &[u8]) -> (SlotMap, usize) {
    let command = if shards {
        TopologyCommand::ClusterShards
    } else {
        TopologyCommand::ClusterSlots
    };
    match resp::parse(wire, &Limits::default()) {
        Ok(Status::Complete(p)) => {
            let map = parse_topology(command, &p.frame, &ParseOptions::default());
            (map.unwrap_or_default(), p.consumed)
        }
        _ => (SlotMap::new(), wire.len()),
    }
}

/// The layout of `slots` over `map` agrees with the map for every partition.
pub fn check_layout(map: &SlotMap, slots: &[u16], layout: &Layout) {
    let n = slots.len();
    assert_eq!(layout.partition_count() as usize, n);
    let mut seen = vec![false; n];
    let mut mark = |p: u32| {
        let slot = seen.get_mut(p as usize).expect("partition in range");
        assert!(!*slot, "partition {p} listed twice");
        *slot = true;
    };
    for (i, node) in layout.nodes().iter().enumerate() {
        if let Some(prev) = i.checked_sub(1).and_then(|p| layout.nodes().get(p)) {
            assert!(prev.key < node.key, "nodes not sorted");
        }
        assert!(!node.partitions.is_empty(), "a node without partitions");
        assert!(node.partitions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(layout.node(&node.key), Some(node));
        for &p in &node.partitions {
            mark(p);
            assert_eq!(layout.node_of(p), Some(&node.key));
        }
    }
    let unresolved = layout.unresolved();
    assert!(unresolved
        .windows(2)
        .all(|w| w[0].partition < w[1].partition));
    for u in unresolved {
        mark(u.partition);
        assert_eq!(Some(u.slot), slots.get(u.partition as usize).copied());
        let want = match map.owner(u.slot) {
            None => UnresolvedReason::NoOwner,
            Some(s) => {
                assert!(
                    s.primary.addr.is_none(),
                    "partition {} has an owner",
                    u.partition
                );
                UnresolvedReason::UnknownEndpoint
            }
        };
        assert_eq!(u.reason, want);
    }
    assert!(
        seen.iter().all(|&s| s),
        "a partition neither placed nor unresolved"
    );
    for (p, &slot) in (0u32..).zip(slots) {
        assert_eq!(layout.slot_of(p), Some(slot));
        let want = map.owner(slot).and_then(|s| {
            Some(NodeKey {
                id: s.primary.id.clone(),
                addr: s.primary.addr.clone()?,
            })
        });
        assert_eq!(
            layout.node_of(p),
            want.as_ref(),
            "partition {p} (slot {slot})"
        );
    }
    assert_eq!(layout.node_of(n as u32), None);
    let mut probe: Vec<u16> = unresolved
        .iter()
        .filter(|u| u.reason == UnresolvedReason::NoOwner)
        .map(|u| u.slot)
        .collect();
    probe.sort_unstable();
    probe.dedup();
    assert_eq!(layout.slots_to_probe(), probe);
    let _ = layout.to_string();
}

/// The plan from `old` to `new` does exactly what changed, once.
pub fn check_rewire(old: &Layout, new: &Layout, plan: &RewirePlan) {
    assert_eq!(plan, &plan_rewire(old, new), "not deterministic");
    assert!(
        plan_rewire(new, new).is_empty(),
        "a plan from a layout to itself"
    );
    let keys = |l: &Layout| {
        l.nodes()
            .iter()
            .map(|n| n.key.clone())
            .collect::<BTreeSet<_>>()
    };
    let (before, after) = (keys(old), keys(new));
    let open: Vec<NodeKey> = after.difference(&before).cloned().collect();
    let close: Vec<NodeKey> = before.difference(&after).cloned().collect();
    assert_eq!(plan.open, open);
    assert_eq!(plan.close, close);
    assert!(plan
        .resubscribe
        .windows(2)
        .all(|w| w[0].partition < w[1].partition));
    assert!(plan
        .unowned
        .windows(2)
        .all(|w| w[0].partition < w[1].partition));
    let (mut moves, mut orphans) = (
        plan.resubscribe.iter().peekable(),
        plan.unowned.iter().peekable(),
    );
    for p in 0..old.partition_count().max(new.partition_count()) {
        let (from, to) = (old.node_of(p), new.node_of(p));
        let slot = new.slot_of(p).or_else(|| old.slot_of(p));
        let mv = moves.next_if(|m| m.partition == p);
        let orphan = orphans.next_if(|o| o.partition == p);
        match (from, to) {
            (f, Some(t)) if f != Some(t) => {
                let mv = mv.unwrap_or_else(|| panic!("partition {p} moved to {t}, not rewired"));
                assert_eq!((mv.from.as_ref(), &mv.to, Some(mv.slot)), (f, t, slot));
                assert!(orphan.is_none());
            }
            (Some(f), None) => {
                let o = orphan.unwrap_or_else(|| panic!("partition {p} left {f}, not listed"));
                assert_eq!((&o.from, Some(o.slot)), (f, slot));
                assert!(mv.is_none());
            }
            _ => assert!(
                mv.is_none() && orphan.is_none(),
                "partition {p} did not move and was rewired"
            ),
        }
    }
    assert!(
        moves.next().is_none() && orphans.next().is_none(),
        "a partition out of range"
    );
    let _ = plan.to_string();
}

/// Plans the resubscribe of every moved partition (and, unroutable, every
/// orphan), each with a few channels, and checks the plan.
fn check_resubscribe(new: &Layout, plan: &RewirePlan, options: PlanOptions, sizes: u8) {
    let size = |p: u32| (p as usize).wrapping_mul(usize::from(sizes) | 1) % 23;
    let groups: Vec<(u32, Vec<u32>)> = plan
        .resubscribe
        .iter()
        .map(|m| m.partition)
        .chain(plan.unowned.iter().map(|o| o.partition))
        .map(|p| (p, (0..size(p) as u32).collect()))
        .collect();
    let node_of = |p: u32| new.node_of(p).cloned();
    let result = plan_resubscribe(
        groups.iter().map(|(p, c)| (*p, c.as_slice())),
        node_of,
        options,
    );
    let rs = match result {
        Err(e) => {
            assert_eq!(
                e,
                if options.workers == 0 {
                    PlanError::NoWorkers
                } else {
                    PlanError::ZeroBatch
                }
            );
            assert!(options.workers == 0 || options.batch == 0);
            return;
        }
        Ok(rs) => rs,
    };
    assert!(options.workers > 0 && options.batch > 0);
    // Groups by where their channels start, to find a command's group.
    let starts: BTreeMap<usize, usize> = (0..groups.len())
        .filter(|&g| !groups[g].1.is_empty())
        .map(|g| (groups[g].1.as_ptr() as usize, g))
        .collect();
    // Where each channel of each group went: (node, worker) per group.
    let mut home: Vec<Option<(usize, usize)>> = vec![None; groups.len()];
    let mut covered: Vec<Vec<bool>> = groups.iter().map(|(_, c)| vec![false; c.len()]).collect();
    let mut commands = 0;
    for (ni, np) in rs.nodes.iter().enumerate() {
        if let Some(prev) = ni.checked_sub(1).and_then(|i| rs.nodes.get(i)) {
            assert!(prev.node < np.node, "nodes not sorted and unique");
        }
        assert!(!np.workers.is_empty() && np.workers.len() <= options.workers as usize);
        for (wi, w) in np.workers.iter().enumerate() {
            assert!(!w.commands.is_empty(), "an idle worker listed");
            assert!(w
                .commands
                .windows(2)
                .all(|c| c[0].partition <= c[1].partition));
            assert_eq!(
                w.channels,
                w.commands.iter().map(|c| c.channels.len()).sum::<usize>()
            );
            for c in &w.commands {
                assert!((1..=options.batch).contains(&c.channels.len()));
                assert_eq!(new.node_of(c.partition), Some(&np.node), "wrong node");
                let addr = c.channels.as_ptr() as usize;
                let g = starts
                    .range(..=addr)
                    .next_back()
                    .map(|(_, &g)| g)
                    .filter(|&g| groups[g].1.as_ptr_range().contains(&c.channels.as_ptr()))
                    .expect("a command's channels come from a group");
                assert_eq!(groups[g].0, c.partition);
                assert!(
                    home[g].get_or_insert((ni, wi)) == &(ni, wi),
                    "a partition split"
                );
                let at = (c.channels.as_ptr() as usize - groups[g].1.as_ptr() as usize) / 4;
                for seen in &mut covered[g][at..at + c.channels.len()] {
                    assert!(!*seen, "a channel sent twice");
                    *seen = true;
                }
                commands += 1;
            }
        }
        let loads: Vec<usize> = np.workers.iter().map(|w| w.channels).collect();
        let biggest = groups
            .iter()
            .zip(&home)
            .filter(|(_, h)| h.is_some_and(|(n, _)| n == ni))
            .map(|((_, c), _)| c.len())
            .max()
            .unwrap_or(0);
        let spread = loads.iter().max().unwrap_or(&0) - loads.iter().min().unwrap_or(&0);
        assert!(spread <= biggest, "workers {loads:?} spread past {biggest}");
    }
    assert_eq!(commands, rs.command_count());
    let mut unrouted = rs.unrouted.iter();
    for (g, (p, channels)) in groups.iter().enumerate() {
        let routed = new.node_of(*p).is_some() && !channels.is_empty();
        assert!(
            covered[g].iter().all(|&c| c == routed),
            "group {g} (partition {p})"
        );
        if !channels.is_empty() && !routed {
            let u = unrouted.next().expect("an unrouted group missing");
            assert_eq!((u.0, u.1.as_ptr()), (*p, channels.as_ptr()));
        }
    }
    assert!(
        unrouted.next().is_none(),
        "an unrouted group that was routed"
    );
}
