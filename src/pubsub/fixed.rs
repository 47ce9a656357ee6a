//! One server or N client-side shards: the fixed placements' instance.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use crate::engine::{Engine, PublishOptions};
use crate::error::Error;
use crate::metrics::{add, Metrics};
use crate::pubsub::envelope;
use crate::pubsub::front::{Front, Placement};
use crate::pubsub::routing;
use crate::pubsub::shared::Shared;
use crate::workers::{now_us, Pool};

/// The fixed placements (one server, or N client-side shards) behind a
/// [`PubSub`](crate::PubSub).
pub(crate) struct Fixed {
    pub(crate) shared: Arc<Shared>,
    pub(crate) sub: Arc<Engine>,
    pub(crate) publ: Arc<Engine>,
    pub(crate) pool: Pool,
    pub(crate) control: Mutex<Option<JoinHandle<()>>>,
    pub(crate) shut: AtomicBool,
}

impl std::fmt::Debug for Fixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fixed")
            .field("servers", &self.sub.servers())
            .field("config", &self.shared.config)
            .field("workers", &self.shared.queues.len())
            .finish_non_exhaustive()
    }
}

thread_local! {
    static ENVELOPE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Placement for Fixed {
    fn front(&self) -> &Front {
        &self.shared.front
    }

    fn lane_of(&self, channel: &[u8]) -> usize {
        self.shared.routing.lane_of(channel)
    }

    fn mark_dirty(&self, lane: usize) {
        self.shared.mark_dirty(lane);
    }

    fn is_active(&self, channel: &[u8]) -> bool {
        self.shared.is_active(channel)
    }

    fn check_open(&self) -> Result<(), Error> {
        if self.shut.load(Ordering::Acquire) {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }
}

impl Fixed {
    /// Publishes `payload` to `channel` on its shard, fire-and-forget
    /// (with the envelope when it is on). Allocates nothing in steady
    /// state.
    ///
    /// # Errors
    ///
    /// [`Error::NotConnected`] while the channel's server is reconnecting,
    /// [`Error::Shutdown`] after shutdown.
    pub(crate) fn publish(&self, channel: &[u8], payload: &[u8]) -> Result<(), Error> {
        let r = if self.shared.config.envelope {
            ENVELOPE_BUF.with(|b| {
                let mut b = b.borrow_mut();
                b.clear();
                envelope::encode_into(&mut b, payload, now_us());
                self.publ.publish(channel, &b)
            })
        } else {
            self.publ.publish(channel, payload)
        };
        let c = &self.shared.counters;
        match &r {
            Ok(()) => add(&c.published, 1),
            Err(_) => add(&c.publish_errors, 1),
        }
        r
    }

    /// [`Fixed::publish`] with the outcome handed to `f` (the receivers, or
    /// why it failed).
    pub(crate) fn publish_then<F>(&self, channel: &[u8], payload: &[u8], f: F)
    where
        F: FnOnce(Result<i64, Error>) + Send + 'static,
    {
        let counters = self.shared.counters.clone();
        let f = move |r: Result<i64, Error>| {
            if r.is_err() {
                add(&counters.publish_errors, 1);
            }
            f(r)
        };
        add(&self.shared.counters.published, 1);
        let options = PublishOptions::classic();
        if self.shared.config.envelope {
            ENVELOPE_BUF.with(|b| {
                let mut b = b.borrow_mut();
                b.clear();
                envelope::encode_into(&mut b, payload, now_us());
                self.publ.publish_then(channel, &b, options, f)
            })
        } else {
            self.publ.publish_then(channel, payload, options, f)
        }
    }

    /// [`Fixed::publish`], waiting up to `timeout` for the receivers.
    pub(crate) fn publish_wait(
        &self,
        channel: &[u8],
        payload: &[u8],
        timeout: Duration,
    ) -> Result<i64, Error> {
        let options = PublishOptions::classic();
        let pending = if self.shared.config.envelope {
            ENVELOPE_BUF.with(|b| {
                let mut b = b.borrow_mut();
                b.clear();
                envelope::encode_into(&mut b, payload, now_us());
                self.publ.publish_pending(channel, &b, options)
            })
        } else {
            self.publ.publish_pending(channel, payload, options)
        };
        let r = pending.wait_timeout(timeout);
        let c = &self.shared.counters;
        match &r {
            Ok(_) => add(&c.published, 1),
            Err(_) => add(&c.publish_errors, 1),
        }
        r
    }

    /// The publish engine, for other commands (`command_pending`, …).
    pub(crate) fn publisher(&self) -> &Engine {
        &self.publ
    }

    /// Index of the server (builder order) that owns `channel`.
    pub(crate) fn server_of(&self, channel: &[u8]) -> usize {
        routing::ShardRouting {
            servers: self.shared.config.servers,
            per_server: 1,
        }
        .server_of(channel)
    }

    /// A snapshot of the counters, queue depths and lag quantiles.
    pub(crate) fn metrics(&self) -> Metrics {
        let s = &self.shared;
        let mut m = s.counters.snapshot(s.config.envelope);
        for c in &s.conns {
            m.received += c.received.load(Ordering::Relaxed);
            m.dropped.queue_full += c.dropped.load(Ordering::Relaxed);
            m.unenveloped += c.unenveloped.load(Ordering::Relaxed);
        }
        m.queue_depths = s.queues.iter().map(|q| q.depth()).collect();
        m.channels = s.registry.len() as u64;
        m.active_connections = (0..s.config.servers)
            .map(|server| {
                (0..s.config.per_server)
                    .filter(|&i| self.sub.is_connection_up(server, i))
                    .count()
            })
            .collect();
        m
    }

    /// The subscribe engine (for the tests of panic reporting).
    #[cfg(test)]
    pub(crate) fn subscribe_engine(&self) -> &Engine {
        &self.sub
    }

    /// Stops everything: the control thread, the subscribe connections,
    /// the workers (messages still queued are dropped and counted), then
    /// the publish engine (pending publishes get its shutdown grace).
    /// Idempotent; also run on drop. Do not call it from a handler.
    pub(crate) fn shutdown(&self) {
        if self.shut.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shared.post(|inbox| inbox.stop = true);
        // The subscribe engine first: a control thread waiting to stage a
        // command then gets `Shutdown` instead of waiting for room.
        self.sub.shutdown();
        if let Some(h) = self.control.lock().take() {
            crate::threads::join(h, &self.shared.counters.thread_panics);
        }
        self.pool.shutdown();
        self.publ.shutdown();
        self.shared.active.arm();
        self.shared.active.wake();
    }
}

impl Drop for Fixed {
    fn drop(&mut self) {
        self.shutdown();
    }
}
