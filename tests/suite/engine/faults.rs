//! Faults: a server killed mid-pipeline, and scripted servers that close,
//! stall, send garbage, refuse HELLO or refuse the credentials.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardsub::engine::{ConnInfo, Engine, Observer, PublishOptions};
use shardsub::{Error, Protocol, Value};
use testkit::{kinds, FakeServer, Server, Step};

/// A connection change: connected?, protocol, fell back?
type Change = (bool, Option<Protocol>, bool);

/// Forwards connection changes to the test.
struct Watch(Mutex<mpsc::Sender<Change>>);

impl Observer for Watch {
    fn on_connected(&self, _: &ConnInfo, protocol: Protocol, fell_back: bool) {
        let _ = self
            .0
            .lock()
            .unwrap()
            .send((true, Some(protocol), fell_back));
    }
    fn on_disconnected(&self, _: &ConnInfo, _: &Error) {
        let _ = self.0.lock().unwrap().send((false, None, false));
    }
}

fn watch() -> (Arc<Watch>, mpsc::Receiver<Change>) {
    let (tx, rx) = mpsc::channel();
    (Arc::new(Watch(Mutex::new(tx))), rx)
}

/// Waits for the next successful (re)connect.
fn await_connect(rx: &mpsc::Receiver<Change>, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((true, _, _)) => return,
            Ok(_) => {}
            Err(e) => panic!("no reconnect within {within:?}: {e}"),
        }
    }
}

#[test]
fn kill_mid_pipeline_every_request_completes_or_fails_then_reconnects() {
    const N: u32 = 100_000;
    for kind in kinds() {
        let mut server = Server::start(kind).unwrap();
        let (obs, rx) = watch();
        let e = Arc::new(
            Engine::builder()
                .address(server.addr().to_string())
                .io_threads(1)
                .request_timeout(Duration::from_secs(2))
                .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(200))
                .observer(obs)
                .seed(1)
                .build()
                .unwrap(),
        );
        await_connect(&rx, Duration::from_secs(1));
        let publisher = {
            let e = e.clone();
            std::thread::spawn(move || {
                let mut publishes = Vec::with_capacity(N as usize);
                let mut echoes = Vec::new();
                for i in 0..N {
                    publishes.push(e.publish_pending(
                        b"ch",
                        &[b'x'; 256],
                        PublishOptions::classic(),
                    ));
                    if i % 100 == 0 {
                        let tag = i.to_string();
                        echoes.push((tag.clone(), e.command_pending(0, ["ECHO", &tag])));
                    }
                }
                (publishes, echoes)
            })
        };
        // Kill once the pipeline is flowing.
        let deadline = Instant::now() + Duration::from_secs(10);
        while e.stats().replies < 2_000 {
            assert!(Instant::now() < deadline, "no replies at all");
            std::thread::yield_now();
        }
        server.kill();
        let (publishes, echoes) = publisher.join().unwrap();
        let (mut ok, mut failed) = (0u32, 0u32);
        for p in publishes {
            match p.wait_timeout(Duration::from_secs(15)) {
                Ok(receivers) => {
                    assert_eq!(receivers, 0);
                    ok += 1;
                }
                Err(Error::WaitTimeout { .. }) => panic!("{kind:?}: a publish hung"),
                Err(err) => {
                    assert!(err.is_transient(), "{kind:?}: {err:?}");
                    failed += 1;
                }
            }
        }
        assert_eq!(ok + failed, N);
        assert!(failed > 0, "{kind:?}: the kill came after the last reply");
        // No request ever got another's reply.
        let mut echoed = 0u32;
        for (tag, p) in echoes {
            match p.wait_timeout(Duration::from_secs(15)) {
                Ok(v) => {
                    assert_eq!(v, Value::Bulk(tag.into_bytes()));
                    echoed += 1;
                }
                Err(err) => assert!(err.is_transient(), "{err:?}"),
            }
        }
        // The kill came after 2,000 replies: publishes and echoes together.
        assert!(ok + echoed >= 2_000, "{kind:?}: ok {ok}, echoed {echoed}");
        // While the server is down: clear, immediate errors.
        let err = e.command(["PING"]).unwrap_err();
        assert!(err.is_transient(), "{err:?}");
        server.restart().unwrap();
        await_connect(&rx, Duration::from_secs(5));
        assert_eq!(
            e.command(["PING"]).unwrap(),
            Value::Simple(b"PONG".to_vec())
        );
        assert_eq!(
            e.publish_pending(b"ch", b"again", PublishOptions::classic())
                .wait()
                .unwrap(),
            0
        );
        eprintln!("{kind:?}: {ok} completed, {failed} failed; {:?}", e.stats());
    }
}

fn cmd(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_command(&mut out, args.iter().map(|a| a.as_bytes()));
    out
}

const HELLO_OK: &[u8] = b"%1\r\n$6\r\nserver\r\n$4\r\nfake\r\n";

fn hello() -> [Step; 2] {
    [Step::expect(cmd(&["HELLO", "3"])), Step::send(HELLO_OK)]
}

fn engine(fake: &FakeServer, request_timeout: Duration) -> Engine {
    Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .request_timeout(request_timeout)
        .reconnect_backoff(Duration::from_millis(5), Duration::from_millis(50))
        .seed(7)
        .build()
        .unwrap()
}

fn pings(n: usize) -> Vec<u8> {
    (0..n).flat_map(|_| cmd(&["PING"])).collect()
}

/// Sends `n` PINGs so they are all in flight together.
fn send_pings(e: &Engine, n: usize) -> Vec<shardsub::Pending<Value>> {
    (0..n).map(|_| e.command_pending(0, ["PING"])).collect()
}

#[test]
fn server_closes_mid_pipeline() {
    let first: Vec<Step> = hello()
        .into_iter()
        .chain([
            Step::expect(pings(3)),
            Step::send(b"+PONG\r\n"),
            Step::Close,
        ])
        .collect();
    let second: Vec<Step> = hello()
        .into_iter()
        .chain([Step::expect(pings(1)), Step::send(b"+PONG\r\n")])
        .collect();
    let fake = FakeServer::start_each(vec![first, second]).unwrap();
    let (obs, rx) = watch();
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .reconnect_backoff(Duration::from_millis(5), Duration::from_millis(50))
        .observer(obs)
        .build()
        .unwrap();
    await_connect(&rx, Duration::from_secs(1));
    let mut replies = send_pings(&e, 3).into_iter();
    assert_eq!(
        replies.next().unwrap().wait().unwrap(),
        Value::Simple(b"PONG".to_vec())
    );
    for p in replies {
        let err = p.wait().unwrap_err();
        assert!(matches!(err, Error::ConnectionLost { .. }), "{err:?}");
        assert!(err.to_string().contains("lost before the reply"), "{err}");
    }
    await_connect(&rx, Duration::from_secs(2));
    assert_eq!(
        e.command(["PING"]).unwrap(),
        Value::Simple(b"PONG".to_vec())
    );
    drop(e);
    fake.finish().unwrap();
}

#[test]
fn slow_server_times_out_and_the_late_reply_goes_nowhere() {
    let first: Vec<Step> = hello()
        .into_iter()
        .chain([
            Step::expect(pings(1)),
            Step::Delay(Duration::from_millis(800)),
            Step::send(b"+LATE\r\n"),
        ])
        .collect();
    let second: Vec<Step> = hello()
        .into_iter()
        .chain([Step::expect(pings(1)), Step::send(b"+PONG\r\n")])
        .collect();
    let fake = FakeServer::start_each(vec![first, second]).unwrap();
    let e = engine(&fake, Duration::from_millis(200));
    let started = Instant::now();
    let err = e.command(["PING"]).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(700),
        "{took:?}"
    );
    // The connection was restarted: the next PING gets its own reply.
    let deadline = Instant::now() + Duration::from_secs(3);
    let v = loop {
        match e.command(["PING"]) {
            Ok(v) => break v,
            Err(err) if err.is_transient() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10)); // reconnect backoff
            }
            Err(err) => panic!("{err:?}"),
        }
    };
    assert_eq!(v, Value::Simple(b"PONG".to_vec()));
    drop(e);
    fake.finish().unwrap();
}

#[test]
fn garbage_fails_everything_pending_with_a_protocol_error() {
    let first: Vec<Step> = hello()
        .into_iter()
        .chain([
            Step::expect(pings(2)),
            Step::send(b"@not resp\r\n"),
            Step::Silence,
        ])
        .collect();
    // The engine may reconnect before it is shut down: a silent second act.
    let fake = FakeServer::start_each(vec![first, vec![Step::Silence]]).unwrap();
    let e = engine(&fake, Duration::from_secs(2));
    for p in send_pings(&e, 2) {
        let err = p.wait().unwrap_err();
        let Error::Protocol { error, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(error.kind, resp::ErrorKind::UnknownType(b'@'));
        assert!(err.to_string().contains("invalid RESP"), "{err}");
    }
    e.shutdown();
    fake.finish().unwrap();
}

#[test]
fn refused_hello_falls_back_to_resp2_with_auth_and_setname() {
    let script = vec![
        Step::expect(cmd(&[
            "HELLO", "3", "AUTH", "default", "pw", "SETNAME", "app",
        ])),
        Step::send(b"-ERR unknown command 'HELLO', with args beginning with: '3'\r\n"),
        Step::expect(cmd(&["AUTH", "pw"])),
        Step::send(b"+OK\r\n"),
        Step::expect(cmd(&["CLIENT", "SETNAME", "app"])),
        Step::send(b"+OK\r\n"),
        Step::expect(cmd(&["GET", "k"])),
        Step::send(b"$1\r\nv\r\n"),
    ];
    let fake = FakeServer::start(script).unwrap();
    let (obs, rx) = watch();
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .password("pw")
        .client_name("app")
        .observer(obs)
        .build()
        .unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(1)).unwrap(),
        (true, Some(Protocol::Resp2), true)
    );
    assert_eq!(e.command(["GET", "k"]).unwrap(), Value::Bulk(b"v".to_vec()));
    drop(e);
    fake.finish().unwrap();
}

#[test]
fn refused_credentials_fail_build_clearly() {
    let script = vec![
        Step::expect(cmd(&["HELLO", "3", "AUTH", "app", "bad"])),
        Step::send(b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"),
    ];
    let fake = FakeServer::start(script).unwrap();
    let err = Engine::builder()
        .address(fake.addr().to_string())
        .username("app")
        .password("bad")
        .build()
        .unwrap_err();
    let Error::Auth { message, addr } = &err else {
        panic!("{err:?}")
    };
    assert!(message.starts_with("WRONGPASS"), "{message}");
    assert_eq!(*addr, fake.addr().into());
    fake.finish().unwrap();

    // RESP2 after a refused HELLO: AUTH itself refused.
    let script = vec![
        Step::expect(cmd(&["HELLO", "3", "AUTH", "default", "bad"])),
        Step::send(b"-NOPROTO unsupported protocol version\r\n"),
        Step::expect(cmd(&["AUTH", "bad"])),
        Step::send(b"-ERR invalid password\r\n"),
    ];
    let fake = FakeServer::start(script).unwrap();
    let err = Engine::builder()
        .address(fake.addr().to_string())
        .password("bad")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    fake.finish().unwrap();
}

#[test]
fn silent_server_fails_build_with_connect_timeout() {
    let fake = FakeServer::start(vec![Step::Silence]).unwrap();
    let started = Instant::now();
    let err = Engine::builder()
        .address(fake.addr().to_string())
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::ConnectTimeout { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// Logs pushes, the observer's flushes and a reply, in the order the I/O
/// thread makes the calls.
#[derive(Default)]
struct Order(Mutex<Vec<&'static str>>);

impl Observer for Order {
    fn on_push(&self, _: &ConnInfo, _: &resp::Parsed<'_>) {
        self.0.lock().unwrap().push("push");
    }
    fn on_pushes_done(&self, _: &ConnInfo) {
        self.0.lock().unwrap().push("done");
    }
}

#[test]
fn a_reply_completes_after_the_observer_has_flushed_the_pushes_before_it() {
    // A push and the reply after it, in one write (one read): the reply's
    // callback must see the push handed on (the Pub/Sub fence counts on
    // it), not just parsed.
    let push = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n";
    let mut both = push.to_vec();
    both.extend_from_slice(b"+PONG\r\n");
    let script: Vec<Step> = hello()
        .into_iter()
        .chain([Step::expect(cmd(&["PING"])), Step::send(both)])
        .collect();
    let fake = FakeServer::start(script).unwrap();
    let order = Arc::new(Order::default());
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .observer(order.clone())
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let seen = order.clone();
    e.command_then(0, ["PING"], move |r| {
        seen.0.lock().unwrap().push("reply");
        let _ = tx.send(r);
    });
    let reply = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("PING answered");
    assert_eq!(reply.unwrap(), Value::Simple("PONG".into()));
    assert_eq!(order.0.lock().unwrap()[..3], ["push", "done", "reply"]);
    e.shutdown();
}

#[test]
fn a_close_right_behind_the_last_reply_is_noticed() {
    // A 256 KiB push, the reply and the FIN: the FIN is in by the time the
    // client's last, short read takes the reply, and no later readiness
    // event announces the end of stream. Eight connections, each closed
    // right behind its reply.
    const ROUNDS: usize = 8;
    let mut burst = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$262144\r\n".to_vec();
    burst.extend(std::iter::repeat_n(b'x', 262_144));
    burst.extend_from_slice(b"\r\n+PONG\r\n");
    let script: Vec<Step> = hello()
        .into_iter()
        .chain([Step::expect(cmd(&["PING"])), Step::send(burst), Step::Close])
        .collect();
    let mut scripts = vec![script; ROUNDS];
    scripts.push(vec![Step::Silence]);
    let fake = FakeServer::start_each(scripts).unwrap();
    let (w, rx) = watch();
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .observer(w)
        .reconnect_backoff(Duration::from_millis(1), Duration::from_millis(5))
        .build()
        .unwrap();
    for round in 0..ROUNDS {
        assert!(
            matches!(rx.recv_timeout(Duration::from_secs(5)), Ok((true, ..))),
            "round {round}: no connect"
        );
        assert_eq!(e.command(["PING"]).unwrap(), Value::Simple("PONG".into()));
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok((false, ..)) => {}
            other => panic!("round {round}: the close went unnoticed: {other:?}"),
        }
    }
    e.shutdown();
}
