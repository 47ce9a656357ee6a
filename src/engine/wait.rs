//! The one way a thread or a task in this crate waits for something.
//!
//! [`Signal`] is the mechanism: a state under a mutex, the condvar its
//! changes notify, and a count of those changes. [`Signal::wait_until`] is
//! the one sleeping loop: it looks, sleeps until a change, the deadline or
//! the next recheck (whichever comes first), looks again after every
//! wake-up (so a spurious one is harmless), and has the last look at the
//! deadline. Its look runs under the lock, or outside it
//! ([`Signal::wait_until_unlocked`], for a condition over other shared
//! state): a change between a look and the sleep is never lost, since the
//! sleep starts only when no change came since the look began.
//!
//! [`Outcome`] is an outcome completed once (per round) on a signal: a
//! thread waits for it (with or without a deadline), a task polls it (the
//! waker of the task that polled last is woken), or a callback takes it.
//! It is the cell behind every request's
//! [`Pending`](crate::engine::Pending), and, with rounds, the reusable
//! per-thread cell a blocking cluster publish waits on (a new round per
//! call, so nothing is allocated per call and a late outcome of an older
//! round is dropped).
//!
//! Counter-style waits (a latch counted down, leaves completed up to a
//! target, channels becoming active) are a [`Signal`] and a condition.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

/// When a caller's wait gives up: its timeout counted from now (a timeout
/// too long for the clock never passes). The one place a caller's timeout
/// meets the clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Deadline(Instant);

impl Deadline {
    /// `timeout` from now.
    pub(crate) fn after(timeout: Duration) -> Deadline {
        let now = Instant::now();
        let far = Duration::from_secs(100 * 365 * 24 * 3600);
        Deadline(
            now.checked_add(timeout.min(far))
                .unwrap_or(now + Duration::from_secs(3600)),
        )
    }

    /// The deadline as an instant.
    pub(crate) fn instant(self) -> Instant {
        self.0
    }

    /// Whether it has passed.
    pub(crate) fn passed(self) -> bool {
        Instant::now() >= self.0
    }

    /// The sooner of the deadline and `poll` from now: how long to sleep
    /// before looking again.
    pub(crate) fn or_within(self, poll: Duration) -> Instant {
        self.0.min(Deadline::after(poll).0)
    }
}

struct Changed<S> {
    /// Changes made through [`Signal::update`] so far.
    changes: u64,
    state: S,
}

/// A state under a mutex, and the condvar every change through
/// [`Signal::update`] notifies.
pub(crate) struct Signal<S> {
    inner: Mutex<Changed<S>>,
    cond: Condvar,
}

impl<S: Default> Default for Signal<S> {
    fn default() -> Self {
        Signal::new(S::default())
    }
}

impl<S> Signal<S> {
    pub(crate) fn new(state: S) -> Self {
        Signal {
            inner: Mutex::new(Changed { changes: 0, state }),
            cond: Condvar::new(),
        }
    }

    /// Changes the state with `f`, then wakes every thread waiting (after
    /// letting go of the lock).
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let mut g = self.inner.lock();
        g.changes = g.changes.wrapping_add(1);
        let r = f(&mut g.state);
        drop(g);
        self.cond.notify_all();
        r
    }

    /// The state, with no lock: the caller holds the only reference.
    pub(crate) fn get_mut(&mut self) -> &mut S {
        &mut self.inner.get_mut().state
    }

    /// Reads or changes the state without waking anyone (a change a
    /// waiter must see goes through [`Signal::update`]).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        f(&mut self.inner.lock().state)
    }

    /// Sleeps until `look` (run under the lock) gives an answer, or
    /// `deadline` passes (`None` after a last look). `look` runs at once,
    /// after every wake-up, and at least every `recheck` when given (for
    /// what changes without an [`Signal::update`]: shutdown, say).
    pub(crate) fn wait_until<R>(
        &self,
        deadline: Option<Instant>,
        recheck: Option<Duration>,
        mut look: impl FnMut(&mut S) -> Option<R>,
    ) -> Option<R> {
        self.sleep_loop(deadline, recheck, |g| look(&mut g.state))
    }

    /// [`Signal::wait_until`] with `look` run outside the lock (for a
    /// condition over other shared state, which may take other locks): an
    /// [`Signal::update`] that comes while it looks makes it look again at
    /// once instead of sleeping.
    pub(crate) fn wait_until_unlocked<R>(
        &self,
        deadline: Option<Instant>,
        recheck: Option<Duration>,
        mut look: impl FnMut() -> Option<R>,
    ) -> Option<R> {
        self.sleep_loop(deadline, recheck, |g| MutexGuard::unlocked(g, &mut look))
    }

    /// Sleeps once: until an [`Signal::update`] or `until`, whichever comes
    /// first (or a spurious wake-up). The caller looks again itself.
    pub(crate) fn sleep_until(&self, until: Instant) {
        let mut g = self.inner.lock();
        self.cond.wait_until(&mut g, until);
    }

    /// The one sleeping loop.
    fn sleep_loop<R>(
        &self,
        deadline: Option<Instant>,
        recheck: Option<Duration>,
        mut look: impl FnMut(&mut MutexGuard<'_, Changed<S>>) -> Option<R>,
    ) -> Option<R> {
        let mut g = self.inner.lock();
        loop {
            let seen = g.changes;
            if let Some(r) = look(&mut g) {
                return Some(r);
            }
            if g.changes != seen {
                continue; // changed while `look` let go of the lock
            }
            let until = match (deadline, recheck) {
                (None, None) => None,
                (deadline, recheck) => {
                    let now = Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        return None;
                    }
                    let next = recheck.map(|r| now + r);
                    deadline.into_iter().chain(next).min()
                }
            };
            match until {
                Some(until) => {
                    self.cond.wait_until(&mut g, until);
                }
                None => self.cond.wait(&mut g),
            }
        }
    }
}

/// Keeps `new` as the waker to wake: the last poller's (no clone when it
/// wakes the same task as the one stored).
pub(crate) fn keep_waker(stored: &mut Option<Waker>, new: &Waker) {
    match stored {
        // `clone_from` keeps a waker that `will_wake` the same task.
        Some(w) => w.clone_from(new),
        None => *stored = Some(new.clone()),
    }
}

type Callback<V> = Box<dyn FnOnce(V) + Send + 'static>;

enum State<V> {
    /// Not complete; the waker of the task that polled last, if any.
    Waiting(Option<Waker>),
    Callback(Callback<V>),
    Done(V),
    Taken,
}

struct Round<V> {
    /// The round this outcome belongs to (see [`Outcome::begin`]).
    number: u64,
    state: State<V>,
}

/// What completing did under the lock, to finish outside it.
enum Then<V> {
    Nothing,
    Wake(Waker),
    Call(Callback<V>, V),
}

/// An outcome completed once per round: waited for by a thread
/// ([`Outcome::wait`]), polled by a task ([`Outcome::poll`]: the last
/// poller's waker is woken), or handed to a callback ([`Outcome::then`]).
/// A second outcome for a round is ignored.
///
/// Used once, it has one round (0). Reused, each [`Outcome::begin`]
/// starts a new round; an outcome for an older round is dropped.
pub(crate) struct Outcome<V> {
    signal: Signal<Round<V>>,
}

impl<V> Default for Outcome<V> {
    fn default() -> Self {
        Outcome::new()
    }
}

impl<V> Outcome<V> {
    /// A new outcome, not complete, in round 0.
    pub(crate) fn new() -> Self {
        Outcome {
            signal: Signal::new(Round {
                number: 0,
                state: State::Waiting(None),
            }),
        }
    }

    /// Starts a new round (forgetting the last one's outcome, waker or
    /// callback); returns its number.
    pub(crate) fn begin(&self) -> u64 {
        let (number, old) = self.signal.with(|r| {
            r.number = r.number.wrapping_add(1);
            let old = std::mem::replace(&mut r.state, State::Waiting(None));
            (r.number, old)
        });
        drop(old); // outside the lock
        number
    }

    /// Starts a new round, with no lock: the caller holds the only
    /// reference (a pooled slot being reset for its next use).
    pub(crate) fn reset(&mut self) {
        let r = self.signal.get_mut();
        r.number = r.number.wrapping_add(1);
        r.state = State::Waiting(None);
    }

    /// Delivers the outcome of the current round: wakes a waiting thread
    /// and the task that polled last, or runs the callback (on this
    /// thread, outside the lock). A second outcome is ignored.
    pub(crate) fn complete(&self, value: V) {
        self.complete_round(None, value);
    }

    /// [`Outcome::complete`] when `round` is still the current round;
    /// otherwise the outcome is dropped.
    pub(crate) fn complete_in(&self, round: u64, value: V) {
        self.complete_round(Some(round), value);
    }

    fn complete_round(&self, round: Option<u64>, value: V) {
        let mut then = Then::Nothing;
        let stale = self.signal.update(|r| {
            if round.is_some_and(|n| n != r.number) {
                return Some(value);
            }
            match std::mem::replace(&mut r.state, State::Taken) {
                State::Waiting(waker) => {
                    r.state = State::Done(value);
                    if let Some(w) = waker {
                        then = Then::Wake(w);
                    }
                }
                State::Callback(f) => then = Then::Call(f, value),
                done @ (State::Done(_) | State::Taken) => {
                    r.state = done;
                    return Some(value);
                }
            }
            None
        });
        drop(stale); // outside the lock
        match then {
            Then::Nothing => {}
            Then::Wake(w) => w.wake(),
            Then::Call(f, value) => f(value),
        }
    }

    /// Whether the outcome is in (and not taken yet).
    pub(crate) fn is_done(&self) -> bool {
        self.signal.with(|r| matches!(r.state, State::Done(_)))
    }

    /// Takes the outcome if it is in, without blocking.
    pub(crate) fn try_take(&self) -> Option<V> {
        self.signal.with(take_done)
    }

    /// Blocks until the outcome is in and takes it, or until `deadline`
    /// passes (`None`; one last look first).
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Option<V> {
        self.signal.wait_until(deadline, None, take_done)
    }

    /// [`Outcome::wait`] for the outcome of `round`: `None` at the
    /// deadline, or when a newer round has begun.
    pub(crate) fn wait_in(&self, round: u64, deadline: Deadline) -> Option<V> {
        self.signal.wait_until(Some(deadline.instant()), None, |r| {
            match r.number == round {
                true => take_done(r),
                false => None,
            }
        })
    }

    /// Runs `f` with the outcome: at once on this thread if it is in,
    /// otherwise on the thread that completes it. Nothing happens when it
    /// was taken already.
    pub(crate) fn then(&self, f: impl FnOnce(V) + Send + 'static) {
        let mut f = Some(f);
        let now = self.signal.with(|r| {
            match std::mem::replace(&mut r.state, State::Taken) {
                State::Done(v) => return Some(v),
                State::Waiting(_) => {
                    if let Some(f) = f.take() {
                        r.state = State::Callback(Box::new(f));
                    }
                }
                other => r.state = other,
            }
            None
        });
        if let (Some(v), Some(f)) = (now, f) {
            f(v);
        }
    }

    /// Takes the outcome if it is in; otherwise keeps the task's waker
    /// (the last poller's) for the completion to wake. `Ready(None)`: it
    /// was taken already. Storing the waker and completing take the same
    /// lock, so no wake-up is lost between them.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<Option<V>> {
        self.signal
            .with(|r| match std::mem::replace(&mut r.state, State::Taken) {
                State::Done(v) => Poll::Ready(Some(v)),
                State::Waiting(mut waker) => {
                    keep_waker(&mut waker, cx.waker());
                    r.state = State::Waiting(waker);
                    Poll::Pending
                }
                // A callback takes the outcome; kept for completeness.
                other @ State::Callback(_) => {
                    r.state = other;
                    Poll::Pending
                }
                State::Taken => Poll::Ready(None),
            })
    }

    /// Forgets the waker the last poll stored (its task will learn the
    /// outcome by itself).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn forget_waker(&self) {
        self.signal.with(|r| {
            if let State::Waiting(w) = &mut r.state {
                *w = None;
            }
        });
    }
}

fn take_done<V>(r: &mut Round<V>) -> Option<V> {
    match std::mem::replace(&mut r.state, State::Taken) {
        State::Done(v) => Some(v),
        other => {
            r.state = other;
            None
        }
    }
}

/// Counts threads down to zero (an engine's shutdown waits for each of its
/// threads to let go of its connections).
pub(crate) struct Latch {
    left: Signal<usize>,
}

impl Latch {
    pub(crate) fn new(n: usize) -> Arc<Latch> {
        Arc::new(Latch {
            left: Signal::new(n),
        })
    }

    pub(crate) fn count_down(&self) {
        self.left.update(|left| *left = left.saturating_sub(1));
    }

    /// Waits until the count is zero or `deadline` passes; true when zero.
    pub(crate) fn wait_until(&self, deadline: Instant) -> bool {
        self.left
            .wait_until(Some(deadline), None, |left| (*left == 0).then_some(()))
            .is_some()
    }
}

/// An engine's shutdown under way (see `Engine::close`): done once its
/// I/O threads let go of its connections, which they do by `deadline`.
#[derive(Clone)]
pub(crate) struct Closing {
    pub(crate) done: Arc<Latch>,
    pub(crate) deadline: Instant,
}

impl Closing {
    /// Waits until the I/O threads let go, or 5 s past the deadline (a
    /// callback still running on one of them), logged.
    pub(crate) fn wait(&self) {
        if !self
            .done
            .wait_until(self.deadline + std::time::Duration::from_secs(5))
        {
            log::error!(
                "engine shutdown: an I/O thread did not let go of its connections \
                 within 5 s of the deadline (a callback blocking it?)"
            );
        }
    }
}

#[cfg(test)]
mod tests;
