//! The publishing phase: `--publishers` threads, each publishing its share
//! of the channels (channel `i` belongs to publisher `i % P`, so each
//! channel's sequence numbers leave in order) to random channels at its
//! share of the target rate, paced, or flat out; the ramp's steps; and the
//! sampler, which takes one `Sample` a second and feeds the live view.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fleet_report::Sample;
use shardsub::PubSub;

use crate::account::Books;
use crate::fleet::{self, Instances};
use crate::live::Live;
use crate::node::{self, Lag};
use crate::options::Options;
use crate::servers::{self, library_cpu};
use crate::target::Probe;

/// Messages due `t` seconds in (the integral of the target rate), `None`
/// when flat out.
pub fn due_at(o: &Options, t: f64) -> Option<f64> {
    if let Some(r) = o.ramp {
        let steps = (t / r.step_s).floor();
        let full: f64 = (0..steps as u64)
            .map(|j| r.start as f64 * r.factor.powi(j as i32) * r.step_s)
            .sum();
        return Some(full + r.rate_at(t) * (t - steps * r.step_s));
    }
    (o.rate > 0).then_some(o.rate as f64 * t)
}

/// The target rate `t` seconds in (0 = flat out).
pub fn target_at(o: &Options, t: f64) -> f64 {
    o.ramp.map_or(o.rate as f64, |r| r.rate_at(t))
}

/// Publishes until `stop`, on the calling thread, as publisher `k`.
fn publish_loop(o: &Options, k: usize, ps: &PubSub, books: &Books, names: &[Vec<u8>], run: &Run) {
    let p = o.publishers;
    let mine = o.channels.div_ceil(p);
    let mut body = Vec::with_capacity(books.payload_len());
    let mut buf = Vec::with_capacity(books.payload_len());
    // Repeatable: one stream per seed and publisher.
    let mut rng = testkit::Rng::new(o.seed ^ testkit::Rng::mix(k as u64));
    let mut sent = 0u64;
    while !run.stop.load(Ordering::Relaxed) {
        let t = run.begin.elapsed().as_secs_f64();
        let due = due_at(o, t).map_or(sent + 256, |d| (d / p as f64) as u64);
        if sent >= due {
            // Ahead of the pace: the only thing to wait for is time.
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        // Catch up in bounded bursts. `publish` waits by itself when a
        // connection has 4 MiB staged, so memory stays bounded.
        let burst = (due - sent).min(512);
        for _ in 0..burst {
            let mut i = k + p * rng.below(mine as u64) as usize;
            if i >= o.channels {
                i = k;
            }
            books.publish(ps, names, i, &mut body, &mut buf);
        }
        sent += burst;
        run.published.fetch_add(burst, Ordering::Relaxed);
    }
}

/// What the publishers and the sampler share.
pub struct Run {
    pub begin: Instant,
    pub stop: AtomicBool,
    pub published: AtomicU64,
}

impl Run {
    pub fn new() -> Run {
        Run {
            begin: Instant::now(),
            stop: AtomicBool::new(false),
            published: AtomicU64::new(0),
        }
    }
}

/// Runs the publishers and the sampler until `--seconds` are up and
/// `faults_done()` (or the ramp found its knee, or 60 s more passed).
/// Returns the samples and why it stopped early, if it did.
#[allow(clippy::too_many_arguments)]
pub fn phase(
    o: &Options,
    probe: &Probe,
    inst: &Instances,
    books: &Books,
    names: &[Vec<u8>],
    lag: &Lag,
    run: &Run,
    faults_done: &(dyn Fn() -> bool + Sync),
) -> (Vec<Sample>, Option<String>) {
    let mut samples = Vec::new();
    let mut early = None;
    std::thread::scope(|s| {
        for (k, ps) in inst.publishers.iter().enumerate() {
            s.spawn(move || publish_loop(o, k, ps, books, names, run));
        }
        let mut live = Live::new(o);
        let knee_us = o.knee_lag_ms * 1000;
        let hard_end = Duration::from_secs(o.seconds + 60);
        let mut prev = Prev::read(probe, inst, run);
        let tick = Duration::from_millis(250);
        for n in 1u64.. {
            let next = run.begin + tick * n as u32;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            if n % 4 != 0 {
                live.tick(run.begin.elapsed(), inst, run);
                continue;
            }
            let now = Prev::read(probe, inst, run);
            let window = lag.take_window();
            let secs = now.at.duration_since(prev.at).as_secs_f64().max(1e-3);
            let t_s = run.begin.elapsed().as_secs_f64();
            let sample = Sample {
                t_s,
                published_per_s: (now.published - prev.published) as f64 / secs,
                delivered_per_s: (now.delivered - prev.delivered) as f64 / secs,
                lag_p50_us: node::quantile_us(&window, 0.5).unwrap_or(0),
                lag_p99_us: node::quantile_us(&window, 0.99).unwrap_or(0),
                drops: now.drops - prev.drops,
                gaps: now.gaps - prev.gaps,
                connections: fleet::connections(inst),
                rebuilds: now.rebuilds.saturating_sub(prev.rebuilds),
                rate_target: target_at(o, t_s - secs / 2.0),
                server_cpu_cores: Some((now.server_cpu - prev.server_cpu).max(0.0) / secs),
                client_cpu_cores: Some((now.client_cpu - prev.client_cpu).max(0.0) / secs),
            };
            live.sample(&sample, inst, run);
            samples.push(sample);
            // The knee as the report finds it (most of a step's samples over
            // the threshold, or dropping), over the steps completed so far.
            let n = samples.len();
            let stepped = n >= 2 && samples[n - 1].rate_target != samples[n - 2].rate_target;
            let knee = o.ramp.is_some()
                && stepped
                && fleet_report::knee(&samples[..n - 1], knee_us).reason != "not reached";
            prev = now;
            let elapsed = run.begin.elapsed();
            if knee {
                early = Some("the ramp passed the knee (lag p99 or drops)".to_string());
                break;
            }
            if elapsed >= Duration::from_secs(o.seconds) && faults_done() {
                break;
            }
            if elapsed >= hard_end {
                early = Some("a fault was still running 60 s past --seconds".into());
                break;
            }
        }
        run.stop.store(true, Ordering::Relaxed);
        live.finish();
    });
    (samples, early)
}

/// The counters a sample takes differences of.
struct Prev {
    at: Instant,
    published: u64,
    delivered: u64,
    drops: u64,
    gaps: u64,
    rebuilds: u64,
    server_cpu: f64,
    client_cpu: f64,
}

impl Prev {
    fn read(probe: &Probe, inst: &Instances, run: &Run) -> Prev {
        let fleet = &inst.fleet;
        Prev {
            at: Instant::now(),
            published: run.published.load(Ordering::Relaxed),
            delivered: node::total(fleet, |n| &n.delivered),
            drops: node::dropped(fleet),
            gaps: node::total(fleet, |n| &n.gap_events),
            rebuilds: fleet::rebuilds(inst),
            server_cpu: servers::snapshot(probe).values().map(|c| c.cpu).sum(),
            client_cpu: library_cpu(),
        }
    }
}
