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
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::conn::{ReplyKind, Request};
use crate::engine::lent::Lend;
use crate::engine::pending::Completion;
use crate::engine::ready::Ready;
use crate::error::Error;
use crate::observer::ConnInfo;

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
    pub(crate) ready: Arc<Ready>,
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

/// What a submitter does when a connection's staged bytes are at their
/// bound ([`ConnShared::max_buffered`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// Waits for the I/O thread to take them, bounded by `max_wait`: an
    /// application's thread (backpressure).
    Wait,
    /// Stages past the bound at once: a library thread that an I/O thread
    /// may be waiting on, or that is one (the control thread under the
    /// publish core's lock, which an I/O thread carrying out a reply needs;
    /// an I/O thread, which may be the one to take the bytes). What it
    /// stages is bounded elsewhere: publishes held within the hold's
    /// limits, or already in flight.
    Past,
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
        self.submit_with(
            (encode, request),
            Room::Wait,
            |staging, (encode, request)| {
                encode(&mut staging.buf);
                request
            },
        )
        .map_err(|((_, request), e)| (request, e))
    }

    /// Encodes a command into the staging area with `encode`, which appends
    /// it to the staged bytes and returns its request (so a kept publish
    /// can say where its bytes lie). At the bound, waits or not as `room`
    /// says. On a connection that cannot take it, gives `state` back,
    /// unused, with the reason.
    pub(crate) fn submit_with<S, F>(
        &self,
        state: S,
        room: Room,
        encode: F,
    ) -> Result<(), (S, Error)>
    where
        F: FnOnce(&mut Staging, S) -> Request<Completion>,
    {
        let mut staging = self.staging.lock();
        if let Err(e) = self.check_state() {
            return Err((state, e));
        }
        if staging.buf.len() >= self.max_buffered && room == Room::Wait {
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
            self.ready.notify(self.local);
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

/// Stages `ASKING`, its reply discarded, ahead of what the caller stages
/// next under the same lock.
pub(crate) fn stage_asking(staging: &mut Staging) {
    resp::encode_command(&mut staging.buf, [&b"ASKING"[..]]);
    staging.requests.push_back(Request {
        user: Completion::Discard,
        kind: ReplyKind::Single,
    });
}
