//! Which worker queue handles each lane: its *home*. A channel's messages,
//! gaps, drops and events all go to its lane's home, so they stay in order
//! with one another, and a lane's channels are handled on one worker.
//!
//! A lane gets its home when it is first placed on a subscribe connection
//! (the control thread's `Subscribe`): the worker that connection was given
//! when it opened, round robin over the connections of every instance on
//! the runtime (`Runtime::next_home`). On fixed servers a lane is a
//! connection, so one server's `subscribe_connections(n)` lanes are homed
//! on n different workers (while n ≤ W); on a cluster every partition a
//! node's connection carries first shares that connection's home. The home
//! never changes after that, whatever connection carries the lane later
//! (a failover, a migration), so a channel never changes thread.
//!
//! It does not decide where a connection is read (the I/O threads do that
//! for now), nor what a later connection for lanes already homed gets.

use std::sync::atomic::{AtomicU16, Ordering};

/// No home yet.
const UNSET: u16 = u16::MAX;

/// Lane → worker queue index, each set once and then fixed for the
/// instance's life.
pub(crate) struct Homes {
    lanes: Box<[AtomicU16]>,
    /// Worker queues of the instance (at least 1).
    workers: usize,
}

impl Homes {
    /// `lanes` lanes, none homed yet, over `workers` queues (0 is taken as
    /// 1; more than `u16::MAX - 1` are not used).
    pub(crate) fn new(lanes: usize, workers: usize) -> Self {
        Homes {
            lanes: (0..lanes).map(|_| AtomicU16::new(UNSET)).collect(),
            workers: workers.clamp(1, usize::from(UNSET)),
        }
    }

    /// The home of `lane`, once it has one.
    pub(crate) fn of(&self, lane: usize) -> Option<usize> {
        let w = self.lanes.get(lane)?.load(Ordering::Acquire);
        (w != UNSET).then_some(usize::from(w))
    }

    /// Makes worker `w` (taken modulo the workers) the home of `lane` unless
    /// it has one: the first writer wins. Returns the home it has now.
    pub(crate) fn set_once(&self, lane: usize, w: usize) -> usize {
        let w = (w % self.workers) as u16;
        let Some(slot) = self.lanes.get(lane) else {
            return usize::from(w);
        };
        match slot.compare_exchange(UNSET, w, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => usize::from(w),
            Err(had) => usize::from(had),
        }
    }

    /// Where `lane`'s channels are handled: its home. A lane is homed
    /// before anything of it can be queued (its first subscribe); one that
    /// is not (none is known) is homed now, on worker `lane % W`, so that
    /// whatever follows agrees. A lane out of range gets `lane % W`.
    #[inline]
    pub(crate) fn home(&self, lane: usize) -> usize {
        match self.of(lane) {
            Some(w) => w,
            None => self.set_once(lane, lane % self.workers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_lane_takes_the_home_of_the_first_connection_placed_on_it() {
        let homes = Homes::new(4, 3);
        assert_eq!(homes.of(2), None);
        assert_eq!(homes.set_once(2, 1), 1);
        // A later connection (a failover, a migration) does not move it.
        assert_eq!(homes.set_once(2, 0), 1);
        assert_eq!(homes.of(2), Some(1));
        assert_eq!(homes.home(2), 1);
        // Taken modulo the workers.
        assert_eq!(homes.set_once(3, 5), 2);
        // A lane of no connection yet is settled once, then fixed.
        assert_eq!(homes.home(1), 1);
        assert_eq!(homes.set_once(1, 0), 1);
        // Out of range: a total answer, nothing stored.
        assert_eq!(homes.home(10), 1);
        assert_eq!(homes.of(10), None);
    }

    #[test]
    fn a_home_is_fixed_when_threads_race_to_set_it() {
        let homes = Arc::new(Homes::new(64, 8));
        let picks: Vec<Vec<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let homes = homes.clone();
                    s.spawn(move || {
                        (0..64)
                            .map(|lane| homes.set_once(lane, lane + t))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for lane in 0..64 {
            let home = homes.of(lane).expect("homed");
            assert!(picks.iter().all(|p| p[lane] == home), "lane {lane}");
            assert_eq!(homes.home(lane), home);
        }
    }

    #[test]
    fn connections_spread_round_robin_and_their_lanes_follow() {
        let runtime = crate::engine::Runtime::new(1).expect("runtime");
        // One server, 8 connections (one lane each), 8 workers: every
        // worker is some lane's home.
        let homes = Homes::new(8, 8);
        for lane in 0..8 {
            homes.set_once(lane, runtime.next_home(8));
        }
        let mut used: Vec<usize> = (0..8).map(|l| homes.home(l)).collect();
        used.sort_unstable();
        assert_eq!(used, (0..8).collect::<Vec<_>>());
        // Two instances on one runtime, one connection each: two workers,
        // not the same one.
        assert_ne!(runtime.next_home(4), runtime.next_home(4));
        // A cluster node's connection: every partition it carries first
        // shares its home.
        let node = runtime.next_home(8);
        let parts = Homes::new(128, 8);
        for p in (0..128).step_by(3) {
            parts.set_once(p, node);
        }
        assert!((0..128).step_by(3).all(|p| parts.of(p) == Some(node)));
    }
}
