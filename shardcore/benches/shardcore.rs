//! Criterion benches for shardcore (filled in below).
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};

fn key_slot(c: &mut Criterion) {
    c.bench_function("key_slot/16B", |b| {
        b.iter(|| shardcore::key_slot(std::hint::black_box(b"0123456789abcdef")))
    });
}

criterion_group!(benches, key_slot);
criterion_main!(benches);
