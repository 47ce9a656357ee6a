//! Balance of the partition tables over every cluster size, checked
//! exhaustively, and the resharding robustness metric.

use std::ops::RangeInclusive;

use shardcore::{cluster_create_ranges, ideal_ranges, Partitions, SLOT_COUNT};
use testkit::Rng;

/// `prefix[s]` = partitions with slot < s.
fn prefix_counts(table: &Partitions) -> Vec<u32> {
    let mut prefix = vec![0u32; usize::from(SLOT_COUNT) + 1];
    for &s in table.slots() {
        prefix[usize::from(s) + 1] += 1;
    }
    for i in 0..usize::from(SLOT_COUNT) {
        prefix[i + 1] += prefix[i];
    }
    prefix
}

/// Max minus min partitions per range (empty ranges hold 0).
fn spread(prefix: &[u32], ranges: &[RangeInclusive<u16>]) -> u32 {
    let (mut lo, mut hi) = (u32::MAX, 0);
    for r in ranges {
        let c = if r.is_empty() {
            0
        } else {
            prefix[usize::from(*r.end()) + 1] - prefix[usize::from(*r.start())]
        };
        lo = lo.min(c);
        hi = hi.max(c);
    }
    hi - lo
}

fn slot_spread(ranges: &[RangeInclusive<u16>]) -> u32 {
    let sizes = ranges.iter().map(|r| r.clone().count() as u32);
    sizes.clone().max().unwrap_or(0) - sizes.min().unwrap_or(0)
}

/// Every power-of-two table, every N in 1..=P, both the exact redis-cli split
/// and its float-free form. Where redis-cli's own float cursor gives masters
/// slot counts 2+ apart (only past 2,687 masters), the partition counts may
/// follow; those cases are counted and pinned.
#[test]
fn power_of_two_tables_balance_for_every_cluster_size() {
    let tables: Vec<(u32, Vec<u32>)> = (0..=14)
        .map(|e| {
            let p = 1u32 << e;
            (p, prefix_counts(&Partitions::new(p).expect("valid count")))
        })
        .collect();
    let mut uneven_split_cases = vec![0u32; tables.len()];
    for n in 1..=SLOT_COUNT {
        let cli = cluster_create_ranges(n);
        let ideal = ideal_ranges(n);
        let cli_slot_spread = slot_spread(&cli);
        for (i, (p, prefix)) in tables
            .iter()
            .enumerate()
            .filter(|(_, (p, _))| *p >= u32::from(n))
        {
            assert!(spread(prefix, &ideal) <= 1, "P={p} N={n} float-free split");
            let s = spread(prefix, &cli);
            if s > 1 {
                assert!(
                    cli_slot_spread > 1,
                    "P={p} N={n}: spread {s} on an even redis-cli split"
                );
                assert!(
                    s <= cli_slot_spread,
                    "P={p} N={n}: spread {s} > slot spread {cli_slot_spread}"
                );
                uneven_split_cases[i] += 1;
            }
        }
    }
    let expected = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 120, 7056];
    assert_eq!(
        uneven_split_cases, expected,
        "cases per P = 1, 2, 4, ..., 16384"
    );
}

/// Non-power-of-two tables: spread 1 up to P = 169 on the redis-cli split
/// (145 on the float-free one), at most 2 beyond.
#[test]
fn other_tables_stay_within_two() {
    let splits: Vec<_> = (1..=2048)
        .map(|n| (cluster_create_ranges(n), ideal_ranges(n)))
        .collect();
    let counts = (1..=300).chain((301..=2048).step_by(97)).chain([3000]);
    for p in counts {
        let prefix = prefix_counts(&Partitions::new(p).expect("valid count"));
        let (cli_limit, ideal_limit) = (if p <= 169 { 1 } else { 2 }, if p <= 145 { 1 } else { 2 });
        for n in 1..=p.min(2048) as usize {
            let (cli, ideal) = &splits[n - 1];
            assert!(spread(&prefix, cli) <= cli_limit, "P={p} N={n}");
            assert!(spread(&prefix, ideal) <= ideal_limit, "P={p} N={n}");
        }
    }
}

/// Random contiguous layouts where master i owns a share proportional to a
/// random weight (as after uneven resharding): no master holds a whole
/// partition more than its proportional share, nor a whole one less.
#[test]
fn resharded_layouts_stay_within_one_of_proportional() {
    const SEED: u64 = 0x5eed_0001;
    let mut rng = Rng::new(SEED);
    let mut worst_excess = f64::MIN;
    let mut worst_deficit = f64::MIN;
    for p in [16, 128, 1000, 1024, 4096, 16384] {
        let table = Partitions::new(p).expect("valid count");
        for _ in 0..300 {
            let masters = 2 + (rng.next_u64() % 63) as usize;
            let weights: Vec<u64> = (0..masters).map(|_| 1 + rng.next_u64() % 1000).collect();
            let total: u64 = weights.iter().sum();
            let mut acc = 0;
            let mut start = 0u64;
            let mut ranges = Vec::new();
            for w in &weights {
                acc += w;
                let end = acc * 16384 / total;
                if end > start {
                    ranges.push((start as u16)..=((end - 1) as u16));
                }
                start = end;
            }
            for (r, count) in ranges.iter().zip(table.counts_per_range(&ranges)) {
                let share = f64::from(u32::from(r.end() - r.start() + 1)) * f64::from(p) / 16384.0;
                worst_excess = worst_excess.max(f64::from(count) - share);
                worst_deficit = worst_deficit.max(share - f64::from(count));
            }
        }
    }
    println!("resharding (seed {SEED:#x}): worst excess {worst_excess:.3}, worst deficit {worst_deficit:.3} partitions");
    assert!(worst_excess < 1.0, "seed {SEED:#x}: excess {worst_excess}");
    assert!(
        worst_deficit < 1.0,
        "seed {SEED:#x}: deficit {worst_deficit}"
    );
}
