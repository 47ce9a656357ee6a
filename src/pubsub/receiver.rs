//! Receiving from async code: a [`Handler`] that moves every message and
//! event into one bounded queue, and the [`Receiver`] an async task reads
//! it from (`recv().await`, `poll_recv`, `try_recv`). Std only: a mutex
//! and the reader's [`Waker`]; no runtime.
//!
//! ```text
//! worker 0 ─┐
//! worker 1 ─┼─► ReceiverHandler ─► one bounded queue ─► Receiver::recv().await
//! worker W ─┘   (copies bytes)      (drop and signal)
//! ```
//!
//! One queue for the whole instance: a channel's messages come from one
//! worker, in order, so they stay in order in the queue; different
//! channels interleave. When the queue holds `capacity` messages, a new
//! message is dropped and its channel noted; a [`Delivery::Dropped`]
//! naming every such channel once comes next, before any item queued
//! after the drops (and before anything else when the reader has emptied
//! the queue), so no loss is silent and the event is in order. Events
//! do not count against the bound and are never dropped (they are few:
//! one per confirmation, gap, refusal, or run of drops).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::engine::wait::keep_waker;
use crate::pubsub::{ChannelList, Event, Handler, Text};
use crate::workers::Drops;

/// One item a [`Receiver`] gives: a message, or an [`Event`] in owned form.
#[non_exhaustive]
#[derive(Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A message (the envelope, if on, already stripped).
    Message {
        /// The channel.
        channel: Vec<u8>,
        /// The payload.
        payload: Vec<u8>,
    },
    /// A message of a pattern subscription, as
    /// [`Handler::on_pattern_message`] gets it.
    PatternMessage {
        /// The pattern it matched.
        pattern: Vec<u8>,
        /// The channel.
        channel: Vec<u8>,
        /// The payload.
        payload: Vec<u8>,
    },
    /// As [`Event::Active`].
    Active {
        /// The channel.
        channel: Vec<u8>,
    },
    /// As [`Event::PatternActive`].
    PatternActive {
        /// The pattern.
        pattern: Vec<u8>,
    },
    /// As [`Event::PatternGap`].
    PatternGap {
        /// The server the patterns were subscribed on.
        server: Option<crate::addr::ServerAddr>,
        /// The resubscribed patterns.
        patterns: ChannelList,
    },
    /// As [`Event::PatternRefused`].
    PatternRefused {
        /// The pattern.
        pattern: Vec<u8>,
        /// The server's error text.
        message: String,
    },
    /// [`Delivery::Dropped`] for messages of pattern subscriptions (by
    /// this receiver's full queue, or [`Event::PatternDropped`]).
    PatternDropped {
        /// The patterns that lost messages, each once.
        patterns: ChannelList,
        /// How many messages were dropped in all.
        messages: u64,
    },
    /// As [`Event::Gap`].
    Gap {
        /// The address of the server the channels were subscribed on, or
        /// `None` when they had none (see [`Event::Gap`]).
        server: Option<crate::addr::ServerAddr>,
        /// The resubscribed channels.
        channels: ChannelList,
    },
    /// As [`Event::Refused`].
    Refused {
        /// The channel.
        channel: Vec<u8>,
        /// The server's error text.
        message: String,
    },
    /// Messages of these channels were dropped: by this receiver's full
    /// queue, or by a full worker queue ([`Event::Dropped`]). It comes
    /// after every item queued before the drops and before any later
    /// message of these channels.
    Dropped {
        /// The channels that lost messages, each once.
        channels: ChannelList,
        /// How many messages were dropped in all.
        messages: u64,
    },
    /// As [`Event::Disconnected`].
    Disconnected {
        /// The server's address as configured or announced.
        server: String,
        /// What it resolved to, when it did.
        addr: Option<crate::addr::ServerAddr>,
        /// Why.
        error: String,
    },
    /// As [`Event::Connected`].
    Connected {
        /// The server's address as configured or announced.
        server: String,
        /// What it resolved to.
        addr: Option<crate::addr::ServerAddr>,
    },
    /// As [`Event::Unrecoverable`].
    Unrecoverable {
        /// The channel.
        channel: Vec<u8>,
        /// The last position delivered before the loss.
        since: Option<crate::history::Position>,
        /// The channel's position in its history, when known.
        now: Option<crate::history::Position>,
        /// Why.
        reason: String,
    },
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Delivery::Message { channel, payload } => f
                .debug_struct("Message")
                .field("channel", &Text(channel))
                .field("payload", &Text(payload))
                .finish(),
            Delivery::PatternMessage {
                pattern,
                channel,
                payload,
            } => f
                .debug_struct("PatternMessage")
                .field("pattern", &Text(pattern))
                .field("channel", &Text(channel))
                .field("payload", &Text(payload))
                .finish(),
            // Every other delivery is an event, shown as the handler's.
            other => match other.event() {
                Some(event) => event.fmt(f),
                None => f.write_str("Delivery"),
            },
        }
    }
}

impl Delivery {
    /// A message's channel (`None` for an event).
    pub fn channel(&self) -> Option<&[u8]> {
        match self {
            Delivery::Message { channel, .. } | Delivery::PatternMessage { channel, .. } => {
                Some(channel)
            }
            _ => None,
        }
    }

    /// A message's payload (`None` for an event).
    pub fn payload(&self) -> Option<&[u8]> {
        match self {
            Delivery::Message { payload, .. } | Delivery::PatternMessage { payload, .. } => {
                Some(payload)
            }
            _ => None,
        }
    }

    /// A message's payload as text, when it is UTF-8 (`None` for an event
    /// or another payload; [`Text`] shows any bytes). Borrows, never
    /// copies.
    pub fn payload_str(&self) -> Option<&str> {
        self.payload().and_then(|p| Text(p).as_str())
    }

    /// The event, borrowed, as a [`Handler`] would get it (`None` for a
    /// message).
    pub fn event(&self) -> Option<Event<'_>> {
        Some(match self {
            Delivery::Message { .. } | Delivery::PatternMessage { .. } => return None,
            Delivery::Active { channel } => Event::Active { channel },
            Delivery::PatternActive { pattern } => Event::PatternActive { pattern },
            Delivery::PatternGap { server, patterns } => Event::PatternGap {
                server: *server,
                patterns,
            },
            Delivery::PatternRefused { pattern, message } => {
                Event::PatternRefused { pattern, message }
            }
            Delivery::PatternDropped { patterns, messages } => Event::PatternDropped {
                patterns,
                messages: *messages,
            },
            Delivery::Gap { server, channels } => Event::Gap {
                server: *server,
                channels,
            },
            Delivery::Refused { channel, message } => Event::Refused { channel, message },
            Delivery::Dropped { channels, messages } => Event::Dropped {
                channels,
                messages: *messages,
            },
            Delivery::Disconnected {
                server,
                addr,
                error,
            } => Event::Disconnected {
                server,
                addr: *addr,
                error,
            },
            Delivery::Connected { server, addr } => Event::Connected {
                server,
                addr: *addr,
            },
            Delivery::Unrecoverable {
                channel,
                since,
                now,
                reason,
            } => Event::Unrecoverable {
                channel,
                since: *since,
                now: *now,
                reason,
            },
        })
    }
}

struct Inner {
    items: VecDeque<Delivery>,
    /// Messages in `items` (what the bound counts).
    messages: usize,
    drops: Drops,
    /// Drops of pattern subscriptions' messages, by pattern.
    pattern_drops: Drops,
    /// Messages this receiver dropped, in all.
    dropped: u64,
    /// The task that found the queue empty.
    waker: Option<Waker>,
    /// The handler is gone (every instance using it shut down).
    closed: bool,
    /// The receiver is gone: nothing is queued any more.
    unread: bool,
}

struct Queue {
    inner: Mutex<Inner>,
    capacity: usize,
}

/// What a queued message's drop is signalled by.
#[derive(Copy, Clone)]
enum Name<'a> {
    Channel(&'a [u8]),
    Pattern(&'a [u8]),
}

impl Queue {
    /// Queues `item` (a message when `name` is given: its channel, or
    /// its pattern for a pattern's message), first the pending drop
    /// events; wakes the reader.
    fn push(&self, item: impl FnOnce() -> Delivery, name: Option<Name<'_>>) {
        let mut g = self.inner.lock();
        if g.unread {
            return;
        }
        if let Some(n) = name.filter(|_| g.messages >= self.capacity) {
            match n {
                Name::Channel(c) => g.drops.note(c),
                Name::Pattern(p) => g.pattern_drops.note(p),
            }
            g.dropped += 1;
            return;
        }
        while let Some(d) = take_drops(&mut g) {
            g.items.push_back(d);
        }
        g.items.push_back(item());
        g.messages += usize::from(name.is_some());
        let waker = g.waker.take();
        drop(g);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The [`Handler`] half of [`receiver`]: give it to
/// [`PubSubBuilder::handler`](crate::PubSubBuilder::handler). Its calls
/// copy the bytes and take one short lock; they never block on the reader.
pub struct ReceiverHandler {
    queue: Arc<Queue>,
}

/// The reading half of [`receiver`]: one async task (or thread) takes
/// [`Delivery`] items from it in order.
///
/// One queue for the whole instance: a channel's messages come from one
/// worker, in order, so they stay in order here; different channels
/// interleave. When the queue holds its `capacity` of messages, a new
/// message is dropped and its channel noted; a [`Delivery::Dropped`]
/// naming every such channel once comes next, before any item queued
/// after the drops (or, when the reader empties the queue first, as the
/// next item), so no loss is silent and the event is in order. Events do
/// not count against the bound and are never dropped (they are few: one
/// per confirmation, gap, refusal or run of drops).
///
/// Reading never blocks: [`Receiver::recv`] awaits, [`Receiver::poll_recv`]
/// stores the waker, [`Receiver::try_recv`] returns at once. Messages are
/// copied into owned bytes (an allocation per message, unlike a
/// [`Handler`] that reads the borrowed buffers).
pub struct Receiver {
    queue: Arc<Queue>,
}

impl std::fmt::Debug for ReceiverHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiverHandler")
            .field("capacity", &self.queue.capacity)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("capacity", &self.queue.capacity)
            .field("queued", &self.len())
            .finish_non_exhaustive()
    }
}

/// A handler and the receiver it feeds, through one queue of `capacity`
/// messages (at least 1). Build the instance with the handler, then read
/// the receiver from an async task; [`Receiver`] says how order and drops
/// work.
///
/// ```no_run
/// # async fn f() -> Result<(), shardsub::Error> {
/// use shardsub::pubsub::{receiver, Delivery};
/// let (handler, mut rx) = receiver(1024);
/// let ps = shardsub::PubSub::builder()
///     .address("127.0.0.1:6379")
///     .handler(handler)
///     .build()?;
/// ps.subscribe(["news"])?;
/// ps.active(&["news"]).await?;
/// ps.publish_pending("news", "hello").await?;
/// while let Some(d) = rx.recv().await {
///     if let Delivery::Message { channel, payload } = d {
///         println!("{}: {} bytes", String::from_utf8_lossy(&channel), payload.len());
///         break;
///     }
/// }
/// # Ok(()) }
/// ```
pub fn receiver(capacity: usize) -> (ReceiverHandler, Receiver) {
    let capacity = capacity.max(1);
    let queue = Arc::new(Queue {
        inner: Mutex::new(Inner {
            items: VecDeque::new(),
            messages: 0,
            drops: Drops::default(),
            pattern_drops: Drops::default(),
            dropped: 0,
            waker: None,
            closed: false,
            unread: false,
        }),
        capacity,
    });
    (
        ReceiverHandler {
            queue: queue.clone(),
        },
        Receiver { queue },
    )
}

impl Handler for ReceiverHandler {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        self.queue.push(
            || Delivery::Message {
                channel: channel.to_vec(),
                payload: payload.to_vec(),
            },
            Some(Name::Channel(channel)),
        );
    }

    fn on_pattern_message(&self, pattern: &[u8], channel: &[u8], payload: &[u8]) {
        self.queue.push(
            || Delivery::PatternMessage {
                pattern: pattern.to_vec(),
                channel: channel.to_vec(),
                payload: payload.to_vec(),
            },
            Some(Name::Pattern(pattern)),
        );
    }

    fn on_event(&self, event: Event<'_>) {
        let d = match event {
            Event::Active { channel } => Delivery::Active {
                channel: channel.to_vec(),
            },
            Event::PatternActive { pattern } => Delivery::PatternActive {
                pattern: pattern.to_vec(),
            },
            Event::PatternGap { server, patterns } => Delivery::PatternGap {
                server,
                patterns: patterns.clone(),
            },
            Event::PatternRefused { pattern, message } => Delivery::PatternRefused {
                pattern: pattern.to_vec(),
                message: message.to_owned(),
            },
            Event::PatternDropped { patterns, messages } => Delivery::PatternDropped {
                patterns: patterns.clone(),
                messages,
            },
            Event::Gap { server, channels } => Delivery::Gap {
                server,
                channels: channels.clone(),
            },
            Event::Refused { channel, message } => Delivery::Refused {
                channel: channel.to_vec(),
                message: message.to_owned(),
            },
            Event::Dropped { channels, messages } => Delivery::Dropped {
                channels: channels.clone(),
                messages,
            },
            Event::Disconnected {
                server,
                addr,
                error,
            } => Delivery::Disconnected {
                server: server.to_owned(),
                addr,
                error: error.to_owned(),
            },
            Event::Connected { server, addr } => Delivery::Connected {
                server: server.to_owned(),
                addr,
            },
            Event::Unrecoverable {
                channel,
                since,
                now,
                reason,
            } => Delivery::Unrecoverable {
                channel: channel.to_vec(),
                since,
                now,
                reason: reason.to_owned(),
            },
        };
        self.queue.push(|| d, None);
    }
}

impl Drop for ReceiverHandler {
    fn drop(&mut self) {
        let mut g = self.queue.inner.lock();
        g.closed = true;
        let waker = g.waker.take();
        drop(g);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Receiver {
    /// The next item, or `None` once the queue is empty and the handler is
    /// gone (every instance using it was shut down and dropped it).
    /// Cancel-safe: an item is only taken when it is returned.
    pub async fn recv(&mut self) -> Option<Delivery> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next item if there is one (`Ready(Some)`), `Ready(None)` once
    /// the queue is empty and the handler is gone, otherwise `Pending`
    /// with `cx`'s waker stored (the last poller's), woken by the next
    /// item.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        let mut g = self.queue.inner.lock();
        if let Some(d) = Self::pop(&mut g) {
            return Poll::Ready(Some(d));
        }
        if g.closed {
            return Poll::Ready(None);
        }
        keep_waker(&mut g.waker, cx.waker());
        Poll::Pending
    }

    /// The next item, if one is queued now.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        Self::pop(&mut self.queue.inner.lock())
    }

    /// True once the handler is gone and nothing is left to read.
    pub fn is_closed(&self) -> bool {
        let g = self.queue.inner.lock();
        g.closed && g.items.is_empty() && g.drops.messages == 0 && g.pattern_drops.messages == 0
    }

    /// Messages queued now.
    pub fn len(&self) -> usize {
        self.queue.inner.lock().messages
    }

    /// True when no message is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages this receiver's full queue dropped so far (worker-queue
    /// drops are counted in [`Metrics::dropped`](crate::Metrics::dropped)).
    pub fn dropped(&self) -> u64 {
        self.queue.inner.lock().dropped
    }

    fn pop(g: &mut Inner) -> Option<Delivery> {
        match g.items.pop_front() {
            Some(d) => {
                if matches!(
                    d,
                    Delivery::Message { .. } | Delivery::PatternMessage { .. }
                ) {
                    g.messages -= 1;
                }
                Some(d)
            }
            // Drops after the last queued item: the event comes now.
            None => take_drops(g),
        }
    }
}

/// The receiver as the ecosystem's stream of deliveries
/// (`futures_core::Stream`): read it with any `StreamExt`
/// (`while let Some(d) = rx.next().await`). It ends once the handler is
/// gone and the queue is empty.
impl futures_core::Stream for Receiver {
    type Item = Delivery;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        self.get_mut().poll_recv(cx)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let mut g = self.queue.inner.lock();
        g.unread = true;
        g.items.clear();
        g.messages = 0;
    }
}

#[cfg(test)]
mod tests;

/// A drop event for the drops so far, if any (see [`Drops`]): channels'
/// first, then patterns'.
fn take_drops(g: &mut Inner) -> Option<Delivery> {
    if let Some((channels, messages)) = g.drops.take() {
        return Some(Delivery::Dropped { channels, messages });
    }
    g.pattern_drops
        .take()
        .map(|(patterns, messages)| Delivery::PatternDropped { patterns, messages })
}
