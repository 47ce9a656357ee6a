//! Fire-and-forget publishing allocates nothing in steady state, under
//! load many publishes share one `write`, and a full socket is not written
//! to again until it is writable.
//!
//! A counting global allocator sees every thread (the I/O thread too), so
//! the count covers the whole path: encode into the staging buffer, swap,
//! copy into the output buffer, write, read the replies, match them.

use std::time::{Duration, Instant};

use shardsub::{Engine, PublishOptions};
use testkit::alloc::CountingAlloc;
use testkit::{kinds, Server};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::new();

/// Publishes `n` messages, then waits (bounded) until all are answered.
fn publish_all(e: &Engine, n: u64, payload: &[u8]) {
    let target = e.stats().replies + n;
    for _ in 0..n {
        e.publish(b"alloc-test", payload).unwrap();
    }
    // A marker request: its reply comes after every publish's.
    let marker = e.publish_pending(b"alloc-test", b"end", PublishOptions::classic());
    marker.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.stats().replies < target {
        assert!(Instant::now() < deadline, "replies missing");
        std::thread::yield_now();
    }
}

#[test]
fn fire_and_forget_publish_allocates_nothing_in_steady_state() {
    let payload = [b'x'; 256];
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let e = Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .build()
            .unwrap();
        // Warm up: buffers grow to their working size.
        for _ in 0..3 {
            publish_all(&e, 200_000, &payload);
        }
        let before_stats = e.stats();
        let before = GLOBAL.allocations();
        const N: u64 = 200_000;
        for _ in 0..N {
            e.publish(b"alloc-test", &payload).unwrap();
        }
        let after = GLOBAL.allocations();
        // Let the I/O thread finish (its work is counted too).
        publish_all(&e, 0, &payload);
        let settled = GLOBAL.allocations();
        let s = e.stats();
        let writes = s.writes - before_stats.writes;
        let would_block = s.write_would_block - before_stats.write_would_block;
        let published = s.requests - before_stats.requests;
        eprintln!(
            "{kind:?}: {} allocations while publishing {N}, {} until all answered \
             (the end marker's Pending included); {published} requests in {writes} writes \
             = {:.0} publishes per write; {would_block} writes found the socket full",
            after - before,
            settled - before,
            published as f64 / writes.max(1) as f64
        );
        // Nothing is allocated per publish. What can show up is a buffer
        // doubling when the in-flight depth reaches a new peak (the request
        // queue, at most ~35k entries deep): a handful per window, usually 0.
        assert!(
            after - before <= 16,
            "{kind:?}: {} allocations on the publish path",
            after - before
        );
        // The end marker allocates its handle (a few allocations), nothing per publish.
        assert!(settled - before < 32, "{kind:?}: {}", settled - before);
        assert!(
            published as f64 / writes.max(1) as f64 >= 32.0,
            "{kind:?}: {published} publishes in {writes} writes"
        );
        // After a `WouldBlock` the I/O thread waits for the socket to become
        // writable: at most about one full-socket write per successful one,
        // not one per loop turn.
        assert!(
            would_block <= writes + 16,
            "{kind:?}: {would_block} writes found the socket full, {writes} wrote"
        );
    }
}
