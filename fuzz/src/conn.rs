//! The connection core (`shardsub::conn::Connection`) driven by a schedule
//! read from the fuzz input: server bytes (canned frames or raw bytes) cut
//! into any chunks, request submissions, partial writes, clock steps, EOF,
//! socket errors and closes, in any order.
//!
//! Invariants checked after every step:
//! - no panic, and `poll_event` stops (no endless event stream);
//! - requests complete exactly once, in submission order (a reply, the last
//!   subscribe confirmation, or a failure); nothing else completes;
//! - `Connected` comes once, before any reply; once the connection has
//!   failed it reports closed, fails what is pending, says `Closed` once
//!   (after the last failure), and returns no more replies, pushes or output;
//! - timeouts fire exactly when `poll_deadline` says; unsent bytes always
//!   have a flush time, due now or no later than the flush delay after they
//!   were queued, and are returned once it has come;
//! - what is written is the handshake, then the submitted commands in order,
//!   each once;
//! - heap held by the connection stays within a constant plus a small
//!   multiple of the unparsed input, the unsent output and the commands held
//!   for the handshake (which `unsent_len` does not count).

use std::io::Cursor;
use std::time::{Duration, Instant};

use resp::{Frame, Limits, Status};
use shardsub::conn::{
    ConnConfig, ConnError, Connection, Event, Protocol, ReplyKind, Request, Role, SubscribeKind,
};

use crate::input::Input;
use testkit::alloc::this_thread as heap;

/// Canned server frames a schedule can queue by index, so that replies the
/// core understands are a byte away for the fuzzer.
pub const FRAMES: &[&[u8]] = &[
    b"%1\r\n$6\r\nserver\r\n$5\r\nredis\r\n",
    b"+OK\r\n",
    b":1\r\n",
    b"$1\r\nx\r\n",
    b"_\r\n",
    b"-ERR unknown command 'HELLO'\r\n",
    b"-NOPROTO unsupported protocol version\r\n",
    b"-WRONGPASS invalid username-password pair\r\n",
    b"-ERR boom\r\n",
    b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n",
    b">3\r\n$10\r\nssubscribe\r\n$1\r\na\r\n:1\r\n",
    b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n",
    b">3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:1\r\n",
    b">3\r\n$12\r\nsunsubscribe\r\n$1\r\na\r\n:0\r\n",
    b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n",
    b"*3\r\n$10\r\nssubscribe\r\n$1\r\na\r\n:1\r\n",
    b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n",
    b"*2\r\n$4\r\npong\r\n$0\r\n\r\n",
    b"|1\r\n+key\r\n:7\r\n+OK\r\n",
    b"*2\r\n:1\r\n:2\r\n",
];

/// Schedule operations: the first byte of each step, modulo [`OPS`].
pub mod op {
    /// Queue `FRAMES[next byte]`.
    pub const FRAME: u8 = 0;
    /// Queue the next `n` raw bytes (`n`: next byte).
    pub const RAW: u8 = 1;
    /// Queue `256 * (n + 1)` copies of one byte (`fill`, `n`).
    pub const FILL: u8 = 2;
    /// Deliver up to `n` queued bytes (u16; 0: all) with `handle_read`.
    pub const DELIVER: u8 = 3;
    /// The same through `read_from`.
    pub const READ: u8 = 4;
    /// Submit 1-4 requests (byte: count and how; one kind byte each).
    pub const SUBMIT: u8 = 5;
    /// `send_raw` one command that gets no reply.
    pub const RAW_COMMAND: u8 = 6;
    /// Submit one request of `1 KiB * (n + 1)` bytes.
    pub const BIG: u8 = 7;
    /// Advance the clock (`STEPS[next byte]`) and call `handle_timeout`.
    pub const TICK: u8 = 8;
    /// `poll_transmit`, then write `n` bytes of it (u16; 0xffff: all).
    pub const WRITE: u8 = 9;
    /// Deliver everything queued, then write everything due.
    pub const PUMP: u8 = 10;
    /// `handle_eof`.
    pub const EOF: u8 = 11;
    /// `handle_io_error`.
    pub const IO_ERROR: u8 = 12;
    /// `close`.
    pub const CLOSE: u8 = 13;
}

/// Number of operations; tags at or above wrap around.
pub const OPS: u8 = 14;

/// Clock steps a [`op::TICK`] can take.
pub const STEPS: &[Duration] = &[
    Duration::ZERO,
    Duration::from_micros(1),
    Duration::from_micros(50),
    Duration::from_micros(100),
    Duration::from_millis(1),
    Duration::from_millis(100),
    Duration::from_millis(999),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
    Duration::from_secs(60),
];

/// Most steps of one schedule.
const MAX_STEPS: usize = 4096;

/// Most bytes [`op::FILL`] queues, and [`op::BIG`] submits, in one schedule.
const MAX_BYTES: usize = 4 << 20;

/// Heap the core may hold beyond what its input and output justify: the
/// 64 KiB input and output buffers, the decoder's stack, and the 256 KiB of
/// written output it may keep before compacting, each with room to double.
const HEAP_SLACK: usize = 1 << 20;

/// The config from the schedule's first two bytes.
pub fn config(a: u8, b: u8) -> ConnConfig {
    let pick = |table: &[Duration], bits: u8| table[usize::from(bits) % table.len()];
    let some = |bit: u8, v: &[u8]| (a & bit != 0).then(|| v.to_vec());
    ConnConfig {
        protocol: if a & 1 == 0 {
            Protocol::Resp3
        } else {
            Protocol::Resp2
        },
        role: if a & 2 == 0 {
            Role::Command
        } else {
            Role::Subscribe
        },
        password: some(4, b"pw"),
        username: some(8, b"user"),
        client_name: some(16, b"fz"),
        flush_delay: pick(
            &[
                Duration::ZERO,
                Duration::from_micros(100),
                Duration::from_millis(10),
            ],
            a >> 5,
        ),
        flush_batch_bytes: [1, 64, 16 * 1024][usize::from(b & 3) % 3],
        request_timeout: pick(
            &[
                Duration::from_secs(1),
                Duration::ZERO,
                Duration::from_millis(1),
                Duration::from_secs(5),
            ],
            b >> 2,
        ),
        handshake_timeout: pick(&[Duration::from_secs(2), Duration::from_millis(1)], b >> 4),
        limits: match b >> 5 {
            0..=3 => Limits::default(),
            4 | 5 => Limits {
                max_bulk_len: 64,
                max_elements: 8,
                max_depth: 4,
                max_line_len: 32,
            },
            _ => Limits {
                max_bulk_len: 1024,
                max_elements: 1024,
                max_depth: 16,
                max_line_len: 256,
            },
        },
        // The handshake's `SCRIPT LOAD` and `ROLE` steps are not fuzzed yet
        // (no bit of the schedule's first two bytes is free for them).
        load_scripts: Vec::new(),
        require_primary: false,
    }
}

/// Runs the schedule in `data` and checks every invariant.
pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let (a, b) = (input.u8(), input.u8());
    let mut run = Run::new(config(a, b));
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        run.step(&mut input);
        run.drain();
        run.check_state();
    }
    run.finish();
}

/// What an event said, owned, so the event (and any allocation in it) is
/// dropped inside the measured call.
enum Seen {
    Connected,
    Reply(u32, usize),
    Push(Option<u32>, usize),
    Failed(u32, ConnError),
    Closed(ConnError),
}

struct Run {
    c: Connection<u32>,
    config: ConnConfig,
    now: Instant,
    /// Server bytes queued, `wire[at..]` not delivered yet.
    wire: Vec<u8>,
    at: usize,
    /// Requests submitted and completed; completions must come in order.
    submitted: u32,
    completed: u32,
    /// Commands submitted, each tagged `FZ<n>`.
    commands: u32,
    /// Bytes submitted by [`op::BIG`].
    big: usize,
    /// Bytes the core returned from `poll_transmit` and we "wrote".
    written: Vec<u8>,
    connected: bool,
    /// The error of the first failure or `Closed`, once one was seen.
    failed: Option<ConnError>,
    closed_reported: bool,
    /// When the unsent output became non-empty.
    unsent_since: Option<Instant>,
    /// Bytes delivered, and consumed by replies and pushes we saw.
    fed: usize,
    consumed: usize,
    /// Heap the core holds (sum of its calls' net allocations), its peak,
    /// and the high-water marks that bound it.
    held: isize,
    peak: usize,
    backlog_hwm: usize,
    unsent_hwm: usize,
    outstanding_hwm: usize,
    /// Bytes submitted during the handshake, held by the core and not
    /// counted in `unsent_len` until it is over.
    held_bytes: usize,
    held_hwm: usize,
}

impl Run {
    fn new(config: ConnConfig) -> Self {
        let now = Instant::now();
        let before = heap::live_bytes();
        heap::reset_peak();
        let c = Connection::new(config.clone(), now);
        let peak = (heap::peak_bytes() - before).max(0) as usize;
        let held = heap::live_bytes() - before;
        Run {
            c,
            config,
            now,
            wire: Vec::new(),
            at: 0,
            submitted: 0,
            completed: 0,
            commands: 0,
            big: 0,
            written: Vec::new(),
            connected: false,
            failed: None,
            closed_reported: false,
            unsent_since: None,
            fed: 0,
            consumed: 0,
            held,
            peak,
            backlog_hwm: 0,
            unsent_hwm: 0,
            outstanding_hwm: 0,
            held_bytes: 0,
            held_hwm: 0,
        }
    }

    /// Calls `f` on the core, counting the heap it takes and gives back.
    fn call<R>(&mut self, f: impl FnOnce(&mut Connection<u32>, &mut Vec<u8>) -> R) -> R {
        let before = heap::live_bytes();
        heap::reset_peak();
        let r = f(&mut self.c, &mut self.written);
        let peak = (heap::peak_bytes() - before).max(0) as usize;
        self.peak = self
            .peak
            .max((self.held.max(0) as usize).saturating_add(peak));
        self.held += heap::live_bytes() - before;
        r
    }

    fn step(&mut self, input: &mut Input<'_>) {
        match input.u8() % OPS {
            op::FRAME => {
                let frame = FRAMES[input.below(FRAMES.len())];
                self.wire.extend_from_slice(frame);
            }
            op::RAW => {
                let n = usize::from(input.u8());
                self.wire.extend_from_slice(input.bytes(n));
            }
            op::FILL => {
                let (byte, n) = (input.u8(), usize::from(input.u8()) + 1);
                if self.fed + self.wire.len() < MAX_BYTES {
                    self.wire.resize(self.wire.len() + 256 * n, byte);
                }
            }
            op::DELIVER => {
                let n = input.u16();
                self.deliver(usize::from(n), false);
            }
            op::READ => {
                let n = input.u16();
                self.deliver(usize::from(n), true);
            }
            op::SUBMIT => self.submit(input),
            op::RAW_COMMAND => {
                let bytes = self.command(b"raw");
                let now = self.now;
                self.call(|c, _| c.send_raw(&bytes, now));
            }
            op::BIG => {
                let size = 1024 * (usize::from(input.u8()) + 1);
                if self.big >= MAX_BYTES {
                    return;
                }
                self.big += size;
                let bytes = self.command(&vec![b'x'; size]);
                let user = self.submitted;
                self.submitted += 1;
                let now = self.now;
                self.call(|c, _| c.send_encoded(&bytes, [Request::single(user)], now));
            }
            op::TICK => {
                let step = input.pick(STEPS);
                self.tick(step);
            }
            op::WRITE => {
                let n = input.u16();
                self.write(if n == u16::MAX {
                    usize::MAX
                } else {
                    usize::from(n)
                });
            }
            op::PUMP => {
                self.deliver(0, false);
                self.drain();
                self.write(usize::MAX);
            }
            op::EOF => {
                let now = self.now;
                self.call(|c, _| c.handle_eof(now));
            }
            op::IO_ERROR => {
                let now = self.now;
                self.call(|c, _| c.handle_io_error(std::io::ErrorKind::ConnectionReset, now));
            }
            _ => self.call(|c, _| c.close()),
        }
    }

    /// `FZ<n> <arg>`, the next command.
    fn command(&mut self, arg: &[u8]) -> Vec<u8> {
        let tag = format!("FZ{}", self.commands);
        self.commands += 1;
        let mut out = Vec::new();
        resp::encode_command(&mut out, [tag.as_bytes(), arg]);
        self.queued(out.len());
        out
    }

    /// `len` bytes are about to be submitted.
    fn queued(&mut self, len: usize) {
        if !self.c.is_ready() && !self.c.is_closed() {
            self.held_bytes += len;
            self.held_hwm = self.held_hwm.max(self.held_bytes);
        }
    }

    fn submit(&mut self, input: &mut Input<'_>) {
        let how = input.u8();
        let count = 1 + usize::from(how & 3);
        let now = self.now;
        let mut requests = Vec::new();
        let mut bytes = Vec::new();
        for _ in 0..count {
            let k = input.u8();
            let confirmations = 1 + u32::from(k >> 4) % 3;
            let kind = match k % 5 {
                2 => Some(SubscribeKind::Channel),
                3 => Some(SubscribeKind::Pattern),
                4 => Some(SubscribeKind::Shard),
                _ => None,
            };
            let user = self.submitted;
            self.submitted += 1;
            if (how >> 2) % 3 == 2 {
                // One `send_command` per request (always a single reply).
                let tag = format!("FZ{}", self.commands);
                self.commands += 1;
                self.queued(tag.len() + 32);
                self.call(|c, _| c.send_command([tag.as_bytes(), b"cmd"], user, now));
                continue;
            }
            bytes.extend(self.command(b"req"));
            requests.push(Request {
                user,
                kind: match kind {
                    Some(kind) => ReplyKind::Subscribe {
                        kind,
                        confirmations,
                    },
                    None => ReplyKind::Single,
                },
            });
        }
        if requests.is_empty() {
            return;
        }
        // The request list is ours until the core consumes (and frees) it.
        self.held += (requests.capacity() * std::mem::size_of::<Request<u32>>()) as isize;
        if (how >> 2).is_multiple_of(3) {
            self.call(|c, _| c.send_encoded(&bytes, requests, now));
        } else {
            // The core may keep our buffer and give back its own: count the
            // one handed over as the core's, free the one returned inside.
            self.held += bytes.capacity() as isize;
            self.call(move |c, _| {
                let mut bytes = bytes;
                c.send_encoded_vec(&mut bytes, requests, now);
                assert!(bytes.is_empty(), "send_encoded_vec left bytes behind");
            });
        }
    }

    fn deliver(&mut self, n: usize, through_read: bool) {
        let left = self.wire.len() - self.at;
        let n = if n == 0 { left } else { n.min(left) };
        if n == 0 {
            return;
        }
        let chunk = &self.wire[self.at..self.at + n];
        let now = self.now;
        let before = heap::live_bytes();
        heap::reset_peak();
        let got = if through_read {
            let mut source = Cursor::new(chunk);
            let mut got = 0;
            // Each read takes at least the core's 64 KiB minimum room.
            for _ in 0..n {
                match self.c.read_from(&mut source, now) {
                    Ok(0) => break,
                    Ok(k) => got += k,
                    Err(e) => panic!("read_from a Cursor failed: {e}"),
                }
            }
            got
        } else {
            self.c.handle_read(chunk, now);
            n
        };
        let peak = (heap::peak_bytes() - before).max(0) as usize;
        self.peak = self
            .peak
            .max((self.held.max(0) as usize).saturating_add(peak));
        self.held += heap::live_bytes() - before;
        assert_eq!(got, n, "read_from took {got} of {n} bytes");
        self.at += n;
        self.fed += n;
        self.backlog_hwm = self.backlog_hwm.max(self.fed - self.consumed.min(self.fed));
        if self.at == self.wire.len() {
            self.wire.clear();
            self.at = 0;
        }
    }

    fn tick(&mut self, step: Duration) {
        self.now += step;
        let now = self.now;
        let was_closed = self.c.is_closed();
        let deadline = self.c.poll_deadline();
        self.call(|c, _| c.handle_timeout(now));
        if was_closed {
            return;
        }
        match deadline {
            Some(d) if now >= d => assert!(
                self.c.is_closed(),
                "deadline {:?} passed ({:?} late) and nothing timed out",
                d,
                now - d
            ),
            _ => assert!(
                !self.c.is_closed(),
                "timed out before its deadline ({deadline:?})"
            ),
        }
    }

    /// One `poll_transmit`, `n` bytes of it written.
    fn write(&mut self, n: usize) {
        let now = self.now;
        let due = self.c.poll_flush_at().is_some_and(|at| at <= now);
        let got = self.call(|c, written| {
            let Some(out) = c.poll_transmit(now) else {
                return None;
            };
            assert!(!out.is_empty(), "poll_transmit returned no bytes");
            let take = n.min(out.len());
            heap::paused(|| written.extend_from_slice(&out[..take]));
            let len = out.len();
            c.advance_transmit(take);
            Some(len)
        });
        assert_eq!(due, got.is_some(), "flush due: {due}, transmit: {got:?}");
    }

    /// `poll_event` until `None`, checking each event.
    fn drain(&mut self) {
        // Every event consumes input, completes a request, or is one of the
        // two one-off events.
        let bound = self.fed + self.submitted as usize + 4;
        for _ in 0..=bound {
            let seen = self.call(|c, _| {
                c.poll_event().map(|ev| match ev {
                    Event::Connected { .. } => Seen::Connected,
                    Event::Reply { user, reply } => Seen::Reply(user, reply.consumed),
                    Event::Push {
                        push, completes, ..
                    } => Seen::Push(completes, push.consumed),
                    Event::Failed { user, error, .. } => Seen::Failed(user, error),
                    Event::Closed { error } => Seen::Closed(error),
                })
            });
            match seen {
                Some(seen) => self.seen(seen),
                None => return,
            }
        }
        panic!("poll_event did not stop after {bound} events");
    }

    fn complete(&mut self, user: u32) {
        assert_eq!(
            user, self.completed,
            "request {user} completed, expected {} (of {} submitted)",
            self.completed, self.submitted
        );
        assert!(user < self.submitted, "request {user} was never submitted");
        self.completed += 1;
    }

    fn seen(&mut self, seen: Seen) {
        if !matches!(seen, Seen::Failed(..) | Seen::Closed(_)) {
            assert!(
                self.failed.is_none(),
                "an event after the connection failed"
            );
            assert!(!self.c.is_closed(), "an event from a closed connection");
        }
        match seen {
            Seen::Connected => {
                assert!(!self.connected, "Connected twice");
                self.connected = true;
            }
            Seen::Reply(user, consumed) => {
                assert!(self.connected, "a reply before Connected");
                self.complete(user);
                self.consumed += consumed;
            }
            Seen::Push(completes, consumed) => {
                if let Some(user) = completes {
                    assert!(self.connected, "a confirmation completed before Connected");
                    self.complete(user);
                }
                self.consumed += consumed;
            }
            Seen::Failed(user, error) => {
                assert!(self.c.is_closed(), "Failed on an open connection");
                self.same_error(error);
                self.complete(user);
            }
            Seen::Closed(error) => {
                assert!(self.c.is_closed(), "Closed on an open connection");
                assert!(!self.closed_reported, "Closed twice");
                assert_eq!(
                    self.completed, self.submitted,
                    "Closed with requests still pending"
                );
                self.same_error(error);
                self.closed_reported = true;
            }
        }
    }

    fn same_error(&mut self, error: ConnError) {
        match &self.failed {
            Some(first) => assert_eq!(first, &error, "one connection, two errors"),
            None => self.failed = Some(error),
        }
    }

    /// Invariants between steps (after a drain).
    fn check_state(&mut self) {
        let c = &self.c;
        let outstanding = (self.submitted - self.completed) as usize;
        assert!(
            c.pending_len() <= outstanding,
            "more pending than submitted"
        );
        if c.is_closed() {
            assert!(self.closed_reported, "closed, drained, and no Closed event");
            assert!(!c.is_ready());
            assert_eq!(c.pending_len(), 0);
            assert_eq!(c.unsent_len(), 0, "a closed connection keeps output");
            assert!(
                c.poll_timeout().is_none(),
                "a closed connection wants a timer"
            );
        } else {
            assert!(self.failed.is_none(), "failed but not closed");
            assert_eq!(c.is_ready(), self.connected, "ready vs Connected");
        }
        if c.is_ready() || c.is_closed() {
            self.held_bytes = 0;
        }
        // Commands held for the handshake count as unsent (the engine's
        // backpressure reads `unsent_len`), but are not due before it ends.
        if c.unsent_len() > 0 && (c.is_ready() || self.held_bytes == 0) {
            let since = *self.unsent_since.get_or_insert(self.now);
            let at = c.poll_flush_at();
            assert!(
                at.is_some(),
                "{} unsent bytes and no flush time",
                c.unsent_len()
            );
            // Due now, or at most the flush delay after the bytes were queued
            // (a later submission may set an already due time to now).
            let at = at.unwrap_or(since);
            let latest = since + self.config.flush_delay;
            assert!(
                at <= self.now || at <= latest,
                "flush held {:?} past the delay",
                at - latest
            );
        } else {
            self.unsent_since = None;
        }
        let backlog = self.fed - self.consumed.min(self.fed);
        self.backlog_hwm = self.backlog_hwm.max(backlog);
        self.unsent_hwm = self.unsent_hwm.max(c.unsent_len());
        self.outstanding_hwm = self.outstanding_hwm.max(outstanding);
        let bound = HEAP_SLACK
            + 4 * self.backlog_hwm
            + 4 * (self.unsent_hwm + self.held_hwm)
            + 128 * self.outstanding_hwm;
        assert!(
            self.peak <= bound,
            "the core held {} heap bytes (bound {bound}: backlog {}, unsent {}, held for the \
             handshake {}, outstanding {})",
            self.peak,
            self.backlog_hwm,
            self.unsent_hwm,
            self.held_hwm,
            self.outstanding_hwm
        );
    }

    /// Closes the connection and checks what was completed and written.
    fn finish(mut self) {
        self.call(|c, _| c.close());
        self.drain();
        self.check_state();
        assert_eq!(self.completed, self.submitted, "requests never completed");
        assert!(self.closed_reported);
        check_written(&self.written, self.commands);
    }
}

/// `written` is handshake commands, then `FZ0`, `FZ1`… (a prefix of the
/// `commands` submitted), each once, possibly cut short at the end.
fn check_written(written: &[u8], commands: u32) {
    let limits = Limits::default();
    let mut rest = written;
    let mut next = 0u32;
    while !rest.is_empty() {
        let parsed = match resp::parse(rest, &limits) {
            Ok(Status::Complete(p)) => p,
            Ok(Status::Incomplete) => return,
            Err(e) => panic!("wrote bytes that are not RESP: {e}"),
        };
        let first = match &parsed.frame {
            Frame::Aggregate(a) => a.iter().next().and_then(|f| f.as_bytes()),
            _ => None,
        };
        let Some(first) = first else {
            panic!(
                "wrote a frame that is not a command: {:?}",
                parsed.to_value()
            );
        };
        match first.strip_prefix(b"FZ") {
            Some(n) => {
                assert_eq!(n, next.to_string().as_bytes(), "commands out of order");
                next += 1;
            }
            None => assert_eq!(next, 0, "a handshake command after FZ{}", next - 1),
        }
        rest = &rest[parsed.consumed..];
    }
    assert!(next <= commands);
}
