//! State shared by the application threads, the I/O threads (through the
//! observer), the control thread and the workers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::pubsub::front::Front;
use crate::pubsub::mailbox::{DirtyLanes, Mailbox};
use crate::pubsub::routing::Routing;
use crate::pubsub::ChannelList;

/// Fixed settings.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) servers: usize,
    pub(crate) per_server: usize,
    pub(crate) batch: usize,
    /// How long the control thread lets subscribe calls accumulate.
    pub(crate) coalesce: Duration,
    pub(crate) probe_interval: Duration,
    pub(crate) envelope: bool,
}

/// The prefix of every service (probe) channel.
pub(crate) const PROBE_PREFIX: &[u8] = b"__shardsub:probe:";

/// One subscribe connection, as every thread sees it.
pub(crate) struct ConnSlot {
    pub(crate) server: usize,
    pub(crate) index: usize,
    /// Its service channel, for the liveness probe.
    pub(crate) probe_channel: Box<[u8]>,
    /// Set by the control thread once the connection's subscriptions have
    /// been (re)sent; cleared by the observer when it drops.
    pub(crate) ready: AtomicBool,
    /// Pushes received (any kind): the probe's sign of life.
    pub(crate) rx: AtomicU64,
    /// Messages received and dropped (per connection, summed in snapshots
    /// so I/O threads do not share a counter).
    pub(crate) received: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) unenveloped: AtomicU64,
    /// Handshakes seen (the first is a connect, later ones reconnects).
    pub(crate) connects: AtomicU64,
}

/// Connection events for the control thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ConnEvent {
    /// Connection slot finished a handshake.
    Connected(usize),
    /// The server refused a subscribe command on connection slot `conn`
    /// that carried `names`.
    Refused {
        conn: usize,
        names: Arc<ChannelList>,
        message: Arc<str>,
    },
}

/// The control thread's inbox.
#[derive(Default)]
pub(crate) struct Inbox {
    pub(crate) events: Vec<ConnEvent>,
    /// Lanes with dirty channels.
    pub(crate) dirty: Vec<usize>,
    pub(crate) stop: bool,
}

impl DirtyLanes for Inbox {
    fn push_dirty(&mut self, lane: usize) {
        self.dirty.push(lane);
    }
}

pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) routing: Box<dyn Routing>,
    /// What every placement shares (registry, queues, counters, waits).
    pub(crate) front: Front,
    pub(crate) conns: Vec<ConnSlot>,
    /// The control thread's inbox.
    pub(crate) mail: Mailbox<Inbox>,
}

impl std::ops::Deref for Shared {
    type Target = Front;

    fn deref(&self) -> &Front {
        &self.front
    }
}

impl Shared {
    /// Posts work to the control thread.
    pub(crate) fn post(&self, f: impl FnOnce(&mut Inbox)) {
        self.mail.post(f);
    }

    /// Tells the control thread that `lane` has dirty channels.
    pub(crate) fn mark_dirty(&self, lane: usize) {
        self.mail.mark_dirty(lane);
    }

    /// The connection slot of a server's connection.
    pub(crate) fn slot_of(&self, server: usize, index: usize) -> Option<usize> {
        (index < self.config.per_server && server < self.config.servers)
            .then_some(server * self.config.per_server + index)
    }

    /// Whether a channel's subscription is confirmed on a live connection.
    pub(crate) fn is_active(&self, channel: &[u8]) -> bool {
        let lane = self.routing.lane_of(channel);
        let conn = self.routing.conn_of_lane(lane);
        let ready = self
            .conns
            .get(conn)
            .is_some_and(|c| c.ready.load(Ordering::Acquire));
        ready && self.registry.flags(lane, channel) & super::registry::ACTIVE != 0
    }
}
