//! The consumer of one worker queue: a task on a worker thread that hands
//! each batch to the handler, in order, with drops, gaps and recovery.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::engine::host::{Task, Turn};
use crate::error::Error;
use crate::history::History;
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
pub(super) struct Worker {
    q: Arc<Queue>,
    handler: Arc<dyn Handler>,
    counters: Arc<Counters>,
    tracker: recovery::Tracker,
    actions: Vec<recovery::Action>,
    local: VecDeque<Item>,
    spent: Vec<Vec<u8>>,
}

impl Worker {
    pub(super) fn new(q: Arc<Queue>, handler: Arc<dyn Handler>, counters: Arc<Counters>) -> Worker {
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
