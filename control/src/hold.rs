//! The publish hold, decided without I/O or a clock: publishes kept back
//! per slot, in publish order, while the slot's owner is unreachable
//! (bounded in time and in memory), while the slot's route moves (a gate,
//! see [`Gates`](crate::Gates)), or behind a refused publish waiting for
//! its retry (parked).
//!
//! While a slot has an entry, every publish to it joins the entry
//! ([`Hold::offer`]); the driver releases an entry to the slot's owner
//! ([`Hold::take`]), oldest publish first, once nothing holds it (no gate,
//! nothing parked) and the owner's connection is up, and the entry goes
//! once empty. A slot held because its owner could not be reached leaves
//! behind a probe: its oldest publish alone, the slot parked until that
//! one's outcome, then the rest (an owner just promoted or reconnected
//! could refuse one publish and take the next). A full hold keeps the
//! oldest publishes by publish order.
//!
//! The driver shares it between threads behind a lock: every call is
//! short, and nothing here allocates per publish unless the hold is full.
//!
//! ```
//! use control::{Held, Hold, Offer, Time};
//! use core::time::Duration;
//! #[derive(Debug)]
//! struct Msg { seq: u64, slot: u16, since: Option<Time>, probe: bool, tries: u32, hops: u32 }
//! impl Held for Msg {
//!     fn seq(&self) -> u64 { self.seq }
//!     fn slot(&self) -> u16 { self.slot }
//!     fn cost(&self) -> usize { 10 }
//!     fn held_since(&self) -> Option<Time> { self.since }
//!     fn mark_held(&mut self, now: Time) { self.since.get_or_insert(now); }
//!     fn probe(&self) -> bool { self.probe }
//!     fn set_probe(&mut self, on: bool) { self.probe = on }
//!     fn refusals(&mut self) -> &mut u32 { &mut self.tries }
//!     fn first_refused(&mut self, now: Time) -> Time { now }
//!     fn redirects(&mut self) -> &mut u32 { &mut self.hops }
//! }
//! let msg = |seq| Msg { seq, slot: 7, since: None, probe: false, tries: 0, hops: 0 };
//! let mut hold = Hold::new(100, 1 << 20, Duration::from_secs(5));
//! assert!(matches!(hold.offer(Time::ZERO, msg(1)), Offer::Free(_)));
//! // The owner cannot be reached: held; later publishes join.
//! assert!(matches!(hold.hold(Time::ZERO, msg(1)).0, Offer::Held(_)));
//! assert!(matches!(hold.offer(Time::ZERO, msg(2)), Offer::Held(_)));
//! // Released: the oldest alone, as a probe; the rest once it was taken.
//! let probe = hold.take(7).unwrap();
//! assert!(probe.len() == 1 && probe[0].probe && hold.take(7).is_none());
//! hold.unpark(7);
//! assert_eq!(hold.take(7).unwrap()[0].seq, 2);
//! ```

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::time::Duration;

use crate::retry::{RetryFailure, RetryPolicy};
use crate::time::Time;

/// What the hold needs of a publish.
pub trait Held {
    /// Its publish number (per instance; held publishes leave in this
    /// order, and a full hold keeps the lowest).
    fn seq(&self) -> u64;
    /// Its slot.
    fn slot(&self) -> u16;
    /// What it costs the hold's byte bound (name plus payload).
    fn cost(&self) -> usize;
    /// When it was first held.
    fn held_since(&self) -> Option<Time>;
    /// It is held from `now` on (the first time only).
    fn mark_held(&mut self, now: Time);
    /// Whether it is sent alone, its slot parked until its outcome.
    fn probe(&self) -> bool;
    /// Makes it a probe, or no longer one.
    fn set_probe(&mut self, on: bool);
    /// How often it was refused for now so far (counted by
    /// [`Hold::refused`]).
    fn refusals(&mut self) -> &mut u32;
    /// When it was first refused for now: `now` if it never was (then
    /// kept).
    fn first_refused(&mut self, now: Time) -> Time;
    /// How often it was redirected (or sent again after its connection
    /// closed before writing it) so far, counted by
    /// [`crate::publish::PublishCore`].
    fn redirects(&mut self) -> &mut u32;
}

/// What to do with a publish refused for now (`TRYAGAIN`, `CLUSTERDOWN`,
/// no owner known).
#[derive(Debug)]
pub enum Refused<M> {
    /// Its retry window ran out: fail it.
    GiveUp(M, RetryFailure),
    /// Kept until `at` ([`Hold::take_due`]), then sent again. `parked`
    /// (the hold is on): its slot's later publishes are held behind it, it
    /// goes alone when due ([`Hold::due`]), and they follow once it was
    /// taken, so a node whose state changes between two reads cannot
    /// refuse it and take a later one.
    Later {
        /// When.
        at: Time,
        /// Its slot is parked for it.
        parked: bool,
    },
    /// Its slot was parked for an earlier refused publish: it joined the
    /// slot's held queue behind that one (the offer's outcome, and whether
    /// it opened an entry).
    Held(Offer<M>, bool),
}

/// What to do with a delayed retry that is due.
#[derive(Debug)]
pub enum Due<M> {
    /// Send it alone, as a probe, to the slot's owner (its slot stays
    /// parked until its outcome).
    Probe(M),
    /// No owner is up: it joined the slot's held queue, in publish order
    /// (its slot no longer parked for it).
    Held(Offer<M>, bool),
    /// Send it the ordinary way (to the slot's owner, or held).
    Route(M),
}

/// What became of a publish offered to the hold.
#[derive(Debug)]
pub enum Offer<M> {
    /// Kept; its outcome comes later. A full hold keeps the oldest
    /// publishes by publish order: these newer ones made room and must
    /// fail (empty, and unallocated, unless the hold was full).
    Held(Vec<M>),
    /// Its slot holds nothing: send it.
    Free(M),
    /// The hold is at its limit: fail it.
    Full(M),
}

/// One slot's held publishes.
#[derive(Debug)]
struct Entry<M> {
    queue: Vec<M>,
    /// A route change waiting for the old route to drain: its gate.
    gate: Option<u64>,
    /// Publishes of the slot waiting for a retry outside the hold (or a
    /// probe's outcome): the queue waits for them, whatever the gate does.
    parked: u32,
    /// Held because the owner could not be reached: the next release is
    /// the oldest publish alone, as a probe.
    probe_first: bool,
}

impl<M> Entry<M> {
    fn new() -> Entry<M> {
        Entry {
            queue: Vec::new(),
            gate: None,
            parked: 0,
            probe_first: false,
        }
    }

    /// Whether the queue may go out now.
    fn open(&self) -> bool {
        self.gate.is_none() && self.parked == 0
    }
}

/// Held publishes of every slot.
#[derive(Debug)]
pub struct Hold<M> {
    slots: BTreeMap<u16, Entry<M>>,
    messages: usize,
    bytes: usize,
    /// At least the highest publish number held (exact after a full
    /// hold's search): most refusals when full are of the newest publish,
    /// decided without a search.
    newest: u64,
    max_messages: usize,
    max_bytes: usize,
    /// How long a publish stays held outside a gate (zero: no hold for
    /// unreachable owners; gates and parking still hold).
    limit: Duration,
    /// Refused publishes waiting for their retry: when, the publish,
    /// whether its slot is parked for it (not counted in the hold's size).
    later: Vec<(Time, M, bool)>,
}

impl<M: Held> Hold<M> {
    /// An empty hold of at most `max_messages` publishes and `max_bytes`
    /// of names and payloads, each held at most `limit` outside a gate.
    pub fn new(max_messages: usize, max_bytes: usize, limit: Duration) -> Hold<M> {
        Hold {
            slots: BTreeMap::new(),
            messages: 0,
            bytes: 0,
            newest: 0,
            max_messages,
            max_bytes,
            limit,
            later: Vec::new(),
        }
    }

    /// Its bounds: publishes, bytes.
    pub fn limits(&self) -> (usize, usize) {
        (self.max_messages, self.max_bytes)
    }

    /// How long a publish stays held outside a gate.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// Slots with an entry.
    pub fn entries(&self) -> usize {
        self.slots.len()
    }

    /// Held publishes and bytes now.
    pub fn size(&self) -> (usize, usize) {
        (self.messages, self.bytes)
    }

    fn fits(&self, c: usize) -> bool {
        self.messages < self.max_messages && self.bytes.saturating_add(c) <= self.max_bytes
    }

    /// Room for a publish of cost `c` and number `seq` in a full hold:
    /// held publishes newer than it leave, newest first, until it fits.
    /// `None` (nothing removed) when it cannot fit that way.
    fn make_room(&mut self, seq: u64, c: usize) -> Option<Vec<M>> {
        if seq >= self.newest || c > self.max_bytes || self.max_messages == 0 {
            return None;
        }
        // Which to remove, newest first, without touching anything yet.
        let mut newer: Vec<(u64, u16, usize)> = self
            .slots
            .iter()
            .flat_map(|(&slot, e)| e.queue.iter().map(move |m| (m.seq(), slot, m.cost())))
            .filter(|&(s, _, _)| s > seq)
            .collect();
        newer.sort_unstable_by_key(|n| core::cmp::Reverse(n.0));
        let (mut messages, mut bytes, mut take) = (self.messages, self.bytes, 0);
        while messages >= self.max_messages || bytes.saturating_add(c) > self.max_bytes {
            let &(_, _, mc) = newer.get(take)?;
            messages -= 1;
            bytes -= mc;
            take += 1;
        }
        let mut out = Vec::with_capacity(take);
        for &(s, slot, _) in &newer[..take] {
            if let Some(e) = self.slots.get_mut(&slot) {
                if let Some(i) = e.queue.iter().position(|m| m.seq() == s) {
                    out.push(e.queue.swap_remove(i));
                }
            }
        }
        self.messages -= out.len();
        self.bytes -= out.iter().map(Held::cost).sum::<usize>();
        self.newest = newer.get(take).map_or(seq, |n| n.0.max(seq));
        Some(out)
    }

    fn push(&mut self, now: Time, mut msg: M, unreachable: bool) -> Offer<M> {
        // A probe that is held (its owner unreachable, a resend) is queued
        // in publish order with the rest: its slot is no longer parked for it.
        if msg.probe() {
            msg.set_probe(false);
            if let Some(e) = self.slots.get_mut(&msg.slot()) {
                e.parked = e.parked.saturating_sub(1);
            }
        }
        let c = msg.cost();
        let evicted = if self.fits(c) {
            Vec::new()
        } else {
            match self.make_room(msg.seq(), c) {
                Some(out) => out,
                None => return Offer::Full(msg),
            }
        };
        self.newest = self.newest.max(msg.seq());
        msg.mark_held(now);
        self.messages += 1;
        self.bytes += c;
        let e = self.slots.entry(msg.slot()).or_insert_with(Entry::new);
        e.probe_first |= unreachable;
        e.queue.push(msg);
        Offer::Held(evicted)
    }

    /// `slot`'s owner just refused a publish for good or cannot be
    /// reached: its next release starts with its oldest publish alone, as
    /// a probe (a node whose state changed between two reads cannot then
    /// refuse one and take the next).
    pub fn probe_next(&mut self, slot: u16) {
        if let Some(e) = self.slots.get_mut(&slot) {
            e.probe_first = true;
        }
    }

    /// Whether `slot` has an entry (a publish to it joins the entry).
    pub fn holds(&self, slot: u16) -> bool {
        self.slots.contains_key(&slot)
    }

    /// Joins the slot's entry if it has one.
    pub fn offer(&mut self, now: Time, msg: M) -> Offer<M> {
        if !self.slots.contains_key(&msg.slot()) {
            return Offer::Free(msg);
        }
        self.push(now, msg, false)
    }

    /// Holds `msg` (its owner is unreachable); also returns whether this
    /// opened a new entry (the driver should look soon).
    pub fn hold(&mut self, now: Time, msg: M) -> (Offer<M>, bool) {
        let new = !self.slots.contains_key(&msg.slot());
        (self.push(now, msg, true), new)
    }

    /// Closes `slot`'s gate until gate `token` opens.
    pub fn gate(&mut self, slot: u16, token: u64) {
        self.slots.entry(slot).or_insert_with(Entry::new).gate = Some(token);
    }

    /// Opens the slots of gate `token`.
    pub fn open(&mut self, token: u64) {
        for e in self.slots.values_mut() {
            if e.gate == Some(token) {
                e.gate = None;
            }
        }
    }

    /// A publish of `slot` waits for a retry outside the hold: the slot's
    /// later publishes are held behind it until [`Hold::unpark`].
    pub fn park(&mut self, slot: u16) {
        self.slots.entry(slot).or_insert_with(Entry::new).parked += 1;
    }

    /// Whether a publish of `slot` is parked (see [`Hold::park`]).
    pub fn is_parked(&self, slot: u16) -> bool {
        self.slots.get(&slot).is_some_and(|e| e.parked > 0)
    }

    /// A parked publish (or a probe) has its outcome: the slot's queue may
    /// go once nothing else holds it.
    pub fn unpark(&mut self, slot: u16) {
        if let Some(e) = self.slots.get_mut(&slot) {
            e.parked = e.parked.saturating_sub(1);
        }
    }

    /// A publish refused for now at `now`: kept for its retry, within
    /// `policy`'s window, its slot parked for it or not; held behind an
    /// earlier parked one; or given up.
    pub fn refused(&mut self, now: Time, mut msg: M, policy: &RetryPolicy) -> Refused<M> {
        let first = msg.first_refused(now);
        let at = match policy.retry(now, first, msg.refusals()) {
            Ok(at) => at,
            Err(e) => return Refused::GiveUp(msg, e),
        };
        let parked = !self.limit.is_zero();
        // A probe keeps the parking it had; another refused publish of a
        // parked slot waits in the queue behind the parked one.
        if parked && !msg.probe() {
            if self.is_parked(msg.slot()) {
                // Queued like a publish whose owner could not take it: the
                // node's answers are changing, so once the parked one was
                // taken the queue still starts with a probe (one round trip
                // more, on a path that is rare anyway).
                let (offer, new) = self.hold(now, msg);
                return Refused::Held(offer, new);
            }
            self.park(msg.slot());
        }
        self.later.push((at, msg, parked));
        Refused::Later { at, parked }
    }

    /// The refused publishes whose retry is due at `now`, in the order
    /// they were refused, each with whether its slot is parked for it (for
    /// [`Hold::due`]).
    pub fn take_due(&mut self, now: Time) -> Vec<(M, bool)> {
        if !self.later.iter().any(|l| l.0 <= now) {
            return Vec::new();
        }
        let mut due = Vec::new();
        let mut kept = Vec::with_capacity(self.later.len());
        for (at, msg, parked) in core::mem::take(&mut self.later) {
            if at <= now {
                due.push((msg, parked));
            } else {
                kept.push((at, msg, parked));
            }
        }
        self.later = kept;
        due
    }

    /// Refused publishes waiting for their retry.
    pub fn waiting(&self) -> usize {
        self.later.len()
    }

    /// The retry of `msg` is due (`parked` as [`Refused::Later`] said;
    /// `owner_up`: the slot's owner has a connection up).
    pub fn due(&mut self, now: Time, mut msg: M, parked: bool, owner_up: bool) -> Due<M> {
        if !parked {
            return Due::Route(msg);
        }
        msg.set_probe(true);
        if owner_up {
            Due::Probe(msg)
        } else {
            let (offer, new) = self.hold(now, msg);
            Due::Held(offer, new)
        }
    }

    /// Slots nothing holds back.
    pub fn releasable(&self) -> Vec<u16> {
        self.slots
            .iter()
            .filter(|(_, e)| e.open())
            .map(|(&s, _)| s)
            .collect()
    }

    /// The slot's held publishes, oldest first, to be sent now; `None`
    /// (and the entry removed) when there are none left. After the owner
    /// could not be reached, the oldest comes alone first, as a probe (its
    /// slot parked until its outcome).
    pub fn take(&mut self, slot: u16) -> Option<Vec<M>> {
        let e = self.slots.get_mut(&slot)?;
        if !e.open() {
            return None;
        }
        if e.queue.is_empty() {
            self.slots.remove(&slot);
            return None;
        }
        if core::mem::take(&mut e.probe_first) {
            let oldest = (0..e.queue.len()).min_by_key(|&i| e.queue[i].seq())?;
            let mut probe = e.queue.swap_remove(oldest);
            probe.set_probe(true);
            e.parked += 1;
            self.messages -= 1;
            self.bytes -= probe.cost();
            return Some(alloc::vec![probe]);
        }
        let mut batch = core::mem::take(&mut e.queue);
        self.messages -= batch.len();
        self.bytes -= batch.iter().map(Held::cost).sum::<usize>();
        batch.sort_by_key(Held::seq);
        Some(batch)
    }

    /// Publishes held (outside a gate) for the limit or longer, removed,
    /// in publish order.
    pub fn expired(&mut self, now: Time) -> Vec<M> {
        let mut out = Vec::new();
        if self.slots.is_empty() || self.limit.is_zero() {
            return out;
        }
        let limit = self.limit;
        let old = |m: &M| m.held_since().is_some_and(|t| now.since(t) >= limit);
        for e in self.slots.values_mut() {
            if e.gate.is_some() || !e.queue.iter().any(old) {
                continue;
            }
            let mut kept = Vec::with_capacity(e.queue.len());
            for m in core::mem::take(&mut e.queue) {
                if old(&m) {
                    out.push(m);
                } else {
                    kept.push(m);
                }
            }
            e.queue = kept;
        }
        self.messages -= out.len();
        self.bytes -= out.iter().map(Held::cost).sum::<usize>();
        out.sort_by_key(Held::seq);
        out
    }

    /// When the driver must look next: the oldest held publish outside a
    /// gate expires, or a retry is due.
    pub fn next_deadline(&self) -> Option<Time> {
        let retry = self.later.iter().map(|l| l.0).min();
        if self.limit.is_zero() {
            return retry;
        }
        let expiry = self
            .slots
            .values()
            .filter(|e| e.gate.is_none())
            .flat_map(|e| e.queue.iter().filter_map(Held::held_since))
            .min()
            .map(|t| t + self.limit);
        match (retry, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Everything held or waiting for a retry, for shutdown.
    pub fn drain(&mut self) -> Vec<M> {
        let mut out: Vec<M> = core::mem::take(&mut self.slots)
            .into_values()
            .flat_map(|e| e.queue)
            .collect();
        out.extend(core::mem::take(&mut self.later).into_iter().map(|l| l.1));
        self.messages = 0;
        self.bytes = 0;
        out
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_maps::{msg, Msg};

    fn new(max_messages: usize, max_bytes: usize) -> Hold<Msg> {
        Hold::new(max_messages, max_bytes, Duration::from_secs(5))
    }

    /// Everything `slot` releases, a probe's outcome taken as a success.
    fn take_all(h: &mut Hold<Msg>, slot: u16) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(batch) = h.take(slot) {
            for m in batch {
                if m.probe {
                    h.unpark(slot);
                }
                out.push(m.seq);
            }
        }
        out
    }

    fn held(offer: (Offer<Msg>, bool)) -> Vec<u64> {
        match offer.0 {
            Offer::Held(evicted) => evicted.iter().map(|m| m.seq).collect(),
            Offer::Full(m) => panic!("{} refused", m.seq),
            Offer::Free(m) => panic!("{} free", m.seq),
        }
    }

    #[test]
    fn a_refused_publish_parks_its_slot_and_goes_alone_when_due() {
        let policy = RetryPolicy::new(5, Duration::from_secs(2));
        let mut h = new(100, 1 << 20);
        let t0 = Time::from_millis(100);
        let Refused::Later { at, parked } = h.refused(t0, msg(1, 3), &policy) else {
            panic!("1 must be retried later");
        };
        assert_eq!((at, parked), (Time::from_millis(120), true));
        assert!(h.is_parked(3));
        assert_eq!((h.waiting(), h.next_deadline()), (1, Some(at)));
        // A later publish of the slot, refused too, waits behind it.
        assert!(matches!(
            h.refused(t0, msg(2, 3), &policy),
            Refused::Held(Offer::Held(_), false)
        ));
        assert!(matches!(h.offer(t0, msg(3, 3)), Offer::Held(_)));
        assert!(h.take(3).is_none(), "nothing overtakes the parked one");
        // Due with its owner up: alone, as a probe; the rest after it.
        assert!(h.take_due(t0).is_empty());
        let (m1, parked) = h.take_due(at).pop().unwrap();
        assert_eq!((m1.seq, parked, h.waiting()), (1, true, 0));
        let Due::Probe(m1) = h.due(at, m1, parked, true) else {
            panic!("1 goes alone");
        };
        assert!(m1.probe && h.take(3).is_none());
        // The probe is refused again: still its slot's first.
        let Refused::Later { at: again, .. } = h.refused(at, m1, &policy) else {
            panic!("1 again later");
        };
        let (m1, _) = h.take_due(again).pop().unwrap();
        // Due with no owner up: held first in line (its parking ends).
        assert!(matches!(
            h.due(again, m1, true, false),
            Due::Held(Offer::Held(_), false)
        ));
        assert_eq!(take_all(&mut h, 3), [1, 2, 3]);
        // Past the window: given up.
        let mut late = msg(4, 3);
        late.first = Some(Time::ZERO);
        assert!(matches!(
            h.refused(Time::from_millis(2000), late, &policy),
            Refused::GiveUp(_, crate::RetryFailure::Window { tries: 1 })
        ));
        // Without the hold: retried later, nothing parked, and its time
        // known all the same.
        let mut off: Hold<Msg> = Hold::new(100, 1 << 20, Duration::ZERO);
        assert!(matches!(
            off.refused(t0, msg(5, 3), &policy),
            Refused::Later { parked: false, .. }
        ));
        assert!(!off.is_parked(3));
        assert_eq!(off.next_deadline(), Some(at));
        let (m5, parked) = off.take_due(at).pop().unwrap();
        assert!(matches!(off.due(at, m5, parked, true), Due::Route(_)));
        // Shutdown takes the waiting ones too.
        assert!(matches!(
            off.refused(at, msg(6, 3), &policy),
            Refused::Later { .. }
        ));
        assert_eq!(off.drain().len(), 1);
    }

    #[test]
    fn a_full_hold_keeps_the_oldest_publishes_whatever_order_they_arrive_in() {
        // Room for 3: publishes 5, 6, 7 (refused at submission) arrive
        // before 2 and 3 (written before the failure was noticed, failed
        // later by their connection).
        let mut h = new(3, 1 << 20);
        for seq in [5, 6, 7] {
            assert!(held(h.hold(Time::ZERO, msg(seq, 1))).is_empty());
        }
        assert_eq!(
            held(h.hold(Time::ZERO, msg(2, 1))),
            vec![7],
            "the newest makes room"
        );
        assert_eq!(held(h.hold(Time::ZERO, msg(3, 2))), vec![6]);
        // A newer one than all held is refused itself.
        match h.hold(Time::ZERO, msg(8, 1)).0 {
            Offer::Full(m) => assert_eq!(m.seq, 8),
            _ => panic!("8 must be refused"),
        }
        assert_eq!(h.size().0, 3);
        let mut all: Vec<u64> = [1u16, 2]
            .into_iter()
            .flat_map(|s| take_all(&mut h, s))
            .collect();
        all.sort();
        assert_eq!(all, vec![2, 3, 5], "the first three by publish order");
        assert_eq!(h.size(), (0, 0));
    }

    #[test]
    fn bytes_count_too_and_a_large_old_publish_evicts_as_many_newer_as_it_needs() {
        // Each message costs 10 bytes; room for 30.
        let mut h = new(100, 30);
        for seq in [10, 11, 12] {
            assert!(held(h.hold(Time::ZERO, msg(seq, 3))).is_empty());
        }
        let mut big = msg(1, 3);
        big.cost = 20;
        assert_eq!(held(h.hold(Time::ZERO, big)), vec![12, 11]);
        assert_eq!(h.size(), (2, 30));
        let mut huge = msg(0, 3);
        huge.cost = 41; // more than the whole hold
        match h.hold(Time::ZERO, huge).0 {
            Offer::Full(m) => assert_eq!(m.seq, 0),
            _ => panic!("a publish larger than the hold is refused"),
        }
        assert_eq!(h.size(), (2, 30), "nothing evicted for it");
    }

    #[test]
    fn a_parked_retry_keeps_its_slot_held_whatever_the_route_gate_does() {
        // Publish 1 of slot 4 waits for a retry; 2 and 3 come meanwhile.
        let mut h = new(100, 1 << 20);
        h.park(4);
        assert!((h.entries() > 0));
        for seq in [2, 3] {
            assert!(matches!(h.offer(Time::ZERO, msg(seq, 4)), Offer::Held(_)));
        }
        assert!(h.releasable().is_empty());
        // The slot's route moves and its gate opens: still parked.
        h.gate(4, 77);
        h.open(77);
        assert!(h.releasable().is_empty());
        assert!(h.take(4).is_none(), "nothing goes ahead of the retry");
        // The retry is due and finds no owner up: it joins the queue, and
        // goes first, alone.
        assert!(held(h.hold(Time::ZERO, msg(1, 4))).is_empty());
        h.unpark(4);
        assert_eq!(h.releasable(), vec![4]);
        assert_eq!(take_all(&mut h, 4), vec![1, 2, 3]);
        assert!(h.take(4).is_none());
        assert!(h.entries() == 0, "the entry is gone once empty");
    }

    #[test]
    fn publishes_held_for_an_unreachable_owner_leave_behind_a_probe() {
        // Slot 6's owner could not be reached: 3, 1, 2 held; 4 joins.
        let mut h = new(100, 1 << 20);
        for seq in [3, 1, 2] {
            assert!(held(h.hold(Time::ZERO, msg(seq, 6))).is_empty());
        }
        assert!(matches!(h.offer(Time::ZERO, msg(4, 6)), Offer::Held(_)));
        // The owner is back: the oldest goes alone, as a probe, and the
        // slot stays shut until its outcome.
        let first = h.take(6).unwrap();
        assert_eq!(first.iter().map(|m| m.seq).collect::<Vec<_>>(), [1]);
        assert!(first[0].probe && h.is_parked(6));
        assert_eq!(h.size().0, 3);
        assert!(h.take(6).is_none() && h.releasable().is_empty());
        assert!(
            matches!(h.offer(Time::ZERO, msg(5, 6)), Offer::Held(_)),
            "5 waits too"
        );
        // Taken (its outcome unparks the slot): the rest, in order.
        h.unpark(6);
        let rest: Vec<u64> = h.take(6).unwrap().iter().map(|m| m.seq).collect();
        assert_eq!(rest, [2, 3, 4, 5]);
        assert!(h.take(6).is_none() && h.entries() == 0);
        // A gate alone (the route moved, the owner reachable) sends its
        // batch at once.
        h.gate(7, 1);
        assert!(matches!(h.offer(Time::ZERO, msg(8, 7)), Offer::Held(_)));
        h.open(1);
        assert_eq!(h.take(7).unwrap().len(), 1);
        assert!(!h.is_parked(7));
    }

    #[test]
    fn a_probe_keeps_its_slot_parked_until_it_is_held_or_finished() {
        let mut h = new(100, 1 << 20);
        h.park(4);
        assert!(h.is_parked(4) && !h.is_parked(5));
        assert!(matches!(h.offer(Time::ZERO, msg(2, 4)), Offer::Held(_)));
        // The probe (publish 1, sent alone) is answered: the slot opens.
        h.unpark(4);
        assert!(!h.is_parked(4));
        assert_eq!(h.releasable(), vec![4]);
        // Parked again; this time the probe finds no owner and is held: it
        // unparks its slot as it joins the queue, in publish order.
        h.park(4);
        assert!(h.releasable().is_empty());
        let mut probe = msg(1, 4);
        probe.probe = true;
        assert!(held(h.hold(Time::ZERO, probe)).is_empty());
        assert!(!h.is_parked(4));
        assert_eq!(take_all(&mut h, 4), vec![1, 2]);
        assert!(h.take(4).is_none());
    }
}
