//! One I/O thread as other threads see it: its waker, its ready list, its
//! control queue (connections to host, engines to shut down) and its
//! connection slots.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::engine::driver::ConnDriver;
use crate::engine::ready::Ready;
use crate::engine::wait::Latch;
use crate::error::Error;

/// Requests to an I/O thread that are not commands.
pub(crate) enum Control {
    /// Host these connections (in the slots their engine reserved).
    Attach(Vec<ConnDriver>),
    /// Shut these connections down: flush, then fail what is left at the
    /// deadline; count `done` down once they are gone from the thread.
    Shutdown {
        slots: Vec<usize>,
        deadline: Instant,
        done: Arc<Latch>,
    },
    /// Close these connections now, unless connected to `to` already, and
    /// reconnect them (a server given by name is looked up again first);
    /// count `done` down once done. What was in flight on them fails with
    /// [`Error::ConnectionLost`] (reason
    /// [`ConnError::Aborted`](crate::conn::ConnError::Aborted)).
    Restart {
        slots: Vec<usize>,
        to: crate::addr::ServerAddr,
        done: Arc<Latch>,
    },
    /// The runtime is gone: stop once the connections still shutting down
    /// are done.
    Stop,
    /// Panic on the I/O thread (for the tests of panic reporting).
    #[cfg(test)]
    Panic,
}

/// One I/O thread, as other threads see it.
pub(crate) struct ThreadShared {
    /// Its ready list and waker (what a connection's submitters use).
    pub(crate) ready: Arc<Ready>,
    pub(crate) control: Mutex<Vec<Control>>,
    /// Free slots of the thread's connection table.
    pub(crate) slots: Mutex<Slots>,
    /// Set (under the control lock) when the thread stopped after a panic.
    pub(crate) dead: Dead,
    /// Turns of the thread that took [`SLOW_TURN`](crate::metrics::SLOW_TURN)
    /// or longer (a callback run on it blocked it).
    pub(crate) slow_turns: std::sync::atomic::AtomicU64,
    /// Times its poll returned: the thread's wake-ups (an idle thread
    /// sleeps with no timeout, so these stay put while nothing happens).
    pub(crate) wakeups: std::sync::atomic::AtomicU64,
}

impl ThreadShared {
    pub(crate) fn new(waker: mio::Waker) -> Self {
        ThreadShared {
            ready: Arc::new(Ready::new(waker)),
            control: Mutex::new(Vec::new()),
            slots: Mutex::new(Slots::default()),
            dead: Dead::default(),
            slow_turns: Default::default(),
            wakeups: Default::default(),
        }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.get()
    }

    /// Queues `c` for the thread. A thread that has stopped cannot take
    /// it: it is settled here instead (connections fail with
    /// [`Error::RuntimeStopped`], a shutdown counts down at once).
    pub(crate) fn send_control(&self, c: Control) {
        let mut queue = self.control.lock();
        if self.dead.get() {
            drop(queue);
            settle_unserved(c);
            return;
        }
        queue.push(c);
        drop(queue);
        self.ready.wake();
    }
}

/// What a stopped thread's queue still held, settled without it.
pub(crate) fn settle_unserved(c: Control) {
    match c {
        Control::Attach(drivers) => {
            for mut d in drivers {
                d.fail_unserved(Error::RuntimeStopped);
            }
        }
        Control::Shutdown { done, .. } | Control::Restart { done, .. } => done.count_down(),
        Control::Stop => {}
        #[cfg(test)]
        Control::Panic => {}
    }
}

/// Slot numbers of one thread's connection table, reserved by engines
/// before their connections are handed over.
#[derive(Default)]
pub(crate) struct Slots {
    free: Vec<usize>,
    next: usize,
}

impl Slots {
    pub(crate) fn reserve(&mut self) -> usize {
        self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        })
    }

    pub(crate) fn release(&mut self, slot: usize) {
        self.free.push(slot);
    }

    /// Slots reserved at least once (the table's size).
    #[cfg(test)]
    pub(crate) fn handed_out(&self) -> usize {
        self.next
    }
}

/// Whether a thread has stopped (after a panic); set under its control
/// lock, so nothing is queued to it afterwards.
#[derive(Default)]
pub(crate) struct Dead(AtomicBool);

impl Dead {
    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::Release);
    }
}
