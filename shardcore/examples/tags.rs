//! Partition tags and how they spread over a cluster's masters.
//!
//! ```text
//! cargo run --example tags -- --partitions 128 --masters 6
//! cargo run --example tags -- --partitions 1024 --masters 1..=1024
//! cargo run --example tags -- --partitions 128 --masters 6 --layouts 1000 --seed 7
//! ```
//!
//! For one cluster size it prints every tag with its slot and master, then the
//! partitions per master for the naive index tags `{0}`…`{P-1}` and for
//! shardcore's table. For a range of sizes it prints the worst spread (most
//! minus fewest partitions on a master) over the range. `--layouts K` adds the
//! resharding metric: K random contiguous layouts where each master owns a
//! share proportional to a random weight, and the worst excess over the
//! proportional share.

use std::ops::RangeInclusive;
use std::process::ExitCode;

use shardcore::{cluster_create_ranges, key_slot, Partitions};
use testkit::Rng;

const USAGE: &str = "usage: tags --partitions P --masters N|A..=B [--layouts K] [--seed S]";

struct Args {
    partitions: u32,
    masters: RangeInclusive<u16>,
    layouts: u32,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        partitions: 128,
        masters: 6..=6,
        layouts: 0,
        seed: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|e| format!("{flag} {v}: {e}"))
        };
        match flag.as_str() {
            "--partitions" => {
                args.partitions = u32::try_from(number(&value)?).map_err(|e| e.to_string())?
            }
            "--masters" => {
                let (a, b) = match value.split_once("..=").or_else(|| value.split_once('-')) {
                    Some((a, b)) => (number(a)?, number(b)?),
                    None => (number(&value)?, number(&value)?),
                };
                if a == 0 || b > 16384 || a > b {
                    return Err(format!("--masters {value}: need 1 <= A <= B <= 16384"));
                }
                // Both checked to be at most 16384.
                args.masters = (a as u16)..=(b as u16);
            }
            "--layouts" => {
                args.layouts = u32::try_from(number(&value)?).map_err(|e| e.to_string())?
            }
            "--seed" => args.seed = number(&value)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// The slot of the naive tag `{k}`.
fn index_slot(k: u32) -> u16 {
    key_slot(k.to_string().as_bytes())
}

/// Partitions per range, given each partition's slot.
fn counts(slots: &[u16], ranges: &[RangeInclusive<u16>]) -> Vec<u32> {
    let mut out = vec![0u32; ranges.len()];
    for &s in slots {
        if let Some(i) = ranges.iter().position(|r| r.contains(&s)) {
            out[i] += 1;
        }
    }
    out
}

fn spread(counts: &[u32]) -> u32 {
    counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0)
}

/// Worst spread over a range of cluster sizes, with the size where it occurs
/// and how many sizes exceed a spread of 1. Uses prefix counts: O(16384 + N)
/// per size.
fn worst_over(slots: &[u16], masters: RangeInclusive<u16>) -> (u32, u16, usize) {
    let mut prefix = vec![0u32; 16385];
    for &s in slots {
        prefix[usize::from(s) + 1] += 1;
    }
    for i in 0..16384 {
        prefix[i + 1] += prefix[i];
    }
    let (mut worst, mut at, mut over_one) = (0, *masters.start(), 0);
    for n in masters {
        let (mut lo, mut hi) = (u32::MAX, 0);
        for r in cluster_create_ranges(n) {
            let c = if r.is_empty() {
                0
            } else {
                prefix[usize::from(*r.end()) + 1] - prefix[usize::from(*r.start())]
            };
            lo = lo.min(c);
            hi = hi.max(c);
        }
        if hi - lo > 1 {
            over_one += 1;
        }
        if hi - lo > worst {
            (worst, at) = (hi - lo, n);
        }
    }
    (worst, at, over_one)
}

/// Worst (count - proportional share) over random weighted layouts.
fn reshard_metric(
    slots: &[u16],
    masters: RangeInclusive<u16>,
    layouts: u32,
    seed: u64,
) -> (f64, f64) {
    let mut rng = Rng::new(seed);
    let p = slots.len() as f64;
    let (mut excess, mut deficit) = (f64::MIN, f64::MIN);
    let span = u64::from(masters.end() - masters.start()) + 1;
    for _ in 0..layouts {
        let m = u64::from(*masters.start()) + rng.next_u64() % span;
        let weights: Vec<u64> = (0..m).map(|_| 1 + rng.next_u64() % 1000).collect();
        let total: u64 = weights.iter().sum();
        let (mut acc, mut start, mut ranges) = (0, 0u64, Vec::new());
        for w in weights {
            acc += w;
            let end = acc * 16384 / total;
            if end > start {
                ranges.push((start as u16)..=((end - 1) as u16));
            }
            start = end;
        }
        for (r, c) in ranges.iter().zip(counts(slots, &ranges)) {
            let share = f64::from(r.end() - r.start() + 1) * p / 16384.0;
            excess = excess.max(f64::from(c) - share);
            deficit = deficit.max(share - f64::from(c));
        }
    }
    (excess, deficit)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let table = match Partitions::new(args.partitions) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let p = args.partitions;
    let index_slots: Vec<u16> = (0..p).map(index_slot).collect();
    let table_slots = table.slots();

    if args.masters.start() == args.masters.end() {
        let n = *args.masters.start();
        let ranges = cluster_create_ranges(n);
        let master_of = |s: u16| {
            ranges
                .iter()
                .position(|r| r.contains(&s))
                .unwrap_or(usize::MAX)
        };
        println!("P = {p} partitions, N = {n} masters (redis-cli --cluster create split)\n");
        println!("partition  index tag  slot   master | table tag  slot   master");
        for k in 0..p {
            let (is, ts) = (index_slots[k as usize], table.slot(k));
            let tag = String::from_utf8_lossy(table.tag(k));
            println!(
                "{k:>9}  {{{k}}}{:pad$}  {is:>5}  {:>6} | {{{tag}}}{:tpad$}  {ts:>5}  {:>6}",
                "",
                master_of(is),
                "",
                master_of(ts),
                pad = 8usize.saturating_sub(k.to_string().len()),
                tpad = 8usize.saturating_sub(tag.len())
            );
        }
        println!();
        println!(
            "master slots:          {:?}",
            ranges
                .iter()
                .map(|r| format!("{}-{}", r.start(), r.end()))
                .collect::<Vec<_>>()
        );
        let ic = counts(&index_slots, &ranges);
        let tc = counts(table_slots, &ranges);
        println!("index tags per master: {ic:?} (spread {})", spread(&ic));
        println!("table tags per master: {tc:?} (spread {})", spread(&tc));
    } else {
        let (iw, iat, iover) = worst_over(&index_slots, args.masters.clone());
        let (tw, tat, tover) = worst_over(table_slots, args.masters.clone());
        let (a, b) = (args.masters.start(), args.masters.end());
        println!("P = {p}, N in {a}..={b} (redis-cli --cluster create split)");
        println!("index tags: worst spread {iw} (at N = {iat}); {iover} sizes with spread > 1");
        println!("table tags: worst spread {tw} (at N = {tat}); {tover} sizes with spread > 1");
    }
    if args.layouts > 0 {
        let (excess, deficit) =
            reshard_metric(table_slots, args.masters.clone(), args.layouts, args.seed);
        println!(
            "resharding: {} random weighted layouts (seed {}): worst excess over proportional share {excess:.3} \
             (rounded up: {}), worst deficit {deficit:.3}",
            args.layouts,
            args.seed,
            excess.ceil()
        );
    }
    ExitCode::SUCCESS
}
