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
//! - P3: every publish ends once, within the gate's timeout for each gate
//!   closed on its slot while it lived (at least one), the hold's limit, the retry window and twice its longest delay, the core's look
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

use control::publish::{NodeId, PublishConfig, PublishCore};
use control::{ConnId, RetryPolicy, Rng, Time};
use topology::{ClusterError, NodeAddr};

use crate::drive::Sim;
use crate::publish::{hold_settings, Msg};
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
    /// P3's bound, before the time on the wire and the gates.
    bound: Duration,
    /// Each publish's slot.
    slot_of: BTreeMap<u64, u16>,
    /// When gates closed on each slot.
    gate_closes: BTreeMap<u16, Vec<Time>>,
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
        let bound = hold_limit
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
            slot_of: BTreeMap::new(),
            gate_closes: BTreeMap::new(),
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

mod carry;
mod check;
mod server;

impl Sim {
    pub(super) fn pfail(&self, what: &str) -> ! {
        self.check.fail(&format!("publish: {what}"))
    }

    /// A one-way delay on a publish connection or the bus (the publish
    /// side's own stream).
    pub(super) fn pdelay(&mut self) -> Duration {
        let r = &mut self.publ.rng;
        if r.chance(3) {
            Duration::from_millis(20 + r.below(280))
        } else {
            Duration::from_micros(50 + r.below(1950))
        }
    }

    pub(super) fn addr_of(&self, id: NodeId) -> Option<NodeAddr> {
        self.publ
            .ids
            .iter()
            .find(|(_, &i)| i == id)
            .map(|(a, _)| a.clone())
    }
}
