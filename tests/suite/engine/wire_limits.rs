//! Wire limits end to end, against scripted servers (byte sequences a real
//! server does not send): a reply line that never ends, a server that fails
//! every connection right after its handshake, and a request left
//! unanswered while pushes keep coming.

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use shardsub::engine::{ConnInfo, Engine, Observer};
use shardsub::{Error, Protocol};
use testkit::{FakeServer, Step};

fn cmd(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_command(&mut out, args.iter().map(|a| a.as_bytes()));
    out
}

const HELLO_OK: &[u8] = b"%1\r\n$6\r\nserver\r\n$4\r\nfake\r\n";

fn hello() -> [Step; 2] {
    [Step::expect(cmd(&["HELLO", "3"])), Step::send(HELLO_OK)]
}

/// `hello()`, then `rest`.
fn script(rest: impl IntoIterator<Item = Step>) -> Vec<Step> {
    hello().into_iter().chain(rest).collect()
}

/// Peak resident memory of this process so far (Linux `VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in kB");
    kib * 1024
}

const MIB: u64 = 1 << 20;

/// Reports every finished handshake.
struct Connects(Mutex<mpsc::Sender<()>>);

impl Connects {
    fn new() -> (Arc<Connects>, mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::channel();
        (Arc::new(Connects(Mutex::new(tx))), rx)
    }
}

impl Observer for Connects {
    fn on_connected(&self, _: &ConnInfo, _: Protocol, _: bool) {
        let _ = self.0.lock().unwrap().send(());
    }
}

#[test]
fn an_endless_reply_line_is_cut_by_the_line_limit_and_shutdown_stays_bounded() {
    // Peak RSS is the process's: no other test may run beside this one.
    if !testkit::alone() {
        return; // it ran, alone, in a child process
    }
    // The first connection answers PING with `+aaaa…` forever; every
    // reconnect is flooded the same way right after its handshake.
    let endless = || [Step::send("+"), Step::Flood(vec![b'a'; 64 << 10])];
    let first = script([Step::expect(cmd(&["PING"]))].into_iter().chain(endless()));
    let scripts = std::iter::once(first)
        .chain(std::iter::repeat_with(|| script(endless())).take(200))
        .collect();
    let fake = FakeServer::start_each(scripts).unwrap();
    let request_timeout = Duration::from_secs(1);
    let shutdown_timeout = Duration::from_secs(2);
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .request_timeout(request_timeout)
        .shutdown_timeout(shutdown_timeout)
        .reconnect_backoff(Duration::from_millis(5), Duration::from_millis(50))
        .seed(3)
        .build()
        .unwrap();
    let rss_before = peak_rss();

    let started = Instant::now();
    let result = e
        .command_pending(0, ["PING"])
        .wait_timeout(request_timeout + Duration::from_secs(1));
    let took = started.elapsed();
    let sent = fake.bytes_sent();
    eprintln!("PING: {result:?} after {took:?}; the server had sent {sent} bytes");
    let err = result.unwrap_err();
    let Error::Protocol { error, .. } = &err else {
        panic!("expected the line limit, got {err:?} after {took:?}")
    };
    let limit = resp::Limits::default().max_line_len as u64;
    assert_eq!(limit, 64 << 10);
    assert_eq!(error.kind, resp::ErrorKind::LineTooLong { limit }, "{err}");
    assert!(err.to_string().contains("line"), "{err}");
    // The line limit, not the request timeout, ended it.
    assert!(took < request_timeout, "{took:?}");

    // A few reconnects, each flooded: memory stays bounded by the line
    // limit (and the socket buffers), far below the 512 MiB bulk limit.
    testkit::wait_for("four flooded connections", Duration::from_secs(5), || {
        Ok((fake.accepted() >= 4).then_some(()))
    })
    .unwrap();
    let grown = peak_rss().saturating_sub(rss_before);
    eprintln!(
        "peak RSS grew {} MiB; {} connections, {} MiB sent",
        grown / MIB,
        fake.accepted(),
        fake.bytes_sent() / MIB
    );
    assert!(grown < 64 * MIB, "peak RSS grew {} MiB", grown / MIB);

    let started = Instant::now();
    e.shutdown();
    let took = started.elapsed();
    eprintln!("shutdown took {took:?}");
    assert!(
        took < shutdown_timeout + Duration::from_millis(500),
        "{took:?}"
    );
    drop(e);
    // Not `finish().unwrap()`: a script the shutdown cut short mid-handshake
    // is expected here.
    let _ = fake.finish();

    // The same flood with the line limit raised to the bulk limit (512 MiB,
    // the old bound): the request timeout still ends a request whose reply
    // keeps arriving but never completes, and a shutdown while another one
    // is flooded stays within its bound. (One test with the part above, so
    // the memory this part takes does not blur that part's measurement.)
    let flooded = || {
        script([
            Step::expect(cmd(&["PING"])),
            Step::send("+"),
            Step::Flood(vec![b'a'; 64 << 10]),
        ])
    };
    let scripts = vec![flooded(), flooded(), script([Step::Silence])];
    let fake = FakeServer::start_each(scripts).unwrap();
    let request_timeout = Duration::from_millis(300);
    let shutdown_timeout = Duration::from_millis(500);
    let (connects, connected) = Connects::new();
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .request_timeout(request_timeout)
        .shutdown_timeout(shutdown_timeout)
        .reconnect_backoff(Duration::from_millis(5), Duration::from_millis(50))
        .observer(connects)
        .limits(resp::Limits {
            max_line_len: usize::MAX,
            ..resp::Limits::default()
        })
        .seed(4)
        .build()
        .unwrap();
    connected.recv_timeout(Duration::from_secs(1)).unwrap();
    let started = Instant::now();
    let result = e
        .command_pending(0, ["PING"])
        .wait_timeout(request_timeout + Duration::from_secs(2));
    let took = started.elapsed();
    let sent = fake.bytes_sent();
    eprintln!(
        "PING with no line limit: {result:?} after {took:?}; {} MiB sent",
        sent / MIB
    );
    match result.unwrap_err() {
        Error::Timeout { after, .. } => assert_eq!(after, request_timeout),
        // Only a machine that moves 512 MiB within the timeout gets here.
        Error::Protocol { error, .. } => {
            assert_eq!(
                error.kind,
                resp::ErrorKind::LineTooLong { limit: 512 << 20 }
            );
            assert!(sent >= 512 * MIB, "{sent}");
        }
        err => panic!("{err:?} after {took:?}"),
    }
    assert!(
        took < request_timeout + Duration::from_millis(500),
        "{took:?}"
    );

    // The connection restarts; the next PING is flooded too, and the
    // engine is shut down while it waits.
    connected.recv_timeout(Duration::from_secs(3)).unwrap();
    let before = fake.bytes_sent();
    let second = e.command_pending(0, ["PING"]);
    testkit::wait_for("the flood answering PING", Duration::from_secs(3), || {
        Ok((fake.bytes_sent() > before).then_some(()))
    })
    .unwrap();
    let started = Instant::now();
    e.shutdown();
    let took = started.elapsed();
    eprintln!("shutdown while flooded took {took:?}");
    assert!(
        took < shutdown_timeout + Duration::from_millis(500),
        "{took:?}"
    );
    let err = second.wait_timeout(Duration::from_secs(1)).unwrap_err();
    assert!(
        matches!(err, Error::Shutdown | Error::Timeout { .. }),
        "{err:?}"
    );
    drop(e);
    let _ = fake.finish();
}

#[test]
fn a_server_failing_right_after_the_handshake_gets_exponential_backoff() {
    // Every connection: a good handshake, then garbage at once.
    let fake = FakeServer::start(script([Step::send("@garbage\r\n"), Step::Silence])).unwrap();
    let base = Duration::from_millis(20);
    let window = Duration::from_secs(1);
    let started = Instant::now();
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .reconnect_backoff(base, Duration::from_secs(60))
        .seed(5)
        .build()
        .unwrap();
    // A fixed window to count connections in: nothing to await.
    std::thread::sleep(window.saturating_sub(started.elapsed()));
    let accepted = fake.accepted();
    let elapsed = started.elapsed();
    // Delay k is at least half of base * 2^k (equal jitter), so n
    // reconnects take at least base/2 * (2^n - 1): in the time elapsed, at
    // most `most` connections, the first included.
    let half = base.as_secs_f64() / 2.0;
    let most = 1
        + (0..32)
            .take_while(|&n| half * (2f64.powi(n) - 1.0) <= elapsed.as_secs_f64())
            .last()
            .unwrap() as usize;
    eprintln!("{accepted} connections in {elapsed:?}; the schedule allows {most}");
    assert!(
        accepted <= most,
        "{accepted} connections, at most {most} expected"
    );
    // It still reconnects (twice at least: 10-20 ms, then 20-40 ms).
    assert!(accepted >= 3, "{accepted}");
    drop(e);
    let _ = fake.finish();
}

#[test]
fn a_request_is_timed_from_its_write_while_pushes_and_other_replies_flow() {
    // Two PINGs written together. A push arrives every 50 ms for 3 s; the
    // first PING is answered after 500 ms, the second never. The request
    // timeout (1 s) leaves the first answer half a second of margin on a
    // busy machine, and a timer started at that answer (or at a push)
    // could not fire before 1.5 s: the bound below.
    let push = b">2\r\n$7\r\nmessage\r\n$2\r\nhi\r\n";
    let pushes =
        |n| (0..n).flat_map(|_| [Step::send(push), Step::Delay(Duration::from_millis(50))]);
    let answer_after = Duration::from_millis(500);
    let first = script(
        [Step::expect([cmd(&["PING"]), cmd(&["PING"])].concat())]
            .into_iter()
            .chain(pushes(10))
            .chain([Step::send("+PONG\r\n")])
            .chain(pushes(50)),
    );
    let fake = FakeServer::start_each(vec![first, script([Step::Silence])]).unwrap();
    let request_timeout = Duration::from_secs(1);
    let e = Engine::builder()
        .address(fake.addr().to_string())
        .io_threads(1)
        .request_timeout(request_timeout)
        .flush_delay(Duration::ZERO)
        .reconnect_backoff(Duration::from_millis(5), Duration::from_millis(50))
        .seed(6)
        .build()
        .unwrap();
    let started = Instant::now();
    let answered = e.command_pending(0, ["PING"]);
    let unanswered = e.command_pending(0, ["PING"]);
    let bound = request_timeout + Duration::from_secs(3);
    assert_eq!(
        answered.wait_timeout(bound).unwrap(),
        shardsub::Value::Simple(b"PONG".to_vec())
    );
    let result = unanswered.wait_timeout(bound);
    let took = started.elapsed();
    eprintln!("second PING while pushes flow: {result:?} after {took:?}");
    let err = result.unwrap_err();
    assert!(
        matches!(err, Error::Timeout { after, .. } if after == request_timeout),
        "{err:?}"
    );
    // From its write, not from the other PING's reply (sent 500 ms in at
    // the earliest) nor from a push.
    assert!(took >= request_timeout, "{took:?}");
    assert!(took < answer_after + request_timeout, "{took:?}");
    drop(e);
    let _ = fake.finish();
}
