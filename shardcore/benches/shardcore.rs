//! Criterion benches for shardcore: hash slots, the channel → partition →
//! Redis name path into a caller's buffer, and the resubscribe planner.
//!
//! ```text
//! cargo bench -p shardsub-shardcore --bench shardcore
//! ```
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use shardcore::plan::{plan_resubscribe, PlanOptions};
use shardcore::{channel_hash, cluster_create_ranges, key_slot, worker_of, Partitions};

fn slots(c: &mut Criterion) {
    let mut g = c.benchmark_group("key_slot");
    let k16 = b"user:1234567:abc";
    let k64 = b"org:4242:project:99:document:123456789:revision:000042:comments!";
    let tagged = b"{user:1234567}.notifications:inbox:unread:counter:shard:00000000";
    assert_eq!((k16.len(), k64.len(), tagged.len()), (16, 64, 64));
    g.throughput(Throughput::Elements(1));
    g.bench_function("16B", |b| b.iter(|| key_slot(black_box(k16))));
    g.bench_function("64B", |b| b.iter(|| key_slot(black_box(k64))));
    g.bench_function("64B_tagged", |b| b.iter(|| key_slot(black_box(tagged))));
    g.finish();
}

fn channels(c: &mut Criterion) {
    let mut g = c.benchmark_group("channel");
    let ch = b"chat:room:424242:messages";
    let table = Partitions::new(1024).expect("valid");
    let odd = Partitions::new(1000).expect("valid");
    let mut out = Vec::with_capacity(128);
    g.throughput(Throughput::Elements(1));
    g.bench_function("channel_hash/25B", |b| {
        b.iter(|| channel_hash(black_box(ch)))
    });
    g.bench_function("worker_of/16", |b| b.iter(|| worker_of(black_box(ch), 16)));
    g.bench_function("partition_of/P1024", |b| {
        b.iter(|| table.partition_of(black_box(ch)))
    });
    g.bench_function("redis_channel_into/P1024", |b| {
        b.iter(|| {
            out.clear();
            table.redis_channel_into(black_box(ch), &mut out);
            black_box(out.len())
        })
    });
    g.bench_function("redis_channel_into/P1000", |b| {
        b.iter(|| {
            out.clear();
            odd.redis_channel_into(black_box(ch), &mut out);
            black_box(out.len())
        })
    });
    g.bench_function("partitions_new/P1000", |b| {
        b.iter(|| Partitions::new(black_box(1000)))
    });
    g.finish();
}

fn planner(c: &mut Criterion) {
    const CHANNELS: usize = 1_000_000;
    let table = Partitions::new(1024).expect("valid");
    let ranges = cluster_create_ranges(6);
    let channels: Vec<Vec<u8>> = (0..CHANNELS)
        .map(|i| format!("user:{i}:feed").into_bytes())
        .collect();
    let mut groups: Vec<Vec<&[u8]>> = vec![Vec::new(); 1024];
    for ch in &channels {
        groups[table.partition_of(ch) as usize].push(ch.as_slice());
    }
    let node_of: Vec<usize> = (0..1024)
        .map(|p| {
            ranges
                .iter()
                .position(|r| r.contains(&table.slot(p)))
                .unwrap_or(0)
        })
        .collect();
    let mut g = c.benchmark_group("plan");
    g.sample_size(20);
    g.throughput(Throughput::Elements(CHANNELS as u64));
    g.bench_function("1M_channels/P1024/6_nodes/16_workers", |b| {
        b.iter(|| {
            let plan = plan_resubscribe(
                groups
                    .iter()
                    .enumerate()
                    .map(|(p, chs)| (p as u32, chs.as_slice())),
                |p| node_of.get(p as usize).copied(),
                PlanOptions::new(16),
            )
            .expect("valid options");
            black_box(plan.command_count())
        })
    });
    g.bench_function("group_then_plan/1M_channels", |b| {
        b.iter_batched(
            || (),
            |()| {
                let mut groups: Vec<Vec<&[u8]>> = vec![Vec::new(); 1024];
                for ch in &channels {
                    groups[table.partition_of(ch) as usize].push(ch.as_slice());
                }
                let plan = plan_resubscribe(
                    groups
                        .iter()
                        .enumerate()
                        .map(|(p, chs)| (p as u32, chs.as_slice())),
                    |p| node_of.get(p as usize).copied(),
                    PlanOptions::new(16),
                )
                .expect("valid options");
                black_box(plan.command_count())
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, slots, channels, planner);
criterion_main!(benches);
