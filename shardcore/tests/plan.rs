//! The resubscribe planner: the reference 21-vs-336 case and properties.

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use shardcore::plan::{plan_resubscribe, PlanError, PlanOptions};
use shardcore::{cluster_create_ranges, key_slot, Partitions};

/// Channels grouped by partition, in partition order.
fn group(table: &Partitions, channels: &[Vec<u8>]) -> BTreeMap<u32, Vec<Vec<u8>>> {
    let mut groups: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
    for ch in channels {
        groups
            .entry(table.partition_of(ch))
            .or_default()
            .push(ch.clone());
    }
    groups
}

/// Master index owning `slot` under a redis-cli split.
fn master_of(ranges: &[std::ops::RangeInclusive<u16>], slot: u16) -> Option<usize> {
    ranges.iter().position(|r| r.contains(&slot))
}

/// Reference case: 6 masters, P = 128, 16 workers. Whole partitions per
/// worker: one SSUBSCRIBE per partition, 21 or 22 per node. Dealing the
/// channels themselves to the 16 workers would make every worker send one
/// command per partition: 16 × 21 = 336.
#[test]
fn six_masters_128_partitions_16_workers() {
    let table = Partitions::new(128).expect("valid");
    let ranges = cluster_create_ranges(6);
    let channels: Vec<Vec<u8>> = (0..50_000)
        .map(|i| format!("user:{i}").into_bytes())
        .collect();
    let groups = group(&table, &channels);
    let plan = plan_resubscribe(
        groups.iter().map(|(p, chs)| (*p, chs.as_slice())),
        |p| master_of(&ranges, table.slot(p)),
        PlanOptions::new(16),
    )
    .expect("valid options");
    assert!(plan.unrouted.is_empty());
    assert_eq!(plan.nodes.len(), 6);
    let per_node: Vec<usize> = plan.nodes.iter().map(|n| n.command_count()).collect();
    // ~390 channels per partition: below the batch size, one command each.
    assert_eq!(per_node, [21, 22, 21, 21, 22, 21]);
    for node in &plan.nodes {
        assert_eq!(node.workers.len(), 16, "all workers busy");
        // The naive split: channel i of this node to worker i % 16.
        let mine: Vec<&Vec<u8>> = channels
            .iter()
            .filter(|c| master_of(&ranges, table.slot(table.partition_of(c))) == Some(node.node))
            .collect();
        let naive: usize = (0..16)
            .map(|w| {
                let parts: HashSet<u32> = mine
                    .iter()
                    .skip(w)
                    .step_by(16)
                    .map(|c| table.partition_of(c))
                    .collect();
                parts.len()
            })
            .sum();
        assert_eq!(
            naive,
            16 * node.command_count(),
            "naive split sends 16 per partition"
        );
    }
    assert_eq!(16 * 21, 336);
}

#[test]
fn rejects_zero_settings() {
    let none: [(u32, &[Vec<u8>]); 0] = [];
    assert_eq!(
        plan_resubscribe(none, |_| Some(0), PlanOptions::new(0)).err(),
        Some(PlanError::NoWorkers)
    );
    assert_eq!(
        plan_resubscribe(none, |_| Some(0), PlanOptions::new(2).batch(0)).err(),
        Some(PlanError::ZeroBatch)
    );
}

#[test]
fn large_partitions_split_by_batch_only() {
    let chans: Vec<u32> = (0..1300).collect();
    let plan = plan_resubscribe([(7, chans.as_slice())], |_| Some('a'), PlanOptions::new(4))
        .expect("valid");
    let node = &plan.nodes[0];
    assert_eq!(node.workers.len(), 1, "one partition, one worker");
    let sizes: Vec<usize> = node.commands().map(|c| c.channels.len()).collect();
    assert_eq!(sizes, [512, 512, 276]);
}

proptest! {
    #[test]
    fn every_channel_once_one_slot_per_command(
        count in 1u32..=300,
        nodes in 1usize..=7,
        unknown_every in 0u32..=5,
        workers in 1u32..=20,
        batch in 1usize..=40,
        n_channels in 0usize..=600,
        salt in any::<u32>(),
    ) {
        let table = Partitions::with_prefix(count, b"t:").expect("valid");
        let channels: Vec<Vec<u8>> = (0..n_channels).map(|i| format!("c{salt}:{i}").into_bytes()).collect();
        let groups = group(&table, &channels);
        let node_of = |p: u32| {
            if unknown_every > 0 && p % 7 == unknown_every { None } else { Some((p as usize * 31) % nodes) }
        };
        let plan = plan_resubscribe(
            groups.iter().map(|(p, chs)| (*p, chs.as_slice())),
            node_of,
            PlanOptions::new(workers).batch(batch),
        ).expect("valid options");

        let mut seen: HashSet<&[u8]> = HashSet::new();
        for (p, chs) in &plan.unrouted {
            prop_assert!(node_of(*p).is_none());
            for c in *chs { prop_assert!(seen.insert(c.as_slice())); }
        }
        for node in &plan.nodes {
            prop_assert!(node.workers.len() <= workers as usize);
            let mut owner: BTreeMap<u32, usize> = BTreeMap::new();
            for (w, wp) in node.workers.iter().enumerate() {
                prop_assert!(!wp.commands.is_empty());
                prop_assert_eq!(wp.channels, wp.commands.iter().map(|c| c.channels.len()).sum::<usize>());
                for cmd in &wp.commands {
                    prop_assert_eq!(*owner.entry(cmd.partition).or_insert(w), w, "partition split across workers");
                    prop_assert_eq!(node_of(cmd.partition), Some(node.node));
                    prop_assert!(!cmd.channels.is_empty() && cmd.channels.len() <= batch);
                    let slot = table.slot(cmd.partition);
                    for c in cmd.channels {
                        prop_assert!(seen.insert(c.as_slice()), "channel planned twice");
                        prop_assert_eq!(key_slot(&table.redis_channel(c)), slot);
                    }
                }
            }
            let expected: usize = owner.keys().map(|p| groups[p].len().div_ceil(batch)).sum();
            prop_assert_eq!(node.command_count(), expected);
            // Greedy balance: workers differ by at most the largest partition.
            let largest = owner.keys().map(|p| groups[p].len()).max().unwrap_or(0);
            let loads: Vec<usize> = node.workers.iter().map(|w| w.channels).collect();
            if let (Some(hi), Some(lo)) = (loads.iter().max(), loads.iter().min()) {
                prop_assert!(hi - lo <= largest);
            }
        }
        prop_assert_eq!(seen.len(), channels.len());
        let total: usize = groups.iter().filter(|(p, _)| node_of(**p).is_some()).map(|(_, g)| g.len().div_ceil(batch)).sum();
        prop_assert_eq!(plan.command_count(), total);
    }
}
