//! The fence that completes a leave (see [`crate::front::leaving`]): a
//! `PING` on every subscribe connection that is up, then a marker through
//! every worker queue; and the filter the workers ask while a leave is
//! incomplete.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use crate::control_loop::shared::Shared;
use crate::front::leaving::Leaving;
use crate::front::registry::WANT;
use crate::workers::{Passes, Queue};

/// One fence in flight: `PING`s unanswered, then workers yet to pass its
/// marker.
pub(crate) struct Fence {
    upto: u64,
    pings: AtomicUsize,
    workers: AtomicUsize,
    shared: Weak<Shared>,
}

impl Fence {
    /// A fence for the leaves up to `upto`, holding one `PING` slot for the
    /// starter (released by [`Fence::ping_done`] once every `PING` is
    /// submitted, so none completes it early).
    pub(crate) fn new(upto: u64, shared: &Arc<Shared>) -> Arc<Fence> {
        Arc::new(Fence {
            upto,
            pings: AtomicUsize::new(1),
            workers: AtomicUsize::new(shared.queues.len()),
            shared: Arc::downgrade(shared),
        })
    }

    /// One more `PING` to wait for.
    pub(crate) fn add_ping(&self) {
        self.pings.fetch_add(1, Ordering::AcqRel);
    }

    /// A `PING` answered or failed (or the starter done): after the last,
    /// the marker goes through every worker queue.
    pub(crate) fn ping_done(self: &Arc<Self>) {
        if self.pings.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let Some(s) = self.shared.upgrade() else {
            return;
        };
        if s.queues.is_empty() {
            return self.finish(&s);
        }
        for q in &s.queues {
            let f = self.clone();
            q.push_marker(Box::new(move || f.worker_passed()));
        }
    }

    fn worker_passed(&self) {
        if self.workers.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(s) = self.shared.upgrade() {
                self.finish(&s);
            }
        }
    }

    fn finish(&self, s: &Shared) {
        s.leaving.complete(self.upto);
        s.post(|inbox| inbox.fence_done = true);
    }
}

/// What the workers ask before handing a message on: while a leave is
/// incomplete, whether its channel is still wanted.
pub(crate) struct WantedFilter {
    pub(crate) leaving: Arc<Leaving>,
    pub(crate) shared: Weak<Shared>,
}

impl Passes for WantedFilter {
    fn passes(&self, channel: &[u8]) -> bool {
        if !self.leaving.filtering() {
            return true;
        }
        match self.shared.upgrade() {
            Some(s) => s.registry.flags(s.lane_of(channel), channel) & WANT != 0,
            None => true,
        }
    }

    fn passes_pattern(&self, pattern: &[u8]) -> bool {
        if !self.leaving.filtering() {
            return true;
        }
        // Patterns are wanted on every server at once: the first's lane
        // says.
        match self.shared.upgrade() {
            Some(s) => s
                .pattern_lane(0)
                .is_some_and(|lane| s.registry.flags(lane, pattern) & WANT != 0),
            None => true,
        }
    }
}

/// Installs the filter on every worker queue of `shared`.
pub(crate) fn install(shared: &Arc<Shared>) {
    let f: Arc<dyn Passes> = Arc::new(WantedFilter {
        leaving: shared.leaving.clone(),
        shared: Arc::downgrade(shared),
    });
    for q in &shared.queues {
        Queue::set_filter(q, f.clone());
    }
}
