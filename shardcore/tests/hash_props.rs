//! Statistical properties of the channel hash, jump hash, shard and worker
//! choice. Inputs are deterministic, so these tests cannot flake.

use shardcore::{channel_hash, jump_consistent_hash, shard_of, worker_of, Partitions};

const CHANNELS: u32 = 1_000_000;

fn channel(i: u32) -> Vec<u8> {
    format!("user:{i}:feed").into_bytes()
}

/// Pearson's chi-square of `counts` against a uniform expectation.
fn chi_square(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

/// Accept if chi-square is below df + 6·sqrt(2·df) (six standard deviations
/// of the chi-square distribution above its mean).
fn assert_uniform(what: &str, counts: &[u64]) {
    let df = (counts.len() - 1) as f64;
    let chi = chi_square(counts);
    let bound = df + 6.0 * (2.0 * df).sqrt();
    assert!(
        chi < bound,
        "{what}: chi-square {chi:.1} over bound {bound:.1} (df {df})"
    );
}

#[test]
fn shard_of_is_uniform_over_a_million_channels() {
    for shards in [2u32, 7, 16, 100] {
        let mut counts = vec![0u64; shards as usize];
        for i in 0..CHANNELS {
            counts[shard_of(&channel(i), shards) as usize] += 1;
        }
        assert_uniform(&format!("shard_of(_, {shards})"), &counts);
    }
}

#[test]
fn partitions_and_workers_are_uniform() {
    let table = Partitions::new(128).expect("valid count");
    let mut parts = vec![0u64; 128];
    let mut workers = vec![0u64; 16];
    // Workers among channels of one shard, and of one partition: the worker
    // choice must not follow the shard or partition choice.
    let mut workers_in_shard = vec![0u64; 16];
    let mut workers_in_partition = vec![0u64; 16];
    for i in 0..CHANNELS {
        let ch = channel(i);
        let p = table.partition_of(&ch);
        let w = worker_of(&ch, 16) as usize;
        parts[p as usize] += 1;
        workers[w] += 1;
        if shard_of(&ch, 16) == 3 {
            workers_in_shard[w] += 1;
        }
        if p == 5 {
            workers_in_partition[w] += 1;
        }
    }
    assert_uniform("partition_of (P=128)", &parts);
    assert_uniform("worker_of (16)", &workers);
    assert_uniform("worker_of within shard 3 of 16", &workers_in_shard);
    assert_uniform("worker_of within partition 5 of 128", &workers_in_partition);
}

#[test]
fn channel_hash_bits_are_balanced() {
    // Every output bit is set about half the time, even for short,
    // similar inputs.
    let mut ones = [0u32; 64];
    let n: u32 = 200_000;
    for i in 0..n {
        let h = channel_hash(&i.to_le_bytes()[..3]);
        for (bit, count) in ones.iter_mut().enumerate() {
            *count += ((h >> bit) & 1) as u32;
        }
    }
    for (bit, &count) in ones.iter().enumerate() {
        let frac = f64::from(count) / f64::from(n);
        assert!((frac - 0.5).abs() < 0.01, "bit {bit}: {frac}");
    }
}

#[test]
fn jump_hash_moves_only_to_the_new_bucket() {
    let keys: Vec<u64> = (0..200_000u32).map(|i| channel_hash(&channel(i))).collect();
    let mut prev: Vec<u32> = keys.iter().map(|&k| jump_consistent_hash(k, 1)).collect();
    for n in 1..=64u32 {
        let next: Vec<u32> = keys
            .iter()
            .map(|&k| jump_consistent_hash(k, n + 1))
            .collect();
        let mut moved = 0u32;
        for (a, b) in prev.iter().zip(&next) {
            assert!(*b <= n);
            if a != b {
                assert_eq!(
                    *b,
                    n,
                    "a key moved between old buckets {a} -> {b} at {n} -> {}",
                    n + 1
                );
                moved += 1;
            }
        }
        let frac = f64::from(moved) / keys.len() as f64;
        let want = 1.0 / f64::from(n + 1);
        let sd = (want * (1.0 - want) / keys.len() as f64).sqrt();
        assert!(
            (frac - want).abs() < 6.0 * sd,
            "{n} -> {}: moved {frac:.5}, expected {want:.5}",
            n + 1
        );
        prev = next;
    }
}

#[test]
fn zero_buckets_act_as_one() {
    assert_eq!(shard_of(b"x", 0), 0);
    assert_eq!(worker_of(b"x", 0), 0);
    assert_eq!(jump_consistent_hash(u64::MAX, 0), 0);
    assert!(jump_consistent_hash(u64::MAX, u32::MAX) < u32::MAX);
}
