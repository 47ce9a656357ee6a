//! The publish hold ([`control::Hold`]: publishes kept back per slot while
//! the slot's owner is unreachable, bounded in time by
//! [`PubSubBuilder::publish_hold`] and in memory by
//! [`PubSubBuilder::publish_hold_limit`], while its route moves, or behind
//! a refused publish), shared by the application's threads and the control
//! thread behind one lock, with a count of its entries read without the
//! lock on every publish.
//!
//! [`PubSubBuilder::publish_hold`]: crate::PubSubBuilder::publish_hold
//! [`PubSubBuilder::publish_hold_limit`]: crate::PubSubBuilder::publish_hold_limit

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use control::{Due, Held, Refused, RetryPolicy, Time};
use parking_lot::Mutex;

use crate::control_loop::publish::PubMsg;
use crate::engine::clock;

/// What became of a publish offered to the hold.
pub(crate) type Offer = control::Offer<PubMsg>;

impl Held for PubMsg {
    fn seq(&self) -> u64 {
        self.seq
    }

    fn slot(&self) -> u16 {
        self.slot
    }

    fn cost(&self) -> usize {
        PubMsg::cost(self)
    }

    fn held_since(&self) -> Option<Time> {
        self.held_at.get()
    }

    fn mark_held(&mut self, now: Time) {
        self.held_at.set_once(now);
    }

    fn probe(&self) -> bool {
        self.probe
    }

    fn set_probe(&mut self, on: bool) {
        self.probe = on;
    }

    fn refusals(&mut self) -> &mut u32 {
        &mut self.retries
    }

    fn first_refused(&mut self, now: Time) -> Time {
        self.first.set_once(now);
        self.first.get().unwrap_or(now)
    }

    fn redirects(&mut self) -> &mut u32 {
        &mut self.redirects
    }
}

/// Held publishes of every slot.
pub(crate) struct Hold {
    state: Mutex<control::Hold<PubMsg>>,
    /// The number of slots with an entry, read without the lock on every
    /// publish.
    entries: AtomicUsize,
    /// Drained for shutdown: nothing is held after that (read and set
    /// under the lock).
    closed: AtomicBool,
    pub(crate) max_messages: usize,
    pub(crate) max_bytes: usize,
}

impl Hold {
    pub(crate) fn new(max_messages: usize, max_bytes: usize, limit: Duration) -> Self {
        Hold {
            state: Mutex::new(control::Hold::new(max_messages, max_bytes, limit)),
            entries: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            max_messages,
            max_bytes,
        }
    }

    /// Whether any slot holds something (a hint; the lock decides).
    pub(crate) fn busy(&self) -> bool {
        self.entries.load(Ordering::Acquire) > 0
    }

    /// Runs `f` under the lock, then publishes the entry count.
    fn with<R>(&self, f: impl FnOnce(&mut control::Hold<PubMsg>) -> R) -> R {
        let mut h = self.state.lock();
        let r = f(&mut h);
        self.entries.store(h.entries(), Ordering::Release);
        r
    }

    /// Joins the slot's entry if it has one.
    pub(crate) fn offer(&self, msg: PubMsg) -> Offer {
        // The clock is read only for a publish that joins an entry: every
        // publish comes here while any slot holds something.
        self.with(|h| match h.holds(msg.slot) {
            true => h.offer(clock::now(), msg),
            false => Offer::Free(msg),
        })
    }

    /// Holds `msg` (its owner is unreachable); also returns whether this
    /// opened a new entry (the control thread should look soon). `Err`
    /// gives it back once the hold was drained for shutdown.
    pub(crate) fn hold(&self, msg: PubMsg) -> Result<(Offer, bool), PubMsg> {
        let now = clock::now();
        self.with(|h| match self.closed.load(Ordering::Relaxed) {
            true => Err(msg),
            false => Ok(h.hold(now, msg)),
        })
    }

    /// See [`control::Hold::gate`].
    pub(crate) fn gate(&self, slot: u16, token: u64) {
        self.with(|h| h.gate(slot, token));
    }

    /// See [`control::Hold::open`].
    pub(crate) fn open(&self, token: u64) {
        self.with(|h| h.open(token));
    }

    /// See [`control::Hold::unpark`].
    pub(crate) fn unpark(&self, slot: u16) {
        self.with(|h| h.unpark(slot));
    }

    /// See [`control::Hold::refused`].
    pub(crate) fn refused(&self, now: Time, msg: PubMsg, policy: &RetryPolicy) -> Refused<PubMsg> {
        self.with(|h| h.refused(now, msg, policy))
    }

    /// See [`control::Hold::take_due`].
    pub(crate) fn take_due(&self, now: Time) -> Vec<(PubMsg, bool)> {
        self.with(|h| h.take_due(now))
    }

    /// See [`control::Hold::due`].
    pub(crate) fn due(&self, now: Time, msg: PubMsg, parked: bool, owner_up: bool) -> Due<PubMsg> {
        self.with(|h| h.due(now, msg, parked, owner_up))
    }

    /// See [`control::Hold::releasable`].
    pub(crate) fn releasable(&self) -> Vec<u16> {
        self.state.lock().releasable()
    }

    /// See [`control::Hold::take`].
    pub(crate) fn take(&self, slot: u16) -> Option<Vec<PubMsg>> {
        self.with(|h| h.take(slot))
    }

    /// See [`control::Hold::expired`].
    pub(crate) fn expired(&self, now: Time) -> Vec<PubMsg> {
        self.with(|h| h.expired(now))
    }

    /// See [`control::Hold::next_deadline`] (expiry, and retries due).
    pub(crate) fn next_deadline(&self) -> Option<Time> {
        self.state.lock().next_deadline()
    }

    /// Everything held, for shutdown.
    pub(crate) fn drain(&self) -> Vec<PubMsg> {
        self.with(|h| {
            self.closed.store(true, Ordering::Relaxed);
            h.drain()
        })
    }

    /// Held publishes and bytes now.
    pub(crate) fn size(&self) -> (usize, usize) {
        self.state.lock().size()
    }
}
