//! The runtime: a fixed set of I/O threads, each a `mio::Poll`, that host
//! the connections of every engine built on it, and for the Pub/Sub
//! instances built on it one control thread and a fixed set of worker
//! threads, each running the same I/O loop to host its worker queues (see
//! [`crate::engine::host`], [`crate::engine::poller`]).
//!
//! An engine built without a runtime gets a private one. A Pub/Sub
//! instance builds one runtime for all of its engines (publish, subscribe,
//! every cluster node), and several instances can share one by passing the
//! same [`Runtime`] to their builders: the thread count is then fixed by
//! the runtime, whatever the number of servers, nodes or partitions.
//! Connections join a thread when their engine starts and leave it when
//! their engine shuts down; threads never come and go with nodes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::engine::host::Host;
use crate::engine::io_thread::{poller, IoThread};
use crate::engine::poller::Poller;
use crate::engine::thread::{Control, ThreadShared};
use crate::error::Error;
use crate::threads::{self, PanicCount};

/// A fixed set of I/O threads shared by engines and Pub/Sub instances,
/// and the control and worker threads of the instances.
///
/// Cloning is cheap (a handle); the threads stop when the last handle and
/// the last engine on it are gone. Build one and pass it to
/// [`Builder::runtime`](crate::engine::Builder::runtime) or
/// [`PubSubBuilder::runtime`](crate::PubSubBuilder::runtime) (any
/// placement) to
/// run many instances (a simulated fleet, or several embedded clients) on
/// a fixed number of threads:
///
/// ```no_run
/// # fn main() -> Result<(), shardsub::Error> {
/// let runtime = shardsub::Runtime::new(2)?;
/// let a = shardsub::engine::Engine::builder()
///     .address("127.0.0.1:6379")
///     .runtime(&runtime)
///     .build()?;
/// let b = shardsub::engine::Engine::builder()
///     .address("127.0.0.1:6380")
///     .runtime(&runtime)
///     .build()?;
/// assert_eq!(runtime.io_threads(), 2); // still two threads for both
/// # drop((a, b));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    threads: Vec<Arc<ThreadShared>>,
    handles: Mutex<Vec<JoinHandle<()>>>,
    next: AtomicUsize,
    panics: PanicCount,
    /// The control thread of the Pub/Sub instances built on it, started
    /// with the first.
    control: Mutex<Option<Arc<Host>>>,
    /// How many worker threads the instances share.
    workers: usize,
    /// Those threads (each an I/O loop that hosts worker queues), started
    /// with the first instance that uses them.
    worker_hosts: Mutex<Vec<Arc<Poller>>>,
    /// The next subscribe connection's worker, over every instance.
    next_home: AtomicUsize,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("io_threads", &self.inner.threads.len())
            .field("thread_panics", &self.inner.panics.get())
            .finish_non_exhaustive()
    }
}

/// The default thread count: the machine's available parallelism.
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Runtime {
    /// Starts `io_threads` I/O threads.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `io_threads` is 0, [`Error::Runtime`] when
    /// the OS refuses a poller or a thread (then nothing is left running).
    pub fn new(io_threads: usize) -> Result<Runtime, Error> {
        Runtime::start(io_threads, default_threads(), PanicCount::default())
    }

    /// Starts `io_threads` I/O threads, with `workers` worker threads for
    /// the handlers of the Pub/Sub instances built on it (default: one
    /// per core), started with the first instance that uses them.
    ///
    /// # Errors
    ///
    /// As [`Runtime::new`]; [`Error::Config`] when `workers` is 0.
    pub fn with_workers(io_threads: usize, workers: usize) -> Result<Runtime, Error> {
        if workers == 0 {
            return Err(Error::Config("workers must be at least 1".into()));
        }
        Runtime::start(io_threads, workers, PanicCount::default())
    }

    /// Starts one I/O thread per core (the machine's available
    /// parallelism).
    ///
    /// # Errors
    ///
    /// As [`Runtime::new`].
    pub fn per_core() -> Result<Runtime, Error> {
        Runtime::new(default_threads())
    }

    /// Starts `n` threads whose panics are counted in `panics`.
    pub(crate) fn start(n: usize, workers: usize, panics: PanicCount) -> Result<Runtime, Error> {
        if n == 0 {
            return Err(Error::Config("io_threads must be at least 1".into()));
        }
        let mut polls = Vec::with_capacity(n);
        let mut shared = Vec::with_capacity(n);
        for _ in 0..n {
            let (poll, thread) = poller()?;
            shared.push(thread);
            polls.push(poll);
        }
        // The runtime owns the threads from the first one on, so a failed
        // start stops (and joins) the ones already running when it drops.
        let runtime = Runtime {
            inner: Arc::new(RuntimeInner {
                threads: shared,
                handles: Mutex::new(Vec::with_capacity(n)),
                next: AtomicUsize::new(0),
                panics,
                control: Mutex::new(None),
                workers,
                worker_hosts: Mutex::new(Vec::new()),
                next_home: AtomicUsize::new(0),
            }),
        };
        for (i, poll) in polls.into_iter().enumerate() {
            let io = IoThread::new(poll, runtime.inner.threads[i].clone());
            let panics = runtime.inner.panics.clone();
            let inner_panics = panics.clone();
            let h = threads::spawn(format!("shardsub-io-{i}"), panics, move || {
                crate::engine::host::mark_io_thread();
                io.run(&inner_panics);
            })
            .map_err(|e| Error::runtime("I/O thread", &e))?;
            runtime.inner.handles.lock().push(h);
        }
        Ok(runtime)
    }

    /// The runtime of a Pub/Sub instance: the one given to its builder
    /// (whose panics its metrics then add), or its own with `io_threads`
    /// threads (default: available parallelism, at most `max_useful`),
    /// whose panics count in the instance's own counter.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for `io_threads` of 0, or both settings given;
    /// [`Error::Runtime`] as for [`Runtime::new`].
    pub(crate) fn for_instance(
        given: Option<&Runtime>,
        io_threads: Option<usize>,
        max_useful: usize,
        counters: &crate::metrics::Counters,
    ) -> Result<Runtime, Error> {
        match (given, io_threads) {
            (_, Some(0)) => Err(Error::Config("io_threads must be at least 1".into())),
            (Some(_), Some(_)) => Err(Error::Config(
                "io_threads and runtime exclude each other (the runtime sets the threads)".into(),
            )),
            (Some(r), None) => {
                let _ = counters.runtime_panics.set(r.panics().clone());
                Ok(r.clone())
            }
            (None, n) => {
                let threads = n.unwrap_or_else(default_threads).min(max_useful).max(1);
                Runtime::start(threads, default_threads(), counters.thread_panics.clone())
            }
        }
    }

    /// The number of I/O threads.
    pub fn io_threads(&self) -> usize {
        self.inner.threads.len()
    }

    /// I/O threads of this runtime that panicked (each also logged). A
    /// panicked thread's connections fail with [`Error::RuntimeStopped`].
    pub fn thread_panics(&self) -> u64 {
        self.inner.panics.get()
    }

    /// Turns of this runtime's I/O threads that took
    /// [`SLOW_TURN`](crate::metrics::SLOW_TURN) or longer: a callback run
    /// there ([`Pending::then`](crate::Pending::then), an observer's)
    /// blocked the thread, and every connection on it waited. Each is
    /// logged with `log::warn!` naming the thread. (The turns of the
    /// handlers and of the control loop are counted per instance, in
    /// [`Metrics::slow_turns`](crate::Metrics::slow_turns), and not here,
    /// though the worker threads run the same loop.)
    pub fn slow_turns(&self) -> u64 {
        let workers = self.inner.worker_hosts.lock();
        self.inner
            .threads
            .iter()
            .chain(workers.iter().map(|w| w.shared()))
            .map(|t| t.slow_turns.load(Ordering::Relaxed))
            .sum()
    }

    pub(crate) fn panics(&self) -> &PanicCount {
        &self.inner.panics
    }

    /// The thread for the next connection: round robin over the threads
    /// that are still running.
    ///
    /// # Errors
    ///
    /// [`Error::RuntimeStopped`] when every thread has stopped.
    pub(crate) fn pick(&self) -> Result<Arc<ThreadShared>, Error> {
        let n = self.inner.threads.len();
        let first = self.inner.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| &self.inner.threads[(first + k) % n])
            .find(|t| !t.is_dead())
            .cloned()
            .ok_or(Error::RuntimeStopped)
    }

    /// The worker of a new subscribe connection among `workers`: round
    /// robin over the connections of every instance on this runtime, so
    /// that instances sharing its workers spread over them (see
    /// [`crate::workers::home`]).
    pub(crate) fn next_home(&self, workers: usize) -> usize {
        self.inner.next_home.fetch_add(1, Ordering::Relaxed) % workers.max(1)
    }

    /// The control thread that hosts the control loops of every Pub/Sub
    /// instance on this runtime (started by the first).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses the thread.
    pub(crate) fn control_host(&self) -> Result<Arc<Host>, Error> {
        let mut g = self.inner.control.lock();
        if let Some(h) = &*g {
            return Ok(h.clone());
        }
        let h = Arc::new(Host::start("shardsub-control", self.inner.panics.clone())?);
        *g = Some(h.clone());
        Ok(h)
    }

    /// The worker threads the Pub/Sub instances on this runtime share
    /// (started by the first that uses them).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses a thread.
    pub(crate) fn worker_hosts(&self) -> Result<Vec<Arc<Poller>>, Error> {
        let mut g = self.inner.worker_hosts.lock();
        while g.len() < self.inner.workers {
            let name = format!("shardsub-worker-{}", g.len());
            g.push(Arc::new(Poller::start(&name, self.inner.panics.clone())?));
        }
        Ok(g.clone())
    }

    /// The number of worker threads the Pub/Sub instances built on this
    /// runtime share (those built without
    /// [`PubSubBuilder::workers`](crate::PubSubBuilder::workers)).
    pub fn workers(&self) -> usize {
        self.inner.workers
    }

    /// Thread `n` (for the tests of panic reporting).
    #[cfg(test)]
    pub(crate) fn thread(&self, n: usize) -> &Arc<ThreadShared> {
        &self.inner.threads[n]
    }
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        for t in &self.threads {
            t.send_control(Control::Stop);
        }
        if crate::engine::host::on_runtime_thread() {
            // The last handle went away inside a callback on one of the
            // runtime's threads: they stop by themselves; joining would
            // wait on the calling thread (or one waiting for it).
            return;
        }
        for h in std::mem::take(&mut *self.handles.lock()) {
            threads::join(h, &self.panics);
        }
    }
}
