//! Who gets a publish's outcome ([`Done`]: a caller's
//! [`Pending`](crate::engine::Pending), or a thread
//! blocked in `publish_wait` on its reusable [`Waiter`]).

use std::sync::Arc;
use std::time::Duration;

use crate::engine::wait::{Deadline, Outcome};
use crate::engine::SlotRef;
use crate::error::Error;

/// Who gets a publish's outcome.
pub(crate) enum Done {
    /// The caller's handle ([`ClusterPubSub::publish_pending`]): a pooled
    /// slot, so nothing is allocated per call.
    ///
    /// [`ClusterPubSub::publish_pending`]: crate::cluster::ClusterPubSub::publish_pending
    Slot(SlotRef<i64>),
    /// A caller blocked in [`ClusterPubSub::publish_wait`]: its thread's
    /// reusable cell, and the round it waits for.
    ///
    /// [`ClusterPubSub::publish_wait`]: crate::cluster::ClusterPubSub::publish_wait
    Wait(Arc<Waiter>, u64),
}

impl Done {
    pub(crate) fn run(self, r: Result<i64, Error>) {
        match self {
            Done::Slot(slot) => slot.complete(r),
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
        self.0.wait_in(round, Deadline::after(timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control_loop::publish::PubMsg;

    #[test]
    fn a_publish_in_flight_stays_small() {
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
