//! Panic reporting of the I/O threads, on real servers.

use std::time::Duration;

use testkit::{kinds, Server};

use crate::engine::Engine;
use crate::{Runtime, Value};

const BOUND: Duration = Duration::from_secs(10);

#[test]
fn a_panicked_io_thread_is_counted_and_shutdown_still_returns() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let engine = Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .build()
            .unwrap();
        assert_eq!(engine.stats().thread_panics, 0);
        engine.panic_io_thread();
        testkit::wait_for("the panic counted", BOUND, || {
            Ok((engine.stats().thread_panics == 1).then_some(()))
        })
        .unwrap();
        engine.shutdown();
        assert_eq!(engine.stats().thread_panics, 1, "{kind:?}: counted once");
    }
}

#[test]
fn a_request_in_flight_on_a_panicked_io_thread_fails_instead_of_waiting() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let engine = Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .request_timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        // Blocks on the server for 30 s: still in flight when the thread dies.
        let blocked = engine.command_pending(0, ["BLPOP", "shardsub:nothing", "30"]);
        testkit::wait_for("the BLPOP written", BOUND, || {
            Ok((engine.stats().writes >= 1).then_some(()))
        })
        .unwrap();
        engine.panic_io_thread();
        let outcome = blocked.wait_timeout(BOUND);
        assert!(
            matches!(outcome, Err(crate::Error::RuntimeStopped)),
            "{kind:?}: {outcome:?}"
        );
        let after = engine.command(["PING"]);
        assert!(
            matches!(after, Err(crate::Error::RuntimeStopped)),
            "{kind:?}: a new request fails at once: {after:?}"
        );
        let published = engine.publish(b"ch", b"payload");
        assert!(
            matches!(published, Err(crate::Error::RuntimeStopped)),
            "{kind:?}: {published:?}"
        );
        engine.shutdown();
    }
}

#[test]
fn engines_on_one_runtime_share_its_threads_and_shut_down_one_by_one() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let runtime = Runtime::new(2).unwrap();
        let engines: Vec<Engine> = (0..6)
            .map(|_| {
                Engine::builder()
                    .address(server.addr().to_string())
                    .connections_per_server(3)
                    .runtime(&runtime)
                    .build()
                    .unwrap()
            })
            .collect();
        for e in &engines {
            assert_eq!(e.runtime().io_threads(), 2);
            assert_eq!(
                e.command(["PING"]).unwrap(),
                Value::Simple(b"PONG".to_vec())
            );
        }
        // Shutting one down leaves the others (on the same threads) working.
        let mut engines = engines.into_iter();
        let first = engines.next().unwrap();
        first.shutdown();
        assert!(matches!(
            first.command(["PING"]),
            Err(crate::Error::Shutdown)
        ));
        let rest: Vec<Engine> = engines.collect();
        for e in &rest {
            assert_eq!(
                e.command(["PING"]).unwrap(),
                Value::Simple(b"PONG".to_vec())
            );
        }
        // The freed slots are reused by a new engine.
        let again = Engine::builder()
            .address(server.addr().to_string())
            .connections_per_server(3)
            .runtime(&runtime)
            .build()
            .unwrap();
        assert_eq!(
            again.command(["PING"]).unwrap(),
            Value::Simple(b"PONG".to_vec())
        );
        let slots: usize = runtime_slots(&runtime);
        assert_eq!(
            slots, 18,
            "{kind:?}: 6 engines × 3 connections, slots reused"
        );
        drop((rest, again));
    }
}

#[test]
fn io_threads_and_runtime_together_are_refused() {
    let runtime = Runtime::new(1).unwrap();
    let e = Engine::builder()
        .address("127.0.0.1:1")
        .io_threads(2)
        .runtime(&runtime)
        .build();
    assert!(matches!(e, Err(crate::Error::Config(_))), "{e:?}");
    assert!(matches!(Runtime::new(0), Err(crate::Error::Config(_))));
}

/// Slots ever handed out, over every thread of `runtime`.
fn runtime_slots(runtime: &Runtime) -> usize {
    (0..runtime.io_threads())
        .map(|n| runtime.thread(n).slots.lock().handed_out())
        .sum()
}

#[test]
fn a_detached_engine_takes_requests_before_it_is_connected() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let engine = Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .build_detached()
            .unwrap();
        let reply = engine
            .command_pending(0, [&b"PING"[..]])
            .wait_timeout(BOUND);
        assert!(
            matches!(&reply, Ok(Value::Simple(p)) if p == b"PONG"),
            "{kind:?}: {reply:?}"
        );
        engine.shutdown();
    }
}

/// `ASKING` (an `ASK` redirect's retry) and its command are staged under
/// one lock: with other threads submitting on the same connection, the
/// server's `MONITOR` shows each `ASKING` right before its own command.
/// (Submitted one after the other, another thread's command fell between
/// them, and `ASKING` applied to that one.)
#[test]
fn asking_reaches_the_server_right_before_its_command_whatever_else_is_sent() {
    use std::io::{Read, Write};
    use std::time::Instant;
    const EACH: usize = 300;
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let mut monitor = std::net::TcpStream::connect(server.addr()).unwrap();
        monitor.set_read_timeout(Some(BOUND)).unwrap();
        monitor.write_all(b"MONITOR\r\n").unwrap();
        let mut ok = [0u8; 5];
        monitor.read_exact(&mut ok).unwrap();
        assert_eq!(&ok, b"+OK\r\n", "{kind:?}");
        let engine = Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .connections_per_server(1)
            .build()
            .unwrap();
        std::thread::scope(|s| {
            let asking = s.spawn(|| {
                let pending: Vec<_> = (0..EACH)
                    .map(|i| {
                        let channel = format!("ask:{i}");
                        engine.asking_command_pending([&b"SPUBLISH"[..], channel.as_bytes(), b"x"])
                    })
                    .collect();
                pending
                    .into_iter()
                    .map(|p| p.wait_timeout(BOUND))
                    .collect::<Vec<_>>()
            });
            let others: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let pending: Vec<_> = (0..EACH)
                            .map(|_| engine.command_pending(0, [&b"SPUBLISH"[..], b"other", b"x"]))
                            .collect();
                        pending
                            .into_iter()
                            .map(|p| p.wait_timeout(BOUND))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for r in asking.join().unwrap() {
                assert!(matches!(r, Ok(Value::Integer(0))), "{kind:?}: {r:?}");
            }
            for t in others {
                for r in t.join().unwrap() {
                    assert!(matches!(r, Ok(Value::Integer(0))), "{kind:?}: {r:?}");
                }
            }
        });
        let end = engine
            .command_pending(0, [&b"ECHO"[..], b"the-end"])
            .wait_timeout(BOUND);
        assert!(end.is_ok(), "{kind:?}: {end:?}");
        let mut seen = Vec::new();
        let deadline = Instant::now() + BOUND;
        while !seen.windows(9).any(|w| w == b"\"the-end\"") {
            assert!(
                Instant::now() < deadline,
                "{kind:?}: MONITOR never showed the end"
            );
            let mut buf = [0u8; 65536];
            let n = monitor.read(&mut buf).unwrap();
            assert!(n > 0, "{kind:?}: MONITOR closed");
            seen.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&seen);
        // The engine's lines, in order: `+<time> [0 <addr>] "cmd" ...`.
        let commands: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once("] ").map(|(_, c)| c))
            .filter(|c| !c.is_empty())
            .collect();
        let mut askings = 0;
        for (i, c) in commands.iter().enumerate() {
            if c.eq_ignore_ascii_case("\"asking\"") {
                askings += 1;
                let next = commands.get(i + 1).copied().unwrap_or("(nothing)");
                assert!(
                    next.starts_with("\"SPUBLISH\" \"ask:"),
                    "{kind:?}: ASKING followed by {next}"
                );
            }
        }
        assert_eq!(askings, EACH, "{kind:?}");
        engine.shutdown();
    }
}

/// Notes when each push reaches the observer.
#[derive(Default)]
struct PushTimes(parking_lot::Mutex<Vec<std::time::Instant>>);

impl crate::engine::Observer for PushTimes {
    fn on_push(&self, _: &crate::engine::ConnInfo, _: &resp::Parsed<'_>) {
        self.0.lock().push(std::time::Instant::now());
    }
}

/// A push of `payload` on channel `ch`, as a RESP3 server writes it.
fn push(payload: &[u8]) -> Vec<u8> {
    let mut out = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n".to_vec();
    out.extend_from_slice(format!("${}\r\n", payload.len()).as_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
    out
}

/// A fake server that answers `HELLO 3` and then plays `script`; and an
/// engine with `read_pause` and `request_timeout` on it, its pushes timed.
fn timed_pushes(
    script: Vec<testkit::Step>,
    pause: Duration,
    request_timeout: Duration,
) -> (testkit::FakeServer, Engine, std::sync::Arc<PushTimes>) {
    use testkit::{FakeServer, Step};
    let mut hello = Vec::new();
    resp::encode_command(&mut hello, [&b"HELLO"[..], b"3"]);
    let mut steps = vec![
        Step::expect(hello),
        Step::send(b"%1\r\n$6\r\nserver\r\n$4\r\nfake\r\n"),
    ];
    steps.extend(script);
    let fake = FakeServer::start(steps).unwrap();
    let times = std::sync::Arc::new(PushTimes::default());
    let engine = Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .observer(times.clone())
        .request_timeout(request_timeout)
        .read_pause(pause)
        .build()
        .unwrap();
    (fake, engine, times)
}

/// [`timed_pushes`] with a 16 KiB burst of 16 pushes at once (a busy read
/// turn) before `then`. Returns once the engine has seen the burst.
fn after_a_burst(
    then: Vec<testkit::Step>,
    pause: Duration,
    request_timeout: Duration,
) -> (testkit::FakeServer, Engine, std::sync::Arc<PushTimes>) {
    let burst: Vec<u8> = (0..16).flat_map(|_| push(&[b'x'; 1024])).collect();
    let mut script = vec![testkit::Step::send(burst)];
    script.extend(then);
    let (fake, engine, times) = timed_pushes(script, pause, request_timeout);
    wait_pushes(&times, 16);
    (fake, engine, times)
}

/// Waits (bounded) until the engine has seen `n` pushes.
fn wait_pushes(times: &PushTimes, n: usize) {
    let deadline = std::time::Instant::now() + BOUND;
    while times.0.lock().len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{n} pushes never came"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How long after the last push of the burst the engine saw a push that
/// the server sent 50 ms after it, with `pause` as its read pause.
fn late_push_after_a_burst(pause: Duration) -> Duration {
    use testkit::Step;
    let then = vec![
        Step::Delay(Duration::from_millis(50)),
        Step::send(push(b"late")),
        Step::Silence,
    ];
    let (_fake, engine, times) = after_a_burst(then, pause, BOUND);
    wait_pushes(&times, 17);
    engine.shutdown();
    let t = times.0.lock();
    t[16].duration_since(t[15])
}

/// A busy read turn (8 KiB or more that emptied the socket) stops the
/// reading for the read pause: what arrives meanwhile waits for its end,
/// and then the connection reads on by itself. Without a pause, the late
/// push is seen when it comes.
#[test]
fn a_busy_connection_stops_reading_for_its_read_pause() {
    let pause = Duration::from_millis(400);
    let paused = late_push_after_a_burst(pause);
    assert!(paused >= pause - Duration::from_millis(100), "{paused:?}");
    let unpaused = late_push_after_a_burst(Duration::ZERO);
    assert!(
        unpaused < pause - Duration::from_millis(100),
        "{unpaused:?}"
    );
}

/// How long the engine took to see 16 small pushes that the server sends
/// 5 ms apart (75 ms from the first to the last), with `pause` as its
/// read pause.
fn small_stream_with(pause: Duration) -> (Duration, u64) {
    use testkit::Step;
    // Long enough that the pause begins within it however the reads
    // batch on busy cores (the average gap must first fall from its cap).
    const PUSHES: usize = 120;
    let mut script = Vec::new();
    for i in 0..PUSHES {
        script.push(Step::Delay(Duration::from_millis(5)));
        script.push(Step::send(push(format!("{i}").as_bytes())));
    }
    script.push(Step::Silence);
    let (_fake, engine, times) = timed_pushes(script, pause, BOUND);
    wait_pushes(&times, PUSHES);
    let pauses = engine.stats().read_pauses;
    engine.shutdown();
    let t = times.0.lock();
    let longest = t
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap_or_default();
    (longest, pauses)
}

/// Small reads that keep coming, on average closer together than a
/// quarter of the read pause, stop the reading for half of it: a steady
/// stream of small messages is read in batches (one wake-up per half
/// pause), not one wake-up per message. Without a pause setting, reading
/// never pauses.
#[test]
fn a_steady_stream_of_small_reads_pauses_for_half_the_read_pause() {
    let pause = Duration::from_millis(400);
    let (longest, pauses) = small_stream_with(pause);
    assert!(pauses >= 1, "{pauses} pauses");
    // Nothing is seen while the reading pauses: half the pause at least.
    assert!(longest >= pause / 2, "{longest:?}, {pauses} pauses");
    let (_, pauses) = small_stream_with(Duration::ZERO);
    assert_eq!(pauses, 0);
}

/// A request's timeout that falls inside a read pause ends the pause and
/// reads first: the reply already in the socket completes the request
/// instead of the connection failing for a timeout it caused itself.
#[test]
fn a_request_timeout_inside_a_read_pause_reads_the_reply_first() {
    use testkit::Step;
    let mut ping = Vec::new();
    resp::encode_command(&mut ping, [&b"PING"[..]]);
    let then = vec![Step::expect(ping), Step::send(b"+PONG\r\n"), Step::Silence];
    // Paused for 5 s once the burst is in; the PONG arrives at once.
    let (_fake, engine, _times) =
        after_a_burst(then, Duration::from_secs(5), Duration::from_millis(300));
    let reply = engine
        .command_pending(0, [&b"PING"[..]])
        .wait_timeout(BOUND);
    assert!(
        matches!(&reply, Ok(Value::Simple(p)) if p == b"PONG"),
        "{reply:?}"
    );
    engine.shutdown();
}

/// At the staged-bytes bound, an application's submission waits for room
/// (until the request timeout), while a library thread's (`Room::Past`:
/// the control thread under the publish core's lock, an I/O thread) is
/// staged at once: with it waiting, the control thread and an I/O thread
/// waited for each other at a failover.
#[test]
fn a_library_threads_submission_never_waits_for_room() {
    use crate::conn::Request;
    use crate::engine::pending::Completion;
    use crate::engine::Room;

    for kind in kinds() {
        let mut server = Server::start(kind).unwrap();
        let (bound, timeout) = (64 << 10, Duration::from_secs(4));
        let engine = Engine::builder()
            .address(server.addr().to_string())
            .max_buffered_bytes(bound)
            .request_timeout(timeout)
            .build()
            .unwrap();
        let conn = engine.route_channel(b"room");
        let payload = [b'x'; 1024];
        let stage = |room: Room| {
            let started = std::time::Instant::now();
            let r = conn.submit_with((), room, |staging, ()| {
                resp::encode_command(&mut staging.buf, [&b"PUBLISH"[..], b"room", &payload]);
                Request::single(Completion::Discard)
            });
            (r.map_err(|(_, e)| e), started.elapsed())
        };
        // The server reads nothing: the kernel's buffers fill (16 MiB is
        // past what loopback holds), then the staged bytes, past the bound:
        // a library thread's submissions go on.
        server.freeze();
        let mut staged = 0u64;
        while staged * 1024 < 16 << 20 || conn.staging.lock().buf.len() < 4 * bound {
            let (r, took) = stage(Room::Past);
            assert!(
                r.is_ok() && took < timeout / 2,
                "{kind:?}: {r:?} after {took:?}"
            );
            staged += 1;
            assert!(
                staged < 1_000_000,
                "{kind:?}: the staged bytes never filled"
            );
        }
        let (past, took) = stage(Room::Past);
        assert!(past.is_ok(), "{kind:?}: {past:?}");
        assert!(took < timeout / 2, "{kind:?}: Room::Past waited {took:?}");
        let (wait, took) = stage(Room::Wait);
        assert!(wait.is_err(), "{kind:?}: Room::Wait staged past the bound");
        assert!(
            took >= timeout / 2,
            "{kind:?}: Room::Wait returned after {took:?}: {wait:?}"
        );
        server.thaw();
        engine.shutdown();
    }
}
