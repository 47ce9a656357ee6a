//! Threads that host tasks: a runtime's control thread runs the control
//! loops of every Pub/Sub instance built on it, and its worker threads
//! the worker queues (each queue on one thread), so instances add no
//! threads of their own.
//!
//! The task table, [`Tasks`], is driven by the thread that runs it: a
//! [`Host`] (the control thread), which sleeps on the table's condvar, or
//! an I/O loop that hosts tasks (a worker thread,
//! [`Poller`](crate::engine::poller::Poller)), which sleeps in its
//! `mio::Poll` and is woken by its waker. A task runs a turn when its
//! [`Bell`] rings (its inbox or queue got work) or its deadline passes; a
//! turn does what is due without waiting and says when it must run again.
//! Turns of different tasks never overlap (one thread), and a task's turn
//! runs outside the table's lock, so a ring from any thread (an I/O
//! thread's report, an application call) never waits for a turn. A ring
//! from the table's own thread only marks the task rung: that thread looks
//! at the table before it sleeps again, so it needs no wake-up (no futex,
//! no eventfd write). A panic in a turn is logged and counted like a
//! thread's, and ends that task alone.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::engine::ready::Ready;
use crate::engine::wait::Latch;
use crate::engine::wait::Signal;
use crate::error::Error;
use crate::threads::{self, PanicCount};

thread_local! {
    /// On the thread that runs a task table, which table (see [`id_of`];
    /// 0 elsewhere): the end of a task must not be waited for there, and a
    /// ring there needs no wake-up.
    static ON_HOST: Cell<usize> = const { Cell::new(0) };
}

/// A table's identity: its address.
fn id_of(table: &Table) -> usize {
    std::ptr::from_ref(table) as usize
}

thread_local! {
    /// Set on the runtime's own threads: a call that would wait for an I/O
    /// thread (an engine's shutdown) must not wait from one of them.
    static ON_IO_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is an I/O thread of some runtime. A worker
/// thread is not one, though it runs an I/O loop: a handler's blocking
/// call there is served by the lend (`Shared::stage_for_lend`).
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

/// Whether the calling thread runs a task table (a runtime's control or
/// worker thread, or an instance's own worker thread).
pub(crate) fn on_any_host() -> bool {
    ON_HOST.with(Cell::get) != 0
}

/// Work hosted on a [`Tasks`] table's thread.
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

/// A task taken out of its entry for its turn.
type Taken = (u64, Box<dyn Task>);

#[derive(Default)]
struct State {
    tasks: BTreeMap<u64, Entry>,
    /// Tasks rung since the last look (some may have been taken since, or
    /// have finished), so a look does not walk every task.
    rung: Vec<u64>,
    /// The deadlines of the tasks that are not running, earliest first.
    timers: BTreeSet<(Instant, u64)>,
    next: u64,
    /// The tasks of the turns being run, kept between runs so a run
    /// allocates nothing.
    scratch: Vec<Taken>,
    /// A host's runtime is gone: its thread ends (every instance on it
    /// has shut down, and its task with it; any other task is dropped).
    stop: bool,
}

impl State {
    /// Rings task `id`: its next turn runs soon (after the one running, if
    /// any). True when that is news (it was not rung already).
    fn ring(&mut self, id: u64) -> bool {
        match self.tasks.get_mut(&id) {
            Some(e) if !e.rung => {
                e.rung = true;
                self.rung.push(id);
                true
            }
            _ => false,
        }
    }

    /// Moves the tasks to run now (rung, or due by `now`) out of their
    /// entries into `out`.
    fn take_due(&mut self, now: Instant, out: &mut Vec<Taken>) {
        let mut rung = std::mem::take(&mut self.rung);
        for id in rung.drain(..) {
            if let Some(e) = self.tasks.get_mut(&id) {
                // Taken already (a second entry for one ring).
                if !e.rung {
                    continue;
                }
                // No task while it is not in yet: `Tasks::spawn` lists it
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

    /// Whether a task is rung, or due by `now`.
    fn any_due(&self, now: Instant) -> bool {
        !self.rung.is_empty() || self.next_due().is_some_and(|at| at <= now)
    }

    /// Who a task is, for reports.
    fn whose(&self, id: u64) -> (&'static str, PanicCount) {
        match self.tasks.get(&id) {
            Some(e) => (e.name, e.panics.clone()),
            None => ("shardsub-host", PanicCount::default()),
        }
    }
}

/// How a ring from another thread wakes the thread that runs a table.
enum Wake {
    /// A [`Host`]'s thread sleeps on the table's condvar.
    Cond,
    /// An I/O loop sleeps in its poller: the poller's waker.
    Poll(Arc<Ready>),
}

struct Table {
    state: Signal<State>,
    wake: Wake,
    /// Wake-ups sent to the table's thread (a condvar notify or a waker's
    /// wake) by rings and spawns from other threads.
    woken: AtomicU64,
}

impl Table {
    /// Changes the state with `f` and, unless this is the table's own
    /// thread (it looks again before it sleeps), wakes the thread when `f`
    /// says it has something new to look at.
    fn change(&self, f: impl FnOnce(&mut State) -> bool) {
        if ON_HOST.with(Cell::get) == id_of(self) {
            self.state.with(f);
            return;
        }
        match &self.wake {
            Wake::Cond => {
                if self.state.update(f) {
                    self.woken.fetch_add(1, Ordering::Relaxed);
                }
            }
            Wake::Poll(ready) => {
                if self.state.with(f) {
                    self.woken.fetch_add(1, Ordering::Relaxed);
                    ready.wake();
                }
            }
        }
    }
}

/// A task table, run by one thread (a [`Host`], or a worker's I/O loop).
/// Cheap to clone (a handle).
#[derive(Clone)]
pub(crate) struct Tasks(Arc<Table>);

/// Rings a hosted task: it runs a turn soon. Cheap to clone; ringing a
/// task that has finished (or a table that is gone) does nothing.
#[derive(Clone)]
pub(crate) struct Bell {
    table: Weak<Table>,
    id: u64,
}

impl Bell {
    pub(crate) fn ring(&self) {
        if let Some(t) = self.table.upgrade() {
            t.change(|st| st.ring(self.id));
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

impl Tasks {
    fn new(wake: Wake) -> Tasks {
        Tasks(Arc::new(Table {
            state: Signal::default(),
            wake,
            woken: AtomicU64::new(0),
        }))
    }

    /// A table run by an I/O loop, woken by `ready`'s waker.
    pub(crate) fn polled(ready: Arc<Ready>) -> Tasks {
        Tasks::new(Wake::Poll(ready))
    }

    /// The calling thread runs this table from now on: a ring there only
    /// marks its task rung, and it counts as a runtime thread.
    pub(crate) fn enter(&self) {
        ON_HOST.with(|c| c.set(id_of(&self.0)));
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
        let id = self.0.state.with(|st| {
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
            table: Arc::downgrade(&self.0),
            id,
        };
        let task = make(&bell);
        self.0.change(|st| match st.tasks.get_mut(&id) {
            Some(e) => {
                e.task = Some(task);
                // Its first turn runs at once (a ring before it was in
                // found no task to take).
                e.rung = true;
                st.rung.push(id);
                true
            }
            None => false,
        });
        Hosted { done }
    }

    /// When the table must run next: `now` when a task is rung, else its
    /// earliest deadline (`None`: only a ring wakes it).
    pub(crate) fn next_due(&self, now: Instant) -> Option<Instant> {
        self.0.state.with(|st| {
            if st.rung.is_empty() {
                st.next_due()
            } else {
                Some(now)
            }
        })
    }

    /// Runs the turns due at `now` (rung, or past their deadline), each
    /// outside the table's lock, on the calling thread (the table's), named
    /// `thread`. A turn that held the thread
    /// [`SLOW_TURN`](crate::metrics::SLOW_TURN) or longer is reported by
    /// its task (once: the caller must not count that time again). Returns
    /// how long the turns took, counted from `now`.
    pub(crate) fn run_due(&self, now: Instant, thread: &str) -> Duration {
        let state = &self.0.state;
        let mut due = state.with(|st| {
            let mut due = std::mem::take(&mut st.scratch);
            st.take_due(now, &mut due);
            due
        });
        // One clock read per turn (none per message a turn handles): each
        // turn's end is the next one's start.
        let mut end = now;
        for (id, task) in due.drain(..) {
            end = self.turn(id, task, end, thread);
        }
        state.with(|st| st.scratch = due);
        end.saturating_duration_since(now)
    }

    /// Runs task `id`'s turn, begun at `start`, and puts it back (or drops
    /// it when it has finished); returns when the turn ended.
    fn turn(&self, id: u64, mut task: Box<dyn Task>, start: Instant, thread: &str) -> Instant {
        let state = &self.0.state;
        let outcome = catch_unwind(AssertUnwindSafe(|| task.turn()));
        let end = Instant::now();
        let took = end.saturating_duration_since(start);
        if took >= crate::metrics::SLOW_TURN && outcome.is_ok() {
            task.slow(thread, took);
        }
        let back = match outcome {
            Ok(Turn::At(at)) => Some((task, Some(at), false)),
            Ok(Turn::Rung) => Some((task, None, false)),
            Ok(Turn::Again) => Some((task, None, true)),
            Ok(Turn::Done) => {
                let (name, panics) = state.with(|st| st.whose(id));
                finish(Some(task), name, &panics);
                None
            }
            Err(payload) => {
                let (name, panics) = state.with(|st| st.whose(id));
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
        end
    }

    /// Wake-ups sent to the table's thread so far by rings and spawns from
    /// other threads (a ring on its own thread sends none).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn woken(&self) -> u64 {
        self.0.woken.load(Ordering::Relaxed)
    }

    /// Tasks hosted now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.state.with(|st| st.tasks.len())
    }

    /// What drops every task left, and signals its end, when the table's
    /// thread ends, whatever way it ends (no owner waits forever).
    pub(crate) fn ending(&self) -> Ending {
        Ending(self.clone())
    }
}

/// See [`Tasks::ending`].
pub(crate) struct Ending(Tasks);

impl Drop for Ending {
    fn drop(&mut self) {
        let left = self.0 .0.state.with(|st| std::mem::take(&mut st.tasks));
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

/// A thread that runs a task table (a [`Host`]'s, a worker's), which
/// its owner asks to end in its own way, then drops.
pub(crate) struct TaskThread {
    tasks: Tasks,
    handle: Mutex<Option<JoinHandle<()>>>,
    panics: PanicCount,
}

impl TaskThread {
    /// Starts thread `name` (a `what` thread, for the error), which runs
    /// `tasks` with `body`; its panics (none should get past the tasks')
    /// count in `panics`. Whatever way `body` ends, the tasks left are
    /// dropped and their ends signalled.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses the thread.
    pub(crate) fn start(
        name: &str,
        what: &'static str,
        tasks: Tasks,
        panics: PanicCount,
        body: impl FnOnce(&Tasks) + Send + 'static,
    ) -> Result<TaskThread, Error> {
        let t = tasks.clone();
        let handle = threads::spawn(name.into(), panics.clone(), move || {
            t.enter();
            let _ending = t.ending();
            body(&t);
        })
        .map_err(|e| Error::runtime(what, &e))?;
        Ok(TaskThread {
            tasks,
            handle: Mutex::new(Some(handle)),
            panics,
        })
    }

    /// Waits for the thread to end (its owner asked it to), unless called
    /// from a thread of a runtime (this one, or one shared with other
    /// instances): then it ends by itself after the turn it runs.
    pub(crate) fn join(&self) {
        if on_runtime_thread() {
            return;
        }
        if let Some(h) = self.handle.lock().take() {
            threads::join(h, &self.panics);
        }
    }
}

/// One control thread and the tasks it hosts, on the table's condvar.
pub(crate) struct Host(TaskThread);

impl Host {
    /// Starts the thread (named `name`); its panics (none should get past
    /// the tasks') count in `panics`.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses the thread.
    pub(crate) fn start(name: &str, panics: PanicCount) -> Result<Host, Error> {
        let tasks = Tasks::new(Wake::Cond);
        TaskThread::start(name, "control thread", tasks, panics, run).map(Host)
    }
}

/// A thread's table: it hosts tasks ([`Tasks::spawn`]).
impl std::ops::Deref for TaskThread {
    type Target = Tasks;

    fn deref(&self) -> &Tasks {
        &self.tasks
    }
}

impl std::ops::Deref for Host {
    type Target = TaskThread;

    fn deref(&self) -> &TaskThread {
        &self.0
    }
}

impl Drop for Host {
    /// Ends the thread (each instance waited for its own task at
    /// shutdown) and joins it (see [`TaskThread::join`]).
    fn drop(&mut self) {
        self.0.tasks.0.state.update(|st| st.stop = true);
        self.0.join();
    }
}

/// A host's thread: runs the tasks that are rung or due, sleeps on the
/// table's condvar until the next deadline or ring.
fn run(tasks: &Tasks) {
    let thread = std::thread::current();
    let thread = thread.name().unwrap_or("shardsub-host");
    let state = &tasks.0.state;
    loop {
        let next = state.with(|st| st.next_due());
        let woke = state.wait_until(next, None, |st| {
            if st.stop {
                return Some(false);
            }
            st.any_due(Instant::now()).then_some(true)
        });
        match woke {
            Some(true) => {}
            Some(false) => return,
            None => continue, // the deadline passed: look again
        }
        tasks.run_due(Instant::now(), thread);
    }
}

#[cfg(test)]
mod tests;
