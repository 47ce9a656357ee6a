//! The observer of one subscribe connection: runs on an I/O thread,
//! classifies each push, hands messages to their lane's worker without blocking
//! (staged per read, see [`Stage`]), and reports what the control core must hear (up, down, a
//! server-initiated `sunsubscribe`, a dropped service channel) through the
//! control thread's inbox.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use resp::{Parsed, PubSub};

use crate::conn::Protocol;
use crate::control_loop::service;
use crate::control_loop::shared::{ConnRead, ConnState, Shared};
use crate::error::Error;
use crate::front::registry::{ACTIVE, SENT, WANT};
use crate::history::Position;
use crate::metrics::add;
use crate::observer::{ConnInfo, Observer};
use crate::workers::Stage;

/// Observer of one subscribe connection (its engine has one).
pub(crate) struct SubObserver {
    pub(crate) shared: Arc<Shared>,
    pub(crate) state: Arc<ConnState>,
    /// Set when the server drops this connection's service channel (one
    /// report per loss; the control thread clears it when it resends).
    pub(crate) service_lost: Arc<AtomicBool>,
    /// This read's messages, not yet queued (only this connection's I/O
    /// thread locks it, so the lock is never contended).
    pub(crate) stage: Mutex<Stage>,
    /// The lane of this connection's server's pattern subscriptions, when
    /// the placement has patterns (classic mode).
    pub(crate) pattern_lane: Option<usize>,
}

impl SubObserver {
    /// Queues what this connection has staged: before anything else it
    /// queues or completes, and at the end of each read.
    fn flush(&self) {
        let mut stage = self.stage.lock();
        if !stage.is_empty() {
            let dropped = stage.flush(&self.shared.front.queues);
            self.count_dropped(dropped);
        }
    }

    fn count_dropped(&self, n: u64) {
        if n > 0 {
            self.state.dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The envelope's publish time (0 without one) and the payload inside
    /// it, when envelopes are on.
    fn unwrap_envelope<'p>(&self, payload: &'p [u8]) -> (u64, &'p [u8]) {
        if !self.shared.config.envelope {
            return (0, payload);
        }
        match crate::wire::envelope::decode(payload) {
            Some((t, p)) => (t.max(1), p),
            None => {
                self.state.unenveloped.fetch_add(1, Ordering::Relaxed);
                (0, payload)
            }
        }
    }

    /// A recoverable channel's history header (epoch, offset), which comes
    /// first in its payload, and the payload after it.
    fn unwrap_header<'p>(&self, channel: &[u8], payload: &'p [u8]) -> (Option<Position>, &'p [u8]) {
        let history = &self.shared.config.history;
        if history.is_empty() || history.of(channel).is_none() {
            return (None, payload);
        }
        match crate::history::header::decode(payload) {
            Some((at, p)) => (Some(at), p),
            None => (None, payload),
        }
    }

    fn deliver(&self, wire: &[u8], payload: &[u8]) {
        let s = &self.shared;
        if service::is_service(wire) {
            if let Some(token) = crate::control_loop::gate::parse_marker(s.instance, payload) {
                log::debug!("cluster: gate {token}: marker came back");
                s.post(|inbox| inbox.markers.push(token));
            }
            return;
        }
        let Some((lane, channel)) = s.user_of(wire) else {
            return; // not one of ours (another app's channel on a shared node)
        };
        self.state.received.fetch_add(1, Ordering::Relaxed);
        let (at, payload) = self.unwrap_header(channel, payload);
        let (sent_us, payload) = self.unwrap_envelope(payload);
        let w = s.front.homes.home(lane);
        let dropped = self
            .stage
            .lock()
            .message(&s.front.queues, w, channel, payload, sent_us, at);
        self.count_dropped(dropped);
    }

    /// A message of pattern subscription `pattern`: to the home of this
    /// connection's pattern lane (a pattern's messages from one server stay
    /// in order; its gap events travel there too).
    fn deliver_pattern(&self, pattern: &[u8], channel: &[u8], payload: &[u8]) {
        let s = &self.shared;
        let Some(lane) = self.pattern_lane else {
            return;
        };
        if service::is_service(channel) {
            return;
        }
        self.state.received.fetch_add(1, Ordering::Relaxed);
        // Its position is not followed through a pattern.
        let (_, payload) = self.unwrap_header(channel, payload);
        let (sent_us, payload) = self.unwrap_envelope(payload);
        let w = s.front.homes.home(lane);
        let dropped =
            self.stage
                .lock()
                .pmessage(&s.front.queues, w, pattern, channel, payload, sent_us);
        self.count_dropped(dropped);
    }

    /// A `psubscribe` confirmation: as [`SubObserver::confirmed`], in this
    /// connection's pattern lane.
    fn confirmed_pattern(&self, pattern: &[u8]) {
        let s = &self.shared;
        let Some(lane) = self.pattern_lane else {
            add(&s.counters.confirmations, 1);
            return;
        };
        if s.lane_owners.moved_from(lane as u32, self.state.id.0) {
            return;
        }
        s.lane_owners.confirm(lane as u32, self.state.id.0);
        s.front.confirm(lane, pattern, true);
    }

    fn confirmed(&self, wire: &[u8]) {
        let s = &self.shared;
        if service::is_service(wire) {
            return;
        }
        let Some((lane, channel)) = s.user_of(wire) else {
            add(&s.counters.confirmations, 1);
            return;
        };
        // A late confirmation from a connection the lane has left says
        // nothing about where the channel is subscribed now.
        if s.lane_owners.moved_from(lane as u32, self.state.id.0) {
            return;
        }
        // What this connection read before (its stage is flushed) may be
        // of an old subscription of the lane; what follows is of this one.
        s.lane_owners.confirm(lane as u32, self.state.id.0);
        s.front.confirm(lane, channel, false);
    }

    /// A `sunsubscribe` push: our own unsubscribes remove the channel from
    /// the registry first, so a wanted, sent channel here means the server
    /// dropped it (its slot moved away), or answers our unsubscribe of a
    /// channel asked for again since. It stops being active at once (a
    /// confirmation of the new subscribe follows it on the wire); the core,
    /// which counts the answers it is owed, decides which it was, where the
    /// channel goes and whether it gets a gap.
    fn unsubscribed(&self, wire: &[u8]) {
        let s = &self.shared;
        let conn = self.state.id;
        if service::is_service(wire) {
            // The node lost the service channel's slot: a failover or a
            // migration. The core refreshes now (publish routes too).
            if !self.service_lost.swap(true, Ordering::AcqRel) {
                s.post(|inbox| inbox.services_lost.push(conn));
            }
            return;
        }
        let Some((lane, channel)) = s.user_of(wire) else {
            return;
        };
        // A late push from a connection that no longer carries the lane
        // (its slot moved and the lane is already subscribed elsewhere):
        // about the old subscription, not the new one.
        if s.lane_owners.moved_from(lane as u32, conn.0) {
            return;
        }
        let lost = match s.registry.lane(lane) {
            Some(l) => l
                .update(channel, |f| {
                    let lost = *f & (WANT | SENT) == WANT | SENT;
                    if lost {
                        *f &= !ACTIVE;
                    }
                    lost
                })
                .unwrap_or(false),
            None => false,
        };
        if lost {
            let name: Box<[u8]> = channel.into();
            s.post(|inbox| inbox.read.push((conn, ConnRead::Sunsubscribed(name))));
        }
    }
}

impl Observer for SubObserver {
    fn on_push(&self, conn: &ConnInfo, push: &Parsed<'_>) {
        self.on_classified_push(conn, push, resp::classify(&push.frame).as_ref());
    }

    fn on_classified_push(&self, _conn: &ConnInfo, _push: &Parsed<'_>, class: Option<&PubSub<'_>>) {
        self.state.rx.fetch_add(1, Ordering::Relaxed);
        match class.copied() {
            Some(PubSub::Message { channel, payload })
            | Some(PubSub::SMessage { channel, payload }) => self.deliver(channel, payload),
            Some(PubSub::PMessage {
                pattern,
                channel,
                payload,
            }) => self.deliver_pattern(pattern, channel, payload),
            Some(PubSub::PSubscribe { pattern, .. }) => {
                self.flush();
                self.confirmed_pattern(pattern)
            }
            // Anything else may queue an event: the messages read before
            // it go first.
            Some(PubSub::Subscribe { channel, .. }) | Some(PubSub::SSubscribe { channel, .. }) => {
                self.flush();
                self.confirmed(channel)
            }
            Some(PubSub::SUnsubscribe {
                channel: Some(channel),
                ..
            }) => {
                self.flush();
                self.unsubscribed(channel)
            }
            _ => self.flush(),
        }
    }

    fn on_pushes_done(&self, _conn: &ConnInfo) {
        // One lock and at most one wake per worker per read.
        self.flush();
    }

    fn on_connected(&self, _conn: &ConnInfo, _protocol: Protocol, _fell_back: bool) {
        self.state.connects.fetch_add(1, Ordering::Relaxed);
        let id = self.state.id;
        self.shared.post(|inbox| inbox.ups.push(id));
    }

    fn on_disconnected(&self, conn: &ConnInfo, error: &Error) {
        let was_ready = self.state.ready.swap(false, Ordering::AcqRel);
        if matches!(error, Error::Shutdown) {
            return;
        }
        // The driver tells the application and logs once per incident.
        log::debug!(
            "subscribe connection {} to {} ended (was up: {was_ready}): {error}",
            self.state.id,
            conn.addr
        );
        let id = self.state.id;
        let why: Arc<str> = error.to_string().into();
        self.shared.post(|inbox| inbox.downs.push((id, why)));
    }
}
