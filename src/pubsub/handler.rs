//! What the application implements: [`Handler`], and the [`Event`]s it gets
//! besides messages.

/// Receives messages and events on the worker threads.
///
/// One channel's messages always reach the same worker (chosen by
/// [`shardcore::worker_of`]), in the order the server sent them; different
/// channels spread over the workers. Events about a channel travel on that
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
/// ignores events.
pub trait Handler: Send + Sync + 'static {
    /// A message published to `channel` (the envelope, if on, is already
    /// stripped from `payload`). Both borrow a buffer that is reused.
    fn on_message(&self, channel: &[u8], payload: &[u8]);

    /// A subscription event. The default ignores it.
    fn on_event(&self, event: Event<'_>) {
        let _ = event;
    }
}

impl<F> Handler for F
where
    F: Fn(&[u8], &[u8]) + Send + Sync + 'static,
{
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        self(channel, payload);
    }
}

/// Something that happened to subscriptions, in order with the messages.
#[non_exhaustive]
#[derive(Debug)]
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
    /// A subscribe connection was lost and re-established, and these
    /// channels (the ones of this worker) were subscribed again. Messages
    /// published to them in between may be lost: recover from history.
    Gap {
        /// Index of the server (builder order) whose connection was lost.
        server: usize,
        /// The resubscribed channels handled by this worker.
        channels: &'a ChannelList,
    },
    /// The server refused to subscribe `channel` (an ACL denial, say). The
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
    /// This worker's queue was full, and messages of these channels were
    /// dropped. It comes after every message that was queued before the
    /// drops and before any later message of these channels; one event per
    /// batch the worker takes (so at most one per channel per batch), each
    /// channel named once.
    Dropped {
        /// The channels that lost messages, each once.
        channels: &'a ChannelList,
        /// How many messages were dropped in all.
        messages: u64,
    },
}

/// A packed list of channel names (one allocation for all names).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
}
