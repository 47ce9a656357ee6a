//! The subscribe engine's observer: runs on the I/O threads, classifies
//! each push and hands messages to the workers without blocking.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use resp::{Parsed, PubSub};

use crate::conn::Protocol;
use crate::error::Error;
use crate::observer::{ConnInfo, Observer};
use crate::pubsub::envelope;
use crate::pubsub::shared::{ConnEvent, ConnSlot, Shared, PROBE_PREFIX};

/// Feeds pushes from the subscribe connections into the registry (for
/// confirmations), the probe state and the worker queues.
pub(crate) struct Dispatcher {
    pub(crate) shared: Arc<Shared>,
}

impl Dispatcher {
    fn slot(&self, conn: &ConnInfo) -> Option<(usize, &ConnSlot)> {
        let i = self.shared.slot_of(conn.server, conn.index)?;
        Some((i, self.shared.conns.get(i)?))
    }

    fn deliver(&self, slot: &ConnSlot, channel: &[u8], payload: &[u8]) {
        if channel.starts_with(PROBE_PREFIX) && *channel == *slot.probe_channel {
            return; // the probe came back; `rx` already moved
        }
        slot.received.fetch_add(1, Ordering::Relaxed);
        let s = &self.shared;
        let (sent_us, payload) = if s.config.envelope {
            match envelope::decode(payload) {
                Some((t, p)) => (t.max(1), p),
                None => {
                    slot.unenveloped.fetch_add(1, Ordering::Relaxed);
                    (0, payload)
                }
            }
        } else {
            (0, payload)
        };
        if !s.front.deliver(channel, payload, sent_us) {
            slot.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn confirmed(&self, channel: &[u8]) {
        let s = &self.shared;
        s.front.confirm(s.routing.lane_of(channel), channel);
    }
}

impl Observer for Dispatcher {
    fn on_push(&self, conn: &ConnInfo, push: &Parsed<'_>) {
        self.on_classified_push(conn, push, resp::classify(&push.frame).as_ref());
    }

    fn on_classified_push(&self, conn: &ConnInfo, _push: &Parsed<'_>, class: Option<&PubSub<'_>>) {
        let Some((_, slot)) = self.slot(conn) else {
            return;
        };
        slot.rx.fetch_add(1, Ordering::Relaxed);
        match class.copied() {
            Some(PubSub::Message { channel, payload })
            | Some(PubSub::SMessage { channel, payload }) => self.deliver(slot, channel, payload),
            Some(PubSub::Subscribe { channel, .. }) | Some(PubSub::SSubscribe { channel, .. }) => {
                self.confirmed(channel)
            }
            _ => {}
        }
    }

    fn on_connected(&self, conn: &ConnInfo, _protocol: Protocol, _fell_back: bool) {
        let Some((i, slot)) = self.slot(conn) else {
            return;
        };
        slot.connects.fetch_add(1, Ordering::Relaxed);
        self.shared
            .post(|inbox| inbox.events.push(ConnEvent::Connected(i)));
    }

    fn on_pushes_done(&self, _conn: &ConnInfo) {
        for q in &self.shared.queues {
            q.wake_deferred();
        }
    }

    fn on_disconnected(&self, conn: &ConnInfo, error: &Error) {
        let Some((_, slot)) = self.slot(conn) else {
            return;
        };
        if slot.ready.swap(false, Ordering::AcqRel) {
            log::warn!(
                "subscribe connection {} to {} lost ({error}); its channels will be resubscribed",
                conn.index,
                conn.addr
            );
        }
    }
}
