//! The sans-IO connection core: one Redis/Valkey connection as a state machine.
//!
//! [`Connection`] owns everything about a connection except the socket and the
//! clock: the handshake (`HELLO 3` with optional `AUTH` and `SETNAME`, or the
//! RESP2 fallback), the FIFO of requests awaiting replies, the output buffer
//! with its flush-delay policy, and the input buffer that replies are parsed
//! from in place. It never blocks, never reads a clock and never touches a
//! socket, so every interleaving a server can produce is a unit test.
//!
//! # How to drive it
//!
//! Like `quinn-proto`, inputs go in through `handle_*` and `send_*`, outputs
//! come out of `poll_*`. After any input, call in this order:
//!
//! 1. [`Connection::poll_event`] until it returns `None` (replies, pushes,
//!    handshake done, failures);
//! 2. [`Connection::poll_transmit`] and write what it returns, then
//!    [`Connection::advance_transmit`] with the count written;
//! 3. [`Connection::poll_timeout`] for the next instant to call
//!    [`Connection::handle_timeout`].
//!
//! Bytes come in through [`Connection::handle_read`] (a copy) or
//! [`Connection::read_from`] (straight into the input buffer).
//!
//! # Reply matching
//!
//! Replies are matched to requests first-in, first-out. A push (`>` in RESP3;
//! in RESP2, a Pub/Sub array on a [`Role::Subscribe`] connection) never takes a
//! request's reply. An attribute (`|`) travels with the reply that follows it.
//! A `(P|S)SUBSCRIBE` request of `n` channels ([`ReplyKind::Subscribe`]) is
//! finished by its `n`-th confirmation. Unsubscribe confirmations are always
//! pushes, so a server-initiated `sunsubscribe` cannot shift the queue: send
//! `(S|P)UNSUBSCRIBE` with [`Connection::send_raw`] followed by a `PING`
//! request whose reply stands for the unsubscribe's.

mod handshake;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
mod types;

use std::collections::VecDeque;
use std::io;
use std::time::Instant;

use resp::{AggregateKind, Decoder, Frame, Parsed, PubSub, Status};

use handshake::{Handshake, HandshakeOutcome};
pub use types::{ConnConfig, ConnError, Event, Protocol, ReplyKind, Request, Role, SubscribeKind};

/// Input bytes: `buf[start..end]` is unparsed data.
struct InBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of the frame last returned, dropped on the next call.
    to_consume: usize,
    /// The last [`Connection::read_from`] got fewer bytes than it offered.
    short: bool,
}

const MIN_READ: usize = 64 * 1024;

/// The most bytes one [`Connection::read_from`] takes: the parsing after a
/// read, and so the time between two deadline checks of a driver that reads
/// a flooding socket, stays bounded.
const MAX_READ: usize = 1 << 20;

/// Written bytes at the front of the output buffer are dropped once there
/// are at least this many and they are at least half the buffer.
const COMPACT_AFTER: usize = 256 * 1024;

impl InBuf {
    fn settle(&mut self) {
        self.start += std::mem::take(&mut self.to_consume);
        if self.start >= self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    fn make_room(&mut self) {
        self.settle();
        if self.buf.len() - self.end < MIN_READ {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < MIN_READ {
                let want = (self.buf.len() * 2).max(self.end + MIN_READ);
                self.buf.resize(want, 0);
            }
        }
    }
}

/// One connection's protocol state. `T` is the caller's per-request token.
pub struct Connection<T> {
    decoder: Decoder,
    input: InBuf,
    st: State<T>,
}

/// Everything but the input side, kept apart so a frame borrowed from the
/// input buffer can be returned while the rest is updated.
struct State<T> {
    config: ConnConfig,
    protocol: Protocol,
    /// Bytes to write; `out[written..]` is unsent.
    out: Vec<u8>,
    written: usize,
    /// When the unsent bytes become due.
    flush_at: Option<Instant>,
    /// Requests whose replies are awaited, in order.
    pending: VecDeque<Request<T>>,
    /// Of `pending`: requests fully written and not yet answered, and
    /// requests whose bytes are still (partly) in `out`.
    in_flight: usize,
    unsent_requests: usize,
    /// Bytes written since the connection opened.
    sent_total: u64,
    /// Per queued batch: where its bytes start and end (counting every
    /// byte queued since the connection opened) and how many requests it
    /// holds; popped once written.
    batches: VecDeque<(u64, u64, usize)>,
    /// In step with `pending`: when each request was written (until then,
    /// when it was queued). Its deadline is that plus the request timeout;
    /// nothing else (a reply to another request, a push, a confirmation)
    /// moves it.
    sent_at: VecDeque<Instant>,
    /// Requests and bytes submitted before the handshake finished.
    held: VecDeque<Request<T>>,
    held_out: Vec<u8>,
    handshake: Option<Handshake>,
    /// A `Connected` event not yet returned (its `fell_back` flag).
    connected: Option<bool>,
    closed: Option<ConnError>,
    close_reported: bool,
    /// Latest time passed in.
    now: Instant,
}

impl<T> State<T> {
    fn unsent_len(&self) -> usize {
        self.out.len() - self.written
    }

    fn send_encoded<I>(&mut self, bytes: &[u8], requests: I, now: Instant)
    where
        I: IntoIterator<Item = Request<T>>,
    {
        self.now = now;
        if self.closed.is_some() {
            // They fail through poll_event like any other pending request.
            self.held.extend(requests);
            return;
        }
        if self.handshake.is_some() {
            self.held_out.extend_from_slice(bytes);
            self.held.extend(requests);
            return;
        }
        self.out.extend_from_slice(bytes);
        self.account(bytes.len(), requests, now);
    }

    /// Bookkeeping for `appended` bytes just added to `out` and the requests
    /// they make (the connection is open and past its handshake).
    fn account<I>(&mut self, appended: usize, requests: I, now: Instant)
    where
        I: IntoIterator<Item = Request<T>>,
    {
        // Fewer than two written requests await replies: there is no
        // pipeline to batch behind, and holding would only add delay (a
        // lone caller, or two callers taking turns).
        let nothing_in_flight = self.in_flight < 2;
        let before = self.pending.len();
        self.pending.extend(requests);
        let added = self.pending.len() - before;
        self.sent_at.extend(std::iter::repeat_n(now, added));
        self.unsent_requests += added;
        if added > 0 {
            let end = self.sent_total + self.unsent_len() as u64;
            self.batches.push_back((end - appended as u64, end, added));
        }
        if appended == 0 {
            return;
        }
        if nothing_in_flight
            || self.config.flush_delay.is_zero()
            || self.unsent_len() >= self.config.flush_batch_bytes
        {
            self.flush_at = Some(now);
        } else if self.flush_at.is_none() {
            self.flush_at = Some(now + self.config.flush_delay);
        }
    }

    /// The front request got its reply. When that leaves nothing written
    /// awaiting a reply, held commands are due at once: the flush delay is
    /// an upper bound, never a wait for nothing.
    fn answered(&mut self) {
        if self.in_flight > 0 {
            self.in_flight -= 1;
            if self.in_flight < 2 && self.unsent_len() > 0 {
                self.flush_at = Some(self.now);
            }
        } else {
            // Its bytes were not all written yet, but the server had them.
            self.unsent_requests = self.unsent_requests.saturating_sub(1);
            if let Some((_, _, n)) = self.batches.front_mut() {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// The front request of `pending` fails (the connection is over):
    /// whether its bytes may have reached the server (see
    /// [`Event::Failed`]). Written whole, or in the batch whose writing
    /// began and did not end: its requests' bytes are not told apart, so
    /// each of them may have been written whole. A later batch's writing
    /// had not begun.
    fn fail_front(&mut self) -> bool {
        if self.in_flight > 0 {
            self.in_flight -= 1;
            return true;
        }
        self.unsent_requests = self.unsent_requests.saturating_sub(1);
        while self.batches.front().is_some_and(|&(_, _, n)| n == 0) {
            self.batches.pop_front();
        }
        let Some((start, _, n)) = self.batches.front_mut() else {
            return false;
        };
        let begun = self.sent_total > *start;
        *n -= 1;
        begun
    }

    /// Fails the connection if the handshake or request deadline has passed
    /// at `self.now`.
    fn check_deadlines(&mut self) {
        if self.closed.is_some() {
            return;
        }
        if let Some(hs) = &self.handshake {
            if self.now >= hs.deadline {
                self.fail(ConnError::HandshakeTimeout(self.config.handshake_timeout));
            }
            return;
        }
        let timeout = self.config.request_timeout;
        let oldest = self.sent_at.front().copied();
        if !timeout.is_zero() && oldest.is_some_and(|at| self.now >= at + timeout) {
            self.fail(ConnError::Timeout(timeout));
        }
    }

    /// The events of a closed connection, one per call: each request it
    /// had failed, then the close itself, then nothing.
    fn next_after_close<'a>(&mut self) -> Option<Event<'a, T>> {
        let error = self.closed.as_ref()?;
        self.sent_at.pop_front();
        if let Some(r) = self.pending.pop_front() {
            let error = error.clone();
            let sent = self.fail_front();
            return Some(Event::Failed {
                user: r.user,
                error,
                sent,
            });
        }
        // Held for the handshake, or sent after the close: never written.
        if let Some(r) = self.held.pop_front() {
            return Some(Event::Failed {
                user: r.user,
                error: error.clone(),
                sent: false,
            });
        }
        if !self.close_reported {
            self.close_reported = true;
            return Some(Event::Closed {
                error: error.clone(),
            });
        }
        None
    }

    /// A frame read during the handshake: a push is passed on; a reply
    /// moves the handshake on, and its end sends what was held for it
    /// (`Connected`). `None`: nothing to tell yet.
    fn handshake_reply<'a>(&mut self, parsed: Parsed<'a>, is_push: bool) -> Option<Event<'a, T>> {
        if is_push {
            let class = resp::classify(&parsed.frame);
            return Some(Event::Push {
                push: parsed,
                class,
                completes: None,
            });
        }
        let hs = self.handshake.as_mut()?;
        match hs.handle_reply(&parsed.frame, &self.config, &mut self.out, self.now) {
            HandshakeOutcome::Continue => {}
            HandshakeOutcome::FellBack => {
                self.protocol = Protocol::Resp2;
                if !self.out.is_empty() {
                    self.flush_at = Some(self.now);
                }
            }
            HandshakeOutcome::Sent => {
                if !self.out.is_empty() {
                    self.flush_at = Some(self.now);
                }
            }
            HandshakeOutcome::Done { fell_back } => {
                if fell_back {
                    self.protocol = Protocol::Resp2;
                }
                self.handshake = None;
                let held_out = std::mem::take(&mut self.held_out);
                let held = std::mem::take(&mut self.held);
                let now = self.now;
                self.send_encoded(&held_out, held, now);
                if self.unsent_len() > 0 {
                    self.flush_at = Some(now);
                }
                return Some(Event::Connected {
                    protocol: self.protocol,
                    fell_back,
                });
            }
            HandshakeOutcome::Failed(e) => self.fail(e),
        }
        None
    }

    fn fail(&mut self, error: ConnError) {
        if self.closed.is_none() {
            log::debug!("connection failed: {error}");
            self.closed = Some(error);
            self.handshake = None;
            self.out.clear();
            self.held_out.clear();
            self.written = 0;
            self.flush_at = None;
        }
    }
}

impl<T> Connection<T> {
    /// A new connection whose socket has just connected at `now`. The
    /// handshake is queued in the output buffer at once.
    pub fn new(config: ConnConfig, now: Instant) -> Self {
        let mut out = Vec::with_capacity(MIN_READ);
        let handshake = Handshake::start(&config, &mut out, now);
        let connected = if handshake.is_none() {
            Some(false)
        } else {
            None
        };
        let protocol = if config.protocol == Protocol::Resp3 && handshake.is_some() {
            Protocol::Resp3
        } else {
            Protocol::Resp2
        };
        Connection {
            decoder: Decoder::new(config.limits),
            input: InBuf {
                buf: vec![0; MIN_READ],
                start: 0,
                end: 0,
                to_consume: 0,
                short: false,
            },
            st: State {
                protocol,
                flush_at: if out.is_empty() { None } else { Some(now) },
                out,
                written: 0,
                pending: VecDeque::new(),
                in_flight: 0,
                unsent_requests: 0,
                sent_total: 0,
                batches: VecDeque::new(),
                sent_at: VecDeque::new(),
                held: VecDeque::new(),
                held_out: Vec::new(),
                handshake,
                connected,
                closed: None,
                close_reported: false,
                now,
                config,
            },
        }
    }

    /// The protocol in use (RESP3 until a refused `HELLO` says otherwise).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn protocol(&self) -> Protocol {
        self.st.protocol
    }

    /// True once the handshake has finished (and the connection is open).
    pub fn is_ready(&self) -> bool {
        self.st.handshake.is_none() && self.st.closed.is_none()
    }

    /// True once the connection has failed or been closed.
    pub fn is_closed(&self) -> bool {
        self.st.closed.is_some()
    }

    /// Requests awaiting replies (not counting those held for the handshake).
    pub fn pending_len(&self) -> usize {
        self.st.pending.len()
    }

    /// Unsent output bytes, commands held for the handshake included (the
    /// engine's backpressure reads this, so a long handshake cannot let
    /// commands pile up past its bound).
    pub fn unsent_len(&self) -> usize {
        self.st.unsent_len() + self.st.held_out.len()
    }

    /// Queues encoded commands and the requests they make. `bytes` must hold
    /// exactly the commands whose replies `requests` describe, in order.
    ///
    /// Before the handshake finishes, both are held and go out after it.
    /// When nothing was outstanding they are due at once; otherwise they may
    /// wait up to the flush delay to share a write with later commands.
    /// On a closed connection the requests fail through
    /// [`Connection::poll_event`].
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn send_encoded<I>(&mut self, bytes: &[u8], requests: I, now: Instant)
    where
        I: IntoIterator<Item = Request<T>>,
    {
        self.st.send_encoded(bytes, requests, now);
    }

    /// [`Connection::send_encoded`] taking the bytes out of `bytes`: when
    /// nothing is waiting to be written, the buffers are swapped instead of
    /// copied. `bytes` is left empty (with some capacity) either way.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn send_encoded_vec<I>(&mut self, bytes: &mut Vec<u8>, requests: I, now: Instant)
    where
        I: IntoIterator<Item = Request<T>>,
    {
        let st = &mut self.st;
        if st.out.is_empty() && st.closed.is_none() && st.handshake.is_none() {
            st.now = now;
            // `out` is empty (all written): take the bytes, leave it behind.
            std::mem::swap(&mut st.out, bytes);
            st.written = 0;
            let appended = st.out.len();
            st.account(appended, requests, now);
        } else {
            st.send_encoded(bytes, requests, now);
        }
        bytes.clear();
    }

    /// Encodes and queues one command expecting one reply.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn send_command<I>(&mut self, args: I, user: T, now: Instant)
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        let mut bytes = Vec::new();
        resp::encode_command(&mut bytes, args);
        self.st.send_encoded(&bytes, [Request::single(user)], now);
    }

    /// Queues bytes that produce no reply of their own (for example an
    /// `UNSUBSCRIBE`, whose confirmations are pushes).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn send_raw(&mut self, bytes: &[u8], now: Instant) {
        self.st.send_encoded(bytes, std::iter::empty(), now);
    }

    /// Bytes read from the socket.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn handle_read(&mut self, bytes: &[u8], now: Instant) {
        self.st.now = now;
        let mut rest = bytes;
        while !rest.is_empty() {
            self.input.make_room();
            let room = &mut self.input.buf[self.input.end..];
            let n = room.len().min(rest.len());
            room[..n].copy_from_slice(&rest[..n]);
            self.input.end += n;
            rest = &rest[n..];
        }
    }

    /// Reads once from `source` straight into the input buffer, at most
    /// 1 MiB. `Ok(0)` means end of stream (then call
    /// [`Connection::handle_eof`]).
    ///
    /// # Errors
    ///
    /// Whatever `source.read` returns (`WouldBlock` included); the
    /// connection is not changed by an error.
    pub fn read_from<R: io::Read>(&mut self, source: &mut R, now: Instant) -> io::Result<usize> {
        self.st.now = now;
        self.input.make_room();
        let end = self.input.buf.len().min(self.input.end + MAX_READ);
        let offered = end - self.input.end;
        let n = source.read(&mut self.input.buf[self.input.end..end])?;
        self.input.end += n;
        self.input.short = n < offered;
        Ok(n)
    }

    /// Whether the last [`Connection::read_from`] returned fewer bytes than
    /// it had room for. On a plain TCP socket that means the socket's
    /// receive queue was empty, so an edge-triggered reader can wait for
    /// the next readiness event instead of reading again to see
    /// `WouldBlock` (one `recvfrom` fewer per wake-up).
    pub fn last_read_was_short(&self) -> bool {
        self.input.short
    }

    /// The peer closed its side.
    pub fn handle_eof(&mut self, now: Instant) {
        self.st.now = now;
        self.st.fail(ConnError::Closed);
    }

    /// A socket error: the connection is over.
    pub fn handle_io_error(&mut self, kind: io::ErrorKind, now: Instant) {
        self.st.now = now;
        self.st.fail(ConnError::Io(kind));
    }

    /// Closes the connection from this side; pending requests fail with
    /// [`ConnError::Aborted`].
    pub fn close(&mut self) {
        self.st.fail(ConnError::Aborted);
    }

    /// Checks the handshake and request deadlines. They are also checked
    /// whenever input leaves a reply incomplete (see
    /// [`Connection::poll_event`]), so a reply that keeps arriving but never
    /// ends cannot outlive them.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.st.now = now;
        self.st.check_deadlines();
    }

    /// The next instant at which [`Connection::handle_timeout`] or a flush
    /// ([`Connection::poll_transmit`]) is due: the earlier of
    /// [`Connection::poll_flush_at`] and [`Connection::poll_deadline`].
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.poll_flush_at(), self.poll_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When unsent bytes become due (possibly already past), if any.
    pub fn poll_flush_at(&self) -> Option<Instant> {
        let st = &self.st;
        if st.closed.is_some() || st.unsent_len() == 0 {
            return None;
        }
        st.flush_at
    }

    /// Makes bytes held back by the flush delay due at once: for a writer
    /// that waits for their replies next, holding them gathers nothing.
    pub fn flush_now(&mut self, now: Instant) {
        let st = &mut self.st;
        if st.closed.is_none() && st.unsent_len() > 0 && st.handshake.is_none() {
            st.flush_at = Some(st.flush_at.map_or(now, |at| at.min(now)));
        }
    }

    /// The handshake or request deadline, if one is running.
    pub fn poll_deadline(&self) -> Option<Instant> {
        let st = &self.st;
        if st.closed.is_some() {
            None
        } else if let Some(hs) = &st.handshake {
            Some(hs.deadline)
        } else if !st.config.request_timeout.is_zero() {
            st.sent_at.front().map(|&at| at + st.config.request_timeout)
        } else {
            None
        }
    }

    /// Bytes due to be written at `now`, if any. Bytes held back by the flush
    /// delay are not returned before their time.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<&[u8]> {
        let st = &mut self.st;
        st.now = now;
        if st.closed.is_some() || st.written == st.out.len() {
            return None;
        }
        match st.flush_at {
            Some(at) if at <= now => Some(&st.out[st.written..]),
            _ => None,
        }
    }

    /// `n` bytes of what [`Connection::poll_transmit`] returned were written.
    pub fn advance_transmit(&mut self, n: usize) {
        let st = &mut self.st;
        let n = n.min(st.out.len() - st.written);
        st.written += n;
        st.sent_total += n as u64;
        // Requests whose bytes have all been written now await replies.
        while let Some(&(_, end, count)) = st.batches.front() {
            if end > st.sent_total {
                break;
            }
            st.batches.pop_front();
            let count = count.min(st.unsent_requests);
            // Their clocks start now (`pending` holds the written requests,
            // then the unsent ones in order).
            let now = st.now;
            for at in st.sent_at.iter_mut().skip(st.in_flight).take(count) {
                *at = now;
            }
            st.unsent_requests -= count;
            st.in_flight += count;
        }
        if st.written == st.out.len() {
            st.out.clear();
            st.written = 0;
            st.flush_at = None;
        } else if st.written >= COMPACT_AFTER && st.written * 2 >= st.out.len() {
            // Under continuous load the buffer never empties: drop what was
            // written so it does not grow without bound.
            st.out.drain(..st.written);
            st.written = 0;
        }
    }

    /// The next event, if any. Call until `None` after every input.
    ///
    /// When the input ends inside a frame (or holds none), the handshake and
    /// request deadlines are checked against the latest time passed in, as
    /// [`Connection::handle_timeout`] would: a reply still incomplete at its
    /// deadline fails however many of its bytes keep arriving.
    pub fn poll_event(&mut self) -> Option<Event<'_, T>> {
        let st = &mut self.st;
        let input = &mut self.input;
        loop {
            input.start += std::mem::take(&mut input.to_consume);
            if input.start >= input.end {
                input.start = 0;
                input.end = 0;
            }
            if st.closed.is_some() {
                return st.next_after_close();
            }
            if let Some(fell_back) = st.connected.take() {
                return Some(Event::Connected {
                    protocol: st.protocol,
                    fell_back,
                });
            }
            let parsed = match self.decoder.decode(&input.buf[input.start..input.end]) {
                Err(e) => {
                    st.fail(ConnError::Protocol(e));
                    continue;
                }
                Ok(Status::Incomplete) => {
                    // Waiting for the rest of a frame: its bytes may keep
                    // coming, but they do not move the deadlines.
                    st.check_deadlines();
                    if st.closed.is_some() {
                        continue;
                    }
                    return None;
                }
                Ok(Status::Complete(p)) => p,
            };
            input.to_consume = parsed.consumed;
            let is_push =
                matches!(parsed.frame, Frame::Aggregate(a) if a.kind() == AggregateKind::Push);

            if st.handshake.is_some() {
                match st.handshake_reply(parsed, is_push) {
                    Some(event) => return Some(event),
                    None => continue,
                }
            }

            let class = match parsed.frame {
                Frame::Aggregate(a)
                    if a.kind() == AggregateKind::Push
                        || (st.protocol == Protocol::Resp2 && a.kind() == AggregateKind::Array) =>
                {
                    resp::classify(&parsed.frame)
                }
                _ => None,
            };
            // A confirmation for the subscribe request at the front?
            if let (Some(class), Some(front)) = (class, st.pending.front_mut()) {
                if let ReplyKind::Subscribe {
                    kind,
                    confirmations,
                } = &mut front.kind
                {
                    if confirms(*kind, &class) {
                        *confirmations = confirmations.saturating_sub(1);
                        let completes = if *confirmations == 0 {
                            st.sent_at.pop_front();
                            let user = st.pending.pop_front().map(|r| r.user);
                            st.answered();
                            user
                        } else {
                            None
                        };
                        return Some(Event::Push {
                            push: parsed,
                            class: Some(class),
                            completes,
                        });
                    }
                }
            }
            let resp2_push = st.config.role == Role::Subscribe
                && !matches!(
                    class,
                    None | Some(PubSub::Pong { .. }) | Some(PubSub::Other)
                );
            if is_push || resp2_push {
                return Some(Event::Push {
                    push: parsed,
                    class,
                    completes: None,
                });
            }
            let refused_unsubscribe =
                matches!(
                    st.pending.front().map(|r| &r.kind),
                    Some(ReplyKind::Unsubscribe)
                ) && matches!(parsed.frame, Frame::Error(_) | Frame::BlobError(_));
            if refused_unsubscribe {
                log::debug!("an unsubscribe was refused: {:?}", parsed.frame);
                continue;
            }
            match st.pending.pop_front() {
                Some(r) => {
                    st.sent_at.pop_front();
                    st.answered();
                    return Some(Event::Reply {
                        user: r.user,
                        reply: parsed,
                    });
                }
                None => st.fail(ConnError::UnexpectedReply),
            }
        }
    }
}

fn confirms(kind: SubscribeKind, class: &PubSub<'_>) -> bool {
    matches!(
        (kind, class),
        (SubscribeKind::Channel, PubSub::Subscribe { .. })
            | (SubscribeKind::Pattern, PubSub::PSubscribe { .. })
            | (SubscribeKind::Shard, PubSub::SSubscribe { .. })
    )
}
