//! The worker pool: W threads, each with a bounded queue, fed by the I/O
//! threads.
//!
//! The I/O thread that parsed a message picks the queue with
//! [`shardcore::worker_of`] (so a channel's messages stay in order) and
//! copies channel and payload into a byte buffer from its [`Stage`], which
//! queues a read's messages under one lock per worker (see [`stage`]). The
//! worker swaps the whole queue out under the lock (one lock per batch on
//! its side), runs the handler, and gives the buffers back to the queue's
//! free list. After warm-up nothing is allocated per message.
//!
//! A full queue drops the message and counts it: the reader never blocks
//! (blocking there lets the server cut the connection for output-buffer
//! overrun, or deadlocks a handler that publishes). The queue also notes
//! the dropped message's channel; when the worker takes its next batch it
//! appends one [`Event::Dropped`] naming every such channel once. Since a
//! full queue accepts no message until the worker takes it, every drop
//! happened after the last message of that batch: the event is in order.

use std::collections::{HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

mod recovery;

use crate::engine::host::{Bell, Host, Hosted, Task, Turn};
use crate::error::Error;
use crate::history::{History, Position};
use crate::metrics::{add, Counters};
use crate::threads;

pub(crate) mod handler;
mod merge;
mod stage;

pub use handler::{handler_fn, ChannelList, Event, FnHandler, Handler};
#[cfg(test)]
use stage::STAGE;
pub(crate) use stage::{LaneOwners, Origin, Stage};

/// Buffers larger than this are freed instead of reused, so one huge
/// message does not pin its memory forever.
const KEEP_BUFFER: usize = 64 * 1024;

/// Buffers each queue starts with, and their size (256 KiB per worker).
const PREFILL: usize = 512;
const PREFILL_BYTES: usize = 512;

/// One queued item.
enum Item {
    /// `buf[..channel_len]` is the channel, the rest the payload;
    /// `sent_us` is the envelope's publish time (0 when absent).
    Message {
        buf: Vec<u8>,
        channel_len: usize,
        sent_us: u64,
        /// A recoverable channel's position, from the history header.
        at: Option<Position>,
    },
    /// A message matched by a pattern subscription: `buf[..pattern_len]`
    /// is the pattern, the next `channel_len` bytes the channel, the rest
    /// the payload.
    PMessage {
        buf: Vec<u8>,
        pattern_len: usize,
        channel_len: usize,
        sent_us: u64,
    },
    /// A recovery read's outcome (`buf` holds the channel's name).
    Recovered {
        buf: Vec<u8>,
        id: u64,
        result: Result<History, Error>,
    },
    /// The server confirmed the channel's subscription (`buf` holds its
    /// name): `tell` the handler, and for a recoverable channel, read what
    /// it missed if a gap came before (see
    /// [`recovery::Tracker::handle_confirmed`]); `pattern`: `buf` holds
    /// a pattern.
    Active {
        buf: Vec<u8>,
        tell: bool,
        pattern: bool,
    },
    /// Channels (or, `patterns`, patterns) resubscribed after a loss.
    Gap {
        server: Option<crate::addr::ServerAddr>,
        channels: ChannelList,
        patterns: bool,
    },
    /// A channel's (`pattern`: a pattern's) subscription was refused
    /// (`buf` holds its name).
    Refused {
        buf: Vec<u8>,
        message: std::sync::Arc<str>,
        pattern: bool,
    },
    /// Channels (or, `patterns`, patterns) that lost messages to a full
    /// queue.
    Dropped {
        channels: ChannelList,
        messages: u64,
        patterns: bool,
    },
    /// A server's subscribe connections were lost (`error`) or are all up
    /// again (`None`).
    Server {
        server: std::sync::Arc<str>,
        addr: Option<crate::addr::ServerAddr>,
        error: Option<std::sync::Arc<str>>,
    },
    /// Run by the worker in order with the messages (a fence's marker).
    Marker(Box<dyn FnOnce() + Send>),
}

/// Asked by a worker before it hands a message to the handler: false
/// passes the message over (its channel was given up).
pub(crate) trait Passes: Send + Sync {
    fn passes(&self, channel: &[u8]) -> bool;
    /// [`Passes::passes`] for a message of a pattern subscription.
    fn passes_pattern(&self, pattern: &[u8]) -> bool;
}

/// Reads a recoverable channel's history for its worker, without blocking
/// (see [`recovery`]).
pub(crate) trait Reader: Send + Sync {
    /// Whether `channel` is recoverable.
    fn recoverable(&self, channel: &[u8]) -> bool;
    /// Reads up to `limit` messages after `since`; `done` gets the outcome
    /// (on another thread, or this one when it fails at once).
    fn read(
        &self,
        channel: &[u8],
        since: Position,
        limit: usize,
        done: Box<dyn FnOnce(Result<History, Error>) + Send>,
    );
}

/// Messages dropped since the consumer last took its queue: each channel
/// named once, in the order first dropped, and the count (a worker queue's
/// and a [`Receiver`](crate::pubsub::Receiver)'s drop-and-signal rule).
#[derive(Default)]
pub(crate) struct Drops {
    channels: ChannelList,
    seen: HashSet<Vec<u8>>,
    pub(crate) messages: u64,
}

impl Drops {
    pub(crate) fn note(&mut self, channel: &[u8]) {
        self.messages += 1;
        if self.seen.insert(channel.to_vec()) {
            self.channels.push(channel);
        }
    }

    /// The channels and the count so far, if any; starts afresh.
    pub(crate) fn take(&mut self) -> Option<(ChannelList, u64)> {
        if self.messages == 0 {
            return None;
        }
        self.seen.clear();
        Some((
            std::mem::take(&mut self.channels),
            std::mem::take(&mut self.messages),
        ))
    }
}

struct Inner {
    items: VecDeque<Item>,
    /// Messages in `items` (events do not count against the bound).
    messages: usize,
    free: Vec<Vec<u8>>,
    drops: Drops,
    /// Drops of pattern subscriptions' messages, by pattern.
    pattern_drops: Drops,
    waiting: bool,
    closed: bool,
}

/// One worker's queue.
pub(crate) struct Queue {
    inner: Mutex<Inner>,
    capacity: usize,
    closed: AtomicBool,
    /// A deferred push found the worker waiting.
    wake_due: AtomicBool,
    /// Wake-ups given to the worker so far.
    wakes: std::sync::atomic::AtomicU64,
    /// Set once, after the instance is built: see [`Passes`].
    filter: std::sync::OnceLock<Arc<dyn Passes>>,
    /// Set once, with recoverable channels: see [`Reader`].
    reader: std::sync::OnceLock<Arc<dyn Reader>>,
    /// Rings the worker that consumes the queue (set once it is hosted).
    bell: std::sync::OnceLock<Bell>,
}

impl Queue {
    fn new(capacity: usize) -> Self {
        Queue {
            inner: Mutex::new(Inner {
                items: VecDeque::with_capacity(capacity),
                messages: 0,
                free: {
                    // Pre-sized buffers, so the first bursts after start-up
                    // (and any burst up to PREFILL messages per worker)
                    // allocate nothing either.
                    let mut free = Vec::with_capacity(capacity);
                    free.extend(
                        (0..capacity.min(PREFILL)).map(|_| Vec::with_capacity(PREFILL_BYTES)),
                    );
                    free
                },
                drops: Drops::default(),
                pattern_drops: Drops::default(),
                waiting: false,
                closed: false,
            }),
            capacity,
            closed: AtomicBool::new(false),
            wake_due: AtomicBool::new(false),
            wakes: std::sync::atomic::AtomicU64::new(0),
            filter: std::sync::OnceLock::new(),
            reader: std::sync::OnceLock::new(),
            bell: std::sync::OnceLock::new(),
        }
    }

    /// Wakes the worker (the caller saw it waiting).
    fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = self.bell.get() {
            b.ring();
        }
    }

    /// Wake-ups given to the worker so far.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    /// Sets what the worker asks before handing a message on (once).
    pub(crate) fn set_filter(&self, f: Arc<dyn Passes>) {
        let _ = self.filter.set(f);
    }

    /// Sets the history reader of recoverable channels (once).
    pub(crate) fn set_reader(&self, r: Arc<dyn Reader>) {
        let _ = self.reader.set(r);
    }

    /// Queues a recovery read's outcome (never dropped while open).
    fn push_recovered(&self, channel: &[u8], id: u64, result: Result<History, Error>) {
        self.push(
            |mut buf| {
                buf.clear();
                buf.extend_from_slice(channel);
                Item::Recovered { buf, id, result }
            },
            None,
        );
    }

    /// Queues an item and wakes a waiting worker. `message` is the channel
    /// when the item is a message (a full queue drops it and notes the
    /// channel).
    fn push(&self, item: impl FnOnce(Vec<u8>) -> Item, message: Option<&[u8]>) -> bool {
        let is_message = message.is_some();
        let mut g = self.inner.lock();
        if g.closed {
            return false;
        }
        if let Some(channel) = message.filter(|_| g.messages >= self.capacity) {
            g.drops.note(channel);
            return false;
        }
        let buf = g.free.pop().unwrap_or_default();
        g.items.push_back(item(buf));
        g.messages += usize::from(is_message);
        let wake = g.waiting;
        drop(g);
        if wake {
            self.wake();
        }
        true
    }

    fn message<'a>(
        channel: &'a [u8],
        payload: &'a [u8],
        sent_us: u64,
        at: Option<Position>,
    ) -> impl FnOnce(Vec<u8>) -> Item + 'a {
        move |mut buf| {
            buf.clear();
            buf.extend_from_slice(channel);
            buf.extend_from_slice(payload);
            Item::Message {
                buf,
                channel_len: channel.len(),
                sent_us,
                at,
            }
        }
    }

    /// A message of pattern subscription `pattern`.
    fn pmessage<'a>(
        pattern: &'a [u8],
        channel: &'a [u8],
        payload: &'a [u8],
        sent_us: u64,
    ) -> impl FnOnce(Vec<u8>) -> Item + 'a {
        move |mut buf| {
            buf.clear();
            buf.extend_from_slice(pattern);
            buf.extend_from_slice(channel);
            buf.extend_from_slice(payload);
            Item::PMessage {
                buf,
                pattern_len: pattern.len(),
                channel_len: channel.len(),
                sent_us,
            }
        }
    }

    /// Queues a message; false when it was dropped (queue full or closed).
    // The observers queue through a [`Stage`]; kept for tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn push_message(&self, channel: &[u8], payload: &[u8], sent_us: u64) -> bool {
        self.push(
            Self::message(channel, payload, sent_us, None),
            Some(channel),
        )
    }

    /// Wakes the worker if a deferred push found it waiting.
    pub(crate) fn wake_deferred(&self) {
        if self.wake_due.load(Ordering::Relaxed) && self.wake_due.swap(false, Ordering::AcqRel) {
            // Take the lock so the wake cannot slip between the worker's
            // check and its wait.
            drop(self.inner.lock());
            self.wake();
        }
    }

    /// Queues an "active" event (never dropped while open); `pattern`:
    /// of a pattern.
    pub(crate) fn push_active(&self, channel: &[u8], pattern: bool) {
        if pattern {
            self.push_pattern_active(channel);
        } else {
            self.push_confirmed(channel, true);
        }
    }

    /// Queues a pattern's "active" event (never dropped while open).
    fn push_pattern_active(&self, pattern: &[u8]) {
        self.push(
            |mut buf| {
                buf.clear();
                buf.extend_from_slice(pattern);
                Item::Active {
                    buf,
                    tell: true,
                    pattern: true,
                }
            },
            None,
        );
    }

    /// Whether this queue's worker recovers channels (a reader is set).
    pub(crate) fn recovers(&self) -> bool {
        self.reader.get().is_some()
    }

    /// The server confirmed `channel`'s subscription: queues an "active"
    /// event when `tell`, and a recoverable channel's confirmation (its
    /// recovery after a gap reads then), never dropped while open.
    pub(crate) fn push_confirmed(&self, channel: &[u8], tell: bool) {
        if !tell && !self.reader.get().is_some_and(|r| r.recoverable(channel)) {
            return;
        }
        self.push(
            |mut buf| {
                buf.clear();
                buf.extend_from_slice(channel);
                Item::Active {
                    buf,
                    tell,
                    pattern: false,
                }
            },
            None,
        );
    }

    /// Queues a "refused" event (never dropped while open); `pattern`: of
    /// a pattern.
    pub(crate) fn push_refused(&self, channel: &[u8], message: std::sync::Arc<str>, pattern: bool) {
        self.push(
            |mut buf| {
                buf.clear();
                buf.extend_from_slice(channel);
                Item::Refused {
                    buf,
                    message,
                    pattern,
                }
            },
            None,
        );
    }

    /// Queues a gap event (never dropped while open) naming `channels`
    /// (`patterns`: patterns); `defer` leaves the wake to the next
    /// [`Queue::wake_deferred`].
    pub(crate) fn push_gap(
        &self,
        server: Option<crate::addr::ServerAddr>,
        channels: ChannelList,
        patterns: bool,
        defer: bool,
    ) {
        let mut g = self.inner.lock();
        if g.closed {
            return;
        }
        g.items.push_back(Item::Gap {
            server,
            channels,
            patterns,
        });
        let wake = g.waiting;
        drop(g);
        if wake {
            if defer {
                self.wake_due.store(true, Ordering::Release);
            } else {
                self.wake();
            }
        }
    }

    /// Queues a server's connection event (never dropped while open).
    pub(crate) fn push_server(
        &self,
        server: std::sync::Arc<str>,
        addr: Option<crate::addr::ServerAddr>,
        error: Option<std::sync::Arc<str>>,
    ) {
        let mut g = self.inner.lock();
        if g.closed {
            return;
        }
        g.items.push_back(Item::Server {
            server,
            addr,
            error,
        });
        let wake = g.waiting;
        drop(g);
        if wake {
            self.wake();
        }
    }

    /// Queues `f`, run by the worker after every item queued before it
    /// (never dropped while open; dropped unrun once closed).
    pub(crate) fn push_marker(&self, f: Box<dyn FnOnce() + Send>) {
        let mut g = self.inner.lock();
        if g.closed {
            return;
        }
        g.items.push_back(Item::Marker(f));
        let wake = g.waiting;
        drop(g);
        if wake {
            self.wake();
        }
    }

    /// Messages waiting now.
    pub(crate) fn depth(&self) -> usize {
        self.inner.lock().messages
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.inner.lock().closed = true;
        if let Some(b) = self.bell.get() {
            b.ring();
        }
    }
}

/// The worker queues of an instance, each consumed on one worker thread:
/// threads of its own, or a runtime's, shared with the other instances on
/// it (queue `i` on thread `i`).
pub(crate) struct Pool {
    queues: Vec<Arc<Queue>>,
    hosted: Mutex<Vec<Hosted>>,
    /// Its own threads (none on a runtime's shared workers).
    own: Mutex<Vec<Arc<Host>>>,
}

impl Pool {
    /// Starts `workers` threads of its own with queues of `capacity`
    /// messages each.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses a thread; the workers already
    /// started are stopped.
    pub(crate) fn start(
        workers: usize,
        capacity: usize,
        handler: Arc<dyn Handler>,
        counters: Arc<Counters>,
    ) -> Result<Pool, Error> {
        let mut own = Vec::with_capacity(workers);
        for n in 0..workers {
            let name = format!("shardsub-worker-{n}");
            // A failure drops the threads started so far (joining them).
            own.push(Arc::new(Host::start(
                &name,
                counters.thread_panics.clone(),
            )?));
        }
        let pool = Pool::start_on(&own, capacity, handler, counters);
        *pool.own.lock() = own;
        Ok(pool)
    }

    /// A queue of `capacity` messages on each of `hosts` (a runtime's
    /// shared worker threads).
    pub(crate) fn start_on(
        hosts: &[Arc<Host>],
        capacity: usize,
        handler: Arc<dyn Handler>,
        counters: Arc<Counters>,
    ) -> Pool {
        let queues: Vec<Arc<Queue>> = hosts
            .iter()
            .map(|_| Arc::new(Queue::new(capacity)))
            .collect();
        let hosted = queues
            .iter()
            .zip(hosts)
            .map(|(q, host)| {
                let (h, c) = (handler.clone(), counters.clone());
                host.spawn("shardsub-worker", counters.thread_panics.clone(), |bell| {
                    let _ = q.bell.set(bell.clone());
                    Box::new(Worker::new(q.clone(), h, c))
                })
            })
            .collect();
        Pool {
            queues,
            hosted: Mutex::new(hosted),
            own: Mutex::new(Vec::new()),
        }
    }

    /// The queues, indexed by worker.
    pub(crate) fn queues(&self) -> &[Arc<Queue>] {
        &self.queues
    }

    /// Closes every queue (what is still queued is dropped and counted) and
    /// waits for the workers to let go of them, then stops its own threads;
    /// called from a thread of the runtime, only closes the queues.
    /// Idempotent.
    pub(crate) fn shutdown(&self) {
        for q in &self.queues {
            q.close();
        }
        if crate::engine::on_runtime_thread() {
            // Shared with other instances: no waiting here; the workers let
            // go by themselves, and a later call elsewhere waits.
            return;
        }
        let hosted = self.hosted.lock().clone();
        for h in hosted {
            h.wait_done();
        }
        drop(std::mem::take(&mut *self.own.lock()));
    }
}

/// Microseconds since the Unix epoch (the envelope's clock).
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Carries out the tracker's actions for `channel`, in order.
fn carry_out(
    q: &Arc<Queue>,
    handler: &dyn Handler,
    channel: &[u8],
    out: &mut Vec<recovery::Action>,
    delivered: &mut u64,
) {
    for a in out.drain(..) {
        let outcome = match a {
            recovery::Action::Deliver(payload) => {
                *delivered += 1;
                catch_unwind(AssertUnwindSafe(|| handler.on_message(channel, &payload)))
            }
            recovery::Action::Unrecoverable { since, now, reason } => {
                catch_unwind(AssertUnwindSafe(|| {
                    handler.on_event(Event::Unrecoverable {
                        channel,
                        since,
                        now,
                        reason: &reason,
                    })
                }))
            }
            recovery::Action::Read { since, id } => {
                let Some(reader) = q.reader.get() else {
                    continue;
                };
                let back = Arc::downgrade(q);
                let name = channel.to_vec();
                let done = move |r: Result<History, Error>| {
                    if let Some(q) = back.upgrade() {
                        q.push_recovered(&name, id, r);
                    }
                };
                reader.read(channel, since, recovery::PAGE, Box::new(done));
                Ok(())
            }
        };
        if let Err(payload) = outcome {
            log::error!(
                "Pub/Sub handler panicked: {}; the worker goes on",
                threads::panic_message(&*payload)
            );
        }
    }
}

/// Every recoverable channel of a drop event reads what it missed.
fn recover_drops(
    q: &Arc<Queue>,
    handler: &dyn Handler,
    tracker: &mut recovery::Tracker,
    channels: &ChannelList,
    out: &mut Vec<recovery::Action>,
    delivered: &mut u64,
) {
    let Some(reader) = q.reader.get() else {
        return;
    };
    for channel in channels.iter().filter(|c| reader.recoverable(c)) {
        tracker.handle_drop(channel, out);
        carry_out(q, handler, channel, out, delivered);
    }
}

/// The consumer of one worker queue: a task on a worker thread (one of
/// its own, or one of the runtime's shared with other instances' queues).
/// Each turn takes the queue's batch and hands it to the handler.
struct Worker {
    q: Arc<Queue>,
    handler: Arc<dyn Handler>,
    counters: Arc<Counters>,
    tracker: recovery::Tracker,
    actions: Vec<recovery::Action>,
    local: VecDeque<Item>,
    spent: Vec<Vec<u8>>,
}

impl Worker {
    fn new(q: Arc<Queue>, handler: Arc<dyn Handler>, counters: Arc<Counters>) -> Worker {
        let capacity = q.capacity;
        Worker {
            q,
            handler,
            counters,
            tracker: recovery::Tracker::default(),
            actions: Vec::new(),
            local: VecDeque::with_capacity(capacity),
            spent: Vec::with_capacity(capacity),
        }
    }
}

impl Task for Worker {
    fn slow(&mut self, thread: &str, took: std::time::Duration) {
        self.counters
            .slow_turn(thread, "the handler (on_message/on_event)", took);
    }

    /// Takes the queue's items (and the drop events due) and hands them to
    /// the handler; runs again at once while items are left, when rung once
    /// the queue is empty (the next put wakes it), never once it is closed
    /// and drained.
    fn turn(&mut self) -> Turn {
        let Worker {
            q,
            handler,
            counters,
            tracker,
            actions,
            local,
            spent,
        } = self;
        let handler: &dyn Handler = &**handler;
        {
            let mut g = q.inner.lock();
            g.free.append(spent);
            let idle = |g: &Inner| {
                g.items.is_empty() && g.drops.messages == 0 && g.pattern_drops.messages == 0
            };
            if idle(&g) {
                if g.closed {
                    return Turn::Done; // closed and drained
                }
                g.waiting = true;
                return Turn::Rung;
            }
            g.waiting = false;
            std::mem::swap(&mut g.items, local);
            g.messages = 0;
            let inner: &mut Inner = &mut g;
            for (drops, patterns) in [(&mut inner.drops, false), (&mut inner.pattern_drops, true)] {
                if let Some((channels, messages)) = drops.take() {
                    local.push_back(Item::Dropped {
                        channels,
                        messages,
                        patterns,
                    });
                }
            }
        }
        merge::gaps(local);
        let (mut delivered, mut dropped, mut unwanted) = (0u64, 0u64, 0u64);
        for item in local.drain(..) {
            if q.closed.load(Ordering::Relaxed) {
                dropped += u64::from(matches!(item, Item::Message { .. } | Item::PMessage { .. }));
                continue;
            }
            let item = match item {
                Item::Recovered { buf, id, result } => {
                    tracker.handle_read(&buf, id, result, actions);
                    carry_out(q, handler, &buf, actions, &mut delivered);
                    continue;
                }
                item => item,
            };
            let outcome = match &item {
                Item::Message {
                    buf,
                    channel_len,
                    sent_us,
                    at,
                } => {
                    let (channel, payload) = buf.split_at((*channel_len).min(buf.len()));
                    if q.filter.get().is_some_and(|f| !f.passes(channel)) {
                        unwanted += 1;
                        if at.is_some() {
                            tracker.forget(channel);
                        }
                        Ok(())
                    } else {
                        if *sent_us != 0 {
                            counters.lag.record_us(now_us().saturating_sub(*sent_us));
                        }
                        let now = match at {
                            Some(at) if q.reader.get().is_some() => {
                                tracker.handle_message(channel, *at, payload, actions)
                            }
                            _ => true,
                        };
                        let r = match now {
                            true => {
                                delivered += 1;
                                catch_unwind(AssertUnwindSafe(|| {
                                    handler.on_message(channel, payload)
                                }))
                            }
                            false => Ok(()),
                        };
                        carry_out(q, handler, channel, actions, &mut delivered);
                        r
                    }
                }
                Item::PMessage {
                    buf,
                    pattern_len,
                    channel_len,
                    sent_us,
                } => {
                    let (pattern, rest) = buf.split_at((*pattern_len).min(buf.len()));
                    let (channel, payload) = rest.split_at((*channel_len).min(rest.len()));
                    if q.filter.get().is_some_and(|f| !f.passes_pattern(pattern)) {
                        unwanted += 1;
                        Ok(())
                    } else {
                        if *sent_us != 0 {
                            counters.lag.record_us(now_us().saturating_sub(*sent_us));
                        }
                        delivered += 1;
                        catch_unwind(AssertUnwindSafe(|| {
                            handler.on_pattern_message(pattern, channel, payload)
                        }))
                    }
                }
                Item::Recovered { .. } => Ok(()), // taken above
                Item::Active {
                    buf,
                    tell: true,
                    pattern: true,
                } => catch_unwind(AssertUnwindSafe(|| {
                    handler.on_event(Event::PatternActive { pattern: buf })
                })),
                Item::Active { buf, tell, .. } => {
                    if q.reader.get().is_some_and(|r| r.recoverable(buf)) {
                        tracker.handle_confirmed(buf, actions);
                        carry_out(q, handler, buf, actions, &mut delivered);
                    }
                    match tell {
                        true => catch_unwind(AssertUnwindSafe(|| {
                            handler.on_event(Event::Active { channel: buf })
                        })),
                        false => Ok(()),
                    }
                }
                Item::Gap {
                    server,
                    channels,
                    patterns: true,
                } => {
                    add(&counters.gaps, 1);
                    catch_unwind(AssertUnwindSafe(|| {
                        handler.on_event(Event::PatternGap {
                            server: *server,
                            patterns: channels,
                        })
                    }))
                }
                Item::Gap {
                    server, channels, ..
                } => {
                    add(&counters.gaps, 1);
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        handler.on_event(Event::Gap {
                            server: *server,
                            channels,
                        })
                    }));
                    // Its recoverable channels read once resubscribed.
                    if let Some(reader) = q.reader.get() {
                        for channel in channels.iter().filter(|c| reader.recoverable(c)) {
                            tracker.handle_gap(channel);
                        }
                    }
                    r
                }
                Item::Refused {
                    buf,
                    message,
                    pattern,
                } => catch_unwind(AssertUnwindSafe(|| {
                    handler.on_event(match pattern {
                        true => Event::PatternRefused {
                            pattern: buf,
                            message,
                        },
                        false => Event::Refused {
                            channel: buf,
                            message,
                        },
                    })
                })),
                Item::Dropped {
                    channels,
                    messages,
                    patterns: true,
                } => catch_unwind(AssertUnwindSafe(|| {
                    handler.on_event(Event::PatternDropped {
                        patterns: channels,
                        messages: *messages,
                    })
                })),
                Item::Dropped {
                    channels, messages, ..
                } => {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        handler.on_event(Event::Dropped {
                            channels,
                            messages: *messages,
                        })
                    }));
                    recover_drops(q, handler, tracker, channels, actions, &mut delivered);
                    r
                }
                Item::Server {
                    server,
                    addr,
                    error,
                } => catch_unwind(AssertUnwindSafe(|| {
                    handler.on_event(match error {
                        Some(error) => Event::Disconnected {
                            server,
                            addr: *addr,
                            error,
                        },
                        None => Event::Connected {
                            server,
                            addr: *addr,
                        },
                    })
                })),
                Item::Marker(_) => Ok(()),
            };
            if let Err(payload) = outcome {
                log::error!(
                    "Pub/Sub handler panicked: {}; the worker goes on",
                    threads::panic_message(&*payload)
                );
            }
            match item {
                Item::Message { buf, .. }
                | Item::PMessage { buf, .. }
                | Item::Active { buf, .. }
                    if buf.capacity() <= KEEP_BUFFER =>
                {
                    spent.push(buf)
                }
                Item::Marker(f) => f(),
                _ => {}
            }
        }
        if let Some(f) = q.filter.get() {
            tracker.sweep(|ch| f.passes(ch));
        }
        let n = tracker.take_counts();
        add(&counters.recovered, n.recovered);
        add(&counters.duplicates, n.duplicates);
        add(&counters.unrecoverable, n.unrecoverable);
        add(&counters.delivered, delivered);
        add(&counters.dropped_shutdown, dropped);
        add(&counters.unwanted, unwanted);
        Turn::Again
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize, Mutex<Vec<u32>>);
    impl Handler for Count {
        fn on_message(&self, channel: &[u8], payload: &[u8]) {
            assert_eq!(channel, b"ch");
            self.0.fetch_add(1, Ordering::Relaxed);
            self.1
                .lock()
                .push(u32::from_le_bytes(payload.try_into().unwrap()));
        }
    }

    #[test]
    fn delivers_in_order_and_drops_when_full() {
        let h = Arc::new(Count(AtomicUsize::new(0), Mutex::new(Vec::new())));
        let counters = Arc::new(Counters::default());
        let pool = Pool::start(1, 4, h.clone(), counters.clone()).unwrap();
        let q = pool.queues()[0].clone();
        // Hold the worker out of its queue by filling while it is parked:
        // whatever is accepted must come out in order.
        let mut accepted = 0;
        for i in 0..1000u32 {
            accepted += usize::from(q.push_message(b"ch", &i.to_le_bytes(), 0));
        }
        let start = std::time::Instant::now();
        while h.0.load(Ordering::Relaxed) < accepted {
            assert!(start.elapsed().as_secs() < 5, "worker stuck");
            std::thread::yield_now();
        }
        let seen = h.1.lock().clone();
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        pool.shutdown();
        assert_eq!(
            counters.delivered.load(Ordering::Relaxed) as usize,
            accepted
        );
        assert!(!q.push_message(b"ch", b"late", 0), "closed queue refuses");
    }

    /// Records messages and drop events in order; the first message waits
    /// at a gate, so the test knows what the worker holds.
    #[derive(Default)]
    struct Gated {
        entered: AtomicBool,
        open: AtomicBool,
        log: Mutex<Vec<String>>,
    }
    impl Handler for Gated {
        fn on_message(&self, channel: &[u8], payload: &[u8]) {
            self.entered.store(true, Ordering::Release);
            let start = std::time::Instant::now();
            while !self.open.load(Ordering::Acquire) && start.elapsed().as_secs() < 10 {
                std::thread::yield_now();
            }
            let text = format!("{}{}", String::from_utf8_lossy(channel), payload[0]);
            self.log.lock().push(text);
        }
        fn on_event(&self, event: Event<'_>) {
            if let Event::Dropped { channels, messages } = event {
                let names: Vec<String> = channels
                    .iter()
                    .map(|c| String::from_utf8_lossy(c).to_string())
                    .collect();
                self.log
                    .lock()
                    .push(format!("dropped {messages} {}", names.join(",")));
            }
        }
    }

    #[test]
    fn drops_are_named_once_after_the_messages_queued_before_them() {
        let h = Arc::new(Gated::default());
        let counters = Arc::new(Counters::default());
        let pool = Pool::start(1, 4, h.clone(), counters).unwrap();
        let q = pool.queues()[0].clone();
        assert!(q.push_message(b"a", &[0], 0));
        let start = std::time::Instant::now();
        while !h.entered.load(Ordering::Acquire) {
            assert!(start.elapsed().as_secs() < 5, "worker never started");
            std::thread::yield_now();
        }
        // The worker holds a0 at the gate; four fit, the rest drop.
        for (c, n) in [(b"a", 1), (b"b", 1), (b"a", 2), (b"b", 2)] {
            assert!(q.push_message(c, &[n], 0));
        }
        for (c, n) in [(&b"a"[..], 3), (b"b", 3), (b"c", 1), (b"a", 4)] {
            assert!(!q.push_message(c, &[n], 0));
        }
        h.open.store(true, Ordering::Release);
        // After the batch the queue takes messages again.
        let start = std::time::Instant::now();
        while h.log.lock().len() < 6 {
            assert!(start.elapsed().as_secs() < 5, "{:?}", h.log.lock());
            std::thread::yield_now();
        }
        assert!(q.push_message(b"a", &[5], 0));
        let start = std::time::Instant::now();
        while h.log.lock().len() < 7 {
            assert!(start.elapsed().as_secs() < 5, "{:?}", h.log.lock());
            std::thread::yield_now();
        }
        pool.shutdown();
        assert_eq!(
            *h.log.lock(),
            ["a0", "a1", "b1", "a2", "b2", "dropped 4 a,b,c", "a5"]
        );
    }

    /// A stage's origin for connection `conn`: channel "b" is of lane 1,
    /// every other of lane 0.
    fn origin(
        conn: u64,
        owners: Arc<LaneOwners>,
        lost: Arc<std::sync::atomic::AtomicU64>,
    ) -> Origin {
        Origin {
            conn,
            pattern_lane: None,
            owners,
            lost,
            lane_of: Arc::new(|c: &[u8]| usize::from(c == b"b")),
        }
    }

    #[test]
    fn a_stage_queues_a_partial_batch_only_when_flushed_and_keeps_order() {
        // Queues without workers: what they hold is exactly what was queued.
        let queues: Vec<Arc<Queue>> = (0..2).map(|_| Arc::new(Queue::new(1024))).collect();
        let mut stage = Stage::new(2, origin(7, Arc::new(LaneOwners::new(1)), Arc::default()));
        let names: Vec<Vec<u8>> = (0..10).map(|i| format!("ch{i}").into_bytes()).collect();
        // More than one batch per worker: the full ones are queued early.
        let total = 300u32;
        let mut per_worker = [0usize; 2];
        for seq in 0..total {
            let ch = &names[seq as usize % names.len()];
            let w = shardcore::worker_of(ch, 2) as usize;
            per_worker[w] += 1;
            assert_eq!(
                stage.message(&queues, w, ch, &seq.to_le_bytes(), 0, None),
                0
            );
        }
        // Each worker's last batch (1 to STAGE messages) waits for the flush.
        for (q, &n) in queues.iter().zip(&per_worker) {
            let staged = if n == 0 { 0 } else { (n - 1) % STAGE + 1 };
            assert_eq!(q.depth(), n - staged);
        }
        assert!(per_worker.iter().all(|&n| n % STAGE != 0 && n > STAGE));
        assert_eq!(stage.flush(&queues), 0);
        assert!(stage.is_empty());
        let mut seen: Vec<(Vec<u8>, u32)> = Vec::new();
        for (q, &n) in queues.iter().zip(&per_worker) {
            assert_eq!(q.depth(), n);
            for item in q.inner.lock().items.drain(..) {
                let Item::Message {
                    buf, channel_len, ..
                } = item
                else {
                    panic!("only messages were staged");
                };
                let (c, p) = buf.split_at(channel_len);
                seen.push((c.to_vec(), u32::from_le_bytes(p.try_into().unwrap())));
            }
        }
        for ch in &names {
            let seqs: Vec<u32> = seen.iter().filter(|(c, _)| c == ch).map(|m| m.1).collect();
            let want: Vec<u32> = (0..total)
                .filter(|s| &names[*s as usize % 10] == ch)
                .collect();
            assert_eq!(seqs, want, "{ch:?}");
        }
    }

    #[test]
    fn a_flush_into_a_full_queue_drops_the_rest_and_names_them_after() {
        let h = Arc::new(Gated::default());
        let counters = Arc::new(Counters::default());
        let pool = Pool::start(1, 4, h.clone(), counters).unwrap();
        let queues = pool.queues().to_vec();
        assert!(queues[0].push_message(b"a", &[0], 0));
        let start = std::time::Instant::now();
        while !h.entered.load(Ordering::Acquire) {
            assert!(start.elapsed().as_secs() < 5, "worker never started");
            std::thread::yield_now();
        }
        // The worker holds a0: of eight staged, four fit.
        let mut stage = Stage::new(1, origin(7, Arc::new(LaneOwners::new(1)), Arc::default()));
        let staged = [
            (&b"a"[..], 1),
            (b"b", 1),
            (b"a", 2),
            (b"b", 2),
            (b"a", 3),
            (b"c", 1),
            (b"b", 3),
            (b"a", 4),
        ];
        for (c, n) in staged {
            assert_eq!(stage.message(&queues, 0, c, &[n], 0, None), 0);
        }
        assert_eq!(stage.flush(&queues), 4);
        h.open.store(true, Ordering::Release);
        let start = std::time::Instant::now();
        while h.log.lock().len() < 6 {
            assert!(start.elapsed().as_secs() < 5, "{:?}", h.log.lock());
            std::thread::yield_now();
        }
        pool.shutdown();
        assert_eq!(
            *h.log.lock(),
            ["a0", "a1", "b1", "a2", "b2", "dropped 4 a,c,b"]
        );
    }

    #[test]
    fn a_lane_that_moved_takes_no_more_messages_from_its_old_connection() {
        // Connection 7 carries lanes 0 and 1 when it reads; lane 1 moves to
        // connection 8 before the read is queued (8's messages may already
        // be in): 7's lane-1 messages are dropped and noted, lane 0's kept
        // in order.
        let queue = Arc::new(Queue::new(1024));
        let queues = [queue.clone()];
        let owners = Arc::new(LaneOwners::new(2));
        owners.set(0, Some(7));
        owners.set(1, Some(7));
        owners.confirm(0, 7);
        owners.confirm(1, 7);
        let lost7 = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut old = Stage::new(1, origin(7, owners.clone(), lost7.clone()));
        let mut new = Stage::new(1, origin(8, owners.clone(), Arc::default()));
        // "a" is of lane 0, "b" of lane 1 (see `origin`).
        let staged = [(&b"a"[..], 1u8), (b"b", 1), (b"a", 2), (b"b", 2), (b"a", 3)];
        for (c, n) in staged {
            assert_eq!(old.message(&queues, 0, c, &[n], 0, None), 0);
        }
        // As the control thread does: the move, then the loser's count.
        assert_eq!(owners.set(1, Some(8)), Some(7));
        lost7.fetch_add(1, Ordering::Release);
        assert_eq!(new.message(&queues, 0, b"b", &[3], 0, None), 0);
        assert_eq!(new.flush(&queues), 0);
        assert_eq!(old.flush(&queues), 0);
        assert_eq!(owners.late(), 2);
        // A moved lane's messages are refused from the start of a batch
        // too, and a lane nobody carries takes none.
        assert_eq!(owners.set(0, None), Some(7));
        lost7.fetch_add(1, Ordering::Release);
        assert_eq!(old.message(&queues, 0, b"a", &[4], 0, None), 0);
        assert_eq!(old.flush(&queues), 0);
        assert_eq!(owners.late(), 3);
        let mut g = queue.inner.lock();
        let got: Vec<(Vec<u8>, u8)> = g
            .items
            .drain(..)
            .map(|item| match item {
                Item::Message {
                    buf, channel_len, ..
                } => (buf[..channel_len].to_vec(), buf[channel_len]),
                _ => panic!("only messages were staged"),
            })
            .collect();
        let want: Vec<(Vec<u8>, u8)> = [(&b"b"[..], 3), (b"a", 1), (b"a", 2), (b"a", 3)]
            .iter()
            .map(|(c, n)| (c.to_vec(), *n))
            .collect();
        assert_eq!(got, want);
        assert_eq!(g.messages, 4);
        let (channels, n) = g.drops.take().expect("the drops are noted");
        assert_eq!(n, 3);
        let names: Vec<&[u8]> = channels.iter().collect();
        assert_eq!(names, [&b"b"[..], b"a"]);
    }

    #[test]
    fn a_lane_given_back_takes_its_old_messages_only_after_the_new_confirmation() {
        // Lane 0 moves from 7 to 8 and back to 7 while 7 still holds a
        // message of its first subscription: that one is dropped, and 7's
        // messages are delivered again once it read its new confirmation.
        let queue = Arc::new(Queue::new(1024));
        let queues = [queue.clone()];
        let owners = Arc::new(LaneOwners::new(1));
        let lost7 = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut seven = Stage::new(1, origin(7, owners.clone(), lost7.clone()));
        let mut eight = Stage::new(1, origin(8, owners.clone(), Arc::default()));
        assert_eq!(owners.set(0, Some(7)), None);
        owners.confirm(0, 7);
        assert_eq!(seven.message(&queues, 0, b"a", &[1], 0, None), 0);
        assert_eq!(seven.flush(&queues), 0);
        assert_eq!(seven.message(&queues, 0, b"a", &[2], 0, None), 0);
        assert_eq!(owners.set(0, Some(8)), Some(7));
        lost7.fetch_add(1, Ordering::Release);
        owners.confirm(0, 8);
        assert_eq!(eight.message(&queues, 0, b"a", &[3], 0, None), 0);
        assert_eq!(eight.flush(&queues), 0);
        // Back to 7 before its old message is queued.
        assert_eq!(owners.set(0, Some(7)), Some(8));
        // Giving a lane to its owner again changes nothing.
        assert_eq!(owners.set(0, Some(7)), None);
        assert_eq!(seven.flush(&queues), 0);
        assert_eq!(owners.late(), 1);
        owners.confirm(0, 7);
        assert_eq!(seven.message(&queues, 0, b"a", &[4], 0, None), 0);
        assert_eq!(seven.flush(&queues), 0);
        assert_eq!(owners.late(), 1);
        let got: Vec<u8> = queue
            .inner
            .lock()
            .items
            .drain(..)
            .map(|item| match item {
                Item::Message {
                    buf, channel_len, ..
                } => buf[channel_len],
                _ => panic!("only messages were staged"),
            })
            .collect();
        assert_eq!(got, [1, 3, 4]);
    }

    #[test]
    fn a_panicking_handler_does_not_kill_the_worker() {
        let n = Arc::new(AtomicUsize::new(0));
        let n2 = n.clone();
        let h = move |_: &[u8], p: &[u8]| {
            n2.fetch_add(1, Ordering::Relaxed);
            assert_ne!(p, b"boom");
        };
        let pool = Pool::start(1, 16, Arc::new(h), Arc::new(Counters::default())).unwrap();
        let q = &pool.queues()[0];
        assert!(q.push_message(b"c", b"boom", 0));
        assert!(q.push_message(b"c", b"ok", 0));
        let start = std::time::Instant::now();
        while n.load(Ordering::Relaxed) < 2 {
            assert!(start.elapsed().as_secs() < 5);
            std::thread::yield_now();
        }
        pool.shutdown();
    }

    /// Counts every message, whatever its channel.
    #[derive(Default)]
    struct Tally(AtomicUsize);
    impl Handler for Tally {
        fn on_message(&self, _channel: &[u8], _payload: &[u8]) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits up to 5 s for `cond`; false if it never held.
    fn within_5s(cond: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !cond() {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        true
    }

    /// A worker pool of one with a queue of `capacity`, its worker parked.
    fn parked(capacity: usize) -> (Pool, Arc<Queue>, Arc<Tally>) {
        let h = Arc::new(Tally::default());
        let pool = Pool::start(1, capacity, h.clone(), Arc::default()).unwrap();
        let q = pool.queues()[0].clone();
        assert!(
            within_5s(|| q.inner.lock().waiting),
            "the worker never waited"
        );
        (pool, q, h)
    }

    /// Stages `n` messages for worker 0 the way one read does; the caller
    /// flushes (the read's end).
    fn stage_read(q: &Arc<Queue>, n: usize) -> Stage {
        let queues = std::slice::from_ref(q);
        let mut stage = Stage::new(1, origin(1, Arc::new(LaneOwners::new(1)), Arc::default()));
        for i in 0..n as u32 {
            assert_eq!(
                stage.message(queues, 0, b"ch", &i.to_le_bytes(), 0, None),
                0
            );
        }
        stage
    }

    #[test]
    fn a_long_read_wakes_its_worker_once_at_its_end_not_per_full_batch() {
        let (pool, q, h) = parked(4096);
        let n = 3 * STAGE + 1;
        let mut stage = stage_read(&q, n);
        assert_eq!(q.wakes(), 0, "a full batch mid-read woke the worker");
        assert_eq!(stage.flush(std::slice::from_ref(&q)), 0);
        assert_eq!(q.wakes(), 1);
        assert!(within_5s(|| h.0.load(Ordering::Relaxed) == n));
        pool.shutdown();
    }

    #[test]
    fn a_quarter_full_queue_wakes_its_worker_in_the_middle_of_a_read() {
        // A quarter of 256 is one full batch.
        let (pool, q, h) = parked(4 * STAGE);
        let mut stage = stage_read(&q, STAGE + 1);
        assert_eq!(
            q.wakes(),
            1,
            "the quarter-full queue waited for the read's end"
        );
        assert_eq!(stage.flush(std::slice::from_ref(&q)), 0);
        assert!(within_5s(|| h.0.load(Ordering::Relaxed) == STAGE + 1));
        pool.shutdown();
    }
}
