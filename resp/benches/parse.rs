//! Parser throughput on a Pub/Sub push stream: 10,000 RESP3 `smessage`
//! pushes with 256-byte payloads, parsed frame by frame and classified, with
//! the peer parser `redis-protocol` on the same bytes as a reference.
//!
//! `cargo bench -p shardsub-resp --bench parse`
#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use resp::{classify, encode_value, parse, Decoder, Limits, PubSub, Status, Value};

fn push_stream() -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..10_000 {
        let push = Value::Push(vec![
            Value::Bulk(b"smessage".to_vec()),
            Value::Bulk(format!("{{tag{}}}.channel:{i}", i % 128).into_bytes()),
            Value::Bulk(vec![b'x'; 256]),
        ]);
        encode_value(&mut out, &push);
    }
    out
}

fn bench(c: &mut Criterion) {
    let wire = push_stream();
    let mut g = c.benchmark_group("push_stream");
    g.throughput(Throughput::Bytes(wire.len() as u64));
    g.bench_function("parse+classify", |b| {
        b.iter(|| {
            let (mut rest, mut bytes) = (&wire[..], 0);
            while let Ok(Status::Complete(p)) = parse(rest, &Limits::default()) {
                if let Some(PubSub::SMessage { payload, .. }) = classify(&p.frame) {
                    bytes += payload.len();
                }
                rest = &rest[p.consumed..];
            }
            black_box(bytes)
        })
    });
    let mut d = Decoder::default();
    g.bench_function("decoder+classify", |b| {
        b.iter(|| {
            let (mut rest, mut bytes) = (&wire[..], 0);
            while let Ok(Status::Complete(p)) = d.decode(rest) {
                if let Some(PubSub::SMessage { payload, .. }) = classify(&p.frame) {
                    bytes += payload.len();
                }
                rest = &rest[p.consumed..];
            }
            black_box(bytes)
        })
    });
    g.bench_function("redis-protocol (reference)", |b| {
        b.iter(|| {
            let (mut rest, mut n) = (&wire[..], 0);
            while let Ok(Some((_frame, used))) =
                redis_protocol::resp3::decode::complete::decode_range(rest)
            {
                n += 1;
                rest = &rest[used..];
            }
            black_box(n)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
