//! A worker thread: an I/O loop ([`IoThread`]) that hosts tasks (worker
//! queues, see [`crate::workers`]) on its own poller, woken by its waker.
//! It hosts no connections yet; it is not an I/O thread for the lend's
//! purposes ([`on_io_thread`](crate::engine::host::on_io_thread) is false
//! there), so a handler's blocking publish or command is served by the
//! lend as on any application thread.

use std::sync::Arc;

use crate::engine::host::{TaskThread, Tasks};
use crate::engine::io_thread::{poller, IoThread};
use crate::engine::thread::{Control, ThreadShared};
use crate::error::Error;
use crate::threads::PanicCount;

/// One worker thread and the tasks it hosts.
pub(crate) struct Poller {
    shared: Arc<ThreadShared>,
    thread: TaskThread,
}

impl Poller {
    /// Starts the thread (named `name`); its panics count in `panics`.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses the poller, its waker or the
    /// thread.
    pub(crate) fn start(name: &str, panics: PanicCount) -> Result<Poller, Error> {
        let (poll, shared) = poller()?;
        let tasks = Tasks::polled(shared.ready.clone());
        let io = IoThread::new(poll, shared.clone()).hosting(tasks.clone());
        let p = panics.clone();
        let thread = TaskThread::start(name, "worker thread", tasks, panics, move |_| io.run(&p))?;
        Ok(Poller { shared, thread })
    }

    /// The thread as other threads see it (its waker, its slow turns).
    pub(crate) fn shared(&self) -> &Arc<ThreadShared> {
        &self.shared
    }
}

/// It hosts tasks ([`Tasks::spawn`]).
impl std::ops::Deref for Poller {
    type Target = TaskThread;

    fn deref(&self) -> &TaskThread {
        &self.thread
    }
}

impl Drop for Poller {
    /// Ends the thread (each instance waited for its own tasks at
    /// shutdown) and joins it (see [`TaskThread::join`]).
    fn drop(&mut self) {
        self.shared.send_control(Control::Stop);
        self.thread.join();
    }
}
