//! The publish side across a route change: one slot's publishes while its
//! route moves from an old node to a new one, through [`control::Gates`],
//! with the old route's replies, the cluster bus and the markers delayed
//! at random (some past the gate's timeout), and the old node dying in
//! some runs.
//!
//! ```text
//!  publisher ─ seq 1..n ─> driver ──old link (FIFO)──> old node ─┬─ delivers (a primary)
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
//! Properties ([`run_gate`] panics with the seed when one fails):
//!
//! 1. unless the gate timed out, the slot's subscribers get its publishes
//!    in publish order (every one that was delivered);
//! 2. the gate opens exactly once, at the latest its timeout after it
//!    closed, and nothing is sent for it after it opened;
//! 3. every publish ends: delivered, or lost with the old node (sent there
//!    before it died, or forwarded on the bus when it died);
//! 4. a gate whose old route answered everything, markers included, well
//!    within the timeout did not time out.

use alloc::collections::BinaryHeap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::time::Duration;

use control::{GateCommand, Gates, Rng, Time};

/// The gate's timeout and marker interval in these runs (the engine's).
const TIMEOUT: Duration = Duration::from_secs(1);
const MARKER_EVERY: Duration = Duration::from_millis(20);

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
    RouteChange,
    /// Request `id` reaches the old node.
    OldArrive(usize),
    /// The driver hears the answer to request `id` (`ok`, or failed).
    Reply(usize, bool),
    /// What the old node forwarded reaches the new owner.
    Bus(Req),
    /// Publish reaches the new node.
    NewArrive(u32),
    /// Our marker comes back on the service subscription.
    MarkerBack(u64),
    /// The driver learns the slot's new owner (a later map).
    OwnerKnown,
    Death,
    Timer,
}

struct Model {
    rng: Rng,
    seed: u64,
    change: Change,
    now: Time,
    order: u64,
    events: BinaryHeap<Reverse<(Time, u64, Ev)>>,
    gates: Gates<()>,
    token: Option<u64>,
    closed_at: Option<Time>,
    opened_at: Option<Time>,
    /// The old node forwards what it takes from this time (a failover).
    replica_from: Option<Time>,
    dead_at: Option<Time>,
    /// The new owner's service channel is known from this time.
    service_at: Time,
    reqs: Vec<(Req, bool)>,
    old_link: Time,
    old_replies: Time,
    bus: Time,
    new_link: Time,
    held: Vec<u32>,
    delivered: Vec<u32>,
    lost: u32,
    /// When the first answer that opens the gate arrived: the barrier's
    /// failure (or its reply, with no new owner known), a marker's
    /// refusal or return.
    drained_at: Option<Time>,
    timer_at: Option<Time>,
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

    fn send_old(&mut self, req: Req) {
        let id = self.reqs.len();
        self.reqs.push((req, false));
        if self.dead_at.is_some() {
            // Its connection is down: not sent.
            let d = Duration::from_micros(self.rng.range(10, 500));
            return self.at(self.now + d, Ev::Reply(id, false));
        }
        let d = self.delay();
        self.old_link = self.old_link.max(self.now + d);
        let t = self.old_link;
        self.at(t, Ev::OldArrive(id));
    }

    fn send_new(&mut self, seq: u32) {
        let d = self.delay();
        self.new_link = self.new_link.max(self.now + d);
        let t = self.new_link;
        self.at(t, Ev::NewArrive(seq));
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

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Publish(seq) => match (self.token, self.opened_at) {
                (None, _) => self.send_old(Req::Publish(seq)),
                (Some(_), None) => {
                    self.held.push(seq);
                    self.run.held += 1;
                }
                (Some(_), Some(_)) => self.send_new(seq),
            },
            Ev::RouteChange => {
                let known = self.change != Change::Unowned;
                self.token = Some(self.gates.close(self.now, (), known));
                self.closed_at = Some(self.now);
            }
            Ev::OldArrive(id) => {
                if self.dead_at.is_some() {
                    return; // failed by the death
                }
                let req = self.reqs[id].0;
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
                if core::mem::replace(&mut self.reqs[id].1, true) {
                    return; // answered already (failed by the death)
                }
                match self.reqs[id].0 {
                    Req::Publish(_) => {}
                    Req::Barrier(token) => {
                        if !ok {
                            self.answered();
                        }
                        self.gates.handle_barrier(self.now, token, ok);
                    }
                    // Refused (`MOVED`), or not sent; taken, it comes back.
                    Req::Marker(token) if !ok => {
                        self.answered();
                        self.gates.handle_marker(token);
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
                self.gates.handle_marker(token);
            }
            Ev::NewArrive(seq) => self.deliver(seq),
            Ev::OwnerKnown => {
                if let Some(token) = self.token {
                    self.gates.handle_owner(self.now, token);
                }
            }
            Ev::Death => {
                self.dead_at = Some(self.now);
                // Everything unanswered fails once the driver notices.
                let detect = Duration::from_micros(self.rng.range(100, 5000));
                for id in 0..self.reqs.len() {
                    if !self.reqs[id].1 {
                        self.at(self.now + detect, Ev::Reply(id, false));
                    }
                }
            }
            Ev::Timer => {
                self.timer_at = None;
                if self.gates.poll_timeout().is_some_and(|t| t <= self.now) {
                    self.gates.handle_timeout(self.now);
                    if self.gates.poll_timeout().is_some_and(|t| t <= self.now) {
                        self.fail(format!("poll_timeout not after {} once handled", self.now));
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

    /// The driver carries out what the gates decided.
    fn drive(&mut self) {
        while let Some(cmd) = self.gates.poll_command() {
            if self.opened_at.is_some() {
                self.fail(format!("{cmd:?} after the gate opened"));
            }
            match cmd {
                GateCommand::Barrier { token } => self.send_old(Req::Barrier(token)),
                GateCommand::Marker { token } => {
                    if self.now >= self.service_at {
                        self.run.markers += 1;
                        self.send_old(Req::Marker(token));
                    }
                }
                GateCommand::Open { token, timed_out } => {
                    if Some(token) != self.token {
                        self.fail(format!("opened gate {token}, not {:?}", self.token));
                    }
                    self.opened_at = Some(self.now);
                    self.run.timed_out = timed_out;
                    for seq in core::mem::take(&mut self.held) {
                        self.send_new(seq);
                    }
                }
            }
        }
        let next = self.gates.poll_timeout();
        if next.is_some() && next != self.timer_at {
            self.timer_at = next;
            if let Some(t) = next {
                self.at(t.max(self.now), Ev::Timer);
            }
        }
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
    let mut m = Model {
        seed,
        change,
        now: Time::ZERO,
        order: 0,
        events: BinaryHeap::new(),
        gates: Gates::new(TIMEOUT, MARKER_EVERY),
        token: None,
        closed_at: None,
        opened_at: None,
        // With no owner known, the old node may be its replica already.
        replica_from: (change == Change::Failover || (change == Change::Unowned && rng.chance(2)))
            .then(|| Time::from_millis(change_at.as_millis().saturating_sub(rng.range(0, 40)))),
        dead_at: None,
        service_at: change_at + ms(rng.range(0, 120)),
        reqs: Vec::new(),
        old_link: Time::ZERO,
        old_replies: Time::ZERO,
        bus: Time::ZERO,
        new_link: Time::ZERO,
        held: Vec::new(),
        delivered: Vec::new(),
        lost: 0,
        drained_at: None,
        timer_at: None,
        stalls: rng.chance(20),
        run: GateRun::default(),
        rng,
    };
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
        m.drive();
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
        if missing > 0 && self.dead_at.is_none() {
            self.fail(format!("{missing} publishes never delivered"));
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
