//! The `resp` parser against peer RESP parsers on identical bytes.
//!
//! Groups are streams; ids are `<mode>/<parser>`, mode `whole` (one buffer
//! holding the whole stream) or `chunked_1460` (the stream arriving in
//! 1,460-byte reads, parsed with each parser's incremental API). Throughput is
//! in bytes; `cargo run --release --bin table` turns the results into the
//! resp/BENCHMARKS.md table with frames/s. See README.md.
//!
//! Time is the benchmark thread's CPU time, not wall time: the machine these
//! numbers come from is shared, and wall time there mostly measures how often
//! the thread was preempted. No parser under test uses other threads.

#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{
    black_box, criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use shardsub_peer_benches::{parsers, streams, Input, Touch, MODES};

fn peers(c: &mut Criterion<CpuTime>) {
    for s in streams::all() {
        let input = Input::new(s.bytes, s.frames);
        check_agreement(s.name, &input, s.touch);
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

/// Every parser, in every mode, must return the same tally as `resp` does on
/// the whole buffer (so `-- --test` also proves the work is equivalent).
fn check_agreement(stream: &str, input: &Input, touch: Touch) {
    let reference = (parsers::ours::whole)(input, touch);
    assert_eq!(reference.frames, input.frames, "{stream}");
    for p in parsers::all() {
        for mode in MODES {
            let f = p.mode(mode).expect("known mode");
            assert_eq!(f(input, touch), reference, "{stream} {mode} {}", p.name);
        }
    }
}

fn config() -> Criterion<CpuTime> {
    Criterion::default()
        .with_measurement(CpuTime)
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

/// CPU time of the calling thread, in nanoseconds.
struct CpuTime;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant
    // every Linux kernel supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuTimeFormatter
    }
}

/// Formats nanoseconds of CPU time, and bytes or elements per CPU second.
struct CpuTimeFormatter;

impl ValueFormatter for CpuTimeFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = match typical {
            t if t < 1e3 => (1.0, "ns cpu"),
            t if t < 1e6 => (1e3, "µs cpu"),
            t if t < 1e9 => (1e6, "ms cpu"),
            _ => (1e9, "s cpu"),
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }

    fn scale_throughputs(&self, _typical: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        let (per, units) = match *t {
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) => (n as f64, "MiB/s cpu"),
            Throughput::Elements(n) => (n as f64, "elem/s cpu"),
        };
        let scale = if units.starts_with("MiB") {
            (1u64 << 20) as f64
        } else {
            1.0
        };
        values.iter_mut().for_each(|v| *v = per * 1e9 / *v / scale);
        units
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = peers
}
criterion_main!(benches);
