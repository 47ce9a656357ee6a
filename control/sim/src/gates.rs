//! The publish side across a route change: one slot's publishes while its
//! route moves from an old node to a new one, through the publish core's
//! route gate, with the old route's replies, the cluster bus and the
//! markers delayed at random (some past the gate's timeout), and the old
//! node dying in some runs.
//!
//! ```text
//!  publisher ─ seq 1..n ─> core ──old link (FIFO)──> old node ─┬─ delivers (a primary)
//!                            │  ^      replies (FIFO) <──────────┤
//!                            │  └── marker back (push) <─ new ───┴─ bus (FIFO, a replica)
//!                            └──new link (FIFO)──> new node ─ delivers
//! ```
//!
//! Four kinds of change: a migration (the old node stays a primary and
//! refuses the marker), a failover (the old node became the new owner's
//! replica: what it takes later reaches subscribers over the bus), the old
//! node dying, and a slot whose new owner is not known when the route
//! moves (a map read mid-change shows the slot unassigned): the driver
//! learns it later, and the old node may be its replica already (no
//! markers until the owner is known).
//!
//! The model is the world only: the nodes, their links, the bus and the
//! clock. The publish core ([`control::publish::PublishCore`], the code
//! the engine's control thread runs) gets the maps, the publishes, the
//! replies, the barrier's and markers' answers and its timeout at
//! `poll_timeout`, and its verdicts and outputs are carried out.
//!
//! Properties ([`run_gate`] panics with the seed when one fails):
//!
//! 1. unless the gate timed out, the slot's subscribers get its publishes
//!    in publish order (every one that was delivered);
//! 2. the gate opens exactly once, at the latest its timeout after it
//!    closed, and nothing is sent for it after it opened;
//! 3. every publish ends: delivered, or lost with the old node (sent there
//!    before it died, or forwarded on the bus when it died); the core
//!    fails none unless the old node died;
//! 4. a gate whose old route answered everything, markers included, well
//!    within the timeout did not time out.

use alloc::collections::{BTreeMap, BinaryHeap};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::time::Duration;

use control::publish::{NodeId, Output, PublishConfig, PublishCore, Reply, Verdict};
use control::{ConnId, Rng, ServiceNode, Time};

use crate::publish::{msg, Msg, Timer};
use crate::routes::{build, node_at, node_of};

/// The gate's timeout and marker interval in these runs (the engine's).
const TIMEOUT: Duration = Duration::from_secs(1);
const MARKER_EVERY: Duration = Duration::from_millis(20);

/// The slot whose route moves (old node 0 to new node 1), and the new
/// node's own slot (its service channel's).
const SLOT: u16 = 0;
const OLD: NodeId = NodeId(0);
const NEW: NodeId = NodeId(1);

/// How the slot's route changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The slot migrates; the old node stays a primary.
    Migration,
    /// The old node became the new owner's replica.
    Failover,
    /// The old node dies.
    Death,
    /// The new owner is not known yet; the old node may be its replica.
    Unowned,
}

/// What one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateRun {
    /// Publishes made.
    pub publishes: u32,
    /// Delivered to the slot's subscribers.
    pub delivered: u32,
    /// Lost with the old node.
    pub lost: u32,
    /// Held behind the gate.
    pub held: u32,
    /// Markers sent.
    pub markers: u32,
    /// The gate opened at its timeout.
    pub timed_out: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Req {
    Publish(u32),
    Barrier(u64),
    Marker(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Publish(u32),
    /// A new map: the slot moves (or shows no owner).
    RouteChange,
    /// Request `id` reaches the old node.
    OldArrive(usize),
    /// The control thread hears the answer to request `id` (`ok`, or
    /// failed).
    Reply(usize, bool),
    /// What the old node forwarded reaches the new owner.
    Bus(Req),
    /// Publish reaches the new node.
    NewArrive(u32),
    /// The new node's answer to a probe.
    NewReply(u32),
    /// Our marker comes back on the service subscription.
    MarkerBack(u64),
    /// A later map names the slot's new owner.
    OwnerKnown,
    /// The new owner's service channel is known.
    Services,
    Death,
    Timer,
}

/// A request to the old node: what, whether it was written (its
/// connection up), whether it was answered.
struct Sent {
    req: Req,
    written: bool,
    answered: bool,
}

struct Model {
    rng: Rng,
    seed: u64,
    change: Change,
    now: Time,
    order: u64,
    events: BinaryHeap<Reverse<(Time, u64, Ev)>>,
    core: PublishCore<u8, Msg>,
    timer: Timer,
    /// The map: each slot's owner.
    owners: [Option<u8>; 2],
    /// Publishes on a wire, by number.
    wire: BTreeMap<u32, Msg>,
    token: Option<u64>,
    closed_at: Option<Time>,
    opened_at: Option<Time>,
    /// Nodes the core let go.
    retired: Vec<NodeId>,
    /// The old node forwards what it takes from this time (a failover).
    replica_from: Option<Time>,
    dead_at: Option<Time>,
    reqs: Vec<Sent>,
    old_link: Time,
    old_replies: Time,
    bus: Time,
    new_link: Time,
    delivered: Vec<u32>,
    lost: u32,
    /// Publishes the core failed.
    failed: u32,
    /// When the first answer that opens the gate arrived: the barrier's
    /// failure (or its reply, with no new owner known), a marker's
    /// refusal or return.
    drained_at: Option<Time>,
    /// Some delays in this run are stalls past the gate's timeout.
    stalls: bool,
    run: GateRun,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Model {
    fn at(&mut self, t: Time, ev: Ev) {
        self.order += 1;
        self.events.push(Reverse((t, self.order, ev)));
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "gate seed {} ({:?}): {what}\n  delivered {:?}",
            self.seed, self.change, self.delivered
        );
    }

    /// A one-way delay: short, sometimes a stall past the gate's timeout.
    fn delay(&mut self) -> Duration {
        if self.stalls && self.rng.chance(4) {
            ms(self.rng.range(200, 1500))
        } else {
            Duration::from_micros(self.rng.range(50, 8000))
        }
    }

    /// The map as `owners` stands, given to the core.
    fn map(&mut self) {
        let plan = self.core.plan_map(&build(&self.owners), |sh| {
            node_of(None)(sh).map(|n| NodeId(n.into()))
        });
        self.core.apply_map(self.now, plan);
    }

    fn send(&mut self, node: NodeId, msg: Msg) {
        if self.retired.contains(&node) {
            self.fail(format!("{} sent to {node:?}, retired", msg.seq));
        }
        let seq = msg.seq as u32;
        let probe = msg.probe;
        self.wire.insert(seq, msg);
        if node == OLD {
            return self.send_old(Req::Publish(seq));
        }
        let d = self.delay();
        self.new_link = self.new_link.max(self.now + d);
        let t = self.new_link;
        self.at(t, Ev::NewArrive(seq));
        if probe {
            let d = self.delay();
            self.at(t + d, Ev::NewReply(seq));
        }
    }

    fn send_old(&mut self, req: Req) {
        let id = self.reqs.len();
        let written = self.dead_at.is_none();
        self.reqs.push(Sent {
            req,
            written,
            answered: false,
        });
        if !written {
            // Its connection is down: not sent.
            let d = Duration::from_micros(self.rng.range(10, 500));
            return self.at(self.now + d, Ev::Reply(id, false));
        }
        let d = self.delay();
        self.old_link = self.old_link.max(self.now + d);
        let t = self.old_link;
        self.at(t, Ev::OldArrive(id));
    }

    fn reply(&mut self, id: usize, ok: bool) {
        let d = self.delay();
        self.old_replies = self.old_replies.max(self.now + d);
        let t = self.old_replies;
        self.at(t, Ev::Reply(id, ok));
    }

    fn deliver(&mut self, seq: u32) {
        self.delivered.push(seq);
    }

    /// Carries out what the core made of a publish, then its outputs.
    fn verdict(&mut self, v: Verdict<Msg>) {
        match v {
            Verdict::Owner(msg) => match self.core.owner(msg.slot) {
                Some(node) => self.send(node, msg),
                None => self.fail(format!("{} to an owner with none", msg.seq)),
            },
            Verdict::Send { node, msg, .. } => self.send(node, msg),
            Verdict::Held { .. } => self.run.held += 1,
            Verdict::Done(_) | Verdict::Waiting { .. } => {}
            Verdict::Fail { .. } => self.failed += 1,
        }
        self.outputs();
    }

    /// Carries out the core's outputs, in order.
    fn outputs(&mut self) {
        while let Some(o) = self.core.poll_output() {
            if self.opened_at.is_some()
                && matches!(o, Output::Barrier { .. } | Output::Marker { .. })
            {
                self.fail(format!("{o:?} after the gate opened"));
            }
            match o {
                Output::Submit { node, msg, .. } => self.send(node, msg),
                Output::Fail { .. } => self.failed += 1,
                Output::GateClosed { token, from, .. } => {
                    if self.token.is_some() || from != OLD {
                        self.fail(format!(
                            "gate {token} from {from:?}, after {:?}",
                            self.token
                        ));
                    }
                    self.token = Some(token);
                    self.closed_at = Some(self.now);
                }
                Output::Barrier { token, node } => {
                    if node != OLD {
                        self.fail(format!("barrier {token} on {node:?}"));
                    }
                    self.send_old(Req::Barrier(token));
                }
                Output::Marker { token, node, .. } => {
                    if node != OLD {
                        self.fail(format!("marker {token} on {node:?}"));
                    }
                    self.run.markers += 1;
                    self.send_old(Req::Marker(token));
                }
                Output::GateOpened { token, timed_out } => {
                    if Some(token) != self.token || self.opened_at.is_some() {
                        self.fail(format!("opened gate {token}, not {:?}", self.token));
                    }
                    self.opened_at = Some(self.now);
                    self.run.timed_out = timed_out;
                }
                Output::Retire { node } => self.retired.push(node),
                _ => {}
            }
        }
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Publish(seq) => {
                let v = self.core.handle_publish(self.now, msg(seq.into(), SLOT));
                self.verdict(v);
            }
            Ev::RouteChange => {
                self.owners[usize::from(SLOT)] = (self.change != Change::Unowned).then_some(1);
                self.map();
                self.outputs();
                if self.token.is_none() {
                    self.fail(String::from("the route moved and no gate closed"));
                }
            }
            Ev::OldArrive(id) => {
                if self.dead_at.is_some() {
                    return; // failed by the death
                }
                let req = self.reqs[id].req;
                let replica = self.replica_from.is_some_and(|t| self.now >= t);
                match req {
                    Req::Publish(_) if replica => self.forward(req),
                    Req::Publish(seq) => self.deliver(seq),
                    Req::Marker(_) if replica => self.forward(req),
                    Req::Marker(_) => return self.reply(id, false), // MOVED
                    Req::Barrier(_) => {}
                }
                self.reply(id, true);
            }
            Ev::Reply(id, ok) => {
                let sent = &mut self.reqs[id];
                if core::mem::replace(&mut sent.answered, true) {
                    return; // answered already (failed by the death)
                }
                let written = sent.written;
                match sent.req {
                    // A plain reply ends its publish without the core.
                    Req::Publish(seq) if ok => {
                        self.wire.remove(&seq);
                    }
                    Req::Publish(seq) => {
                        let Some(msg) = self.wire.remove(&seq) else {
                            self.fail(format!("{seq} answered twice"));
                        };
                        // Written: it may have run (never sent again).
                        let reply = if written {
                            Reply::Lost
                        } else {
                            Reply::NotConnected
                        };
                        let v = self.core.handle_reply(self.now, msg, reply);
                        self.verdict(v);
                    }
                    Req::Barrier(token) => {
                        if !ok {
                            self.answered();
                        }
                        self.core.handle_barrier(self.now, token, ok);
                        self.outputs();
                    }
                    // Refused (`MOVED`), or not sent; taken, it comes back.
                    Req::Marker(token) if !ok => {
                        self.answered();
                        self.core.handle_marker(self.now, token);
                        self.outputs();
                    }
                    Req::Marker(_) => {}
                }
            }
            Ev::Bus(req) => {
                if self.dead_at.is_some() {
                    self.lost += u32::from(matches!(req, Req::Publish(_)));
                    return;
                }
                match req {
                    Req::Publish(seq) => self.deliver(seq),
                    Req::Marker(token) => {
                        let d = self.delay();
                        self.at(self.now + d, Ev::MarkerBack(token));
                    }
                    Req::Barrier(_) => {}
                }
            }
            Ev::MarkerBack(token) => {
                self.answered();
                self.core.handle_marker(self.now, token);
                self.outputs();
            }
            Ev::NewArrive(seq) => {
                self.deliver(seq);
                // A plain reply ends it without the core; a probe's waits.
                if self.wire.get(&seq).is_some_and(|m| !m.probe) {
                    self.wire.remove(&seq);
                }
            }
            Ev::NewReply(seq) => {
                let Some(msg) = self.wire.remove(&seq) else {
                    self.fail(format!("probe {seq} answered twice"));
                };
                let v = self.core.handle_reply(self.now, msg, Reply::Taken);
                self.verdict(v);
            }
            Ev::OwnerKnown => {
                self.owners[usize::from(SLOT)] = Some(1);
                self.map();
                self.outputs();
            }
            Ev::Services => {
                let new = ServiceNode {
                    node: 1,
                    conn: Some(ConnId(1)),
                    up: true,
                    lost: false,
                };
                let map = build(&self.owners);
                self.core.handle_services(&map, node_at, &[new], true);
                self.outputs();
            }
            Ev::Death => {
                self.dead_at = Some(self.now);
                self.core.handle_link(OLD, false);
                // Everything unanswered fails once the control thread
                // notices.
                let detect = Duration::from_micros(self.rng.range(100, 5000));
                for id in 0..self.reqs.len() {
                    if !self.reqs[id].answered {
                        self.at(self.now + detect, Ev::Reply(id, false));
                    }
                }
            }
            Ev::Timer => {
                if self.timer.due(self.now, &self.core) {
                    self.core.handle_timeout(self.now);
                    self.outputs();
                    if let Some(t) = self.core.poll_timeout().filter(|&t| t <= self.now) {
                        self.fail(format!(
                            "poll_timeout {t} not after {} once handled",
                            self.now
                        ));
                    }
                }
            }
        }
    }

    /// The first answer that lets the gate open arrived now (after it
    /// closed).
    fn answered(&mut self) {
        if self.closed_at.is_some() && self.drained_at.is_none() {
            self.drained_at = Some(self.now);
        }
    }

    fn forward(&mut self, req: Req) {
        let d = self.delay();
        self.bus = self.bus.max(self.now + d);
        let t = self.bus;
        self.at(t, Ev::Bus(req));
    }
}

/// Runs the schedule of `seed`; panics when a property fails.
pub fn run_gate(seed: u64) -> GateRun {
    let mut rng = Rng::new(Rng::mix(seed ^ 0x6a7e));
    let change = [
        Change::Migration,
        Change::Failover,
        Change::Death,
        Change::Unowned,
    ][rng.index(4)];
    let change_at = Time::from_millis(rng.range(5, 150));
    let mut cfg = PublishConfig::new(alloc::vec![SLOT]);
    cfg.gate_timeout = TIMEOUT;
    cfg.marker_every = MARKER_EVERY;
    let mut core = PublishCore::new(cfg);
    core.handle_node(OLD, 0);
    core.handle_node(NEW, 1);
    let mut m = Model {
        seed,
        change,
        now: Time::ZERO,
        order: 0,
        events: BinaryHeap::new(),
        core,
        timer: Timer::default(),
        owners: [Some(0), Some(1)],
        wire: BTreeMap::new(),
        token: None,
        closed_at: None,
        opened_at: None,
        retired: Vec::new(),
        // With no owner known, the old node may be its replica already.
        replica_from: (change == Change::Failover || (change == Change::Unowned && rng.chance(2)))
            .then(|| Time::from_millis(change_at.as_millis().saturating_sub(rng.range(0, 40)))),
        dead_at: None,
        reqs: Vec::new(),
        old_link: Time::ZERO,
        old_replies: Time::ZERO,
        bus: Time::ZERO,
        new_link: Time::ZERO,
        delivered: Vec::new(),
        lost: 0,
        failed: 0,
        drained_at: None,
        stalls: rng.chance(20),
        run: GateRun::default(),
        rng,
    };
    m.map();
    m.core.poll_outputs().for_each(drop);
    let service_at = change_at + ms(m.rng.range(0, 120));
    m.at(service_at, Ev::Services);
    let n = m.rng.range(3, 40) as u32;
    let mut t = Time::ZERO;
    for seq in 1..=n {
        t = t + Duration::from_micros(m.rng.range(0, 12_000));
        m.at(t, Ev::Publish(seq));
    }
    m.at(change_at, Ev::RouteChange);
    if change == Change::Unowned {
        let known = change_at + ms(m.rng.range(0, 300));
        m.at(known, Ev::OwnerKnown);
    }
    if change == Change::Death || m.rng.chance(10) {
        let death = change_at.as_millis() + m.rng.range(0, 400);
        m.at(Time::from_millis(death.saturating_sub(20)), Ev::Death);
    }
    m.run.publishes = n;
    let mut steps = 0u32;
    while let Some(Reverse((t, _, ev))) = m.events.pop() {
        steps += 1;
        if steps > 100_000 {
            m.fail(String::from("no end"));
        }
        m.now = t;
        m.step(ev);
        if let Some(t) = m.timer.next(m.now, &m.core) {
            m.at(t, Ev::Timer);
        }
    }
    m.check(n);
    m.run
}

impl Model {
    fn check(&mut self, n: u32) {
        let (Some(closed), Some(opened)) = (self.closed_at, self.opened_at) else {
            self.fail(format!(
                "the gate closed at {:?}, opened at {:?}",
                self.closed_at, self.opened_at
            ));
        };
        // 2. Bounded in time.
        if opened > closed + TIMEOUT {
            self.fail(format!("closed at {closed}, opened at {opened}"));
        }
        // 1. Order, unless timed out.
        if !self.run.timed_out {
            if let Some(w) = self.delivered.windows(2).find(|w| w[0] >= w[1]) {
                self.fail(format!("{} delivered after {}", w[1], w[0]));
            }
        }
        // 3. Every publish ends.
        let mut seen = self.delivered.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != self.delivered.len() {
            self.fail(String::from("a publish delivered twice"));
        }
        let missing = n as usize - seen.len();
        if (missing > 0 || self.failed > 0) && self.dead_at.is_none() {
            self.fail(format!(
                "{missing} publishes never delivered, {} failed",
                self.failed
            ));
        }
        if self.core.holds_any() || !self.wire.is_empty() {
            self.fail(format!(
                "the core still keeps {:?}, {} on a wire",
                self.core.stats(),
                self.wire.len()
            ));
        }
        // 4. Opened by the first answer that allows it, and by the
        // timeout only when none came before it.
        let answered_in_time = self.drained_at.filter(|&t| t < closed + TIMEOUT);
        match (self.run.timed_out, answered_in_time) {
            (true, Some(t)) => self.fail(format!("timed out although answered at {t}")),
            (false, Some(t)) if t != opened => {
                self.fail(format!("answered at {t}, opened at {opened}"))
            }
            (false, None) => self.fail(format!("opened at {opened} with no answer")),
            _ => {}
        }
        self.run.delivered = self.delivered.len() as u32;
        self.run.lost = self.lost + missing as u32;
    }
}
