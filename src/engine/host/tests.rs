//! The task table and its hosts.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts its turns; finishes after `left` of them.
struct Counter {
    turns: Arc<AtomicU64>,
    left: u64,
    every: Duration,
}

impl Task for Counter {
    fn turn(&mut self) -> Turn {
        self.turns.fetch_add(1, Ordering::Relaxed);
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                Turn::At(Instant::now() + self.every)
            }
            None => Turn::Done,
        }
    }
}

fn wait(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(5), "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn tasks_run_when_due_or_rung_and_end_on_none() {
    let host = Host::start("shardsub-control-test", PanicCount::default()).unwrap();
    let (a, b) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    // `a` runs every millisecond until it finishes; `b` only when rung.
    let ta = host.spawn("a", PanicCount::default(), |_| {
        Box::new(Counter {
            turns: a.clone(),
            left: 5,
            every: Duration::from_millis(1),
        })
    });
    let mut bell = None;
    let _tb = host.spawn("b", PanicCount::default(), |rings_b| {
        bell = Some(rings_b.clone());
        Box::new(Counter {
            turns: b.clone(),
            left: 100,
            every: Duration::from_secs(3600),
        })
    });
    ta.wait_done();
    assert_eq!(a.load(Ordering::Relaxed), 6);
    assert_eq!(host.len(), 1);
    wait("b's first turn", || b.load(Ordering::Relaxed) == 1);
    bell.unwrap().ring();
    wait("b rung", || b.load(Ordering::Relaxed) == 2);
}

/// Finishes at once; its drop sets `dropped` (or panics).
struct Drops {
    dropped: Arc<AtomicU64>,
    panic: bool,
}
impl Task for Drops {
    fn turn(&mut self) -> Turn {
        Turn::Done
    }
}
impl Drop for Drops {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(20));
        self.dropped.fetch_add(1, Ordering::Relaxed);
        assert!(!self.panic, "a handler's drop broke");
    }
}

/// Rings itself during each of its first `rings` turns, and notes whether
/// its thread is an I/O thread and a runtime thread.
struct RingsItself {
    bell: Bell,
    turns: Arc<AtomicU64>,
    rings: u64,
    seen: Arc<Mutex<Option<(bool, bool)>>>,
}

/// A [`RingsItself`] hosted on `tasks`: its hosting, a bell that rings it
/// from outside, its turns so far and what it saw of its thread.
type Ringing = (
    Hosted,
    Bell,
    Arc<AtomicU64>,
    Arc<Mutex<Option<(bool, bool)>>>,
);

/// Hosts a [`RingsItself`] on `tasks`; `early` rings it before it is in.
fn ringing(tasks: &Tasks, rings: u64, early: bool) -> Ringing {
    let turns = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(None));
    let mut outside = None;
    let hosted = tasks.spawn("r", PanicCount::default(), |bell| {
        if early {
            bell.ring();
        }
        outside = Some(bell.clone());
        Box::new(RingsItself {
            bell: bell.clone(),
            turns: turns.clone(),
            rings,
            seen: seen.clone(),
        })
    });
    (hosted, outside.expect("a bell"), turns, seen)
}

impl Task for RingsItself {
    fn turn(&mut self) -> Turn {
        *self.seen.lock() = Some((on_io_thread(), on_runtime_thread()));
        if self.turns.fetch_add(1, Ordering::Relaxed) < self.rings {
            self.bell.ring();
        }
        Turn::Rung
    }
}

#[test]
fn a_ring_before_a_task_is_in_or_during_its_turn_gets_it_a_turn() {
    let host = Host::start("shardsub-control-test", PanicCount::default()).unwrap();
    // Rung before the task is in: its first turn runs all the same.
    let (_t, outside, turns, _) = ringing(&host, 1, true);
    // The first turn rang it while it ran: a second turn follows.
    wait("two turns", || turns.load(Ordering::Relaxed) >= 2);
    outside.ring();
    wait("a third turn", || turns.load(Ordering::Relaxed) >= 3);
}

#[test]
fn wait_done_returns_once_the_task_is_dropped_even_when_its_drop_panics() {
    let host = Host::start("shardsub-control-test", PanicCount::default()).unwrap();
    for panic in [false, true] {
        let dropped = Arc::new(AtomicU64::new(0));
        let panics = PanicCount::default();
        let d = dropped.clone();
        let t = host.spawn("d", panics.clone(), move |_| {
            Box::new(Drops { dropped: d, panic })
        });
        t.wait_done();
        assert_eq!(dropped.load(Ordering::Relaxed), 1, "panic {panic}");
        assert_eq!(panics.get(), u64::from(panic));
    }
}

struct Panics;
impl Task for Panics {
    fn turn(&mut self) -> Turn {
        panic!("a control loop broke");
    }
}

#[test]
fn a_panicking_task_ends_alone_and_is_counted() {
    let host = Host::start("shardsub-control-test", PanicCount::default()).unwrap();
    let panics = PanicCount::default();
    let t = host.spawn("p", panics.clone(), |_| Box::new(Panics));
    t.wait_done();
    assert_eq!(panics.get(), 1);
    let turns = Arc::new(AtomicU64::new(0));
    let other = host.spawn("c", PanicCount::default(), |_| {
        Box::new(Counter {
            turns: turns.clone(),
            left: 0,
            every: Duration::ZERO,
        })
    });
    other.wait_done();
    assert_eq!(turns.load(Ordering::Relaxed), 1, "the host goes on");
}

/// On both kinds of table thread (a host's condvar, a worker's I/O loop):
/// a task that rings itself 1,000 times from its own turns gets 1,000 more
/// turns and sends its thread no wake-up (no notify, no waker's eventfd
/// write); a ring from another thread sends one. A count, not a time.
#[test]
fn a_ring_on_the_tasks_own_thread_makes_no_syscall() {
    use crate::engine::poller::Poller;
    let host = Host::start("shardsub-control-test", PanicCount::default()).unwrap();
    let worker = Poller::start("shardsub-worker-test", PanicCount::default()).unwrap();
    let tables = [
        ("a host", Tasks::clone(&host)),
        ("a worker", Tasks::clone(&worker)),
    ];
    for (what, tasks) in tables {
        let before = tasks.woken();
        let (_t, outside, turns, seen) = ringing(&tasks, 1000, false);
        wait(what, || turns.load(Ordering::Relaxed) == 1001);
        assert_eq!(
            tasks.woken() - before,
            1,
            "{what}: its first turn's wake-up only, none for 1,000 rings on its own thread"
        );
        outside.ring();
        wait(what, || turns.load(Ordering::Relaxed) == 1002);
        assert_eq!(tasks.woken() - before, 2, "{what}: a ring from elsewhere");
        // A worker thread is no I/O thread for the lend's purposes (a
        // handler's blocking call there is lent the connection), but it is
        // a runtime thread (nothing there waits for an instance to stop).
        assert_eq!(*seen.lock(), Some((false, true)), "{what}");
    }
}

/// A worker thread hosting an idle task sleeps with no timeout: over an
/// idle second its poll does not return (wake-ups per hour stay those of
/// a condvar host's), and a ring wakes it.
#[test]
fn an_idle_worker_thread_sleeps_until_rung() {
    use crate::engine::poller::Poller;
    let worker = Poller::start("shardsub-worker-test", PanicCount::default()).unwrap();
    let (_t, bell, turns, _) = ringing(&worker, 0, false);
    wait("its first turn", || turns.load(Ordering::Relaxed) == 1);
    let wakeups = || worker.shared().wakeups.load(Ordering::Relaxed);
    // The poll after the first turn has begun (the turn's wake-up is in).
    wait("the loop back asleep", || wakeups() >= 1);
    let before = wakeups();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(wakeups(), before, "an idle second woke the worker");
    bell.ring();
    wait("rung", || turns.load(Ordering::Relaxed) == 2);
    assert!(wakeups() > before);
}
