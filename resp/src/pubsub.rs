//! Pub/Sub classification of pushes (RESP3 `>`) and RESP2 arrays.

use crate::frame::Frame;

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
    let _ = frame;
    None
}
