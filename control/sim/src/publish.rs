//! The publish side with owners that go away and refuse for a while: one
//! instance's publishes to a few slots through [`control::Hold`] and
//! [`control::RetryPolicy`], as the engine's control thread drives them,
//! against nodes whose connections drop (publishes are then held, and
//! released to the owner when it is back) and that refuse publishes for
//! now for stretches of time (`TRYAGAIN`, `CLUSTERDOWN`: retried after a
//! backoff), often right after they come back. Each request is judged
//! when it reaches its node, so a pipelined batch can straddle the end of
//! a refusal: the case that reorders unless a refused publish, or the
//! first release after an unreachable owner, goes alone.
//!
//! Properties ([`run_publish`] panics with the seed when one fails):
//!
//! 1. with the hold on, each slot's publishes are taken in publish order,
//!    but for a publish written while an earlier one was on the wire and
//!    then refused or lost (its node judged them one by one, and nothing
//!    recalls a request: counted, and bounded by the sweep, see
//!    RELIABILITY.md); a publish written after a refusal or loss was known
//!    never overtakes it;
//! 2. every publish ends exactly once: taken, or failed (the hold full,
//!    held past its limit, refused past its retry window), and none is
//!    taken after it failed or taken twice;
//! 3. nothing stays held past the hold's limit (plus the driver's look
//!    every 5 ms), and the hold never holds more than its bound;
//! 4. every publish has ended when the run does.

use alloc::collections::{BTreeMap, BinaryHeap};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::time::Duration;

use control::{Due, Held, Hold, Offer, Refused, RetryPolicy, Rng, Time};

/// How often the driver looks at the hold while it holds something.
const LOOK: Duration = Duration::from_millis(5);

/// What one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublishRun {
    /// Publishes made.
    pub publishes: u32,
    /// Taken by their node.
    pub taken: u32,
    /// Failed (hold full, expired, retry window).
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

#[derive(Debug)]
struct Msg {
    seq: u64,
    slot: u16,
    since: Option<Time>,
    probe: bool,
    refusals: u32,
    first: Option<Time>,
    /// Redirects followed (the publish core counts them).
    redirects: u32,
}

impl Held for Msg {
    fn seq(&self) -> u64 {
        self.seq
    }
    fn slot(&self) -> u16 {
        self.slot
    }
    fn cost(&self) -> usize {
        16
    }
    fn held_since(&self) -> Option<Time> {
        self.since
    }
    fn mark_held(&mut self, now: Time) {
        self.since.get_or_insert(now);
    }
    fn probe(&self) -> bool {
        self.probe
    }
    fn set_probe(&mut self, on: bool) {
        self.probe = on;
    }
    fn refusals(&mut self) -> &mut u32 {
        &mut self.refusals
    }
    fn first_refused(&mut self, now: Time) -> Time {
        *self.first.get_or_insert(now)
    }
    fn redirects(&mut self) -> &mut u32 {
        &mut self.redirects
    }
}

#[derive(Debug)]
enum Ev {
    Publish(u64),
    /// A request reaches its slot's node.
    Arrive(Msg),
    /// The driver reads the answer: taken, refused for now, or lost with
    /// the connection (not run).
    Reply(Msg, Answer),
    /// A refused publish's retry is due.
    Due,
    Look,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Taken,
    Refused,
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
    hold: Hold<Msg>,
    policy: RetryPolicy,
    nodes: Vec<Node>,
    /// Per slot, the publishes taken, in the node's order.
    taken: Vec<Vec<u64>>,
    ended: BTreeMap<u64, (Time, bool)>,
    made: BTreeMap<u64, Time>,
    look_at: Option<Time>,
    hold_on: bool,
    max_messages: usize,
    window: Duration,
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
        // and its longest delay, and the links' delays.
        let made = self.made.get(&seq).copied().unwrap_or(Time::ZERO);
        let bound = self.hold.limit() + self.window + self.policy.longest_delay() * 2 + LOOK;
        if self.now.since(made) > bound + Duration::from_millis(50) {
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

    /// Writes `msg` on its slot's connection (the owner is up).
    fn submit(&mut self, msg: Msg) {
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
        // Written on a connection that dies before it arrives: lost unrun,
        // and known lost by the time a new connection is up (the engine
        // fails what was in flight on a connection before it reconnects).
        if let Some(&(a, b)) = node.down.iter().find(|&&(a, b)| now < b && arrival >= a) {
            let notice = (now.max(a) + detect).min(b);
            self.at(notice, Ev::Reply(msg, Answer::Lost));
            return;
        }
        self.at(arrival, Ev::Arrive(msg));
    }

    /// The ordinary way: behind the slot's held publishes, to an owner that
    /// is up, or held (with the hold on; else refused for now, no owner).
    fn route(&mut self, msg: Msg) {
        let msg = if self.hold.entries() > 0 {
            match self.hold.offer(self.now, msg) {
                Offer::Free(m) => m,
                offer => return self.offered(offer),
            }
        } else {
            msg
        };
        if !self.nodes[usize::from(msg.slot)].is_down(self.now) {
            return self.submit(msg);
        }
        if self.hold_on {
            let offer = self.hold.hold(self.now, msg).0;
            self.offered(offer);
        } else {
            self.refused(msg);
        }
    }

    fn offered(&mut self, offer: Offer<Msg>) {
        match offer {
            Offer::Held(evicted) => {
                self.run.held += 1;
                for m in evicted {
                    self.end(m.seq, false);
                }
            }
            Offer::Full(m) => self.end(m.seq, false),
            Offer::Free(m) => self.fail(format!("{} free where it was held", m.seq)),
        }
        let (messages, _) = self.hold.size();
        if messages > self.max_messages {
            self.fail(format!("{messages} held, more than {}", self.max_messages));
        }
        self.look();
    }

    fn refused(&mut self, msg: Msg) {
        self.run.refusals += 1;
        match self.hold.refused(self.now, msg, &self.policy) {
            Refused::GiveUp(m, _) => {
                let slot = m.slot;
                if m.probe {
                    self.hold.unpark(slot);
                }
                self.end(m.seq, false);
            }
            Refused::Later { at, .. } => self.at(at, Ev::Due),
            Refused::Held(offer, _) => self.offered(offer),
        }
    }

    /// The driver reads an answer.
    fn reply(&mut self, mut msg: Msg, answer: Answer) {
        match answer {
            Answer::Taken => {
                if msg.probe {
                    self.hold.unpark(msg.slot);
                    self.look();
                }
                self.end(msg.seq, true);
            }
            Answer::Refused => self.refused(msg),
            Answer::Lost if self.hold_on => {
                let offer = self.hold.hold(self.now, msg).0;
                self.offered(offer);
            }
            Answer::Lost => {
                if core::mem::take(&mut msg.probe) {
                    self.hold.unpark(msg.slot);
                }
                self.end(msg.seq, false);
            }
        }
    }

    /// The driver looks at the hold in `LOOK` while it holds something.
    fn look(&mut self) {
        if self.look_at.is_none() && self.hold.entries() > 0 {
            let t = self.now + LOOK;
            self.look_at = Some(t);
            self.at(t, Ev::Look);
        }
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Publish(seq) => {
                let slot = self.rng.index(self.nodes.len()) as u16;
                self.made.insert(seq, self.now);
                let msg = Msg {
                    seq,
                    slot,
                    since: None,
                    probe: false,
                    refusals: 0,
                    first: None,
                    redirects: 0,
                };
                self.route(msg);
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
                self.reply(msg, answer);
            }
            Ev::Due => {
                for (msg, parked) in self.hold.take_due(self.now) {
                    let up = !self.nodes[usize::from(msg.slot)].is_down(self.now);
                    match self.hold.due(self.now, msg, parked, up) {
                        Due::Probe(m) => self.submit(m),
                        Due::Held(offer, _) => self.offered(offer),
                        Due::Route(m) => self.route(m),
                    }
                }
            }
            Ev::Look => {
                self.look_at = None;
                self.service();
                self.look();
            }
        }
    }

    /// What the control thread does with the hold on each look.
    fn service(&mut self) {
        for slot in self.hold.releasable() {
            for _ in 0..64 {
                let up = !self.nodes[usize::from(slot)].is_down(self.now);
                if !up && self.hold_on {
                    break;
                }
                let Some(batch) = self.hold.take(slot) else {
                    break;
                };
                for m in batch {
                    if up {
                        self.submit(m);
                    } else {
                        self.refused(m); // no owner, no hold
                    }
                }
            }
        }
        for m in self.hold.expired(self.now) {
            if m.probe {
                self.fail(format!("probe {} expired in the hold", m.seq));
            }
            self.end(m.seq, false);
        }
        // 3. Nothing past its limit once looked at.
        if let Some(t) = self.hold.next_deadline() {
            if t <= self.now {
                self.fail(format!("held past the limit: due {t}, now {}", self.now));
            }
        }
    }
}

/// Runs the schedule of `seed`; panics when a property fails.
pub fn run_publish(seed: u64) -> PublishRun {
    let mut rng = Rng::new(Rng::mix(seed ^ 0x9b11));
    let slots = 1 + rng.index(3);
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
    let mut m = Model {
        seed,
        now: Time::ZERO,
        order: 0,
        events: BinaryHeap::new(),
        bodies: BTreeMap::new(),
        hold: Hold::new(max_messages, usize::MAX, limit),
        policy: RetryPolicy::new(5, window),
        nodes,
        taken: (0..slots).map(|_| Vec::new()).collect(),
        ended: BTreeMap::new(),
        made: BTreeMap::new(),
        look_at: None,
        hold_on,
        max_messages,
        window,
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
        // The control thread wakes every `LOOK` while anything is held.
        m.look();
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
        // 4. Everything ended.
        if self.ended.len() as u64 != n || self.hold.entries() != 0 {
            self.fail(format!(
                "{} of {n} ended, slots still held: {:?}",
                self.ended.len(),
                self.hold
            ));
        }
    }
}
