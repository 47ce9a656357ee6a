//! Pub/Sub at scale on one server or on N client-side shards.
//!
//! [`PubSub`] owns two engines (pipelined publish connections, and
//! subscribe connections), a control thread and a pool of worker threads:
//!
//! ```text
//! subscribe()/unsubscribe() ─► registry (wanted state per channel, by lane)
//!                                 │ dirty lanes
//!                                 ▼
//!                           control thread ── SUBSCRIBE ≤512 ─► subscribe conns
//!                           (resubscribe + gap, probe)            │ pushes
//!                                                                 ▼
//!   handler ◄── worker w ◄── bounded queue w ◄── worker_of(channel) ◄── I/O thread
//! ```
//!
//! - A channel lives on server `shard_of(channel, N)` (publisher and
//!   subscriber agree without talking) and on one of that server's
//!   subscribe connections, chosen by a hash of the channel.
//! - Calls close in time coalesce into commands of at most
//!   [`PubSubBuilder::batch_size`] channels; a subscribe racing an
//!   unsubscribe ends in the state asked for last.
//! - Messages reach the [`Handler`] on worker `worker_of(channel, W)`, in
//!   order per channel. A full worker queue drops and counts; the reader
//!   never blocks.
//! - After a reconnect every wanted channel is resubscribed and the handler
//!   gets [`Event::Gap`] naming the channels that may have lost messages.
//! - An idle subscribe connection publishes to its own service channel
//!   every [`PubSubBuilder::probe_interval`]; if that does not come back in
//!   time, the connection is restarted.
//!
//! What it does not do: patterns, Redis Cluster (see the cluster mode),
//! persistence or redelivery (Pub/Sub is at most once; gaps are signalled).
//!
//! ```no_run
//! use shardsub::PubSub;
//! let ps = PubSub::builder()
//!     .address("127.0.0.1:6379")
//!     .handler(|channel: &[u8], payload: &[u8]| {
//!         println!("{}: {} bytes", String::from_utf8_lossy(channel), payload.len());
//!     })
//!     .build()?;
//! ps.subscribe(["news", "sports"])?;
//! ps.wait_active(&["news", "sports"], std::time::Duration::from_secs(2))?;
//! ps.publish(b"news", b"hello")?;
//! # Ok::<(), shardsub::Error>(())
//! ```

pub(crate) mod active;
#[cfg(test)]
mod alloc_count;
mod builder;
mod control;
mod dispatch;
pub mod envelope;
pub(crate) mod front;
mod handler;
pub(crate) mod mailbox;
pub(crate) mod refusal;
pub(crate) mod registry;
mod routing;
mod shared;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

pub use builder::PubSubBuilder;
pub use handler::{ChannelList, Event, Handler};

use crate::engine::Engine;
use crate::error::Error;
use crate::metrics::{add, Metrics};
use crate::workers::{now_us, Pool};
use shared::Shared;

/// Subscriptions, publishing and delivery over one server or N shards.
/// Share it between threads with an `Arc`; every method takes `&self`.
/// Dropping it shuts it down.
pub struct PubSub {
    shared: Arc<Shared>,
    sub: Arc<Engine>,
    publ: Arc<Engine>,
    pool: Pool,
    control: Mutex<Option<JoinHandle<()>>>,
    shut: AtomicBool,
}

impl std::fmt::Debug for PubSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PubSub")
            .field("servers", &self.sub.servers())
            .field("config", &self.shared.config)
            .field("workers", &self.shared.queues.len())
            .finish_non_exhaustive()
    }
}

thread_local! {
    static ENVELOPE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl PubSub {
    /// Settings for a new instance.
    pub fn builder() -> PubSubBuilder {
        PubSubBuilder::default()
    }

    fn check_open(&self) -> Result<(), Error> {
        if self.shut.load(Ordering::Acquire) {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    fn set_wanted<I>(&self, channels: I, want: bool) -> Result<(), Error>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.check_open()?;
        let s = &self.shared;
        s.front.set_wanted(
            channels,
            want,
            |c| s.routing.lane_of(c),
            |l| s.mark_dirty(l),
        );
        Ok(())
    }

    /// Asks for these channels. Returns at once; the subscribe commands
    /// leave from the control thread, batched with other calls. Use
    /// [`PubSub::wait_active`] to learn when they are confirmed.
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`] after shutdown.
    pub fn subscribe<I>(&self, channels: I) -> Result<(), Error>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.set_wanted(channels, true)
    }

    /// Gives these channels up. Returns at once, like
    /// [`PubSub::subscribe`]; messages already received may still reach the
    /// handler.
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`] after shutdown.
    pub fn unsubscribe<I>(&self, channels: I) -> Result<(), Error>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.set_wanted(channels, false)
    }

    /// Whether the server has confirmed the channel's subscription on a
    /// connection that is still up.
    pub fn is_active(&self, channel: &[u8]) -> bool {
        self.shared.is_active(channel)
    }

    /// Blocks until every channel in `channels` is active (confirmed), or
    /// `timeout` passes.
    ///
    /// # Errors
    ///
    /// [`Error::WaitTimeout`] when some channel is still not active at the
    /// deadline (for example one that was never subscribed),
    /// [`Error::SubscribeRefused`] for a channel the server refused
    /// (naming it and the server's reason), [`Error::Shutdown`] after
    /// shutdown.
    pub fn wait_active<C: AsRef<[u8]>>(
        &self,
        channels: &[C],
        timeout: Duration,
    ) -> Result<(), Error> {
        let s = &self.shared;
        s.front.wait_active(
            channels,
            timeout,
            || self.check_open(),
            |c| s.is_active(c),
            |c| s.routing.lane_of(c),
        )
    }

    /// Publishes `payload` to `channel` on its shard, fire-and-forget
    /// (with the envelope when it is on). Allocates nothing in steady
    /// state.
    ///
    /// # Errors
    ///
    /// [`Error::NotConnected`] while the channel's server is reconnecting,
    /// [`Error::Shutdown`] after shutdown.
    pub fn publish(&self, channel: &[u8], payload: &[u8]) -> Result<(), Error> {
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

    /// The publish engine, for other commands (`command_pending`, …).
    pub fn publisher(&self) -> &Engine {
        &self.publ
    }

    /// Index of the server (builder order) that owns `channel`.
    pub fn server_of(&self, channel: &[u8]) -> usize {
        routing::ShardRouting {
            servers: self.shared.config.servers,
            per_server: 1,
        }
        .server_of(channel)
    }

    /// A snapshot of the counters, queue depths and lag quantiles.
    pub fn metrics(&self) -> Metrics {
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
    pub fn shutdown(&self) {
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

impl Drop for PubSub {
    fn drop(&mut self) {
        self.shutdown();
    }
}
