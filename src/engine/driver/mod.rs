//! One connection inside its I/O thread: the socket, the sans-IO core, and
//! the connect / reconnect life cycle.

mod fail;
mod lend;
mod lifecycle;
mod phase;

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Interest, Registry, Token};

use crate::conn::{Connection, Request};
use crate::engine::backoff::Reconnect;
use crate::engine::dispatch::dispatch;
use crate::engine::kept::{Kept, StagedKept};
use crate::engine::lent::LendPoll;
use crate::engine::pending::{Completion, Later, SlotRef};
use crate::engine::settings::Settings;
use crate::engine::shared::ConnShared;
use crate::engine::stats::EngineCounters;
use crate::error::Error;
use crate::metrics::add;
use crate::transport::tls::TlsTarget;
use crate::transport::Transport;
use fail::{connect_error, fail_all};
use phase::Phase;

/// Reads per readiness event before other connections get a turn (each at
/// most 1 MiB, so a turn is bounded however fast the socket fills).
const READ_BUDGET: usize = 32;

pub(crate) struct ConnDriver {
    pub(crate) shared: Arc<ConnShared>,
    /// The address connected to now: this thread's copy of
    /// `shared.current` (it is the one writer), read without a lock on
    /// every read turn.
    addr: crate::addr::ServerAddr,
    settings: Arc<Settings>,
    token: Token,
    phase: Phase,
    core: Option<Connection<Completion>>,
    socket: Option<Transport>,
    /// TLS for this server (`None`: plain TCP).
    tls: Option<Arc<TlsTarget>>,
    write_interest: bool,
    /// The last write found the socket full: no write until a WRITABLE
    /// event (edge-triggered, so one comes once there is room).
    write_blocked: bool,
    spare_buf: Vec<u8>,
    spare_reqs: VecDeque<Request<Completion>>,
    spare_kept: StagedKept,
    /// This connection's kept publishes in flight (see [`Kept`]).
    kept: Kept,
    backoff: Reconnect,
    /// Reports the first connect's outcome to `build()`.
    initial: Option<SlotRef<()>>,
    pub(crate) more_to_read: bool,
    /// The socket reported its read side closed (or an error): reads go
    /// on to the end of stream, since no later event will announce it.
    hangup: bool,
    shutting_down: bool,
    /// The core and the socket are lent to sequential callers (in
    /// `shared.lend`; see `lend.rs`): `core` and `socket` are `None`.
    lent: bool,
    /// When the thread next looks whether the lend is still used.
    lease_check: Instant,
    /// No lend before this (the last one was cut short by a submitter).
    relend_after: Instant,
    /// The lend's epoll instance between lends (made at the first one).
    lend_poll: Option<LendPoll>,
    /// The lend's request buffer and queue between lends (a lend's caller
    /// swaps them with the staged ones: a fresh queue each lend would leave
    /// the staging queue to grow again from nothing after it).
    lend_scratch: (Vec<u8>, VecDeque<Request<Completion>>),
    /// Outcomes held back to the end of this turn (see [`Later`]): set
    /// while a caller wants the connection lent.
    deferring: bool,
    later: Vec<Later>,
    /// Not reading until then (the socket is deregistered): the last turn
    /// was busy (see [`Settings::read_pause`]).
    paused_until: Option<Instant>,
    /// When the last read turn that got bytes began.
    last_read: Option<Instant>,
    /// A moving average of the time between read turns that got bytes
    /// (each new gap weighs a quarter, capped at [`GAP_CAP`] short pauses).
    gap_avg: Duration,
    /// The next read turn is the first after a pause.
    resumed: bool,
    /// The bytes of the small read turn that began the current run of
    /// short pauses (see [`ConnDriver::pause_reading`]).
    chain_unit: usize,
    /// A connection ended: the next connect is a reconnect (a server given
    /// by name is looked up again first).
    reconnecting: bool,
}

/// A read turn of at least this many bytes makes a connection busy (see
/// [`Settings::read_pause`]).
pub(crate) const BUSY_READ: usize = 8 * 1024;

/// The part of [`Settings::read_pause`] that a steady stream of small
/// reads (on average less than half this part apart) pauses for: half
/// the delay.
const FREQUENT_PART: u32 = 2;

/// The longest gap between reads the average of
/// [`ConnDriver`]'s `gap_avg` takes in, in short pauses: after a silence
/// a steady stream pauses again within a dozen reads.
const GAP_CAP: u32 = 8;
impl ConnDriver {
    pub(crate) fn new(
        shared: Arc<ConnShared>,
        settings: Arc<Settings>,
        token: Token,
        seed: u64,
        initial: SlotRef<()>,
        tls: Option<Arc<TlsTarget>>,
        now: Instant,
    ) -> Self {
        let backoff = Reconnect::new(settings.backoff_base, settings.backoff_max, seed);
        ConnDriver {
            addr: shared.addr(),
            shared,
            settings,
            token,
            phase: Phase::Backoff { until: now },
            core: None,
            socket: None,
            tls,
            write_interest: false,
            write_blocked: false,
            spare_buf: Vec::new(),
            spare_reqs: VecDeque::new(),
            spare_kept: StagedKept::default(),
            kept: Kept::default(),
            backoff,
            initial: Some(initial),
            more_to_read: false,
            hangup: false,
            shutting_down: false,
            lent: false,
            lease_check: now,
            relend_after: now,
            lend_poll: None,
            lend_scratch: (Vec::new(), VecDeque::new()),
            deferring: false,
            later: Vec::new(),
            paused_until: None,
            last_read: None,
            gap_avg: Duration::MAX,
            resumed: false,
            chain_unit: 0,
            reconnecting: false,
        }
    }

    fn addr(&self) -> crate::addr::ServerAddr {
        self.addr
    }

    fn counters(&self) -> &EngineCounters {
        &self.settings.counters
    }

    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// Nothing left to send or to wait for (used to end a shutdown early).
    pub(crate) fn is_quiet(&self) -> bool {
        if self.lent {
            return false; // a shutdown takes it back first
        }
        match (&self.phase, &self.core) {
            (Phase::Closed, _) => true,
            (Phase::Open, Some(core)) => {
                core.is_ready()
                    && core.pending_len() == 0
                    && core.unsent_len() == 0
                    && self.shared.staging.lock().requests.is_empty()
                    && !self.socket.as_ref().is_some_and(Transport::has_output)
            }
            _ => false,
        }
    }

    /// Submitters staged commands that the thread has not taken yet.
    pub(crate) fn has_staged_work(&self) -> bool {
        self.shared.wake_pending.load(Ordering::Acquire)
    }

    /// When this connection next needs the thread's attention.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Connecting { deadline } => Some(*deadline),
            Phase::Backoff { until } => Some(*until),
            Phase::Closed => None,
            Phase::Open if self.lent => Some(self.lease_check),
            Phase::Open => {
                let core = self.core.as_ref()?;
                let deadline = core.poll_deadline();
                // Waiting for WRITABLE, or for the TLS handshake (rustls
                // holds what it took until then; the server's handshake
                // messages arrive as reads, and each is followed by a
                // write turn): not for a time.
                let waiting = self.write_interest
                    || self.socket.as_ref().is_some_and(Transport::is_handshaking);
                let flush = if waiting { None } else { core.poll_flush_at() };
                [flush, deadline, self.paused_until]
                    .into_iter()
                    .flatten()
                    .min()
            }
        }
    }

    fn set_state(&self, state: u8) {
        let staging = self.shared.staging.lock();
        self.shared.state.store(state, Ordering::Release);
        self.shared.wake_waiters(&staging);
    }

    /// A readiness event for this connection's socket.
    pub(crate) fn on_socket_event(
        &mut self,
        registry: &Registry,
        readable: bool,
        writable: bool,
        hangup: bool,
        now: Instant,
    ) {
        // Not while lent (the socket is not registered then); an event
        // of the poll that came before the lend is taken as it comes.
        self.reclaim(registry, now, false);
        self.begin_turn();
        self.hangup |= hangup;
        if writable {
            self.write_blocked = false;
        }
        if let Phase::Connecting { .. } = self.phase {
            let Some(socket) = self.socket.as_ref() else {
                return;
            };
            match socket.finish_connect() {
                Ok(true) => self.phase = Phase::Open,
                Ok(false) => return,
                Err(e) => {
                    let addr = self.addr();
                    return self.teardown(registry, connect_error(addr, &e), now);
                }
            }
        }
        if readable {
            self.read(registry, now);
        }
        self.end_turn(registry, now);
    }

    fn read(&mut self, registry: &Registry, mut now: Instant) {
        self.more_to_read = false;
        let began = now;
        let resumed = std::mem::take(&mut self.resumed);
        let (Some(core), Some(socket)) = (&mut self.core, &mut self.socket) else {
            return;
        };
        let mut budget = READ_BUDGET;
        let mut got = 0usize;
        loop {
            if budget == 0 {
                self.more_to_read = true;
                break;
            }
            if budget < READ_BUDGET {
                // A flooding socket keeps this loop busy: each read gets the
                // time it happens, so the core's deadlines (checked while a
                // reply is incomplete) hold within one read.
                now = Instant::now();
            }
            match socket.read_into(core, now) {
                Ok(0) => {
                    core.handle_eof(now);
                    break;
                }
                Ok(n) => {
                    got += n;
                    budget -= 1;
                    add(&self.settings.counters.reads, 1);
                    let later = self.deferring.then_some(&mut self.later);
                    if let Some(closed) = dispatch(
                        core,
                        self.addr,
                        &self.shared,
                        &self.settings,
                        &mut self.initial,
                        &mut self.backoff,
                        &mut self.kept,
                        later,
                    ) {
                        return self.teardown(registry, closed, now);
                    }
                    if !self.hangup && socket.drained(core) {
                        break; // no read that only sees WouldBlock
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if let Some(reason) = socket.take_tls_error() {
                        let addr = self.addr;
                        let err = Error::Tls {
                            addr,
                            reason: reason.into(),
                        };
                        return self.teardown(registry, err, now);
                    }
                    core.handle_io_error(e.kind(), now);
                    break;
                }
            }
        }
        let short = self.settings.read_pause / FREQUENT_PART;
        if got > 0 {
            let cap = short.saturating_mul(GAP_CAP);
            let gap = self
                .last_read
                .map_or(cap, |t| began.duration_since(t).min(cap));
            self.gap_avg = match self.gap_avg {
                Duration::MAX => gap,
                avg => (avg.min(cap) * 3 + gap) / 4,
            };
            self.last_read = Some(began);
        }
        let frequent = match resumed {
            // The pause gathered at least two reads' worth: go on.
            true => got > 0 && got >= 2 * self.chain_unit,
            // Reads come closer than half the short pause, on average.
            false => got > 0 && self.gap_avg < short / 2,
        };
        // What began the pauses: a later turn must read twice it to go on
        // (after a busy pause too: a chain never runs on a stale unit).
        if (frequent || got >= BUSY_READ) && !resumed {
            self.chain_unit = got;
        }
        if got >= BUSY_READ {
            self.pause_reading(registry, now, self.settings.read_pause);
        } else if frequent {
            self.pause_reading(registry, now, short);
        }
        self.after_io(registry, now);
    }

    /// After a busy read turn that emptied the socket: stops reading for
    /// `pause` (deregistered, so arriving data does not wake the thread),
    /// unless there is more to read now, the read side closed, or the
    /// connection waits to write. Busy: the turn took [`BUSY_READ`] bytes
    /// (paused for [`Settings::read_pause`]), or it read something while
    /// such turns have come less than half a [`FREQUENT_PART`] of that
    /// apart on average (paused for that part): a steady stream of small
    /// messages is read in batches too. The first turn after such a pause
    /// pauses again when it read at least twice what began them (the
    /// stream goes on); a slower one, where a pause gathers one message,
    /// ends them.
    fn pause_reading(&mut self, registry: &Registry, now: Instant, pause: Duration) {
        if pause.is_zero() || self.more_to_read || self.hangup || self.write_interest {
            return;
        }
        let Some(socket) = self.socket.as_mut() else {
            return;
        };
        if !matches!(self.phase, Phase::Open) || self.paused_until.is_some() {
            return;
        }
        match registry.deregister(socket.source_mut()) {
            Ok(()) => {
                self.paused_until = Some(now + pause);
                add(&self.settings.counters.read_pauses, 1);
            }
            Err(e) => log::debug!("no read pause for {}: {e}", self.addr),
        }
    }

    /// Ends a read pause: registered again, and read at once (what arrived
    /// meanwhile raises no event of its own before the registration).
    fn resume_reading(&mut self, registry: &Registry, now: Instant) {
        if self.paused_until.take().is_none() {
            return;
        }
        let Some(socket) = self.socket.as_mut() else {
            return;
        };
        let interest = match self.write_interest {
            true => Interest::READABLE | Interest::WRITABLE,
            false => Interest::READABLE,
        };
        if let Err(e) = registry.register(socket.source_mut(), self.token, interest) {
            if let Some(core) = &mut self.core {
                core.handle_io_error(e.kind(), now);
            }
        }
        self.more_to_read = true;
        self.resumed = true;
    }

    /// Dispatches events and tears down a connection the core has closed.
    fn after_io(&mut self, registry: &Registry, now: Instant) {
        let Some(core) = &mut self.core else { return };
        let later = self.deferring.then_some(&mut self.later);
        if let Some(closed) = dispatch(
            core,
            self.addr,
            &self.shared,
            &self.settings,
            &mut self.initial,
            &mut self.backoff,
            &mut self.kept,
            later,
        ) {
            self.teardown(registry, closed, now);
        }
    }

    /// Moves staged commands into the core (double-buffered, no allocation).
    fn drain_staging(&mut self, now: Instant) {
        self.take_staged(None);
        if self.spare_reqs.is_empty() && self.spare_buf.is_empty() {
            return;
        }
        add(&self.counters().requests, self.spare_reqs.len() as u64);
        match &mut self.core {
            Some(core) => {
                core.send_encoded_vec(&mut self.spare_buf, self.spare_reqs.drain(..), now)
            }
            None => {
                let addr = self.addr();
                let err = if self.shutting_down {
                    Error::Shutdown
                } else {
                    Error::NotConnected { addr }
                };
                fail_all(&mut self.spare_reqs, &err, &self.settings, &mut self.kept);
            }
        }
        self.spare_buf.clear();
        if self.spare_buf.capacity() > 64 << 20 {
            self.spare_buf = Vec::new();
        }
    }

    /// Takes everything staged (bytes, requests, kept publishes) into the
    /// spare buffers, setting the connection's `state` first when given,
    /// and wakes submitters waiting for room. Kept publishes among the
    /// requests get their bytes from the staged ones (before those are
    /// sent or dropped) and join those in flight, in the requests' order.
    fn take_staged(&mut self, state: Option<u8>) {
        {
            let mut staging = self.shared.staging.lock();
            if let Some(state) = state {
                self.shared.state.store(state, Ordering::Release);
            }
            self.shared.wake_pending.store(false, Ordering::Release);
            std::mem::swap(&mut staging.buf, &mut self.spare_buf);
            std::mem::swap(&mut staging.requests, &mut self.spare_reqs);
            std::mem::swap(&mut staging.kept, &mut self.spare_kept);
            self.shared.wake_waiters(&staging);
        }
        self.kept.take(&mut self.spare_kept, &self.spare_buf);
    }

    /// Fails what [`ConnDriver::take_staged`] took with `error`, and every kept
    /// publish still queued: the connection is over, so none may be left
    /// waiting for an outcome (even when a callback's panic cut the failing
    /// of their requests short).
    fn fail_staged(&mut self, error: &Error) {
        self.spare_buf.clear();
        fail_all(&mut self.spare_reqs, error, &self.settings, &mut self.kept);
        self.kept.fail_rest(error, &self.settings);
    }

    fn write(&mut self, registry: &Registry, now: Instant) {
        if self.write_blocked {
            return;
        }
        let (Some(core), Some(socket)) = (&mut self.core, &mut self.socket) else {
            return;
        };
        let done = socket.write_from(core, now);
        let blocked = done.blocked;
        if blocked {
            add(&self.settings.counters.write_would_block, 1);
        }
        add(&self.settings.counters.writes, done.writes);
        add(&self.settings.counters.bytes_written, done.bytes);
        self.write_blocked = blocked;
        if blocked && self.paused_until.is_some() {
            // Registered again with both interests: the pause ends.
            self.write_interest = true;
            self.resume_reading(registry, now);
        } else if blocked != self.write_interest {
            let interest = if blocked {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if let Err(e) = registry.reregister(socket.source_mut(), self.token, interest) {
                core.handle_io_error(e.kind(), now);
            }
            self.write_interest = blocked;
        }
        self.after_io(registry, now);
    }

    /// Timers, staged commands and writes; called on every loop turn.
    pub(crate) fn service(&mut self, registry: &Registry, now: Instant, notified: bool) {
        if self.lent_turn(registry, now) {
            return;
        }
        self.begin_turn();
        // The pause ends at its time, or earlier at a deadline of the
        // core's (a request's or the handshake's timeout): the reply it
        // waits for may be in the socket, unread because of the pause.
        let core_due = || {
            self.core
                .as_ref()
                .and_then(Connection::poll_deadline)
                .is_some_and(|d| d <= now)
        };
        if self.paused_until.is_some_and(|t| now >= t || core_due()) {
            self.resume_reading(registry, now);
        }
        if self.more_to_read {
            self.read(registry, now);
        }
        match self.phase {
            Phase::Backoff { until } => {
                // Connect first: what was staged before the first connect
                // (a detached engine takes requests at once) goes into the
                // new connection instead of failing.
                if now >= until && !self.shutting_down {
                    self.start_connect(registry, now);
                }
                if notified {
                    self.drain_staging(now);
                }
            }
            Phase::Connecting { deadline } => {
                if notified {
                    self.drain_staging(now);
                }
                if now >= deadline {
                    let err = Error::ConnectTimeout {
                        addr: self.addr(),
                        after: self.settings.connect_timeout,
                    };
                    self.teardown(registry, err, now);
                }
            }
            Phase::Open => {
                // While a held batch waits for its flush time, leave staged
                // commands where they are: the wake flag stays set, so
                // submitters do not wake this thread again, and the batch
                // picks them up right before it is written.
                let holding = self
                    .core
                    .as_ref()
                    .and_then(Connection::poll_flush_at)
                    .is_some_and(|at| at > now);
                // Backpressure: while the socket has not taken the last
                // batch, staged commands stay staged (and submitters wait).
                let room = self
                    .core
                    .as_ref()
                    .is_some_and(|c| c.unsent_len() < self.settings.max_buffered);
                let staged = notified || self.shared.wake_pending.load(Ordering::Acquire);
                if !holding && room && staged {
                    self.drain_staging(now);
                }
                if let Some(core) = &mut self.core {
                    core.handle_timeout(now);
                }
                self.after_io(registry, now);
                if let Phase::Open = self.phase {
                    self.write(registry, now);
                }
                // The socket took everything: commands that were waiting for
                // room follow at once.
                if matches!(self.phase, Phase::Open)
                    && !room
                    && self.core.as_ref().is_some_and(|c| c.unsent_len() == 0)
                    && self.shared.wake_pending.load(Ordering::Acquire)
                {
                    self.drain_staging(now);
                    self.write(registry, now);
                }
            }
            Phase::Closed => {
                if notified {
                    self.drain_staging(now);
                }
            }
        }
        self.end_turn(registry, now);
    }
}
