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
//! 2. awaits its outcome or the descriptor's readiness (`readable()`, which
//!    wakes every task waiting on it), whichever comes first; on readiness
//!    it takes the lock again, empties the lend's epoll instance (so its
//!    next event makes the descriptor ready again), reads what arrived into
//!    the core and completes what it holds, its own request and others'
//!    alike (a task that finds no event and nothing left behind skips the
//!    read).
//!
//! The task never waits for the lock on its worker: held by another
//! caller, it yields and tries again, for [`BUSY_FOR`] at most (a sync
//! caller holds the lock across its wait for a reply), then has the thread
//! take the lend back. No lock is held across an await: the thread takes
//! the lend back whenever it must, exactly as from a sync caller, and
//! completes what is still in flight; a caller that finds the lend gone
//! just awaits its outcome. A read that ends the stream, fails or meets a
//! closed core hands the lend back, as on the sync path. A future dropped
//! after its request was sent leaves the reply to the next reader (another
//! caller, or the thread once the lease runs out); dropped while its
//! request was still staged, it hands the request to the thread.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::conn::Request;
use crate::engine::lend::{dispatch_lent, write_lent};
use crate::engine::lent::{LendFd, Lent, Turn};
use crate::engine::pending::Completion;
use crate::engine::settings::Settings;
use crate::engine::shared::ConnShared;
use crate::engine::Pending;
use crate::error::Error;
use crate::metrics::add;

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
    /// the instance's descriptor in the reactor to await; else
    /// [`Step::Busy`] or [`Step::Gone`].
    fn send_lent_async(&self, settings: &Settings) -> Result<LendFd, Step> {
        let mut guard = match self.try_turn(settings, None) {
            Turn::Mine(g) => g,
            Turn::Busy => return Err(Step::Busy),
            Turn::Thread => return Err(Step::Gone),
        };
        let Some(lent) = guard.as_mut() else {
            return Err(Step::Gone); // (`try_turn` holds it lent)
        };
        let fd = async_fd(lent);
        let mut give_back = write_lent(lent, settings) || fd.is_none();
        if !give_back && lent.maybe_more {
            // A sync caller's last read filled its room and it stopped at
            // its own reply: the rest waits in the socket, and its epoll
            // event is spent, so no readiness would come for it.
            give_back = read_ready(self, lent, settings);
        }
        self.end_turn(guard, give_back);
        fd.filter(|_| !give_back).ok_or(Step::Gone)
    }

    /// Drops the lend's registration in a reactor (it failed: its runtime
    /// is going away); the next async caller registers again. Skipped when
    /// another caller holds the lock (it may drop it next time).
    fn forget_async_fd(&self) {
        if let Some(mut guard) = self.lend.slot.try_lock() {
            if let Some(lent) = guard.as_mut() {
                lent.poll.async_fd = None;
            }
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
        let crate::engine::lent::LendPoll { poll, events, .. } = &mut lent.poll;
        if poll.poll(events, Some(Duration::ZERO)).is_err() {
            drop(guard);
            self.hand_over_to_thread();
            return Step::Gone;
        }
        // Every task waiting on the descriptor is woken; the first one
        // takes the event and reads. No event since, and no bytes left
        // behind: nothing to read (one `read` saved per task woken).
        let news = !events.is_empty() || lent.maybe_more;
        let give_back = if news {
            read_ready(self, lent, settings)
        } else {
            run_deadline(self, lent, settings)
        };
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
                add(&settings.counters.reads, 1);
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
    run_deadline(shared, lent, settings)
}

/// Runs the lent core's timeouts when one is due. Returns whether to hand
/// the lend back.
fn run_deadline(shared: &ConnShared, lent: &mut Lent, settings: &Settings) -> bool {
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
    if lent.poll.async_fd_failed {
        return None;
    }
    let fd = register(lent);
    lent.poll.async_fd_failed = fd.is_none();
    lent.poll.async_fd.clone_from(&fd);
    fd
}

/// Registers a duplicate of the lend's epoll descriptor in the current
/// runtime's reactor. `None` when that fails, or panics: a runtime built
/// without `enable_io` has no reactor, and tokio panics then (caught here,
/// once per connection; its message still reaches the panic hook).
fn register(lent: &Lent) -> Option<LendFd> {
    // SAFETY: the descriptor is the epoll instance's, open while `lent`
    // (which owns the instance) is borrowed here; the borrow ends with
    // the duplicate made from it.
    let instance = unsafe { BorrowedFd::borrow_raw(lent.poll.poll.as_raw_fd()) };
    let dup = instance.try_clone_to_owned().ok()?;
    // SAFETY: the registration owns `dup`, an `OwnedFd`: open, and the
    // same descriptor, until the registration drops it.
    let registered = std::panic::catch_unwind(move || unsafe {
        AsyncFd::register_with_interest(dup, Interest::READABLE)
    });
    Some(Arc::new(registered.ok()?.ok()?))
}

/// Hands a staged request to the thread if the call is dropped before it
/// was sent (cancelled by `select!` or a timeout): a quietly staged request
/// wakes nobody, so without this it could wait for the next submitter.
struct StagedUntilSent<'a> {
    conn: &'a ConnShared,
    staged: bool,
}

impl Drop for StagedUntilSent<'_> {
    fn drop(&mut self) {
        if self.staged {
            self.conn.hand_over_to_thread();
        }
    }
}

/// What came first: the outcome, or the lend's descriptor ready.
enum First<T, G> {
    Outcome(Result<T, Error>),
    Ready(G),
}

/// Sends a request as an async caller and awaits its outcome: on the lent
/// connection when it is lent, else staged for the I/O thread.
///
/// A lock held by another caller is never waited for on the worker: the
/// task yields and tries again (for [`BUSY_FOR`] at most, then the thread
/// takes the lend back and sends or reads for it). The descriptor is
/// awaited through `readable()`, which wakes every task waiting on it (a
/// connection's tasks share it).
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
    if let Err((encode, request)) = staged {
        if let Err((req, e)) = conn.submit(encode, request) {
            req.user.fail_unstaged(e);
        }
        return pending.await;
    }
    let mut unsent = StagedUntilSent { conn, staged: true };
    let mut busy = Busy::default();
    let fd = loop {
        match conn.send_lent_async(settings) {
            Ok(fd) => break fd,
            Err(Step::Busy) if busy.again() => tokio::task::yield_now().await,
            Err(Step::Busy) => {
                drop(unsent); // the thread sends it
                return pending.await;
            }
            Err(_) => {
                unsent.staged = false; // the thread's now
                return pending.await;
            }
        }
    };
    unsent.staged = false;
    let mut busy = Busy::default();
    loop {
        let first = {
            let mut readable = std::pin::pin!(fd.readable());
            std::future::poll_fn(|cx: &mut Context<'_>| {
                if let Poll::Ready(r) = std::pin::Pin::new(&mut pending).poll(cx) {
                    return Poll::Ready(First::Outcome(r));
                }
                readable.as_mut().poll(cx).map(First::Ready)
            })
            .await
        };
        let mut ready = match first {
            First::Outcome(r) => return r,
            First::Ready(Ok(g)) => g,
            First::Ready(Err(_)) => {
                // The runtime that registered it is going away: the thread
                // reads it, and the next call registers again.
                conn.forget_async_fd();
                conn.hand_over_to_thread();
                return pending.await;
            }
        };
        // The outcome is polled again right after: a completion read here
        // (this task's own) need not wake this task.
        pending.forget_waker();
        match conn.read_lent_async(settings) {
            Step::Done => {
                ready.clear_ready();
                busy = Busy::default();
            }
            Step::Gone => return pending.await,
            Step::Busy if busy.again() => {
                // Readiness stays set: the next look tries again.
                drop(ready);
                tokio::task::yield_now().await;
            }
            Step::Busy => {
                conn.hand_over_to_thread();
                return pending.await;
            }
        }
    }
}

/// How long a caller has found the lend's lock taken.
#[derive(Default)]
struct Busy(Option<Instant>);

impl Busy {
    /// Whether to try again (within [`BUSY_FOR`] of the first try).
    fn again(&mut self) -> bool {
        self.0.get_or_insert_with(Instant::now).elapsed() < BUSY_FOR
    }
}
