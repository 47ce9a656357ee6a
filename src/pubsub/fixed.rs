//! One server or N client-side shards: the fixed placements' instance.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use crate::control_loop::ClusterPubSub;
use crate::engine::{Engine, Pending, PublishOptions};
use crate::error::Error;
use crate::metrics::{add, Metrics};
use crate::pubsub::sentinel::{Sentinels, Watcher};
use crate::wire::envelope;
use crate::workers::now_us;

/// One server or N client-side shards: a publish engine over the servers,
/// and the subscribe side every placement shares (the control core in its
/// fixed mode, driven by the same control thread as a cluster's).
pub(crate) struct Fixed {
    /// The subscribe side: registry, workers, control core and thread,
    /// subscribe connections.
    pub(crate) sub: ClusterPubSub,
    pub(crate) publ: Arc<Engine>,
    /// Follows the masters found through Sentinel, when there are any.
    pub(crate) watcher: parking_lot::Mutex<Option<Watcher>>,
}

impl std::fmt::Debug for Fixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fixed")
            .field("servers", &self.publ.servers())
            .field("config", &self.sub.shared.config)
            .field("workers", &self.sub.shared.queues.len())
            .finish_non_exhaustive()
    }
}

thread_local! {
    static ENVELOPE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
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
        if let Some(o) = self.sub.shared.config.history.of(channel) {
            // Every failure, at once or later, reaches the callback (once).
            let env = self.envelope_us();
            let counters = self.sub.shared.counters.clone();
            let count = move |r: Result<i64, Error>| {
                if r.is_err() {
                    add(&counters.publish_errors, 1);
                }
            };
            let r = crate::history::fixed::publish(&self.publ, channel, payload, o, env, count);
            if r.is_ok() {
                add(&self.sub.shared.counters.published, 1);
            }
            return r;
        }
        let r = if self.sub.shared.config.envelope {
            ENVELOPE_BUF.with(|b| {
                let mut b = b.borrow_mut();
                b.clear();
                envelope::encode_into(&mut b, payload, now_us());
                self.publ.publish(channel, &b)
            })
        } else {
            self.publ.publish(channel, payload)
        };
        let c = &self.sub.shared.counters;
        match &r {
            Ok(()) => add(&c.published, 1),
            Err(_) => add(&c.publish_errors, 1),
        }
        r
    }

    /// [`Fixed::publish`] with a handle to the outcome (the receivers, or
    /// why it failed). A failure is counted in the metrics' publish
    /// errors (by the publish engine, or here for history's publishes).
    pub(crate) fn publish_pending(&self, channel: &[u8], payload: &[u8]) -> Pending<i64> {
        add(&self.sub.shared.counters.published, 1);
        let options = PublishOptions::classic();
        if let Some(o) = self.sub.shared.config.history.of(channel) {
            let (pending, slot) = Pending::pooled();
            let counters = self.sub.shared.counters.clone();
            let done = move |r: Result<i64, Error>| {
                if r.is_err() {
                    add(&counters.publish_errors, 1);
                }
                slot.complete(r)
            };
            let env = self.envelope_us();
            // A failure at once has reached `done` already.
            let _ = crate::history::fixed::publish(&self.publ, channel, payload, o, env, done);
            pending
        } else if self.sub.shared.config.envelope {
            ENVELOPE_BUF.with(|b| {
                let mut b = b.borrow_mut();
                b.clear();
                envelope::encode_into(&mut b, payload, now_us());
                self.publ.publish_handle(channel, &b, options, true)
            })
        } else {
            self.publ.publish_handle(channel, payload, options, true)
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
        let r = if let Some(o) = self.sub.shared.config.history.of(channel) {
            let (pending, slot) = Pending::pooled();
            let env = self.envelope_us();
            let done = move |r| slot.complete(r);
            let _ = crate::history::fixed::publish(&self.publ, channel, payload, o, env, done);
            pending.wait_timeout(timeout)
        } else if self.sub.shared.config.envelope {
            ENVELOPE_BUF.with(|b| {
                let mut b = b.borrow_mut();
                b.clear();
                envelope::encode_into(&mut b, payload, now_us());
                self.publ
                    .publish_wait_within(channel, &b, options, Some(timeout))
            })
        } else {
            // A sequential caller: the engine may lend it the connection.
            self.publ
                .publish_wait_within(channel, payload, options, Some(timeout))
        };
        let c = &self.sub.shared.counters;
        match &r {
            Ok(_) => add(&c.published, 1),
            Err(_) => add(&c.publish_errors, 1),
        }
        r
    }

    /// The envelope's publish time now, when it is on.
    fn envelope_us(&self) -> Option<u64> {
        self.sub.shared.config.envelope.then(now_us)
    }

    /// Follows the masters of `servers` found through Sentinel: when one
    /// moves, its publish connections are moved first, then its subscribe
    /// connections (so a message published on the new master while this
    /// instance's subscribers are still on the old one comes before their
    /// gap event, never after it).
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses the watcher's thread.
    pub(crate) fn follow(
        &mut self,
        sentinels: Arc<Sentinels>,
        servers: &[String],
    ) -> Result<(), Error> {
        let prefix = crate::pubsub::sentinel::PREFIX;
        let known = servers
            .iter()
            .zip(self.publ.servers())
            .filter_map(|(s, a)| Some((s.strip_prefix(prefix)?.to_string(), a.tcp()?)))
            .collect();
        let servers = servers.to_vec();
        let publ = Arc::downgrade(&self.publ);
        let shared = Arc::downgrade(&self.sub.shared);
        let on_switch = move |name: &str, to: std::net::SocketAddr| {
            let server = format!("{prefix}{name}");
            let (Some(publ), Some(shared)) = (publ.upgrade(), shared.upgrade()) else {
                return;
            };
            for (i, _) in servers.iter().enumerate().filter(|(_, s)| **s == server) {
                publ.restart_server(i, to.into());
            }
            shared.post(|inbox| inbox.moved.push((server, to.into())));
        };
        let panics = self.sub.shared.counters.thread_panics.clone();
        *self.watcher.lock() = Some(Watcher::start(sentinels, known, panics, on_switch)?);
        Ok(())
    }

    /// The publish engine, for other commands (`command_pending`, …).
    pub(crate) fn publisher(&self) -> &Engine {
        &self.publ
    }

    /// Any command, on the server that holds `key` (the shard a channel
    /// of that name lives on), waited for up to the request timeout.
    pub(crate) fn command(&self, key: &[u8], args: &[Vec<u8>]) -> Result<resp::Value, Error> {
        self.publ.command_pending(self.server_of(key), args).wait()
    }

    /// Index of the server (builder order) that owns `channel`.
    pub(crate) fn server_of(&self, channel: &[u8]) -> usize {
        self.sub.shared.server_of(channel)
    }

    pub(crate) fn metrics(&self) -> Metrics {
        let mut m = self.sub.subscriber_metrics();
        // Fire-and-forget publishes taken and failing later are counted
        // by the publish engine.
        m.publish_errors += self.publ.stats().publish_failed;
        m
    }

    pub(crate) fn shutdown(&self) {
        if crate::engine::on_runtime_thread() {
            // Stopped, not joined: a later call from elsewhere joins it.
            if let Some(w) = self.watcher.lock().as_mut() {
                w.stop();
            }
        } else {
            // Out of the lock before joining it.
            let watcher = self.watcher.lock().take();
            if let Some(mut w) = watcher {
                w.stop();
            }
        }
        self.sub.shutdown();
        self.publ.shutdown();
        let active = &self.sub.shared.active;
        active.arm();
        active.wake();
    }
}

impl Drop for Fixed {
    fn drop(&mut self) {
        self.shutdown();
    }
}
