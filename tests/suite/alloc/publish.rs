//! Fire-and-forget publishing allocates nothing in steady state (on one
//! server and on a cluster), under load many publishes share one `write`,
//! and a full socket is not written to again until it is writable.
//!
//! A counting global allocator sees every thread (the I/O thread too), so
//! the count covers the whole path: encode into the staging buffer, swap,
//! copy into the output buffer, write, read the replies, match them. Each
//! test counts windows of calls, each until all are answered, and checks
//! the fewest ([`testkit::alloc::Windows`]): a buffer growing to a new
//! depth (which the scheduling decides) shows in a window or two, an
//! allocation per call in every one.

use std::time::{Duration, Instant};

use shardsub::engine::Engine;
use shardsub::PubSub;
use testkit::{kinds, Cluster, Server};

use crate::GLOBAL;

/// Publishes `n` messages, then waits (bounded) until all are answered
/// (reading counters: no end marker, whose `Pending` slot goes back to
/// the pool on whichever thread lets go of it last, allocating now and
/// then as the threads happen to run).
fn publish_all(e: &Engine, n: u64, payload: &[u8]) {
    let target = e.stats().replies + n;
    for _ in 0..n {
        e.publish(b"alloc-test", payload).unwrap();
    }
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
        // Ten windows of N publishes, each until all are answered: one
        // allocation per N publishes or more shows in every window.
        const N: u64 = 20_000;
        let windows = GLOBAL.windows(10, |_| publish_all(&e, N, &payload));
        let s = e.stats();
        let writes = s.writes - before_stats.writes;
        let would_block = s.write_would_block - before_stats.write_would_block;
        let published = s.requests - before_stats.requests;
        eprintln!(
            "{kind:?}: {windows:?} allocations in windows of {N} publishes (all answered); \
             {published} requests in {writes} writes = {:.0} publishes per write; \
             {would_block} writes found the socket full",
            published as f64 / writes.max(1) as f64
        );
        assert_eq!(
            windows.fewest(),
            0,
            "{kind:?}: every window of {N} publishes allocated: {windows:?}"
        );
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
        // Ten windows of W publishes, each until all are answered (an
        // acknowledged publish after them, on the same connection).
        const W: usize = 4_000;
        let windows = GLOBAL.windows(10, |_| cluster_publish_all(&ps, &channels, W, &payload));
        let m = ps.cluster_metrics().unwrap();
        eprintln!(
            "{kind:?}: {windows:?} allocations in windows of {W} publishes on a cluster \
             (all answered)"
        );
        assert_eq!(m.publish_failed, 0, "{kind:?}: {m:?}");
        // Nothing per publish (before the in-flight table: 3 per publish).
        assert_eq!(
            windows.fewest(),
            0,
            "{kind:?}: every window of {W} publishes on a cluster allocated: {windows:?}"
        );
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
    const WAITS: usize = 1_000;
    const THENS: u64 = 4_000;
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
    // Warm up as in the fire-and-forget test (one round all in flight),
    // with rounds deeper than a measured window.
    const WARM: u64 = 20_000;
    then_all(WARM);
    pause();
    then_all(WARM);
    then_all(WARM);
    wait_all(false);
    wait_all(true);
    for _ in 0..2 {
        then_all(THENS);
        wait_all(false);
    }

    // Windows of calls of each kind (see the module's note): one
    // allocation per WAITS (or THENS) calls or more shows in every window.
    let waits = GLOBAL.windows(3, |_| wait_all(false));
    let pending_waits = GLOBAL.windows(3, |_| wait_all(true));
    // The `publish_wait` calls after each round are served through a lent
    // connection (`engine::lend`), whose caller swaps the staged requests'
    // queue for its own: the next round's burst must find room as before.
    let thens = GLOBAL.windows(5, |_| {
        then_all(THENS);
        wait_all(false);
    });
    eprintln!(
        "{what}: allocations in windows of {WAITS} publish_wait calls {waits:?}, of {WAITS} \
         publish_pending(..).wait() calls {pending_waits:?}, of {THENS} \
         publish_pending(..).then calls with a capture-free callback and {WAITS} publish_wait \
         calls {thens:?} (all answered)"
    );
    for (windows, calls) in [
        (&waits, "publish_wait"),
        (&pending_waits, "publish_pending(..).wait()"),
        (&thens, "publish_pending(..).then"),
    ] {
        assert_eq!(
            windows.fewest(),
            0,
            "{what}: every window of {calls} calls allocated: {windows:?}"
        );
    }
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
