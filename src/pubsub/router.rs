//! Several receivers: the handler that
//! [`PubSubBuilder::receiver_for`](crate::PubSubBuilder::receiver_for)
//! installs, sending each channel's messages and events to the receiver of
//! the longest prefix it starts with (the rest to the instance's own
//! handler or receiver), a pattern subscription's by the pattern's
//! prefix, and connection events to all of them. Each
//! receiver keeps its own bound and the one drop-and-signal rule.

use std::sync::Arc;

use crate::pubsub::{ChannelList, Event, Handler, ReceiverHandler};

/// Routes by channel prefix (longest first).
pub(crate) struct Router {
    /// Prefixes and their receivers, longest prefix first.
    routes: Vec<(Vec<u8>, ReceiverHandler)>,
    /// Where channels no prefix matches go (`None`: nowhere; they count
    /// as delivered, like a handler that ignores them).
    rest: Option<Arc<dyn Handler>>,
}

/// A route's index, or `routes.len()` for the rest.
type Target = usize;

impl Router {
    pub(crate) fn new(
        mut routes: Vec<(Vec<u8>, ReceiverHandler)>,
        rest: Option<Arc<dyn Handler>>,
    ) -> Router {
        routes.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        Router { routes, rest }
    }

    fn target(&self, channel: &[u8]) -> Target {
        self.routes
            .iter()
            .position(|(p, _)| channel.starts_with(p))
            .unwrap_or(self.routes.len())
    }

    fn handler(&self, t: Target) -> Option<&dyn Handler> {
        match self.routes.get(t) {
            Some((_, h)) => Some(h),
            None => self.rest.as_deref(),
        }
    }

    /// Every target's handler, the rest last.
    fn all(&self) -> impl Iterator<Item = &dyn Handler> {
        (0..=self.routes.len()).filter_map(|t| self.handler(t))
    }

    /// `channels` split by target, in order, non-empty lists only.
    fn split(&self, channels: &ChannelList) -> Vec<(Target, ChannelList)> {
        let mut out: Vec<(Target, ChannelList)> = Vec::new();
        for c in channels.iter() {
            let t = self.target(c);
            match out.iter_mut().find(|(u, _)| *u == t) {
                Some((_, l)) => l.push(c),
                None => {
                    let mut l = ChannelList::default();
                    l.push(c);
                    out.push((t, l));
                }
            }
        }
        out
    }
}

impl Handler for Router {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        if let Some(h) = self.handler(self.target(channel)) {
            h.on_message(channel, payload);
        }
    }

    /// By the pattern's prefix (its events travel with it).
    fn on_pattern_message(&self, pattern: &[u8], channel: &[u8], payload: &[u8]) {
        if let Some(h) = self.handler(self.target(pattern)) {
            h.on_pattern_message(pattern, channel, payload);
        }
    }

    fn on_event(&self, event: Event<'_>) {
        let one = |channel: &[u8], event: Event<'_>| {
            if let Some(h) = self.handler(self.target(channel)) {
                h.on_event(event);
            }
        };
        match event {
            Event::Active { channel } => one(channel, event),
            Event::Refused { channel, .. } => one(channel, event),
            Event::Unrecoverable { channel, .. } => one(channel, event),
            Event::PatternActive { pattern } => one(pattern, event),
            Event::PatternRefused { pattern, .. } => one(pattern, event),
            Event::PatternGap { server, patterns } => {
                for (t, patterns) in self.split(patterns) {
                    if let Some(h) = self.handler(t) {
                        h.on_event(Event::PatternGap {
                            server,
                            patterns: &patterns,
                        });
                    }
                }
            }
            Event::PatternDropped { patterns, messages } => {
                for (t, patterns) in self.split(patterns) {
                    if let Some(h) = self.handler(t) {
                        h.on_event(Event::PatternDropped {
                            patterns: &patterns,
                            messages,
                        });
                    }
                }
            }
            Event::Gap { server, channels } => {
                for (t, channels) in self.split(channels) {
                    if let Some(h) = self.handler(t) {
                        h.on_event(Event::Gap {
                            server,
                            channels: &channels,
                        });
                    }
                }
            }
            Event::Dropped { channels, messages } => {
                // The count is the batch's: each part gets it once (the
                // channels say which lost messages).
                for (t, channels) in self.split(channels) {
                    if let Some(h) = self.handler(t) {
                        h.on_event(Event::Dropped {
                            channels: &channels,
                            messages,
                        });
                    }
                }
            }
            Event::Disconnected {
                server,
                addr,
                error,
            } => {
                for h in self.all() {
                    h.on_event(Event::Disconnected {
                        server,
                        addr,
                        error,
                    });
                }
            }
            Event::Connected { server, addr } => {
                for h in self.all() {
                    h.on_event(Event::Connected { server, addr });
                }
            }
        }
    }
}
