//! The control thread: the driver of the sans-IO cores (the subscribe
//! side's [`control::Core`], and the publish side's
//! [`control::publish::PublishCore`], see `carry`) and the one place in
//! `src/control_loop` that reads the clock for them.
//!
//! Each round takes the inbox (what the subscribe connections, the
//! application and the publish path reported), feeds every report to the
//! cores as an input with the current time, carries out their commands in
//! order (`commands`, `gate`), then brings the publish routes, the service
//! channels and the shared state in line with the core (`sync`), and
//! sleeps until the next report or the earliest of the cores' timeouts (the
//! subscribe core's, and the publish core's: a route gate's, a held
//! publish expiring or looked at, a refused one due again). Nothing here waits for a server: every request is sent with
//! a callback that posts its answer to the inbox.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use control::{ConnId, Core, Time};

use crate::conn::ReplyKind;
use crate::control_loop::fence::Fence;
use crate::control_loop::health::Edge;
use crate::control_loop::shared::{ConnRead, ConnState, Inbox, Shared};
use crate::engine::host::{Task, Turn};
use crate::engine::{clock, Engine};
use crate::error::Error;
use crate::front::registry::Settled;
use crate::metrics::add;

/// One subscribe connection the core opened: its engine (one connection)
/// and its shared state.
pub(crate) struct SubConn {
    pub(crate) engine: Arc<Engine>,
    /// The server as the core names it, and the address it was opened to.
    pub(crate) server: String,
    pub(crate) addr: crate::addr::ServerAddr,
    pub(crate) state: Arc<ConnState>,
    pub(crate) service_lost: Arc<std::sync::atomic::AtomicBool>,
    /// `state.rx` when the core last heard of activity on it.
    pub(crate) rx_seen: u64,
}

pub(crate) struct Driver {
    pub(crate) s: Arc<Shared>,
    pub(crate) core: Core,
    /// The core's map epoch the publish routes were last set from.
    pub(crate) routes_epoch: u64,
    /// A map arrived since the last `sync`.
    pub(crate) map_seen: bool,
    /// A subscribe connection came up or lost its service channel since
    /// the last `sync` (the service channels need a look).
    pub(crate) services_due: bool,
    /// Publish (and topology command) engines, one per primary (and node
    /// a redirect named), with their node ids in the publish core.
    pub(crate) publ: BTreeMap<SocketAddr, (control::publish::NodeId, Arc<Engine>)>,
    /// The last node id given out.
    pub(crate) next_node: u32,
    /// Engines opened to ask a seed for the topology, by fetch id.
    pub(crate) fetch_engines: HashMap<u64, Arc<Engine>>,
    /// Subscribe connections by the core's id.
    pub(crate) subs: HashMap<ConnId, SubConn>,
    /// Gap events gathered, per worker, not yet queued (see `Driver::gap`).
    pub(crate) gaps: Vec<Vec<crate::workers::Gap>>,
    /// A fence is in flight (see [`crate::front::leaving`]).
    pub(crate) fence_busy: bool,
    pub(crate) enc: Vec<u8>,
    pub(crate) name: Vec<u8>,
    /// Nodes given by name (DNS, or a Sentinel master), each looked up on
    /// a helper thread before its subscribe connections open.
    pub(crate) names: HashMap<String, Arc<crate::engine::resolve::Named>>,
    /// Subscribe connections waiting for their node's lookup, and when to
    /// look again.
    pub(crate) lookups: Vec<(ConnId, topology::NodeKey, Time)>,
    /// The first turn has run (the core's first commands and the sync).
    pub(crate) started: bool,
    /// A round of newly dirty lanes held back for more, and until when.
    pub(crate) coalescing: Option<(Inbox, Time)>,
    /// When the timers due after the last round ask for the next one.
    pub(crate) next_turn: Time,
    /// Commands routed by key the publish core routes, by its id for
    /// them (see `keyed`).
    pub(crate) cmds: HashMap<control::publish::CmdId, crate::control_loop::shared::Cmd>,
    /// The last command id given out.
    pub(crate) next_cmd: u64,
}

impl Task for Driver {
    fn turn(&mut self) -> Turn {
        match self.step() {
            Some(at) => Turn::At(clock::instant_of(at)),
            None => Turn::Done,
        }
    }

    fn slow(&mut self, thread: &str, took: Duration) {
        self.s.counters.slow_turn(
            thread,
            "a control turn (the Pending::then callbacks and wakers of the \
             publishes it completed, or the control loop's own work)",
            took,
        );
    }
}

/// A new instance's control core, started at the time now.
pub(crate) fn start_core(config: control::Config) -> Result<Core, control::ConfigError> {
    Core::new(config, clock::now())
}

impl Driver {
    /// The time now: the driver is where the control thread reads the
    /// clock.
    pub(crate) fn now(&self) -> Time {
        clock::now()
    }

    /// Feeds the core one input at the current time, then carries out the
    /// commands it gave.
    pub(crate) fn input(&mut self, f: impl FnOnce(&mut Core, Time)) {
        let now = self.now();
        f(&mut self.core, now);
        self.drain();
    }

    /// One turn of the control loop on the runtime's control thread
    /// (see [`Task`]): the inbox's reports and the due timers as one
    /// round, then the fence; never waits. `None` once the inbox said
    /// stop (every connection is closed then).
    fn step(&mut self) -> Option<Time> {
        if !self.started {
            self.started = true;
            self.drain();
            self.sync();
        }
        let now = self.now();
        // The timers this loop asked for after its last round (not asked
        // again now: a relative one, the hold's poll, would always lie
        // ahead).
        let wake = self.next_turn;
        let (inbox, leaves) = {
            let mut inbox = self.s.mail.inbox.lock();
            if let Some((held, until)) = self.coalescing.take() {
                // Subscribe calls close in time share commands: more
                // dirty lanes join the held round until the delay ends,
                // or anything else comes.
                // A timer due ends the hold too (its round runs now).
                let more_than_dirty =
                    inbox.stop || !inbox.ups.is_empty() || !inbox.downs.is_empty();
                if now < until && now < wake && !more_than_dirty {
                    self.coalescing = Some((held, until));
                    return Some(until.min(wake));
                }
                let mut held = held;
                held.dirty.append(&mut inbox.dirty);
                // Under the lock, as below.
                let leaves = self.s.leaving.requested();
                drop(inbox);
                (held, leaves)
            } else {
                if !inbox.has_work() && now < wake {
                    return Some(wake);
                }
                // Read just before the inbox is taken: every leave counted
                // here had its registry change (and dirty lane) posted
                // before, to this inbox or an earlier one, so its
                // unsubscribe is sent before this round's fence; a leave
                // counted later posts its own fence request.
                let leaves = self.s.leaving.requested();
                let taken = std::mem::take(&mut *inbox);
                drop(inbox);
                // A round of nothing but newly dirty lanes waits up to the
                // coalescing delay for more (fixed placements'
                // `subscribe_delay`; zero on a cluster).
                let delay = self.s.config.coalesce;
                if !delay.is_zero() && !taken.dirty.is_empty() && taken.quiet_but_dirty() {
                    let until = now + delay;
                    self.coalescing = Some((taken, until));
                    return Some(until.min(wake));
                }
                (taken, leaves)
            }
        };
        if inbox.stop {
            // Publishes a reply sent back for a retry: none will be read
            // again (nor any posted later: the inbox says it is closed).
            let (late, late_commands) = {
                let mut open = self.s.mail.inbox.lock();
                open.closed = true;
                let commands = std::mem::take(&mut open.commands);
                (std::mem::take(&mut open.retries), commands)
            };
            for retry in inbox.retries.into_iter().chain(late) {
                (*retry.msg).finish(&self.s, Err(Error::Shutdown));
            }
            // Commands not yet routed fail with `Shutdown` (dropped), as
            // do those kept (the core's close).
            drop(late_commands);
            self.close_all();
            return None;
        }
        if inbox.fence_done {
            self.fence_busy = false;
        }
        self.round(inbox);
        self.fence(leaves);
        let now = self.now();
        self.next_turn = self.next_wake(now);
        // Reports posted during the round rang the task again; what a
        // coalesced round left in the inbox (its ups and downs) did not.
        if self.s.mail.inbox.lock().has_work() {
            return Some(now);
        }
        Some(self.next_turn)
    }

    /// When the loop must look again without a report.
    fn next_wake(&self, now: Time) -> Time {
        let mut wake = now + Duration::from_secs(3600);
        if let Some(t) = self.core.poll_timeout() {
            wake = wake.min(t);
        }
        // Gates, held publishes expiring or looked at, refused ones due
        // again.
        if let Some(t) = self.s.hold.with(|p| p.core.poll_timeout()) {
            wake = wake.min(t);
        }
        if let Some(t) = self.lookups.iter().map(|(_, _, t)| *t).min() {
            wake = wake.min(t);
        }
        wake
    }

    /// One round: every report as an input, the due timers, then the sync.
    fn round(&mut self, inbox: Inbox) {
        self.open_looked_up();
        log::trace!(
            "control {:?}: up {:?} down {:?} read {:?} fetched {} probed {:?}",
            self.s.config.mode,
            inbox.ups,
            inbox.downs,
            inbox.read,
            inbox.fetched.len(),
            inbox.probed
        );
        let Inbox {
            ups,
            downs,
            read,
            services_lost,
            fetched,
            probed,
            dirty,
            retries,
            commands,
            command_replies,
            barriers,
            markers,
            refresh,
            moved,
            ..
        } = inbox;
        for (server, to) in moved {
            self.on_moved(&server, to);
        }
        for conn in ups {
            self.on_up(conn);
        }
        for (conn, why) in downs {
            self.on_down(conn, why);
        }
        for (conn, what) in read {
            match what {
                ConnRead::Reply(reply) => {
                    self.input(|core, now| core.handle_subscribe_reply(now, conn, reply));
                }
                ConnRead::Sunsubscribed(channel) => {
                    self.input(|core, now| core.handle_sunsubscribe(now, conn, &channel));
                }
                ConnRead::Pong => self.input(|core, now| core.handle_pong(now, conn)),
            }
        }
        for conn in services_lost {
            self.on_service_lost(conn);
        }
        for f in fetched {
            self.on_fetched(f);
        }
        for (id, reply) in probed {
            self.input(|core, now| core.handle_probe(now, id, reply));
        }
        if refresh {
            self.input(|core, now| core.handle_refresh(now));
        }
        for lane in dirty {
            self.flush_lane(lane);
        }
        for r in retries {
            self.retry(r);
        }
        for (id, r) in command_replies {
            self.command_replied(id, r);
        }
        for cmd in commands {
            self.command_posted(cmd);
        }
        // After the retries: redirected publishes that were in flight on
        // the old route go out before the gate opens.
        for (token, ok) in barriers {
            self.publish_input(false, None, |core, now| core.handle_barrier(now, token, ok));
        }
        for token in markers {
            self.publish_input(false, None, |core, now| core.handle_marker(now, token));
        }
        let now = self.now();
        if self.core.poll_timeout().is_some_and(|t| t <= now) {
            self.report_activity();
            self.core.handle_timeout(now);
            self.drain();
        }
        self.sync();
        // Gates past their time, due retries, releases (at every round
        // while anything is held: a gate that opened releases its slots
        // now), expiry; and what a publish on another thread left for
        // this thread (a refresh soon).
        let now = self.now();
        let due = self.s.hold.with(|p| {
            p.core.has_output()
                || p.core.holds_any()
                || p.core.poll_timeout().is_some_and(|t| t <= now)
        });
        if due {
            self.publish_timeout();
        }
    }

    /// Connections that delivered something since the core last heard:
    /// they are alive and need no liveness `PING`.
    fn report_activity(&mut self) {
        let now = self.now();
        for (&id, c) in self.subs.iter_mut() {
            let rx = c.state.rx.load(Ordering::Relaxed);
            if rx != c.rx_seen {
                c.rx_seen = rx;
                self.core.handle_activity(now, id);
            }
        }
    }

    fn on_up(&mut self, conn: ConnId) {
        let Some(c) = self.subs.get(&conn) else {
            return; // closed meanwhile
        };
        c.state.ready.store(true, Ordering::Release);
        let edge = self.s.health.lock().up(self.now(), conn);
        self.tell_health(edge);
        self.services_due = true;
        self.input(|core, now| core.handle_conn_up(now, conn));
        self.s.active.wake();
    }

    /// A subscribe connection went down: its engine is closed (the core
    /// opens a new connection when it sees fit), then the core hears it.
    /// `server`'s name leads to `to` now (a Sentinel failover): its
    /// subscribe connections elsewhere end as if lost, so the core opens
    /// them again (looking the name up again) and signals the gap.
    fn on_moved(&mut self, server: &str, to: crate::addr::ServerAddr) {
        // A lookup asked before the move may answer the old address.
        if let Some(named) = self.names.remove(server) {
            named.invalidate();
        }
        let stale: Vec<ConnId> = self
            .subs
            .iter()
            .filter(|(_, c)| c.server == server && c.addr != to)
            .map(|(id, _)| *id)
            .collect();
        for conn in stale {
            let why: Arc<str> = format!("{server} moved to {to}").into();
            self.on_down(conn, why);
        }
    }

    pub(crate) fn on_down(&mut self, conn: ConnId, why: Arc<str>) {
        if let Some(c) = self.subs.remove(&conn) {
            self.retire(c);
        }
        // Told before the core hears it: before any gap it causes.
        let edge = self.s.health.lock().failed(self.now(), conn, why);
        self.tell_health(edge);
        self.input(|core, now| core.handle_conn_down(now, conn));
    }

    /// Logs a server's connection edge and queues its event on the first
    /// worker.
    pub(crate) fn tell_health(&mut self, edge: Option<Edge>) {
        let Some(edge) = edge else {
            return;
        };
        if self.s.closing.load(Ordering::Acquire) {
            return;
        }
        // Gaps decided before the edge are queued before it.
        self.flush_gaps();
        let (server, addr, error) = match edge {
            Edge::Lost {
                server,
                addr,
                error,
                first,
            } => {
                if first {
                    log::warn!(
                        "degraded start: cannot reach {server} ({error}); its channels are \
                         subscribed once it answers"
                    );
                } else {
                    log::warn!(
                        "lost {server} ({error}); its channels are resubscribed once it answers"
                    );
                }
                (server, addr, Some(error))
            }
            Edge::Restored { server, addr } => {
                log::info!("{server} is back");
                (server, addr, None)
            }
        };
        if let Some(q) = self.s.queues.first() {
            q.push_server(server, addr, error);
        }
    }

    /// Starts a fence for the leaves up to `upto` when some are incomplete
    /// and none is in flight (see [`crate::front::leaving`]): a `PING` on
    /// every subscribe connection that is up, after this round's
    /// unsubscribes.
    fn fence(&mut self, upto: u64) {
        if self.fence_busy || upto <= self.s.leaving.done() {
            return;
        }
        self.fence_busy = true;
        let fence = Fence::new(upto, &self.s);
        for c in self.subs.values() {
            if !c.engine.is_connection_up(0, 0) {
                continue; // nothing more comes from it
            }
            fence.add_ping();
            let f = fence.clone();
            let _ = c.engine.submit_to_then(
                0,
                0,
                |buf| resp::encode_command(buf, [b"PING"]),
                ReplyKind::Single,
                move |_| f.ping_done(),
            );
        }
        fence.ping_done();
    }

    /// Closes a subscribe connection's engine, keeping its counts.
    pub(crate) fn retire(&mut self, c: SubConn) {
        // Its lanes move elsewhere without naming it (it is gone from
        // `subs`): from now on its stage checks every message's lane.
        c.state.lanes_lost.fetch_add(1, Ordering::Release);
        let cc = &self.s.counters.cluster;
        add(
            &cc.retired_received,
            c.state.received.load(Ordering::Relaxed),
        );
        add(&cc.retired_dropped, c.state.dropped.load(Ordering::Relaxed));
        add(
            &cc.retired_unenveloped,
            c.state.unenveloped.load(Ordering::Relaxed),
        );
        c.state.ready.store(false, Ordering::Release);
        self.close_engine(&c.engine);
    }

    /// Starts an engine's shutdown without waiting for it (this thread is
    /// shared with the other instances on the runtime); at the instance's
    /// shutdown, kept for the caller of `shutdown` to wait for.
    pub(crate) fn close_engine(&self, e: &Engine) {
        if let Some(closing) = e.close() {
            if self.s.closing.load(Ordering::Acquire) {
                self.s.engines_closing.lock().push(closing);
            }
        }
    }

    /// Sends what changed in one lane since the last look: newly wanted
    /// channels to the core as wanted, given-up ones as unwanted.
    fn flush_lane(&mut self, lane: usize) {
        let s = self.s.clone();
        if let Some(flag) = s.mail.lane_dirty.get(lane) {
            flag.store(false, Ordering::Release);
        }
        let (mut want, mut unwant, mut reactivated) = (Vec::new(), Vec::new(), Vec::new());
        {
            let Some(mut l) = s.registry.lane(lane) else {
                return;
            };
            for name in std::mem::take(&mut l.dirty) {
                match l.settle(&name, true) {
                    Settled::Subscribe => want.push(name),
                    Settled::Unsubscribe => unwant.push(name),
                    // Asked for again before its unsubscribe left: the
                    // subscription never lapsed.
                    Settled::Kept { reactivated: true } if s.active_events => {
                        reactivated.push(name)
                    }
                    Settled::Kept { .. } | Settled::Nothing => {}
                }
            }
        }
        let pattern = s.is_pattern_lane(lane);
        for name in reactivated {
            s.front.push_active(lane, &name, pattern);
        }
        let lane = lane as u32;
        if !unwant.is_empty() {
            let names = unwant.iter().map(|n| &n[..]);
            self.input(|core, now| core.handle_unwant_in(now, lane, names));
        }
        if !want.is_empty() {
            self.input(|core, now| core.handle_want_in(now, lane, want));
        }
    }

    fn close_all(&mut self) {
        for (_, c) in std::mem::take(&mut self.subs) {
            self.retire(c);
        }
        for (_, e) in std::mem::take(&mut self.fetch_engines) {
            self.close_engine(&e);
        }
        // Held publishes, refused ones waiting for their retry and
        // commands fail, every publish engine closes, and the table empties (the
        // shutdown may have been called from a thread of the runtime,
        // which does not wait for this turn).
        self.publish_input(true, None, |core, _| core.handle_closing());
    }
}
