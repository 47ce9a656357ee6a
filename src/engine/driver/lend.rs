//! Lending the connection to sequential callers, from the driver's side:
//! when to lend, and taking the lend back (see `engine/lend.rs`).

use std::sync::atomic::Ordering;
use std::time::Instant;

use mio::{Interest, Registry};

use crate::engine::lent::{LendPoll, Lent, RELEND};

use crate::engine::driver::phase::Phase;
use crate::engine::driver::ConnDriver;

impl ConnDriver {
    /// Starts a turn: while a caller wants the connection lent, replies
    /// are held back to its end ([`ConnDriver::end_turn`]).
    pub(super) fn begin_turn(&mut self) {
        self.deferring = self.settings.lendable && self.shared.lend.wanted.load(Ordering::Relaxed);
    }

    /// Ends a turn: lends the connection if it may, then delivers the
    /// outcomes held back (so their callers find it lent).
    pub(super) fn end_turn(&mut self, registry: &Registry, now: Instant) {
        self.maybe_lend(registry, now);
        self.run_later();
    }

    /// Delivers the outcomes held back, in order.
    pub(super) fn run_later(&mut self) {
        self.deferring = false;
        for l in self.later.drain(..) {
            l.run();
        }
    }

    /// Lends the connection to sequential callers when one asked and it is
    /// idle (see `lend.rs`).
    pub(super) fn maybe_lend(&mut self, registry: &Registry, now: Instant) {
        let lend = &self.shared.lend;
        if self.lent
            || !self.settings.lendable
            || !lend.wanted.load(Ordering::Relaxed)
            || !matches!(self.phase, Phase::Open)
            || self.shutting_down
            || self.hangup
            || self.write_blocked
            || self.write_interest
            || self.more_to_read
            || self.paused_until.is_some()
            || now < self.relend_after
            || self.shared.wake_pending.load(Ordering::Acquire)
        {
            return;
        }
        let (Some(core), Some(socket)) = (&self.core, &mut self.socket) else {
            return;
        };
        let idle = socket.is_plain()
            && core.is_ready()
            && !core.is_closed()
            && core.pending_len() == 0
            && core.unsent_len() == 0;
        if !idle {
            return;
        }
        if self.lend_poll.is_none() {
            match LendPoll::new(lend) {
                Ok(p) => self.lend_poll = Some(p),
                Err(e) => {
                    log::debug!("no lend of {}: {e}", self.addr);
                    lend.wanted.store(false, Ordering::Relaxed);
                    return;
                }
            }
        }
        let Some(poll) = self.lend_poll.take() else {
            return;
        };
        if let Err(e) = poll.watch(socket) {
            log::debug!("no lend of {}: {e}", self.addr);
            self.lend_poll = Some(poll);
            return;
        }
        // The thread stops watching the socket (not even a wake per reply
        // that it would not report, as a `PRIORITY` registration costs):
        // the replies are the caller's to read, and the thread looks again
        // when it takes the lend back.
        if let Err(e) = registry.deregister(socket.source_mut()) {
            log::debug!("no lend of {}: {e}", self.addr);
            poll.unwatch(socket);
            self.lend_poll = Some(poll);
            return;
        }
        let (Some(core), Some(socket)) = (self.core.take(), self.socket.take()) else {
            return;
        };
        let scratch = std::mem::take(&mut self.lend_scratch);
        let mut slot = lend.slot.lock();
        lend.wanted.store(false, Ordering::Relaxed);
        lend.reclaim.store(false, Ordering::SeqCst);
        // A caller may have handed the last lend back after the thread
        // took it (its flag, set outside the lock, outlived that lend).
        lend.handback.store(false, Ordering::SeqCst);
        let backoff = self.backoff.clone();
        *slot = Some(Lent::new(core, socket, poll, scratch, backoff, now));
        lend.lent.store(true, Ordering::Release);
        drop(slot);
        self.lent = true;
        self.lease_check = now + self.settings.lease;
    }

    /// Takes a lent connection back (see `lend.rs`): a caller waiting on it
    /// stops waiting, and the thread reads at once what arrived.
    /// `contended`: a submitter needs it, so do not lend again soon.
    pub(super) fn reclaim(&mut self, registry: &Registry, now: Instant, contended: bool) {
        if !self.lent {
            return;
        }
        let lend = &self.shared.lend;
        lend.reclaim.store(true, Ordering::SeqCst);
        let mut slot = match lend.slot.try_lock() {
            Some(g) => g,
            None => {
                if let Some(w) = lend.waker.get() {
                    let _ = w.wake();
                }
                lend.slot.lock()
            }
        };
        let taken = slot.take();
        lend.lent.store(false, Ordering::Release);
        lend.reclaim.store(false, Ordering::SeqCst);
        lend.handback.store(false, Ordering::SeqCst);
        drop(slot);
        self.lent = false;
        let Some(mut lent) = taken else { return };
        lent.poll.unwatch(&lent.socket);
        self.lend_scratch = lent.take_scratch();
        let Lent {
            mut core,
            mut socket,
            poll,
            closed,
            io_error,
            backoff,
            ..
        } = lent;
        self.lend_poll = Some(poll);
        // Registered again, epoll reports what arrived meanwhile.
        if let Err(e) = registry.register(socket.source_mut(), self.token, Interest::READABLE) {
            core.handle_io_error(e.kind(), now);
        }
        if let Some(kind) = io_error {
            core.handle_io_error(kind, now);
        }
        self.backoff = backoff;
        self.core = Some(core);
        self.socket = Some(socket);
        if contended {
            self.relend_after = now + RELEND;
        }
        if let Some(error) = closed {
            return self.teardown(registry, error, now);
        }
        // What arrived while lent (epoll reports it too, after the new
        // registration, but the core may hold a reply the caller left).
        self.more_to_read = true;
        self.after_io(registry, now);
    }

    /// A lent connection's turn: takes it back when it must, else looks
    /// whether the lend is still in use. Returns whether it is still lent.
    pub(super) fn lent_turn(&mut self, registry: &Registry, now: Instant) -> bool {
        if !self.lent {
            return false;
        }
        let lend = &self.shared.lend;
        if self.shared.wake_pending.load(Ordering::Acquire) {
            // A submitter staged a request.
            self.reclaim(registry, now, true);
            return false;
        }
        if lend.handback.swap(false, Ordering::SeqCst) {
            self.reclaim(registry, now, false);
            return false;
        }
        if now < self.lease_check {
            return true;
        }
        let lend = &self.shared.lend;
        let expired = match lend.slot.try_lock() {
            Some(g) => match g.as_ref() {
                Some(l) if l.used_at + self.settings.lease > now => {
                    self.lease_check = l.used_at + self.settings.lease;
                    false
                }
                _ => true,
            },
            // In use now.
            None => {
                self.lease_check = now + self.settings.lease;
                false
            }
        };
        if expired {
            self.reclaim(registry, now, false);
            return false;
        }
        true
    }
}
