//! The consumer of one worker queue: a task on a worker thread that hands
//! each batch to the handler, in order, with drops, gaps and recovery.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::engine::host::{Task, Turn};
use crate::error::Error;
use crate::history::{History, Position};
use crate::metrics::{add, Counters};
use crate::threads;
use crate::workers::handler::{ChannelList, Event, Handler};
use crate::workers::merge;
use crate::workers::queue::{Inner, Item, Queue, KEEP_BUFFER};
use crate::workers::recovery;

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
            report_panic(&*payload);
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

/// What one turn counted, added to the metrics at its end.
#[derive(Default)]
struct Tally {
    /// Messages handed to the handler (recovered ones too).
    delivered: u64,
    /// Messages passed over because the queue closed.
    dropped: u64,
    /// Messages of channels given up.
    unwanted: u64,
}

/// Logs a handler's panic; the worker goes on. Cold, out of the per-item
/// path: the callers test the outcome inline.
#[cold]
fn report_panic(payload: &(dyn std::any::Any + Send)) {
    log::error!(
        "Pub/Sub handler panicked: {}; the worker goes on",
        threads::panic_message(payload)
    );
}

/// The consumer of one worker queue: a task on a worker thread (one of
/// its own, or one of the runtime's shared with other instances' queues).
/// Each turn takes the queue's batch ([`Worker::take`]) and hands it to
/// the handler an item at a time ([`Delivery::deliver`]).
pub(super) struct Worker {
    /// The batch being handed out: the queue's items, swapped in whole.
    local: VecDeque<Item>,
    delivery: Delivery,
}

/// What a turn hands items to the handler with.
struct Delivery {
    q: Arc<Queue>,
    handler: Arc<dyn Handler>,
    counters: Arc<Counters>,
    tracker: recovery::Tracker,
    actions: Vec<recovery::Action>,
    /// Buffers of handed items, given back to the queue's free list at the
    /// next take.
    spent: Vec<Vec<u8>>,
}

impl Worker {
    pub(super) fn new(q: Arc<Queue>, handler: Arc<dyn Handler>, counters: Arc<Counters>) -> Worker {
        let capacity = q.capacity;
        Worker {
            local: VecDeque::with_capacity(capacity),
            delivery: Delivery {
                q,
                handler,
                counters,
                tracker: recovery::Tracker::default(),
                actions: Vec::new(),
                spent: Vec::with_capacity(capacity),
            },
        }
    }

    /// Under the queue's lock: gives back the spent buffers, then swaps the
    /// queue's items into `local`, followed by the drop events due (named
    /// after the batch they follow). Returns the turn's end instead when
    /// there is nothing to take: the queue waits to be rung, or is closed
    /// and drained.
    fn take(&mut self) -> Option<Turn> {
        let Delivery { q, spent, .. } = &mut self.delivery;
        let mut g = q.inner.lock();
        g.free.append(spent);
        let idle = |g: &Inner| {
            g.items.is_empty() && g.drops.messages == 0 && g.pattern_drops.messages == 0
        };
        if idle(&g) {
            if g.closed {
                return Some(Turn::Done); // closed and drained
            }
            g.waiting = true;
            return Some(Turn::Rung);
        }
        g.waiting = false;
        std::mem::swap(&mut g.items, &mut self.local);
        g.messages = 0;
        let inner: &mut Inner = &mut g;
        for (drops, patterns) in [(&mut inner.drops, false), (&mut inner.pattern_drops, true)] {
            if let Some((channels, messages)) = drops.take() {
                self.local.push_back(Item::Dropped {
                    channels,
                    messages,
                    patterns,
                });
            }
        }
        None
    }
}

impl Delivery {
    /// Hands one item to the handler (or, once the queue is closed, passes
    /// it over, counting a message as dropped), then keeps its buffer for
    /// the queue or runs its marker.
    fn deliver(&mut self, item: Item, tally: &mut Tally) {
        if self.q.closed.load(Ordering::Relaxed) {
            tally.dropped +=
                u64::from(matches!(item, Item::Message { .. } | Item::PMessage { .. }));
            return;
        }
        let item = match item {
            Item::Recovered { buf, id, result } => {
                self.tracker
                    .handle_read(&buf, id, result, &mut self.actions);
                carry_out(
                    &self.q,
                    &*self.handler,
                    &buf,
                    &mut self.actions,
                    &mut tally.delivered,
                );
                return;
            }
            item => item,
        };
        let outcome = match &item {
            Item::Message {
                buf,
                channel_len,
                sent_us,
                at,
            } => self.message(buf, *channel_len, *sent_us, *at, tally),
            Item::PMessage {
                buf,
                pattern_len,
                channel_len,
                sent_us,
            } => self.pattern_message(buf, *pattern_len, *channel_len, *sent_us, tally),
            event => self.event(event, &mut tally.delivered),
        };
        if let Err(payload) = outcome {
            report_panic(&*payload);
        }
        match item {
            Item::Message { buf, .. } | Item::PMessage { buf, .. } | Item::Active { buf, .. }
                if buf.capacity() <= KEEP_BUFFER =>
            {
                self.spent.push(buf)
            }
            Item::Marker(f) => f(),
            _ => {}
        }
    }

    /// Records a message's lag from its envelope's publish time (0: none).
    fn lag(&self, sent_us: u64) {
        if sent_us != 0 {
            self.counters
                .lag
                .record_us(now_us().saturating_sub(sent_us));
        }
    }

    /// A channel's message (`buf[..channel_len]` the channel, the rest the
    /// payload): passed over when its channel was given up; else handed to
    /// the handler unless recovery holds it back, then whatever recovery
    /// has due for the channel.
    fn message(
        &mut self,
        buf: &[u8],
        channel_len: usize,
        sent_us: u64,
        at: Option<Position>,
        tally: &mut Tally,
    ) -> std::thread::Result<()> {
        let (channel, payload) = buf.split_at(channel_len.min(buf.len()));
        if self.q.filter.get().is_some_and(|f| !f.passes(channel)) {
            tally.unwanted += 1;
            if at.is_some() {
                self.tracker.forget(channel);
            }
            return Ok(());
        }
        self.lag(sent_us);
        let now = match at {
            Some(at) if self.q.reader.get().is_some() => {
                self.tracker
                    .handle_message(channel, at, payload, &mut self.actions)
            }
            _ => true,
        };
        let handler = &*self.handler;
        let r = match now {
            true => {
                tally.delivered += 1;
                catch_unwind(AssertUnwindSafe(|| handler.on_message(channel, payload)))
            }
            false => Ok(()),
        };
        carry_out(
            &self.q,
            handler,
            channel,
            &mut self.actions,
            &mut tally.delivered,
        );
        r
    }

    /// A pattern subscription's message (`buf`: pattern, channel, payload):
    /// passed over when its pattern was given up, else handed on.
    fn pattern_message(
        &mut self,
        buf: &[u8],
        pattern_len: usize,
        channel_len: usize,
        sent_us: u64,
        tally: &mut Tally,
    ) -> std::thread::Result<()> {
        let (pattern, rest) = buf.split_at(pattern_len.min(buf.len()));
        let (channel, payload) = rest.split_at(channel_len.min(rest.len()));
        if self
            .q
            .filter
            .get()
            .is_some_and(|f| !f.passes_pattern(pattern))
        {
            tally.unwanted += 1;
            return Ok(());
        }
        self.lag(sent_us);
        tally.delivered += 1;
        let handler = &*self.handler;
        catch_unwind(AssertUnwindSafe(|| {
            handler.on_pattern_message(pattern, channel, payload)
        }))
    }

    /// Every item but a message: the handler's event, with what recovery
    /// and the metrics do on it. A marker is run by
    /// [`Delivery::deliver`] after it.
    fn event(&mut self, item: &Item, delivered: &mut u64) -> std::thread::Result<()> {
        let handler = &*self.handler;
        let call = |event: Event<'_>| catch_unwind(AssertUnwindSafe(|| handler.on_event(event)));
        match item {
            Item::Active {
                buf,
                tell: true,
                pattern: true,
            } => call(Event::PatternActive { pattern: buf }),
            Item::Active { buf, tell, .. } => {
                if self.q.reader.get().is_some_and(|r| r.recoverable(buf)) {
                    self.tracker.handle_confirmed(buf, &mut self.actions);
                    carry_out(&self.q, handler, buf, &mut self.actions, delivered);
                }
                match tell {
                    true => call(Event::Active { channel: buf }),
                    false => Ok(()),
                }
            }
            Item::Gap {
                server,
                channels,
                patterns: true,
            } => {
                add(&self.counters.gaps, 1);
                call(Event::PatternGap {
                    server: *server,
                    patterns: channels,
                })
            }
            Item::Gap {
                server, channels, ..
            } => {
                add(&self.counters.gaps, 1);
                let r = call(Event::Gap {
                    server: *server,
                    channels,
                });
                // Its recoverable channels read once resubscribed.
                if let Some(reader) = self.q.reader.get() {
                    for channel in channels.iter().filter(|c| reader.recoverable(c)) {
                        self.tracker.handle_gap(channel);
                    }
                }
                r
            }
            Item::Refused {
                buf,
                message,
                pattern,
            } => call(match pattern {
                true => Event::PatternRefused {
                    pattern: buf,
                    message,
                },
                false => Event::Refused {
                    channel: buf,
                    message,
                },
            }),
            Item::Dropped {
                channels,
                messages,
                patterns: true,
            } => call(Event::PatternDropped {
                patterns: channels,
                messages: *messages,
            }),
            Item::Dropped {
                channels, messages, ..
            } => {
                let r = call(Event::Dropped {
                    channels,
                    messages: *messages,
                });
                let (q, tracker, actions) = (&self.q, &mut self.tracker, &mut self.actions);
                recover_drops(q, handler, tracker, channels, actions, delivered);
                r
            }
            Item::Server {
                server,
                addr,
                error,
            } => call(match error {
                Some(error) => Event::Disconnected {
                    server,
                    addr: *addr,
                    error,
                },
                None => Event::Connected {
                    server,
                    addr: *addr,
                },
            }),
            // Messages and recovery reads are handed on by `deliver`.
            Item::Message { .. } | Item::PMessage { .. } | Item::Recovered { .. } => Ok(()),
            Item::Marker(_) => Ok(()),
        }
    }

    /// The turn's end: forgets the tracker's channels given up, and adds
    /// the turn's counts to the metrics.
    fn account(&mut self, tally: Tally) {
        if let Some(f) = self.q.filter.get() {
            self.tracker.sweep(|ch| f.passes(ch));
        }
        let c = &self.counters;
        let n = self.tracker.take_counts();
        add(&c.recovered, n.recovered);
        add(&c.duplicates, n.duplicates);
        add(&c.unrecoverable, n.unrecoverable);
        add(&c.delivered, tally.delivered);
        add(&c.dropped_shutdown, tally.dropped);
        add(&c.unwanted, tally.unwanted);
    }
}

impl Task for Worker {
    fn slow(&mut self, thread: &str, took: std::time::Duration) {
        self.delivery
            .counters
            .slow_turn(thread, "the handler (on_message/on_event)", took);
    }

    /// Takes the queue's items (and the drop events due) and hands them to
    /// the handler; runs again at once while items are left, when rung once
    /// the queue is empty (the next put wakes it), never once it is closed
    /// and drained.
    fn turn(&mut self) -> Turn {
        if let Some(end) = self.take() {
            return end;
        }
        merge::gaps(&mut self.local);
        let mut tally = Tally::default();
        for item in self.local.drain(..) {
            self.delivery.deliver(item, &mut tally);
        }
        self.delivery.account(tally);
        Turn::Again
    }
}
