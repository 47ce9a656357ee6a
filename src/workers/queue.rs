//! One worker's bounded queue: what the I/O threads push, what the
//! worker swaps out per turn, and the drops it signals.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::engine::host::Bell;
use crate::error::Error;
use crate::history::{History, Position};
use crate::workers::handler::ChannelList;

/// Buffers larger than this are freed instead of reused, so one huge
/// message does not pin its memory forever.
pub(super) const KEEP_BUFFER: usize = 64 * 1024;

/// Buffers each queue starts with, and their size (256 KiB per worker).
const PREFILL: usize = 512;
const PREFILL_BYTES: usize = 512;

/// One queued item.
pub(super) enum Item {
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

pub(super) struct Inner {
    pub(super) items: VecDeque<Item>,
    /// Messages in `items` (events do not count against the bound).
    pub(super) messages: usize,
    pub(super) free: Vec<Vec<u8>>,
    pub(super) drops: Drops,
    /// Drops of pattern subscriptions' messages, by pattern.
    pub(super) pattern_drops: Drops,
    pub(super) waiting: bool,
    pub(super) closed: bool,
}

/// A gap event as the control thread queues it: the server, the channels
/// (or patterns) it names, and whether they are patterns.
pub(crate) type Gap = (Option<crate::addr::ServerAddr>, ChannelList, bool);

/// One worker's queue.
pub(crate) struct Queue {
    pub(super) inner: Mutex<Inner>,
    pub(super) capacity: usize,
    pub(super) closed: AtomicBool,
    /// Wake-ups given to the worker so far.
    pub(super) wakes: std::sync::atomic::AtomicU64,
    /// Set once, after the instance is built: see [`Passes`].
    pub(super) filter: std::sync::OnceLock<Arc<dyn Passes>>,
    /// Set once, with recoverable channels: see [`Reader`].
    pub(super) reader: std::sync::OnceLock<Arc<dyn Reader>>,
    /// Rings the worker that consumes the queue (set once it is hosted).
    pub(super) bell: std::sync::OnceLock<Bell>,
}

impl Queue {
    pub(super) fn new(capacity: usize) -> Self {
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
            wakes: std::sync::atomic::AtomicU64::new(0),
            filter: std::sync::OnceLock::new(),
            reader: std::sync::OnceLock::new(),
            bell: std::sync::OnceLock::new(),
        }
    }

    /// Wakes the worker (the caller saw it waiting).
    pub(super) fn wake(&self) {
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
    pub(super) fn push_recovered(&self, channel: &[u8], id: u64, result: Result<History, Error>) {
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
    pub(super) fn push(&self, item: impl FnOnce(Vec<u8>) -> Item, message: Option<&[u8]>) -> bool {
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

    pub(super) fn message<'a>(
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
    pub(super) fn pmessage<'a>(
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
    pub(super) fn push_pattern_active(&self, pattern: &[u8]) {
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

    /// Queues gap events (never dropped while open), all in one go so the
    /// worker takes them in one turn and merges them (see `merge`).
    pub(crate) fn push_gaps(&self, gaps: impl Iterator<Item = Gap>) {
        let mut g = self.inner.lock();
        if g.closed {
            return;
        }
        for (server, channels, patterns) in gaps {
            g.items.push_back(Item::Gap {
                server,
                channels,
                patterns,
            });
        }
        let wake = g.waiting;
        drop(g);
        if wake {
            self.wake();
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

    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.inner.lock().closed = true;
        if let Some(b) = self.bell.get() {
            b.ring();
        }
    }
}
