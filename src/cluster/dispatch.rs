//! The subscribe engines' observer: runs on the I/O threads, classifies
//! each push, hands messages to the workers without blocking, and turns a
//! server-initiated `sunsubscribe` of a wanted channel into a rebuild.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use resp::{Parsed, PubSub};

use crate::cluster::service;
use crate::cluster::shared::{ConnState, Shared, Trigger};
use crate::conn::Protocol;
use crate::error::Error;
use crate::metrics::add;
use crate::observer::{ConnInfo, Observer};
use crate::pubsub::registry::{ACTIVE, SENT, WANT};

/// Observer of one subscribe engine (one node, or one partition in
/// per-partition mode); `conns[i]` is the engine's connection `i`.
pub(crate) struct SubObserver {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conns: Vec<Arc<ConnState>>,
    /// Set when the server drops this node's service channel.
    pub(crate) service_lost: Arc<AtomicBool>,
}

impl SubObserver {
    fn deliver(&self, state: &ConnState, wire: &[u8], payload: &[u8]) {
        let s = &self.shared;
        if service::is_service(wire) {
            if let Some(token) = crate::cluster::gate::parse_marker(s.instance, payload) {
                s.post(|inbox| inbox.markers.push(token));
            }
            return;
        }
        let Some((_, channel)) = s.user_of(wire) else {
            return; // not one of ours (another app's channel on a shared node)
        };
        state.received.fetch_add(1, Ordering::Relaxed);
        if !s.front.deliver(channel, payload, 0) {
            state.dropped.fetch_add(1, Ordering::Relaxed);
        }
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
        s.front.confirm(lane, channel);
    }

    /// A `sunsubscribe` push: our own unsubscribes remove the channel from
    /// the registry first, so a wanted, sent channel here means the server
    /// dropped it (its slot moved away).
    fn unsubscribed(&self, state: &Arc<ConnState>, wire: &[u8]) {
        let s = &self.shared;
        if service::is_service(wire) {
            // The node lost the service channel's slot: a failover or a
            // migration. Rebuild now (publish routes too).
            if !self.service_lost.swap(true, Ordering::AcqRel) {
                s.request_rebuild(Trigger::Sunsubscribe);
            }
            return;
        }
        let Some((lane, channel)) = s.user_of(wire) else {
            return;
        };
        // A late push from a connection that no longer carries the lane
        // (its slot moved and the lane is already subscribed elsewhere):
        // about the old subscription, not the new one.
        let moved_on = s
            .lane_conn
            .read()
            .get(lane)
            .and_then(Option::as_ref)
            .is_some_and(|now| !Arc::ptr_eq(now, state));
        if moved_on {
            return;
        }
        let lost = match s.registry.lane(lane) {
            Some(mut l) => match l.map.get_mut(channel) {
                Some(f) if *f & (WANT | SENT) == WANT | SENT => {
                    *f &= !ACTIVE;
                    true
                }
                _ => false,
            },
            None => false,
        };
        if lost {
            let first = s
                .lane_lost
                .get(lane)
                .is_some_and(|f| !f.swap(true, Ordering::AcqRel));
            if first {
                s.request_rebuild(Trigger::Sunsubscribe);
            }
        }
    }
}

impl Observer for SubObserver {
    fn on_push(&self, conn: &ConnInfo, push: &Parsed<'_>) {
        self.on_classified_push(conn, push, resp::classify(&push.frame).as_ref());
    }

    fn on_classified_push(&self, conn: &ConnInfo, _push: &Parsed<'_>, class: Option<&PubSub<'_>>) {
        let Some(state) = self.conns.get(conn.index) else {
            return;
        };
        state.rx.fetch_add(1, Ordering::Relaxed);
        match class.copied() {
            Some(PubSub::Message { channel, payload })
            | Some(PubSub::SMessage { channel, payload }) => self.deliver(state, channel, payload),
            Some(PubSub::Subscribe { channel, .. }) | Some(PubSub::SSubscribe { channel, .. }) => {
                self.confirmed(channel)
            }
            Some(PubSub::SUnsubscribe {
                channel: Some(channel),
                ..
            }) => self.unsubscribed(state, channel),
            _ => {}
        }
    }

    fn on_pushes_done(&self, _conn: &ConnInfo) {
        // One wake per worker per read, not one per message.
        for q in &self.shared.queues {
            q.wake_deferred();
        }
    }

    fn on_connected(&self, conn: &ConnInfo, _protocol: Protocol, _fell_back: bool) {
        let Some(state) = self.conns.get(conn.index) else {
            return;
        };
        state.connects.fetch_add(1, Ordering::Relaxed);
        let id = state.id;
        self.shared.post(|inbox| inbox.connected.push(id));
    }

    fn on_disconnected(&self, conn: &ConnInfo, error: &Error) {
        let Some(state) = self.conns.get(conn.index) else {
            return;
        };
        let was_ready = state.ready.swap(false, Ordering::AcqRel);
        if matches!(error, Error::Shutdown) {
            return;
        }
        if matches!(error, Error::Timeout { .. }) {
            add(&self.shared.counters.probe_restarts, 1);
        }
        if was_ready {
            log::warn!(
                "cluster subscribe connection {} to {} lost ({error}); checking the topology",
                conn.index,
                conn.addr
            );
            self.shared.request_rebuild(Trigger::Disconnect);
        }
    }
}
