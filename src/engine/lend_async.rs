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
//! 1. stages its request quietly and takes the lend's lock, sends every
//!    request staged and releases the lock: one `write`;
//! 2. awaits its outcome or the descriptor's readiness, whichever comes
//!    first; on readiness it takes the lock again, empties the lend's
//!    epoll instance (so its next event makes the descriptor ready again),
//!    reads what arrived into the core and completes what it holds, its
//!    own request and others' alike.
//!
//! The task never waits for the lock on its worker: held by another
//! caller, it yields and tries again, for [`BUSY_FOR`] at most (a sync
//! caller holds the lock across its wait for a reply), then has the thread
//! take the lend back. No lock is held across an await: the thread takes
//! the lend back
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
use crate::engine::lend::{dispatch_lent, write_lent, Lent, Turn};
use crate::engine::pending::Completion;
use crate::engine::shared::{ConnShared, Counters};
use crate::engine::{Pending, Settings};
use crate::error::Error;

/// A lend's epoll instance in a tokio reactor.
pub(crate) type LendFd = Arc<AsyncFd<OwnedFd>>;

/// How long an async caller tries again for the lend's lock held by
/// another caller. An async caller holds it for one write or one read; a
/// sync caller holds it across its wait for a reply, and after this the
/// thread is asked to take the lend back instead (it cuts that wait short).
const BUSY_FOR: Duration = Duration::from_micros(200);

/// What an async caller's try on the lent connection found.
enum Step {
    /// It wrote its request, or read what there was: the lend is still lent.
    Done,
    /// Another caller holds the lend's lock: try again soon.
    Busy,
    /// The lend is the thread's (or about to be): it completes the rest.
    Gone,
}

impl ConnShared {
    /// Sends what is staged on the lent connection, an async caller's
    /// request among it (or already sent by another caller), and returns
    /// the instance's descriptor in the reactor to await.
    fn send_lent_async(&self, settings: &Settings) -> (Step, Option<LendFd>) {
        let mut guard = match self.try_turn(settings, None) {
            Turn::Mine(g) => g,
            Turn::Busy => return (Step::Busy, None),
            Turn::Thread => return (Step::Gone, None),
        };
        let Some(lent) = guard.as_mut() else {
            return (Step::Gone, None); // (`try_turn` holds it lent)
        };
        let fd = async_fd(lent);
        let give_back = write_lent(lent, settings) || fd.is_none();
        self.end_turn(guard, give_back);
        match give_back {
            true => (Step::Gone, None),
            false => (Step::Done, fd),
        }
    }

    /// Reads what arrived on the lent connection for an async caller
    /// whose request is in flight there (its descriptor was ready).
    fn read_lent_async(&self, settings: &Settings) -> Step {
        let lend = &self.lend;
        let Some(mut guard) = lend.slot.try_lock() else {
            return Step::Busy;
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
        match give_back {
            true => Step::Gone,
            false => Step::Done,
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

/// Where an async call stands.
enum Stage {
    /// Staged for the lend holder; this caller sends it at its turn.
    Staged,
    /// Sent on the lent connection: await the outcome or the descriptor.
    Sent(LendFd),
    /// The thread (or another caller) completes it.
    Await,
}

/// Sends a request as an async caller and awaits its outcome: on the lent
/// connection when it is lent, else staged for the I/O thread.
///
/// A lock held by another caller is never waited for on the worker: the
/// task yields and tries again (for [`BUSY_FOR`] at most, then the thread
/// takes the lend back and sends or reads for it).
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
    // Outside a runtime there is no reactor to register with.
    let lendable = tokio::runtime::Handle::try_current().is_ok();
    let staged = match lendable {
        true => conn.stage_for_lend(settings, encode, request),
        false => Err((encode, request)),
    };
    let staged = match staged {
        Ok(()) => true,
        Err((encode, request)) => {
            if let Err((req, e)) = conn.submit(encode, request) {
                req.user.fail_unstaged(e);
            }
            false
        }
    };
    let mut stage = if staged { Stage::Staged } else { Stage::Await };
    let mut busy_since: Option<Instant> = None;
    std::future::poll_fn(move |cx: &mut Context<'_>| loop {
        if let Poll::Ready(r) = std::pin::Pin::new(&mut pending).poll(cx) {
            return Poll::Ready(r);
        }
        let step = match &stage {
            Stage::Await => return Poll::Pending,
            Stage::Staged => {
                let (step, fd) = conn.send_lent_async(settings);
                if let Some(fd) = fd {
                    stage = Stage::Sent(fd);
                }
                step
            }
            Stage::Sent(fd) => {
                let mut ready = match fd.poll_read_ready(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(g)) => g,
                    Poll::Ready(Err(_)) => {
                        // The runtime is going away: the thread reads it.
                        conn.hand_over_to_thread();
                        stage = Stage::Await;
                        continue;
                    }
                };
                // The outcome is looked at again right after: a
                // completion read here (this task's own) need not wake
                // this task.
                pending.forget_waker();
                let step = conn.read_lent_async(settings);
                if matches!(step, Step::Done) {
                    ready.clear_ready();
                }
                step
            }
        };
        match step {
            Step::Done => busy_since = None,
            Step::Gone => stage = Stage::Await,
            Step::Busy => {
                let since = *busy_since.get_or_insert_with(Instant::now);
                if since.elapsed() < BUSY_FOR {
                    // Readiness stays set: the next poll tries again.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                conn.hand_over_to_thread();
                stage = Stage::Await;
            }
        }
    })
    .await
}
