//! Completions: how a reply reaches whoever asked for it.

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::LocalKey;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use resp::{Frame, Parsed, Value};

use crate::addr::ServerAddr;
use crate::engine::kept::Kept;
use crate::engine::settings::Settings;
use crate::engine::wait::Outcome;
use crate::error::Error;
use crate::metrics::add;

/// The cell between a [`Pending`] and whoever completes it: an
/// [`Outcome`] used once, and the pool it returns to, if any.
pub(crate) struct Slot<T: 'static> {
    outcome: Outcome<Result<T, Error>>,
    /// Where the slot goes when its last holder lets go ([`SlotRef`]'s
    /// drop): a pool of slots of its type, or nowhere (freed).
    home: Option<&'static SlotPool<T>>,
    /// Holders of a pooled slot: the one whose drop takes it to 0 pools it
    /// (the `Arc`'s own count cannot say who is last when two let go at
    /// once: both may see the other's reference).
    holders: AtomicUsize,
}

impl<T> Deref for Slot<T> {
    type Target = Outcome<Result<T, Error>>;

    fn deref(&self) -> &Self::Target {
        &self.outcome
    }
}

impl<T> Slot<T> {
    /// A slot of its own, freed after use.
    pub(crate) fn new() -> Self {
        Slot {
            outcome: Outcome::new(),
            home: None,
            holders: AtomicUsize::new(1),
        }
    }
}

/// A shared handle to a [`Slot`]: the [`Pending`]'s, and the completer's
/// (a request in flight, a callback). Whichever holder lets go last
/// returns a pooled slot to its pool, reset for its next use; so a
/// publish whose outcome is awaited, waited for or handed to a
/// capture-free callback allocates nothing in steady state, whichever
/// thread lets go last and however close together they do.
pub(crate) struct SlotRef<T: 'static>(ManuallyDrop<Arc<Slot<T>>>);

impl<T> SlotRef<T> {
    fn new(slot: Slot<T>) -> Self {
        SlotRef(ManuallyDrop::new(Arc::new(slot)))
    }
}

impl<T> Clone for SlotRef<T> {
    fn clone(&self) -> Self {
        self.0.holders.fetch_add(1, Ordering::Relaxed);
        SlotRef(ManuallyDrop::new(Arc::clone(&self.0)))
    }
}

impl<T> Deref for SlotRef<T> {
    type Target = Slot<T>;

    fn deref(&self) -> &Slot<T> {
        &self.0
    }
}

impl<T> Drop for SlotRef<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `self.0` is not used after.
        let mut slot = unsafe { ManuallyDrop::take(&mut self.0) };
        if let Some(pool) = slot.home {
            if slot.holders.fetch_sub(1, Ordering::AcqRel) == 1 {
                // The last holder. The one before may still be dropping
                // its `Arc` (its count went first): reset here when no one
                // else can see the slot, else when it is taken again.
                if let Some(s) = Arc::get_mut(&mut slot) {
                    s.outcome.reset();
                }
                pool.put(slot);
            }
        }
    }
}

/// Slots of one type kept for reuse: a few per thread, in a thread-local
/// cache, and up to [`SlotPool::CAP`] shared (enough for the requests in
/// flight at once on a busy instance; that many are kept only after that
/// many were in flight together). A slot is taken on the caller's thread and usually returned
/// on an I/O thread: the caches trade with the shared pool a batch at a
/// time, so its lock is taken once per [`SlotPool::BATCH`] slots.
pub(crate) struct SlotPool<T: 'static> {
    shared: Mutex<Vec<Arc<Slot<T>>>>,
    cache: &'static LocalKey<RefCell<Cache<T>>>,
}

/// A thread's cache of one pool's slots.
struct Cache<T: 'static>(Vec<Arc<Slot<T>>>);

impl<T: 'static> SlotPool<T> {
    const CAP: usize = 1 << 16;
    /// Slots moved between a cache and the shared pool at once.
    const BATCH: usize = 32;

    const fn new(cache: &'static LocalKey<RefCell<Cache<T>>>) -> Self {
        SlotPool {
            shared: parking_lot::const_mutex(Vec::new()),
            cache,
        }
    }

    /// A slot from the pool (this thread's cache first), or a new one that
    /// returns to it.
    fn take(&'static self) -> SlotRef<T> {
        let cached = self
            .cache
            .try_with(|c| {
                let mut c = c.borrow_mut();
                if c.0.is_empty() {
                    let mut shared = self.shared.lock();
                    let from = shared.len().saturating_sub(Self::BATCH);
                    c.0.extend(shared.drain(from..));
                }
                c.0.pop()
            })
            .ok()
            .flatten();
        // Pooled by its last holder, whose predecessor has let go of its
        // `Arc` by now but for a rare preempted moment: then a new slot,
        // and that one is freed by the late drop.
        match cached.and_then(|mut slot| {
            let s = Arc::get_mut(&mut slot)?;
            s.outcome.reset();
            *s.holders.get_mut() = 1;
            Some(slot)
        }) {
            Some(slot) => SlotRef(ManuallyDrop::new(slot)),
            None => SlotRef::new(Slot {
                outcome: Outcome::new(),
                home: Some(self),
                holders: AtomicUsize::new(1),
            }),
        }
    }

    /// Keeps a slot that was reset, in this thread's cache; a full cache
    /// gives a batch to the shared pool, which keeps at most
    /// [`SlotPool::CAP`].
    fn put(&self, slot: Arc<Slot<T>>) {
        let _ = self.cache.try_with(|c| {
            let mut c = c.borrow_mut();
            c.0.push(slot);
            if c.0.len() >= 2 * Self::BATCH {
                let mut shared = self.shared.lock();
                let room = Self::CAP.saturating_sub(shared.len()).min(Self::BATCH);
                shared.extend(c.0.drain(..room));
                c.0.truncate(Self::BATCH);
            }
        });
    }
}

/// Integer slots: publishes' receiver counts.
static INTEGER_SLOTS: SlotPool<i64> = SlotPool::new(&INTEGER_CACHE);

thread_local! {
    static INTEGER_CACHE: RefCell<Cache<i64>> = const { RefCell::new(Cache(Vec::new())) };
}

/// The outcome of a request that is in flight: wait for it (with or without
/// a timeout), poll it, `.await` it, or hand it a callback.
///
/// It is a [`Future`] on any executor (no runtime is needed or assumed):
/// polling stores the task's [`Waker`](std::task::Waker) (the last poller's, so it may move
/// between tasks) and the I/O thread wakes it when the outcome is known.
/// Polling never blocks. Poll it again after it returned
/// [`Poll::Ready`] and it answers [`Error::InvalidArgument`].
///
/// A request always completes: with its reply, or with an error when its
/// connection fails, its request timeout passes, or the engine shuts down.
/// So [`Pending::wait`] returns within about the request timeout (unless
/// that timeout was set to zero). Never wait on the engine's own I/O thread
/// (from inside a callback): the reply could then never arrive.
#[must_use = "a Pending does nothing unless waited on; drop it to ignore the outcome"]
pub struct Pending<T: 'static> {
    slot: SlotRef<T>,
}

impl<T> fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("done", &self.slot.is_done())
            .finish()
    }
}

impl<T: Send + 'static> Pending<T> {
    pub(crate) fn new() -> (Self, SlotRef<T>) {
        let slot = SlotRef::new(Slot::new());
        (Pending { slot: slot.clone() }, slot)
    }

    /// A `Pending` that is already complete.
    pub(crate) fn ready(result: Result<T, Error>) -> Self {
        let (p, slot) = Self::new();
        slot.complete(result);
        p
    }

    /// Blocks until the request completes.
    ///
    /// # Errors
    ///
    /// The request's error: an error reply, a timeout, a lost connection or
    /// shutdown.
    pub fn wait(self) -> Result<T, Error> {
        loop {
            // Without a deadline the wait ends only with the outcome.
            if let Some(r) = self.slot.wait(None) {
                return r;
            }
        }
    }

    /// Blocks until the request completes or `timeout` passes.
    ///
    /// # Errors
    ///
    /// [`Error::WaitTimeout`] when `timeout` passed first (the request
    /// stays in flight; its outcome is then lost to this handle), otherwise
    /// as [`Pending::wait`].
    pub fn wait_timeout(self, timeout: Duration) -> Result<T, Error> {
        self.slot
            .wait(Some(Instant::now() + timeout))
            .unwrap_or(Err(Error::WaitTimeout { after: timeout }))
    }

    /// True once the outcome is known.
    pub fn is_done(&self) -> bool {
        self.slot.is_done()
    }

    /// Takes the outcome if it is known, without blocking.
    pub fn try_take(&mut self) -> Option<Result<T, Error>> {
        self.slot.try_take()
    }

    /// Runs `f` with the outcome: at once on this thread if it is known,
    /// otherwise later on a thread of the runtime, shared with every
    /// engine and instance on it: the engine's I/O thread, or the control
    /// thread for a cluster publish completed there (held, redirected,
    /// refused). Keep `f` short and never block in it: a call of 200 ms or
    /// more is logged and counted (see
    /// [`Runtime::slow_turns`](crate::Runtime::slow_turns),
    /// [`Metrics::slow_turns`](crate::Metrics::slow_turns)).
    pub fn then<F>(self, f: F)
    where
        F: FnOnce(Result<T, Error>) + Send + 'static,
    {
        self.slot.then(f);
    }
}

impl Pending<i64> {
    /// [`Pending::new`] with a slot from the pool of integer slots: a
    /// publish's outcome, allocated once and reused.
    pub(crate) fn pooled() -> (Self, SlotRef<i64>) {
        let slot = INTEGER_SLOTS.take();
        (Pending { slot: slot.clone() }, slot)
    }
}

impl<T> Pending<T> {
    /// Forgets the waker the last poll stored: a task about to complete
    /// this request itself (reading its reply on a lent connection) need
    /// not be woken by it, which would poll it once more for nothing. Poll
    /// again afterwards to learn the outcome (and to store a waker again).
    #[cfg(feature = "tokio")]
    pub(crate) fn forget_waker(&self) {
        self.slot.forget_waker();
    }
}

impl<T> Future for Pending<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.slot.poll(cx).map(|r| {
            r.unwrap_or_else(|| {
                Err(Error::InvalidArgument(
                    "Pending polled again after it completed".into(),
                ))
            })
        })
    }
}

/// What the I/O thread does with a request's reply.
pub(crate) enum Completion {
    /// Fire-and-forget: error replies are only counted.
    Discard,
    /// A fire-and-forget publish: an error reply, or a failure once
    /// staged (its connection broke, the engine shut down), is counted in
    /// [`EngineStats::publish_failed`](crate::engine::EngineStats::publish_failed)
    /// (a failure before staging is the caller's error).
    Publish,
    /// An integer reply (for example `PUBLISH`'s receiver count).
    Integer(SlotRef<i64>),
    /// A publish whose outcome its caller gets (an integer), a failure
    /// also counted in
    /// [`EngineStats::publish_failed`](crate::engine::EngineStats::publish_failed):
    /// the Pub/Sub layer's acknowledged publish.
    Acked(SlotRef<i64>),
    /// Any reply, as an owned value.
    Value(SlotRef<Value>),
    /// A kept request: kept with its bytes until its reply in the
    /// connection's [`Kept`] queue (staged beside the request, its bytes in
    /// the I/O thread's copy of the staged bytes): a plain reply completes
    /// it there; anything else goes to the engine's
    /// [`KeptSink`](crate::engine::kept::KeptSink) with a copy of its
    /// bytes, for the layer above to send it again.
    Kept,
    /// Initial connection's handshake (never a command).
    #[allow(dead_code)]
    Unit(SlotRef<()>),
}

fn error_text(frame: &Frame<'_>) -> Option<Arc<str>> {
    match frame {
        Frame::Error(t) | Frame::BlobError(t) => Some(String::from_utf8_lossy(t).into()),
        _ => None,
    }
}

/// An integer reply (or the error reply `err`) as a result.
fn integer(addr: ServerAddr, err: Option<Arc<str>>, reply: &Parsed<'_>) -> Result<i64, Error> {
    match (err, &reply.frame) {
        (Some(message), _) => Err(Error::Reply { addr, message }),
        (None, Frame::Integer(n)) => Ok(*n),
        (None, _) => Err(Error::UnexpectedReply {
            addr,
            expected: "an integer",
        }),
    }
}

impl Completion {
    /// Delivers a reply (to the next of `kept` for a kept request).
    /// Returns true when it was an error reply.
    pub(crate) fn complete(
        self,
        addr: ServerAddr,
        reply: &Parsed<'_>,
        settings: &Settings,
        kept: &mut Kept,
    ) -> bool {
        let err = error_text(&reply.frame);
        let is_err = err.is_some();
        let as_error = |message| Error::Reply { addr, message };
        match self {
            Completion::Discard => {}
            Completion::Publish => {
                if is_err {
                    add(&settings.counters.publish_failed, 1);
                }
            }
            Completion::Integer(slot) => slot.complete(integer(addr, err, reply)),
            Completion::Acked(slot) => {
                if is_err {
                    add(&settings.counters.publish_failed, 1);
                }
                slot.complete(integer(addr, err, reply))
            }
            Completion::Value(slot) => slot.complete(match err {
                Some(m) => Err(as_error(m)),
                None => Ok(reply.to_value()),
            }),
            Completion::Kept => match integer(addr, err, reply) {
                Ok(n) => kept.reply_ok(n, settings),
                r => kept.reply(r, settings),
            },
            Completion::Unit(slot) => slot.complete(match err {
                Some(m) => Err(as_error(m)),
                None => Ok(()),
            }),
        }
        is_err
    }

    /// [`Completion::complete`], or for a waiting caller's request (an
    /// integer or a value), its outcome held back in `later` when given
    /// (see [`Later`]).
    pub(crate) fn complete_or_later(
        self,
        addr: ServerAddr,
        reply: &Parsed<'_>,
        settings: &Settings,
        kept: &mut Kept,
        later: Option<&mut Vec<Later>>,
    ) -> bool {
        let Some(later) = later else {
            return self.complete(addr, reply, settings, kept);
        };
        let err = error_text(&reply.frame);
        let is_err = err.is_some();
        match self {
            Completion::Integer(slot) => {
                later.push(Later::Integer(slot, integer(addr, err, reply)))
            }
            Completion::Value(slot) => later.push(Later::Value(
                slot,
                match err {
                    Some(message) => Err(Error::Reply { addr, message }),
                    None => Ok(reply.to_value()),
                },
            )),
            other => return other.complete(addr, reply, settings, kept),
        }
        is_err
    }

    /// [`Completion::fail`], held back in `later` like
    /// [`Completion::complete_or_later`].
    pub(crate) fn fail_or_later(
        self,
        error: Error,
        settings: &Settings,
        kept: &mut Kept,
        later: Option<&mut Vec<Later>>,
    ) {
        match (self, later) {
            (Completion::Integer(slot), Some(later)) => {
                later.push(Later::Integer(slot, Err(error)))
            }
            (Completion::Value(slot), Some(later)) => later.push(Later::Value(slot, Err(error))),
            (other, _) => other.fail(error, settings, kept),
        }
    }

    /// The error this request fails with when its connection ended with
    /// `error`; `sent` says whether its bytes may have reached the server
    /// ([`crate::conn::Event::Failed`]). A kept request is one the layer
    /// above may send again, and [`Error::Shutdown`] tells it nothing was
    /// sent: one that may have run when this side closed its connection
    /// (an engine shut down, its wait for replies over) gets
    /// [`Error::ConnectionLost`] instead, reason
    /// [`ConnError::Aborted`](crate::conn::ConnError::Aborted): the
    /// outcome is unknown. One never written whose connection broke (or
    /// timed out, or read bad bytes) gets [`Error::NotConnected`] instead:
    /// nothing was sent, so the layer above may send it again, and only a
    /// kept request that may have run fails with `ConnectionLost`. Other
    /// requests keep their error.
    pub(crate) fn closed_error(&self, addr: ServerAddr, error: Error, sent: bool) -> Error {
        match (self, error) {
            (Completion::Kept, Error::Shutdown) if sent => Error::ConnectionLost {
                addr,
                reason: crate::conn::ConnError::Aborted,
            },
            (
                Completion::Kept,
                Error::ConnectionLost { .. } | Error::Timeout { .. } | Error::Protocol { .. },
            ) if !sent => Error::NotConnected { addr },
            (_, error) => error,
        }
    }

    /// Delivers a failure (to the next of `kept` for a kept request).
    pub(crate) fn fail(self, error: Error, settings: &Settings, kept: &mut Kept) {
        match self {
            Completion::Kept => kept.fail(error, settings),
            Completion::Publish => add(&settings.counters.publish_failed, 1),
            Completion::Acked(slot) => {
                add(&settings.counters.publish_failed, 1);
                slot.complete(Err(error));
            }
            other => other.fail_unstaged(error),
        }
    }

    /// Delivers the failure of a request that was never staged (so never
    /// a kept request).
    pub(crate) fn fail_unstaged(self, error: Error) {
        match self {
            Completion::Discard | Completion::Publish | Completion::Kept => {}
            Completion::Integer(slot) | Completion::Acked(slot) => slot.complete(Err(error)),
            Completion::Value(slot) => slot.complete(Err(error)),
            Completion::Unit(slot) => slot.complete(Err(error)),
        }
    }
}

/// An outcome the I/O thread holds back to the end of its turn on a
/// connection, so that it can lend the connection (see `lend.rs`) before
/// the caller it wakes asks for it again. Kept in order; only waiting
/// callers' requests (integers and values) are held back.
pub(crate) enum Later {
    Integer(SlotRef<i64>, Result<i64, Error>),
    Value(SlotRef<Value>, Result<Value, Error>),
}

impl Later {
    /// Delivers it.
    pub(crate) fn run(self) {
        match self {
            Later::Integer(slot, r) => slot.complete(r),
            Later::Value(slot, r) => slot.complete(r),
        }
    }
}

#[cfg(test)]
mod tests;
