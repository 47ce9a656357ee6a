//! Channels given up: no message of a channel reaches the handler once
//! [`PubSub::unsubscribe`](crate::PubSub::unsubscribe) has returned, and
//! [`PubSub::wait_inactive`](crate::PubSub::wait_inactive) learns when the
//! servers have stopped sending them.
//!
//! Every unsubscribe call counts one leave (`requested`). While some leave
//! is not yet complete, each worker looks a message's channel up in the
//! registry before handing it on, and passes over those no longer wanted
//! (counted in [`Metrics::unwanted`](crate::Metrics::unwanted)); otherwise
//! it looks nothing up.
//!
//! A leave completes with a fence, which the control thread starts after
//! the round that sent its unsubscribes: a `PING` on every subscribe
//! connection that is up (its reply comes after every message the server
//! sent before the unsubscribe), then, once every `PING` has been answered
//! or has failed, a marker through every worker queue (behind every
//! message those connections delivered). When every worker has passed the
//! marker, the leaves counted before the fence began are complete. One
//! fence is in flight at a time; leaves counted meanwhile wait for the
//! next.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::wait::Signal;

/// Leaves asked for and completed.
#[derive(Default)]
pub(crate) struct Leaving {
    requested: AtomicU64,
    done: AtomicU64,
    /// Notified when leaves complete.
    completed: Signal<()>,
}

impl Leaving {
    /// Counts an unsubscribe call; returns the count to wait for.
    pub(crate) fn request(&self) -> u64 {
        self.requested.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Leaves asked for so far.
    pub(crate) fn requested(&self) -> u64 {
        self.requested.load(Ordering::Acquire)
    }

    /// Leaves known complete.
    pub(crate) fn done(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// Whether workers must look messages up (a leave is incomplete).
    pub(crate) fn filtering(&self) -> bool {
        self.requested() > self.done()
    }

    /// The leaves up to `upto` are complete.
    pub(crate) fn complete(&self, upto: u64) {
        self.done.fetch_max(upto, Ordering::AcqRel);
        self.completed.update(|()| ());
    }

    /// Waits until the leaves up to `target` are complete, `open` fails,
    /// or `deadline` passes; true when they are.
    pub(crate) fn wait(&self, target: u64, deadline: Instant, open: impl Fn() -> bool) -> bool {
        // Woken by `complete`; shutdown is looked at every 50 ms.
        let recheck = Some(Duration::from_millis(50));
        let look = |_: &mut ()| match self.done() >= target {
            true => Some(true),
            false => (!open()).then_some(false),
        };
        self.completed
            .wait_until(Some(deadline), recheck, look)
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_wait_ends_when_its_leaves_complete_or_shutdown_or_at_its_deadline() {
        let l = Arc::new(Leaving::default());
        let target = l.request();
        assert!(l.filtering());
        // Times out, then fails at once when closed.
        let start = Instant::now();
        assert!(!l.wait(target, start + Duration::from_millis(20), || true));
        assert!(start.elapsed() >= Duration::from_millis(20));
        let start = Instant::now();
        assert!(!l.wait(target, start + Duration::from_secs(10), || false));
        assert!(start.elapsed() < Duration::from_secs(5));
        // A shutdown seen within the 50 ms recheck, without a wake-up.
        let open = AtomicBool::new(true);
        let start = Instant::now();
        let closing = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(10));
                open.store(false, Ordering::SeqCst);
            });
            l.wait(target, start + Duration::from_secs(10), || {
                open.load(Ordering::SeqCst)
            })
        });
        assert!(!closing);
        assert!(start.elapsed() < Duration::from_secs(5));
        // Completed from another thread while waiting (no recheck needed:
        // the completion wakes it).
        let l2 = l.clone();
        let t = std::thread::spawn(move || l2.complete(target));
        let start = Instant::now();
        assert!(l.wait(target, start + Duration::from_secs(10), || true));
        assert!(start.elapsed() < Duration::from_secs(5));
        t.join().unwrap();
        assert!(!l.filtering());
        // An earlier target is complete already.
        assert!(l.wait(target - 1, Instant::now(), || false));
    }
}
