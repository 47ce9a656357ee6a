//! The lend for async callers on tokio (feature `tokio`).
//!
//! A task that awaits each reply through [`Pending`] costs the staging
//! path: an eventfd wake of the I/O thread, its write, its wait for the
//! reply, its read, then a wake of the task's worker (two eventfd wakes,
//! about four and a half context switches and nine system calls per
//! request). A task cannot wait on the lend's epoll instance the way a
//! thread does (that would block its worker), but the instance's own
//! descriptor is pollable: it is readable while the socket registered in
//! it has news, or the thread's waker has fired. So the descriptor (a
//! duplicate, owned by the registration) goes into the runtime's reactor,
//! once per connection, and an async caller on a lent connection:
//!
//! 1. stages its request quietly and takes the lend's lock (briefly: at
//!    most [`LOCK_WAIT`], then it has the thread send it), sends every
//!    request staged and releases the lock: one `write`;
//! 2. awaits its outcome or the descriptor's readiness, whichever comes
//!    first; on readiness it takes the lock again, empties the lend's
//!    epoll instance (so its next event makes the descriptor ready again),
//!    reads what arrived into the core and completes what it holds, its
//!    own request and others' alike.
//!
//! No lock is held across an await: the thread takes the lend back
//! whenever it must, exactly as from a sync caller, and completes what
//! is still in flight; a caller that finds the lend gone just awaits its
//! outcome. A read that ends the stream, fails or meets a closed core
//! hands the lend back, as on the sync path. A future dropped before its
//! reply leaves that reply to the next reader (another caller, or the
//! thread once the lease runs out).

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::conn::Request;
use crate::engine::lend::{dispatch_lent, write_lent, Lent};
use crate::engine::pending::Completion;
use crate::engine::shared::{ConnShared, Counters};
use crate::engine::{Pending, Settings};
use crate::error::Error;

/// A lend's epoll instance in a tokio reactor.
pub(crate) type LendFd = Arc<AsyncFd<OwnedFd>>;

/// How long an async caller waits for the lend's lock. Another async
/// caller holds it for one write or one read; a sync caller holds it
/// across its wait for a reply, and then the thread is asked to take the
/// lend back instead (it cuts that wait short).
const LOCK_WAIT: Duration = Duration::from_micros(200);

/// What an async caller's read on the lent connection found.
enum Step {
    /// It read what there was; the lend is still lent.
    Read,
    /// The lend is the thread's (or about to be): it completes the rest.
    Gone,
}

impl ConnShared {
    /// An async caller's request on the lent connection: staged and sent
    /// on this thread. `Ok(Some(fd))`: sent; await the outcome or `fd`'s
    /// readiness (then [`ConnShared::read_lent_async`]). `Ok(None)`:
    /// staged, and the thread sends it. `Err` gives the encoder and the
    /// request back when the connection is not lent (stage them; it is lent
    /// after its next idle turn), or there is no tokio runtime here.
    fn call_lent_async<F>(
        &self,
        settings: &Settings,
        encode: F,
        request: Request<Completion>,
    ) -> Result<Option<LendFd>, (F, Request<Completion>)>
    where
        F: FnOnce(&mut Vec<u8>),
    {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err((encode, request));
        }
        self.stage_for_lend(settings, encode, request)?;
        // Staged without a wake: from here on it is sent, by this caller,
        // by another one holding the lend, or by the thread.
        let Some(mut guard) = self.lock_turn(settings, Instant::now() + LOCK_WAIT) else {
            return Ok(None);
        };
        let Some(lent) = guard.as_mut() else {
            return Ok(None); // (`lock_turn` holds it lent)
        };
        let fd = async_fd(lent);
        let give_back = write_lent(lent, settings) || fd.is_none();
        self.end_turn(guard, give_back);
        Ok(fd)
    }

    /// Reads what arrived on the lent connection for an async caller
    /// whose request is in flight there (its descriptor was ready).
    fn read_lent_async(&self, settings: &Settings) -> Step {
        let lend = &self.lend;
        let Some(mut guard) = lend.slot.try_lock_for(LOCK_WAIT) else {
            self.hand_over_to_thread();
            return Step::Gone;
        };
        let usable = |l: &Lent| l.io_error.is_none() && l.closed.is_none();
        let Some(lent) = guard.as_mut().filter(|l| usable(l)) else {
            return Step::Gone;
        };
        if lend.reclaim.load(Ordering::SeqCst) || lend.handback.load(Ordering::SeqCst) {
            return Step::Gone;
        }
        // Empty the instance: its next event makes the descriptor ready
        // again (its registration in the reactor is edge-triggered).
        let crate::engine::lend::LendPoll { poll, events, .. } = &mut lent.poll;
        if poll.poll(events, Some(Duration::ZERO)).is_err() {
            drop(guard);
            self.hand_over_to_thread();
            return Step::Gone;
        }
        let give_back = read_ready(self, lent, settings);
        self.end_turn(guard, give_back);
        if give_back {
            Step::Gone
        } else {
            Step::Read
        }
    }
}

/// Reads until the socket is drained, completing what arrived, and runs
/// the core's timeouts. Returns whether to hand the lend back.
fn read_ready(shared: &ConnShared, lent: &mut Lent, settings: &Settings) -> bool {
    lent.maybe_more = false;
    loop {
        match lent.socket.read_into(&mut lent.core, Instant::now()) {
            Ok(0) => return true, // the thread reads the end again
            Ok(_) => {
                Counters::add(&settings.counters.reads, 1);
                if dispatch_lent(shared, lent, settings) {
                    return true;
                }
                if lent.socket.drained(&lent.core) {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                lent.io_error = Some(e.kind());
                return true;
            }
        }
    }
    let now = Instant::now();
    if lent.core.poll_deadline().is_some_and(|d| d <= now) {
        lent.core.handle_timeout(now);
        return dispatch_lent(shared, lent, settings);
    }
    false
}

/// The lend's epoll instance in the current runtime's reactor, registered
/// at the first async call on this connection (`None` when that fails).
fn async_fd(lent: &mut Lent) -> Option<LendFd> {
    if let Some(fd) = &lent.poll.async_fd {
        return Some(fd.clone());
    }
    // SAFETY: the descriptor is the epoll instance's, open while `lent`
    // (which owns the instance) is borrowed here; the borrow ends with
    // the duplicate made from it.
    let instance = unsafe { BorrowedFd::borrow_raw(lent.poll.poll.as_raw_fd()) };
    let dup = instance.try_clone_to_owned().ok()?;
    // SAFETY: the registration owns `dup`, an `OwnedFd`: open, and the
    // same descriptor, until the registration drops it.
    let fd = unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }.ok()?;
    let fd = Arc::new(fd);
    lent.poll.async_fd = Some(fd.clone());
    Some(fd)
}

/// Sends a request as an async caller and awaits its outcome: on the lent
/// connection when it is lent, else staged for the I/O thread.
pub(crate) async fn call_async<T, F>(
    conn: &ConnShared,
    settings: &Settings,
    encode: F,
    request: Request<Completion>,
    mut pending: Pending<T>,
) -> Result<T, Error>
where
    T: Send + 'static,
    F: FnOnce(&mut Vec<u8>),
{
    let mut fd = match conn.call_lent_async(settings, encode, request) {
        Ok(fd) => fd,
        Err((encode, request)) => {
            if let Err((req, e)) = conn.submit(encode, request) {
                req.user.fail_unstaged(e);
            }
            None
        }
    };
    std::future::poll_fn(move |cx: &mut Context<'_>| loop {
        if let Poll::Ready(r) = std::pin::Pin::new(&mut pending).poll(cx) {
            return Poll::Ready(r);
        }
        let Some(f) = &fd else {
            return Poll::Pending; // the thread (or a holder) completes it
        };
        let mut ready = match f.poll_read_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(g)) => g,
            Poll::Ready(Err(_)) => {
                // The runtime is going away: the thread reads it.
                fd = None;
                conn.hand_over_to_thread();
                continue;
            }
        };
        match conn.read_lent_async(settings) {
            Step::Read => ready.clear_ready(),
            Step::Gone => fd = None,
        }
    })
    .await
}
