//! Pub/Sub classification of pushes (RESP3 `>`) and RESP2 arrays.

use crate::frame::{AggregateKind, Frame};

/// What a Pub/Sub frame means. Channel, pattern and payload borrow the input.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PubSub<'a> {
    /// `message`: a message published to a subscribed channel.
    Message {
        /// The channel.
        channel: &'a [u8],
        /// The message.
        payload: &'a [u8],
    },
    /// `pmessage`: a message on a channel matching a subscribed pattern.
    PMessage {
        /// The pattern that matched.
        pattern: &'a [u8],
        /// The channel.
        channel: &'a [u8],
        /// The message.
        payload: &'a [u8],
    },
    /// `smessage`: a message on a subscribed shard channel.
    SMessage {
        /// The shard channel.
        channel: &'a [u8],
        /// The message.
        payload: &'a [u8],
    },
    /// `subscribe` confirmation.
    Subscribe {
        /// The channel.
        channel: &'a [u8],
        /// Subscriptions this connection now holds.
        count: i64,
    },
    /// `psubscribe` confirmation.
    PSubscribe {
        /// The pattern.
        pattern: &'a [u8],
        /// Subscriptions this connection now holds.
        count: i64,
    },
    /// `ssubscribe` confirmation.
    SSubscribe {
        /// The shard channel.
        channel: &'a [u8],
        /// Shard subscriptions this connection now holds.
        count: i64,
    },
    /// `unsubscribe` confirmation; `None` when there was nothing to
    /// unsubscribe from.
    Unsubscribe {
        /// The channel, if any.
        channel: Option<&'a [u8]>,
        /// Subscriptions this connection still holds.
        count: i64,
    },
    /// `punsubscribe` confirmation.
    PUnsubscribe {
        /// The pattern, if any.
        pattern: Option<&'a [u8]>,
        /// Subscriptions this connection still holds.
        count: i64,
    },
    /// `sunsubscribe` confirmation, or a server-initiated one when a slot
    /// moves away.
    SUnsubscribe {
        /// The shard channel, if any.
        channel: Option<&'a [u8]>,
        /// Shard subscriptions this connection still holds.
        count: i64,
    },
    /// `pong` in subscribed mode (`PING` on a RESP2 subscribed connection).
    Pong {
        /// The `PING` argument, if any (empty is `Some(b"")`).
        payload: Option<&'a [u8]>,
    },
    /// A push of another kind, such as `invalidate`.
    Other,
}

/// Classifies a RESP3 push or a RESP2 array as a Pub/Sub event.
///
/// `None` when the frame is not a push or array whose first element is a
/// string, or when a known kind has the wrong shape. A push of an unknown
/// kind is [`PubSub::Other`]; an array of an unknown kind is `None` (it is a
/// reply, not an event).
pub fn classify<'a>(frame: &Frame<'a>) -> Option<PubSub<'a>> {
    let agg = frame.as_aggregate()?;
    let is_push = match agg.kind() {
        AggregateKind::Push => true,
        AggregateKind::Array => false,
        _ => return None,
    };
    let mut it = agg.iter();
    let kind = string(it.next()?)?;
    let known = Kind::of(kind);
    let event = match (known, agg.len()) {
        (Some(Kind::Message), 3) => PubSub::Message {
            channel: string(it.next()?)?,
            payload: string(it.next()?)?,
        },
        (Some(Kind::SMessage), 3) => PubSub::SMessage {
            channel: string(it.next()?)?,
            payload: string(it.next()?)?,
        },
        (Some(Kind::PMessage), 4) => PubSub::PMessage {
            pattern: string(it.next()?)?,
            channel: string(it.next()?)?,
            payload: string(it.next()?)?,
        },
        (Some(Kind::Subscribe), 3) => PubSub::Subscribe {
            channel: string(it.next()?)?,
            count: it.next()?.as_int()?,
        },
        (Some(Kind::PSubscribe), 3) => PubSub::PSubscribe {
            pattern: string(it.next()?)?,
            count: it.next()?.as_int()?,
        },
        (Some(Kind::SSubscribe), 3) => PubSub::SSubscribe {
            channel: string(it.next()?)?,
            count: it.next()?.as_int()?,
        },
        (Some(Kind::Unsubscribe), 3) => PubSub::Unsubscribe {
            channel: optional(it.next()?)?,
            count: it.next()?.as_int()?,
        },
        (Some(Kind::PUnsubscribe), 3) => PubSub::PUnsubscribe {
            pattern: optional(it.next()?)?,
            count: it.next()?.as_int()?,
        },
        (Some(Kind::SUnsubscribe), 3) => PubSub::SUnsubscribe {
            channel: optional(it.next()?)?,
            count: it.next()?.as_int()?,
        },
        (Some(Kind::Pong), 1) => PubSub::Pong { payload: None },
        (Some(Kind::Pong), 2) => PubSub::Pong {
            payload: Some(string(it.next()?)?),
        },
        // A known kind with the wrong shape.
        (Some(_), _) => return None,
        (None, _) if is_push => PubSub::Other,
        (None, _) => return None,
    };
    Some(event)
}

/// The kinds `classify` knows.
#[derive(Copy, Clone)]
enum Kind {
    Message,
    PMessage,
    SMessage,
    Subscribe,
    PSubscribe,
    SSubscribe,
    Unsubscribe,
    PUnsubscribe,
    SUnsubscribe,
    Pong,
}

impl Kind {
    /// Recognises a kind, ASCII case-insensitively, dispatching on length
    /// first so that a message costs one comparison.
    #[inline]
    fn of(name: &[u8]) -> Option<Kind> {
        let candidates: &[(&[u8], Kind)] = match name.len() {
            4 => &[(b"pong", Kind::Pong)],
            7 => &[(b"message", Kind::Message)],
            8 => &[(b"smessage", Kind::SMessage), (b"pmessage", Kind::PMessage)],
            9 => &[(b"subscribe", Kind::Subscribe)],
            10 => &[
                (b"ssubscribe", Kind::SSubscribe),
                (b"psubscribe", Kind::PSubscribe),
            ],
            11 => &[(b"unsubscribe", Kind::Unsubscribe)],
            12 => &[
                (b"sunsubscribe", Kind::SUnsubscribe),
                (b"punsubscribe", Kind::PUnsubscribe),
            ],
            _ => return None,
        };
        candidates
            .iter()
            .find(|(k, _)| *k == name || k.eq_ignore_ascii_case(name))
            .map(|&(_, kind)| kind)
    }
}

/// A channel, pattern or payload: a bulk or simple string.
fn string<'a>(f: Frame<'a>) -> Option<&'a [u8]> {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) => Some(b),
        _ => None,
    }
}

/// A channel or pattern that may be null (unsubscribing with none held).
fn optional<'a>(f: Frame<'a>) -> Option<Option<&'a [u8]>> {
    match f {
        Frame::Null => Some(None),
        f => string(f).map(Some),
    }
}
