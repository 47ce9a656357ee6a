//! The control thread: turns registry changes into batched `SUBSCRIBE` /
//! `UNSUBSCRIBE` commands, resubscribes connections after a reconnect
//! (signalling the gap first), and runs the liveness probe.
//!
//! It is the only thread that sends subscribe commands, so the order of
//! commands per channel is the order of the registry's decisions.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::{ReplyKind, SubscribeKind};
use crate::engine::Engine;
use crate::metrics::add;
use crate::pubsub::refusal::{channel_list, halves};
use crate::pubsub::registry::Settled;
use crate::pubsub::shared::{ConnEvent, Shared};
use crate::pubsub::ChannelList;

/// The command names for a subscribe kind.
fn commands(kind: SubscribeKind) -> (&'static [u8], &'static [u8]) {
    match kind {
        SubscribeKind::Channel => (b"SUBSCRIBE", b"UNSUBSCRIBE"),
        SubscribeKind::Pattern => (b"PSUBSCRIBE", b"PUNSUBSCRIBE"),
        SubscribeKind::Shard => (b"SSUBSCRIBE", b"SUNSUBSCRIBE"),
    }
}

/// Probe bookkeeping for one connection.
struct Probe {
    last_rx: u64,
    since: Instant,
    sent_at: Option<Instant>,
}

pub(crate) struct Control {
    pub(crate) shared: Arc<Shared>,
    pub(crate) sub: Arc<Engine>,
    pub(crate) publ: Arc<Engine>,
    probes: Vec<Probe>,
    enc: Vec<u8>,
    dropped_reported: u64,
    dropped_logged_at: Instant,
}

impl Control {
    pub(crate) fn new(shared: Arc<Shared>, sub: Arc<Engine>, publ: Arc<Engine>) -> Self {
        let now = Instant::now();
        let probes = (0..shared.conns.len())
            .map(|_| Probe {
                last_rx: 0,
                since: now,
                sent_at: None,
            })
            .collect();
        Control {
            shared,
            sub,
            publ,
            probes,
            enc: Vec::new(),
            dropped_reported: 0,
            dropped_logged_at: now,
        }
    }

    fn stopping(&self) -> bool {
        self.shared.mail.inbox.lock().stop
    }

    fn tick_interval(&self) -> Duration {
        let p = self.shared.config.probe_interval;
        if p.is_zero() {
            Duration::from_secs(1)
        } else {
            (p / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
        }
    }

    /// Runs until the inbox says stop.
    pub(crate) fn run(mut self) {
        let tick = self.tick_interval();
        let mut next_tick = Instant::now() + tick;
        loop {
            let (events, dirty) = {
                let mut inbox = self.shared.mail.inbox.lock();
                loop {
                    if inbox.stop {
                        return;
                    }
                    if !inbox.events.is_empty() || !inbox.dirty.is_empty() {
                        break;
                    }
                    if self
                        .shared
                        .mail
                        .cond
                        .wait_until(&mut inbox, next_tick)
                        .timed_out()
                    {
                        break;
                    }
                }
                (
                    std::mem::take(&mut inbox.events),
                    std::mem::take(&mut inbox.dirty),
                )
            };
            let mut dirty = dirty;
            let coalesce = self.shared.config.coalesce;
            if !dirty.is_empty() && events.is_empty() && !coalesce.is_zero() {
                // Let calls close in time share commands: wait a moment for
                // more channels on the lanes already marked.
                let until = Instant::now() + coalesce;
                let mut inbox = self.shared.mail.inbox.lock();
                while !inbox.stop
                    && inbox.events.is_empty()
                    && !self
                        .shared
                        .mail
                        .cond
                        .wait_until(&mut inbox, until)
                        .timed_out()
                {}
                dirty.append(&mut inbox.dirty);
            }
            for ev in events {
                match ev {
                    ConnEvent::Connected(c) => self.resubscribe(c),
                    ConnEvent::Refused {
                        conn,
                        names,
                        message,
                    } => self.refused(conn, &names, &message),
                }
            }
            for lane in dirty {
                self.flush_lane(lane);
            }
            let now = Instant::now();
            if now >= next_tick {
                self.tick(now);
                next_tick = now + tick;
            }
        }
    }

    /// Sends `self.enc` on connection slot `conn`; a subscribe command
    /// carries its channel `names`, so that a refusal can be isolated.
    fn submit(&mut self, conn: usize, kind: ReplyKind, names: Option<ChannelList>) -> bool {
        let enc = std::mem::take(&mut self.enc);
        let ok = self.submit_bytes(conn, &enc, kind, names.map(Arc::new));
        self.enc = enc;
        self.enc.clear();
        ok
    }

    /// Sends encoded commands on a subscribe connection. Waits (and retries)
    /// while the engine applies backpressure; gives up when the connection
    /// is down or the engine is shutting down (the reconnect resends).
    /// Never called with a registry lane locked: the I/O thread takes lane
    /// locks for confirmations, and it is the one that makes room.
    fn submit_bytes(
        &self,
        conn: usize,
        bytes: &[u8],
        kind: ReplyKind,
        names: Option<Arc<ChannelList>>,
    ) -> bool {
        let Some(slot) = self.shared.conns.get(conn) else {
            return false;
        };
        for _ in 0..8 {
            let encode = |buf: &mut Vec<u8>| buf.extend_from_slice(bytes);
            let r = if let ReplyKind::Subscribe { confirmations, .. } = kind {
                // Subscribes carry a callback: an error reply (an ACL
                // denial, say) must not pass silently, nor hold back the
                // other channels of the command (see `refused`).
                let shared = self.shared.clone();
                let server = slot.server;
                let names = names.clone();
                self.sub
                    .submit_to_then(slot.server, slot.index, encode, kind, move |r| {
                        if let Err(crate::Error::Reply { message, .. }) = r {
                            add(&shared.counters.subscribe_errors, 1);
                            log::warn!(
                                "server {server} refused a subscribe of {confirmations} \
                                 channels: {message}"
                            );
                            if let Some(names) = names {
                                shared.post(|inbox| {
                                    inbox.events.push(ConnEvent::Refused {
                                        conn,
                                        names,
                                        message,
                                    });
                                });
                            }
                        }
                    })
            } else {
                self.sub.submit_to(slot.server, slot.index, encode, kind)
            };
            match r {
                Ok(()) => return true,
                Err(crate::Error::Backpressure { .. }) if !self.stopping() => {
                    log::debug!("subscribe connection {conn} is backed up; retrying");
                }
                Err(e) => {
                    log::debug!("subscribe command not sent ({e}); the reconnect will resend");
                    return false;
                }
            }
        }
        log::warn!("subscribe connection {conn} stayed backed up; restarting it");
        self.sub.restart_connection(slot.server, slot.index);
        false
    }

    /// Sends what changed in one lane since the last look.
    fn flush_lane(&mut self, lane: usize) {
        let s = self.shared.clone();
        if let Some(flag) = s.mail.lane_dirty.get(lane) {
            flag.store(false, Ordering::Release);
        }
        let conn = s.routing.conn_of_lane(lane);
        let ready = s
            .conns
            .get(conn)
            .is_some_and(|c| c.ready.load(Ordering::Acquire));
        let (mut subs, mut unsubs, mut reactivated) = (Vec::new(), Vec::new(), Vec::new());
        let Some(dirty) = s
            .registry
            .lane(lane)
            .map(|mut l| std::mem::take(&mut l.dirty))
        else {
            return;
        };
        // In chunks, releasing the lane between them so subscribe() callers
        // and confirmations are not held up by a long list.
        let mut dirty = dirty.into_iter().peekable();
        while dirty.peek().is_some() {
            let Some(mut l) = s.registry.lane(lane) else {
                return;
            };
            for name in dirty.by_ref().take(4096) {
                match l.settle(&name, ready) {
                    Settled::Subscribe => subs.push(name),
                    Settled::Unsubscribe => unsubs.push(name),
                    // Asked for again before its unsubscribe left: the
                    // subscription never lapsed.
                    Settled::Kept { reactivated: true } if s.active_events => {
                        reactivated.push(name);
                    }
                    Settled::Kept { .. } | Settled::Nothing => {}
                }
            }
        }
        for name in reactivated {
            s.front.push_active(&name);
        }
        let (sub_cmd, unsub_cmd) = commands(s.routing.kind());
        let batch = s.config.batch;
        for chunk in subs.chunks(batch) {
            resp::encode_command_with(&mut self.enc, sub_cmd, chunk);
            add(&s.counters.subscribe_commands, 1);
            let kind = ReplyKind::Subscribe {
                kind: s.routing.kind(),
                confirmations: chunk.len() as u32,
            };
            if !self.submit(conn, kind, Some(channel_list(chunk))) {
                break;
            }
        }
        for chunk in unsubs.chunks(batch) {
            // Unsubscribe confirmations are pushes; the PING's reply stands
            // for the command's (see the conn module).
            resp::encode_command_with(&mut self.enc, unsub_cmd, chunk);
            resp::encode_command(&mut self.enc, [b"PING"]);
            add(&s.counters.unsubscribe_commands, 1);
            if !self.submit(conn, ReplyKind::Single, None) {
                break;
            }
        }
    }

    /// A subscribe connection (re)connected: subscribe its service channel,
    /// tell the workers which channels were lost, then resubscribe them.
    fn resubscribe(&mut self, conn: usize) {
        let s = self.shared.clone();
        let Some(slot) = s.conns.get(conn) else {
            return;
        };
        let started = Instant::now();
        let reconnect = slot.connects.load(Ordering::Relaxed) > 1;
        if reconnect {
            add(&s.counters.reconnects, 1);
        }
        let (sub_cmd, _) = commands(s.routing.kind());
        let kind = s.routing.kind();
        resp::encode_command_with(&mut self.enc, sub_cmd, &[&slot.probe_channel]);
        let mut ok = self.submit(
            conn,
            ReplyKind::Subscribe {
                kind,
                confirmations: 1,
            },
            None,
        );
        let workers = s.queues.len().max(1);
        let (mut channels, mut commands_sent, mut gap_channels) = (0usize, 0u64, 0u64);
        let mut batches: Vec<(usize, ChannelList)> = Vec::new();
        for lane in s.routing.lanes_of_conn(conn) {
            let Some(mut l) = s.registry.lane(lane) else {
                continue;
            };
            let gaps = l.resend_all(workers);
            // The gap goes onto the workers' queues before any message of
            // the new subscriptions can arrive.
            for (q, g) in s.queues.iter().zip(gaps) {
                if !g.is_empty() {
                    gap_channels += g.len() as u64;
                    add(&s.counters.gaps, 1);
                    q.push_gap(slot.server, g);
                }
            }
            channels += l.map.len();
            // Encode every batch now, send after the lock is released.
            let mut refs: Vec<&[u8]> = Vec::with_capacity(s.config.batch);
            let mut names = l.map.keys();
            loop {
                refs.clear();
                refs.extend(names.by_ref().take(s.config.batch).map(|n| &**n));
                if refs.is_empty() {
                    break;
                }
                resp::encode_command_with(&mut self.enc, sub_cmd, &refs);
                batches.push((self.enc.len(), channel_list(&refs)));
            }
            drop(l);
            let all = std::mem::take(&mut self.enc);
            let mut from = 0;
            for (to, names) in batches.drain(..) {
                if !ok {
                    break;
                }
                let kind = ReplyKind::Subscribe {
                    kind,
                    confirmations: names.len() as u32,
                };
                let bytes = all.get(from..to).unwrap_or_default();
                ok = self.submit_bytes(conn, bytes, kind, Some(Arc::new(names)));
                commands_sent += 1;
                from = to;
            }
            batches.clear();
            self.enc = all;
            self.enc.clear();
        }
        add(&s.counters.subscribe_commands, commands_sent);
        add(&s.counters.gap_channels, gap_channels);
        if ok {
            slot.ready.store(true, Ordering::Release);
            s.active.wake();
        }
        let addr = self.sub.servers().get(slot.server).copied();
        if reconnect {
            log::info!(
                "resubscribed {channels} channels on subscribe connection {} to {addr:?} in \
                 {commands_sent} commands ({gap_channels} signalled as a gap) in {:?}",
                slot.index,
                started.elapsed()
            );
        } else {
            log::info!(
                "subscribe connection {} to {addr:?} ready ({channels} channels)",
                slot.index
            );
        }
        self.probes[conn] = Probe {
            last_rx: slot.rx.load(Ordering::Relaxed),
            since: Instant::now(),
            sent_at: None,
        };
    }

    /// The server refused a subscribe command that carried `names` (every
    /// channel of it, since a refused command subscribes none). A command
    /// of one channel marks that channel refused, tells its worker and
    /// wakes `wait_active`; a larger one is split in two and each half
    /// sent again, so a refused channel is isolated in about
    /// 2·log2(batch) commands while the others get through. Channels
    /// confirmed, unsubscribed or resent since are left alone; on a
    /// connection that is down the resubscribe resends them anyway.
    fn refused(&mut self, conn: usize, names: &ChannelList, message: &Arc<str>) {
        let s = self.shared.clone();
        let waiting: Vec<&[u8]> = names
            .iter()
            .filter(|n| s.registry.awaits_confirmation(s.routing.lane_of(n), n))
            .collect();
        if names.len() == 1 {
            if let Some(&name) = waiting.first() {
                let lane = s.routing.lane_of(name);
                s.refusals.refuse(&s.refusal_targets(), lane, name, message);
            }
            return;
        }
        let ready = s
            .conns
            .get(conn)
            .is_some_and(|c| c.ready.load(Ordering::Acquire));
        if waiting.is_empty() || !ready {
            return;
        }
        let (sub_cmd, _) = commands(s.routing.kind());
        for half in halves(&waiting) {
            resp::encode_command_with(&mut self.enc, sub_cmd, half);
            add(&s.counters.subscribe_commands, 1);
            let kind = ReplyKind::Subscribe {
                kind: s.routing.kind(),
                confirmations: half.len() as u32,
            };
            if !self.submit(conn, kind, Some(channel_list(half))) {
                return;
            }
        }
    }

    /// Liveness probes and the drop summary.
    fn tick(&mut self, now: Instant) {
        let s = self.shared.clone();
        let interval = s.config.probe_interval;
        if !interval.is_zero() {
            for (c, slot) in s.conns.iter().enumerate() {
                let p = &mut self.probes[c];
                let rx = slot.rx.load(Ordering::Relaxed);
                if !slot.ready.load(Ordering::Acquire) || rx != p.last_rx {
                    *p = Probe {
                        last_rx: rx,
                        since: now,
                        sent_at: None,
                    };
                    continue;
                }
                match p.sent_at {
                    Some(t) if now.duration_since(t) >= interval => {
                        log::warn!(
                            "subscribe connection {} to server {}: probe not back within \
                             {interval:?}; restarting it",
                            slot.index,
                            slot.server
                        );
                        add(&s.counters.probe_restarts, 1);
                        self.sub.restart_connection(slot.server, slot.index);
                        p.sent_at = None;
                        p.since = now;
                    }
                    None if now.duration_since(p.since) >= interval => {
                        resp::encode_command_with(
                            &mut self.enc,
                            b"PUBLISH",
                            &[&*slot.probe_channel, b"p"],
                        );
                        let enc = &self.enc;
                        let r = self.publ.submit_to(
                            slot.server,
                            0,
                            |buf| buf.extend_from_slice(enc),
                            ReplyKind::Single,
                        );
                        self.enc.clear();
                        match r {
                            Ok(()) => {
                                add(&s.counters.probes_sent, 1);
                                p.sent_at = Some(now);
                            }
                            // The publish side is down, not necessarily this
                            // connection: try again next tick.
                            Err(e) => log::debug!("probe publish not sent: {e}"),
                        }
                    }
                    _ => {}
                }
            }
        }
        let dropped: u64 = s
            .conns
            .iter()
            .map(|c| c.dropped.load(Ordering::Relaxed))
            .sum();
        if dropped > self.dropped_reported
            && now.duration_since(self.dropped_logged_at) >= Duration::from_secs(1)
        {
            self.dropped_logged_at = now;
            log::warn!(
                "dropped {} messages since the last report ({dropped} in all): worker queues full",
                dropped - self.dropped_reported
            );
            self.dropped_reported = dropped;
        }
    }
}
