//! Caller-side writes (`direct.rs`): a lone sequential caller writes its
//! requests itself, and such a request still times out.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use testkit::{kinds, FakeServer, Server, Step};

use crate::{Engine, Error, PublishOptions};

const BOUND: Duration = Duration::from_secs(10);

/// Waits until the engine's only connection is idle as its I/O thread last
/// saw it (open, nothing awaited or unsent): a request may go direct.
fn await_idle(engine: &Engine) {
    let conn = engine.inner.servers[0].conns[0].clone();
    testkit::wait_for("the connection idle", BOUND, || {
        Ok(conn.idle_hint.load(Ordering::Acquire).then_some(()))
    })
    .unwrap();
}

#[test]
fn a_lone_sequential_caller_wakes_its_io_thread_for_almost_no_request() {
    const N: u64 = 400;
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let engine = Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .build()
            .unwrap();
        await_idle(&engine);
        let before = engine.stats();
        for i in 0..N {
            let n = engine
                .publish_pending(b"direct", &i.to_le_bytes(), PublishOptions::classic())
                .wait()
                .unwrap();
            assert_eq!(n, 0);
        }
        let after = engine.stats();
        let wakes = after.wakes - before.wakes;
        eprintln!(
            "{kind:?}: {wakes} I/O-thread wakes, {} writes for {N} sequential publishes",
            after.writes - before.writes
        );
        // Staging every request (as before caller-side writes) wakes the
        // thread once per request; a caller that finds the connection idle
        // writes itself, and one that finds the thread still in its turn
        // leaves it awake. Only the instant between the thread's last look
        // and its poll costs a wake.
        assert!(wakes <= N / 10, "{kind:?}: {wakes} wakes for {N} requests");
        assert_eq!(after.requests - before.requests, N);
        assert_eq!(after.failed, before.failed);
        // Counted after the completions of their read.
        testkit::wait_for("every reply counted", BOUND, || {
            Ok((engine.stats().replies - before.replies == N).then_some(()))
        })
        .unwrap();
    }
}

#[test]
fn a_request_the_caller_wrote_itself_still_times_out() {
    let mut hello = Vec::new();
    resp::encode_command(&mut hello, [&b"HELLO"[..], b"3"]);
    let mut ping = Vec::new();
    resp::encode_command(&mut ping, [&b"PING"[..]]);
    // Answers the handshake, takes the PING and never answers it.
    let script = vec![
        Step::expect(hello),
        Step::send(&b"%1\r\n$6\r\nserver\r\n$4\r\nfake\r\n"[..]),
        Step::expect(ping),
        Step::Silence,
    ];
    let fake = FakeServer::start_each(vec![script]).unwrap();
    let timeout = Duration::from_millis(300);
    let engine = Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .request_timeout(timeout)
        .reconnect_backoff(Duration::from_secs(30), Duration::from_secs(60))
        .build()
        .unwrap();
    // The thread is asleep with nothing due: only its bound on sleeping
    // (the request timeout) lets it see the new request's deadline.
    await_idle(&engine);
    let wakes = engine.stats().wakes;
    let started = Instant::now();
    let result = engine
        .command_pending(0, ["PING"])
        .wait_timeout(timeout * 4);
    let took = started.elapsed();
    eprintln!("unanswered direct PING: {result:?} after {took:?}");
    assert_eq!(
        engine.stats().wakes,
        wakes,
        "written without waking the thread"
    );
    assert!(
        matches!(result, Err(Error::Timeout { after, .. }) if after == timeout),
        "{result:?}"
    );
    assert!(took >= timeout, "{took:?}");
    assert!(took < timeout + Duration::from_millis(250), "{took:?}");
}
