//! The publishers that drive a subscriber, and one measured run.
//!
//! Two publishers, both to random channels of the 10,000, 256-byte
//! messages: the C one (`redis-benchmark -P 32 -c 2`, as fast as it goes,
//! its own process), and a paced one (a thread of this process writing
//! pipelined `PUBLISH` commands on one connection with replies off) whose
//! payloads carry a stamp: a sequence number and the publish time, which
//! the handler turns into a lag. The paced thread's own CPU and context
//! switches (`RUSAGE_THREAD`) are taken off the process's, so a row's
//! usage is the subscriber's.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use testkit::Server;

use crate::subscribers::{Delivery, Who};
use crate::usage::{self, Usage};

pub const CHANNELS: usize = 10_000;
pub const BOUND: Duration = Duration::from_secs(60);
const PAYLOAD: usize = 256;
/// Most commands the paced publisher puts in one write.
const BATCH: u64 = 1024;

pub fn channel(i: usize) -> String {
    format!("bench:{i:012}")
}

/// Microseconds since this process first asked: the clock of the stamps
/// (publisher and handlers are threads of one process).
pub fn now_us() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// A stamped payload: `#`, the sequence number and the publish time
/// (`now_us`), both little-endian `u64`, then `x` up to 256 bytes.
fn encode_stamp(payload: &mut [u8; PAYLOAD], seq: u64, at: u64) {
    payload[0] = b'#';
    payload[1..9].copy_from_slice(&seq.to_le_bytes());
    payload[9..17].copy_from_slice(&at.to_le_bytes());
}

/// `(sequence, publish time)` of a stamped payload; `None` for others (the
/// C publisher's are all `x`).
#[inline]
pub fn parse_stamp(payload: &[u8]) -> Option<(u64, u64)> {
    if payload.first() != Some(&b'#') {
        return None;
    }
    let seq = u64::from_le_bytes(payload.get(1..9)?.try_into().ok()?);
    let at = u64::from_le_bytes(payload.get(9..17)?.try_into().ok()?);
    Some((seq, at))
}

/// Waits until the server reports the first and last channels subscribed
/// (by exactly one client).
pub fn wait_subscribed(server: &Server) {
    let deadline = Instant::now() + BOUND;
    let (first, last) = (channel(0), channel(CHANNELS - 1));
    loop {
        let ones = match server.cmd(&[b"PUBSUB", b"NUMSUB", first.as_bytes(), last.as_bytes()]) {
            Ok(testkit::Value::Array(v)) => v
                .iter()
                .filter(|x| matches!(x, testkit::Value::Integer(1)))
                .count(),
            Ok(testkit::Value::Map(v)) => v
                .iter()
                .filter(|(_, x)| matches!(x, testkit::Value::Integer(1)))
                .count(),
            _ => 0,
        };
        if ones == 2 {
            return;
        }
        assert!(Instant::now() < deadline, "subscriptions not confirmed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs the C publisher; returns its wall time.
fn publish(server: &Server, n: u64) -> Duration {
    let payload = "x".repeat(PAYLOAD);
    let start = Instant::now();
    let status = Command::new("timeout")
        .arg("120")
        .arg("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
        .args([
            "-n",
            &n.to_string(),
            "-P",
            "32",
            "-c",
            "2",
            "-r",
            "10000",
            "-q",
        ])
        .args(["PUBLISH", "bench:__rand_int__", &payload])
        .output()
        .expect("redis-benchmark");
    assert!(status.status.success(), "redis-benchmark failed");
    start.elapsed()
}

/// Appends `PUBLISH channel payload` in RESP.
fn encode_publish(buf: &mut Vec<u8>, channel: &[u8], payload: &[u8]) {
    buf.extend_from_slice(b"*3\r\n$7\r\nPUBLISH\r\n");
    for arg in [channel, payload] {
        write!(buf, "${}\r\n", arg.len()).unwrap();
        buf.extend_from_slice(arg);
        buf.extend_from_slice(b"\r\n");
    }
}

/// Publishes stamped messages from a new thread: `rate` a second, each
/// batch written when due (the thread sleeps until the next one), until
/// `n` are out, `stop` is set or [`BOUND`] passes. The thread returns how
/// many it published and its own usage.
fn pace(addr: SocketAddr, rate: f64, n: u64, stop: Arc<AtomicBool>) -> JoinHandle<(u64, Usage)> {
    std::thread::spawn(move || {
        let mut conn = TcpStream::connect(addr).expect("paced publisher connects");
        conn.set_nodelay(true).unwrap();
        conn.write_all(b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n")
            .unwrap();
        let names: Vec<String> = (0..CHANNELS).map(channel).collect();
        let mut rng = testkit::Rng::new(0x5eed ^ n);
        let mut payload = [b'x'; PAYLOAD];
        let mut buf = Vec::with_capacity(BATCH as usize * (PAYLOAD + 64));
        let start = Instant::now();
        let mut sent = 0u64;
        while sent < n && !stop.load(Ordering::Relaxed) && start.elapsed() < BOUND {
            // Message k is due at k / rate.
            let due = ((start.elapsed().as_secs_f64() * rate) as u64 + 1)
                .min(n)
                .min(sent + BATCH);
            if due > sent {
                buf.clear();
                let at = now_us();
                for seq in sent..due {
                    encode_stamp(&mut payload, seq, at);
                    encode_publish(&mut buf, names[rng.index(CHANNELS)].as_bytes(), &payload);
                }
                conn.write_all(&buf).expect("paced publisher writes");
                sent = due;
            }
            let next = start + Duration::from_secs_f64(sent as f64 / rate);
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        (sent, usage::thread())
    })
}

/// Waits (bounded) until `delivery` has seen `n` or stops moving for 2 s.
fn drain(delivery: &Delivery, n: u64) {
    let deadline = Instant::now() + BOUND;
    let (mut last, mut still) = (0, Instant::now());
    while delivery.seen() < n && Instant::now() < deadline {
        let now = delivery.seen();
        if now != last {
            (last, still) = (now, Instant::now());
        } else if still.elapsed() > Duration::from_secs(2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Connections the server lists with at least one channel subscribed.
fn subscribe_connections(server: &Server) -> usize {
    let list = server
        .cmd(&[b"CLIENT", b"LIST"])
        .ok()
        .and_then(|v| testkit::values::text(&v))
        .unwrap_or_default();
    list.lines()
        .filter(|l| l.split(' ').any(|f| f.starts_with("sub=") && f != "sub=0"))
        .count()
}

/// What a run publishes.
#[derive(Clone, Copy)]
pub enum Load {
    /// The C publisher, `n` messages as fast as it goes, with `probes`
    /// stamped messages a second from the paced publisher beside it (0:
    /// none), so the lag is sampled at full speed too.
    C { n: u64, probes: f64 },
    /// The paced publisher alone: `rate` a second for `secs`.
    Paced { rate: f64, secs: f64 },
}

impl Load {
    /// Most stamped messages it may publish.
    fn stamped(self) -> u64 {
        match self {
            Load::C { probes, .. } => (probes * BOUND.as_secs_f64()) as u64,
            Load::Paced { rate, secs } => (rate * secs) as u64,
        }
    }
}

/// One measured run: what was published and delivered, and what the
/// subscriber spent on it.
pub struct Row {
    pub published: u64,
    pub seen: u64,
    /// From the first publish to the last delivery (or the drain's end).
    pub secs: f64,
    /// The subscriber's: the process's, less the paced publisher thread's
    /// and the measuring (this) thread's.
    pub used: Usage,
    /// The subscriber's wake-ups by thread role (threads that ended
    /// meanwhile, like the paced publisher, are not listed).
    pub woke: Vec<(String, u64)>,
    /// Subscribe connections the server lists for this subscriber.
    pub connections: usize,
    /// Dropped by shardsub (queue full, signalled); 0 for the crate.
    pub dropped: u64,
    /// Lag of each stamped message delivered, µs, sorted.
    pub lags: Vec<u32>,
}

/// Starts `who` on a fresh server, publishes `load` while it counts, and
/// measures.
pub fn measure(kind: testkit::ServerKind, who: Who, load: Load) -> Row {
    let server = Server::start(kind).unwrap();
    let delivery = Delivery::new(load.stamped() as usize);
    let sub = who.start(&server, &delivery);
    wait_subscribed(&server);
    let connections = subscribe_connections(&server);
    let stop = Arc::new(AtomicBool::new(false));
    let threads_before = usage::wakeups_by_thread();
    let (before, me_before) = (usage::process(), usage::thread());
    let start = Instant::now();
    let (published, publisher) = match load {
        Load::C { n, probes } => {
            let paced =
                (probes > 0.0).then(|| pace(server.addr(), probes, load.stamped(), stop.clone()));
            publish(&server, n);
            stop.store(true, Ordering::Relaxed);
            let (p, u) = paced.map_or((0, Usage::default()), |t| t.join().unwrap());
            (n + p, u)
        }
        Load::Paced { rate, .. } => pace(server.addr(), rate, load.stamped(), stop)
            .join()
            .unwrap(),
    };
    drain(&delivery, published);
    let used = usage::process() - before - publisher - (usage::thread() - me_before);
    let row = Row {
        published,
        seen: delivery.seen(),
        secs: start.elapsed().as_secs_f64(),
        used,
        woke: usage::wakeups_by_role_since(&threads_before),
        dropped: sub.dropped(),
        connections,
        lags: delivery.lags_us(),
    };
    sub.stop();
    row
}
