//! The publish side with owners that go away and refuse for a while: one
//! instance's publishes to a few slots through the publish core
//! ([`control::publish::PublishCore`], the code the engine's control
//! thread runs), against nodes whose connections drop (publishes are then
//! held, and released to the owner when it is back) and that refuse
//! publishes for now for stretches of time (`TRYAGAIN`: retried after a
//! backoff), often right after they come back. The model is the world
//! only: the nodes, their links and the clock; it feeds the core its
//! inputs (publishes, replies, link changes, its timeout at
//! `poll_timeout`) and carries out its verdicts and outputs. Each request
//! is judged when it reaches its node, so a pipelined batch can straddle
//! the end of a refusal: the case that reorders unless a refused publish,
//! or the first release after an unreachable owner, goes alone.
//!
//! Properties ([`run_publish`] panics with the seed when one fails):
//!
//! 1. with the hold on, each slot's publishes are taken in publish order,
//!    but for a publish written while an earlier one was on the wire and
//!    then refused (its node judged them one by one, and nothing recalls
//!    a request: counted, and bounded by the sweep, see RELIABILITY.md); a
//!    publish written after a refusal was known never overtakes it;
//! 2. every publish ends exactly once: taken, or failed (the hold full,
//!    held past its limit, refused past its retry window, or its
//!    connection broken while it was on the wire, after which it is never
//!    sent again), and none is taken after it failed or taken twice;
//! 3. nothing stays held past the hold's limit (plus the core's look,
//!    [`control::publish::PublishConfig::look`]), the hold never holds
//!    more than its bound, and after the core's timeout its next timeout
//!    lies later;
//! 4. every publish has ended when the run does, and the core keeps
//!    nothing.

use alloc::collections::{BTreeMap, BinaryHeap};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::time::Duration;

use control::publish::{NodeId, Output, PublishConfig, PublishCore, Reply, Verdict};
use control::{RetryPolicy, Rng, Time};

use crate::routes::{build, node_of};

/// What one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublishRun {
    /// Publishes made.
    pub publishes: u32,
    /// Taken by their node.
    pub taken: u32,
    /// Failed (hold full, expired, retry window, lost with its
    /// connection).
    pub failed: u32,
    /// Held at some point.
    pub held: u32,
    /// Refusals for now.
    pub refusals: u32,
    /// Probes sent (a refused publish again, or a release's first).
    pub probes: u32,
    /// Publishes taken before an earlier one that was refused while they
    /// were on the wire (property 1's exception).
    pub inflight_reorders: u32,
}

/// A publish as the simulator's models give it to the core.
pub(crate) type Msg = control::Sample;

/// Publish `seq` to `slot` (each costs 16 bytes against the hold).
pub(crate) fn msg(seq: u64, slot: u16) -> Msg {
    Msg::new(seq, slot, 16)
}

/// The core's timer as a control thread keeps it: one wake-up at
/// [`PublishCore::poll_timeout`], moved when that moves.
#[derive(Debug, Default)]
pub(crate) struct Timer {
    at: Option<Time>,
}

impl Timer {
    /// The wake-up to schedule after a step, if it moved.
    pub(crate) fn next<A: Clone + PartialEq>(
        &mut self,
        now: Time,
        core: &PublishCore<A, Msg>,
    ) -> Option<Time> {
        let next = core.poll_timeout();
        if next.is_none() || next == self.at {
            return None;
        }
        self.at = next;
        next.map(|t| t.max(now))
    }

    /// A wake-up fired at `now`: whether the core's timeout is due (it
    /// may be a stale one, moved earlier since).
    pub(crate) fn due<A: Clone + PartialEq>(
        &mut self,
        now: Time,
        core: &PublishCore<A, Msg>,
    ) -> bool {
        if self.at.is_some_and(|t| t <= now) {
            self.at = None;
        }
        core.poll_timeout().is_some_and(|t| t <= now)
    }
}

#[derive(Debug)]
enum Ev {
    Publish(u64),
    /// A request reaches its slot's node.
    Arrive(Msg),
    /// The control thread reads the answer.
    Reply(Msg, Answer),
    /// Node `usize`'s link goes down or comes back.
    Link(usize),
    /// The core's timeout.
    Timer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Taken,
    Refused,
    /// Its connection was down: not sent.
    NotSent,
    /// Its connection broke while it was on the wire (it did not run, but
    /// the engine cannot know).
    Lost,
}

/// A node's life: down and refusing stretches, `[from, to)`.
struct Node {
    down: Vec<(Time, Time)>,
    refusing: Vec<(Time, Time)>,
    /// Requests on the wire to it (arrival after `link`).
    link: Time,
    replies: Time,
}

impl Node {
    fn is_down(&self, t: Time) -> bool {
        self.down.iter().any(|&(a, b)| a <= t && t < b)
    }
    fn refuses(&self, t: Time) -> bool {
        self.refusing.iter().any(|&(a, b)| a <= t && t < b)
    }
}

struct Model {
    seed: u64,
    rng: Rng,
    now: Time,
    order: u64,
    events: BinaryHeap<Reverse<(Time, u64, usize)>>,
    /// Event bodies by their order number (a heap of non-`Ord` payloads).
    bodies: BTreeMap<usize, Ev>,
    core: PublishCore<u8, Msg>,
    timer: Timer,
    nodes: Vec<Node>,
    /// Per slot, the publishes taken, in the node's order.
    taken: Vec<Vec<u64>>,
    ended: BTreeMap<u64, (Time, bool)>,
    made: BTreeMap<u64, Time>,
    hold_on: bool,
    max_messages: usize,
    /// How long after it was made a publish ends at the latest.
    bound: Duration,
    /// The step at which each publish was last written to its node.
    submitted: BTreeMap<u64, u64>,
    /// Each publish's writes: the step, and the step its answer came back.
    flights: BTreeMap<u64, Vec<(u64, Option<u64>)>>,
    /// Events handled so far: the order of writes and answers (two events
    /// at one virtual time are still handled one after the other).
    step: u64,
    run: PublishRun,
}

impl Model {
    fn at(&mut self, t: Time, ev: Ev) {
        self.order += 1;
        let id = self.order as usize;
        self.bodies.insert(id, ev);
        self.events.push(Reverse((t, self.order, id)));
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "publish seed {}: {what}\n  taken {:?}",
            self.seed, self.taken
        );
    }

    fn end(&mut self, seq: u64, taken: bool) {
        if let Some((t, was)) = self.ended.get(&seq) {
            self.fail(format!(
                "publish {seq} ended twice (taken {was} at {t}, now {taken})"
            ));
        }
        // 3. Within its bounds: the hold's limit, then the retry window
        // and its longest delay, the core's look, and the links' delays.
        let made = self.made.get(&seq).copied().unwrap_or(Time::ZERO);
        if self.now.since(made) > self.bound + Duration::from_millis(50) {
            self.fail(format!(
                "publish {seq} made at {made} ended at {}",
                self.now
            ));
        }
        self.ended.insert(seq, (self.now, taken));
        if taken {
            self.run.taken += 1;
        } else {
            self.run.failed += 1;
        }
    }

    fn delay(&mut self) -> Duration {
        Duration::from_micros(self.rng.range(20, 3000))
    }

    /// Writes `msg` to `node` (slot `n`'s owner is node `n`).
    fn submit(&mut self, node: NodeId, msg: Msg) {
        if node != NodeId(u32::from(msg.slot)) {
            self.fail(format!("{} sent to {node:?}, not its slot's node", msg.seq));
        }
        if self.ended.contains_key(&msg.seq) {
            self.fail(format!("{} sent again after it ended", msg.seq));
        }
        self.submitted.insert(msg.seq, self.step);
        self.flights
            .entry(msg.seq)
            .or_default()
            .push((self.step, None));
        if msg.probe {
            self.run.probes += 1;
        }
        let d = self.delay();
        let detect = Duration::from_micros(self.rng.range(10, 500));
        let now = self.now;
        let node = &mut self.nodes[usize::from(msg.slot)];
        let arrival = node.link.max(now + d);
        node.link = arrival;
        // Its connection is down (not sent), or dies before the request
        // arrives (lost unrun, and known lost by the time a new connection
        // is up: the engine fails what was in flight on a connection
        // before it reconnects).
        if let Some(&(a, b)) = node.down.iter().find(|&&(a, b)| now < b && arrival >= a) {
            let notice = (now.max(a) + detect).min(b);
            let answer = if a <= now {
                Answer::NotSent
            } else {
                Answer::Lost
            };
            self.at(notice, Ev::Reply(msg, answer));
            return;
        }
        self.at(arrival, Ev::Arrive(msg));
    }

    /// Carries out what the core made of a publish, then its outputs.
    fn verdict(&mut self, v: Verdict<Msg>) {
        match v {
            Verdict::Owner(msg) => match self.core.owner(msg.slot) {
                Some(node) => self.submit(node, msg),
                None => self.fail(format!("{} to an owner with none", msg.seq)),
            },
            Verdict::Send { node, msg, .. } => self.submit(node, msg),
            Verdict::Done(msg) => self.end(msg.seq, true),
            Verdict::Held { evicted, .. } => {
                self.run.held += 1;
                for m in evicted {
                    self.end(m.seq, false);
                }
            }
            Verdict::Waiting { .. } => {}
            Verdict::Fail { msg, .. } => self.end(msg.seq, false),
        }
        self.outputs();
    }

    fn outputs(&mut self) {
        while let Some(o) = self.core.poll_output() {
            match o {
                Output::Submit { node, msg, .. } => self.submit(node, msg),
                Output::Fail { msg, .. } => self.end(msg.seq, false),
                // One map, no moves: nothing else is for this world.
                _ => {}
            }
        }
        // 3. The hold's bound.
        let held = self.core.stats().held_messages;
        if held > self.max_messages {
            self.fail(format!("{held} held, more than {}", self.max_messages));
        }
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Publish(seq) => {
                let slot = self.rng.index(self.nodes.len()) as u16;
                self.made.insert(seq, self.now);
                let v = self.core.handle_publish(self.now, msg(seq, slot));
                self.verdict(v);
            }
            Ev::Arrive(msg) => {
                let node = &self.nodes[usize::from(msg.slot)];
                if node.is_down(self.now) {
                    self.fail(format!("{} reached its node while it was down", msg.seq));
                }
                let answer = if node.refuses(self.now) {
                    Answer::Refused
                } else {
                    self.taken[usize::from(msg.slot)].push(msg.seq);
                    Answer::Taken
                };
                let d = self.delay();
                let node = &mut self.nodes[usize::from(msg.slot)];
                node.replies = node.replies.max(self.now + d);
                let t = node.replies;
                self.at(t, Ev::Reply(msg, answer));
            }
            Ev::Reply(msg, answer) => {
                if let Some(f) = self.flights.get_mut(&msg.seq).and_then(|f| f.last_mut()) {
                    f.1 = Some(self.step);
                }
                let reply = match answer {
                    // A plain reply ends its publish without the core.
                    Answer::Taken if !msg.probe => return self.end(msg.seq, true),
                    Answer::Taken => Reply::Taken,
                    Answer::Refused => {
                        self.run.refusals += 1;
                        Reply::TryAgain
                    }
                    Answer::NotSent => Reply::NotConnected,
                    Answer::Lost => Reply::Lost,
                };
                let v = self.core.handle_reply(self.now, msg, reply);
                self.verdict(v);
            }
            Ev::Link(node) => {
                let up = !self.nodes[node].is_down(self.now);
                self.core.handle_link(NodeId(node as u32), up);
            }
            Ev::Timer => {
                if self.timer.due(self.now, &self.core) {
                    self.core.handle_timeout(self.now);
                    self.outputs();
                    // 3. Nothing past its limit or due once looked at.
                    if let Some(t) = self.core.poll_timeout().filter(|&t| t <= self.now) {
                        self.fail(format!("poll_timeout {t} not after {}", self.now));
                    }
                }
            }
        }
    }
}

/// A run's hold and retries, drawn from `rng`: the hold's limit (zero,
/// one run in seven: off), its publish bound (now and then 2 to 7, else
/// 1,000) and the retry window.
pub(crate) fn hold_settings(rng: &mut Rng) -> (Duration, usize, Duration) {
    let hold_on = !rng.chance(15);
    let limit = if hold_on {
        Duration::from_millis(rng.range(100, 1500))
    } else {
        Duration::ZERO
    };
    let max_messages = if rng.chance(20) {
        rng.range(2, 8) as usize
    } else {
        1000
    };
    let window = Duration::from_millis(rng.range(50, 1500));
    (limit, max_messages, window)
}

/// Runs the schedule of `seed`; panics when a property fails.
pub fn run_publish(seed: u64) -> PublishRun {
    let mut rng = Rng::new(Rng::mix(seed ^ 0x9b11));
    let slots = 1 + rng.index(3);
    let (limit, max_messages, window) = hold_settings(&mut rng);
    let hold_on = !limit.is_zero();
    let n = rng.range(5, 60);
    let span = rng.range(50, 600);
    let mut nodes = Vec::new();
    for _ in 0..slots {
        let mut down = Vec::new();
        let mut refusing = Vec::new();
        for _ in 0..rng.range(0, 3) {
            let from = Time::from_millis(rng.range(0, span));
            let to = from + Duration::from_millis(rng.range(1, 400));
            down.push((from, to));
            // Often refusing for a while once back (a promotion).
            if rng.chance(60) {
                let until = to + Duration::from_micros(rng.range(100, 60_000));
                refusing.push((to, until));
            }
        }
        for _ in 0..rng.range(0, 2) {
            let from = Time::from_millis(rng.range(0, span));
            refusing.push((from, from + Duration::from_micros(rng.range(100, 200_000))));
        }
        nodes.push(Node {
            down,
            refusing,
            link: Time::ZERO,
            replies: Time::ZERO,
        });
    }
    // Slot `n` lives on node `n`, for the whole run.
    let mut cfg = PublishConfig::new((0..slots as u16).collect());
    cfg.max_redirects = 5;
    cfg.retry_window = window;
    cfg.hold_limit = limit;
    cfg.hold_messages = max_messages;
    cfg.hold_bytes = usize::MAX;
    let bound = limit + window + RetryPolicy::new(5, window).longest_delay() * 2 + cfg.look;
    let mut core = PublishCore::new(cfg);
    for node in 0..slots as u8 {
        core.handle_node(NodeId(node.into()), node);
    }
    let owners: Vec<Option<u8>> = (0..slots as u8).map(Some).collect();
    let plan = core.plan_map(&build(&owners), |sh| {
        node_of(None)(sh).map(|n| NodeId(n.into()))
    });
    core.apply_map(Time::ZERO, plan);
    core.poll_outputs().for_each(drop);
    let mut m = Model {
        seed,
        now: Time::ZERO,
        order: 0,
        events: BinaryHeap::new(),
        bodies: BTreeMap::new(),
        core,
        timer: Timer::default(),
        nodes,
        taken: (0..slots).map(|_| Vec::new()).collect(),
        ended: BTreeMap::new(),
        made: BTreeMap::new(),
        hold_on,
        max_messages,
        bound,
        submitted: BTreeMap::new(),
        flights: BTreeMap::new(),
        step: 0,
        run: PublishRun::default(),
        rng,
    };
    let mut t = Time::ZERO;
    for seq in 1..=n {
        t = t + Duration::from_micros(m.rng.range(0, span * 2000 / n));
        m.at(t, Ev::Publish(seq));
    }
    let edges: Vec<(Time, usize)> = (m.nodes.iter().enumerate())
        .flat_map(|(i, node)| node.down.iter().flat_map(move |&(a, b)| [(a, i), (b, i)]))
        .collect();
    for (t, node) in edges {
        m.at(t, Ev::Link(node));
    }
    m.run.publishes = n as u32;
    let trace = std::env::var_os("CONTROL_SIM_TRACE").is_some();
    if trace {
        for (i, node) in m.nodes.iter().enumerate() {
            std::eprintln!(
                "node {i}: down {:?} refusing {:?}",
                node.down,
                node.refusing
            );
        }
    }
    let mut steps = 0u32;
    while let Some(Reverse((t, _, id))) = m.events.pop() {
        steps += 1;
        if steps > 200_000 {
            m.fail(String::from("no end"));
        }
        let Some(ev) = m.bodies.remove(&id) else {
            continue;
        };
        m.now = t;
        m.step += 1;
        if trace {
            std::eprintln!("{t} {ev:?}");
        }
        m.step(ev);
        if let Some(t) = m.timer.next(m.now, &m.core) {
            m.at(t, Ev::Timer);
        }
    }
    m.check(n);
    m.run
}

impl Model {
    fn check(&mut self, n: u64) {
        // 1. Order per slot (with the hold on): a later publish taken
        // first was on the wire before the earlier one's refusal was known.
        if self.hold_on {
            for (slot, seqs) in self.taken.iter().enumerate() {
                for (i, &b) in seqs.iter().enumerate() {
                    for &a in seqs[i + 1..].iter().filter(|&&a| a < b) {
                        // Allowed only when `b` was written while `a` was
                        // on the wire, its refusal not yet known.
                        let sent = self.submitted.get(&b).copied();
                        let in_flight = sent.is_some_and(|s| {
                            self.flights.get(&a).is_some_and(|f| {
                                f.iter()
                                    .any(|&(w, answer)| w <= s && answer.is_none_or(|t| s < t))
                            })
                        });
                        if in_flight {
                            self.run.inflight_reorders += 1;
                        } else {
                            self.fail(format!(
                                "slot {slot}: {a} taken after {b} (sent {sent:?}; {a}'s writes {:?})",
                                self.flights.get(&a)
                            ));
                        }
                    }
                }
            }
        }
        // 2. Taken at most once, and only if it ended taken.
        let mut all: Vec<u64> = self.taken.iter().flatten().copied().collect();
        all.sort_unstable();
        if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
            self.fail(format!("{} taken twice", w[0]));
        }
        for seq in &all {
            if !self.ended.get(seq).is_some_and(|e| e.1) {
                self.fail(format!("{seq} taken but ended {:?}", self.ended.get(seq)));
            }
        }
        // 4. Everything ended, and the core keeps nothing.
        let stats = self.core.stats();
        if self.ended.len() as u64 != n || self.core.holds_any() || stats.waiting != 0 {
            self.fail(format!(
                "{} of {n} ended, the core still keeps {stats:?}",
                self.ended.len(),
            ));
        }
    }
}
