//! Lent connections (`lend.rs`): a sequential caller writes and reads on
//! its own thread; order, timeouts, lost connections, contention and
//! shutdown hold as on the staging path.

use std::sync::Arc;
use std::time::{Duration, Instant};

use resp::Value;
use testkit::{kinds, Client, FakeServer, Server, Step};

use crate::engine::{Engine, PublishOptions};
use crate::Error;

const BOUND: Duration = Duration::from_secs(20);

/// Long enough that a lend is not taken back for going unused while a
/// test looks at it.
const LONG_LEASE: Duration = Duration::from_secs(60);

fn engine(addr: std::net::SocketAddr) -> Engine {
    Engine::builder()
        .address(addr.to_string())
        .io_threads(1)
        .lease(LONG_LEASE)
        .build()
        .unwrap()
}

fn is_lent(e: &Engine) -> bool {
    e.inner.servers[0].conns[0]
        .lend
        .lent
        .load(std::sync::atomic::Ordering::Acquire)
}

fn await_lent(e: &Engine) {
    testkit::wait_for(
        "the connection lent",
        BOUND,
        || Ok(is_lent(e).then_some(())),
    )
    .unwrap();
}

pub(crate) fn subscriber(addr: std::net::SocketAddr, channel: &[u8]) -> Client {
    let mut sub = Client::connect(addr).unwrap();
    sub.set_timeout(BOUND).unwrap();
    sub.send(&[b"SUBSCRIBE", channel]).unwrap();
    let confirm = sub.read_value().unwrap();
    assert!(matches!(confirm, Value::Array(_)), "{confirm:?}");
    sub
}

/// The payloads a subscriber reads, in order.
pub(crate) fn read_payloads(sub: &mut Client, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|_| match sub.read_value().unwrap() {
            Value::Array(mut parts) if parts.len() == 3 => match parts.pop() {
                Some(Value::Bulk(p)) => p,
                other => panic!("not a message payload: {other:?}"),
            },
            other => panic!("not a message: {other:?}"),
        })
        .collect()
}

/// Gets the first connection lent (a warm-up `PING`), then calls `BLPOP
/// key timeout` on a thread and returns once that call is lent: its caller
/// holds the lend, waiting for the reply.
pub(crate) fn blpop_on_the_lend(
    e: &Arc<Engine>,
    key: &'static str,
    timeout: &'static str,
) -> std::thread::JoinHandle<Result<Value, Error>> {
    e.command(["PING"]).unwrap();
    await_lent(e);
    let lent_before = e.stats().lent;
    let blocked = {
        let e = Arc::clone(e);
        std::thread::spawn(move || e.command(["BLPOP", key, timeout]))
    };
    testkit::wait_for("the BLPOP lent", BOUND, || {
        Ok((e.stats().lent > lent_before).then_some(()))
    })
    .unwrap();
    blocked
}

/// `callers` threads each publish `"{t}:{i}"` for `i` in `0..n` to
/// `channel` with `publish_wait`; `sub` must read every caller's messages,
/// in its order.
fn callers_publish_in_order(
    kind: testkit::ServerKind,
    e: &Arc<Engine>,
    sub: &mut Client,
    channel: &'static [u8],
    callers: usize,
    n: usize,
) {
    let threads: Vec<_> = (0..callers)
        .map(|t| {
            let e = Arc::clone(e);
            std::thread::spawn(move || {
                for i in 0..n {
                    let p = format!("{t}:{i}");
                    let r = e.publish_wait(channel, p.as_bytes(), PublishOptions::classic());
                    assert_eq!(r.unwrap(), 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    each_in_order(kind, sub, callers, n);
}

/// `sub` reads `callers * n` messages: `"{t}:{i}"` for `i` in `0..n` from
/// each caller `t`, each caller's in order, none lost.
pub(crate) fn each_in_order(kind: testkit::ServerKind, sub: &mut Client, callers: usize, n: usize) {
    let got = read_payloads(sub, callers * n);
    for t in 0..callers {
        let mine: Vec<String> = got
            .iter()
            .map(|p| String::from_utf8(p.clone()).unwrap())
            .filter(|p| p.starts_with(&format!("{t}:")))
            .collect();
        let want: Vec<String> = (0..n).map(|i| format!("{t}:{i}")).collect();
        assert_eq!(mine, want, "{kind:?}: caller {t} in order, none lost");
    }
}

/// A fake server that answers the handshake and one `PING` (after which
/// the connection is lent), then takes the command `last` and never
/// answers it.
pub(crate) fn fake_answering_one_ping(last: &[&[u8]]) -> FakeServer {
    let mut hello = Vec::new();
    resp::encode_command(&mut hello, [&b"HELLO"[..], b"3"]);
    let mut ping = Vec::new();
    resp::encode_command(&mut ping, [&b"PING"[..]]);
    let mut unanswered = Vec::new();
    resp::encode_command(&mut unanswered, last);
    FakeServer::start_each(vec![vec![
        Step::expect(hello),
        Step::send(&b"%1\r\n$6\r\nserver\r\n$4\r\nfake\r\n"[..]),
        Step::expect(ping),
        Step::send(&b"+PONG\r\n"[..]),
        Step::expect(unanswered),
        Step::Silence,
    ]])
    .unwrap()
}

#[test]
fn a_sequential_caller_writes_and_reads_itself_and_every_message_arrives_in_order() {
    const N: usize = 600;
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let mut sub = subscriber(server.addr(), b"lend");
        let e = engine(server.addr());
        let before = e.stats();
        let publish_wait = |p: &[u8]| {
            let n = e.publish_wait(b"lend", p, PublishOptions::classic());
            assert_eq!(n.unwrap(), 1, "{kind:?}: one subscriber");
        };
        let mut sent: Vec<Vec<u8>> = Vec::new();
        for i in 0..N {
            let p = format!("w{}", sent.len()).into_bytes();
            if i % 50 == 49 {
                // Other traffic on the connection takes the lend back;
                // the order of the two paths still holds.
                e.publish(b"lend", &p).unwrap();
                sent.push(p);
                // The connection comes back to sequential callers once the
                // thread is idle again: call until one is lent (a staging
                // path for all would never lend, and fails here).
                let lent = e.stats().lent;
                let deadline = Instant::now() + BOUND;
                while e.stats().lent == lent {
                    assert!(
                        Instant::now() < deadline && sent.len() < 20 * N,
                        "{kind:?}: no call lent again after the publish at {i}"
                    );
                    let p = format!("w{}", sent.len()).into_bytes();
                    publish_wait(&p);
                    sent.push(p);
                }
                continue;
            }
            if i % 100 == 30 {
                assert_eq!(
                    e.command(["PING"]).unwrap(),
                    Value::Simple(b"PONG".to_vec()),
                    "{kind:?}"
                );
            }
            publish_wait(&p);
            sent.push(p);
        }
        assert_eq!(
            read_payloads(&mut sub, sent.len()),
            sent,
            "{kind:?}: in order"
        );
        let s = e.stats();
        eprintln!(
            "{kind:?}: {} of {} requests lent, {} writes, {} reads",
            s.lent - before.lent,
            s.requests - before.requests,
            s.writes - before.writes,
            s.reads - before.reads
        );
        assert_eq!(s.failed, before.failed, "{kind:?}");
        assert_eq!(s.error_replies, before.error_replies, "{kind:?}");
    }
}

#[test]
fn two_sequential_callers_share_the_connection_in_order() {
    const N: usize = 300;
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let mut sub = subscriber(server.addr(), b"lend2");
        let e = Arc::new(engine(server.addr()));
        callers_publish_in_order(kind, &e, &mut sub, b"lend2", 2, N);
        eprintln!("{kind:?}: {} of {} lent", e.stats().lent, 2 * N);
    }
}

#[test]
fn four_sequential_callers_combine_on_the_lent_connection() {
    const N: usize = 400;
    const CALLERS: usize = 4;
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let mut sub = subscriber(server.addr(), b"lend4");
        let e = Arc::new(engine(server.addr()));
        e.command(["PING"]).unwrap();
        await_lent(&e);
        let before = e.stats();
        callers_publish_in_order(kind, &e, &mut sub, b"lend4", CALLERS, N);
        let s = e.stats();
        let (lent, requests) = (s.lent - before.lent, s.requests - before.requests);
        let writes = s.writes - before.writes;
        eprintln!("{kind:?}: {lent} of {requests} lent, {writes} writes");
        assert_eq!(s.failed, before.failed, "{kind:?}");
        // The callers send each other's requests: the thread, which would
        // take the lend back for each one staged beside a holder, sends
        // few of them (a caller hands over to it only after waiting
        // `COMBINE_WAIT` for its turn).
        assert!(
            lent * 10 >= requests * 9,
            "{kind:?}: only {lent} of {requests} requests sent on the lent connection"
        );
    }
}

#[test]
fn a_caller_waiting_on_the_lend_gives_way_to_another_submitter() {
    for kind in kinds() {
        // Two servers on one I/O thread: while a caller waits on the first
        // server's lent connection, the thread still serves the second.
        let (first, second) = (Server::start(kind).unwrap(), Server::start(kind).unwrap());
        let e = Arc::new(
            Engine::builder()
                .addresses([first.addr().to_string(), second.addr().to_string()])
                .io_threads(1)
                .lease(LONG_LEASE)
                .build()
                .unwrap(),
        );
        // Waits on the lent connection for 3 s.
        let blocked = blpop_on_the_lend(&e, "lend-nothing", "3");
        // Staged behind the BLPOP: the thread takes the lend back, waking
        // the waiting caller (else it would wait for the lock until the
        // BLPOP's reply, serving nothing else), and sends it.
        let behind = e.command_pending(0, ["PING"]);
        let other = e.command_pending(1, ["PING"]).wait();
        assert_eq!(other.unwrap(), Value::Simple(b"PONG".to_vec()), "{kind:?}");
        assert!(
            !blocked.is_finished(),
            "{kind:?}: the other server waited for the BLPOP"
        );
        assert_eq!(
            behind.wait().unwrap(),
            Value::Simple(b"PONG".to_vec()),
            "{kind:?}"
        );
        let r = blocked.join().unwrap();
        assert_eq!(r.unwrap(), Value::Null, "{kind:?}: BLPOP timed out empty");
        // And the connection serves sequential callers again.
        for _ in 0..50 {
            e.publish_wait(b"lend3", b"y", PublishOptions::classic())
                .unwrap();
        }
    }
}

#[test]
fn a_caller_behind_a_long_held_lend_has_the_thread_send_its_request() {
    // The server answers the BLPOP only once it has the PING staged
    // behind it, then both in order.
    let enc = |args: &[&[u8]]| {
        let mut b = Vec::new();
        resp::encode_command(&mut b, args);
        b
    };
    let fake = FakeServer::start_each(vec![vec![
        Step::expect(enc(&[b"HELLO", b"3"])),
        Step::send(&b"%1\r\n$6\r\nserver\r\n$4\r\nfake\r\n"[..]),
        Step::expect(enc(&[b"PING"])),
        Step::send(&b"+PONG\r\n"[..]),
        Step::expect(enc(&[b"BLPOP", b"k", b"0"])),
        Step::expect(enc(&[b"PING"])),
        Step::send(&b"_\r\n+PONG\r\n"[..]),
        Step::Silence,
    ]])
    .unwrap();
    let e = Arc::new(
        Engine::builder()
            .address(fake.addr().to_string())
            .io_threads(1)
            .request_timeout(BOUND)
            .lease(LONG_LEASE)
            .build()
            .unwrap(),
    );
    let blocked = blpop_on_the_lend(&e, "k", "0");
    // Staged for the lend holder, which waits for the BLPOP's reply: after
    // `COMBINE_WAIT` the caller has the thread take the lend back and send
    // it (were it to wait for its turn, the server would never answer).
    let started = Instant::now();
    let pong = e.command(["PING"]);
    eprintln!(
        "PING behind the held lend: {pong:?} after {:?}",
        started.elapsed()
    );
    assert_eq!(pong.unwrap(), Value::Simple(b"PONG".to_vec()));
    assert_eq!(blocked.join().unwrap().unwrap(), Value::Null);
    assert_eq!(e.stats().failed, 0);
}

/// An engine on `fake` ([`fake_answering_one_ping`]) with request
/// timeout `timeout`, its connection lent after the one `PING` answered.
pub(crate) fn lent_to_fake(fake: &FakeServer, timeout: Duration, lease: Duration) -> Engine {
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .request_timeout(timeout)
        .reconnect_backoff(Duration::from_secs(30), Duration::from_secs(60))
        .lease(lease)
        .build()
        .unwrap();
    assert_eq!(
        e.command(["PING"]).unwrap(),
        Value::Simple(b"PONG".to_vec())
    );
    await_lent(&e);
    e
}

#[test]
fn a_lent_request_still_times_out() {
    let fake = fake_answering_one_ping(&[b"PING"]);
    let timeout = Duration::from_millis(300);
    let e = lent_to_fake(&fake, timeout, LONG_LEASE);
    let started = Instant::now();
    let result = e.command(["PING"]);
    let took = started.elapsed();
    eprintln!("unanswered lent PING: {result:?} after {took:?}");
    assert_eq!(e.stats().lent, 1, "the second PING was lent");
    assert!(
        matches!(result, Err(Error::Timeout { after, .. }) if after == timeout),
        "{result:?}"
    );
    assert!(took >= timeout, "{took:?}");
    // The thread tears the connection down (a timed-out request leaves
    // its reply unmatched) and counts it.
    testkit::wait_for("the disconnect", BOUND, || {
        Ok((e.stats().disconnects == 1).then_some(()))
    })
    .unwrap();
}

#[test]
fn a_connection_killed_while_lent_is_seen_and_replaced() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let e = Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .client_name("lend-kill")
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(50))
            .build()
            .unwrap();
        // Lent right before the kill (a lend unused for LEASE goes back to
        // the thread: on a slow machine, call again).
        let lent = &e.inner.servers[0].conns[0].lend.lent;
        let mut tries = 0;
        loop {
            for _ in 0..5 {
                e.publish_wait(b"k", b"x", PublishOptions::classic())
                    .unwrap();
            }
            tries += 1;
            if lent.load(std::sync::atomic::Ordering::Acquire) || tries == 20 {
                break;
            }
        }
        assert!(lent.load(std::sync::atomic::Ordering::Acquire), "{kind:?}");
        let mut admin = Client::connect(server.addr()).unwrap();
        let killed = admin
            .cmd(&[b"CLIENT", b"KILL", b"SKIPME", b"yes", b"TYPE", b"normal"])
            .unwrap();
        assert_eq!(killed, Value::Integer(1), "{kind:?}");
        // No call comes: the thread sees the end itself (the lend goes
        // unused, the thread takes it back and reads the end of stream).
        testkit::wait_for("the disconnect seen", BOUND, || {
            Ok((e.stats().disconnects == 1).then_some(()))
        })
        .unwrap();
        testkit::wait_for("the reconnect", BOUND, || {
            Ok((e.stats().connects == 2).then_some(()))
        })
        .unwrap();
        let r = e.publish_wait(b"k", b"y", PublishOptions::classic());
        assert!(matches!(r, Ok(0)), "{kind:?}: {r:?}");
        // Killed again in the middle of sequential calls (after the first
        // 100): each call gets its reply or an error, none hangs, and calls
        // succeed again.
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let killer = {
            let calls = Arc::clone(&calls);
            std::thread::spawn(move || {
                testkit::wait_for("100 calls", BOUND, || {
                    Ok((calls.load(std::sync::atomic::Ordering::Relaxed) >= 100).then_some(()))
                })
                .unwrap();
                admin
                    .cmd(&[b"CLIENT", b"KILL", b"SKIPME", b"yes", b"TYPE", b"normal"])
                    .unwrap()
            })
        };
        let (mut ok, mut failed) = (0, 0);
        // Until 100 calls after the kill (bounded: a call that hung would
        // never return, one that spun would reach the bound).
        let mut after_kill = 0;
        for _ in 0..1_000_000 {
            match e.publish_wait(b"k", b"z", PublishOptions::classic()) {
                Ok(_) => ok += 1,
                Err(Error::ConnectionLost { .. } | Error::NotConnected { .. }) => failed += 1,
                Err(other) => panic!("{kind:?}: {other:?}"),
            }
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            after_kill += u32::from(killer.is_finished());
            if after_kill == 100 {
                break;
            }
        }
        assert_eq!(after_kill, 100, "{kind:?}: the kill came");
        assert_eq!(killer.join().unwrap(), Value::Integer(1), "{kind:?}");
        eprintln!("{kind:?}: around the kill {ok} published, {failed} failed");
        testkit::wait_for("publishing again", BOUND, || {
            Ok(e.publish_wait(b"k", b"w", PublishOptions::classic()).ok())
        })
        .unwrap();
    }
}

#[test]
fn shutdown_takes_a_lent_connection_back() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let e = engine(server.addr());
        for _ in 0..5 {
            e.publish_wait(b"s", b"x", PublishOptions::classic())
                .unwrap();
        }
        assert!(is_lent(&e), "{kind:?}");
        e.shutdown();
        let r = e.publish_wait(b"s", b"y", PublishOptions::classic());
        assert!(matches!(r, Err(Error::Shutdown)), "{kind:?}: {r:?}");
        let r = e.command(["PING"]);
        assert!(matches!(r, Err(Error::Shutdown)), "{kind:?}: {r:?}");
    }
}

#[test]
fn a_caller_that_stops_waiting_hands_the_lend_back() {
    let fake = fake_answering_one_ping(&[b"PUBLISH", b"c", b"x"]);
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .request_timeout(Duration::from_secs(30))
        .lease(LONG_LEASE)
        .build()
        .unwrap();
    e.command(["PING"]).unwrap();
    await_lent(&e);
    let wait = Duration::from_millis(200);
    let started = Instant::now();
    let r = e.publish_wait_within(b"c", b"x", PublishOptions::classic(), Some(wait));
    let took = started.elapsed();
    assert!(
        matches!(r, Err(Error::WaitTimeout { after }) if after == wait),
        "{r:?}"
    );
    assert!(took >= wait, "{took:?}");
    assert_eq!(e.stats().lent, 1, "the publish was lent");
    // The caller handed the lend back: the thread, not the caller, waits
    // for that reply now.
    testkit::wait_for("the lend handed back", BOUND, || {
        Ok((!is_lent(&e)).then_some(()))
    })
    .unwrap();
}

#[test]
fn every_sequential_call_after_the_first_is_lent() {
    const N: u64 = 200;
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let e = engine(server.addr());
        for _ in 0..N {
            let n = e.publish_wait(b"first", b"x", PublishOptions::classic());
            assert_eq!(n.unwrap(), 0, "{kind:?}");
        }
        // The first goes through the thread, which lends the connection
        // before it completes that call (its outcome is held back to the
        // end of the turn), so the caller finds it lent from then on. On a
        // starved machine the thread can take the lend back between two
        // calls (it was seen 11 times in 200 with builds and valgrind
        // running beside the test); the next call then goes through the
        // thread and is lent again. A lend that stopped working, or worked
        // every other call, still fails this by far.
        let lent = e.stats().lent;
        assert!(
            (N * 9 / 10..N).contains(&lent),
            "{kind:?}: {lent} of {N} lent"
        );
    }
}
