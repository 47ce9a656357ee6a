//! Cost of a topology refresh: parsing real 6-master / 6-replica replies
//! (from tests/fixtures), computing the layout, and planning the rewire.
//!
//! `cargo bench -p shardsub-topology --bench topology`

// criterion_group! generates undocumented functions.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use topology::{
    parse_cluster_shards, parse_cluster_slots, plan_rewire, Layout, ParseOptions, SlotMap,
};

const REDIS7_SLOTS: &[u8] = include_bytes!("../tests/fixtures/redis7_slots_resp2.bin");
const VALKEY9_SHARDS: &[u8] = include_bytes!("../tests/fixtures/valkey9_shards_resp3.bin");

fn frame(bytes: &[u8]) -> resp::Frame<'_> {
    match resp::parse(bytes, &resp::Limits::default()) {
        Ok(resp::Status::Complete(p)) => p.frame,
        other => panic!("fixture does not parse: {other:?}"),
    }
}

fn bench(c: &mut Criterion) {
    let opts = ParseOptions::default();
    c.bench_function(
        "resp::parse + parse_cluster_slots, Redis 7 6+6 RESP2 (1050 B)",
        |b| b.iter(|| parse_cluster_slots(&frame(black_box(REDIS7_SLOTS)), &opts).unwrap()),
    );
    c.bench_function(
        "resp::parse + parse_cluster_shards, Valkey 9 6+6 RESP3 (3088 B)",
        |b| b.iter(|| parse_cluster_shards(&frame(black_box(VALKEY9_SHARDS)), &opts).unwrap()),
    );
    let map = parse_cluster_slots(&frame(REDIS7_SLOTS), &opts).unwrap();
    for p in [128u32, 4096] {
        let parts = shardcore::Partitions::new(p).unwrap();
        c.bench_function(&format!("Layout::compute, 6 masters, P = {p}"), |b| {
            b.iter(|| Layout::compute(black_box(&map), &parts))
        });
        // Failover of the owner of slot 0: a new primary id and address.
        let mut failed: SlotMap = map.clone();
        let mut promoted = failed.owner(0).unwrap().replicas[0].clone();
        promoted.role = topology::Role::Primary;
        let i = failed
            .push_shard(topology::Shard {
                primary: promoted,
                replicas: vec![],
            })
            .unwrap();
        let range = failed.ranges()[0].0.clone();
        failed.assign(range, Some(i));
        let (a, b2) = (
            Layout::compute(&map, &parts),
            Layout::compute(&failed, &parts),
        );
        assert!(!plan_rewire(&a, &b2).resubscribe.is_empty());
        c.bench_function(
            &format!("plan_rewire, failover of 1 of 6 masters, P = {p}"),
            |b| b.iter(|| plan_rewire(black_box(&a), black_box(&b2))),
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
