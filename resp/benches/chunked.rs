//! A large reply arriving in TCP-sized reads: the resumable `Decoder` against
//! parsing the whole buffer once, and against a parser that restarts on every
//! read (stateless `parse` on the growing buffer), which is quadratic.
//!
//! `cargo bench -p shardsub-resp --bench chunked`

#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use resp::{encode_command, parse, Decoder, Limits, Status};

const CHUNK: usize = 1460;

fn array(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    encode_command(&mut out, std::iter::repeat_n("hello", n));
    out
}

fn decode_chunked(d: &mut Decoder, wire: &[u8]) -> usize {
    let mut end = 0;
    loop {
        end = (end + CHUNK).min(wire.len());
        match d.decode(&wire[..end]) {
            Ok(Status::Complete(p)) => return p.consumed,
            Ok(Status::Incomplete) if end < wire.len() => {}
            other => panic!("{other:?}"),
        }
    }
}

fn parse_restarting(wire: &[u8]) -> usize {
    let mut end = 0;
    loop {
        end = (end + CHUNK).min(wire.len());
        match parse(&wire[..end], &Limits::default()) {
            Ok(Status::Complete(p)) => return p.consumed,
            Ok(Status::Incomplete) if end < wire.len() => {}
            other => panic!("{other:?}"),
        }
    }
}

fn chunked(c: &mut Criterion) {
    let mut g = c.benchmark_group("array_of_bulk");
    g.sample_size(10);
    for n in [10_000, 100_000] {
        let wire = array(n);
        g.throughput(Throughput::Bytes(wire.len() as u64));
        g.bench_with_input(BenchmarkId::new("whole", n), &wire, |b, w| {
            b.iter(|| parse(black_box(w), &Limits::default()).map(|s| s.is_complete()))
        });
        let mut d = Decoder::default();
        g.bench_with_input(BenchmarkId::new("decoder_1460", n), &wire, |b, w| {
            b.iter(|| decode_chunked(&mut d, black_box(w)))
        });
        g.bench_with_input(BenchmarkId::new("restarting_1460", n), &wire, |b, w| {
            b.iter(|| parse_restarting(black_box(w)))
        });
    }
    g.finish();
}

criterion_group!(benches, chunked);
criterion_main!(benches);
