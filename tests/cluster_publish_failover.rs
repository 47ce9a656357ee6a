//! Publishing across a failover, on real clusters (Redis 7 and Valkey 9,
//! 3 masters with a replica each), with a publish-only instance and a
//! separate subscriber instance:
//!
//! - `CLUSTER FAILOVER`: the publish-only instance (30 s poll, no
//!   subscription of its own) stops sending through the demoted node within
//!   1 s of the cluster reporting ok (the demoted node's `cmdstat_spublish`
//!   stops growing), no publish fails, and every channel's sequence arrives
//!   strictly increasing at the subscriber (losses only where it got a gap).
//! - `kill -9` of a primary with a publish hold longer than the promotion:
//!   zero failed publishes, order intact.
//! - A primary with no replica killed, hold 300 ms: publishes to its slots
//!   fail with [`Error::OwnerUnreachable`] after the hold, not before and
//!   not hanging; past the hold's message cap they fail at once with
//!   [`Error::HoldFull`]; with a zero hold they fail at once as before.

mod cluster_support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use shardsub::cluster::ClusterPubSub;
use shardsub::pubsub::Event;
use shardsub::{Error, Handler};
use testkit::{Cluster, ServerKind};

/// Per channel: the last sequence number, numbers that did not increase,
/// numbers that skipped ahead, and the channels that got a gap event.
#[derive(Default)]
struct Seqs {
    last: Mutex<HashMap<Vec<u8>, u64>>,
    reordered: Mutex<Vec<(Vec<u8>, u64, u64)>>,
    skipped: Mutex<HashMap<Vec<u8>, u64>>,
    gaps: Mutex<HashSet<Vec<u8>>>,
    messages: AtomicU64,
    first_reorder: Mutex<Option<Instant>>,
    gap_at: Mutex<Vec<Instant>>,
}

impl Handler for Seqs {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        let Ok(bytes) = <[u8; 8]>::try_from(payload) else {
            self.reordered.lock().push((channel.to_vec(), 0, u64::MAX));
            return;
        };
        let n = u64::from_le_bytes(bytes);
        let mut last = self.last.lock();
        match last.get(channel).copied() {
            Some(prev) if n <= prev => {
                self.first_reorder.lock().get_or_insert_with(Instant::now);
                self.reordered.lock().push((channel.to_vec(), prev, n))
            }
            prev => {
                let expected = prev.map_or(0, |p| p + 1);
                if n > expected {
                    *self.skipped.lock().entry(channel.to_vec()).or_insert(0) += n - expected;
                }
                last.insert(channel.to_vec(), n);
            }
        }
    }

    fn on_event(&self, event: Event<'_>) {
        if let Event::Gap { channels, .. } = event {
            self.gap_at.lock().push(Instant::now());
            let mut g = self.gaps.lock();
            for c in channels.iter() {
                g.insert(c.to_vec());
            }
        }
    }
}

/// What the publisher learned from the publish outcomes.
#[derive(Default)]
struct Outcomes {
    outstanding: Mutex<u64>,
    done: Condvar,
    ok: AtomicU64,
    failed: Mutex<Vec<(Duration, String)>>,
    /// Publishes that reached no subscriber, per channel index.
    unheard: Mutex<HashMap<usize, u64>>,
}

/// Publishes round after round to every channel (payload: the 8-byte LE
/// sequence number, one sequence per channel), each publish's outcome
/// awaited through `publish_then`, until stopped (bounded: 2 minutes).
struct SeqPublisher {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<u64>>>,
    outcomes: Arc<Outcomes>,
}

impl SeqPublisher {
    fn start(ps: Arc<ClusterPubSub>, chans: Vec<Vec<u8>>, pause: Duration) -> SeqPublisher {
        let stop = Arc::new(AtomicBool::new(false));
        let outcomes = Arc::new(Outcomes::default());
        let (s2, o2) = (stop.clone(), outcomes.clone());
        let t0 = Instant::now();
        let handle = std::thread::spawn(move || {
            let mut next = vec![0u64; chans.len()];
            while !s2.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(120) {
                for (i, c) in chans.iter().enumerate() {
                    *o2.outstanding.lock() += 1;
                    let o3 = o2.clone();
                    ps.publish_then(c, &next[i].to_le_bytes(), move |r| {
                        match r {
                            Ok(n) => {
                                o3.ok.fetch_add(1, Ordering::Relaxed);
                                if n == 0 {
                                    *o3.unheard.lock().entry(i).or_insert(0) += 1;
                                }
                            }
                            Err(e) => o3.failed.lock().push((t0.elapsed(), e.to_string())),
                        }
                        let mut n = o3.outstanding.lock();
                        *n -= 1;
                        if *n == 0 {
                            o3.done.notify_all();
                        }
                    });
                    next[i] += 1;
                }
                std::thread::sleep(pause); // pacing, not a wait for a condition
            }
            next
        });
        SeqPublisher {
            stop,
            handle: Some(handle),
            outcomes,
        }
    }

    /// Stops, waits (bounded) for every outcome, returns the next
    /// sequence number per channel.
    fn stop(mut self, bound: Duration) -> (Vec<u64>, Arc<Outcomes>) {
        self.stop.store(true, Ordering::Relaxed);
        let next = self.handle.take().map(|h| h.join().unwrap()).unwrap();
        let deadline = Instant::now() + bound;
        let mut n = self.outcomes.outstanding.lock();
        while *n > 0 && !self.outcomes.done.wait_until(&mut n, deadline).timed_out() {}
        assert_eq!(*n, 0, "publish outcomes still missing after {bound:?}");
        drop(n);
        (next, self.outcomes.clone())
    }
}

impl Drop for SeqPublisher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn seeds(cluster: &Cluster) -> Vec<String> {
    cluster.seed_addrs().iter().map(|a| a.to_string()).collect()
}

/// `cmdstat_spublish` calls on node `i`.
fn spublish_calls(cluster: &Cluster, i: usize) -> u64 {
    let v = cluster
        .node(i)
        .cmd(&[b"INFO", b"commandstats"])
        .expect("info");
    let text = testkit::values::text(&v).unwrap_or_default();
    testkit::values::info_field(&text, "cmdstat_spublish")
        .and_then(|f| {
            f.split(',')
                .find_map(|kv| kv.strip_prefix("calls=").map(|n| n.parse().ok()))
        })
        .flatten()
        .unwrap_or(0)
}

struct Setup {
    cluster: Cluster,
    seqs: Arc<Seqs>,
    sub: ClusterPubSub,
    chans: Vec<Vec<u8>>,
}

fn setup(kind: ServerKind) -> Setup {
    let cluster = Cluster::start(kind, 3, 1).expect("cluster");
    let seqs = Arc::new(Seqs::default());
    let sub = ClusterPubSub::builder()
        .seeds(seeds(&cluster))
        .handler_arc(seqs.clone())
        .workers(2)
        .build()
        .expect("subscriber");
    let chans = cluster_support::channels(300, "pf");
    sub.subscribe(&chans).unwrap();
    sub.wait_active(&chans, Duration::from_secs(20)).unwrap();
    Setup {
        cluster,
        seqs,
        sub,
        chans,
    }
}

/// Waits (bounded) until the subscriber has the last number of every
/// channel, then checks order and losses.
fn check_order(kind: ServerKind, what: &str, s: &Setup, next: &[u64]) {
    let want: Vec<(Vec<u8>, u64)> = s
        .chans
        .iter()
        .zip(next)
        .map(|(c, &n)| (c.clone(), n - 1))
        .collect();
    let all_in = testkit::wait_for("the last numbers", Duration::from_secs(10), || {
        let last = s.seqs.last.lock();
        Ok(want
            .iter()
            .all(|(c, n)| last.get(c) == Some(n))
            .then_some(()))
    });
    let reordered = s.seqs.reordered.lock().clone();
    let gaps = s.seqs.gaps.lock().clone();
    let skipped = s.seqs.skipped.lock().clone();
    let lost_unannounced: Vec<_> = skipped.iter().filter(|(c, _)| !gaps.contains(*c)).collect();
    let lost: u64 = skipped.values().sum();
    eprintln!(
        "{kind:?} {what}: {} messages received, {} reordered, {lost} lost on {} channels \
         (all with a gap: {}), {} channels got a gap; subscriber dropped {:?}",
        s.seqs.messages.load(Ordering::Relaxed),
        reordered.len(),
        skipped.len(),
        lost_unannounced.is_empty(),
        gaps.len(),
        s.sub.metrics().pubsub.dropped
    );
    assert!(
        reordered.is_empty(),
        "{kind:?} {what}: {} messages out of order, first (channel, last, got): {:?}",
        reordered.len(),
        reordered
            .iter()
            .take(40)
            .map(|(c, a, b)| (String::from_utf8_lossy(c).into_owned(), *a, *b))
            .collect::<Vec<_>>()
    );
    assert!(
        lost_unannounced.is_empty(),
        "{kind:?} {what}: losses without a gap event: {:?}",
        lost_unannounced.iter().take(5).collect::<Vec<_>>()
    );
    all_in.unwrap_or_else(|e| {
        let last = s.seqs.last.lock();
        let behind: Vec<_> = want
            .iter()
            .filter(|(c, n)| last.get(c) != Some(n))
            .map(|(c, n)| {
                (
                    String::from_utf8_lossy(c).into_owned(),
                    last.get(c).copied(),
                    *n,
                )
            })
            .collect();
        panic!(
            "{kind:?} {what}: {e}; {} channels behind (channel, got, want): {:?}; subscriber {:?}",
            behind.len(),
            behind.iter().take(5).collect::<Vec<_>>(),
            s.sub.metrics()
        )
    });
}

fn failover(kind: ServerKind) {
    let mut s = setup(kind);
    let publ = Arc::new(
        ClusterPubSub::builder()
            .seeds(seeds(&s.cluster))
            .handler(|_: &[u8], _: &[u8]| {})
            .workers(1)
            .build()
            .expect("publisher"),
    );
    let publisher = SeqPublisher::start(publ.clone(), s.chans.clone(), Duration::from_millis(2));
    let old = s.cluster.masters()[0];
    let replica = s.cluster.replicas_of(old)[0];
    std::thread::sleep(Duration::from_millis(300)); // some traffic before the change
    let before = spublish_calls(&s.cluster, old);
    let fo_at = Instant::now();
    s.cluster.failover(replica).expect("failover");
    let ok_at = Instant::now();
    eprintln!("failover took {:?}", ok_at - fo_at);
    // Within 1 s of cluster ok, nothing is sent through the demoted node.
    let deadline = ok_at + Duration::from_secs(1);
    let mut calls = spublish_calls(&s.cluster, old);
    let mut stopped_at = None;
    while Instant::now() < deadline + Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(50)); // sampling a counter
        let now = spublish_calls(&s.cluster, old);
        if now != calls {
            stopped_at = None;
            calls = now;
        } else if stopped_at.is_none() {
            stopped_at = Some(Instant::now());
        }
    }
    let after_ok = calls - before;
    let (next, outcomes) = publisher.stop(Duration::from_secs(10));
    let m = publ.metrics();
    eprintln!(
        "{kind:?} failover: {} publishes ok, {} failed; demoted node took {after_ok} SPUBLISH \
         from the failover on; quiet from {:?} after cluster ok; rebuilds {:?}; {:?}",
        outcomes.ok.load(Ordering::Relaxed),
        outcomes.failed.lock().len(),
        stopped_at.map(|t| t.saturating_duration_since(ok_at)),
        m.rebuilds,
        (m.holds, m.redirects)
    );
    assert_eq!(m.rebuilds.poll, 0, "{kind:?}: the 30 s poll ran");
    assert!(
        stopped_at.is_some_and(|t| t <= deadline),
        "{kind:?}: the publish-only instance still sends through the demoted node 1 s after \
         cluster ok ({:?})",
        m.rebuilds
    );
    let failed = outcomes.failed.lock().clone();
    assert!(
        failed.is_empty(),
        "{kind:?}: {} failed publishes, first {:?}",
        failed.len(),
        failed.first()
    );
    eprintln!(
        "first reorder {:?} after failover start; gaps at {:?}",
        s.seqs.first_reorder.lock().map(|t| t - fo_at),
        s.seqs
            .gap_at
            .lock()
            .iter()
            .map(|t| *t - fo_at)
            .collect::<Vec<_>>()
    );
    {
        let unheard = outcomes.unheard.lock();
        let skipped = s.seqs.skipped.lock();
        let gaps = s.seqs.gaps.lock();
        let odd: Vec<_> = s
            .chans
            .iter()
            .enumerate()
            .filter(|(_, c)| skipped.contains_key(*c) && !gaps.contains(*c))
            .map(|(i, c)| (i, skipped.get(c).copied(), unheard.get(&i).copied()))
            .take(8)
            .collect();
        eprintln!(
            "unheard on {} channels; lossy without gap (index, lost, unheard): {odd:?}; sub {:?}",
            unheard.len(),
            s.sub.metrics()
        );
    }
    check_order(kind, "failover", &s, &next);
    publ.shutdown();
    s.sub.shutdown();
}

fn kill(kind: ServerKind) {
    let mut s = setup(kind);
    let publ = Arc::new(
        ClusterPubSub::builder()
            .seeds(seeds(&s.cluster))
            .handler(|_: &[u8], _: &[u8]| {})
            .workers(1)
            .publish_hold(Duration::from_secs(15))
            .build()
            .expect("publisher"),
    );
    let publisher = SeqPublisher::start(publ.clone(), s.chans.clone(), Duration::from_millis(20));
    std::thread::sleep(Duration::from_millis(300)); // some traffic before the change
    let victim = s.cluster.masters()[1];
    let t0 = Instant::now();
    s.cluster.kill_primary(victim).expect("kill primary");
    let promoted = t0.elapsed();
    std::thread::sleep(Duration::from_millis(1500)); // traffic after the change
    let (next, outcomes) = publisher.stop(Duration::from_secs(20));
    let m = publ.metrics();
    let failed = outcomes.failed.lock().clone();
    eprintln!(
        "{kind:?} kill -9: cluster ok {promoted:?} after the kill; {} publishes ok, {} failed; \
         {m:?}",
        outcomes.ok.load(Ordering::Relaxed),
        failed.len(),
    );
    assert!(
        failed.is_empty(),
        "{kind:?}: {} failed publishes, first {:?}, last {:?}",
        failed.len(),
        failed.first(),
        failed.last()
    );
    check_order(kind, "kill -9", &s, &next);
    publ.shutdown();
    s.sub.shutdown();
}

#[test]
fn publish_only_instance_follows_failover_in_order() {
    for kind in testkit::kinds() {
        failover(kind);
    }
}

#[test]
fn publishes_are_held_through_a_primary_kill() {
    for kind in testkit::kinds() {
        kill(kind);
    }
}

/// A channel whose partition lives on master `node`.
fn channel_on(cluster: &Cluster, ps: &ClusterPubSub, node: usize, prefix: &str) -> Vec<u8> {
    let parts = ps.partitions();
    (0..100_000)
        .map(|i| format!("{prefix}:{i}").into_bytes())
        .find(|ch| cluster.owner_of_slot(parts.slot(parts.partition_of(ch))) == Some(node))
        .expect("a channel on the node")
}

/// A primary with no replica is killed: held publishes fail with
/// `OwnerUnreachable` once the hold (300 ms) is over, not before and not
/// hanging; past the hold's cap they fail at once with `HoldFull`; a zero
/// hold fails at once, as before.
fn bounded(kind: ServerKind) {
    let mut cluster = Cluster::start(kind, 3, 0).expect("cluster");
    let build = |hold: Duration| {
        ClusterPubSub::builder()
            .seeds(seeds(&cluster))
            .handler(|_: &[u8], _: &[u8]| {})
            .workers(1)
            .publish_hold(hold)
            .publish_hold_limit(10, 1 << 20)
            .retry_window(Duration::from_millis(200))
            .build()
            .expect("publisher")
    };
    let held = build(Duration::from_millis(300));
    let zero = build(Duration::ZERO);
    let [a, b, _] = cluster.masters()[..] else {
        panic!("3 masters")
    };
    let dead = channel_on(&cluster, &held, a, "dead");
    let alive = channel_on(&cluster, &held, b, "alive");
    cluster.node_mut(a).expect("node").kill();
    // Twenty publishes at once: ten held, ten refused at once (cap 10).
    let (tx, rx) = std::sync::mpsc::channel();
    let t0 = Instant::now();
    for i in 0..20u64 {
        let tx = tx.clone();
        held.publish_then(&dead, &i.to_le_bytes(), move |r| {
            let _ = tx.send((i, t0.elapsed(), r));
        });
    }
    let mut outcomes: Vec<(u64, Duration, Result<i64, Error>)> = (0..20)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("an outcome"))
        .collect();
    outcomes.sort_by_key(|o| o.0);
    for (i, at, r) in &outcomes {
        if *i < 10 {
            assert!(
                matches!(r, Err(Error::OwnerUnreachable { held, .. })
                    if *held >= Duration::from_millis(300)),
                "{kind:?}: publish {i}: {r:?} after {at:?}"
            );
            assert!(
                *at >= Duration::from_millis(300) && *at < Duration::from_millis(1500),
                "{kind:?}: publish {i} failed after {at:?}"
            );
        } else {
            assert!(
                matches!(r, Err(Error::HoldFull { messages: 10, .. })),
                "{kind:?}: publish {i}: {r:?}"
            );
            assert!(*at < Duration::from_millis(300), "{kind:?}: {at:?}");
        }
    }
    let failed_at: Vec<Duration> = outcomes.iter().take(10).map(|o| o.1).collect();
    eprintln!(
        "{kind:?}: held publishes failed after {:?}..{:?}: {}",
        failed_at.iter().min(),
        failed_at.iter().max(),
        outcomes[0].2.as_ref().unwrap_err()
    );
    let m = held.metrics();
    assert_eq!((m.holds.expired, m.holds.full), (10, 10), "{m:?}");
    assert_eq!(m.holds.messages, 0, "{m:?}");
    // The other masters still take publishes.
    let r = held.publish_wait(&alive, b"x", Duration::from_secs(2));
    assert!(r.is_ok(), "{kind:?}: {r:?}");
    // No hold: fails without waiting for a new owner.
    let t = Instant::now();
    let r = zero.publish_wait(&dead, b"x", Duration::from_secs(5));
    let took = t.elapsed();
    assert!(
        r.is_err()
            && !matches!(
                r,
                Err(Error::OwnerUnreachable { .. } | Error::HoldFull { .. })
            ),
        "{kind:?}: {r:?}"
    );
    assert!(took < Duration::from_secs(1), "{kind:?}: {took:?}");
    eprintln!(
        "{kind:?}: zero hold fails after {took:?}: {}",
        r.unwrap_err()
    );
}

#[test]
fn held_publishes_fail_after_the_hold_and_past_the_cap() {
    for kind in testkit::kinds() {
        bounded(kind);
    }
}
