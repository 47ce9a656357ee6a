//! How a resubscribe divides channels into commands: whole partitions per
//! worker through shardcore's planner (one `SSUBSCRIBE` per partition, split
//! only past the batch size), or, for comparison, channels split by hash
//! over the workers first.

use crate::cluster::builder::ResubscribeSplit;

/// The subscribe commands for `groups` (lane, channels): grouped by lane
/// with shardcore's planner, or (for comparison) split by channel hash
/// over `workers` first, each worker sending one command per lane of its
/// share.
pub(crate) fn plan_batches(
    groups: &[(u32, Vec<Box<[u8]>>)],
    split: ResubscribeSplit,
    workers: u32,
    batch: usize,
) -> Vec<(u32, Vec<Box<[u8]>>)> {
    let mut out = Vec::new();
    match split {
        ResubscribeSplit::Partitions => {
            let options = shardcore::plan::PlanOptions::new(workers.max(1)).batch(batch.max(1));
            let plan = shardcore::plan_resubscribe(
                groups.iter().map(|(p, names)| (*p, names.as_slice())),
                |_| Some(()),
                options,
            );
            if let Ok(plan) = plan {
                for node in &plan.nodes {
                    for cmd in node.commands() {
                        out.push((cmd.partition, cmd.channels.to_vec()));
                    }
                }
            }
        }
        ResubscribeSplit::Channels => {
            let w = workers.max(1);
            for worker in 0..w {
                for (p, names) in groups {
                    let share: Vec<Box<[u8]>> = names
                        .iter()
                        .filter(|n| shardcore::worker_of(n, w) == worker)
                        .cloned()
                        .collect();
                    for chunk in share.chunks(batch.max(1)) {
                        out.push((*p, chunk.to_vec()));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn groups(parts: u32, per: usize) -> Vec<(u32, Vec<Box<[u8]>>)> {
        (0..parts)
            .map(|p| {
                let names = (0..per)
                    .map(|i| format!("p{p}:c{i}").into_bytes().into_boxed_slice())
                    .collect();
                (p, names)
            })
            .collect()
    }

    #[test]
    fn partition_grouping_sends_one_command_per_partition() {
        let g = groups(21, 100);
        let by_part = plan_batches(&g, ResubscribeSplit::Partitions, 16, 512);
        assert_eq!(by_part.len(), 21);
        let by_chan = plan_batches(&g, ResubscribeSplit::Channels, 16, 512);
        assert!(by_chan.len() > 200, "{}", by_chan.len());
        let total: usize = by_chan.iter().map(|b| b.1.len()).sum();
        assert_eq!(total, 2100);
        // Large partitions split at the batch size.
        let big = groups(2, 1100);
        assert_eq!(
            plan_batches(&big, ResubscribeSplit::Partitions, 4, 512).len(),
            6
        );
    }

    #[test]
    fn every_command_holds_one_partition() {
        let parts = shardcore::Partitions::new(64).unwrap();
        let mut by: BTreeMap<u32, Vec<Box<[u8]>>> = BTreeMap::new();
        for i in 0..5000 {
            let ch = format!("ch:{i}").into_bytes();
            by.entry(parts.partition_of(&ch))
                .or_default()
                .push(ch.into());
        }
        let g: Vec<_> = by.into_iter().collect();
        for split in [ResubscribeSplit::Partitions, ResubscribeSplit::Channels] {
            for (p, cmd) in plan_batches(&g, split, 8, 50) {
                assert!(cmd.len() <= 50);
                let slots: std::collections::BTreeSet<u16> = cmd
                    .iter()
                    .map(|c| shardcore::key_slot(&parts.redis_channel(c)))
                    .collect();
                assert_eq!(slots.len(), 1, "{split:?}");
                assert!(cmd.iter().all(|c| parts.partition_of(c) == p), "{split:?}");
            }
        }
    }
}
