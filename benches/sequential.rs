//! Does the flush delay slow down callers that wait for each reply?
//!
//! One engine with the delay off, one with 100 µs, against the same real
//! server (Redis; `SHARDSUB_SERVERS=valkey` for Valkey). Measured two ways
//! in one run:
//!
//! 1. criterion: one sequential caller doing `PUBLISH` + wait, per engine;
//! 2. an interleaved comparison (the engines take turns in blocks of 100
//!    requests; median per-request latency) printed as a table, for one
//!    sequential caller and for two concurrent sequential callers (the case
//!    that made another client 30x slower).
//!
//! ```text
//! cargo bench -p shardsub --bench sequential
//! cargo bench -p shardsub --bench sequential -- table   # the table only (no criterion bench matches)
//! ```

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use shardsub::engine::{Engine, PublishOptions};
use testkit::Server;

fn engine(server: &Server, delay: Duration) -> Arc<Engine> {
    Arc::new(
        Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .flush_delay(delay)
            .build()
            .expect("engine connects"),
    )
}

fn publish_and_wait(e: &Engine) {
    let n = e
        .publish_pending(b"bench", &[b'x'; 64], PublishOptions::classic())
        .wait()
        .expect("publish");
    assert_eq!(n, 0);
}

/// Per-request latencies of `callers` threads, each doing `n` sequential
/// publish-and-wait calls at the same time.
fn latencies(e: &Arc<Engine>, callers: usize, n: usize) -> Vec<Duration> {
    let one = |e: &Engine| {
        (0..n)
            .map(|_| {
                let t = Instant::now();
                publish_and_wait(e);
                t.elapsed()
            })
            .collect::<Vec<_>>()
    };
    if callers == 1 {
        return one(e);
    }
    let threads: Vec<_> = (0..callers)
        .map(|_| {
            let e = e.clone();
            std::thread::spawn(move || {
                (0..n)
                    .map(|_| {
                        let t = Instant::now();
                        publish_and_wait(&e);
                        t.elapsed()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().expect("caller"))
        .collect()
}

/// (median, 90th percentile, mean) in microseconds.
fn summary(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = v.iter().map(|d| us(*d)).sum::<f64>() / v.len() as f64;
    (us(v[v.len() / 2]), us(v[v.len() * 9 / 10]), mean)
}

fn server() -> Server {
    let kind = testkit::kinds().first().copied().expect("a server kind");
    Server::start(kind).expect("server starts")
}

fn interleaved(_c: &mut Criterion) {
    let server = server();
    let off = engine(&server, Duration::ZERO);
    let on = engine(&server, Duration::from_micros(100));
    // The two engines take turns in blocks of 100 requests per caller, so
    // both see the same machine load; medians resist load spikes.
    const ROUNDS: usize = 40;
    const BLOCK: usize = 100;
    println!(
        "\nsequential callers, {:?}, PUBLISH 64 B + wait, {} requests per engine and caller, \
         alternating blocks of {BLOCK}",
        server.kind(),
        ROUNDS * BLOCK
    );
    println!("| callers | flush delay | median µs | p90 µs | mean µs | rate (1/median) req/s per caller | on/off rate |");
    println!("|---|---|---|---|---|---|---|");
    for callers in [1usize, 2] {
        latencies(&off, callers, BLOCK); // warm up
        latencies(&on, callers, BLOCK);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            a.extend(latencies(&off, callers, BLOCK));
            b.extend(latencies(&on, callers, BLOCK));
        }
        let (am, ap, amean) = summary(a);
        let (bm, bp, bmean) = summary(b);
        println!(
            "| {callers} | off | {am:.1} | {ap:.1} | {amean:.1} | {:.0} | |",
            1e6 / am
        );
        println!(
            "| {callers} | 100 µs | {bm:.1} | {bp:.1} | {bmean:.1} | {:.0} | {:.3} |",
            1e6 / bm,
            am / bm
        );
    }
}

fn criterion_sequential(c: &mut Criterion) {
    let server = server();
    let off = engine(&server, Duration::ZERO);
    let on = engine(&server, Duration::from_micros(100));
    let mut g = c.benchmark_group("sequential_publish_wait");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.bench_function("flush_delay_off", |b| b.iter(|| publish_and_wait(&off)));
    g.bench_function("flush_delay_100us", |b| b.iter(|| publish_and_wait(&on)));
    g.finish();
}

criterion_group!(benches, interleaved, criterion_sequential);
criterion_main!(benches);
