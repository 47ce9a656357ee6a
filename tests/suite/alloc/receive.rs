//! Receiving allocates nothing per delivered message in steady state: the
//! I/O thread parses in place and copies into recycled worker buffers, the
//! worker hands out borrowed slices. A counting global allocator sees every
//! thread (publisher, I/O threads, workers, control thread), counted in
//! windows of messages (see `alloc::publish`'s note).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shardsub::PubSub;
use testkit::{kinds, Server};

use crate::support::channels;
use crate::GLOBAL;

const BOUND: Duration = Duration::from_secs(30);

/// Publishes `rounds` messages on every channel and waits until the
/// handler has seen them all (spinning on an atomic: the wait itself must
/// not allocate).
fn round_trip(ps: &PubSub, seen: &AtomicU64, chans: &[Vec<u8>], rounds: usize) {
    let target = seen.load(Ordering::Relaxed) + (rounds * chans.len()) as u64;
    let payload = [b'p'; 256];
    for _ in 0..rounds {
        for c in chans {
            ps.publish(c, payload).unwrap();
        }
    }
    let deadline = std::time::Instant::now() + BOUND;
    while seen.load(Ordering::Relaxed) < target {
        assert!(std::time::Instant::now() < deadline, "messages missing");
        std::thread::yield_now();
    }
}

#[test]
fn delivery_allocates_nothing_per_message_in_steady_state() {
    if !testkit::alone() {
        return; // it ran, alone, in a child process
    }
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let seen = Arc::new(AtomicU64::new(0));
        let s2 = seen.clone();
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .workers(4)
            .queue_capacity(1 << 16)
            .envelope(true)
            .io_threads(1)
            .probe_interval(Duration::ZERO)
            .handler(move |_: &[u8], p: &[u8]| {
                assert_eq!(p.len(), 256);
                s2.fetch_add(1, Ordering::Relaxed);
            })
            .build()
            .unwrap();
        let chans = channels("alloc", 100);
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        // Warm-up: buffers, queues and pipelines reach their working size.
        // Bursts of 1000 messages (10 per channel) keep the high-water marks
        // of the worker buffer pools and the publish pipeline fixed; a
        // bigger burst than any before would grow them once more.
        for _ in 0..20 {
            round_trip(&ps, &seen, &chans, 10);
        }
        // Fifty windows of 1000 messages, each until all are delivered: a
        // pipeline or pool growing after a scheduling stall shows in a
        // window or two, one allocation per 1000 messages or more in every
        // one ([`testkit::alloc::Windows`]).
        let windows = GLOBAL.windows(50, |_| round_trip(&ps, &seen, &chans, 10));
        let m = ps.metrics();
        println!(
            "{kind:?}: {windows:?} allocations in windows of 1000 published + delivered messages"
        );
        assert_eq!(
            windows.fewest(),
            0,
            "{kind:?}: every window of 1000 messages allocated: {windows:?}"
        );
        assert_eq!(m.dropped.total(), 0, "{m:?}");
        assert!(m.lag.is_some_and(|l| l.count >= 50_000), "{m:?}");
    }
}
