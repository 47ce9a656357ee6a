//! The cluster control thread: the only thread that sends subscribe
//! commands, opens and closes node connections, and rebuilds the topology.
//!
//! Each loop takes the inbox (connections that came up, dirty lanes,
//! publishes to retry, a rebuild request), then runs what is due: the poll,
//! a degraded-mode retry, delayed publish retries, the restore check.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use topology::{Layout, SlotMap, TopologyCommand};

use crate::cluster::builder::{Mode, NodeSettings};
use crate::cluster::dispatch::SubObserver;
use crate::cluster::gate::Gate;
use crate::cluster::publish::{self, PubMsg};
use crate::cluster::resubscribe::plan_batches;
use crate::cluster::shared::{ConnState, Refusal, Retry, Shared, Trigger};
use crate::conn::{ReplyKind, Role, SubscribeKind};
use crate::engine::Engine;
use crate::error::Error;
use crate::metrics::add;
use crate::pubsub::refusal::{channel_list, halves};
use crate::pubsub::registry::{Settled, WANT};
use crate::pubsub::ChannelList;

/// Which subscribe engine: a node, and in per-partition mode a partition.
pub(crate) type GroupKey = (SocketAddr, Option<u32>);

/// One subscribe engine and its connections.
pub(crate) struct Group {
    pub(crate) engine: Arc<Engine>,
    pub(crate) conns: Vec<Arc<ConnState>>,
    /// The slot of the service channel on connection 0 (node groups in
    /// node-grouped mode; see `service`).
    pub(crate) service: Option<u16>,
    /// Set by the observer when the server dropped the service channel.
    pub(crate) service_lost: Arc<AtomicBool>,
    /// Rebuilds that saw it dropped with its slot still on the node.
    pub(crate) service_stale: u32,
}

pub(crate) struct Control {
    pub(crate) s: Arc<Shared>,
    pub(crate) node: NodeSettings,
    pub(crate) seeds: Vec<SocketAddr>,
    pub(crate) command: Option<TopologyCommand>,
    pub(crate) map: SlotMap,
    pub(crate) layout: Layout,
    /// Publish (and topology command) engines, one per primary.
    pub(crate) publ: BTreeMap<SocketAddr, Arc<Engine>>,
    pub(crate) groups: BTreeMap<GroupKey, Group>,
    /// Connection id → (group, index).
    pub(crate) by_id: HashMap<u64, (GroupKey, usize)>,
    /// Per lane: the connection that carries it.
    pub(crate) lane_at: Vec<Option<(GroupKey, usize)>>,
    /// Node numbers for gap events, in the order nodes were first seen.
    pub(crate) node_numbers: BTreeMap<SocketAddr, usize>,
    /// The connection classic mode subscribes on.
    pub(crate) classic_node: Option<SocketAddr>,
    pub(crate) next_id: u64,
    pub(crate) next_poll: Instant,
    pub(crate) next_rebuild: Option<(Instant, Trigger)>,
    /// Consecutive rebuilds that left lost lanes in place.
    pub(crate) stale_rounds: u32,
    pub(crate) delayed: Vec<(Instant, Box<PubMsg>)>,
    /// When a change was noticed and delivery not yet restored.
    pub(crate) change_at: Option<Instant>,
    pub(crate) last_restore_check: Option<Instant>,
    /// Liveness probe per connection id: rx seen last, and since when.
    pub(crate) probes: HashMap<u64, (u64, Instant)>,
    pub(crate) next_probe: Instant,
    /// The next route barrier's token.
    pub(crate) next_token: u64,
    /// Closed route gates by token.
    pub(crate) gates: HashMap<u64, Gate>,
    /// Publish engines of former primaries, kept until their gates open.
    pub(crate) retiring: Vec<Arc<Engine>>,
    pub(crate) enc: Vec<u8>,
    pub(crate) name: Vec<u8>,
}

impl Control {
    fn commands(&self) -> (&'static [u8], &'static [u8], SubscribeKind) {
        if self.s.sharded() {
            (b"SSUBSCRIBE", b"SUNSUBSCRIBE", SubscribeKind::Shard)
        } else {
            (b"SUBSCRIBE", b"UNSUBSCRIBE", SubscribeKind::Channel)
        }
    }

    /// Encodes `cmd` with the wire names of `names` into `self.enc`.
    fn encode<N: AsRef<[u8]>>(&mut self, cmd: &[u8], names: &[N]) {
        resp::encode_command_header(&mut self.enc, names.len() + 1);
        resp::encode_bulk(&mut self.enc, cmd);
        for n in names {
            self.name.clear();
            self.s.wire_into(n.as_ref(), &mut self.name);
            resp::encode_bulk(&mut self.enc, &self.name);
        }
    }

    /// Runs until the inbox says stop.
    pub(crate) fn run(mut self) {
        self.rebuild(Trigger::Startup);
        loop {
            let now = Instant::now();
            let mut wake = self.next_poll;
            if let Some((t, _)) = self.next_rebuild {
                wake = wake.min(t);
            }
            if let Some(t) = self.delayed.iter().map(|d| d.0).min() {
                wake = wake.min(t);
            }
            if self.change_at.is_some() {
                wake = wake.min(now + Duration::from_millis(20));
            }
            if !self.s.config.probe_interval.is_zero() {
                wake = wake.min(self.next_probe);
            }
            if let Some(t) = self.next_gate_deadline() {
                wake = wake.min(t);
            }
            if self.s.hold.busy() {
                // Held publishes: look for a reachable owner often.
                wake = wake.min(now + Duration::from_millis(5));
                if let Some(t) = self.s.hold.next_deadline(self.s.config.publish_hold) {
                    wake = wake.min(t);
                }
            }
            let (connected, dirty, retries, barriers, markers, rebuild, refused) = {
                let mut inbox = self.s.mail.inbox.lock();
                loop {
                    if inbox.stop {
                        drop(inbox);
                        return self.close_all();
                    }
                    if !inbox.connected.is_empty()
                        || !inbox.dirty.is_empty()
                        || !inbox.retries.is_empty()
                        || !inbox.barriers.is_empty()
                        || !inbox.markers.is_empty()
                        || inbox.held
                        || inbox.rebuild.is_some()
                        || !inbox.refused.is_empty()
                    {
                        break;
                    }
                    if self.s.mail.cond.wait_until(&mut inbox, wake).timed_out() {
                        break;
                    }
                }
                (
                    std::mem::take(&mut inbox.connected),
                    std::mem::take(&mut inbox.dirty),
                    std::mem::take(&mut inbox.retries),
                    std::mem::take(&mut inbox.barriers),
                    std::mem::take(&mut inbox.markers),
                    {
                        inbox.held = false;
                        inbox.rebuild.take()
                    },
                    std::mem::take(&mut inbox.refused),
                )
            };
            for r in refused {
                self.refused(r);
            }
            if let Some(trigger) = rebuild {
                if !matches!(trigger, Trigger::Retry) {
                    self.change_at.get_or_insert_with(Instant::now);
                }
                self.rebuild(trigger);
            }
            for id in connected {
                self.on_connected(id);
            }
            for lane in dirty {
                self.flush_lane(lane);
            }
            for r in retries {
                self.retry(r);
            }
            // After the retries: redirected publishes that were in flight on
            // the old route go out before the gate opens.
            for (token, ok) in barriers {
                self.on_barrier(token, ok);
            }
            for token in markers {
                self.on_marker(token);
            }
            if !self.gates.is_empty() {
                self.service_gates(Instant::now());
            }
            let now = Instant::now();
            match self.next_rebuild {
                Some((t, trigger)) if now >= t => {
                    self.next_rebuild = None;
                    self.rebuild(trigger);
                }
                _ if now >= self.next_poll => self.rebuild(Trigger::Poll),
                _ => {}
            }
            let due: Vec<PubMsg> = {
                let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.delayed)
                    .into_iter()
                    .partition(|d| d.0 <= now);
                self.delayed = later;
                due.into_iter().map(|d| *d.1).collect()
            };
            for msg in due {
                publish::send(&self.s, msg, None, false);
            }
            if self.s.hold.busy() {
                self.service_hold(Instant::now());
            }
            self.check_restored();
            if !self.s.config.probe_interval.is_zero() && now >= self.next_probe {
                self.probe_liveness(now);
            }
        }
    }

    /// Sends a `PING` on every ready subscribe connection that has been
    /// silent for the probe interval; the engine restarts one that does
    /// not answer within its request timeout.
    fn probe_liveness(&mut self, now: Instant) {
        let interval = self.s.config.probe_interval;
        self.next_probe =
            now + (interval / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut live = std::collections::HashSet::new();
        for g in self.groups.values() {
            for (i, c) in g.conns.iter().enumerate() {
                live.insert(c.id);
                let rx = c.rx.load(Ordering::Relaxed);
                let entry = self.probes.entry(c.id).or_insert((rx, now));
                if !c.ready.load(Ordering::Acquire) || entry.0 != rx {
                    *entry = (rx, now);
                    continue;
                }
                if now.duration_since(entry.1) < interval {
                    continue;
                }
                entry.1 = now;
                let state = c.clone();
                let r = g.engine.submit_to_then(
                    0,
                    i,
                    |buf| resp::encode_command(buf, [b"PING"]),
                    ReplyKind::Single,
                    move |r| {
                        if r.is_ok() {
                            state.rx.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                );
                if r.is_ok() {
                    add(&self.s.counters.probes_sent, 1);
                }
            }
        }
        self.probes.retain(|id, _| live.contains(id));
    }

    fn close_all(&mut self) {
        for (_, g) in std::mem::take(&mut self.groups) {
            g.engine.shutdown();
        }
        for msg in std::mem::take(&mut self.delayed) {
            msg.1.finish(&self.s, Err(Error::Shutdown));
        }
        for msg in self.s.hold.drain() {
            msg.finish(&self.s, Err(Error::Shutdown));
        }
        for (_, e) in std::mem::take(&mut self.publ) {
            e.shutdown();
        }
        self.gates.clear();
        for e in std::mem::take(&mut self.retiring) {
            e.shutdown();
        }
    }

    /// A new subscribe engine to `addr` with `n` connections.
    pub(crate) fn open_group(&mut self, key: GroupKey, n: usize) -> Result<(), Error> {
        if self.groups.contains_key(&key) {
            return Ok(());
        }
        let conns: Vec<Arc<ConnState>> = (0..n)
            .map(|_| {
                self.next_id += 1;
                Arc::new(ConnState {
                    id: self.next_id,
                    rx: Default::default(),
                    ready: Default::default(),
                    connects: Default::default(),
                    received: Default::default(),
                    dropped: Default::default(),
                })
            })
            .collect();
        let service_lost = Arc::new(AtomicBool::new(false));
        let observer = Arc::new(SubObserver {
            shared: self.s.clone(),
            conns: conns.clone(),
            service_lost: service_lost.clone(),
        });
        let engine = self
            .node
            .engine(key.0, Role::Subscribe, n)
            .observer(observer)
            .build()?;
        for (i, c) in conns.iter().enumerate() {
            self.by_id.insert(c.id, (key, i));
        }
        let next = self.node_numbers.len();
        self.node_numbers.entry(key.0).or_insert(next);
        self.groups.insert(
            key,
            Group {
                engine: Arc::new(engine),
                conns,
                service: None,
                service_lost,
                service_stale: 0,
            },
        );
        self.s.cluster.subscribe_connections.store(
            self.groups.values().map(|g| g.conns.len()).sum(),
            Ordering::Relaxed,
        );
        Ok(())
    }

    pub(crate) fn close_group(&mut self, key: &GroupKey) {
        if let Some(g) = self.groups.remove(key) {
            for c in &g.conns {
                self.by_id.remove(&c.id);
                let cc = &self.s.cluster;
                add(&cc.retired_received, c.received.load(Ordering::Relaxed));
                add(&cc.retired_dropped, c.dropped.load(Ordering::Relaxed));
            }
            g.engine.shutdown();
        }
        self.s.cluster.subscribe_connections.store(
            self.groups.values().map(|g| g.conns.len()).sum(),
            Ordering::Relaxed,
        );
    }

    /// Points `lane` at connection `at` (or at nothing).
    pub(crate) fn assign(&mut self, lane: usize, at: Option<(GroupKey, usize)>) {
        let state = at.and_then(|(k, i)| self.groups.get(&k)?.conns.get(i).cloned());
        if let Some(slot) = self.lane_at.get_mut(lane) {
            *slot = at;
        }
        if let Some(slot) = self.s.lane_conn.write().get_mut(lane) {
            *slot = state;
        }
    }

    fn conn(&self, at: (GroupKey, usize)) -> Option<(&Arc<Engine>, &Arc<ConnState>)> {
        let g = self.groups.get(&at.0)?;
        Some((&g.engine, g.conns.get(at.1)?))
    }

    /// Sends `self.enc` on connection `at`; a subscribe command's error
    /// reply asks for a rebuild when it is about routing (`MOVED` for a
    /// stale map, `CLUSTERDOWN`, …); any other refusal (an ACL denial) of
    /// a command that carries its channel `names` is isolated (see
    /// [`Control::refused`]).
    fn submit(
        &mut self,
        at: (GroupKey, usize),
        kind: ReplyKind,
        lane: usize,
        names: Option<ChannelList>,
    ) -> bool {
        let Some((engine, _)) = self.conn(at) else {
            self.enc.clear();
            return false;
        };
        let engine = engine.clone();
        let enc = std::mem::take(&mut self.enc);
        let r = if let ReplyKind::Subscribe { .. } = kind {
            let s = self.s.clone();
            let names = names.map(Arc::new);
            engine.submit_to_then(
                0,
                at.1,
                |buf| buf.extend_from_slice(&enc),
                kind,
                move |r| {
                    if let Err(Error::Reply { addr, message }) = r {
                        let routing =
                            topology::parse_cluster_error(message.as_bytes(), None).is_some();
                        if let (false, Some(names)) = (routing, names) {
                            add(&s.cluster.subscribe_errors, 1);
                            log::warn!(
                                "subscribe of {} channels refused by {addr}: {message}",
                                names.len()
                            );
                            s.mail.post(|inbox| {
                                inbox.refused.push(Refusal {
                                    at,
                                    lane,
                                    names,
                                    message,
                                });
                            });
                            return;
                        }
                        log::info!("subscribe refused by {addr}: {message}; refreshing topology");
                        add(&s.cluster.subscribe_errors, 1);
                        // Resent by the rebuild: moved, or in place after a
                        // few rounds.
                        if let Some(f) = s.lane_lost.get(lane) {
                            f.store(true, Ordering::Release);
                        }
                        s.request_rebuild(Trigger::SubscribeError);
                    }
                },
            )
        } else {
            engine.submit_to(0, at.1, |buf| buf.extend_from_slice(&enc), kind)
        };
        self.enc = enc;
        self.enc.clear();
        if let Err(e) = &r {
            log::debug!("subscribe command not sent ({e}); the reconnect will resend");
        }
        r.is_ok()
    }

    /// Sends what changed in one lane since the last look.
    fn flush_lane(&mut self, lane: usize) {
        let s = self.s.clone();
        if let Some(flag) = s.mail.lane_dirty.get(lane) {
            flag.store(false, Ordering::Release);
        }
        let at = self.lane_at.get(lane).copied().flatten();
        let ready = at
            .and_then(|a| self.conn(a))
            .is_some_and(|(_, c)| c.ready.load(Ordering::Acquire));
        let (mut subs, mut unsubs, mut reactivated) = (Vec::new(), Vec::new(), Vec::new());
        {
            let Some(mut l) = s.registry.lane(lane) else {
                return;
            };
            for name in std::mem::take(&mut l.dirty) {
                match l.settle(&name, ready) {
                    Settled::Subscribe => subs.push(name),
                    Settled::Unsubscribe => unsubs.push(name),
                    // Asked for again before its unsubscribe left: the
                    // subscription never lapsed.
                    Settled::Kept { reactivated: true } if s.active_events => {
                        reactivated.push(name)
                    }
                    Settled::Kept { .. } | Settled::Nothing => {}
                }
            }
        }
        for name in reactivated {
            s.front.push_active(&name);
        }
        let Some(at) = at else { return };
        let (sub_cmd, unsub_cmd, kind) = self.commands();
        for chunk in subs.chunks(s.config.batch) {
            self.encode(sub_cmd, chunk);
            add(&s.counters.subscribe_commands, 1);
            let k = ReplyKind::Subscribe {
                kind,
                confirmations: chunk.len() as u32,
            };
            if !self.submit(at, k, lane, Some(channel_list(chunk))) {
                break;
            }
        }
        for chunk in unsubs.chunks(s.config.batch) {
            self.encode(unsub_cmd, chunk);
            resp::encode_command(&mut self.enc, [b"PING"]);
            add(&s.counters.unsubscribe_commands, 1);
            if !self.submit(at, ReplyKind::Single, lane, None) {
                break;
            }
        }
    }

    /// A subscribe connection (re)connected: resubscribe every lane it
    /// carries (with gap events), then mark it ready.
    fn on_connected(&mut self, id: u64) {
        let Some(&(key, index)) = self.by_id.get(&id) else {
            return;
        };
        let Some((_, state)) = self.conn((key, index)) else {
            return;
        };
        let state = state.clone();
        if state.connects.load(Ordering::Relaxed) > 1 {
            add(&self.s.counters.reconnects, 1);
        }
        let lanes: Vec<usize> = (0..self.lane_at.len())
            .filter(|&l| self.lane_at[l] == Some((key, index)))
            .collect();
        let ok = self.resubscribe((key, index), &lanes);
        if index == 0 && key.1.is_none() && self.mode() == Mode::Sharded {
            self.send_service(key);
        }
        if ok {
            state.ready.store(true, Ordering::Release);
            self.s.active.wake();
        }
    }

    /// Resubscribes `lanes` on connection `at`: channels that had been sent
    /// get a gap event first, then the commands go out grouped by lane
    /// (partition) through shardcore's planner, or split by channel over
    /// the resubscribe workers when configured so (for comparison).
    pub(crate) fn resubscribe(&mut self, at: (GroupKey, usize), lanes: &[usize]) -> bool {
        let s = self.s.clone();
        let workers = s.queues.len().max(1);
        let server = self.node_numbers.get(&at.0 .0).copied().unwrap_or(0);
        let mut groups: Vec<(u32, Vec<Box<[u8]>>)> = Vec::with_capacity(lanes.len());
        let (mut gap_channels, mut channels) = (0u64, 0usize);
        for &lane in lanes {
            if let Some(f) = s.lane_lost.get(lane) {
                f.store(false, Ordering::Release);
            }
            let Some(mut l) = s.registry.lane(lane) else {
                continue;
            };
            let gaps = l.resend_all(workers);
            let names: Vec<Box<[u8]>> = l.map.keys().cloned().collect();
            drop(l);
            for (q, g) in s.queues.iter().zip(gaps) {
                if !g.is_empty() {
                    gap_channels += g.len() as u64;
                    add(&s.counters.gaps, 1);
                    q.push_gap(server, g);
                }
            }
            channels += names.len();
            groups.push((lane as u32, names));
        }
        add(&s.counters.gap_channels, gap_channels);
        let (sub_cmd, _, kind) = self.commands();
        let batches = plan_batches(
            &groups,
            s.config.split,
            s.config.resubscribe_workers,
            s.config.batch,
        );
        let mut ok = true;
        let mut sent = 0u64;
        for (lane, batch) in &batches {
            self.encode(sub_cmd, batch);
            sent += 1;
            let k = ReplyKind::Subscribe {
                kind,
                confirmations: batch.len() as u32,
            };
            if !self.submit(at, k, *lane as usize, Some(channel_list(batch))) {
                ok = false;
                break;
            }
        }
        add(&s.counters.subscribe_commands, sent);
        log::info!(
            "cluster: {} lanes ({channels} channels, {gap_channels} as a gap) on {} in {sent} commands",
            lanes.len(),
            at.0 .0
        );
        ok
    }

    /// The server refused a subscribe command of one lane's `names` (every
    /// channel of it). One channel alone is marked refused, reported to its
    /// worker ([`Event::Refused`](crate::pubsub::Event::Refused)) and to
    /// `wait_active`; a larger command is split in two halves, each sent
    /// again on the same connection, so the refused channels end up alone
    /// in about 2·log2(batch) commands while the others get through.
    /// Channels confirmed, unsubscribed or moved since are left alone.
    fn refused(&mut self, r: Refusal) {
        let s = self.s.clone();
        let waiting: Vec<&[u8]> = r
            .names
            .iter()
            .filter(|n| s.registry.awaits_confirmation(r.lane, n))
            .collect();
        if r.names.len() == 1 {
            if let Some(&name) = waiting.first() {
                s.refusals
                    .refuse(&s.refusal_targets(), r.lane, name, &r.message);
            }
            return;
        }
        let still_here = self.lane_at.get(r.lane).copied().flatten() == Some(r.at);
        let ready = self
            .conn(r.at)
            .is_some_and(|(_, c)| c.ready.load(Ordering::Acquire));
        if waiting.is_empty() || !still_here || !ready {
            return; // a resubscribe elsewhere resends them anyway
        }
        let (sub_cmd, _, kind) = self.commands();
        for half in halves(&waiting) {
            self.encode(sub_cmd, half);
            add(&s.counters.subscribe_commands, 1);
            let k = ReplyKind::Subscribe {
                kind,
                confirmations: half.len() as u32,
            };
            if !self.submit(r.at, k, r.lane, Some(channel_list(half))) {
                return;
            }
        }
    }

    /// A publish the server redirected or refused for now.
    fn retry(&mut self, r: Retry) {
        let Retry {
            msg,
            error,
            message,
        } = r;
        let mut msg = *msg;
        let cfg = &self.s.config;
        let ask = matches!(error, topology::ClusterError::Ask { .. });
        match error {
            topology::ClusterError::Moved { slot, addr }
            | topology::ClusterError::Ask { slot, addr } => {
                msg.redirects += 1;
                if msg.redirects > cfg.max_redirects {
                    let n = msg.redirects - 1;
                    return msg.fail(&self.s, format!("{n} redirects, last: {message}"));
                }
                let Some(addr) = addr.and_then(|a| crate::cluster::topo::resolve(&a)) else {
                    return msg.fail(
                        &self.s,
                        format!("redirect without a usable address: {message}"),
                    );
                };
                let engine = match self.publish_engine(addr) {
                    Ok(e) => e,
                    Err(e) => return msg.fail(&self.s, format!("{message}; cannot connect: {e}")),
                };
                if !ask {
                    self.route_slot(slot, addr);
                    // A rebuild soon, counted as MOVED (it takes over a
                    // degraded-mode retry already scheduled).
                    let at = Instant::now() + Duration::from_millis(10);
                    let t = self.next_rebuild.map_or(at, |(t, _)| t.min(at));
                    self.next_rebuild = Some((t, Trigger::Moved));
                }
                publish::send(&self.s, msg, Some(engine), ask);
            }
            topology::ClusterError::TryAgain | topology::ClusterError::ClusterDown => {
                msg.retries += 1;
                if msg.first.get_or_now().elapsed() >= cfg.retry_window {
                    let n = msg.retries;
                    return msg.fail(&self.s, format!("still failing after {n} tries: {message}"));
                }
                // A refresh within the degraded-mode delay (coalesced, so a
                // burst of refusals costs one).
                self.schedule_retry();
                let exp = msg.retries.min(6);
                let delay = Duration::from_millis(10u64 << exp).min(Duration::from_millis(500));
                self.delayed.push((Instant::now() + delay, Box::new(msg)));
            }
        }
    }

    /// Held publishes: opens gates past their timeout, sends what a
    /// reachable owner can take (oldest first), fails what was held too long.
    fn service_hold(&mut self, now: Instant) {
        let s = self.s.clone();
        let hold_on = !s.config.publish_hold.is_zero();
        for slot in s.hold.releasable() {
            // Bounded: publishes keep joining while a batch is written.
            for _ in 0..64 {
                let engine = s.routes.read().engine_of(slot);
                let engine = engine.filter(|e| !hold_on || e.is_connection_up(0, 0));
                let Some(engine) = engine else {
                    if !hold_on {
                        // A gate opened on a slot with no owner and no hold:
                        // the no-owner retry path.
                        while let Some(batch) = s.hold.take(slot) {
                            for m in batch {
                                let retry = Retry {
                                    msg: Box::new(m),
                                    error: topology::ClusterError::ClusterDown,
                                    message: "no known owner for the slot".into(),
                                };
                                self.retry(retry);
                            }
                        }
                    }
                    break;
                };
                let Some(batch) = s.hold.take(slot) else {
                    break;
                };
                for m in batch {
                    publish::submit(&s, m, &engine, false);
                }
            }
        }
        if hold_on {
            for m in s.hold.expired(now, s.config.publish_hold) {
                add(&s.cluster.hold_expired, 1);
                let (slot, held) = (
                    m.slot,
                    m.held_at
                        .get()
                        .map_or(Duration::ZERO, |t| now.saturating_duration_since(t)),
                );
                m.finish(&s, Err(Error::OwnerUnreachable { slot, held }));
            }
        }
    }

    /// Restored when every lane with channels is on a ready connection and
    /// every wanted channel is confirmed.
    fn check_restored(&mut self) {
        let Some(since) = self.change_at else { return };
        // At most every 10 ms: the scan reads every wanted channel.
        let now = Instant::now();
        if self
            .last_restore_check
            .is_some_and(|t| now.duration_since(t) < Duration::from_millis(10))
        {
            return;
        }
        self.last_restore_check = Some(now);
        let lane_conn = self.s.lane_conn.read();
        for (lane, conn) in lane_conn.iter().enumerate() {
            let Some(l) = self.s.registry.lane(lane) else {
                continue;
            };
            if l.map.is_empty() {
                continue;
            }
            if !conn
                .as_ref()
                .is_some_and(|c| c.ready.load(Ordering::Acquire))
            {
                return;
            }
            if l.map
                .values()
                .any(|f| *f & WANT != 0 && *f & crate::pubsub::registry::ACTIVE == 0)
            {
                return;
            }
        }
        drop(lane_conn);
        let us = since.elapsed().as_micros() as u64;
        let c = &self.s.cluster;
        c.restore_last_us.store(us, Ordering::Relaxed);
        c.restore_max_us.fetch_max(us, Ordering::Relaxed);
        add(&c.restores, 1);
        self.change_at = None;
        log::info!("cluster: delivery restored {us} us after the change was noticed");
    }

    /// Lanes owned by a node, in classic mode: all of them.
    pub(crate) fn mode(&self) -> Mode {
        self.s.config.mode
    }
}
