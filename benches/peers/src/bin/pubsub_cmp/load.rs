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
use std::sync::Arc;
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

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of the stamps, the same in
/// every process of the machine (the grid's publisher and subscribers are
/// processes of their own).
pub fn monotonic_ns() -> u64 {
    // SAFETY: `ts` is a valid, writable timespec and CLOCK_MONOTONIC a
    // clock every Linux has.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts
    };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A stamped payload: `#`, the sequence number and the publish time
/// ([`monotonic_ns`]), both little-endian `u64`, then `x` to its end (at
/// least 17 bytes).
fn encode_stamp(payload: &mut [u8], seq: u64, at: u64) {
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

/// Waits until the server reports the first and last of the first
/// `channels` channels subscribed by exactly `clients` clients.
pub fn wait_subscribed(server: &Server, channels: usize, clients: i64) {
    let deadline = Instant::now() + BOUND;
    let mut names = vec![channel(0)];
    if channels > 1 {
        names.push(channel(channels - 1));
    }
    let mut cmd: Vec<&[u8]> = vec![b"PUBSUB", b"NUMSUB"];
    cmd.extend(names.iter().map(|n| n.as_bytes()));
    let full = |x: &testkit::Value| matches!(x, testkit::Value::Integer(n) if *n == clients);
    loop {
        let ones = match server.cmd(&cmd) {
            Ok(testkit::Value::Array(v)) => v.iter().filter(|x| full(x)).count(),
            Ok(testkit::Value::Map(v)) => v.iter().filter(|(_, x)| full(x)).count(),
            _ => 0,
        };
        if ones == names.len() {
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

/// How the paced publisher puts its messages into writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Whatever is due in one write, the next write when the next message
    /// is due (at low rates one message a write, more as the rate rises).
    Due,
    /// One `PUBLISH` a write, each when it is due.
    PerWrite,
    /// Whatever is due in one write, a write every period.
    Every(Duration),
}

/// What the paced publisher publishes: `n` stamped messages at `rate` a
/// second to random channels of the first `channels`, `payload` bytes each.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    pub rate: f64,
    pub n: u64,
    pub channels: usize,
    pub payload: usize,
    pub shape: Shape,
}

/// Publishes `p` on a connection of its own (replies off) from this
/// thread, until the messages are out, `stop` is set or [`BOUND`] passes;
/// returns how many it published and in how many writes.
pub fn pace_here(addr: SocketAddr, p: &Pace, stop: &AtomicBool) -> (u64, u64) {
    let mut conn = TcpStream::connect(addr).expect("paced publisher connects");
    conn.set_nodelay(true).unwrap();
    conn.write_all(b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n")
        .unwrap();
    let names: Vec<String> = (0..p.channels).map(channel).collect();
    let mut rng = testkit::Rng::new(0x5eed ^ p.n);
    let mut payload = vec![b'x'; p.payload];
    let mut buf = Vec::with_capacity(BATCH as usize * (p.payload + 64));
    let mut writes = 0u64;
    let mut write = |buf: &mut Vec<u8>| {
        conn.write_all(buf).expect("paced publisher writes");
        buf.clear();
        writes += 1;
    };
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < p.n && !stop.load(Ordering::Relaxed) && start.elapsed() < BOUND {
        // Message k is due at k / rate.
        let due = ((start.elapsed().as_secs_f64() * p.rate) as u64 + 1)
            .min(p.n)
            .min(sent + BATCH);
        for seq in sent..due {
            encode_stamp(&mut payload, seq, monotonic_ns());
            encode_publish(&mut buf, names[rng.index(p.channels)].as_bytes(), &payload);
            if p.shape == Shape::PerWrite {
                write(&mut buf);
            }
        }
        if !buf.is_empty() {
            write(&mut buf);
        }
        sent = sent.max(due);
        let next = match p.shape {
            Shape::Every(period) => {
                let ticks = start.elapsed().as_nanos() / period.as_nanos().max(1) + 1;
                start + period * ticks as u32
            }
            Shape::Due | Shape::PerWrite => start + Duration::from_secs_f64(sent as f64 / p.rate),
        };
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    (sent, writes)
}

/// [`pace_here`] on a new thread, the rates table's way: whatever is due
/// in one write, over the 10,000 channels, 256-byte payloads. The thread
/// returns how many it published and its own usage.
fn pace(addr: SocketAddr, rate: f64, n: u64, stop: Arc<AtomicBool>) -> JoinHandle<(u64, Usage)> {
    std::thread::spawn(move || {
        let p = Pace {
            rate,
            n,
            channels: CHANNELS,
            payload: PAYLOAD,
            shape: Shape::Due,
        };
        let (sent, _) = pace_here(addr, &p, &stop);
        (sent, usage::thread())
    })
}

/// Waits (bounded) until `delivery` has seen `n` or stops moving for 2 s.
pub fn drain(delivery: &Delivery, n: u64) {
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
    let sub = who.start(server.addr(), CHANNELS, &delivery);
    wait_subscribed(&server, CHANNELS, 1);
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
