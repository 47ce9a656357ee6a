//! The worker pool: W threads, each with a bounded queue, fed by the I/O
//! threads.
//!
//! The I/O thread that parsed a message picks the queue of its lane's
//! home (see [`home`]: one per lane, fixed, so a channel's messages stay in
//! order) and copies channel and payload into a byte buffer from its [`Stage`], which
//! queues a read's messages under one lock per worker (see [`stage`]). The
//! worker swaps the whole queue out under the lock (one lock per batch on
//! its side), runs the handler, and gives the buffers back to the queue's
//! free list. After warm-up nothing is allocated per message.
//!
//! A full queue drops the message and counts it: the reader never blocks
//! (blocking there lets the server cut the connection for output-buffer
//! overrun, or deadlocks a handler that publishes). The queue also notes
//! the dropped message's channel; when the worker takes its next batch it
//! appends one [`Event::Dropped`] naming every such channel once. Since a
//! full queue accepts no message until the worker takes it, every drop
//! happened after the last message of that batch: the event is in order.

use std::sync::Arc;

use parking_lot::Mutex;

mod recovery;

use crate::engine::host::Hosted;
use crate::engine::poller::Poller;
use crate::error::Error;
use crate::metrics::Counters;

pub(crate) mod handler;
pub(crate) mod home;
mod merge;
mod stage;

pub use handler::{handler_fn, ChannelList, Event, FnHandler, Handler, Text};
pub(crate) use home::Homes;
#[cfg(test)]
use stage::STAGE;
pub(crate) use stage::{LaneOwners, Origin, Stage};
mod queue;
#[cfg(test)]
mod tests;
mod worker;

pub(crate) use queue::{Drops, Gap, Passes, Queue, Reader};
pub(crate) use worker::now_us;
use worker::Worker;

/// The worker queues of an instance, each consumed on one worker thread:
/// threads of its own, or a runtime's, shared with the other instances on
/// it (queue `i` on thread `i`).
pub(crate) struct Pool {
    queues: Vec<Arc<Queue>>,
    hosted: Mutex<Vec<Hosted>>,
    /// Its own threads (none on a runtime's shared workers).
    own: Mutex<Vec<Arc<Poller>>>,
}

impl Pool {
    /// Starts `workers` threads of its own with queues of `capacity`
    /// messages each.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses a thread; the workers already
    /// started are stopped.
    pub(crate) fn start(
        workers: usize,
        capacity: usize,
        handler: Arc<dyn Handler>,
        counters: Arc<Counters>,
    ) -> Result<Pool, Error> {
        let mut own = Vec::with_capacity(workers);
        for n in 0..workers {
            let name = format!("shardsub-worker-{n}");
            // A failure drops the threads started so far (joining them).
            own.push(Arc::new(Poller::start(
                &name,
                counters.thread_panics.clone(),
            )?));
        }
        let pool = Pool::start_on(&own, capacity, handler, counters);
        *pool.own.lock() = own;
        Ok(pool)
    }

    /// A queue of `capacity` messages on each of `hosts` (a runtime's
    /// shared worker threads).
    pub(crate) fn start_on(
        hosts: &[Arc<Poller>],
        capacity: usize,
        handler: Arc<dyn Handler>,
        counters: Arc<Counters>,
    ) -> Pool {
        let queues: Vec<Arc<Queue>> = hosts
            .iter()
            .map(|_| Arc::new(Queue::new(capacity)))
            .collect();
        let hosted = queues
            .iter()
            .zip(hosts)
            .map(|(q, host)| {
                let (h, c) = (handler.clone(), counters.clone());
                host.spawn("shardsub-worker", counters.thread_panics.clone(), |bell| {
                    let _ = q.bell.set(bell.clone());
                    Box::new(Worker::new(q.clone(), h, c))
                })
            })
            .collect();
        Pool {
            queues,
            hosted: Mutex::new(hosted),
            own: Mutex::new(Vec::new()),
        }
    }

    /// The queues, indexed by worker.
    pub(crate) fn queues(&self) -> &[Arc<Queue>] {
        &self.queues
    }

    /// Closes every queue (what is still queued is dropped and counted) and
    /// waits for the workers to let go of them, then stops its own threads;
    /// called from a thread of the runtime, only closes the queues.
    /// Idempotent.
    pub(crate) fn shutdown(&self) {
        for q in &self.queues {
            q.close();
        }
        if crate::engine::on_runtime_thread() {
            // Shared with other instances: no waiting here; the workers let
            // go by themselves, and a later call elsewhere waits.
            return;
        }
        let hosted = self.hosted.lock().clone();
        for h in hosted {
            h.wait_done();
        }
        drop(std::mem::take(&mut *self.own.lock()));
    }
}
