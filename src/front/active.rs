//! Waiting for subscriptions to be confirmed: the `wait_active` loop and
//! its wake-up gate, shared by [`crate::PubSub`] and the cluster mode.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::engine::wait::{Deadline, Signal};
use crate::error::Error;

/// Callers blocked in `wait_active` (and the like), woken on
/// confirmations.
pub(crate) struct ActiveWait {
    /// Notified on every wake-up that reaches the waiters. Its state:
    /// tasks awaiting an [`Active`](crate::pubsub::Active) future, by
    /// registration, taken (and woken) by the next wake-up, so a future
    /// registers again on every poll.
    tasks: Signal<Vec<(u64, Waker)>>,
    waiters: AtomicUsize,
    /// Set by a waiter before it looks; with `arming`, the next wake-up
    /// clears it and is the only one that takes the gate.
    armed: AtomicBool,
    /// Whether wake-ups need an armed waiter (cheap per confirmation) or
    /// wake on every call.
    arming: bool,
    /// The longest a waiter sleeps before it looks again.
    poll: Duration,
    next_task: AtomicU64,
}

impl ActiveWait {
    /// A gate that wakes only armed waiters (`arming`) or every waiter on
    /// every call, with waiters looking again at least every `poll`.
    pub(crate) fn new(arming: bool, poll: Duration) -> Self {
        ActiveWait {
            tasks: Signal::new(Vec::new()),
            waiters: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
            arming,
            poll,
            next_task: AtomicU64::new(0),
        }
    }

    /// Registers (or refreshes) a task's waker before it looks, so the
    /// next wake-up reaches it; `id` is the future's registration, made on
    /// its first call. A registered task counts as a waiter until
    /// [`ActiveWait::unregister`].
    pub(crate) fn register(&self, id: &mut Option<u64>, waker: &Waker) {
        let id = *id.get_or_insert_with(|| {
            self.waiters.fetch_add(1, Ordering::AcqRel);
            self.next_task.fetch_add(1, Ordering::Relaxed)
        });
        self.tasks
            .with(|tasks| match tasks.iter_mut().find(|(t, _)| *t == id) {
                // `clone_from` keeps a waker that `will_wake` the same task.
                Some((_, w)) => w.clone_from(waker),
                None => tasks.push((id, waker.clone())),
            });
        // Arm after registering, before looking: a confirmation from now
        // on wakes the task.
        if self.arming {
            self.arm();
        }
    }

    /// Ends a registration made by [`ActiveWait::register`] (the future
    /// finished or was dropped).
    pub(crate) fn unregister(&self, id: &mut Option<u64>) {
        if let Some(id) = id.take() {
            self.tasks.with(|tasks| tasks.retain(|(t, _)| *t != id));
            self.waiters.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Makes the next [`ActiveWait::wake`] wake the waiters.
    pub(crate) fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    /// Wakes the waiters, if any (with `arming`, only the first call after
    /// a waiter armed the gate takes it and notifies).
    pub(crate) fn wake(&self) {
        if self.waiters.load(Ordering::Acquire) > 0
            && (!self.arming || self.armed.swap(false, Ordering::AcqRel))
        {
            let tasks = self.tasks.update(std::mem::take);
            for (_, w) in tasks {
                w.wake();
            }
        }
    }

    /// Sleeps until a wake-up or `until`, whichever comes first.
    pub(crate) fn sleep_until(&self, until: Instant) {
        self.waiters.fetch_add(1, Ordering::AcqRel);
        self.tasks.sleep_until(until);
        self.waiters.fetch_sub(1, Ordering::AcqRel);
    }

    /// Blocks until every channel in `channels` is active, or `timeout`
    /// passes, or a channel not yet active is `refused`. `active_prefix`
    /// says how many channels, from the first it is given, are active (up
    /// to the first that is not; it may look at only some of them).
    ///
    /// # Errors
    ///
    /// [`Error::WaitTimeout`] when some channel is still not active at the
    /// deadline; whatever `check_open` returns once it fails; what
    /// `refused` returns for the first refused channel.
    pub(crate) fn wait_all<C: AsRef<[u8]>>(
        &self,
        channels: &[C],
        timeout: Duration,
        check_open: impl Fn() -> Result<(), Error>,
        active_prefix: impl Fn(&[C]) -> usize,
        refused: impl Fn(&[u8]) -> Option<Error>,
    ) -> Result<(), Error> {
        let deadline = Deadline::after(timeout).instant();
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let mut next = 0;
        // Looks outside the lock (the registry has its own): a wake-up
        // while it looks makes it look again rather than sleep.
        let look = || {
            if let Err(e) = check_open() {
                return Some(Err(e));
            }
            // Arm before looking: a confirmation from now on wakes.
            if self.arming {
                self.arm();
            }
            while let Some(rest) = channels.get(next..).filter(|r| !r.is_empty()) {
                match active_prefix(rest) {
                    0 => break,
                    n => next += n,
                }
            }
            match channels.get(next) {
                None => Some(Ok(())),
                Some(c) => refused(c.as_ref()).map(Err),
            }
        };
        let result = self
            .tasks
            .wait_until_unlocked(Some(deadline), Some(self.poll), look);
        self.waiters.fetch_sub(1, Ordering::AcqRel);
        result.unwrap_or(Err(Error::WaitTimeout { after: timeout }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `active_prefix` from a per-channel test.
    fn each<C: AsRef<[u8]>>(active: impl Fn(&[u8]) -> bool) -> impl Fn(&[C]) -> usize {
        move |cs| cs.iter().take_while(|c| active(c.as_ref())).count()
    }

    #[test]
    fn wait_all_times_out_on_an_inactive_channel() {
        let w = ActiveWait::new(true, Duration::from_millis(5));
        let r = w.wait_all(
            &[b"a"],
            Duration::from_millis(20),
            || Ok(()),
            each(|_| false),
            |_| None,
        );
        assert!(matches!(r, Err(Error::WaitTimeout { .. })), "{r:?}");
    }

    #[test]
    fn wait_all_fails_at_once_on_a_refused_channel() {
        let w = ActiveWait::new(true, Duration::from_secs(5));
        let refused = |c: &[u8]| {
            (c == b"b").then(|| Error::SubscribeRefused {
                channel: c.into(),
                message: "NOPERM".into(),
            })
        };
        let start = Instant::now();
        let r = w.wait_all(
            &[b"a", b"b"],
            Duration::from_secs(5),
            || Ok(()),
            each(|c| c == b"a"),
            refused,
        );
        assert!(matches!(r, Err(Error::SubscribeRefused { .. })), "{r:?}");
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn wait_all_stops_on_shutdown_and_succeeds_when_active() {
        let w = ActiveWait::new(false, Duration::from_millis(5));
        let r = w.wait_all(
            &[b"a"],
            Duration::from_secs(5),
            || Err(Error::Shutdown),
            each(|_| true),
            |_| None,
        );
        assert!(matches!(r, Err(Error::Shutdown)), "{r:?}");
        let r = w.wait_all(
            &[b"a", b"b"],
            Duration::from_secs(5),
            || Ok(()),
            each(|_| true),
            |_| None,
        );
        assert!(r.is_ok(), "{r:?}");
    }

    #[test]
    fn wake_without_waiters_is_a_no_op_and_an_armed_wake_reaches_a_waiter() {
        let w = std::sync::Arc::new(ActiveWait::new(true, Duration::from_secs(10)));
        w.wake();
        let flag = std::sync::Arc::new(AtomicBool::new(false));
        let (w2, f2) = (w.clone(), flag.clone());
        let t = std::thread::spawn(move || {
            w2.wait_all(
                &[b"x"],
                Duration::from_secs(10),
                || Ok(()),
                each(|_| f2.load(Ordering::Acquire)),
                |_| None,
            )
        });
        flag.store(true, Ordering::Release);
        // The waiter may be parked with a 10 s poll: only a wake-up gets it
        // out quickly. Keep waking until it has returned.
        let start = Instant::now();
        while !t.is_finished() && start.elapsed() < Duration::from_secs(5) {
            w.arm();
            w.wake();
            std::thread::yield_now();
        }
        assert!(t.is_finished(), "waiter not woken within 5 s");
        assert!(t.join().expect("waiter thread").is_ok());
    }

    #[test]
    fn a_registered_task_is_woken_once_per_registration_and_unregisters() {
        let w = ActiveWait::new(true, Duration::from_secs(10));
        let ((c1, w1), (c2, w2)) = (testkit::counting_waker(), testkit::counting_waker());
        let mut id = None;
        w.register(&mut id, &w1);
        // Polled again from another task: only the new waker is kept.
        w.register(&mut id, &w2);
        assert_eq!(w.waiters.load(Ordering::SeqCst), 1);
        w.wake();
        assert_eq!((c1.wakes(), c2.wakes()), (0, 1));
        // Taken by that wake: the next one needs a new registration (and,
        // with arming, the arm that comes with it).
        w.wake();
        assert_eq!(c2.wakes(), 1);
        w.register(&mut id, &w2);
        w.wake();
        assert_eq!(c2.wakes(), 2);
        w.register(&mut id, &w2);
        w.unregister(&mut id);
        assert_eq!(id, None);
        assert_eq!(w.waiters.load(Ordering::SeqCst), 0);
        assert!(w.tasks.with(|t| t.is_empty()));
        w.arm();
        w.wake();
        assert_eq!(c2.wakes(), 2);
    }
}
