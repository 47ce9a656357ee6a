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
    if !matches!(agg.kind(), AggregateKind::Push | AggregateKind::Array) {
        return None;
    }
    classify_common(agg.body, agg.len).or_else(|| classify_general(frame))
}

/// The frames a subscriber sees most (`message` and `smessage` with two
/// bulk strings, `subscribe` and `ssubscribe` confirmations with a bulk
/// string and an integer), read straight from the aggregate's validated
/// bytes: three length headers, no frame built per element. Anything else
/// (other kinds, attributes, streamed strings, other headers) is `None`
/// and goes the general way, which gives these shapes the same answer.
#[inline]
fn classify_common(body: &[u8], len: usize) -> Option<PubSub<'_>> {
    if len != 3 {
        return None;
    }
    let (kind, at) = bulk_at(body, 0)?;
    let event = match Kind::of(kind)? {
        Kind::Message => {
            let (channel, at) = bulk_at(body, at)?;
            let (payload, _) = bulk_at(body, at)?;
            PubSub::Message { channel, payload }
        }
        Kind::SMessage => {
            let (channel, at) = bulk_at(body, at)?;
            let (payload, _) = bulk_at(body, at)?;
            PubSub::SMessage { channel, payload }
        }
        Kind::Subscribe => {
            let (channel, at) = bulk_at(body, at)?;
            PubSub::Subscribe {
                channel,
                count: int_at(body, at)?,
            }
        }
        Kind::SSubscribe => {
            let (channel, at) = bulk_at(body, at)?;
            PubSub::SSubscribe {
                channel,
                count: int_at(body, at)?,
            }
        }
        _ => return None,
    };
    Some(event)
}

/// A `$len\r\n…\r\n` bulk string at `pos` of validated bytes, and where the
/// next element starts.
#[inline(always)]
fn bulk_at(buf: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    if buf.get(pos) != Some(&b'$') {
        return None;
    }
    let (len, after) = crate::read::digits_crlf(buf, pos + 1)?;
    let end = after.checked_add(usize::try_from(len).ok()?)?;
    Some((buf.get(after..end)?, end.checked_add(2)?))
}

/// A `:n\r\n` integer at `pos` of validated bytes.
#[inline(always)]
fn int_at(buf: &[u8], pos: usize) -> Option<i64> {
    if buf.get(pos) != Some(&b':') {
        return None;
    }
    crate::read::int_crlf(buf, pos + 1).map(|(n, _)| n)
}

/// [`classify`] for every shape, element by element.
fn classify_general<'a>(frame: &Frame<'a>) -> Option<PubSub<'a>> {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{parse, Limits, Status};
    use alloc::format;
    use alloc::string::String;
    use alloc::vec;
    use alloc::vec::Vec;

    /// One element as the wire may carry it.
    fn element(text: &[u8], form: u8) -> Vec<u8> {
        let mut out = Vec::new();
        match form % 4 {
            // A bulk string, the usual form.
            0 | 1 => {
                out.extend_from_slice(format!("${}\r\n", text.len()).as_bytes());
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
            // A simple string (no CR or LF inside).
            2 if !text.contains(&b'\r') && !text.contains(&b'\n') => {
                out.push(b'+');
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
            // A streamed string in one chunk, or an attribute first.
            2 => {
                out.extend_from_slice(format!("$?\r\n;{}\r\n", text.len()).as_bytes());
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n;0\r\n");
            }
            _ => {
                out.extend_from_slice(b"|1\r\n+k\r\n+v\r\n");
                out.extend_from_slice(format!("${}\r\n", text.len()).as_bytes());
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
        }
        out
    }

    proptest! {
        /// Wherever the fast reading answers, it gives the general answer;
        /// and for the common shapes written the common way, it answers.
        #[test]
        fn the_common_shapes_read_fast_read_the_same(
            kind in prop::sample::select(vec![
                &b"message"[..], b"smessage", b"subscribe", b"ssubscribe", b"MESSAGE",
                b"SSubscribe", b"pmessage", b"unsubscribe", b"pong", b"invalidate",
            ]),
            channel in prop::collection::vec(any::<u8>(), 0..24),
            payload in prop::collection::vec(any::<u8>(), 0..64),
            count in prop_oneof![Just(1i64), Just(-3), any::<i64>()],
            forms in prop::collection::vec(0u8..8, 3),
            push in any::<bool>(),
            extra in 0usize..2,
        ) {
            let n = 3 + extra;
            let mut wire = format!("{}{n}\r\n", if push { '>' } else { '*' }).into_bytes();
            wire.extend(element(kind, forms[0]));
            wire.extend(element(&channel, forms[1]));
            let third_is_int = forms[2] % 2 == 0 && !kind.eq_ignore_ascii_case(b"message")
                && !kind.eq_ignore_ascii_case(b"smessage");
            if third_is_int {
                wire.extend(format!(":{count}\r\n").into_bytes());
            } else {
                wire.extend(element(&payload, forms[2]));
            }
            for _ in 0..extra {
                wire.extend(element(b"more", 0));
            }
            let Ok(Status::Complete(p)) = parse(&wire, &Limits::default()) else {
                panic!("not a frame: {:?}", String::from_utf8_lossy(&wire));
            };
            let agg = p.frame.as_aggregate().unwrap();
            let general = classify_general(&p.frame);
            let fast = classify_common(agg.body, agg.len);
            if let Some(f) = fast {
                prop_assert_eq!(Some(f), general);
            }
            prop_assert_eq!(classify(&p.frame), general);
            let plain = forms.iter().all(|f| f % 4 < 2);
            let common = [&b"message"[..], b"smessage", b"subscribe", b"ssubscribe"]
                .iter()
                .any(|k| k.eq_ignore_ascii_case(kind));
            let shape_ok = kind.eq_ignore_ascii_case(b"message") || kind.eq_ignore_ascii_case(b"smessage")
                || third_is_int;
            if plain && common && shape_ok && extra == 0 && (!third_is_int || count.unsigned_abs() < 10u64.pow(17)) {
                prop_assert!(fast.is_some(), "the common shape went the general way");
            }
        }
    }
}
