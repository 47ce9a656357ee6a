//! Fire-and-forget publishing allocates nothing in steady state (on one
//! server and on a cluster), under load many publishes share one `write`,
//! and a full socket is not written to again until it is writable.
//!
//! A counting global allocator sees every thread (the I/O thread too), so
//! the count covers the whole path: encode into the staging buffer, swap,
//! copy into the output buffer, write, read the replies, match them.

use std::time::{Duration, Instant};

use shardsub::engine::{Engine, PublishOptions};
use shardsub::PubSub;
use testkit::{kinds, Cluster, Server};

use crate::GLOBAL;

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
    if !testkit::alone() {
        return; // it ran, alone, in a child process
    }
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

/// Fire-and-forget cluster publishes to `channels` (`n` in all), then an
/// acknowledged one on the same connection: its reply comes after theirs.
fn cluster_publish_all(ps: &PubSub, channels: &[Vec<u8>], n: usize, payload: &[u8]) {
    for c in channels.iter().cycle().take(n) {
        ps.publish(c, payload).unwrap();
    }
    let r = ps.publish_wait(b"alloc-end", b"end", Duration::from_secs(10));
    assert!(r.is_ok(), "end marker: {r:?}");
}

/// A cluster instance on `cluster` whose control thread does no periodic
/// work (a topology poll, liveness probes allocate; none of it may fall
/// into a measured window).
fn quiet_cluster_pubsub(cluster: &Cluster) -> PubSub {
    PubSub::builder()
        .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
        .workers(1)
        .handler(|_: &[u8], _: &[u8]| {})
        .poll_interval(Duration::from_secs(3600))
        .probe_interval(Duration::ZERO)
        .build()
        .unwrap()
}

#[test]
fn fire_and_forget_cluster_publish_allocates_nothing_in_steady_state() {
    if !testkit::alone() {
        return; // it ran, alone, in a child process
    }
    let payload = [b'x'; 256];
    let channels: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("alloc:{i}").into_bytes())
        .collect();
    for kind in kinds() {
        let cluster = Cluster::start(kind, 1, 0).unwrap();
        let ps = quiet_cluster_pubsub(&cluster);
        const N: usize = 20_000;
        // Warm up: buffers, the connection's queue of kept publishes and
        // its copies of staged bytes grow to their working size. They grow
        // with the publishes in flight, so one round runs while the node
        // is paused: all N are in flight at once, as deep as the measured
        // window can get.
        cluster_publish_all(&ps, &channels, N, &payload);
        let paused = cluster.node(0).cmd(&[b"CLIENT", b"PAUSE", b"300", b"ALL"]);
        assert!(paused.is_ok(), "{paused:?}");
        cluster_publish_all(&ps, &channels, N, &payload);
        for _ in 0..2 {
            cluster_publish_all(&ps, &channels, N, &payload);
        }
        let before = GLOBAL.allocations();
        for c in channels.iter().cycle().take(N) {
            ps.publish(c, payload).unwrap();
        }
        let after = GLOBAL.allocations();
        // The replies (matched on the I/O thread) are counted too.
        cluster_publish_all(&ps, &channels, 0, &payload);
        let settled = GLOBAL.allocations();
        let m = ps.cluster_metrics().unwrap();
        eprintln!(
            "{kind:?}: {} allocations while publishing {N} on a cluster ({:.2} per publish), \
             {} until all answered (the end marker included)",
            after - before,
            (after - before) as f64 / N as f64,
            settled - before
        );
        assert_eq!(m.publish_failed, 0, "{kind:?}: {m:?}");
        // Nothing per publish (before the in-flight table: 3 per publish,
        // 60,000 here). As on one server, a buffer doubling at a new
        // in-flight peak can show up (a handful), usually 0.
        assert!(
            after - before <= 16,
            "{kind:?}: {} allocations publishing {N} on a cluster",
            after - before
        );
        assert!(settled - before < 32, "{kind:?}: {}", settled - before);
        ps.shutdown();
    }
}

/// Outcomes counted by a `publish_pending(..).then` callback that captures
/// nothing (a zero-sized closure: boxing it allocates nothing).
static THEN_OK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Measures `publish_wait`, `publish_pending(..).wait()` and
/// `publish_pending(..).then` with a capture-free callback on `ps`, after
/// a warm-up with one round all in flight (`pause` pauses the server),
/// and asserts that none allocates per call.
fn acknowledged_publishes_allocate_nothing(ps: &PubSub, what: &str, pause: impl Fn()) {
    use std::sync::atomic::Ordering;
    let payload = [b'x'; 256];
    let channels: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("alloc:{i}").into_bytes())
        .collect();
    const WAITS: usize = 2_000;
    const THENS: u64 = 20_000;
    let then_all = |n: u64| {
        let target = THEN_OK.load(Ordering::Relaxed) + n;
        for c in channels.iter().cycle().take(n as usize) {
            ps.publish_pending(c, payload).then(|r| {
                if r.is_ok() {
                    THEN_OK.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        testkit::wait_for(
            "every publish_pending answered",
            Duration::from_secs(10),
            || Ok((THEN_OK.load(Ordering::Relaxed) >= target).then_some(())),
        )
        .unwrap();
    };
    let wait_all = |pending: bool| {
        for c in channels.iter().cycle().take(WAITS) {
            let r = match pending {
                true => ps.publish_pending(c, payload).wait(),
                false => ps.publish_wait(c, payload, Duration::from_secs(10)),
            };
            assert!(r.is_ok(), "{what}: {r:?}");
        }
    };
    // Warm up as in the fire-and-forget test (one round all in flight).
    then_all(THENS);
    pause();
    then_all(THENS);
    then_all(THENS);
    wait_all(false);
    wait_all(true);

    let before = GLOBAL.allocations();
    wait_all(false);
    let waits = GLOBAL.allocations() - before;
    let before = GLOBAL.allocations();
    wait_all(true);
    let pending_waits = GLOBAL.allocations() - before;
    // A few allocations per round come and go with the timing (0-12
    // per round run alone, 22 once in the parallel suite; where they
    // come from is not pinned down, and they do not follow the call
    // count): the fewest of three rounds is the steady state. One
    // allocation per call would show in every round as at least THENS.
    let rounds: Vec<u64> = (0..3)
        .map(|_| {
            let before = GLOBAL.allocations();
            then_all(THENS);
            GLOBAL.allocations() - before
        })
        .collect();
    let thens = rounds.iter().copied().min().unwrap_or(u64::MAX);
    eprintln!(
        "{what}: {waits} allocations in {WAITS} publish_wait calls, {pending_waits} in \
         {WAITS} publish_pending(..).wait() calls, {rounds:?} in three rounds of {THENS} \
         publish_pending(..).then calls with a capture-free callback (all answered)"
    );
    assert!(
        waits <= 16,
        "{what}: {waits} allocations in {WAITS} publish_wait"
    );
    assert!(
        pending_waits <= 16,
        "{what}: {pending_waits} allocations in {WAITS} publish_pending(..).wait()"
    );
    assert!(
        thens <= 16,
        "{what}: {thens} allocations in {THENS} publish_pending(..).then"
    );
    assert_eq!(ps.metrics().publish_errors, 0, "{what}");
}

#[test]
fn publish_wait_and_publish_pending_allocate_nothing_in_steady_state() {
    if !testkit::alone() {
        return; // it ran, alone, in a child process
    }
    for kind in kinds() {
        let cluster = Cluster::start(kind, 1, 0).unwrap();
        let ps = quiet_cluster_pubsub(&cluster);
        acknowledged_publishes_allocate_nothing(&ps, &format!("{kind:?} cluster"), || {
            let paused = cluster.node(0).cmd(&[b"CLIENT", b"PAUSE", b"300", b"ALL"]);
            assert!(paused.is_ok(), "{paused:?}");
        });
        ps.shutdown();

        let server = Server::start(kind).unwrap();
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .workers(1)
            .probe_interval(Duration::ZERO)
            .build()
            .unwrap();
        acknowledged_publishes_allocate_nothing(&ps, &format!("{kind:?} one server"), || {
            let paused = server.cmd(&[b"CLIENT", b"PAUSE", b"300", b"ALL"]);
            assert!(paused.is_ok(), "{paused:?}");
        });
        ps.shutdown();
    }
}
