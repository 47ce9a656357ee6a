//! Subscribe connections: opening, replies, server pushes, reconnects, and
//! the subscribe commands themselves.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::time::Duration;

use topology::{ClusterError, NodeKey};

use crate::command::{Channel, Command, ConnId, SubscribeReply};
use crate::config::ConnLayout;
use crate::core::{Conn, ConnState, Core, Sub};
use crate::stats::Trigger;
use crate::time::Time;

impl Core {
    /// Connection `conn` is up: every partition it carries is subscribed
    /// (with a gap first for channels whose subscription broke).
    pub fn handle_conn_up(&mut self, now: Time, conn: ConnId) {
        self.tick(now);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !matches!(c.state, ConnState::Opening { .. }) {
            return;
        }
        c.state = ConnState::Up;
        c.failures = 0;
        c.last_rx = now;
        let parts: Vec<u32> = (0..self.layout.partition_count())
            .filter(|&p| self.conn_of(p) == Some(conn))
            .collect();
        self.flush(&parts, false, now);
    }

    /// Connection `conn` went down (or could not be opened): its channels
    /// may have lost messages; it is reopened after a backoff, and the
    /// slot map refreshed.
    pub fn handle_conn_down(&mut self, now: Time, conn: ConnId) {
        self.tick(now);
        let down = self
            .conns
            .get(&conn)
            .is_some_and(|c| matches!(c.state, ConnState::Retry { .. }));
        if !down {
            self.conn_failed(conn, now); // a second report changes nothing
        }
    }

    /// The reply to the oldest subscribe in flight on `conn`.
    pub fn handle_subscribe_reply(&mut self, now: Time, conn: ConnId, reply: SubscribeReply) {
        self.tick(now);
        self.heard(conn, now);
        self.subscribe_reply(now, conn, reply);
        self.send_next_probe(conn, now);
        self.check_restored(now);
    }

    fn subscribe_reply(&mut self, now: Time, conn: ConnId, reply: SubscribeReply) {
        let Some(pending) = self.conns.get_mut(&conn).and_then(|c| {
            c.leaving.reply();
            c.pending.pop_front()
        }) else {
            return;
        };
        let Some(part) = self.parts.get_mut(pending.partition as usize) else {
            return;
        };
        if reply == SubscribeReply::Ok {
            // One lookup per channel: those still sent on `conn` are in,
            // but for a void one (sent with a gap due: see
            // `handle_sunsubscribe`): it is unsubscribed (the server holds
            // it, the core does not count it in) and resubscribed after
            // its gap.
            let mut void = Vec::new();
            for name in &pending.channels {
                if let Some(chan) = part.channels.get_mut(name) {
                    if chan.sub() == Sub::Sent(conn) {
                        if chan.gap() {
                            chan.set_sub(Sub::Idle);
                            void.push(name.clone());
                        } else {
                            chan.set_sub(Sub::Active(conn));
                        }
                    }
                }
            }
            if !void.is_empty() {
                self.unsubscribe(conn, pending.partition, void);
                self.flush(&[pending.partition], false, now);
            }
            return;
        }
        self.counters.stats.subscribe_errors += 1;
        let single = pending.carried == 1;
        let still: Vec<Channel> = pending
            .channels
            .into_iter()
            .filter(|n| {
                part.channels
                    .get(n)
                    .is_some_and(|c| c.sub() == Sub::Sent(conn))
            })
            .collect();
        match reply {
            SubscribeReply::Ok => {}
            SubscribeReply::Refused(message) => {
                if single {
                    for name in &still {
                        if let Some(chan) = part.channels.get_mut(name) {
                            chan.set_sub(Sub::Refused);
                            chan.set_gap(false);
                        }
                    }
                    for name in still {
                        self.emit(Command::Refused {
                            partition: pending.partition,
                            channel: name,
                            message: message.clone(),
                        });
                    }
                    return;
                }
                // A channel whose older subscription ended while this one
                // was in flight owes its gap: not sent again here, but
                // idle, resubscribed by the flush below after its gap
                // event (the refused command subscribed nothing).
                let (gapped, still): (Vec<Channel>, Vec<Channel>) = still
                    .into_iter()
                    .partition(|n| part.channels.get(n).is_some_and(|c| c.gap()));
                for name in &gapped {
                    if let Some(chan) = part.channels.get_mut(name) {
                        chan.set_sub(Sub::Idle);
                    }
                }
                // Bisect: each half again on the same connection, until
                // every refused channel stands alone.
                let (a, b) = still.split_at(still.len().div_ceil(2));
                for half in [a, b] {
                    if !half.is_empty() {
                        self.send_subscribe(conn, pending.partition, half.to_vec(), now);
                    }
                }
                if !gapped.is_empty() {
                    self.flush(&[pending.partition], false, now);
                }
            }
            SubscribeReply::Routing(e) => {
                for name in &still {
                    if let Some(chan) = part.channels.get_mut(name) {
                        // Its older subscription on `conn` ended when the
                        // node stopped serving the slot, or at our
                        // unsubscribe: a loss nobody saw the end of.
                        let lingered = chan.lingers();
                        chan.set_sub(Sub::Idle);
                        if lingered {
                            chan.set_gap(true);
                        }
                    }
                }
                if !still.is_empty() {
                    part.lost = true;
                    let delay = match e {
                        ClusterError::Moved { .. } => Duration::ZERO,
                        _ => self.cfg.degraded_retry,
                    };
                    self.request_refresh(now, delay, Trigger::SubscribeError);
                    self.disrupted(now);
                }
            }
        }
    }

    /// A `sunsubscribe` push for `channel` on `conn`. One that answers our
    /// own unsubscribe of a channel wanted again since is passed over (each
    /// unsubscribe is answered once). Otherwise the server dropped
    /// `channel` from `conn`: its slot probably moved. A confirmed channel
    /// broke: its partition is lost until a refresh moves it, or until
    /// [`Config::stale_rounds`](crate::Config::stale_rounds) refreshes
    /// have not, when it is resubscribed in place. A channel whose
    /// subscribe is still in flight keeps waiting for its reply (the push
    /// came first on the wire, so it speaks of an older subscription; the
    /// reply says whether the server took the new one); when that older
    /// subscription was live while the channel was wanted again (see
    /// `Chan::LINGER`), its end is a loss: the subscribe in flight is void,
    /// and on its reply the channel is resubscribed, gap event first.
    pub fn handle_sunsubscribe(&mut self, now: Time, conn: ConnId, channel: &[u8]) {
        self.tick(now);
        self.heard(conn, now);
        let p = self.lane_of(channel);
        let Some(part) = self.parts.get_mut(p as usize) else {
            return;
        };
        let Some(chan) = part.channels.get_mut(channel) else {
            return; // not wanted: our own unsubscribe
        };
        if chan.sub().conn() != Some(conn) {
            return; // about an older subscription
        }
        if let Sub::Sent(_) = chan.sub() {
            // Wanted again after we gave it up here: the answer to our own
            // unsubscribe (the new subscribe follows it on the wire). Not
            // for a confirmed channel: every answer due came before the
            // reply that confirmed it.
            if let Some(c) = self.conns.get_mut(&conn) {
                if c.leaving.answered(channel) {
                    return;
                }
            }
            if chan.lingers() {
                // The older subscription's end is a loss. The subscribe in
                // flight is void: whatever its reply, the channel goes idle
                // with its gap due and is resubscribed (the gap event goes
                // first, as for every loss; the server takes a second
                // subscribe of a channel it holds as one).
                chan.clear_linger();
                chan.set_gap(true);
                self.disrupted(now);
            }
            return;
        }
        chan.break_off();
        part.lost = true;
        self.disrupted(now);
        self.request_refresh(now, Duration::ZERO, Trigger::Sunsubscribe);
    }

    /// The connection partition `p` rides on in the current layout (it may
    /// still be opening, or waiting to reopen); `None` while the partition
    /// has no owner. A driver ignores a `sunsubscribe` push for a lane from
    /// any other connection.
    pub fn conn_of(&self, p: u32) -> Option<ConnId> {
        let key = self.layout.node_of(p)?;
        self.nodes.get(key)?.get(&self.index_of(p)).copied()
    }

    /// The index of partition `p`'s connection among its node's.
    pub(crate) fn index_of(&self, p: u32) -> usize {
        match self.cfg.mode {
            // Classic: lane `p < multiplier` on connection `p`, the
            // pattern lane (`multiplier`) on connection 0.
            ConnLayout::NodeGrouped | ConnLayout::Fixed | ConnLayout::Classic => {
                p as usize % self.cfg.multiplier.max(1) as usize
            }
            ConnLayout::PerPartition => p as usize,
        }
    }

    /// Per-partition mode: opens partition `p`'s connection to its node
    /// when it has none.
    pub(crate) fn ensure_conn(&mut self, p: u32, now: Time) {
        let Some(key) = self.layout.node_of(p).cloned() else {
            return;
        };
        let index = self.index_of(p);
        if self.nodes.get(&key).is_some_and(|m| m.contains_key(&index)) {
            return;
        }
        let id = self.open_conn(key.clone(), index, 0, now);
        self.nodes.entry(key).or_default().insert(index, id);
    }

    /// Closes one connection (per-partition mode: its partition moved).
    pub(crate) fn close_conn(&mut self, id: ConnId) {
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        if let Some(m) = self.nodes.get_mut(&c.node) {
            m.remove(&c.index);
        }
        self.break_channels(id);
        self.emit(Command::Close { conn: id });
    }

    pub(crate) fn is_up(&self, conn: ConnId) -> bool {
        self.conns
            .get(&conn)
            .is_some_and(|c| c.state == ConnState::Up)
    }

    /// Opens the connections of a new node.
    pub(crate) fn open_node(&mut self, key: &NodeKey, now: Time) {
        if self.nodes.contains_key(key) {
            return;
        }
        let n = match self.cfg.mode {
            ConnLayout::NodeGrouped | ConnLayout::Classic | ConnLayout::Fixed => {
                self.cfg.multiplier as usize
            }
            ConnLayout::PerPartition => 0, // opened per partition
        };
        let ids = (0..n)
            .map(|i| (i, self.open_conn(key.clone(), i, 0, now)))
            .collect();
        self.nodes.insert(key.clone(), ids);
    }

    fn open_conn(&mut self, node: NodeKey, index: usize, failures: u32, now: Time) -> ConnId {
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        self.emit(Command::Open {
            conn: id,
            node: node.clone(),
        });
        let deadline = now + self.cfg.connect_timeout;
        self.conns.insert(
            id,
            Conn {
                node,
                index,
                state: ConnState::Opening { deadline },
                failures,
                pending: VecDeque::new(),
                leaving: crate::core::Leaving::default(),
                probes: crate::probes::Probes::default(),
                last_rx: now,
                ping: None,
            },
        );
        id
    }

    /// Whether `conn` ended and waits to be opened again (the core closed
    /// it for not answering, or it was reported down), as opposed to closed
    /// for good (its node left, its partition moved) or unknown.
    pub fn is_retrying(&self, conn: ConnId) -> bool {
        self.conns
            .get(&conn)
            .is_some_and(|c| matches!(c.state, ConnState::Retry { .. }))
    }

    /// Closes every connection of a node that left the layout.
    pub(crate) fn close_node(&mut self, key: &NodeKey) {
        for id in self.nodes.remove(key).unwrap_or_default().into_values() {
            self.conns.remove(&id);
            self.break_channels(id);
            self.emit(Command::Close { conn: id });
        }
    }

    /// Every channel (being) subscribed on `conn` broke.
    fn break_channels(&mut self, conn: ConnId) {
        for part in &mut self.parts {
            for chan in part.channels.values_mut() {
                if chan.sub().conn() == Some(conn) {
                    chan.break_off();
                }
            }
        }
        self.disrupted(self.now);
        // Its subscribes awaited may have been all that was left.
        self.check_restored(self.now);
    }

    /// `conn` is down: its channels broke, it is reopened after a backoff,
    /// and the map is refreshed (now when it was up: its node may have
    /// failed over; after the degraded delay when it never came up: the
    /// map may name a node that is gone).
    fn conn_failed(&mut self, conn: ConnId, now: Time) {
        self.conn_down(conn, now, true);
    }

    /// `conn` is down (see [`Core::conn_failed`]); `avoid`: a serving
    /// replica is not chosen again for a poll interval (replica mode).
    pub(crate) fn conn_down(&mut self, conn: ConnId, now: Time, avoid: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let delay = if c.state == ConnState::Up {
            Duration::ZERO
        } else {
            self.counters.stats.topology_errors.connect += 1;
            self.cfg.degraded_retry
        };
        let backoff = self.reconnect.delay_at(c.failures);
        c.failures = c.failures.saturating_add(1);
        c.state = ConnState::Retry { at: now + backoff };
        let pending = core::mem::take(&mut c.pending);
        c.ping = None;
        c.leaving.clear();
        let node = c.node.clone();
        if avoid {
            self.avoid_replica(&node);
        }
        self.hold_unanswered(conn, pending);
        self.break_channels(conn);
        self.request_refresh(now, delay, Trigger::Disconnect);
    }

    /// When `c` needs attention next.
    pub(crate) fn conn_deadline(&self, c: &Conn) -> Option<Time> {
        match c.state {
            ConnState::Opening { deadline } => Some(deadline),
            ConnState::Retry { at } => Some(at),
            ConnState::Up => {
                let reply = c.pending.front().map(|p| p.sent + self.cfg.reply_timeout);
                let ping = match c.ping {
                    Some(sent) => Some(sent + self.cfg.ping_timeout),
                    None if self.cfg.ping_interval.is_zero() => None,
                    None => Some(c.last_rx + self.cfg.ping_interval),
                };
                match (reply, ping) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
        }
    }

    /// Whether an up connection's subscribe or ping is overdue at `now`.
    fn overdue(&self, c: &Conn, now: Time) -> bool {
        let late = |sent: Time| sent + self.cfg.reply_timeout <= now;
        let ping_late = |sent: Time| sent + self.cfg.ping_timeout <= now;
        c.pending.front().is_some_and(|p| late(p.sent)) || c.ping.is_some_and(ping_late)
    }

    /// The `PING` sent on `conn` was answered.
    pub fn handle_pong(&mut self, now: Time, conn: ConnId) {
        self.tick(now);
        if let Some(c) = self.conns.get_mut(&conn) {
            if c.ping.take().is_some() {
                c.leaving.reply();
            }
            c.last_rx = now;
        }
    }

    /// Messages arrived on `conn`: it is alive, so it is not pinged before
    /// it has been silent for the ping interval. Cheap: call it once per
    /// read that delivered messages.
    pub fn handle_activity(&mut self, now: Time, conn: ConnId) {
        self.tick(now);
        self.heard(conn, now);
    }

    /// Connection `index` of primary `node` (node-grouped and classic:
    /// `0..multiplier`; per-partition: the partition number), if open.
    pub fn node_conn(&self, node: &NodeKey, index: usize) -> Option<ConnId> {
        self.nodes.get(node)?.get(&index).copied()
    }

    /// Whether `conn` is up (reported up, not closed or down since).
    pub fn is_conn_up(&self, conn: ConnId) -> bool {
        self.is_up(conn)
    }

    /// The primary connection `conn` goes to (`None` once it is closed).
    pub fn node_of(&self, conn: ConnId) -> Option<&NodeKey> {
        self.conns.get(&conn).map(|c| &c.node)
    }

    /// Something arrived on `conn`: it is alive.
    pub(crate) fn heard(&mut self, conn: ConnId, now: Time) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.last_rx = now;
        }
    }

    /// Open, reply and ping timeouts (close, then retry), liveness pings,
    /// and reconnects.
    pub(crate) fn conn_timers(&mut self, now: Time) {
        let due: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| self.conn_deadline(c).is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get(&id) else {
                continue;
            };
            if let ConnState::Retry { .. } = c.state {
                let Some(c) = self.conns.remove(&id) else {
                    continue;
                };
                self.counters.stats.reconnects += 1;
                let new = self.open_conn(c.node.clone(), c.index, c.failures, now);
                if let Some(n) = self.conns.get_mut(&new) {
                    n.probes = c.probes;
                }
                if let Some(slot) = self
                    .nodes
                    .get_mut(&c.node)
                    .and_then(|v| v.get_mut(&c.index))
                {
                    *slot = new;
                }
            } else if c.state != ConnState::Up || self.overdue(c, now) {
                // No answer in time: presume it dead.
                if c.ping
                    .is_some_and(|sent| sent + self.cfg.ping_timeout <= now)
                {
                    self.counters.stats.ping_restarts += 1;
                }
                self.emit(Command::Close { conn: id });
                self.conn_failed(id, now);
            } else if let Some(c) = self.conns.get_mut(&id) {
                // Silent for the ping interval: a liveness probe.
                c.ping = Some(now);
                c.leaving.command();
                self.emit(Command::Ping { conn: id });
            }
        }
    }
}
