//! State shared between submitting threads and the I/O threads.
//!
//! Each connection has a staging area: submitting threads encode commands
//! straight into its buffer and append their completions, under a mutex held
//! only for that copy. An atomic flag makes only the first submitter after a
//! drain notify the I/O thread, and the notice writes the thread's waker
//! only while the thread sleeps in its poll (see [`Ready`]). The I/O thread
//! swaps the staging buffers with its own spares (double buffering), so
//! steady-state submission allocates nothing. A sequential caller may get
//! the whole connection lent instead (see `lend.rs`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::conn::Request;
use crate::engine::driver::ConnDriver;
use crate::engine::lend::Lend;
use crate::engine::pending::Completion;
use crate::engine::runtime::{Dead, Latch, Slots};
use crate::error::Error;
use crate::observer::ConnInfo;
use crate::threads::PanicCount;

/// Connection states seen by submitters.
pub(crate) const CONNECTING: u8 = 0;
pub(crate) const UP: u8 = 1;
pub(crate) const DOWN: u8 = 2;
pub(crate) const CLOSED: u8 = 3;
/// Closed because its I/O thread stopped after a panic.
pub(crate) const STOPPED: u8 = 4;

/// Commands waiting for the I/O thread.
#[derive(Default)]
pub(crate) struct Staging {
    pub(crate) buf: Vec<u8>,
    pub(crate) requests: VecDeque<Request<Completion>>,
    /// The kept requests among `requests`, in order
    /// ([`Completion::Kept`]): none until the first.
    pub(crate) kept: crate::engine::kept::StagedKept,
    /// Submitters waiting for room (see [`ConnShared::space`]).
    pub(crate) waiters: usize,
}

/// One connection, as submitters see it.
pub(crate) struct ConnShared {
    /// Which connection; `info.addr` is the address at build.
    pub(crate) info: ConnInfo,
    /// The address connected to now (a server given by name may move).
    pub(crate) current: parking_lot::Mutex<crate::addr::ServerAddr>,
    /// The server's name, looked up again before every reconnect (`None`
    /// for an address given as an IP).
    pub(crate) named: Option<Arc<crate::engine::resolve::Named>>,
    /// The connection while its I/O thread lends it to a sequential
    /// caller (see `lend.rs`).
    pub(crate) lend: Lend,
    pub(crate) staging: Mutex<Staging>,
    /// One of the state constants; written under the staging lock.
    pub(crate) state: AtomicU8,
    /// Set by the first submitter after a drain; cleared by the drain.
    pub(crate) wake_pending: AtomicBool,
    pub(crate) thread: Arc<ThreadShared>,
    /// Index in the owning thread's connection table.
    pub(crate) local: usize,
    /// Signalled when the I/O thread takes the staged bytes (or the
    /// connection goes down), for submitters waiting for room.
    pub(crate) space: Condvar,
    /// Staged bytes beyond which submitters wait (backpressure).
    pub(crate) max_buffered: usize,
    /// How long a submitter waits for room; `None` waits as long as the
    /// connection is alive.
    pub(crate) max_wait: Option<Duration>,
}

impl ConnShared {
    /// The address connected to now.
    pub(crate) fn addr(&self) -> crate::addr::ServerAddr {
        *self.current.lock()
    }

    /// Encodes a command into the staging area. On a connection that cannot
    /// take it, gives the completion back with the reason.
    pub(crate) fn submit<F>(
        &self,
        encode: F,
        request: Request<Completion>,
    ) -> Result<(), (Request<Completion>, Error)>
    where
        F: FnOnce(&mut Vec<u8>),
    {
        self.submit_with((encode, request), |staging, (encode, request)| {
            encode(&mut staging.buf);
            request
        })
        .map_err(|((_, request), e)| (request, e))
    }

    /// Encodes a command into the staging area with `encode`, which appends
    /// it to the staged bytes and returns its request (so a kept publish
    /// can say where its bytes lie). On a connection that cannot take it,
    /// gives `state` back, unused, with the reason.
    pub(crate) fn submit_with<S, F>(&self, state: S, encode: F) -> Result<(), (S, Error)>
    where
        F: FnOnce(&mut Staging, S) -> Request<Completion>,
    {
        let mut staging = self.staging.lock();
        if let Err(e) = self.check_state() {
            return Err((state, e));
        }
        if staging.buf.len() >= self.max_buffered {
            // The server is not keeping up: wait for the I/O thread to take
            // the staged bytes (it does once the socket has taken the last
            // batch), bounded by `max_wait`.
            let deadline = self.max_wait.map(|d| (Instant::now() + d, d));
            staging.waiters += 1;
            while staging.buf.len() >= self.max_buffered {
                let timed_out = match deadline {
                    Some((at, _)) => self.space.wait_until(&mut staging, at).timed_out(),
                    None => {
                        self.space.wait(&mut staging);
                        false
                    }
                };
                if let Err(e) = self.check_state() {
                    staging.waiters -= 1;
                    return Err((state, e));
                }
                if timed_out && staging.buf.len() >= self.max_buffered {
                    staging.waiters -= 1;
                    let waited = deadline.map_or(Duration::ZERO, |(_, d)| d);
                    return Err((
                        state,
                        Error::Backpressure {
                            addr: self.addr(),
                            waited,
                        },
                    ));
                }
            }
            staging.waiters -= 1;
        }
        let request = encode(&mut staging, state);
        staging.requests.push_back(request);
        let wake = !self.wake_pending.swap(true, Ordering::AcqRel);
        drop(staging);
        if wake {
            self.thread.notify(self.local);
        }
        Ok(())
    }

    /// Whether the connection takes submissions (call under the staging lock).
    fn check_state(&self) -> Result<(), Error> {
        match self.state.load(Ordering::Acquire) {
            DOWN => Err(Error::NotConnected { addr: self.addr() }),
            CLOSED => Err(Error::Shutdown),
            STOPPED => Err(Error::RuntimeStopped),
            _ => Ok(()),
        }
    }

    /// Wakes submitters waiting for room (call with the staging lock held).
    pub(crate) fn wake_waiters(&self, staging: &Staging) {
        if staging.waiters > 0 {
            self.space.notify_all();
        }
    }

    pub(crate) fn is_up(&self) -> bool {
        self.state.load(Ordering::Acquire) == UP
    }
}

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
    pub(crate) waker: mio::Waker,
    /// Connections (by slot) with staged work.
    pub(crate) ready: Mutex<Vec<usize>>,
    pub(crate) control: Mutex<Vec<Control>>,
    /// Free slots of the thread's connection table.
    pub(crate) slots: Mutex<Slots>,
    /// Set (under the control lock) when the thread stopped after a panic.
    pub(crate) dead: Dead,
    /// Turns of the thread that took [`SLOW_TURN`](crate::metrics::SLOW_TURN)
    /// or longer (a callback run on it blocked it).
    pub(crate) slow_turns: std::sync::atomic::AtomicU64,
}

impl ThreadShared {
    pub(crate) fn new(waker: mio::Waker) -> Self {
        ThreadShared {
            waker,
            ready: Mutex::new(Vec::new()),
            control: Mutex::new(Vec::new()),
            slots: Mutex::new(Slots::default()),
            dead: Dead::default(),
            slow_turns: Default::default(),
        }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.get()
    }

    pub(crate) fn notify(&self, local: usize) {
        self.ready.lock().push(local);
        if let Err(e) = self.waker.wake() {
            log::error!("cannot wake I/O thread: {e}");
        }
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
        if let Err(e) = self.waker.wake() {
            log::error!("cannot wake I/O thread: {e}");
        }
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

/// Engine-wide counters (relaxed atomics, bumped per batch, not per call,
/// with [`crate::metrics::add`]): what [`Engine::stats`](crate::engine::Engine::stats)
/// reads, the low-level engine's own, apart from the Pub/Sub metrics.
#[derive(Default, Debug)]
pub(crate) struct EngineCounters {
    pub(crate) requests: AtomicU64,
    pub(crate) replies: AtomicU64,
    pub(crate) error_replies: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) publish_failed: AtomicU64,
    pub(crate) pushes: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) write_would_block: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) reads: AtomicU64,
    pub(crate) lent: AtomicU64,
    pub(crate) connects: AtomicU64,
    pub(crate) disconnects: AtomicU64,
    /// The I/O threads that panicked (shared with the Pub/Sub layer above,
    /// when there is one).
    pub(crate) thread_panics: PanicCount,
}

/// A snapshot of the engine's counters.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Requests handed to connections (publishes and commands).
    pub requests: u64,
    /// Replies received.
    pub replies: u64,
    /// Replies that were errors (including fire-and-forget publishes).
    pub error_replies: u64,
    /// Requests that failed without a reply (connection lost, timeout…).
    pub failed: u64,
    /// Fire-and-forget publishes ([`Engine::publish`](crate::engine::Engine::publish))
    /// that were taken and then failed: an error reply, or no reply (their
    /// connection broke, the engine shut down). A publish refused at once
    /// returned its error instead. The publish engine of a
    /// [`PubSub`](crate::PubSub) counts its acknowledged publishes'
    /// failures here too (its [`Metrics::publish_errors`](crate::Metrics::publish_errors)).
    pub publish_failed: u64,
    /// Push frames received.
    pub pushes: u64,
    /// `write` system calls that wrote something.
    pub writes: u64,
    /// `write` system calls that found the socket full (`WouldBlock`).
    pub write_would_block: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// `read` system calls that returned data.
    pub reads: u64,
    /// Requests a sequential caller sent on a connection its I/O thread
    /// had lent ([`Engine::publish_wait`], [`Engine::command`]): its own
    /// and those of the callers it sent along with it, each counted once
    /// when it is handed to the lent connection (the thread reads the
    /// replies of those whose callers hand the lend back); included in
    /// `requests`.
    ///
    /// [`Engine::publish_wait`]: crate::engine::Engine::publish_wait
    /// [`Engine::command`]: crate::engine::Engine::command
    pub lent: u64,
    /// Successful handshakes (first connects and reconnects).
    pub connects: u64,
    /// Connections lost or closed.
    pub disconnects: u64,
    /// I/O threads that panicked (each also logged with `log::error!`). A
    /// panicked thread's connections stop; alert on any non-zero value.
    pub thread_panics: u64,
}

impl EngineCounters {
    pub(crate) fn snapshot(&self) -> EngineStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EngineStats {
            requests: g(&self.requests),
            replies: g(&self.replies),
            error_replies: g(&self.error_replies),
            failed: g(&self.failed),
            publish_failed: g(&self.publish_failed),
            pushes: g(&self.pushes),
            writes: g(&self.writes),
            write_would_block: g(&self.write_would_block),
            bytes_written: g(&self.bytes_written),
            reads: g(&self.reads),
            lent: g(&self.lent),
            connects: g(&self.connects),
            disconnects: g(&self.disconnects),
            thread_panics: self.thread_panics.get(),
        }
    }
}
