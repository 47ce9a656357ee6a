//! Who gets a publish's outcome ([`Done`]: a boxed callback, or a thread
//! blocked in `publish_wait` on its reusable [`Waiter`]), and [`Stamp`],
//! the compact moment a message in flight keeps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::wait::Outcome;
use crate::error::Error;

/// A moment, as nanoseconds since a process-wide epoch (0: not set): 8
/// bytes where an `Option<Instant>` takes 16, so a [`PubMsg`] stays small
/// enough to move without a `memcpy` call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamp(u64);

impl Stamp {
    pub(crate) const UNSET: Stamp = Stamp(0);

    fn epoch() -> Instant {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *EPOCH.get_or_init(Instant::now)
    }

    fn of(t: Instant) -> Stamp {
        let ns = t.saturating_duration_since(Self::epoch()).as_nanos();
        Stamp(u64::try_from(ns).unwrap_or(u64::MAX).max(1))
    }

    /// The moment, if set.
    pub(crate) fn get(self) -> Option<Instant> {
        (self.0 != 0).then(|| Self::epoch() + Duration::from_nanos(self.0))
    }

    /// The moment; set to now first if it was not set.
    pub(crate) fn get_or_now(&mut self) -> Instant {
        if self.0 == 0 {
            *self = Self::of(Instant::now());
        }
        self.get().unwrap_or_else(Instant::now)
    }
}

/// Who gets a publish's outcome.
pub(crate) enum Done {
    /// The caller's callback ([`ClusterPubSub::publish_then`]), boxed.
    ///
    /// [`ClusterPubSub::publish_then`]: crate::cluster::ClusterPubSub::publish_then
    Call(Box<dyn FnOnce(Result<i64, Error>) + Send>),
    /// A caller blocked in [`ClusterPubSub::publish_wait`]: its thread's
    /// reusable cell, and the round it waits for.
    ///
    /// [`ClusterPubSub::publish_wait`]: crate::cluster::ClusterPubSub::publish_wait
    Wait(Arc<Waiter>, u64),
}

impl Done {
    pub(crate) fn run(self, r: Result<i64, Error>) {
        match self {
            Done::Call(f) => f(r),
            Done::Wait(w, round) => w.put(round, r),
        }
    }
}

/// One thread's cell for [`ClusterPubSub::publish_wait`], reused by every
/// call on that thread (nothing allocated per call): an [`Outcome`] with a
/// round per call, so an outcome for an older round (one that timed out)
/// is dropped.
///
/// [`ClusterPubSub::publish_wait`]: crate::cluster::ClusterPubSub::publish_wait
#[derive(Default)]
pub(crate) struct Waiter(Outcome<Result<i64, Error>>);

impl Waiter {
    /// This thread's waiter.
    pub(crate) fn current() -> Arc<Waiter> {
        thread_local! {
            static WAITER: Arc<Waiter> = Arc::new(Waiter::default());
        }
        WAITER.with(Arc::clone)
    }

    /// Starts a new round; returns its number.
    pub(crate) fn begin(&self) -> u64 {
        self.0.begin()
    }

    fn put(&self, round: u64, r: Result<i64, Error>) {
        self.0.complete_in(round, r);
    }

    /// The outcome of `round`, or `None` once `timeout` has passed.
    pub(crate) fn wait(&self, round: u64, timeout: Duration) -> Option<Result<i64, Error>> {
        self.0.wait_in(round, Instant::now() + timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::publish::PubMsg;

    #[test]
    fn a_stamp_is_unset_until_set_and_keeps_its_moment() {
        let mut st = Stamp::UNSET;
        assert_eq!(st.get(), None);
        let before = Instant::now();
        let t = st.get_or_now();
        assert!(t >= before - Duration::from_micros(1) && t <= Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(st.get_or_now(), t, "set once");
        assert_eq!(st.get(), Some(t));
        assert!(
            std::mem::size_of::<PubMsg>() <= 112,
            "{}",
            std::mem::size_of::<PubMsg>()
        );
    }

    #[test]
    fn a_late_outcome_of_a_timed_out_round_is_dropped() {
        let w = Waiter::default();
        let r1 = w.begin();
        assert!(w.wait(r1, Duration::from_millis(1)).is_none(), "timed out");
        let r2 = w.begin();
        w.put(r1, Ok(1)); // round 1's reply, after its caller gave up
        assert!(
            w.wait(r2, Duration::from_millis(1)).is_none(),
            "not round 2's"
        );
        w.put(r2, Ok(2));
        assert!(matches!(w.wait(r2, Duration::from_secs(1)), Some(Ok(2))));
    }

    #[test]
    fn an_outcome_before_the_wait_is_kept() {
        let w = Arc::new(Waiter::default());
        let round = w.begin();
        Done::Wait(w.clone(), round).run(Err(Error::Shutdown));
        assert!(matches!(
            w.wait(round, Duration::ZERO),
            Some(Err(Error::Shutdown))
        ));
        // From another thread, while waiting.
        let round = w.begin();
        let w2 = w.clone();
        let t = std::thread::spawn(move || Done::Wait(w2, round).run(Ok(7)));
        assert!(matches!(
            w.wait(round, Duration::from_secs(10)),
            Some(Ok(7))
        ));
        t.join().unwrap();
    }
}
