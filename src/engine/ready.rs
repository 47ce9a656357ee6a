//! How a submitter tells an I/O thread that a connection has staged work:
//! the thread's ready list and its poller's waker. A connection's shared
//! state holds this, not the whole thread, so the thread's control queue
//! (which carries connection drivers) stays above it.

use parking_lot::Mutex;

/// One I/O thread's ready list and waker.
pub(crate) struct Ready {
    waker: mio::Waker,
    /// Connections (by slot) with staged work.
    pub(crate) list: Mutex<Vec<usize>>,
}

impl Ready {
    pub(crate) fn new(waker: mio::Waker) -> Self {
        Ready {
            waker,
            list: Mutex::new(Vec::new()),
        }
    }

    /// Puts the connection in slot `local` on the list and wakes the thread.
    pub(crate) fn notify(&self, local: usize) {
        self.list.lock().push(local);
        self.wake();
    }

    /// Wakes the thread (a failure is logged: nothing else can be done).
    pub(crate) fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            log::error!("cannot wake I/O thread: {e}");
        }
    }
}
