//! What the application implements: [`Handler`], and the [`Event`]s it gets
//! besides messages.

/// Receives messages and events on the worker threads.
///
/// One channel's messages always reach the same worker (its lane's home:
/// the worker of the subscribe connection that first carried it), in the
/// order the server sent them; different connections' channels spread over
/// the workers
/// ([`PubSubBuilder::subscribe_connections`](crate::PubSubBuilder::subscribe_connections)). Events about a channel travel on that
/// channel's worker too, so a [`Event::Gap`] is seen after every message
/// that came before the loss and before every message that came after the
/// resubscribe.
///
/// Keep calls short: a worker that falls behind fills its bounded queue and
/// further messages for its channels are dropped (counted in
/// [`Metrics::dropped`](crate::Metrics::dropped) and named, per channel, in
/// an [`Event::Dropped`] in order with the messages). A panic is caught, logged
/// and counted as delivered; the worker goes on.
///
/// Any `Fn(&[u8], &[u8]) + Send + Sync + 'static` closure is a handler that
/// ignores events. Passed straight to
/// [`PubSubBuilder::handler`](crate::PubSubBuilder::handler), a closure needs
/// its parameter types written out (`|channel: &[u8], payload: &[u8]|`):
/// Rust infers a closure's parameters only from an `Fn` bound, and the
/// setter's bound is `Handler`, which structs implement too. Wrap it in
/// [`handler_fn`] to have them inferred (and to add an event closure).
pub trait Handler: Send + Sync + 'static {
    /// A message published to `channel` (the envelope, if on, is already
    /// stripped from `payload`). Both borrow a buffer that is reused.
    fn on_message(&self, channel: &[u8], payload: &[u8]);

    /// A message published to `channel` and delivered because it matches
    /// `pattern`, a pattern subscription
    /// ([`PubSub::psubscribe`](crate::PubSub::psubscribe)). A channel that
    /// is subscribed too, or matches several patterns, arrives once per
    /// subscription, as the server sends it. Messages of one pattern reach
    /// one worker (chosen by the pattern), in the order the server sent
    /// them. The default passes it to [`Handler::on_message`].
    fn on_pattern_message(&self, pattern: &[u8], channel: &[u8], payload: &[u8]) {
        let _ = pattern;
        self.on_message(channel, payload);
    }

    /// A subscription event. The default ignores it.
    fn on_event(&self, event: Event<'_>) {
        let _ = event;
    }
}

/// The handler of an instance built without one: it publishes only
/// ([`PubSub::subscribe`](crate::PubSub::subscribe) is refused), so nothing
/// reaches it.
struct PublishOnly;

impl Handler for PublishOnly {
    fn on_message(&self, _channel: &[u8], _payload: &[u8]) {}
}

/// The handler of a publish-only instance.
pub(crate) fn publish_only() -> std::sync::Arc<dyn Handler> {
    std::sync::Arc::new(PublishOnly)
}

impl<F> Handler for F
where
    F: Fn(&[u8], &[u8]) + Send + Sync + 'static,
{
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        self(channel, payload);
    }
}

/// A [`Handler`] made of closures whose parameter types are inferred:
/// `handler_fn(|channel, payload| …)`, and optionally
/// `.on_event(|event| …)` (events are ignored otherwise).
///
/// ```
/// use shardsub::{handler_fn, Event};
/// let handler = handler_fn(|channel, payload| {
///     println!("{}: {} bytes", String::from_utf8_lossy(channel), payload.len());
/// })
/// .on_event(|event| {
///     if let Event::Gap { channels, .. } = event {
///         println!("{} channels may have lost messages", channels.len());
///     }
/// });
/// # let _ = shardsub::PubSub::builder().handler(handler);
/// ```
pub fn handler_fn<M>(on_message: M) -> FnHandler<M, fn(Event<'_>)>
where
    M: Fn(&[u8], &[u8]) + Send + Sync + 'static,
{
    FnHandler {
        on_message,
        on_event: |_| {},
    }
}

/// The handler [`handler_fn`] makes: a message closure and an event
/// closure.
#[derive(Clone)]
pub struct FnHandler<M, E> {
    on_message: M,
    on_event: E,
}

impl<M, E> FnHandler<M, E> {
    /// Handles events with `on_event` (replacing the one given before).
    pub fn on_event<E2>(self, on_event: E2) -> FnHandler<M, E2>
    where
        E2: Fn(Event<'_>) + Send + Sync + 'static,
    {
        FnHandler {
            on_message: self.on_message,
            on_event,
        }
    }
}

impl<M, E> std::fmt::Debug for FnHandler<M, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnHandler").finish_non_exhaustive()
    }
}

impl<M, E> Handler for FnHandler<M, E>
where
    M: Fn(&[u8], &[u8]) + Send + Sync + 'static,
    E: Fn(Event<'_>) + Send + Sync + 'static,
{
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        (self.on_message)(channel, payload);
    }

    fn on_event(&self, event: Event<'_>) {
        (self.on_event)(event);
    }
}

/// Something that happened to subscriptions, in order with the messages.
/// Its `Debug` shows names as text ([`Text`]).
#[non_exhaustive]
pub enum Event<'a> {
    /// The server confirmed the subscription: messages published from now
    /// on are delivered. Only sent when
    /// [`PubSubBuilder::active_events`](crate::PubSubBuilder::active_events)
    /// is on ([`PubSub::wait_active`](crate::PubSub::wait_active) works
    /// either way).
    Active {
        /// The channel.
        channel: &'a [u8],
    },
    /// These channels (the ones of this worker) may have lost messages: a
    /// subscribe connection was lost, a liveness ping went unanswered, or
    /// their slot moved; they are being subscribed again (where they live
    /// now). Messages published to them in between may be lost: recover
    /// from history. For recoverable channels
    /// ([`PubSubBuilder::history`](crate::PubSubBuilder::history)) the
    /// engine does: the missed messages follow this event, in order, or an
    /// [`Event::Unrecoverable`]. One incident gives one event per worker, naming every
    /// channel it touched there (several when it touched several servers).
    Gap {
        /// The address of the server the channels were subscribed on (a
        /// cluster node, or one of the servers), or `None` when they had
        /// none (their slot had no owner).
        server: Option<crate::addr::ServerAddr>,
        /// The resubscribed channels handled by this worker.
        channels: &'a ChannelList,
    },
    /// The server refused to subscribe `channel` (an ACL denial, say), or
    /// closed the connection each time it was subscribed alone (twice: its
    /// subscribe reply over the server's output buffer limit, where the
    /// limit could not be read at build to refuse it before sending). The
    /// other channels of the same command are subscribed on their own;
    /// this one delivers nothing until it is subscribed again, and
    /// [`PubSub::wait_active`](crate::PubSub::wait_active) on it fails with
    /// [`Error::SubscribeRefused`](crate::Error::SubscribeRefused).
    Refused {
        /// The channel.
        channel: &'a [u8],
        /// The server's error text.
        message: &'a str,
    },
    /// Messages of these channels were dropped: this worker's queue was
    /// full, or they arrived late on a connection the channel had left
    /// (its slot moved or its connection was replaced; delivered, they
    /// would have come after messages published later, and a
    /// [`Event::Gap`] for the move is before them). It comes after every
    /// message that was queued before the drops and before any later
    /// message of these channels; one event per batch the worker takes
    /// (so at most one per channel per batch), each channel named once.
    /// [`Metrics::dropped`](crate::Metrics::dropped) counts them by
    /// reason.
    Dropped {
        /// The channels that lost messages, each once.
        channels: &'a ChannelList,
        /// How many messages were dropped in all.
        messages: u64,
    },
    /// A subscribe connection to `server` ended or could not be opened
    /// (at the start, this is a degraded start: the instance runs and keeps
    /// trying). Messages published to its channels are lost from now on
    /// until the resubscribe; the [`Event::Gap`] that follows it names
    /// them. One event per incident, on the first worker, queued before
    /// any gap the incident causes; [`Event::Connected`] ends it.
    /// [`PubSub::health`](crate::PubSub::health) shows the state now.
    Disconnected {
        /// The server's address as configured or announced (`host:port`).
        server: &'a str,
        /// What it resolved to, when it did.
        addr: Option<crate::addr::ServerAddr>,
        /// Why, in words (the connect error, or why the connection ended).
        error: &'a str,
    },
    /// [`Event::Active`] for a pattern subscription
    /// ([`PubSub::psubscribe`](crate::PubSub::psubscribe)): confirmed on
    /// every server (one event per server).
    PatternActive {
        /// The pattern.
        pattern: &'a [u8],
    },
    /// [`Event::Gap`] for pattern subscriptions: messages matching these
    /// patterns, published on `server`, may have been lost; they are
    /// being subscribed again. On the pattern's worker, so after every
    /// message it delivered before the loss and before every message
    /// after the resubscribe. Recoverable channels are not recovered
    /// through a pattern: read their history if it matters.
    PatternGap {
        /// The server the patterns were subscribed on.
        server: Option<crate::addr::ServerAddr>,
        /// The patterns handled by this worker.
        patterns: &'a ChannelList,
    },
    /// [`Event::Refused`] for a pattern.
    PatternRefused {
        /// The pattern.
        pattern: &'a [u8],
        /// The server's text.
        message: &'a str,
    },
    /// [`Event::Dropped`] for messages of pattern subscriptions: this
    /// worker's queue was full (or they came late on a connection that was
    /// replaced). In order with the patterns' messages.
    PatternDropped {
        /// The patterns that lost messages, each once.
        patterns: &'a ChannelList,
        /// How many messages were dropped in all.
        messages: u64,
    },
    /// Every subscribe connection to a server that was
    /// [`Event::Disconnected`] is up again; the resubscribe and its
    /// [`Event::Gap`] follow. On the first worker.
    Connected {
        /// The server's address as configured or announced (`host:port`).
        server: &'a str,
        /// What it resolved to.
        addr: Option<crate::addr::ServerAddr>,
    },
    /// A recoverable channel ([`PubSubBuilder::history`](crate::PubSubBuilder::history))
    /// lost messages that its history could not give back: the range
    /// after `since` was trimmed or expired, a new epoch began, or the read
    /// failed. It comes after every message delivered up to `since`;
    /// what the history still had and the live messages follow it, in
    /// order. (Gaps, drops and offset jumps that history could fill are
    /// filled: their messages are delivered, once and in order, and only
    /// the `Gap`/`Dropped` event says they were late.)
    Unrecoverable {
        /// The channel.
        channel: &'a [u8],
        /// The last position delivered before the loss.
        since: Option<crate::history::Position>,
        /// The channel's position in its history, when the read got one.
        now: Option<crate::history::Position>,
        /// Why, in words.
        reason: &'a str,
    },
}

impl std::fmt::Debug for Event<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Active { channel } => f
                .debug_struct("Active")
                .field("channel", &Text(channel))
                .finish(),
            Event::Gap { server, channels } => f
                .debug_struct("Gap")
                .field("server", server)
                .field("channels", channels)
                .finish(),
            Event::Refused { channel, message } => f
                .debug_struct("Refused")
                .field("channel", &Text(channel))
                .field("message", message)
                .finish(),
            Event::Dropped { channels, messages } => f
                .debug_struct("Dropped")
                .field("channels", channels)
                .field("messages", messages)
                .finish(),
            Event::Disconnected {
                server,
                addr,
                error,
            } => f
                .debug_struct("Disconnected")
                .field("server", server)
                .field("addr", addr)
                .field("error", error)
                .finish(),
            Event::PatternActive { pattern } => f
                .debug_struct("PatternActive")
                .field("pattern", &Text(pattern))
                .finish(),
            Event::PatternGap { server, patterns } => f
                .debug_struct("PatternGap")
                .field("server", server)
                .field("patterns", patterns)
                .finish(),
            Event::PatternRefused { pattern, message } => f
                .debug_struct("PatternRefused")
                .field("pattern", &Text(pattern))
                .field("message", message)
                .finish(),
            Event::PatternDropped { patterns, messages } => f
                .debug_struct("PatternDropped")
                .field("patterns", patterns)
                .field("messages", messages)
                .finish(),
            Event::Connected { server, addr } => f
                .debug_struct("Connected")
                .field("server", server)
                .field("addr", addr)
                .finish(),
            Event::Unrecoverable {
                channel,
                since,
                now,
                reason,
            } => f
                .debug_struct("Unrecoverable")
                .field("channel", &Text(channel))
                .field("since", since)
                .field("now", now)
                .field("reason", reason)
                .finish(),
        }
    }
}

/// Bytes shown as text, for logs: a channel name, a pattern or a payload.
/// `Display` writes valid UTF-8 as it is and every other byte as `\xNN`;
/// `Debug` quotes and escapes like `str`'s, with the same `\xNN` for bytes
/// that are not UTF-8. Neither allocates.
///
/// ```
/// use shardsub::Text;
/// assert_eq!(Text(b"news:1").to_string(), "news:1");
/// assert_eq!(format!("{:?}", Text(b"a\"b\xff")), r#""a\"b\xff""#);
/// assert_eq!(Text(b"caf\xc3\xa9").as_str(), Some("café"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Text<'a>(pub &'a [u8]);

impl<'a> Text<'a> {
    /// The bytes as a `&str`, when they are UTF-8.
    pub fn as_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.0).ok()
    }
}

impl std::fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        f.write_char('"')?;
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                write!(f, "{}", c.escape_debug())?;
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        f.write_char('"')
    }
}

/// A packed list of channel names (one allocation for all names). Its
/// `Debug` lists the names as text ([`Text`]).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ChannelList {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl ChannelList {
    /// Appends a name.
    pub fn push(&mut self, name: &[u8]) {
        self.bytes.extend_from_slice(name);
        self.ends.push(self.bytes.len() as u32);
    }

    /// How many names.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Name `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)? as usize;
        let start = match i.checked_sub(1) {
            Some(p) => *self.ends.get(p)? as usize,
            None => 0,
        };
        self.bytes.get(start..end)
    }

    /// The names, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Whether `name` is in the list (a linear scan).
    pub fn contains(&self, name: &[u8]) -> bool {
        self.iter().any(|n| n == name)
    }
}

impl std::fmt::Debug for ChannelList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter().map(Text)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_list_round_trip() {
        let mut l = ChannelList::default();
        assert!(l.is_empty());
        for n in [&b"a"[..], b"", b"news:1"] {
            l.push(n);
        }
        assert_eq!(l.len(), 3);
        assert_eq!(l.iter().collect::<Vec<_>>(), [&b"a"[..], b"", b"news:1"]);
        assert!(l.contains(b"news:1"));
        assert!(!l.contains(b"news"));
        assert_eq!(l.get(3), None);
    }

    #[test]
    fn names_print_as_text_with_other_bytes_escaped() {
        let mut l = ChannelList::default();
        for n in [&b"news:1"[..], b"caf\xc3\xa9", b"a\"\n\xff"] {
            l.push(n);
        }
        assert_eq!(format!("{l:?}"), r#"["news:1", "café", "a\"\n\xff"]"#);
        let gap = Event::Gap {
            server: None,
            channels: &l,
        };
        assert_eq!(
            format!("{gap:?}"),
            r#"Gap { server: None, channels: ["news:1", "café", "a\"\n\xff"] }"#
        );
        let active = Event::Active { channel: b"x\x80" };
        assert_eq!(format!("{active:?}"), r#"Active { channel: "x\x80" }"#);
        assert_eq!(Text(b"a\xffb").to_string(), "a\\xffb");
        assert_eq!(Text(b"\xff").as_str(), None);
    }
}
