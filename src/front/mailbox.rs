//! A control thread's inbox and the per-lane "already posted as dirty"
//! flags, shared by [`crate::PubSub`] and the cluster mode (each with its
//! own inbox type).

use std::sync::atomic::{AtomicBool, Ordering};

use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::engine::host::Bell;

/// An inbox that takes lanes with dirty channels.
pub(crate) trait DirtyLanes {
    /// Adds `lane` to the lanes the control thread must flush.
    fn push_dirty(&mut self, lane: usize);
}

/// A control loop's inbox, what rings it (its task on the runtime's
/// control thread), and per lane whether the lane is already posted as
/// dirty.
pub(crate) struct Mailbox<I> {
    pub(crate) inbox: Mutex<I>,
    /// Set once the control loop is hosted (it runs once at the start
    /// anyway, so a post before that is seen).
    pub(crate) bell: OnceLock<Bell>,
    /// Per lane: already posted to the control thread (cleared by it when
    /// it flushes the lane).
    pub(crate) lane_dirty: Vec<AtomicBool>,
}

impl<I: Default + DirtyLanes> Mailbox<I> {
    /// An empty inbox for `lanes` lanes.
    pub(crate) fn new(lanes: usize) -> Self {
        Mailbox {
            inbox: Mutex::new(I::default()),
            bell: OnceLock::new(),
            lane_dirty: (0..lanes).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Posts work to the control loop.
    pub(crate) fn post(&self, f: impl FnOnce(&mut I)) {
        f(&mut self.inbox.lock());
        if let Some(b) = self.bell.get() {
            b.ring();
        }
    }

    /// Tells the control thread that `lane` has dirty channels (posts it
    /// once until the control thread looks).
    pub(crate) fn mark_dirty(&self, lane: usize) {
        let first = self
            .lane_dirty
            .get(lane)
            .is_some_and(|f| !f.swap(true, Ordering::AcqRel));
        if first {
            self.post(|inbox| inbox.push_dirty(lane));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Lanes(Vec<usize>);

    impl DirtyLanes for Lanes {
        fn push_dirty(&mut self, lane: usize) {
            self.0.push(lane);
        }
    }

    #[test]
    fn a_lane_is_posted_once_until_its_flag_is_cleared() {
        let m: Mailbox<Lanes> = Mailbox::new(2);
        m.mark_dirty(1);
        m.mark_dirty(1);
        m.mark_dirty(7); // no such lane: ignored
        assert_eq!(m.inbox.lock().0, vec![1]);
        m.lane_dirty[1].store(false, Ordering::Release);
        m.mark_dirty(1);
        m.mark_dirty(0);
        assert_eq!(m.inbox.lock().0, vec![1, 1, 0]);
    }
}
