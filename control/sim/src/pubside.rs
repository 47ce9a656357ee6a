//! The publish side of the simulated world: the publish core
//! ([`control::publish::PublishCore`], the code the engine's control
//! thread runs) beside the subscribe [`Core`](control::Core), over the
//! same cluster and clock, driven as the control thread drives it: a
//! publish connection per primary the map names (opened when the subscribe
//! core's map changes, as `sync_routes` does), routes and gates from that
//! map, the core's `MOVED` and `TRYAGAIN`/`CLUSTERDOWN` outputs fed to the
//! subscribe core ([`Core::handle_redirect`](control::Core::handle_redirect),
//! [`Core::handle_degraded`](control::Core::handle_degraded)), service
//! channels on the subscribe connections, and the read table derived from
//! [`Output::Table`] only.
//!
//! The cluster answers `SPUBLISH` from its owner state and migrations, as
//! it answers `SSUBSCRIBE`: the slot's owner takes it (`TRYAGAIN` while it
//! imports the slot, unless `ASKING`), the old owner answers `ASK` while
//! the slot migrates, a live replica of the owner takes it and forwards it
//! on the cluster bus, any other node answers `MOVED`, and a slot with no
//! owner `CLUSTERDOWN`. Publish connections drop with their node (killed,
//! removed) and with [`Fault::DropLink`](crate::Fault::DropLink); a request
//! on the wire when its connection drops is `Lost` (it may have run), one
//! written on a connection already down `NotConnected`.
//!
//! Properties (checked as the run goes and at its end; a failure panics
//! with the seed):
//!
//! - P1: each slot's publishes reach its subscribers (taken by the owner,
//!   or forwarded on the bus by a replica that took them) in publish
//!   order, unless a gate on the slot timed out (counted) or a later
//!   publish was written while the earlier one was on the wire and then
//!   refused or not sent (counted: nothing recalls a request);
//! - P2: no publish is taken twice, a publish that ended failed was never
//!   taken unless it was `Lost`, and a `Lost` publish is never submitted
//!   again;
//! - P3: every publish ends once, within the gate's timeout, the hold's
//!   limit, the retry window and twice its longest delay, the core's look
//!   and its time on the wire; none fails for closing, or as expired
//!   before the hold's limit; the hold stays within its bounds;
//! - P4: the read table derived from the outputs equals
//!   [`PublishCore::table`] after every step, and at the end every watched
//!   slot's route is the cluster's live owner;
//! - P5: after every drained step `poll_timeout` lies after now, and a gate
//!   opens at the latest its timeout after it closed.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::vec::Vec;
use core::time::Duration;

use control::publish::{
    Failure, NodeId, Output, PublishConfig, PublishCore, Reply, Target, Verdict,
};
use control::{ConnId, RetryPolicy, Rng, ServiceNode, Time};
use topology::{ClusterError, NodeAddr};

use crate::drive::{Ev, Sim};
use crate::publish::{hold_settings, msg, Msg};
use crate::schedule::Schedule;

/// What the publish side of one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublishTotals {
    /// Publishes made.
    pub published: u64,
    /// Taken by a node (the owner, or a replica that forwarded it).
    pub taken: u64,
    /// Failed by the core (hold full, expired, window, lost, redirects).
    pub failed: u64,
    /// Held at some point.
    pub held: u64,
    /// `MOVED`, `ASK`, `TRYAGAIN` and `CLUSTERDOWN` replies to publishes.
    pub redirects: u64,
    /// `MOVED` replies among them.
    pub moved: u64,
    /// `ASK` replies among them.
    pub asked: u64,
    /// Probes sent.
    pub probes: u64,
    /// Gates closed.
    pub gates: u64,
    /// Gates that opened at their timeout.
    pub gate_timeouts: u64,
    /// Markers sent.
    pub markers: u64,
    /// Publishes reached subscribers before an earlier one of their slot
    /// that was on the wire when they were written (P1's exception).
    pub inflight_reorders: u64,
    /// Reorders on a slot whose gate timed out (P1's other exception).
    pub timeout_reorders: u64,
    /// Publishes `Lost` with their connection.
    pub lost: u64,
    /// Maps given to the publish core.
    pub maps: u64,
    /// Watched slots routed elsewhere than their live owner 10 s after
    /// the last fault (before the 30 s poll).
    pub stale_routes: u64,
    /// Those routed to a live replica of their owner (which forwards).
    pub forwarded_routes: u64,
    /// Slots published to after the world changed last, still routed to
    /// a dead node (nothing but the subscribe side's connections tells
    /// the core that a node died: see `replica_schedules_keep_every_promise`).
    pub dead_routes: u64,
}

impl core::ops::AddAssign for PublishTotals {
    fn add_assign(&mut self, o: PublishTotals) {
        self.published += o.published;
        self.taken += o.taken;
        self.failed += o.failed;
        self.held += o.held;
        self.redirects += o.redirects;
        self.moved += o.moved;
        self.asked += o.asked;
        self.probes += o.probes;
        self.gates += o.gates;
        self.gate_timeouts += o.gate_timeouts;
        self.markers += o.markers;
        self.inflight_reorders += o.inflight_reorders;
        self.timeout_reorders += o.timeout_reorders;
        self.lost += o.lost;
        self.maps += o.maps;
        self.stale_routes += o.stale_routes;
        self.forwarded_routes += o.forwarded_routes;
        self.dead_routes += o.dead_routes;
    }
}

/// One request on a publish connection.
#[derive(Clone, Debug)]
pub(crate) enum Req {
    Publish(Msg, bool),
    Barrier(u64),
    Marker(u64, u16),
}

/// What comes back for a request.
#[derive(Clone, Debug)]
pub(crate) enum Answer {
    Taken,
    Routing(ClusterError),
    /// Its connection was down: not written.
    NotSent,
    /// Its connection broke while it was on the wire.
    Lost,
    Barrier(bool),
    /// The marker was refused (or not sent).
    MarkerRefused,
    /// The marker was taken (it comes back on the service channel, or not).
    MarkerTaken,
}

/// Publish-side events.
#[derive(Debug)]
pub(crate) enum PubEv {
    Publish(u64),
    /// A request reaches its node.
    Arrive(u64),
    /// The control thread reads the answer to a request (`forced`: the
    /// connection's failure, which overrides its own answer).
    Answer(u64, Answer, bool),
    /// A replica's bus delivers what it took on its shard.
    Bus(usize, BusItem),
    /// A marker is back on a service subscription.
    MarkerBack(u64),
    /// A dropped publish connection is back (if its node lives).
    LinkUp(NodeId),
    /// Routes are looked at, before the poll.
    Converged,
    /// The service `SSUBSCRIBE` of a slot reaches a subscribe connection.
    Service(ConnId, u16),
}

#[derive(Debug)]
pub(crate) enum BusItem {
    Deliver(u16, u64),
    Marker(u64, u16),
}

/// A publish connection.
#[derive(Debug)]
struct Link {
    node: Option<usize>,
    up: bool,
    to_server: Time,
    to_core: Time,
    pending: BTreeSet<u64>,
}

#[derive(Debug)]
struct Flight {
    link: NodeId,
    req: Req,
    failed: bool,
}

/// One write of a publish: its step and time, and its answer's.
#[derive(Clone, Copy, Debug)]
struct Write {
    step: u64,
    at: Time,
    answer: Option<(u64, Time)>,
}

/// The publish side's state.
pub struct PubSide {
    /// The publish core under test.
    pub core: PublishCore<NodeAddr, Msg>,
    rng: Rng,
    /// Publishes are made in this run (sharded modes).
    pub(crate) on: bool,
    ids: BTreeMap<NodeAddr, NodeId>,
    next_id: u32,
    links: BTreeMap<NodeId, Link>,
    /// The read table, derived from the outputs only.
    table: (Vec<u16>, Vec<NodeId>),
    epoch: u64,
    pub(crate) services_due: bool,
    /// Subscribe connections whose service channel was dropped or refused.
    lost_services: BTreeSet<ConnId>,
    reqs: BTreeMap<u64, Flight>,
    next_req: u64,
    bus: BTreeMap<usize, Time>,
    /// Slots publishes go to.
    hot: Vec<u16>,
    // The ledger.
    made: BTreeMap<u64, Time>,
    /// When each slot's last publish was made.
    last_made: BTreeMap<u16, Time>,
    ended: BTreeMap<u64, (Time, bool)>,
    /// Per slot, publishes in the order subscribers got them.
    delivered: BTreeMap<u16, Vec<u64>>,
    taken: BTreeSet<u64>,
    lost: BTreeSet<u64>,
    /// Per publish, its writes: the step and time, and its answer's.
    flights: BTreeMap<u64, Vec<Write>>,
    /// Open gates: when each closed.
    gates: BTreeMap<u64, (Time, Vec<u16>)>,
    timed_out: BTreeSet<u16>,
    hold_limit: Duration,
    max_messages: usize,
    /// P3's bound, before the time on the wire.
    bound: Duration,
    pub(crate) step: u64,
    /// The core's timeout was just handled.
    looked: bool,
    /// When the world last changed: a fault, and the stale map replies,
    /// black holes and dropped links it brought, until they ended.
    pub(crate) quiet: Time,
    /// What the run did.
    pub totals: PublishTotals,
}

impl PubSide {
    /// The publish side of `s`, publishing to the slots `watched` (the
    /// partitions'); its own random stream, so the schedule's stays.
    pub(crate) fn new(s: &Schedule, watched: &[u16]) -> PubSide {
        let mut rng = Rng::new(Rng::mix(s.seed ^ 0x9b11_5eed_0005));
        let (hold_limit, max_messages, window) = hold_settings(&mut rng);
        let mut cfg = PublishConfig::new(watched.to_vec());
        cfg.retry_window = window;
        cfg.hold_limit = hold_limit;
        cfg.hold_messages = max_messages;
        cfg.hold_bytes = usize::MAX;
        let bound = cfg.gate_timeout
            + hold_limit
            + window
            + RetryPolicy::new(cfg.max_redirects, window).longest_delay() * 2
            + cfg.look;
        let mut hot: Vec<u16> = (0..1 + rng.below(3))
            .filter_map(|_| watched.get(rng.index(watched.len().max(1))).copied())
            .collect();
        hot.sort_unstable();
        hot.dedup();
        let core = PublishCore::new(cfg);
        // The engine's read table starts empty, as the core's.
        let (owners, nodes) = core.table();
        let table = (owners.to_vec(), nodes.to_vec());
        PubSide {
            core,
            on: !s.classic && !hot.is_empty(),
            ids: BTreeMap::new(),
            next_id: 0,
            links: BTreeMap::new(),
            table,
            epoch: 0,
            services_due: false,
            lost_services: BTreeSet::new(),
            reqs: BTreeMap::new(),
            next_req: 0,
            bus: BTreeMap::new(),
            hot,
            made: BTreeMap::new(),
            last_made: BTreeMap::new(),
            ended: BTreeMap::new(),
            delivered: BTreeMap::new(),
            taken: BTreeSet::new(),
            lost: BTreeSet::new(),
            flights: BTreeMap::new(),
            gates: BTreeMap::new(),
            timed_out: BTreeSet::new(),
            hold_limit,
            max_messages,
            bound,
            step: 0,
            looked: false,
            quiet: Time::ZERO,
            totals: PublishTotals::default(),
            rng,
        }
    }

    /// When routes are looked at: 10 s after the last fault `last`,
    /// before the 30 s poll.
    pub(crate) fn converged_at(last: Time) -> Time {
        last + Duration::from_secs(10)
    }

    /// Publish times: about one every 80 ms from the start to 1.5 s after
    /// the last fault.
    pub(crate) fn times(&mut self, last: Time) -> Vec<Time> {
        if !self.on {
            return Vec::new();
        }
        let span = last.as_millis() + 1500;
        let n = 5 + span / 80;
        let mut t: Vec<Time> = (0..n)
            .map(|_| Time::ZERO + Duration::from_micros(self.rng.below(span * 1000)))
            .collect();
        t.sort_unstable();
        t
    }
}

impl Sim {
    fn pfail(&self, what: &str) -> ! {
        self.check.fail(&format!("publish: {what}"))
    }

    /// A one-way delay on a publish connection or the bus (the publish
    /// side's own stream).
    fn pdelay(&mut self) -> Duration {
        let r = &mut self.publ.rng;
        if r.chance(3) {
            Duration::from_millis(20 + r.below(280))
        } else {
            Duration::from_micros(50 + r.below(1950))
        }
    }

    /// The publish connection to `addr`, opened on first use (as the
    /// driver's `publish_engine`).
    fn open_link(&mut self, addr: &NodeAddr) -> NodeId {
        if let Some(&id) = self.publ.ids.get(addr) {
            return id;
        }
        self.publ.next_id += 1;
        let id = NodeId(self.publ.next_id);
        let node = self.cluster.node_at(addr);
        let up = node.is_some_and(|n| self.cluster.nodes[n].alive);
        self.publ.ids.insert(addr.clone(), id);
        self.publ.links.insert(
            id,
            Link {
                node,
                up,
                to_server: Time::ZERO,
                to_core: Time::ZERO,
                pending: BTreeSet::new(),
            },
        );
        self.publ.core.handle_node(id, addr.clone());
        id
    }

    fn addr_of(&self, id: NodeId) -> Option<NodeAddr> {
        self.publ
            .ids
            .iter()
            .find(|(_, &i)| i == id)
            .map(|(a, _)| a.clone())
    }

    /// Publish connections to `node` go down (`back`: up again then, if
    /// it still lives); what is on their wire is failed once noticed.
    pub(crate) fn links_down(&mut self, node: usize, back: Option<Time>) {
        let ids: Vec<NodeId> = (self.publ.links.iter())
            .filter(|(_, l)| l.node == Some(node) && l.up)
            .map(|(i, _)| *i)
            .collect();
        for id in ids {
            let Some(l) = self.publ.links.get_mut(&id) else {
                continue;
            };
            l.up = false;
            let pending = core::mem::take(&mut l.pending);
            for r in pending {
                let Some(f) = self.publ.reqs.get_mut(&r) else {
                    continue;
                };
                f.failed = true;
                let answer = match f.req {
                    Req::Publish(..) => Answer::Lost,
                    Req::Barrier(_) => Answer::Barrier(false),
                    Req::Marker(..) => Answer::MarkerRefused,
                };
                let detect = Duration::from_micros(self.publ.rng.range(10, 500));
                self.push(self.now + detect, Ev::Pub(PubEv::Answer(r, answer, true)));
            }
            if let Some(t) = back {
                self.push(t, Ev::Pub(PubEv::LinkUp(id)));
            }
        }
    }

    /// Writes `req` on `id`'s connection.
    fn write(&mut self, id: NodeId, req: Req) {
        let Some(l) = self.publ.links.get(&id) else {
            self.pfail(&format!("{req:?} on {id:?}, retired"));
        };
        let (up, node) = (l.up, l.node);
        self.publ.next_req += 1;
        let r = self.publ.next_req;
        self.publ.reqs.insert(
            r,
            Flight {
                link: id,
                req,
                failed: !up,
            },
        );
        if !up {
            let detect = Duration::from_micros(self.publ.rng.range(10, 500));
            let answer = match self.publ.reqs[&r].req {
                Req::Publish(..) => Answer::NotSent,
                Req::Barrier(_) => Answer::Barrier(false),
                Req::Marker(..) => Answer::MarkerRefused,
            };
            self.push(self.now + detect, Ev::Pub(PubEv::Answer(r, answer, true)));
            return;
        }
        let d = self.pdelay();
        let hole = node.map_or(Time::ZERO, |n| self.cluster.nodes[n].hole_until);
        let Some(l) = self.publ.links.get_mut(&id) else {
            return;
        };
        let at = (self.now + d).max(l.to_server).max(hole);
        l.to_server = at;
        l.pending.insert(r);
        self.push(at, Ev::Pub(PubEv::Arrive(r)));
    }

    /// Sends publish `m` to `id` (`asking` first).
    fn submit(&mut self, id: NodeId, m: Msg, asking: bool) {
        if self.publ.lost.contains(&m.seq) {
            self.pfail(&format!("{} submitted again after it was lost", m.seq));
        }
        if let Some(e) = self.publ.ended.get(&m.seq) {
            self.pfail(&format!("{} submitted after it ended {e:?}", m.seq));
        }
        let step = self.publ.step;
        let now = self.now;
        self.publ.flights.entry(m.seq).or_default().push(Write {
            step,
            at: now,
            answer: None,
        });
        if m.probe {
            self.publ.totals.probes += 1;
        }
        if self.trace {
            std::eprintln!(
                "{} > publish {} to {id:?} (probe {}, asking {asking})",
                self.now,
                m.seq,
                m.probe
            );
        }
        self.write(id, Req::Publish(m, asking));
    }

    /// Publish `seq` ends now (`taken`, or failed).
    fn end(&mut self, seq: u64, taken: bool) {
        if let Some(e) = self.publ.ended.get(&seq) {
            self.pfail(&format!("{seq} ended twice ({e:?}, now taken {taken})"));
        }
        // P3: within its bound, plus its time on the wire.
        let made = self.publ.made.get(&seq).copied().unwrap_or(Time::ZERO);
        let wire: Duration = (self.publ.flights.get(&seq).into_iter().flatten())
            .map(|f| f.answer.map_or(self.now, |a| a.1).since(f.at))
            .sum();
        let spent = self.now.since(made);
        if spent > self.publ.bound + wire + Duration::from_millis(1) {
            self.pfail(&format!(
                "{seq} made at {made} ended at {} ({wire:?} on the wire, bound {:?})",
                self.now, self.publ.bound
            ));
        }
        self.publ.ended.insert(seq, (self.now, taken));
        if !taken {
            self.publ.totals.failed += 1;
        }
    }

    /// A publish is made.
    fn publish(&mut self, seq: u64) {
        let i = self.publ.rng.index(self.publ.hot.len());
        let slot = self.publ.hot[i];
        self.publ.made.insert(seq, self.now);
        self.publ.last_made.insert(slot, self.now);
        self.publ.totals.published += 1;
        let m = msg(seq, slot);
        // The fast path: the read table's owner, while nothing is held.
        let owner = (self.publ.table.0.get(usize::from(slot)))
            .and_then(|&i| self.publ.table.1.get(usize::from(i)).copied());
        if let Some(id) = owner.filter(|_| !self.publ.core.holds_any()) {
            return self.submit(id, m, false);
        }
        let v = self.publ.core.handle_publish(self.now, m);
        self.verdict(v);
    }

    /// Carries out what the core made of a message.
    fn verdict(&mut self, v: Verdict<Msg>) {
        if self.trace {
            std::eprintln!("{} > verdict {v:?}", self.now);
        }
        match v {
            Verdict::Owner(m) => {
                let owner = (self.publ.table.0.get(usize::from(m.slot)))
                    .and_then(|&i| self.publ.table.1.get(usize::from(i)).copied());
                match owner {
                    Some(id) => self.submit(id, m, false),
                    None => self.pfail(&format!("{} to an owner with none", m.seq)),
                }
            }
            Verdict::Send { node, msg, asking } => self.submit(node, msg, asking),
            Verdict::Done(m) => self.end(m.seq, true),
            Verdict::Held { evicted, .. } => {
                self.publ.totals.held += 1;
                for m in evicted {
                    self.end(m.seq, false);
                }
            }
            Verdict::Waiting { .. } => {}
            Verdict::Fail { msg, why } => self.failed(msg.seq, why),
        }
    }

    /// The core fails publish `seq`: never for closing (the sim does not
    /// close), and past the hold only after its limit.
    fn failed(&mut self, seq: u64, why: Failure) {
        let early = match why {
            Failure::Shutdown => true,
            Failure::Expired { held } => held < self.publ.hold_limit,
            _ => false,
        };
        if early {
            self.pfail(&format!("{seq} failed with {why:?}"));
        }
        self.end(seq, false);
    }

    /// Carries out the publish core's outputs, in order, and checks the
    /// derived table and the timer; then the map and service channels,
    /// as the driver's `sync`.
    pub(crate) fn pub_drain(&mut self) {
        if !self.publ.on {
            return;
        }
        self.sync_routes();
        let mut carried = false;
        while let Some(o) = self.publ.core.poll_output() {
            carried = true;
            self.output(o);
        }
        // P4: the derived table is the core's (compared after every step
        // that carried anything out: a route changes only with an input
        // that has outputs, and 16,384 slots a step would dominate the
        // sweep).
        let (owners, nodes) = self.publ.core.table();
        if carried && (self.publ.table.0 != owners || self.publ.table.1 != nodes) {
            self.pfail("the derived read table differs from the core's");
        }
        let held = self.publ.core.stats().held_messages;
        if held > self.publ.max_messages {
            self.pfail(&format!(
                "{held} held, more than {}",
                self.publ.max_messages
            ));
        }
        // After the core's timeout its next one lies later (after an
        // input it may be due at once: the control thread is woken).
        let looked = core::mem::take(&mut self.publ.looked);
        if let Some(t) = self
            .publ
            .core
            .poll_timeout()
            .filter(|&t| looked && t <= self.now)
        {
            self.pfail(&format!("poll_timeout {t} not after {}", self.now));
        }
    }

    /// A new map in the subscribe core: connections to its primaries, then
    /// routes (and gates) from it; service channels when due.
    fn sync_routes(&mut self) {
        let epoch = self.core.map_epoch();
        let changed = epoch != self.publ.epoch;
        if changed {
            self.publ.epoch = epoch;
            self.publ.totals.maps += 1;
            let ids = &self.publ.ids;
            let new: Vec<NodeAddr> = (self.core.map().shards().iter())
                .filter_map(|sh| sh.primary.addr.as_ref())
                .filter(|a| !ids.contains_key(*a))
                .cloned()
                .collect();
            for a in new {
                self.open_link(&a);
            }
            let map = self.core.map();
            let ids = &self.publ.ids;
            let plan = (self.publ.core).plan_map(map, |sh| {
                sh.primary.addr.as_ref().and_then(|a| ids.get(a)).copied()
            });
            self.publ.core.apply_map(self.now, plan);
        }
        if changed || core::mem::take(&mut self.publ.services_due) {
            let core = &self.core;
            let lost = &self.publ.lost_services;
            let nodes: Vec<ServiceNode<NodeAddr>> = (core.layout().nodes().iter())
                .map(|n| {
                    let conn = core.node_conn(&n.key, 0);
                    ServiceNode {
                        node: n.key.addr.clone(),
                        conn,
                        up: conn.is_some_and(|c| core.is_conn_up(c)),
                        lost: conn.is_some_and(|c| lost.contains(&c)),
                    }
                })
                .collect();
            (self.publ.core).handle_services(core.map(), |n| n.addr.clone(), &nodes, changed);
        }
    }

    fn output(&mut self, o: Output<Msg>) {
        if self.trace {
            std::eprintln!("{} > output {o:?}", self.now);
        }
        match o {
            Output::Submit { node, msg, asking } => self.submit(node, msg, asking),
            Output::Fail { msg, why } => self.failed(msg.seq, why),
            Output::Table(change) => {
                let (owners, nodes) = self.publ.core.table();
                let t = &mut self.publ.table;
                match change {
                    control::publish::TableChange::All => {
                        t.0 = owners.to_vec();
                        t.1 = nodes.to_vec();
                    }
                    control::publish::TableChange::Slot(s) => {
                        t.1.extend_from_slice(nodes.get(t.1.len()..).unwrap_or(&[]));
                        if t.0.len() < owners.len() {
                            t.0.resize(owners.len(), control::NO_ROUTE);
                        }
                        if let (Some(o), Some(&i)) =
                            (t.0.get_mut(usize::from(s)), owners.get(usize::from(s)))
                        {
                            *o = i;
                        }
                    }
                }
            }
            Output::GateClosed {
                token,
                slots,
                from,
                to,
            } => {
                if self.trace {
                    let f = self.addr_of(from);
                    let t = to.and_then(|t| self.addr_of(t));
                    std::eprintln!(
                        "{} > gate {token} closed {f:?} -> {t:?} {slots:?}",
                        self.now
                    );
                }
                self.publ.totals.gates += 1;
                self.publ.gates.insert(token, (self.now, slots));
            }
            Output::Barrier { token, node } => self.write(node, Req::Barrier(token)),
            Output::Marker {
                token,
                node,
                service_slot,
            } => {
                self.publ.totals.markers += 1;
                if self.trace {
                    std::eprintln!("{} > gate {token} marker to slot {service_slot}", self.now);
                }
                self.write(node, Req::Marker(token, service_slot));
            }
            Output::GateOpened { token, timed_out } => {
                let Some((closed, slots)) = self.publ.gates.remove(&token) else {
                    self.pfail(&format!("gate {token} opened, never closed or twice"));
                };
                // P5: at the latest at its timeout.
                let limit = self.publ.core.config().gate_timeout;
                if self.now.since(closed) > limit {
                    self.pfail(&format!(
                        "gate {token} closed at {closed}, opened at {}",
                        self.now
                    ));
                }
                if self.trace {
                    std::eprintln!("{} > gate {token} opened (timed out {timed_out})", self.now);
                }
                if timed_out {
                    self.publ.totals.gate_timeouts += 1;
                    self.publ.timed_out.extend(slots);
                }
            }
            Output::Retire { node } => {
                // Closed: a later connection to the address is a new node.
                self.publ.ids.retain(|_, i| *i != node);
                self.retire_link(node);
            }
            Output::SendService { conn, slot } => {
                self.publ.lost_services.remove(&conn);
                let n = self.conn_node.get(&conn).copied();
                self.send_conn(n, conn, Ev::Pub(PubEv::Service(conn, slot)));
            }
            Output::Redirected { slot, node } => {
                if let Some(addr) = self.addr_of(node) {
                    self.core.handle_redirect(self.now, slot, addr);
                }
            }
            Output::RefreshSoon => self.core.handle_degraded(self.now),
        }
    }

    /// The engine of a retired node closes: what is on its wire fails.
    fn retire_link(&mut self, id: NodeId) {
        let Some(l) = self.publ.links.get_mut(&id) else {
            return;
        };
        let pending = core::mem::take(&mut l.pending);
        l.up = false;
        for r in pending {
            if let Some(f) = self.publ.reqs.get_mut(&r) {
                f.failed = true;
                let answer = match f.req {
                    Req::Publish(..) => Answer::Lost,
                    Req::Barrier(_) => Answer::Barrier(false),
                    Req::Marker(..) => Answer::MarkerRefused,
                };
                self.push(self.now, Ev::Pub(PubEv::Answer(r, answer, true)));
            }
        }
        self.publ.links.remove(&id);
    }

    /// One publish-side event.
    pub(crate) fn pub_event(&mut self, ev: PubEv) {
        self.publ.step += 1;
        match ev {
            PubEv::Publish(seq) => self.publish(seq),
            PubEv::Arrive(r) => self.arrive(r),
            PubEv::Answer(r, answer, forced) => self.answer(r, answer, forced),
            PubEv::Bus(from, item) => {
                if !self.cluster.nodes[from].alive {
                    return; // died with it
                }
                match item {
                    BusItem::Deliver(slot, seq) => self.deliver(slot, seq),
                    BusItem::Marker(token, slot) => self.marker_taken(token, slot),
                }
            }
            PubEv::MarkerBack(token) => self.publ.core.handle_marker(self.now, token),
            PubEv::Converged => self.converged(),
            PubEv::LinkUp(id) => {
                let alive = |n: usize| self.cluster.nodes[n].alive;
                if let Some(l) = self.publ.links.get_mut(&id) {
                    l.up = l.node.is_some_and(alive);
                }
            }
            PubEv::Service(conn, slot) => {
                let Some(node) = self.cluster.conns.get(&conn).map(|c| c.node) else {
                    return; // closed: the reconnect sends it again
                };
                let owner = self.cluster.owner(slot);
                if owner.is_some_and(|o| self.cluster.serves(node, o)) {
                    if let Some(c) = self.cluster.conns.get_mut(&conn) {
                        c.service = Some(slot);
                    }
                } else {
                    self.send_core(
                        Some(node),
                        Some(conn),
                        crate::drive::Input::ServiceLost(conn),
                    );
                }
            }
        }
    }

    /// The driver hears that the service channel on `conn` is gone.
    pub(crate) fn service_lost(&mut self, conn: ConnId) {
        if !self.publ.on {
            return;
        }
        self.publ.lost_services.insert(conn);
        self.publ.services_due = true;
        self.core.handle_slot_lost(self.now);
    }

    /// Subscribers of `slot` get publish `seq`.
    fn deliver(&mut self, slot: u16, seq: u64) {
        self.publ.delivered.entry(slot).or_default().push(seq);
    }

    /// A marker for the service channel of `slot` was taken on its shard:
    /// it comes back if our service channel is subscribed there.
    fn marker_taken(&mut self, token: u64, slot: u16) {
        let Some(owner) = self.cluster.owner(slot) else {
            return;
        };
        let on = (self.cluster.conns.values())
            .find(|c| c.service == Some(slot) && self.cluster.serves(c.node, owner))
            .map(|c| c.node);
        if let Some(node) = on {
            let at = self.now + self.pdelay();
            let hole = self.cluster.nodes[node].hole_until;
            self.push(at.max(hole), Ev::Pub(PubEv::MarkerBack(token)));
        }
    }

    /// Node `node` takes `item` for the shard of primary `owner`: the
    /// owner delivers it at once, a replica forwards it on the cluster
    /// bus; either way after what the node forwarded before (its bus to
    /// the shard is one ordered link).
    fn shard_takes(&mut self, node: usize, owner: usize, item: BusItem) {
        let last = self.publ.bus.get(&node).copied().unwrap_or(Time::ZERO);
        if node == owner && last <= self.now {
            match item {
                BusItem::Deliver(slot, seq) => self.deliver(slot, seq),
                BusItem::Marker(token, slot) => self.marker_taken(token, slot),
            }
            return;
        }
        let d = if node == owner {
            Duration::ZERO
        } else {
            self.pdelay()
        };
        let at = last.max(self.now + d);
        self.publ.bus.insert(node, at);
        self.push(at, Ev::Pub(PubEv::Bus(node, item)));
    }

    /// A request reaches its node.
    fn arrive(&mut self, r: u64) {
        let Some(f) = self.publ.reqs.get(&r) else {
            return;
        };
        if f.failed {
            return;
        }
        let (id, req) = (f.link, f.req.clone());
        let Some(node) = self.publ.links.get(&id).and_then(|l| l.node) else {
            return;
        };
        if !self.cluster.nodes[node].alive {
            self.pfail(&format!("request {r} reached node {node}, dead"));
        }
        let answer = match req {
            Req::Barrier(_) => Answer::Barrier(true),
            Req::Marker(token, slot) => match self.cluster.owner(slot) {
                Some(o) if self.cluster.serves(node, o) => {
                    self.shard_takes(node, o, BusItem::Marker(token, slot));
                    Answer::MarkerTaken
                }
                _ => Answer::MarkerRefused,
            },
            Req::Publish(m, asking) => {
                let slot = m.slot;
                let owner = self.cluster.owner(slot);
                let moving = (self.migrating.get(&slot))
                    .filter(|m| m.1 > self.now)
                    .map(|m| m.0);
                let addr = |o: usize| Some(self.cluster.nodes[o].addr.clone());
                match (owner, moving) {
                    (Some(o), Some(from)) if from == node => Answer::Routing(ClusterError::Ask {
                        slot,
                        addr: addr(o),
                    }),
                    (Some(o), Some(_)) if o == node && !asking => {
                        Answer::Routing(ClusterError::TryAgain)
                    }
                    (Some(o), _) if self.cluster.serves(node, o) => {
                        if !self.publ.taken.insert(m.seq) {
                            self.pfail(&format!("{} taken twice", m.seq));
                        }
                        self.publ.totals.taken += 1;
                        self.shard_takes(node, o, BusItem::Deliver(slot, m.seq));
                        Answer::Taken
                    }
                    (Some(o), _) => Answer::Routing(ClusterError::Moved {
                        slot,
                        addr: addr(o),
                    }),
                    (None, _) => Answer::Routing(ClusterError::ClusterDown),
                }
            }
        };
        let d = self.pdelay();
        let hole = self.cluster.nodes[node].hole_until;
        let Some(l) = self.publ.links.get_mut(&id) else {
            return;
        };
        let at = (self.now + d).max(l.to_core).max(hole);
        l.to_core = at;
        self.push(at, Ev::Pub(PubEv::Answer(r, answer, false)));
    }

    /// The control thread reads the answer to request `r`.
    fn answer(&mut self, r: u64, answer: Answer, forced: bool) {
        let Some(f) = self.publ.reqs.get(&r) else {
            return;
        };
        if f.failed && !forced {
            return; // its connection's failure answers it
        }
        let Some(f) = self.publ.reqs.remove(&r) else {
            return;
        };
        if let Some(l) = self.publ.links.get_mut(&f.link) {
            l.pending.remove(&r);
        }
        let now = self.now;
        match f.req {
            Req::Barrier(token) => {
                let ok = matches!(answer, Answer::Barrier(true));
                if self.trace {
                    std::eprintln!("{} > gate {token} barrier answered {ok}", self.now);
                }
                self.publ.core.handle_barrier(now, token, ok);
            }
            Req::Marker(token, _) => {
                if self.trace {
                    std::eprintln!("{} > gate {token} marker {answer:?}", self.now);
                }
                if matches!(answer, Answer::MarkerRefused) {
                    self.publ.core.handle_marker(now, token);
                }
            }
            Req::Publish(m, _) => {
                let step = self.publ.step;
                if let Some(w) = self.publ.flights.get_mut(&m.seq).and_then(|f| f.last_mut()) {
                    w.answer = Some((step, now));
                }
                let reply = match answer {
                    // A plain reply ends its publish without the core.
                    Answer::Taken if !m.probe => return self.end(m.seq, true),
                    Answer::Taken => Reply::Taken,
                    Answer::NotSent => Reply::NotConnected,
                    Answer::Lost => {
                        self.publ.totals.lost += 1;
                        self.publ.lost.insert(m.seq);
                        Reply::Lost
                    }
                    Answer::Routing(e) => {
                        self.publ.totals.redirects += 1;
                        match e {
                            ClusterError::Moved { slot, addr } => {
                                self.publ.totals.moved += 1;
                                let to = self.target(addr.as_ref());
                                Reply::Moved { slot, to }
                            }
                            ClusterError::Ask { slot, addr } => {
                                self.publ.totals.asked += 1;
                                let to = self.target(addr.as_ref());
                                Reply::Ask { slot, to }
                            }
                            ClusterError::TryAgain => Reply::TryAgain,
                            ClusterError::ClusterDown => Reply::ClusterDown,
                        }
                    }
                    Answer::Barrier(_) | Answer::MarkerRefused | Answer::MarkerTaken => {
                        self.pfail("a marker's answer to a publish")
                    }
                };
                let v = self.publ.core.handle_reply(now, m, reply);
                self.verdict(v);
            }
        }
    }

    /// Where a redirect points (its node's connection opened first).
    fn target(&mut self, addr: Option<&NodeAddr>) -> Target {
        match addr {
            Some(a) => Target::Node(self.open_link(a)),
            None => Target::NoAddress,
        }
    }

    /// The core's timeout, with every connection's state first (as the
    /// driver's `publish_timeout`).
    pub(crate) fn pub_timeout(&mut self) {
        let links: Vec<(NodeId, bool)> = self.publ.links.iter().map(|(i, l)| (*i, l.up)).collect();
        for (id, up) in links {
            self.publ.core.handle_link(id, up);
        }
        self.publ.step += 1;
        self.publ.looked = true;
        self.publ.core.handle_timeout(self.now);
    }

    /// The publish side's checks at the end of the run.
    pub(crate) fn pub_final_check(&mut self) {
        if !self.publ.on {
            return;
        }
        // Every publish ended, and the core keeps nothing.
        let stats = self.publ.core.stats();
        if self.publ.ended.len() != self.publ.made.len()
            || self.publ.core.holds_any()
            || stats.waiting != 0
        {
            let open: Vec<&u64> = (self.publ.made.keys())
                .filter(|s| !self.publ.ended.contains_key(s))
                .collect();
            self.pfail(&format!(
                "{} of {} ended (open {open:?}), the core still keeps {stats:?}",
                self.publ.ended.len(),
                self.publ.made.len()
            ));
        }
        // P2: what was taken ended taken, unless it was lost.
        for seq in &self.publ.taken {
            let ok = self.publ.ended.get(seq).is_some_and(|e| e.1);
            if !ok && !self.publ.lost.contains(seq) {
                self.pfail(&format!(
                    "{seq} taken but ended {:?}",
                    self.publ.ended.get(seq)
                ));
            }
        }
        // P1: order per slot, with the hold on (with it off a refused
        // publish waits for its retry alone: nothing parks its slot).
        let delivered = core::mem::take(&mut self.publ.delivered);
        let hold_on = !self.publ.hold_limit.is_zero();
        for (slot, seqs) in delivered.iter().filter(|_| hold_on) {
            for (i, &b) in seqs.iter().enumerate() {
                for &a in seqs[i + 1..].iter().filter(|&&a| a < b) {
                    if self.publ.timed_out.contains(slot) {
                        self.publ.totals.timeout_reorders += 1;
                    } else if self.written_while_on_wire(b, a) {
                        self.publ.totals.inflight_reorders += 1;
                    } else {
                        self.pfail(&format!(
                            "slot {slot}: {a} reached subscribers after {b} \
                             ({b}'s writes {:?}; {a}'s writes {:?})",
                            self.publ.flights.get(&b),
                            self.publ.flights.get(&a)
                        ));
                    }
                }
            }
        }
        // P4: every watched slot routed to its live owner.
        if let Some(slot) = self.stale_slots().first() {
            let owner = self.cluster.owner(*slot);
            let route = self.publ.core.owner(*slot).and_then(|id| self.addr_of(id));
            self.pfail(&format!(
                "slot {slot} routed to {route:?} at the end, owned by node {owner:?}"
            ));
        }
    }

    /// P4, 10 s after the last fault (before the 30 s poll): a slot
    /// published to a second after the world last changed (a stale map
    /// reply may still be on its way until then) is routed to a node that
    /// takes its publishes: its owner, or a live replica of it, which
    /// forwards them (nothing tells a publisher that a failover demoted
    /// it).
    fn converged(&mut self) {
        let last = self.publ.quiet + Duration::from_secs(1);
        for slot in self.stale_slots() {
            self.publ.totals.stale_routes += 1;
            let owner = self.cluster.owner(slot);
            let route = self.publ.core.owner(slot).and_then(|id| self.addr_of(id));
            let node = route.as_ref().and_then(|a| self.cluster.node_at(a));
            if node
                .zip(owner)
                .is_some_and(|(n, o)| self.cluster.serves(n, o))
            {
                self.publ.totals.forwarded_routes += 1;
                continue;
            }
            if self.publ.last_made.get(&slot).is_none_or(|&t| t < last) {
                continue;
            }
            if node.is_some_and(|n| !self.cluster.nodes[n].alive) {
                self.publ.totals.dead_routes += 1;
            } else {
                self.pfail(&format!(
                    "slot {slot}, published to after {last}, routed to node {node:?} at {}, \
                     owned by node {owner:?}",
                    self.now
                ));
            }
        }
    }

    /// Watched slots the core routes elsewhere than their live owner.
    fn stale_slots(&self) -> Vec<u16> {
        let watched = &self.publ.core.config().watched;
        (watched.iter().copied())
            .filter(|&slot| {
                let owner = self
                    .cluster
                    .owner(slot)
                    .map(|o| &self.cluster.nodes[o].addr);
                let route = self.publ.core.owner(slot).and_then(|id| self.addr_of(id));
                owner != route.as_ref()
            })
            .collect()
    }

    /// Whether `b`'s last write went out while a write of `a` was on the
    /// wire (its answer not read yet).
    fn written_while_on_wire(&self, b: u64, a: u64) -> bool {
        let Some(s) = (self.publ.flights.get(&b))
            .and_then(|f| f.last())
            .map(|f| f.step)
        else {
            return false;
        };
        self.publ.flights.get(&a).is_some_and(|f| {
            f.iter()
                .any(|w| w.step <= s && w.answer.is_none_or(|t| s < t.0))
        })
    }
}
