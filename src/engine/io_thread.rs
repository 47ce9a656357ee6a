//! One I/O thread of a runtime: a `mio::Poll`, a `Waker`, and a table of
//! the connections it hosts, which engines add and remove while it runs.
//! A worker thread runs the same loop and hosts tasks besides (see
//! [`Poller`](crate::engine::poller::Poller)): their turns run after the
//! loop's reads, and a task rung on the thread itself runs before it
//! polls again.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};

use crate::engine::driver::ConnDriver;
use crate::engine::host::Tasks;
use crate::engine::thread::{settle_unserved, Control, ThreadShared};
use crate::engine::wait::Latch;
use crate::error::Error;
use crate::threads::{self, PanicCount};

/// The waker's token; the connection in slot `i` uses `Token(i + 1)`.
pub(crate) const WAKER: Token = Token(0);

/// What a turn needs to know of a connection without touching it: kept
/// beside the connection table, one per slot, and refreshed after every
/// step of that connection on this thread (nothing else changes what it
/// says), so a thread hosting many quiet connections looks at a compact
/// array each turn, not at every connection.
#[derive(Clone, Copy, Default)]
struct Due {
    /// [`ConnDriver::next_deadline`].
    at: Option<Instant>,
    /// [`ConnDriver::more_to_read`]: read again at once.
    more: bool,
    /// Staged work left after its last step ([`ConnDriver::has_staged_work`]):
    /// it gets a turn each time. Work staged later comes with a notify.
    staged: bool,
}

impl Due {
    fn of(d: &ConnDriver) -> Due {
        Due {
            at: d.next_deadline(),
            more: d.more_to_read,
            staged: d.has_staged_work(),
        }
    }
}

/// Connections of one engine that are shutting down on this thread.
struct Closing {
    slots: Vec<usize>,
    deadline: Instant,
    done: Arc<Latch>,
}

pub(crate) struct IoThread {
    poll: Poll,
    shared: Arc<ThreadShared>,
    /// The connection table, by slot (engines reserve slots in
    /// `ThreadShared::slots`).
    drivers: Vec<Option<ConnDriver>>,
    /// Per slot: a submitter asked for attention since the last turn.
    flags: Vec<bool>,
    /// Per slot: when its connection needs a turn (default for an empty
    /// slot).
    due: Vec<Due>,
    closing: Vec<Closing>,
    stopping: bool,
    /// The tasks it hosts (a worker thread's), run by [`Tasks::run_due`].
    tasks: Option<Tasks>,
}

/// A poller and its waker, with the thread's shared state around the
/// waker: what an I/O loop starts from.
///
/// # Errors
///
/// [`Error::Runtime`] when the OS refuses the poller or its waker.
pub(crate) fn poller() -> Result<(Poll, Arc<ThreadShared>), Error> {
    let poll = Poll::new().map_err(|e| Error::runtime("poller", &e))?;
    let waker =
        Waker::new(poll.registry(), WAKER).map_err(|e| Error::runtime("poller's waker", &e))?;
    Ok((poll, Arc::new(ThreadShared::new(waker))))
}

impl IoThread {
    pub(crate) fn new(poll: Poll, shared: Arc<ThreadShared>) -> Self {
        IoThread {
            poll,
            shared,
            drivers: Vec::new(),
            flags: Vec::new(),
            due: Vec::new(),
            closing: Vec::new(),
            stopping: false,
            tasks: None,
        }
    }

    /// The loop hosts `tasks` too (their turns run on it).
    pub(crate) fn hosting(mut self, tasks: Tasks) -> Self {
        self.tasks = Some(tasks);
        self
    }

    /// Runs until the runtime stops. A panic in a turn is caught here,
    /// reported in `panics`, and ends every connection of the thread with
    /// [`Error::RuntimeStopped`], so nothing waits for a thread that is
    /// gone.
    pub(crate) fn run(mut self, panics: &PanicCount) {
        let outcome = catch_unwind(AssertUnwindSafe(|| self.run_turns()));
        if let Err(payload) = outcome {
            let name = std::thread::current()
                .name()
                .unwrap_or("shardsub-io")
                .to_owned();
            threads::report(&name, &*payload, panics);
            self.stop_after_panic();
        }
    }

    fn run_turns(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut notified: Vec<usize> = Vec::new();
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("shardsub-io");
        // When the last turn started (after its poll returned): this read
        // of the clock ends it (no read of its own).
        let mut busy_since: Option<Instant> = None;
        // Of that turn, the time its tasks' turns took: each task reports
        // its own slow turn (a worker's, the handler's), so the loop counts
        // only the rest.
        let mut in_tasks = Duration::ZERO;
        loop {
            let now = Instant::now();
            if let Some(since) = busy_since.take() {
                let took = now
                    .saturating_duration_since(since)
                    .saturating_sub(in_tasks);
                if took >= crate::metrics::SLOW_TURN {
                    self.slow(took);
                }
            }
            // epoll's timeout has millisecond resolution, so a flush-delay
            // deadline may be overshot by up to 1 ms when nothing else
            // happens. Holds only happen while written requests await
            // replies, and every reply wakes this wait (and, once all are in,
            // releases the held batch at once), so sleeping precisely, blind
            // to those replies, would be worse.
            let timeout = self.timeout(now);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    log::error!("I/O thread poll failed: {e}; stopping its connections");
                    self.stop_after_panic();
                    return;
                }
                events.clear();
            }
            self.shared.wakeups.fetch_add(1, Ordering::Relaxed);
            let now = Instant::now();
            busy_since = Some(now);
            self.on_events(&events, now);
            let controls = std::mem::take(&mut *self.shared.control.lock());
            for c in controls {
                self.handle_control(c, now);
            }
            // Reading can take a while (up to the read budget per
            // connection): timers, tasks and shutdown deadlines see the
            // clock.
            let now = Instant::now();
            in_tasks = match &self.tasks {
                Some(tasks) => tasks.run_due(now, thread),
                None => Duration::ZERO,
            };
            // After the tasks' turns (which may have taken a while).
            let now = now + in_tasks;
            std::mem::swap(&mut *self.shared.ready.list.lock(), &mut notified);
            for &i in &notified {
                if let Some(f) = self.flags.get_mut(i) {
                    *f = true;
                }
            }
            notified.clear();
            self.service(now);
            self.finish_closing(now);
            if self.stopping && self.closing.is_empty() {
                let registry = self.poll.registry();
                for d in self.drivers.iter_mut().flatten() {
                    d.abort(registry, now);
                }
                return;
            }
        }
    }

    /// How long the next poll may sleep: not at all while a connection
    /// has more to read or a task is rung, until the earliest deadline of
    /// a connection, a shutdown or a task otherwise (`None`: until woken).
    fn timeout(&self, now: Instant) -> Option<Duration> {
        let mut next = self.closing.iter().map(|c| c.deadline).min();
        let mut immediate = false;
        for due in &self.due {
            immediate |= due.more;
            if let Some(t) = due.at {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        if let Some(t) = self.tasks.as_ref().and_then(|t| t.next_due(now)) {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if immediate {
            Some(Duration::ZERO)
        } else {
            next.map(|t| t.saturating_duration_since(now))
        }
    }

    /// Hands the poll's socket events to their connections.
    fn on_events(&mut self, events: &Events, now: Instant) {
        let registry = self.poll.registry();
        for ev in events {
            if ev.token() == WAKER {
                continue;
            }
            let slot = ev.token().0 - 1;
            let Some(Some(d)) = self.drivers.get_mut(slot) else {
                continue;
            };
            let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
            // An error or a closed write side clears a blocked write too,
            // so the next write reports it.
            let writable = ev.is_writable() || ev.is_write_closed() || ev.is_error();
            // With the peer's FIN already in when the event fired, no
            // later event comes: a short read must not end the reading.
            let hangup = ev.is_read_closed() || ev.is_error();
            d.on_socket_event(registry, readable, writable, hangup, now);
            if let Some(due) = self.due.get_mut(slot) {
                *due = Due::of(d);
            }
            if let Some(f) = self.flags.get_mut(slot) {
                *f = true; // serviced this turn: it may have work now
            }
        }
    }

    /// Gives a turn to each connection with something to do (notified,
    /// more to read, staged work, or a deadline passed), so a thread
    /// hosting many quiet connections stays cheap.
    fn service(&mut self, now: Instant) {
        let registry = self.poll.registry();
        for (slot, due) in self.due.iter_mut().enumerate() {
            let notified = self.flags.get_mut(slot).map(std::mem::take) == Some(true);
            let turn = notified || due.more || due.staged || due.at.is_some_and(|t| t <= now);
            if !turn {
                continue;
            }
            if let Some(Some(d)) = self.drivers.get_mut(slot) {
                d.service(registry, now, notified);
                *due = Due::of(d);
            }
        }
    }

    /// A turn held this thread `took`: counted in
    /// [`Runtime::slow_turns`](crate::Runtime::slow_turns) and logged.
    fn slow(&self, took: Duration) {
        self.shared.slow_turns.fetch_add(1, Ordering::Relaxed);
        let thread = std::thread::current();
        log::warn!(
            "{}: a turn took {} ms: a Pending::then callback (or an \
             observer's) run on it blocked it, and every connection it serves \
             waited (see GUIDE.md, \"What runs where\")",
            thread.name().unwrap_or("shardsub-io"),
            took.as_millis()
        );
    }

    fn handle_control(&mut self, c: Control, now: Instant) {
        let registry = self.poll.registry();
        match c {
            Control::Attach(drivers) => {
                for d in drivers {
                    let slot = d.shared.local;
                    if self.drivers.len() <= slot {
                        self.drivers.resize_with(slot + 1, || None);
                        self.flags.resize(slot + 1, false);
                        self.due.resize(slot + 1, Due::default());
                    }
                    // Its first turn connects it and takes what was staged.
                    self.flags[slot] = true;
                    self.due[slot] = Due::of(&d);
                    self.drivers[slot] = Some(d);
                }
            }
            Control::Shutdown {
                slots,
                deadline,
                done,
            } => {
                for &s in &slots {
                    if let Some(Some(d)) = self.drivers.get_mut(s) {
                        d.begin_shutdown(registry, now);
                        if let Some(due) = self.due.get_mut(s) {
                            *due = Due::of(d);
                        }
                    }
                }
                self.closing.push(Closing {
                    slots,
                    deadline,
                    done,
                });
            }
            Control::Restart { slots, to, done } => {
                for &s in &slots {
                    if let Some(Some(d)) = self.drivers.get_mut(s) {
                        d.restart(registry, to, now);
                        if let Some(due) = self.due.get_mut(s) {
                            *due = Due::of(d);
                        }
                        // A turn now: one waiting to reconnect goes at once.
                        if let Some(f) = self.flags.get_mut(s) {
                            *f = true;
                        }
                    }
                }
                done.count_down();
            }
            Control::Stop => self.stopping = true,
            #[cfg(test)]
            Control::Panic => panic!("I/O thread panic provoked by a test"),
        }
    }

    /// Removes the connections of every engine whose shutdown is complete
    /// (all quiet) or out of time, and tells the engine.
    fn finish_closing(&mut self, now: Instant) {
        let registry = self.poll.registry();
        let drivers = &mut self.drivers;
        let dues = &mut self.due;
        let shared = &self.shared;
        self.closing.retain(|c| {
            let quiet = c.slots.iter().all(|&s| {
                drivers
                    .get(s)
                    .and_then(Option::as_ref)
                    .is_none_or(ConnDriver::is_quiet)
            });
            if !quiet && now < c.deadline {
                return true;
            }
            let mut slots = shared.slots.lock();
            for &s in &c.slots {
                if let Some(mut d) = drivers.get_mut(s).and_then(Option::take) {
                    d.abort(registry, now);
                    slots.release(s);
                }
                if let Some(due) = dues.get_mut(s) {
                    *due = Due::default();
                }
            }
            drop(slots);
            c.done.count_down();
            false
        });
    }

    /// The thread is stopping on a failure: no more work is queued to it,
    /// and everything it hosted or was handed fails at once.
    fn stop_after_panic(&mut self) {
        let queued = {
            let mut queue = self.shared.control.lock();
            self.shared.dead.set();
            std::mem::take(&mut *queue)
        };
        let now = Instant::now();
        let registry = self.poll.registry();
        for d in self.drivers.iter_mut().flatten() {
            d.stop_after_panic(registry, now);
        }
        for c in std::mem::take(&mut self.closing) {
            c.done.count_down();
        }
        for c in queued {
            settle_unserved(c);
        }
    }
}
