//! The publish side's sans-IO decisions (`shardsub-control`'s
//! [`control::Gates`], [`control::RetryPolicy`], [`control::Hold`] and
//! [`control::Routes`]) under operations read from fuzz bytes
//! (`publish_side`). The same bytes are read three times: as gate and
//! retry operations ([`check_gates`]), as hold operations
//! ([`check_hold`]), and as maps and `MOVED`s ([`check_routes`]).
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
use std::collections::BTreeMap;

use control::{Due, GateCommand, Gates, Held, Hold, Offer, Refused, RetryPolicy, Time};

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

/// Both readings of `data`; panics on a broken invariant.
pub fn check(data: &[u8]) {
    check_gates(data);
    check_hold(data);
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

/// A held publish in the hold checks.
#[derive(Debug)]
struct Msg {
    seq: u64,
    slot: u16,
    cost: usize,
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
        self.cost
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

/// Where each publish is, as the hold's caller sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// Inside the hold.
    Held,
    /// With the caller (sent).
    Out,
    /// In the hold, waiting for its retry.
    Waiting,
    /// Finished.
    Gone,
}

/// Hold operations. Input: a header of 3 bytes (the hold's bound in
/// publishes, 0 to 15; in bytes, × 8; its time limit, × 10 ms, 0 for no
/// hold), then operations of 3 bytes: a kind, a pick (a slot of 4, or a
/// publish out of the hold) and a time step (× 1 ms): a new publish
/// offered or held, a refusal for now (the retry policy's), a retry due
/// with its owner up or down, a probe's outcome, a gate closed or opened,
/// a release of a slot, the expiry.
///
/// Invariants: no panic; every publish is in exactly one place (held,
/// with the caller, finished) and the hold's size is the sum of what it
/// holds, never above its bounds; a release is in publish order, and the
/// first release of a slot held for an unreachable owner is one publish,
/// a probe, with the slot parked until its outcome; nothing comes out of a
/// gated or parked slot; expiry gives only publishes held the limit or
/// longer, and after it `next_deadline` lies after now.
pub fn check_hold(data: &[u8]) {
    let mut input = Input::new(data);
    let max_messages = usize::from(input.u8() % 16);
    let max_bytes = usize::from(input.u8()) * 8;
    let limit = Duration::from_millis(u64::from(input.u8()) * 10);
    let policy = RetryPolicy::new(3, WINDOW);
    let mut hold: Hold<Msg> = Hold::new(max_messages, max_bytes, limit);
    let mut place: BTreeMap<u64, (Place, u16, usize)> = BTreeMap::new();
    let mut out: Vec<Msg> = Vec::new();
    let mut gated: BTreeMap<u16, u64> = BTreeMap::new();
    let mut unreachable: BTreeMap<u16, bool> = BTreeMap::new();
    let (mut now, mut seq, mut token) = (Time::ZERO, 0u64, 0u64);
    let mut settle = |place: &mut BTreeMap<u64, (Place, u16, usize)>, m: &Msg, p: Place| {
        if let Some(e) = place.get_mut(&m.seq) {
            e.0 = p;
        }
    };
    while !input.is_empty() {
        let kind = input.u8();
        let pick = usize::from(input.u8());
        now = now + Duration::from_millis(u64::from(input.u8()));
        let slot = (pick % 4) as u16;
        match kind % 10 {
            0 | 1 => {
                seq += 1;
                let m = Msg {
                    seq,
                    slot,
                    cost: 1 + pick % 40,
                    since: None,
                    probe: false,
                    refusals: 0,
                    first: None,
                    redirects: 0,
                };
                place.insert(seq, (Place::Held, slot, m.cost));
                let offer = if kind % 10 == 0 {
                    hold.offer(now, m)
                } else {
                    unreachable.insert(slot, true);
                    hold.hold(now, m).0
                };
                offered(&mut place, &mut out, (seq, offer), &mut settle);
            }
            2 => {
                if let Some(i) = (!out.is_empty()).then(|| pick % out.len()) {
                    let m = out.swap_remove(i);
                    let (was_probe, s) = (m.probe, m.seq);
                    let parked_before = hold.is_parked(m.slot);
                    match hold.refused(now, m, &policy) {
                        Refused::GiveUp(m, _) => {
                            if m.probe {
                                hold.unpark(m.slot);
                            }
                            settle(&mut place, &m, Place::Gone);
                        }
                        Refused::Later { at, parked } => {
                            assert_eq!(parked, !limit.is_zero());
                            assert!(at > now);
                            if parked {
                                assert!(hold.is_parked(slot_of(&place, s)));
                            }
                            if let Some(e) = place.get_mut(&s) {
                                e.0 = Place::Waiting;
                            }
                        }
                        Refused::Held(offer, _) => {
                            assert!(parked_before && !was_probe);
                            offered(&mut place, &mut out, (s, offer), &mut settle);
                        }
                    }
                }
            }
            3 | 4 => {
                // The retries due now, as their refusals said.
                for (m, parked) in hold.take_due(now) {
                    let s = m.seq;
                    assert_eq!(place.get(&s).map(|p| p.0), Some(Place::Waiting));
                    settle(&mut place, &m, Place::Out);
                    match hold.due(now, m, parked, kind % 10 == 3) {
                        Due::Probe(m) => {
                            assert!(m.probe && parked);
                            out.push(m);
                        }
                        Due::Held(offer, _) => {
                            offered(&mut place, &mut out, (s, offer), &mut settle)
                        }
                        Due::Route(m) => out.push(m),
                    }
                }
            }
            5 => {
                // An outcome: the publish finishes (a probe unparks).
                if let Some(i) = (!out.is_empty()).then(|| pick % out.len()) {
                    let m = out.swap_remove(i);
                    if m.probe {
                        hold.unpark(m.slot);
                    }
                    settle(&mut place, &m, Place::Gone);
                }
            }
            6 => {
                token += 1;
                hold.gate(slot, token);
                gated.insert(slot, token);
            }
            7 => {
                if let Some(t) = gated.remove(&slot) {
                    hold.open(t);
                }
            }
            8 => {
                let shut = gated.contains_key(&slot) || hold.is_parked(slot);
                let first = unreachable.remove(&slot).unwrap_or(false);
                if let Some(batch) = hold.take(slot) {
                    assert!(!shut, "slot {slot} released while gated or parked");
                    assert!(batch.windows(2).all(|w| w[0].seq < w[1].seq));
                    if first && batch.iter().any(|m| m.probe) {
                        assert_eq!(batch.len(), 1, "a probe goes alone");
                        assert!(hold.is_parked(slot), "its slot waits for it");
                    }
                    for m in batch {
                        assert_eq!(m.slot, slot);
                        settle(&mut place, &m, Place::Out);
                        out.push(m);
                    }
                } else if first {
                    unreachable.insert(slot, true);
                }
            }
            _ => {
                let gone = hold.expired(now);
                for m in &gone {
                    let since = m.held_since().expect("a held publish has its time");
                    assert!(now.since(since) >= limit && !limit.is_zero());
                    settle(&mut place, m, Place::Gone);
                }
                // Nothing left to expire: only a retry can be due.
                if let Some(t) = hold.next_deadline() {
                    assert!(
                        t > now || hold.waiting() > 0,
                        "next_deadline {t} not after {now}"
                    );
                }
            }
        }
        // Every publish in one place; the hold's size adds up.
        let (messages, bytes) = hold.size();
        let held: Vec<_> = place.values().filter(|p| p.0 == Place::Held).collect();
        assert_eq!(messages, held.len(), "held count");
        assert_eq!(bytes, held.iter().map(|p| p.2).sum::<usize>(), "held bytes");
        assert!(messages <= max_messages && bytes <= max_bytes.max(0));
        let outside = place.values().filter(|p| p.0 == Place::Out).count();
        assert_eq!(outside, out.len(), "publishes with the caller");
        let waiting = place.values().filter(|p| p.0 == Place::Waiting).count();
        assert_eq!(waiting, hold.waiting(), "publishes waiting for a retry");
        if waiting > 0 {
            assert!(hold.next_deadline().is_some());
        }
    }
    // Shutdown: everything held or waiting comes out.
    let rest = hold.drain();
    assert_eq!(rest.len(), hold_count(&place));
    assert_eq!(hold.waiting(), 0);
    assert_eq!(hold.size(), (0, 0));
}

fn hold_count(place: &BTreeMap<u64, (Place, u16, usize)>) -> usize {
    place
        .values()
        .filter(|p| matches!(p.0, Place::Held | Place::Waiting))
        .count()
}

fn slot_of(place: &BTreeMap<u64, (Place, u16, usize)>, seq: u64) -> u16 {
    place.get(&seq).map_or(0, |p| p.1)
}

/// Books what the hold made of publish `seq` offered to it.
fn offered(
    place: &mut BTreeMap<u64, (Place, u16, usize)>,
    out: &mut Vec<Msg>,
    (seq, offer): (u64, Offer<Msg>),
    settle: &mut impl FnMut(&mut BTreeMap<u64, (Place, u16, usize)>, &Msg, Place),
) {
    match offer {
        Offer::Held(evicted) => {
            if let Some(e) = place.get_mut(&seq) {
                e.0 = Place::Held;
            }
            for m in &evicted {
                settle(place, m, Place::Gone);
            }
        }
        Offer::Full(m) => settle(place, &m, Place::Gone),
        Offer::Free(m) => {
            settle(place, &m, Place::Out);
            out.push(m);
        }
    }
}
