//! The publish side's sans-IO decisions (`shardsub-control`'s publish core
//! [`control::publish::PublishCore`], and its parts [`control::Gates`],
//! [`control::RetryPolicy`] and [`control::Routes`]) under operations read
//! from fuzz bytes (`publish_side`). The same bytes are read three times:
//! as gate and retry operations ([`check_gates`]), as the core's inputs
//! ([`check_core`], which also drives [`control::Hold`]), and as maps and
//! `MOVED`s ([`check_routes`]).
//!
//! Gates and retries. Input: a header byte (the retry policy's redirect bound, 0 to 15), then
//! operations of 3 bytes: a kind, a pick (of a gate closed so far, taken
//! modulo how many there are) and a time step (× 1 ms, times 2 for the
//! kind's high bit): close a gate (forwarding or not), answer or fail its
//! barrier, return or refuse a marker, let time pass (the driver's
//! `handle_timeout` at `poll_timeout`), redirect or retry a publish.
//!
//! Invariants: no panic; every gate opens exactly once, and nothing is
//! asked for it after it opened; a gate is open at the latest its timeout
//! after it closed once the driver has looked then; after
//! `handle_timeout(now)`, `poll_timeout` lies after `now`; a forwarding
//! gate whose barrier was answered sends a marker before it opens (unless
//! it timed out); the gates hold no more than the gates closed and not
//! opened; a publish is redirected at most the bound, and its retries come
//! strictly later each time and never past its window plus the longest
//! delay.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

use control::publish::{
    Failure, NodeId, Output, PublishConfig, PublishCore, PublishStats, Reply, Target, Verdict,
};
use control::{ConnId, GateCommand, Gates, RetryPolicy, ServiceNode, Time};
use control_sim::routes::{build, node_at, node_of};

use crate::input::Input;

const TIMEOUT: Duration = Duration::from_secs(1);
const MARKER_EVERY: Duration = Duration::from_millis(20);
const WINDOW: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Seen {
    closed_at: Time,
    owner_known: bool,
    barrier_ok: bool,
    markers: u32,
    open: bool,
}

/// The three readings of `data`; panics on a broken invariant.
pub fn check(data: &[u8]) {
    check_gates(data);
    check_core(data);
    check_routes(data);
}

/// Maps and `MOVED`s through [`control::Routes`], checked against the
/// simulator's plain model after each (`control_sim::routes`: every
/// slot's route, exactly the watched slots that left a node moved, one
/// move per old and new route). Input: a header byte (1 to 32 watched
/// slots), two bytes per watched slot, then operations of 4 bytes: a
/// kind, a slot (2 bytes) and a length or node: a `MOVED` of the slot, or
/// a map (the last one, or every slot on one node) with a range from the
/// slot moved to a node or to none, and sometimes a node unreachable.
pub fn check_routes(data: &[u8]) {
    use control_sim::routes::{Model, Op};
    const SLOTS: u16 = 16384;
    let mut input = Input::new(data);
    let n = 1 + usize::from(input.u8() % 32);
    let watched: Vec<u16> = (0..n).map(|_| input.u16() % SLOTS).collect();
    let mut model = Model::new("fuzz input".into(), watched);
    while !input.is_empty() {
        let kind = input.u8();
        let slot = input.u16() % SLOTS;
        let arg = input.u8();
        let node = (kind >> 5) % 5;
        let op = match kind % 3 {
            0 => Op::Moved { slot, to: arg % 6 },
            k => {
                let mut owners = if k == 1 {
                    model.owners().to_vec()
                } else {
                    vec![Some(node); usize::from(SLOTS)]
                };
                let to = (kind & 0x10 == 0).then_some(arg % 5);
                let last = slot.saturating_add(u16::from(arg) * 64).min(SLOTS - 1);
                for o in &mut owners[usize::from(slot)..=usize::from(last)] {
                    *o = to;
                }
                let unreachable = (kind & 0x08 != 0).then_some(node);
                Op::Map {
                    owners,
                    unreachable,
                }
            }
        };
        model.apply(op, &[]);
    }
    model.finish();
}

/// The gate and retry operations `data` describes.
pub fn check_gates(data: &[u8]) {
    let mut input = Input::new(data);
    let max_redirects = u32::from(input.u8() % 16);
    let policy = RetryPolicy::new(max_redirects, WINDOW);
    let mut gates: Gates<u64> = Gates::new(TIMEOUT, MARKER_EVERY);
    let mut seen: BTreeMap<u64, Seen> = BTreeMap::new();
    let mut tokens: Vec<u64> = Vec::new();
    let mut now = Time::ZERO;
    let (mut redirects, mut tries) = (0u32, 0u32);
    let mut first_retry: Option<Time> = None;
    let mut last_retry_at = Time::ZERO;
    while !input.is_empty() {
        let kind = input.u8();
        let pick = usize::from(input.u8());
        let step = u64::from(input.u8()) * if kind & 0x80 != 0 { 2 } else { 1 };
        now = now + Duration::from_millis(step);
        let token = (!tokens.is_empty()).then(|| tokens[pick % tokens.len()]);
        match (kind & 0x7f) % 9 {
            0 | 1 => {
                let owner_known = kind % 9 == 1;
                let t = gates.close(now, pick as u64, owner_known);
                assert!(!seen.contains_key(&t), "token {t} given twice");
                assert_eq!(gates.route(t), Some(&(pick as u64)));
                seen.insert(
                    t,
                    Seen {
                        closed_at: now,
                        owner_known,
                        ..Seen::default()
                    },
                );
                tokens.push(t);
            }
            2 | 3 => {
                if let Some(t) = token {
                    let ok = kind % 9 == 2;
                    if let Some(s) = seen.get_mut(&t) {
                        s.barrier_ok |= ok && !s.open;
                    }
                    gates.handle_barrier(now, t, ok);
                }
            }
            4 => {
                if let Some(t) = token {
                    if kind & 0x40 != 0 {
                        // The driver learned the slots' new owner.
                        if let Some(s) = seen.get_mut(&t) {
                            s.owner_known |= !s.open;
                        }
                        gates.handle_owner(now, t);
                    } else {
                        gates.handle_marker(t);
                    }
                }
            }
            5 | 6 => {
                // The driver's timer.
                if gates.poll_timeout().is_some_and(|t| t <= now) {
                    gates.handle_timeout(now);
                    if let Some(t) = gates.poll_timeout() {
                        assert!(t > now, "poll_timeout {t} not after {now}");
                    }
                    drain(&mut gates, &mut seen, now);
                    // Once the driver looked, no gate is closed past its
                    // timeout.
                    for (t, s) in &seen {
                        assert!(
                            s.open || now < s.closed_at + TIMEOUT,
                            "gate {t} still closed"
                        );
                    }
                }
            }
            7 => {
                let before = redirects;
                match policy.redirect(&mut redirects) {
                    Ok(()) => assert!(redirects <= max_redirects),
                    Err(_) => {
                        assert_eq!(before, max_redirects.min(before));
                        redirects = 0; // the next publish
                    }
                }
            }
            _ => {
                // A publish is refused again no sooner than its retry.
                now = now.max(last_retry_at);
                let first = *first_retry.get_or_insert(now);
                match policy.retry(now, first, &mut tries) {
                    Ok(at) => {
                        assert!(at > now && at > last_retry_at, "retry at {at}");
                        assert!(at <= first + WINDOW + policy.longest_delay());
                        last_retry_at = at;
                    }
                    Err(_) => {
                        assert!(now.since(first) >= WINDOW);
                        (first_retry, tries, last_retry_at) = (None, 0, Time::ZERO);
                    }
                }
            }
        }
        drain(&mut gates, &mut seen, now);
    }
    // Time enough for every gate: each is open once the driver looked.
    let end = now + TIMEOUT;
    while let Some(t) = gates.poll_timeout() {
        assert!(t <= end, "a gate still waits at {t}, past {end}");
        gates.handle_timeout(t);
        drain(&mut gates, &mut seen, t);
    }
    assert!(gates.is_empty());
    for (t, s) in &seen {
        assert!(s.open, "gate {t} never opened");
    }
}

fn drain(gates: &mut Gates<u64>, seen: &mut BTreeMap<u64, Seen>, now: Time) {
    while let Some(cmd) = gates.poll_command() {
        let (GateCommand::Barrier { token }
        | GateCommand::Marker { token }
        | GateCommand::Open { token, .. }) = cmd;
        let s = seen
            .get_mut(&token)
            .expect("a command for a gate never closed");
        assert!(!s.open, "{cmd:?} after gate {token} opened");
        match cmd {
            GateCommand::Barrier { .. } => {}
            GateCommand::Marker { .. } => {
                assert!(s.owner_known && s.barrier_ok, "a marker before its barrier");
                s.markers += 1;
            }
            GateCommand::Open { timed_out, .. } => {
                s.open = true;
                if timed_out {
                    assert!(now.since(s.closed_at) >= TIMEOUT, "timed out early");
                } else if s.owner_known && s.barrier_ok {
                    assert!(s.markers > 0, "opened before a marker went out");
                }
            }
        }
    }
    let closed = seen.values().filter(|s| !s.open).count();
    assert_eq!(gates.len(), closed);
}

/// A publish in the core checks.
type Msg = control::Sample;

/// The publish core ([`control::publish::PublishCore`]) itself, fed its
/// inputs, its verdicts and outputs carried out. Input: a header of 3 bytes (the hold's bound
/// in publishes, 0 to 15; in bytes, × 8; its time limit, × 10 ms, 0 for no
/// hold), then operations of 3 bytes: a kind, a pick (a slot of 4, a node
/// of 3, a publish on a wire, a gate) and a time step (× 1 ms): a new
/// publish; a reply to one on a wire (taken, lost, not connected, not
/// written, `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, another error); a
/// link down or up; a new map (each slot on a node or on none); a barrier
/// answered or failed; a marker back or refused; the core's timeout. At the
/// end the instance closes.
///
/// Invariants: no panic; every publish is in exactly one place (with the
/// core, held or waiting for a retry; on a wire; ended), and the core
/// gives back only what it keeps and keeps what it says (its held and
/// waiting counts add up), never above the hold's bounds; a lost publish
/// is never sent again; a `MOVED` moves the slot's route to its node and
/// an `ASK` does not; a probe goes alone; nothing is sent to a node the
/// core retired, nor for a gate after it opened, and every gate opens
/// once; a publish held too long fails only past the hold's limit; after
/// `handle_timeout(now)`, `poll_timeout` lies after `now`; closing fails
/// everything the core keeps and retires every node.
pub fn check_core(data: &[u8]) {
    let mut input = Input::new(data);
    let mut cfg = PublishConfig::new((0..4).collect());
    cfg.max_redirects = 3;
    cfg.retry_window = WINDOW;
    cfg.hold_messages = usize::from(input.u8() % 16);
    cfg.hold_bytes = usize::from(input.u8()) * 8;
    cfg.hold_limit = Duration::from_millis(u64::from(input.u8()) * 10);
    cfg.gate_timeout = TIMEOUT;
    cfg.marker_every = MARKER_EVERY;
    let mut w = World::new(cfg);
    while !input.is_empty() {
        let kind = input.u8();
        let pick = usize::from(input.u8());
        w.now = w.now + Duration::from_millis(u64::from(input.u8()));
        let slot = (pick % 4) as u16;
        let node = NodeId((pick % 3) as u32);
        match kind % 12 {
            0..=2 => {
                w.seq += 1;
                let msg = Msg::new(w.seq, slot, 1 + pick % 40);
                w.place.insert(w.seq, Place::Core);
                let v = w.core.handle_publish(w.now, msg);
                w.verdict(w.seq, v);
            }
            3..=5 => {
                if w.wire.is_empty() {
                    continue;
                }
                let (at, msg) = w.wire.remove(pick % w.wire.len());
                let (seq, slot) = (msg.seq, msg.slot);
                w.place.insert(seq, Place::Core);
                let to = Target::Node(NodeId(u32::from(kind >> 6) % 3));
                let reply = match (kind >> 2) % 9 {
                    0 => Reply::Taken,
                    1 => Reply::Lost,
                    2 => Reply::NotConnected,
                    3 => Reply::NotWritten,
                    4 => Reply::Moved { slot, to },
                    5 => Reply::Ask { slot, to },
                    6 => Reply::TryAgain,
                    7 => Reply::ClusterDown,
                    _ => Reply::Other,
                };
                if let Target::Node(n) = to {
                    w.open(n); // the driver opens the redirect's node
                }
                let before = w.core.owner(slot);
                // A redirect of a publish whose slot is parked for another
                // waits behind that one.
                let behind = !msg.probe && w.core.parked(slot);
                let v = w.core.handle_reply(w.now, msg, reply);
                match (&v, reply) {
                    (Verdict::Fail { .. }, _) => {}
                    (_, Reply::Lost) => panic!("#{seq} lost on {at:?}, then {v:?}"),
                    (Verdict::Send { node, .. }, Reply::Moved { to, .. }) => {
                        assert_eq!(Target::Node(*node), to);
                        assert_eq!(w.core.owner(slot), Some(*node), "a MOVED moves the route");
                    }
                    (Verdict::Send { node, asking, .. }, Reply::Ask { to, .. }) => {
                        assert!(*asking && Target::Node(*node) == to);
                        assert_eq!(w.core.owner(slot), before, "an ASK keeps the route");
                    }
                    (Verdict::Held { .. }, Reply::Moved { to, .. }) if behind => {
                        let moved = w.core.owner(slot).map(Target::Node);
                        assert_eq!(moved, Some(to), "a MOVED moves the route");
                    }
                    (Verdict::Held { .. }, Reply::Ask { .. }) if behind => {
                        assert_eq!(w.core.owner(slot), before, "an ASK keeps the route");
                    }
                    (v, Reply::Moved { .. } | Reply::Ask { .. }) => {
                        panic!("a redirect of #{seq} gave {v:?}")
                    }
                    _ => {}
                }
                w.verdict(seq, v);
            }
            6 => {
                w.core.handle_link(node, kind & 0x80 != 0);
            }
            7 => {
                // Each watched slot on one of the three nodes or none; node
                // n also serves slot 100 + n (its service channel's).
                let mut owners = [None; 104];
                for (s, o) in owners.iter_mut().enumerate().take(4) {
                    let b = (usize::from(kind) >> (s * 2)) ^ pick;
                    *o = (b % 4 < 3).then_some((b % 4) as u8);
                }
                for n in 0..3u8 {
                    owners[100 + usize::from(n)] = Some(n);
                    w.open(NodeId(n.into()));
                }
                let map = build(&owners);
                let plan = w
                    .core
                    .plan_map(&map, |sh| node_of(None)(sh).map(|n| NodeId(n.into())));
                w.core.apply_map(w.now, plan);
                w.outputs(false);
                let nodes: Vec<ServiceNode<u8>> = (0..3u8)
                    .map(|n| ServiceNode {
                        node: n,
                        conn: Some(ConnId(n.into())),
                        up: true,
                        lost: false,
                    })
                    .collect();
                w.core.handle_services(&map, node_at, &nodes, true);
            }
            8 | 9 => {
                let Some(&token) = w.closed().get(pick % w.closed().len().max(1)) else {
                    continue;
                };
                if kind % 12 == 8 {
                    w.core.handle_barrier(w.now, token, kind & 0x80 != 0);
                } else {
                    w.core.handle_marker(w.now, token);
                }
            }
            _ => {
                w.core.handle_timeout(w.now);
                w.outputs(true);
                if let Some(t) = w.core.poll_timeout() {
                    assert!(t > w.now, "poll_timeout {t} not after {}", w.now);
                }
            }
        }
        w.outputs(false);
        w.balance();
    }
    // Closing: everything the core keeps fails, every node goes, and what
    // comes back from the wires is never sent again.
    w.core.handle_closing();
    w.closing = true;
    w.outputs(false);
    w.balance();
    assert_eq!(w.core.stats(), PublishStats::default());
    assert!(w.known.is_empty(), "nodes not retired: {:?}", w.known);
    for (_, msg) in core::mem::take(&mut w.wire) {
        let seq = msg.seq;
        w.place.insert(seq, Place::Core);
        let v = w.core.handle_reply(w.now, msg, Reply::NotWritten);
        assert!(
            matches!(v, Verdict::Fail { .. }),
            "#{seq} after closing: {v:?}"
        );
        w.verdict(seq, v);
    }
    let v = w.core.handle_publish(w.now, Msg::new(w.seq + 1, 0, 1));
    assert!(
        matches!(
            v,
            Verdict::Fail {
                why: Failure::Shutdown,
                ..
            }
        ),
        "{v:?}"
    );
    assert!(w.place.values().all(|&p| p == Place::Gone));
}

/// Where each publish is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// With the core (held, or waiting for its retry), or being given to
    /// it.
    Core,
    /// On a wire (the caller's).
    Wire,
    /// Ended: taken or failed.
    Gone,
}

/// The control thread and the nodes around one [`PublishCore`].
struct World {
    core: PublishCore<u8, Msg>,
    now: Time,
    seq: u64,
    place: BTreeMap<u64, Place>,
    /// Publishes sent and not answered, with their node.
    wire: Vec<(NodeId, Msg)>,
    /// Nodes the core has (given to it, not retired).
    known: BTreeSet<NodeId>,
    /// Gates by token: open or not.
    gates: BTreeMap<u64, bool>,
    closing: bool,
}

impl World {
    fn new(cfg: PublishConfig) -> World {
        World {
            core: PublishCore::new(cfg),
            now: Time::ZERO,
            seq: 0,
            place: BTreeMap::new(),
            wire: Vec::new(),
            known: BTreeSet::new(),
            gates: BTreeMap::new(),
            closing: false,
        }
    }

    /// The control thread opens a publish connection to `n` if the core
    /// has none.
    fn open(&mut self, n: NodeId) {
        if self.known.insert(n) {
            self.core.handle_node(n, n.0 as u8);
        }
    }

    fn closed(&self) -> Vec<u64> {
        self.gates.iter().filter(|g| !*g.1).map(|g| *g.0).collect()
    }

    /// `msg` leaves the core (it must have been there) for `to`.
    fn moved(&mut self, msg: &Msg, to: Place) {
        let p = self.place.get_mut(&msg.seq).expect("a publish never made");
        assert_eq!(
            *p,
            Place::Core,
            "#{} came out of the core from {p:?}",
            msg.seq
        );
        *p = to;
    }

    fn send(&mut self, node: NodeId, msg: Msg) {
        assert!(!self.closing, "#{} sent while closing", msg.seq);
        assert!(
            self.known.contains(&node),
            "#{} to {node:?}, retired",
            msg.seq
        );
        self.moved(&msg, Place::Wire);
        self.wire.push((node, msg));
    }

    fn end(&mut self, msg: &Msg, why: Option<Failure>) {
        if let Some(Failure::Expired { held }) = why {
            let limit = self.core.config().hold_limit;
            assert!(!limit.is_zero() && held >= limit, "expired after {held:?}");
        }
        self.moved(msg, Place::Gone);
    }

    /// Carries out what the core made of publish `seq`.
    fn verdict(&mut self, seq: u64, v: Verdict<Msg>) {
        match v {
            Verdict::Owner(msg) | Verdict::Send { msg, .. } | Verdict::Done(msg)
                if msg.seq != seq =>
            {
                panic!("#{seq} given, #{} back", msg.seq)
            }
            Verdict::Owner(msg) => {
                let node = self.core.owner(msg.slot).expect("Owner with no owner");
                self.send(node, msg);
            }
            Verdict::Send { node, msg, .. } => self.send(node, msg),
            Verdict::Done(msg) => self.end(&msg, None),
            Verdict::Held { evicted, .. } => {
                for msg in &evicted {
                    assert!(msg.seq != seq, "#{seq} held and evicted");
                    self.end(msg, None);
                }
            }
            Verdict::Waiting { at, .. } => assert!(at > self.now, "a retry at {at}"),
            Verdict::Fail { msg, why } => self.end(&msg, Some(why)),
        }
    }

    /// Carries out the core's outputs (`look`: after its timeout).
    fn outputs(&mut self, look: bool) {
        let mut probes: BTreeSet<u16> = BTreeSet::new();
        let mut sent: BTreeSet<u16> = BTreeSet::new();
        while let Some(o) = self.core.poll_output() {
            match o {
                Output::Submit { node, msg, .. } => {
                    // A probe goes alone.
                    let slot = msg.slot;
                    if look {
                        assert!(!probes.contains(&slot), "s{slot} sent after its probe");
                        assert!(
                            !msg.probe || !sent.contains(&slot),
                            "probe of s{slot} not alone"
                        );
                        if msg.probe {
                            probes.insert(slot);
                        }
                        sent.insert(slot);
                    }
                    self.send(node, msg);
                }
                Output::Fail { msg, why } => self.end(&msg, Some(why)),
                Output::GateClosed { token, .. } => {
                    assert!(
                        self.gates.insert(token, false).is_none(),
                        "gate {token} twice"
                    );
                }
                Output::Barrier { token, node } | Output::Marker { token, node, .. } => {
                    assert_eq!(
                        self.gates.get(&token),
                        Some(&false),
                        "gate {token} not closed"
                    );
                    assert!(
                        self.known.contains(&node),
                        "gate {token} on {node:?}, retired"
                    );
                }
                Output::GateOpened { token, .. } => {
                    assert_eq!(self.gates.insert(token, true), Some(false), "gate {token}");
                }
                Output::Retire { node } => {
                    assert!(self.known.remove(&node), "{node:?} retired twice");
                }
                _ => {}
            }
        }
    }

    /// The core keeps what it says, within its bounds.
    fn balance(&self) {
        let st = self.core.stats();
        let kept = self.place.values().filter(|&&p| p == Place::Core).count();
        assert_eq!(kept, st.held_messages + st.waiting, "kept {st:?}");
        let wire = self.place.values().filter(|&&p| p == Place::Wire).count();
        assert_eq!(wire, self.wire.len(), "on the wires");
        let cfg = self.core.config();
        assert!(st.held_messages <= cfg.hold_messages && st.held_bytes <= cfg.hold_bytes);
        assert!(st.held_messages == 0 || self.core.holds_any(), "{st:?}");
    }
}
