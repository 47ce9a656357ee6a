//! A thread that hosts tasks: a runtime's control thread runs the control
//! loops of every Pub/Sub instance built on it, and its worker threads
//! the worker queues (each queue on one thread), so instances add no
//! threads of their own.
//!
//! A task runs a turn when its [`Bell`] rings (its inbox or queue got
//! work) or its deadline passes; a turn does what is due without waiting
//! and says when it must run again. Turns of different tasks never
//! overlap (one thread), and a task's turn runs outside the host's lock,
//! so a ring from any thread (an I/O thread's report, an application
//! call) never waits for a turn. A panic in a turn is logged and counted
//! like a thread's, and ends that task alone.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::engine::wait::Latch;
use crate::engine::wait::Signal;
use crate::error::Error;
use crate::threads::{self, PanicCount};

thread_local! {
    /// On a host's thread, which host (see [`id_of`]; 0 elsewhere): the
    /// end of a task it runs must not be waited for there.
    static ON_HOST: Cell<usize> = const { Cell::new(0) };
}

/// A host's identity: the address of its state.
fn id_of(state: &Arc<Signal<State>>) -> usize {
    Arc::as_ptr(state) as usize
}

thread_local! {
    /// Set on the runtime's own threads: a call that would wait for an I/O
    /// thread (an engine's shutdown) must not wait from one of them.
    static ON_IO_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is an I/O thread of some runtime.
pub(crate) fn on_io_thread() -> bool {
    ON_IO_THREAD.with(Cell::get)
}

/// Whether the calling thread is one of a runtime's threads (I/O, control
/// or worker), which every instance on it shares: application code runs
/// there (a handler, an event or `Pending::then` callback), and nothing
/// there may wait for an instance to stop (see `Engine::shutdown`).
pub(crate) fn on_runtime_thread() -> bool {
    on_io_thread() || on_any_host()
}

/// Marks the calling thread as an I/O thread (see [`on_io_thread`]).
pub(crate) fn mark_io_thread() {
    ON_IO_THREAD.with(|c| c.set(true));
}

/// Whether the calling thread is the thread of some host (a runtime's
/// control or worker thread).
pub(crate) fn on_any_host() -> bool {
    ON_HOST.with(Cell::get) != 0
}

/// Work hosted on a [`Host`]'s thread.
pub(crate) trait Task: Send + 'static {
    /// Does what is due now, without waiting, and says when to run again
    /// (besides whenever its [`Bell`] rings).
    fn turn(&mut self) -> Turn;

    /// Its last turn held the thread `took`, at least
    /// [`SLOW_TURN`](crate::metrics::SLOW_TURN): the other tasks on
    /// `thread` waited that long (reported by the task, which knows its
    /// instance and what it ran).
    fn slow(&mut self, _thread: &str, _took: Duration) {}
}

/// When a task runs again.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// At this instant at the latest.
    At(Instant),
    /// When its bell rings.
    Rung,
    /// As soon as the other tasks due have had their turn.
    Again,
    /// Never: it has finished and is dropped.
    Done,
}

struct Entry {
    /// `None` while its turn runs.
    task: Option<Box<dyn Task>>,
    due: Option<Instant>,
    rung: bool,
    done: Arc<Latch>,
    panics: PanicCount,
    name: &'static str,
}

#[derive(Default)]
struct State {
    tasks: BTreeMap<u64, Entry>,
    /// Tasks rung since the last look (some may have been taken since, or
    /// have finished), so a look does not walk every task.
    rung: Vec<u64>,
    /// The deadlines of the tasks that are not running, earliest first.
    timers: BTreeSet<(Instant, u64)>,
    next: u64,
    /// The runtime is gone: the thread ends (every instance on it has
    /// shut down, and its task with it; any other task is dropped).
    stop: bool,
}

impl State {
    /// Rings task `id`: its next turn runs soon (after the one running, if
    /// any).
    fn ring(&mut self, id: u64) {
        if let Some(e) = self.tasks.get_mut(&id) {
            if !e.rung {
                e.rung = true;
                self.rung.push(id);
            }
        }
    }

    /// Moves the tasks to run now (rung, or due by `now`) out of their
    /// entries into `out`.
    fn take_due(&mut self, now: Instant, out: &mut Vec<(u64, Box<dyn Task>)>) {
        let mut rung = std::mem::take(&mut self.rung);
        for id in rung.drain(..) {
            if let Some(e) = self.tasks.get_mut(&id) {
                // Taken already (a second entry for one ring).
                if !e.rung {
                    continue;
                }
                // No task while it is not in yet: `Host::spawn` lists it
                // again when it is.
                if let Some(t) = e.task.take() {
                    e.rung = false;
                    if let Some(at) = e.due.take() {
                        self.timers.remove(&(at, id));
                    }
                    out.push((id, t));
                }
            }
        }
        self.rung = rung;
        while let Some(&(at, id)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            if let Some(e) = self.tasks.get_mut(&id) {
                if let Some(t) = e.task.take() {
                    e.due = None;
                    e.rung = false;
                    out.push((id, t));
                }
            }
        }
    }

    /// Puts a task back after its turn, due `at` and rung again if `again`.
    fn put_back(&mut self, id: u64, task: Box<dyn Task>, at: Option<Instant>, again: bool) {
        let Some(e) = self.tasks.get_mut(&id) else {
            return;
        };
        e.task = Some(task);
        e.due = at;
        if let Some(at) = at {
            self.timers.insert((at, id));
        }
        // Rung during its turn: it is on the list already.
        if again {
            self.ring(id);
        }
    }

    /// The earliest deadline of a task that is not running.
    fn next_due(&self) -> Option<Instant> {
        self.timers.first().map(|&(at, _)| at)
    }
}

/// One control thread and the tasks it hosts.
pub(crate) struct Host {
    state: Arc<Signal<State>>,
    handle: Mutex<Option<JoinHandle<()>>>,
    panics: PanicCount,
}

/// Rings a hosted task: it runs a turn soon. Cheap to clone; ringing a
/// task that has finished (or a host that is gone) does nothing.
#[derive(Clone)]
pub(crate) struct Bell {
    state: Weak<Signal<State>>,
    id: u64,
}

impl Bell {
    pub(crate) fn ring(&self) {
        if let Some(s) = self.state.upgrade() {
            s.update(|st| st.ring(self.id));
        }
    }
}

/// A hosted task, as its owner holds it: what says it has finished.
#[derive(Clone)]
pub(crate) struct Hosted {
    done: Arc<Latch>,
}

impl Hosted {
    /// Waits until the task has finished and is dropped (its last turn
    /// returned [`Turn::Done`], or panicked), unless called from a thread
    /// of a runtime (its own host's thread runs it, and any other such
    /// thread is shared with other instances, which must not wait for this
    /// one): then it returns at once and the task finishes by itself.
    pub(crate) fn wait_done(&self) {
        if on_runtime_thread() {
            return;
        }
        while !self
            .done
            .wait_until(Instant::now() + Duration::from_secs(3600))
        {}
    }
}

impl Host {
    /// Starts the thread (named `name`); its panics (none should get past
    /// the tasks') count in `panics`.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses the thread.
    pub(crate) fn start(name: &str, panics: PanicCount) -> Result<Host, Error> {
        let state: Arc<Signal<State>> = Arc::default();
        let s = state.clone();
        let handle = threads::spawn(name.into(), panics.clone(), move || {
            ON_HOST.with(|c| c.set(id_of(&s)));
            run(&s)
        })
        .map_err(|e| Error::runtime("control thread", &e))?;
        Ok(Host {
            state,
            handle: Mutex::new(Some(handle)),
            panics,
        })
    }

    /// Hosts the task `make` returns, given the task's bell (to hand to
    /// what will ring it before the first turn runs, so no ring is
    /// missed); its first turn runs at once. A panic in one of its turns
    /// is reported as one of thread `name` and counted in `panics`.
    pub(crate) fn spawn(
        &self,
        name: &'static str,
        panics: PanicCount,
        make: impl FnOnce(&Bell) -> Box<dyn Task>,
    ) -> Hosted {
        let done = Latch::new(1);
        // Reserved with no task: nothing runs until it is in.
        let id = self.state.with(|st| {
            st.next += 1;
            let id = st.next;
            st.tasks.insert(
                id,
                Entry {
                    task: None,
                    due: None,
                    rung: false,
                    done: done.clone(),
                    panics,
                    name,
                },
            );
            id
        });
        let bell = Bell {
            state: Arc::downgrade(&self.state),
            id,
        };
        let task = make(&bell);
        self.state.update(|st| {
            if let Some(e) = st.tasks.get_mut(&id) {
                e.task = Some(task);
                // Its first turn runs at once (a ring before it was in
                // found no task to take).
                e.rung = true;
                st.rung.push(id);
            }
        });
        Hosted { done }
    }

    /// Tasks hosted now.
    #[cfg(test)]
    pub(crate) fn tasks(&self) -> usize {
        self.state.with(|st| st.tasks.len())
    }
}

impl Drop for Host {
    /// Ends the thread (each instance waited for its own task at
    /// shutdown); joined unless called from a thread of a runtime (this
    /// one, or one shared with other instances): then it ends by itself
    /// after the turn it runs.
    fn drop(&mut self) {
        self.state.update(|st| st.stop = true);
        if on_runtime_thread() {
            return;
        }
        if let Some(h) = self.handle.lock().take() {
            threads::join(h, &self.panics);
        }
    }
}

/// Whatever way the thread ends, every task left is dropped and its end
/// signalled (no owner waits forever).
struct Ending<'a>(&'a Signal<State>);

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        let left = self.0.with(|st| std::mem::take(&mut st.tasks));
        for e in left.into_values() {
            let name = e.name;
            let panics = e.panics.clone();
            finish(e.task, name, &panics);
            e.done.count_down();
        }
    }
}

/// Drops a finished task; a panic in its drop (an application handler's
/// drop, say) is reported as the task's.
fn finish(task: Option<Box<dyn Task>>, name: &str, panics: &PanicCount) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(task))) {
        threads::report(name, &*payload, panics);
    }
}

/// The thread: runs the tasks that are rung or due, sleeps until the next
/// deadline or ring.
fn run(state: &Signal<State>) {
    let _ending = Ending(state);
    // Reused: a turn allocates nothing here.
    let mut due: Vec<(u64, Box<dyn Task>)> = Vec::new();
    let thread = std::thread::current();
    let thread = thread.name().unwrap_or("shardsub-host");
    loop {
        let next = state.with(|st| st.next_due());
        let woke = state.wait_until(next, None, |st| {
            if st.stop {
                return Some(false);
            }
            st.take_due(Instant::now(), &mut due);
            (!due.is_empty()).then_some(true)
        });
        match woke {
            Some(true) => {}
            Some(false) => return,
            None => continue, // the deadline passed: look again
        }
        // One clock read per turn (none per message a turn handles): each
        // turn's end is the next one's start.
        let mut start = Instant::now();
        for (id, mut task) in due.drain(..) {
            let outcome = catch_unwind(AssertUnwindSafe(|| task.turn()));
            let end = Instant::now();
            let took = end.saturating_duration_since(start);
            start = end;
            if took >= crate::metrics::SLOW_TURN && outcome.is_ok() {
                task.slow(thread, took);
            }
            let whose = || {
                state.with(|st| match st.tasks.get(&id) {
                    Some(e) => (e.name, e.panics.clone()),
                    None => ("shardsub-host", PanicCount::default()),
                })
            };
            let back = match outcome {
                Ok(Turn::At(at)) => Some((task, Some(at), false)),
                Ok(Turn::Rung) => Some((task, None, false)),
                Ok(Turn::Again) => Some((task, None, true)),
                Ok(Turn::Done) => {
                    let (name, panics) = whose();
                    finish(Some(task), name, &panics);
                    None
                }
                Err(payload) => {
                    let (name, panics) = whose();
                    threads::report(name, &*payload, &panics);
                    finish(Some(task), name, &panics);
                    None
                }
            };
            let finished = state.with(|st| match back {
                Some((task, at, again)) => {
                    st.put_back(id, task, at, again);
                    None
                }
                None => st.tasks.remove(&id),
            });
            // The task is dropped: its owner may go on.
            if let Some(e) = finished {
                e.done.count_down();
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(host.tasks(), 1);
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

    /// Rings itself during its first turn.
    struct SelfRinging {
        bell: Bell,
        turns: Arc<AtomicU64>,
    }

    impl Task for SelfRinging {
        fn turn(&mut self) -> Turn {
            if self.turns.fetch_add(1, Ordering::Relaxed) == 0 {
                self.bell.ring();
            }
            Turn::Rung
        }
    }

    #[test]
    fn a_ring_before_a_task_is_in_or_during_its_turn_gets_it_a_turn() {
        let host = Host::start("shardsub-control-test", PanicCount::default()).unwrap();
        let turns = Arc::new(AtomicU64::new(0));
        let mut outside = None;
        let _t = host.spawn("r", PanicCount::default(), |bell| {
            // Before the task is in: its first turn runs all the same.
            bell.ring();
            outside = Some(bell.clone());
            Box::new(SelfRinging {
                bell: bell.clone(),
                turns: turns.clone(),
            })
        });
        // The first turn rang it while it ran: a second turn follows.
        wait("two turns", || turns.load(Ordering::Relaxed) >= 2);
        outside.expect("a bell").ring();
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
}
