//! The `resp` parser against peer RESP parsers on identical bytes.
//!
//! Groups are streams; ids are `<mode>/<parser>`, mode `whole` (one buffer
//! holding the whole stream) or `chunked_1460` (the stream arriving in
//! 1,460-byte reads, parsed with each parser's incremental API). Throughput is
//! in bytes; `cargo run --release --bin table` turns the results into the
//! BENCHMARKS.md table with frames/s. See README.md.

#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::time::Duration;

use criterion::{
    black_box, criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use shardsub_peer_benches::{parsers, streams, Input, MODES};

fn peers(c: &mut Criterion) {
    for s in streams::all() {
        let input = Input::new(s.bytes, s.frames);
        let mut g = c.benchmark_group(s.name);
        g.throughput(Throughput::Bytes(input.raw.len() as u64));
        // Some peers take tens of milliseconds per pass: flat sampling keeps
        // their run near the measurement time.
        g.sampling_mode(SamplingMode::Flat);
        for mode in MODES {
            for p in parsers::all() {
                let f = p.mode(mode).expect("known mode");
                g.bench_with_input(BenchmarkId::new(mode, p.name), &input, |b, i| {
                    b.iter(|| f(black_box(i), s.touch))
                });
            }
        }
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = peers
}
criterion_main!(benches);
