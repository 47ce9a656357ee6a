//! Lending an idle connection to a sequential caller.
//!
//! A caller that awaits each reply ([`Engine::publish_wait`],
//! [`Engine::command`]) costs, on the staging path, an eventfd wake of the
//! I/O thread, that thread's write, its wait for the reply, its read and a
//! futex wake of the caller: three context switches and seven or eight
//! system calls per request, where a tokio client that runs its caller on
//! the thread that reads the socket needs one and three. So the I/O thread
//! lends such a connection to its callers while it is idle:
//!
//! - **When.** A caller that finds the connection not lent sets `wanted`
//!   and takes the staging path. The thread lends the connection at the
//!   end of a turn that leaves it idle: open, plain TCP, nothing awaited,
//!   unsent or staged, no write waiting for room, no hangup seen, not
//!   shutting down, and not within [`RELEND`] of a lend it had to cut
//!   short for another submitter. The outcomes of that turn are delivered
//!   after the lend (`Later`), so the caller they wake finds it lent.
//! - **How.** The core and the socket move into [`Lend::slot`]; the
//!   thread deregisters the socket from its own epoll instance (a
//!   `PRIORITY`-only registration would still wake it, inside the kernel,
//!   for every reply: a socket's data-ready wake carries `EPOLLPRI`), and
//!   the socket's descriptor is registered in the lend's own epoll
//!   instance, which the caller waits on. A caller holding the slot writes
//!   its request, waits on that epoll, reads the reply into the core and
//!   completes it: `write`, `epoll_wait`, `read`, one context switch.
//! - **Taking it back.** Anything the thread must handle takes the
//!   connection back ([`ConnDriver`](crate::engine::driver::ConnDriver)'s
//!   `reclaim`): a request staged by another submitter, a socket event, a
//!   shutdown, a lease left unused for [`LEASE`], or a caller that hands
//!   it back because it met something only the thread handles (a short
//!   write, the end of the stream, a read error, a timeout, a closed
//!   core). The thread sets
//!   `reclaim`, wakes a caller that is waiting on the lend's epoll (its
//!   request's reply is then read by the thread), and takes the slot's lock.
//!   It registers the socket again (epoll reports what arrived meanwhile)
//!   and reads at once. While lent, the thread sees a hangup only through
//!   a caller or when it takes an unused lend back, at most [`LEASE`] after
//!   the last call.
//! - **Callers combine.** A caller that finds the connection lent stages
//!   its request without waking the thread and takes the lend's lock in
//!   turn (fair: each holder hands it straight to the next caller
//!   waiting). The holder sends every request staged so far, its own
//!   among them, in one write with the flush delay waived, and reads
//!   until its own reply is in. The replies it reads complete the others'
//!   requests too, so the next holder often finds its reply in and only
//!   sends what was staged since. No caller wakes the thread, where each
//!   request staged beside a holder used to take the lend back (and with
//!   four callers the connection was seldom idle enough to lend again).
//! - **Handing over.** A caller that cannot take its turn within
//!   [`COMBINE_WAIT`] (a holder waits as long as its own reply takes, a
//!   `BLPOP`'s for one), or finds the lend taken or handed back, makes
//!   the thread take it back and send what is staged.
//!
//! Order holds: staged requests are sent in the order they were staged,
//! by a holder or by the thread, and the core matches replies in that
//! order on either path. A holder sends nothing while the thread has
//! staged work of its own waiting (a submitter woke it): the thread takes
//! the lend back and sends everything. Request deadlines hold: a caller
//! waits at most until the core's next deadline, and then runs the core's
//! timeout. Engines with an [`Observer`](crate::engine::Observer), with TLS, or
//! whose connections carry cluster publishes never lend.

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use crate::conn::Request;
use crate::engine::dispatch::dispatch;
use crate::engine::host::on_io_thread;
use crate::engine::kept::Kept;
use crate::engine::lent::{LendPoll, Lent, Turn};
use crate::engine::pending::Completion;
use crate::engine::settings::Settings;
use crate::engine::shared::{ConnShared, UP};
use crate::metrics::add;

/// How long a caller whose request is staged for the lend holder waits
/// for its turn before it has the thread send it (a holder waits as long
/// as its own reply takes: a `BLPOP`'s, for example).
const COMBINE_WAIT: Duration = Duration::from_millis(50);

impl ConnShared {
    /// Sends `request` (its bytes from `encode`) on the lent connection and
    /// reads until `done` says its completion has its outcome, on this
    /// thread. `Err` gives the encoder and the request back when the
    /// connection is not lent now (then stage them; the connection is lent
    /// after its next idle turn).
    ///
    /// Callers combine: each stages its request without waking the thread
    /// and takes the lend's lock in turn. The one holding it sends every
    /// request staged so far, its own among them, and reads until its own
    /// reply is in; the replies it reads complete the others' requests
    /// too. It hands the lock straight to the next caller waiting, whose
    /// reply is then often in already (see the module docs).
    ///
    /// After `Ok` the completion has its outcome, or another caller or the
    /// thread gives it one (a reply read after taking the lend over, or a
    /// failure). `until`: the caller stops reading then (its wait is over)
    /// and hands the lend back, so the thread reads the reply.
    pub(crate) fn call_lent<F>(
        &self,
        settings: &Settings,
        encode: F,
        request: Request<Completion>,
        until: Option<Instant>,
        done: impl Fn() -> bool,
    ) -> Result<(), (F, Request<Completion>)>
    where
        F: FnOnce(&mut Vec<u8>),
    {
        self.stage_for_lend(settings, encode, request)?;
        // Staged without a wake: from here on this caller sees that it is
        // sent, by the caller holding the lend, by itself, or by the thread.
        // A staged request's timeout runs from its write: a short one
        // shortens the wait for the turn too.
        let now = Instant::now();
        let timeout = settings.conn.request_timeout;
        let wait = match timeout.is_zero() {
            true => COMBINE_WAIT,
            false => COMBINE_WAIT.min(timeout),
        };
        let wait_until = until.map_or(now + wait, |u| u.min(now + wait));
        let Some(mut guard) = self.lock_turn(settings, wait_until) else {
            return Ok(());
        };
        let Some(lent) = guard.as_mut() else {
            return Ok(()); // (`lock_turn` holds it lent)
        };
        // A sync caller waits on the instance itself: while it is in an
        // async runtime's reactor, each reply would wake that reactor too
        // (a context switch per reply). The next async caller registers it
        // again (two `epoll_ctl` calls per switch between the two kinds).
        #[cfg(feature = "tokio")]
        {
            lent.poll.async_fd = None;
        }
        // A caller whose reply an earlier holder read only sends what
        // others staged (their callers read their replies in their turn).
        let give_back =
            write_lent(lent, settings) || (!done() && self.read_lent(lent, settings, until, &done));
        self.end_turn(guard, give_back);
        Ok(())
    }

    /// Ends a lend holder's turn: hands the lend back to the thread
    /// (`give_back`: something only the thread handles), or straight to
    /// the next caller waiting (it may not barge in behind this one's next
    /// call).
    pub(crate) fn end_turn(&self, mut guard: MutexGuard<'_, Option<Lent>>, give_back: bool) {
        if let Some(lent) = guard.as_mut() {
            lent.used_at = Instant::now();
        }
        if give_back {
            // Before the next caller can take its turn on a failed socket.
            self.lend.handback.store(true, Ordering::SeqCst);
            drop(guard);
            self.ready.notify(self.local);
        } else {
            MutexGuard::unlock_fair(guard);
        }
    }

    /// Takes the lend's lock (waiting until `until` at most) and this
    /// caller's turn ([`ConnShared::take_turn`]): the guard holds the lent
    /// connection, with what was staged moved into its core. `None`: the
    /// thread was asked to send what is staged.
    pub(crate) fn lock_turn(
        &self,
        settings: &Settings,
        until: Instant,
    ) -> Option<MutexGuard<'_, Option<Lent>>> {
        match self.try_turn(settings, Some(until)) {
            Turn::Mine(g) => Some(g),
            Turn::Busy => {
                self.hand_over_to_thread();
                None
            }
            Turn::Thread => None,
        }
    }

    /// [`ConnShared::lock_turn`] that tells a lock held past `until` (at
    /// once when `None`) from a turn that is the thread's (it was asked to
    /// send what is staged).
    pub(crate) fn try_turn(&self, settings: &Settings, until: Option<Instant>) -> Turn<'_> {
        let guard = match until {
            Some(u) => self.lend.slot.try_lock_until(u),
            None => self.lend.slot.try_lock(),
        };
        let Some(mut guard) = guard else {
            return Turn::Busy;
        };
        let mine = guard
            .as_mut()
            .is_some_and(|lent| self.take_turn(lent, settings));
        if mine {
            return Turn::Mine(guard);
        }
        drop(guard);
        self.hand_over_to_thread();
        Turn::Thread
    }

    /// A lent call's first step: stages the request without waking the
    /// thread when the connection is lent. `Err` gives the encoder and the
    /// request back when it is not (stage them; a caller that finds it not
    /// lent asks for the lend), while it is being taken back, when the
    /// engine never lends, or on an I/O thread.
    pub(crate) fn stage_for_lend<F>(
        &self,
        settings: &Settings,
        encode: F,
        request: Request<Completion>,
    ) -> Result<(), (F, Request<Completion>)>
    where
        F: FnOnce(&mut Vec<u8>),
    {
        if !settings.lendable || on_io_thread() {
            return Err((encode, request));
        }
        let lend = &self.lend;
        if !lend.lent.load(Ordering::Acquire) {
            lend.wanted.store(true, Ordering::Relaxed);
            return Err((encode, request));
        }
        if lend.reclaim.load(Ordering::SeqCst) {
            return Err((encode, request));
        }
        self.stage_quietly(encode, request)
    }

    /// The lend holder's turn: sends what is staged on the lent connection
    /// if it is still this caller's to use (not being taken or handed
    /// back, open, nothing unsent, no failed read). False: the thread's.
    fn take_turn(&self, lent: &mut Lent, settings: &Settings) -> bool {
        let lend = &self.lend;
        !lend.handback.load(Ordering::SeqCst)
            && !lend.reclaim.load(Ordering::SeqCst)
            && lent.core.is_ready()
            && !lent.core.is_closed()
            && lent.core.unsent_len() == 0
            && lent.io_error.is_none()
            && self.send_staged(lent, settings)
    }

    /// Stages a lent connection's request without waking the thread (the
    /// caller holding the lend sends it). Gives it back when the thread
    /// has work staged already (it takes the lend back and sends this one
    /// with its own), the connection is not up, or the staged bytes are
    /// over their bound.
    fn stage_quietly<F>(
        &self,
        encode: F,
        request: Request<Completion>,
    ) -> Result<(), (F, Request<Completion>)>
    where
        F: FnOnce(&mut Vec<u8>),
    {
        let mut staging = self.staging.lock();
        if self.state.load(Ordering::Acquire) != UP
            || self.wake_pending.load(Ordering::Acquire)
            || staging.buf.len() >= self.max_buffered
        {
            return Err((encode, request));
        }
        encode(&mut staging.buf);
        staging.requests.push_back(request);
        Ok(())
    }

    /// Moves what is staged into the lent core (the lend holder's part of
    /// [`ConnShared::call_lent`]). False when it is the thread's to send:
    /// a submitter woke the thread for it, the connection is not up, or
    /// it holds kept publishes.
    fn send_staged(&self, lent: &mut Lent, settings: &Settings) -> bool {
        let mut staging = self.staging.lock();
        if self.wake_pending.load(Ordering::Acquire)
            || self.state.load(Ordering::Acquire) != UP
            || !staging.kept.is_empty()
        {
            return false;
        }
        if staging.requests.is_empty() {
            // A caller before this one sent them: this one's reply is to
            // be read.
            return true;
        }
        std::mem::swap(&mut staging.buf, &mut lent.scratch);
        std::mem::swap(&mut staging.requests, &mut lent.requests);
        self.wake_waiters(&staging);
        drop(staging);
        let n = lent.requests.len() as u64;
        add(&settings.counters.requests, n);
        add(&settings.counters.lent, n);
        lent.core
            .send_encoded_vec(&mut lent.scratch, lent.requests.drain(..), Instant::now());
        true
    }

    /// Makes the thread send what is staged and read what is in flight: a
    /// caller whose request was staged for a lend holder could not take
    /// the lend over (it was taken back, handed back, held past
    /// [`COMBINE_WAIT`], or could not send).
    pub(crate) fn hand_over_to_thread(&self) {
        let staging = self.staging.lock();
        let wake = !staging.requests.is_empty() && !self.wake_pending.swap(true, Ordering::AcqRel);
        drop(staging);
        if self.lend.lent.load(Ordering::Acquire) {
            self.lend.handback.store(true, Ordering::SeqCst);
            self.ready.notify(self.local);
        } else if wake {
            self.ready.notify(self.local);
        }
    }

    /// Reads replies on the lent connection until `done` or the thread
    /// taking it back. Returns whether to hand it back (something only the
    /// thread handles, or the caller's wait ended).
    fn read_lent(
        &self,
        lent: &mut Lent,
        settings: &Settings,
        until: Option<Instant>,
        done: &dyn Fn() -> bool,
    ) -> bool {
        // Right after the write the reply is not in yet: wait first, unless
        // the last read left bytes behind.
        let mut read_first = std::mem::take(&mut lent.maybe_more);
        loop {
            if read_first {
                match lent.socket.read_into(&mut lent.core, Instant::now()) {
                    // The thread reads the end of the stream again.
                    Ok(0) => return true,
                    Ok(_) => {
                        add(&settings.counters.reads, 1);
                        if dispatch_lent(self, lent, settings) {
                            return true;
                        }
                        let drained = lent.socket.drained(&lent.core);
                        if done() {
                            lent.maybe_more = !drained;
                            return false;
                        }
                        if !drained {
                            continue;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        lent.io_error = Some(e.kind());
                        return true;
                    }
                }
            }
            read_first = true;
            if self.lend.reclaim.load(Ordering::SeqCst) {
                return false; // the thread takes it and reads the reply
            }
            let now = Instant::now();
            if until.is_some_and(|u| u <= now) {
                return true; // the caller stops waiting
            }
            let deadline = lent.core.poll_deadline();
            if deadline.is_some_and(|d| d <= now) {
                lent.core.handle_timeout(now);
                return dispatch_lent(self, lent, settings) || !done();
            }
            let wake_at = match (deadline, until) {
                (Some(d), Some(u)) => Some(d.min(u)),
                (d, u) => d.or(u),
            };
            let timeout = wake_at.map(|d| d.saturating_duration_since(now));
            let LendPoll { poll, events, .. } = &mut lent.poll;
            match poll.poll(events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
    }
}

/// Sends what the lent core holds, at once. Returns whether to hand the
/// lend back: a short write leaves the rest (or the failure) to the
/// thread, and so does a closed core.
pub(crate) fn write_lent(lent: &mut Lent, settings: &Settings) -> bool {
    let counters = &settings.counters;
    let now = Instant::now();
    // Behind requests in flight the flush delay would hold these; the
    // caller waits for a reply next, so nothing more would gather.
    lent.core.flush_now(now);
    let w = lent.socket.write_from(&mut lent.core, now);
    add(&counters.writes, w.writes);
    add(&counters.bytes_written, w.bytes);
    if w.blocked {
        add(&counters.write_would_block, 1);
    }
    w.blocked || lent.core.unsent_len() > 0 || lent.core.is_closed()
}

/// Hands the lent core's events to their completions, as the thread does
/// (only the caller's own request is in flight; lent connections carry no
/// kept publishes and have finished their handshake). Returns whether the
/// core reported the connection closed (kept for the thread's teardown).
pub(crate) fn dispatch_lent(shared: &ConnShared, lent: &mut Lent, settings: &Settings) -> bool {
    let mut kept = Kept::default(); // empty: allocates nothing
    let closed = dispatch(
        &mut lent.core,
        shared.addr(),
        shared,
        settings,
        &mut None,
        &mut lent.backoff,
        &mut kept,
        None,
    );
    let is_closed = closed.is_some();
    lent.closed = lent.closed.take().or(closed);
    is_closed
}
