//! The publish hold: publishes kept back per slot, in publish order, while
//! the slot's owner is unreachable (bounded in time by
//! [`PubSubBuilder::publish_hold`] and in memory by
//! [`PubSubBuilder::publish_hold_limit`]) or while the slot's route moves
//! (a gate: the old route's publishes are acknowledged first).
//!
//! While a slot has an entry here, every publish to it joins the entry
//! (checked under the lock, so none can slip past); the control thread
//! releases an entry to the slot's owner, oldest publish first, once its
//! gate is open and the owner's connection is up, and removes it once
//! empty.
//!
//! [`PubSubBuilder::publish_hold`]: crate::PubSubBuilder::publish_hold
//! [`PubSubBuilder::publish_hold_limit`]: crate::PubSubBuilder::publish_hold_limit

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use control::Time;

use parking_lot::Mutex;

use crate::cluster::publish::PubMsg;

/// What became of a message offered to the hold.
pub(crate) enum Offer {
    /// Kept; its outcome comes later. A full hold keeps the oldest
    /// publishes by publish order: these newer ones made room and must
    /// fail (empty, and unallocated, unless the hold was full).
    Held(Vec<PubMsg>),
    /// Its slot holds nothing: send it.
    Free(PubMsg),
    /// The hold is at its limit: fail it.
    Full(PubMsg),
}

/// One slot's held publishes.
struct Entry {
    queue: Vec<PubMsg>,
    /// A route change waiting for the old route to drain: its gate's
    /// token (see [`control::Gates`], which also bounds its time).
    gate: Option<u64>,
    /// Publishes of the slot waiting for a retry (`TRYAGAIN`,
    /// `CLUSTERDOWN`) outside the hold: the queue waits for them (they
    /// join it when due), whatever the gate does meanwhile.
    parked: u32,
    /// Held because the owner could not be reached: the oldest publish
    /// goes first and alone, as a probe, and the rest once it was taken
    /// (an owner just promoted or reconnected could refuse one and take
    /// the next).
    probe_first: bool,
}

impl Entry {
    fn new() -> Entry {
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

#[derive(Default)]
struct State {
    slots: HashMap<u16, Entry>,
    messages: usize,
    bytes: usize,
    /// At least the highest publish number held (exact after a full
    /// hold's search): most refusals when full are of the newest publish,
    /// decided without a search.
    newest: u64,
}

/// Held publishes of every slot.
pub(crate) struct Hold {
    state: Mutex<State>,
    /// `state.slots.len()`, read without the lock on every publish.
    entries: AtomicUsize,
    pub(crate) max_messages: usize,
    pub(crate) max_bytes: usize,
}

fn cost(msg: &PubMsg) -> usize {
    msg.cost()
}

impl Hold {
    pub(crate) fn new(max_messages: usize, max_bytes: usize) -> Self {
        Hold {
            state: Mutex::new(State::default()),
            entries: AtomicUsize::new(0),
            max_messages,
            max_bytes,
        }
    }

    /// Whether any slot holds something (a hint; the lock decides).
    pub(crate) fn busy(&self) -> bool {
        self.entries.load(Ordering::Acquire) > 0
    }

    fn fits(&self, st: &State, c: usize) -> bool {
        st.messages < self.max_messages && st.bytes.saturating_add(c) <= self.max_bytes
    }

    /// Room for a publish of cost `c` and number `seq` in a full hold:
    /// held publishes newer than it leave, newest first, until it fits.
    /// `None` (nothing removed) when it cannot fit that way.
    fn make_room(&self, st: &mut State, seq: u64, c: usize) -> Option<Vec<PubMsg>> {
        if seq >= st.newest || c > self.max_bytes || self.max_messages == 0 {
            return None;
        }
        // Which to remove, newest first, without touching anything yet.
        let mut newer: Vec<(u64, u16, usize)> = st
            .slots
            .iter()
            .flat_map(|(&slot, e)| e.queue.iter().map(move |m| (m.seq, slot, cost(m))))
            .filter(|&(s, _, _)| s > seq)
            .collect();
        newer.sort_unstable_by_key(|n| core::cmp::Reverse(n.0));
        let (mut messages, mut bytes, mut take) = (st.messages, st.bytes, 0);
        while messages >= self.max_messages || bytes.saturating_add(c) > self.max_bytes {
            let &(_, _, mc) = newer.get(take)?;
            messages -= 1;
            bytes -= mc;
            take += 1;
        }
        let mut out = Vec::with_capacity(take);
        for &(s, slot, _) in &newer[..take] {
            if let Some(e) = st.slots.get_mut(&slot) {
                if let Some(i) = e.queue.iter().position(|m| m.seq == s) {
                    out.push(e.queue.swap_remove(i));
                }
            }
        }
        st.messages -= out.len();
        st.bytes -= out.iter().map(cost).sum::<usize>();
        st.newest = newer.get(take).map_or(seq, |n| n.0.max(seq));
        Some(out)
    }

    fn push(&self, st: &mut State, mut msg: PubMsg, unreachable: bool) -> Offer {
        // A probe that is held (its owner unreachable, a resend) is queued
        // in publish order with the rest: its slot is no longer parked for it.
        if std::mem::take(&mut msg.probe) {
            if let Some(e) = st.slots.get_mut(&msg.slot) {
                e.parked = e.parked.saturating_sub(1);
            }
        }
        let c = cost(&msg);
        let evicted = if self.fits(st, c) {
            Vec::new()
        } else {
            match self.make_room(st, msg.seq, c) {
                Some(out) => out,
                None => return Offer::Full(msg),
            }
        };
        st.newest = st.newest.max(msg.seq);
        msg.held_at.get_or_now();
        st.messages += 1;
        st.bytes += c;
        let slot = msg.slot;
        let before = st.slots.len();
        let e = st.slots.entry(slot).or_insert_with(Entry::new);
        e.probe_first |= unreachable;
        e.queue.push(msg);
        if st.slots.len() != before {
            self.entries.store(st.slots.len(), Ordering::Release);
        }
        Offer::Held(evicted)
    }

    /// Joins the slot's entry if it has one.
    pub(crate) fn offer(&self, msg: PubMsg) -> Offer {
        let mut st = self.state.lock();
        if !st.slots.contains_key(&msg.slot) {
            return Offer::Free(msg);
        }
        self.push(&mut st, msg, false)
    }

    /// Holds `msg` (its owner is unreachable); returns whether this opened
    /// a new entry (the control thread should look soon).
    pub(crate) fn hold(&self, msg: PubMsg) -> (Offer, bool) {
        let mut st = self.state.lock();
        let new = !st.slots.contains_key(&msg.slot);
        (self.push(&mut st, msg, true), new)
    }

    /// Closes `slot`'s gate until barrier `token` completes.
    pub(crate) fn gate(&self, slot: u16, token: u64) {
        let mut st = self.state.lock();
        st.slots.entry(slot).or_insert_with(Entry::new).gate = Some(token);
        self.entries.store(st.slots.len(), Ordering::Release);
    }

    /// A publish of `slot` waits for a retry outside the hold: the slot's
    /// later publishes are held behind it until [`Hold::unpark`].
    pub(crate) fn park(&self, slot: u16) {
        let mut st = self.state.lock();
        st.slots.entry(slot).or_insert_with(Entry::new).parked += 1;
        self.entries.store(st.slots.len(), Ordering::Release);
    }

    /// Whether a refused publish of `slot` is parked (see [`Hold::park`]).
    pub(crate) fn is_parked(&self, slot: u16) -> bool {
        let st = self.state.lock();
        st.slots.get(&slot).is_some_and(|e| e.parked > 0)
    }

    /// The retry parked with [`Hold::park`] has its outcome (or was held):
    /// the slot's queue may go once nothing else holds it.
    pub(crate) fn unpark(&self, slot: u16) {
        let mut st = self.state.lock();
        if let Some(e) = st.slots.get_mut(&slot) {
            e.parked = e.parked.saturating_sub(1);
        }
    }

    /// Opens the gates of barrier `token`.
    pub(crate) fn open(&self, token: u64) {
        let mut st = self.state.lock();
        for e in st.slots.values_mut() {
            if e.gate == Some(token) {
                e.gate = None;
            }
        }
    }

    /// Slots whose gate is open.
    pub(crate) fn releasable(&self) -> Vec<u16> {
        let st = self.state.lock();
        st.slots
            .iter()
            .filter(|(_, e)| e.open())
            .map(|(&s, _)| s)
            .collect()
    }

    /// The slot's held publishes, oldest first, to be sent now; `None`
    /// (and the entry removed) when there are none left. After the owner
    /// could not be reached, the oldest comes alone first, as a probe (its
    /// slot parked until its outcome).
    pub(crate) fn take(&self, slot: u16) -> Option<Vec<PubMsg>> {
        let mut st = self.state.lock();
        let e = st.slots.get_mut(&slot)?;
        if !e.open() {
            return None;
        }
        if e.queue.is_empty() {
            st.slots.remove(&slot);
            self.entries.store(st.slots.len(), Ordering::Release);
            return None;
        }
        if std::mem::take(&mut e.probe_first) {
            let oldest = (0..e.queue.len()).min_by_key(|&i| e.queue[i].seq)?;
            let mut probe = e.queue.swap_remove(oldest);
            probe.probe = true;
            e.parked += 1;
            st.messages -= 1;
            st.bytes -= cost(&probe);
            return Some(vec![probe]);
        }
        let mut batch = std::mem::take(&mut e.queue);
        st.messages -= batch.len();
        st.bytes -= batch.iter().map(cost).sum::<usize>();
        batch.sort_by_key(|m| m.seq);
        Some(batch)
    }

    /// Publishes held (outside a gate) since `hold` or longer, removed.
    pub(crate) fn expired(&self, now: Time, hold: Duration) -> Vec<PubMsg> {
        let mut st = self.state.lock();
        if st.slots.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for e in st.slots.values_mut() {
            if e.gate.is_some() {
                continue;
            }
            let old = |m: &PubMsg| m.held_at.get().is_some_and(|t| now.since(t) >= hold);
            if e.queue.iter().any(old) {
                let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut e.queue)
                    .into_iter()
                    .partition(|m| old(m));
                e.queue = kept;
                out.extend(gone);
            }
        }
        st.messages -= out.len();
        st.bytes -= out.iter().map(cost).sum::<usize>();
        out.sort_by_key(|m| m.seq);
        out
    }

    /// When the oldest held publish outside a gate expires (a gate's own
    /// time is [`control::Gates`]'s).
    pub(crate) fn next_deadline(&self, hold: Duration) -> Option<Time> {
        if hold.is_zero() {
            return None;
        }
        let st = self.state.lock();
        st.slots
            .values()
            .filter(|e| e.gate.is_none())
            .flat_map(|e| e.queue.iter().filter_map(|m| m.held_at.get()))
            .min()
            .map(|t| t + hold)
    }

    /// Everything held, for shutdown.
    pub(crate) fn drain(&self) -> Vec<PubMsg> {
        let mut st = self.state.lock();
        let out: Vec<PubMsg> = st.slots.drain().flat_map(|(_, e)| e.queue).collect();
        st.messages = 0;
        st.bytes = 0;
        self.entries.store(0, Ordering::Release);
        out
    }

    /// Held publishes and bytes now.
    pub(crate) fn size(&self) -> (usize, usize) {
        let st = self.state.lock();
        (st.messages, st.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::Stamp;

    fn msg(seq: u64, slot: u16) -> PubMsg {
        PubMsg {
            data: Vec::new(),
            wire_len: 1,
            payload_len: 9,
            slot,
            redirects: 0,
            retries: 0,
            first: Stamp::UNSET,
            seq,
            held_at: Stamp::UNSET,
            probe: false,
            done: None,
        }
    }

    /// Everything `slot` releases, a probe's outcome taken as a success.
    fn take_all(h: &Hold, slot: u16) -> Vec<u64> {
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

    fn held(offer: (Offer, bool)) -> Vec<u64> {
        match offer.0 {
            Offer::Held(evicted) => evicted.iter().map(|m| m.seq).collect(),
            Offer::Full(m) => panic!("{} refused", m.seq),
            Offer::Free(m) => panic!("{} free", m.seq),
        }
    }

    #[test]
    fn a_full_hold_keeps_the_oldest_publishes_whatever_order_they_arrive_in() {
        // Room for 3: publishes 5, 6, 7 (refused at submission) arrive
        // before 2 and 3 (written before the failure was noticed, failed
        // later by their connection).
        let h = Hold::new(3, 1 << 20);
        for seq in [5, 6, 7] {
            assert!(held(h.hold(msg(seq, 1))).is_empty());
        }
        assert_eq!(held(h.hold(msg(2, 1))), vec![7], "the newest makes room");
        assert_eq!(held(h.hold(msg(3, 2))), vec![6]);
        // A newer one than all held is refused itself.
        match h.hold(msg(8, 1)).0 {
            Offer::Full(m) => assert_eq!(m.seq, 8),
            _ => panic!("8 must be refused"),
        }
        assert_eq!(h.size().0, 3);
        let mut all: Vec<u64> = [1u16, 2]
            .into_iter()
            .flat_map(|s| take_all(&h, s))
            .collect();
        all.sort();
        assert_eq!(all, vec![2, 3, 5], "the first three by publish order");
        assert_eq!(h.size(), (0, 0));
    }

    #[test]
    fn bytes_count_too_and_a_large_old_publish_evicts_as_many_newer_as_it_needs() {
        // Each message costs 10 bytes; room for 30.
        let h = Hold::new(100, 30);
        for seq in [10, 11, 12] {
            assert!(held(h.hold(msg(seq, 3))).is_empty());
        }
        let mut big = msg(1, 3);
        big.payload_len = 19; // costs 20
        assert_eq!(held(h.hold(big)), vec![12, 11]);
        assert_eq!(h.size(), (2, 30));
        let mut huge = msg(0, 3);
        huge.payload_len = 40; // more than the whole hold
        match h.hold(huge).0 {
            Offer::Full(m) => assert_eq!(m.seq, 0),
            _ => panic!("a publish larger than the hold is refused"),
        }
        assert_eq!(h.size(), (2, 30), "nothing evicted for it");
    }

    #[test]
    fn a_parked_retry_keeps_its_slot_held_whatever_the_route_gate_does() {
        // Publish 1 of slot 4 waits for a retry; 2 and 3 come meanwhile.
        let h = Hold::new(100, 1 << 20);
        h.park(4);
        assert!(h.busy());
        for seq in [2, 3] {
            assert!(matches!(h.offer(msg(seq, 4)), Offer::Held(_)));
        }
        assert!(h.releasable().is_empty());
        // The slot's route moves and its gate opens: still parked.
        h.gate(4, 77);
        h.open(77);
        assert!(h.releasable().is_empty());
        assert!(h.take(4).is_none(), "nothing goes ahead of the retry");
        // The retry is due and finds no owner up: it joins the queue, and
        // goes first, alone.
        assert!(held(h.hold(msg(1, 4))).is_empty());
        h.unpark(4);
        assert_eq!(h.releasable(), vec![4]);
        assert_eq!(take_all(&h, 4), vec![1, 2, 3]);
        assert!(h.take(4).is_none());
        assert!(!h.busy(), "the entry is gone once empty");
    }

    #[test]
    fn publishes_held_for_an_unreachable_owner_leave_behind_a_probe() {
        // Slot 6's owner could not be reached: 3, 1, 2 held; 4 joins.
        let h = Hold::new(100, 1 << 20);
        for seq in [3, 1, 2] {
            assert!(held(h.hold(msg(seq, 6))).is_empty());
        }
        assert!(matches!(h.offer(msg(4, 6)), Offer::Held(_)));
        // The owner is back: the oldest goes alone, as a probe, and the
        // slot stays shut until its outcome.
        let first = h.take(6).unwrap();
        assert_eq!(first.iter().map(|m| m.seq).collect::<Vec<_>>(), [1]);
        assert!(first[0].probe && h.is_parked(6));
        assert_eq!(h.size().0, 3);
        assert!(h.take(6).is_none() && h.releasable().is_empty());
        assert!(matches!(h.offer(msg(5, 6)), Offer::Held(_)), "5 waits too");
        // Taken (its outcome unparks the slot): the rest, in order.
        h.unpark(6);
        let rest: Vec<u64> = h.take(6).unwrap().iter().map(|m| m.seq).collect();
        assert_eq!(rest, [2, 3, 4, 5]);
        assert!(h.take(6).is_none() && !h.busy());
        // A gate alone (the route moved, the owner reachable) sends its
        // batch at once.
        h.gate(7, 1);
        assert!(matches!(h.offer(msg(8, 7)), Offer::Held(_)));
        h.open(1);
        assert_eq!(h.take(7).unwrap().len(), 1);
        assert!(!h.is_parked(7));
    }

    #[test]
    fn a_probe_keeps_its_slot_parked_until_it_is_held_or_finished() {
        let h = Hold::new(100, 1 << 20);
        h.park(4);
        assert!(h.is_parked(4) && !h.is_parked(5));
        assert!(matches!(h.offer(msg(2, 4)), Offer::Held(_)));
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
        assert!(held(h.hold(probe)).is_empty());
        assert!(!h.is_parked(4));
        assert_eq!(take_all(&h, 4), vec![1, 2]);
        assert!(h.take(4).is_none());
    }
}
