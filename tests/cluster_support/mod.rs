//! Shared helpers for the cluster tests: a recording handler, channel
//! names, continuous publishing, and bounded waits.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use shardsub::cluster::ClusterPubSub;
use shardsub::pubsub::Event;
use shardsub::Handler;
use testkit::Cluster;

/// Records, per channel, the last payload number seen, and every gap.
#[derive(Default)]
pub struct Recorder {
    pub messages: AtomicU64,
    pub seen: Mutex<HashMap<Vec<u8>, u64>>,
    pub gaps: Mutex<HashSet<Vec<u8>>>,
    pub gap_events: AtomicU64,
}

impl Handler for Recorder {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        let n = std::str::from_utf8(payload)
            .ok()
            .and_then(|p| p.parse::<u64>().ok())
            .unwrap_or(0);
        let mut seen = self.seen.lock();
        let e = seen.entry(channel.to_vec()).or_insert(0);
        *e = (*e).max(n);
    }

    fn on_event(&self, event: Event<'_>) {
        if let Event::Gap { channels, .. } = event {
            self.gap_events.fetch_add(1, Ordering::Relaxed);
            let mut g = self.gaps.lock();
            for c in channels.iter() {
                g.insert(c.to_vec());
            }
        }
    }
}

impl Recorder {
    /// Channels whose latest payload is at least `n`.
    pub fn count_at_least(&self, channels: &[Vec<u8>], n: u64) -> usize {
        let seen = self.seen.lock();
        channels
            .iter()
            .filter(|c| seen.get(*c).is_some_and(|&v| v >= n))
            .count()
    }
}

pub fn channels(n: usize, prefix: &str) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}:{i}").into_bytes())
        .collect()
}

/// Publishes `round` to every channel and waits until each has been seen
/// with a payload ≥ `round` (bounded). Returns the channels still missing.
pub fn publish_round_and_wait(
    ps: &ClusterPubSub,
    rec: &Recorder,
    chans: &[Vec<u8>],
    round: u64,
    timeout: Duration,
) -> Vec<Vec<u8>> {
    let payload = round.to_string();
    let deadline = Instant::now() + timeout;
    let mut missing: Vec<Vec<u8>> = chans.to_vec();
    while Instant::now() < deadline {
        for c in &missing {
            ps.publish(c, payload.as_bytes()).expect("publish");
        }
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            let seen = rec.seen.lock();
            missing.retain(|c| seen.get(c).is_none_or(|&v| v < round));
            drop(seen);
            if missing.is_empty() {
                return missing;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    missing
}

/// Publishes to every channel in turn, round after round, until stopped.
pub struct Publisher {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<u64>>,
}

impl Publisher {
    pub fn start(ps: Arc<ClusterPubSub>, chans: Vec<Vec<u8>>) -> Publisher {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut sent = 0u64;
            let start = Instant::now();
            // Bounded: at most 2 minutes, a pause between rounds.
            while !s2.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(120) {
                for c in &chans {
                    let _ = ps.publish(c, b"0");
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(150));
            }
            sent
        });
        Publisher {
            stop,
            handle: Some(handle),
        }
    }

    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().map_or(0, |h| h.join().unwrap_or(0))
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A node-grouped `ClusterPubSub` on `cluster` with 2 workers, recording
/// into `rec`.
pub fn engine(cluster: &Cluster, rec: &Arc<Recorder>) -> ClusterPubSub {
    engine_with(cluster, rec.clone())
}

/// The builder every cluster test starts from: `cluster`'s seeds, 2
/// workers, `handler`.
pub fn builder(cluster: &Cluster, handler: Arc<dyn Handler>) -> shardsub::cluster::ClusterBuilder {
    ClusterPubSub::builder()
        .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
        .handler_arc(handler)
        .workers(2)
}

/// A node-grouped `ClusterPubSub` on `cluster` with 2 workers.
pub fn engine_with(cluster: &Cluster, handler: Arc<dyn Handler>) -> ClusterPubSub {
    builder(cluster, handler).build().expect("cluster pubsub")
}

/// `CLIENT LIST` entries named `name` on node `i`.
pub fn named_clients(cluster: &Cluster, i: usize, name: &str) -> usize {
    let v = cluster
        .node(i)
        .cmd(&[b"CLIENT", b"LIST"])
        .expect("client list");
    let text = testkit::values::text(&v).unwrap_or_default();
    text.lines()
        .filter(|l| l.split(' ').any(|f| f == format!("name={name}")))
        .count()
}
