//! The control loop of every placement: one control thread per instance
//! that drives the sans-IO [`control::Core`] (`driver.rs`, `commands.rs`)
//! for one server, N client-side shards (the core's fixed mode) and a
//! cluster alike, and a cluster's publish side beside it: the sans-IO
//! [`control::publish::PublishCore`] decides routes, redirects, the hold,
//! gates and service channels; `hold.rs` keeps it behind its lock,
//! `publish.rs` gives it the publishes and replies it decides on,
//! `carry.rs`, `gate.rs`, `service.rs` and `topo.rs` carry out what it
//! decided; and keyed commands (`keyed.rs`). What a user sees of a cluster
//! is documented on the public [`crate::cluster`] module.

pub(crate) mod builder;
mod carry;
mod commands;
mod dispatch;
mod driver;
mod fence;
mod gate;
pub(crate) mod health;
pub(crate) mod hold;
pub(crate) mod keyed;
#[cfg(test)]
mod memory_tests;
mod message;
mod metrics;
mod outcome;
pub(crate) mod publish;
pub(crate) mod recover;
mod service;
pub(crate) mod settings;
pub(crate) mod shared;
mod topo;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

pub use settings::{Mode, ResubscribeSplit};

use crate::engine::host::Hosted;
use crate::engine::wait::Deadline;
use crate::engine::Pending;
use crate::error::Error;
use crate::front::{Front, Placement};
use crate::metrics::add;
use crate::workers::Pool;
#[allow(unused_imports)]
use crate::workers::{Event, Handler};
use resp::Value;
use shared::Shared;

/// The cluster placement behind a [`PubSub`](crate::PubSub):
/// subscriptions, publishing and delivery over a Redis or Valkey Cluster.
pub(crate) struct ClusterPubSub {
    pub(crate) shared: Arc<Shared>,
    runtime: crate::Runtime,
    pool: Pool,
    /// Its control loop, on the runtime's control thread.
    control: Mutex<Option<Hosted>>,
    shut: AtomicBool,
}

impl std::fmt::Debug for ClusterPubSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPubSub")
            .field("config", &self.shared.config)
            .field("workers", &self.shared.queues.len())
            .finish_non_exhaustive()
    }
}

impl ClusterPubSub {
    fn new(shared: Arc<Shared>, runtime: crate::Runtime, pool: Pool, control: Hosted) -> Self {
        ClusterPubSub {
            shared,
            runtime,
            pool,
            control: Mutex::new(Some(control)),
            shut: AtomicBool::new(false),
        }
    }

    /// Waits for the first topology (publish routes known).
    /// Waits until every primary of the map has its publish connection
    /// up (`require_all_servers`); shuts down and fails otherwise.
    ///
    /// # Errors
    ///
    /// [`Error::Cluster`] naming a primary that was not reached in time.
    pub(crate) fn wait_all_primaries(&self, timeout: Duration) -> Result<(), Error> {
        let s = &self.shared;
        let deadline = Deadline::after(timeout);
        loop {
            let down: Option<(u16, std::net::SocketAddr)> = {
                let routes = s.routes.read();
                routes.owner.iter().enumerate().find_map(|(slot, &o)| {
                    let e = routes.engines.get(usize::from(o))?;
                    let addr = e.servers().first()?.tcp()?;
                    (!e.is_connection_up(0, 0)).then_some((slot as u16, addr))
                })
            };
            let Some((slot, addr)) = down else {
                return Ok(());
            };
            if deadline.passed() {
                self.shutdown();
                return Err(Error::Cluster {
                    slot,
                    reason: format!(
                        "primary {addr} not reached within {timeout:?} (require_all_servers)"
                    )
                    .into(),
                });
            }
            s.active
                .sleep_until(deadline.or_within(Duration::from_millis(20)));
        }
    }

    /// A publish engine whose connection is up, waiting up to `timeout`
    /// for one (its connection may still be opening right after build).
    pub(crate) fn first_up_engine(&self, timeout: Duration) -> Option<Arc<crate::engine::Engine>> {
        let s = &self.shared;
        let deadline = Deadline::after(timeout);
        loop {
            let up = {
                let routes = s.routes.read();
                routes
                    .engines
                    .iter()
                    .find(|e| e.is_connection_up(0, 0))
                    .cloned()
            };
            if up.is_some() || deadline.passed() {
                return up;
            }
            s.active
                .sleep_until(deadline.or_within(Duration::from_millis(20)));
        }
    }

    fn wait_started(&self, timeout: Duration) -> Result<(), Error> {
        let s = &self.shared;
        let deadline = Deadline::after(timeout);
        loop {
            let routed = s
                .routes
                .read()
                .owner
                .iter()
                .any(|&o| o != control::NO_ROUTE);
            let ok = s.counters.cluster.unknown_owners.load(Ordering::Relaxed) == 0;
            if routed && ok {
                return Ok(());
            }
            // A seed that refuses the credentials or the handshake, or is
            // no cluster node, will go on so: say so now, with the
            // server's words.
            let refused = match routed {
                true => None,
                false => s.seed_errors.lock().values().find_map(|e| match e {
                    Error::Auth { .. } | Error::Handshake { .. } | Error::Config(_) => {
                        Some(e.clone())
                    }
                    _ => None,
                }),
            };
            if let Some(e) = refused {
                self.shutdown();
                return Err(e);
            }
            if deadline.passed() {
                if routed {
                    return Ok(()); // partly served; the tracker keeps trying
                }
                let seeds: Vec<(Arc<str>, Arc<str>)> = s
                    .seed_errors
                    .lock()
                    .iter()
                    .map(|(a, e)| (a.to_string().into(), e.to_string().into()))
                    .collect();
                self.shutdown();
                return Err(Error::Discovery {
                    after: timeout,
                    seeds: seeds.into(),
                });
            }
            s.active
                .sleep_until(deadline.or_within(Duration::from_millis(20)));
        }
    }

    /// Publishes `payload` to `channel`, fire-and-forget: `SPUBLISH` of the
    /// channel's server name to its slot's owner (`PUBLISH` in classic
    /// mode). Redirects and retries are followed in the background; a
    /// publish that fails in the end is counted in
    /// [`ClusterMetrics::publish_failed`]. The command is encoded straight
    /// into the owner's connection, and its I/O thread keeps the bytes
    /// until the reply (for a possible redirect); in steady state nothing
    /// is allocated per publish.
    ///
    /// # Errors
    ///
    /// What is known before it returns, when the publish was not taken:
    /// [`Error::HoldFull`] (the owner unreachable and the hold at its
    /// cap), [`Error::NotConnected`] (the owner's connection down, with a
    /// zero [`publish_hold`](crate::PubSubBuilder::publish_hold)),
    /// [`Error::Shutdown`] after shutdown. `Ok` means sent or held.
    pub fn publish(&self, channel: &[u8], payload: &[u8]) -> Result<(), Error> {
        self.check_open()?;
        let r = publish::publish(&self.shared, channel, payload, None);
        if r.is_ok() {
            add(&self.shared.counters.published, 1);
        }
        r
    }

    /// [`PubSub::publish`](crate::PubSub::publish) with a handle to the
    /// outcome: the number of receivers on the owning node, or why the
    /// publish failed ([`Error::Cluster`] past the redirect or retry
    /// bounds, [`Error::OwnerUnreachable`] past the publish hold,
    /// [`Error::HoldFull`]; with a zero hold, a connection error as it
    /// happened). The handle's slot is pooled: nothing is allocated per
    /// call in steady state (a callback given to
    /// [`Pending::then`](crate::engine::Pending::then) is boxed, which
    /// allocates unless it captures nothing).
    pub fn publish_pending(&self, channel: &[u8], payload: &[u8]) -> Pending<i64> {
        let (pending, slot) = Pending::pooled();
        match self.check_open() {
            Err(e) => slot.complete(Err(e)),
            Ok(()) => self.publish_done(channel, payload, publish::Done::Slot(slot)),
        }
        pending
    }

    fn publish_done(&self, channel: &[u8], payload: &[u8], done: publish::Done) {
        add(&self.shared.counters.published, 1);
        // A failure at once has reached `done` already.
        let _ = publish::publish(&self.shared, channel, payload, Some(done));
    }

    /// Publishes and waits for the outcome (see
    /// [`ClusterPubSub::publish_pending`]). Allocates
    /// nothing in steady state (the wait reuses a cell of the calling
    /// thread).
    ///
    /// # Errors
    ///
    /// As [`ClusterPubSub::publish_pending`], and [`Error::WaitTimeout`].
    pub fn publish_wait(
        &self,
        channel: &[u8],
        payload: &[u8],
        timeout: Duration,
    ) -> Result<i64, Error> {
        self.check_open()?;
        let waiter = publish::Waiter::current();
        let round = waiter.begin();
        self.publish_done(channel, payload, publish::Done::Wait(waiter.clone(), round));
        waiter
            .wait(round, timeout)
            .unwrap_or(Err(Error::WaitTimeout { after: timeout }))
    }

    /// Any command, sent to the owner of `key`'s slot (see
    /// [`PubSub::command`](crate::PubSub::command)): a handle completed by
    /// the control thread.
    pub(crate) fn command(&self, key: &[u8], args: Vec<Vec<u8>>) -> Pending<Value> {
        if let Err(e) = self.check_open() {
            return Pending::ready(Err(e));
        }
        keyed::command(&self.shared, key, args)
    }

    /// The name the server knows `channel` by (`{TAG}.channel` in the
    /// sharded modes, `channel` in classic mode).
    pub fn server_channel(&self, channel: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.shared.wire_into(channel, &mut out);
        out
    }

    /// The app-level partitions in use.
    pub fn partitions(&self) -> &shardcore::Partitions {
        &self.shared.parts
    }

    /// Asks for a topology rebuild now (counted as manual).
    pub fn refresh(&self) {
        self.shared.request_refresh();
    }

    /// The runtime whose I/O threads serve every node connection.
    pub(crate) fn runtime(&self) -> &crate::Runtime {
        &self.runtime
    }

    /// A snapshot of the counters, with the cluster's section.
    pub fn metrics(&self) -> crate::Metrics {
        metrics::snapshot(&self.shared)
    }

    /// The delivery counters alone (what a fixed placement reports),
    /// with the subscribe connections up per server.
    pub(crate) fn subscriber_metrics(&self) -> crate::Metrics {
        let s = &self.shared;
        let mut m = metrics::snapshot(s);
        if s.fixed() {
            let per = s.config.multiplier.max(1);
            let mut up = vec![0usize; s.config.fixed_servers];
            for (lane, c) in s.lane_conn.read().iter().enumerate() {
                if c.as_ref().is_some_and(|c| c.ready.load(Ordering::Acquire)) {
                    if let Some(n) = up.get_mut(lane / per) {
                        *n += 1;
                    }
                }
            }
            m.active_connections = up;
        }
        m
    }

    /// Stops everything: the control thread and every node connection,
    /// then the workers (messages still queued are dropped and counted).
    /// Idempotent (a call after one that started it waits for the end);
    /// also run on drop. Called from a thread of the runtime (a handler,
    /// an event or `Pending::then` callback), it starts all that and
    /// returns at once: those threads are shared with the other instances
    /// on the runtime, so none waits for this one.
    pub fn shutdown(&self) {
        if !self.shut.swap(true, Ordering::AcqRel) {
            self.shared.closing.store(true, Ordering::Release);
            self.shared.post(|inbox| inbox.stop = true);
        }
        // Out of the lock before waiting (neither waits on a thread of the
        // runtime; a later call from elsewhere does).
        let control = self.control.lock().clone();
        if let Some(h) = control {
            h.wait_done();
        }
        self.pool.shutdown();
        if !crate::engine::on_runtime_thread() {
            // The control task has finished: every node engine it closed
            // is listed.
            let closing = std::mem::take(&mut *self.shared.engines_closing.lock());
            for c in closing {
                c.wait();
            }
        }
        *self.shared.routes.write() = shared::Routes::empty();
        self.shared.active.wake();
    }
}

impl ClusterPubSub {
    /// Marks `patterns` wanted (or not) on every server's pattern lane.
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`] after shutdown, [`Error::InvalidArgument`]
    /// without pattern lanes (sharded Pub/Sub has no patterns).
    pub(crate) fn set_patterns_wanted(
        &self,
        patterns: &[Vec<u8>],
        want: bool,
    ) -> Result<(), Error> {
        self.check_open()?;
        let s = &self.shared;
        if s.pattern_servers() == 0 {
            return Err(Error::InvalidArgument(
                "pattern subscriptions need classic Pub/Sub: sharded Pub/Sub (a cluster's \
                 default) has none; build with mode(Mode::Classic) to use them on a cluster"
                    .into(),
            ));
        }
        // Checked first: a pattern is wanted on every server or on none.
        if want {
            for p in patterns {
                crate::front::check_len(p, "a pattern")?;
            }
        }
        for lane in (0..s.pattern_servers()).filter_map(|i| s.pattern_lane(i)) {
            s.front
                .set_wanted(patterns, want, |_| Ok(()), |_| lane, |l| s.mark_dirty(l))?;
        }
        if !want {
            s.front.leaving.request();
            self.request_fence();
        }
        Ok(())
    }

    /// A wait's timeout as [`Error::Unreachable`] while some servers are
    /// not connected (naming each with its last error); `e` otherwise.
    pub(crate) fn unreachable_or(&self, e: Error) -> Error {
        let Error::WaitTimeout { after } = e else {
            return e;
        };
        let lost = self.shared.health.lock().lost();
        match lost.is_empty() {
            true => e,
            false => Error::Unreachable {
                after,
                servers: lost.into(),
            },
        }
    }

    /// Blocks until every pattern is active on every server, one is
    /// refused, it shuts down or `timeout` passes.
    pub(crate) fn wait_patterns_active<C: AsRef<[u8]>>(
        &self,
        patterns: &[C],
        timeout: Duration,
    ) -> Result<(), Error> {
        let s = &self.shared;
        s.front.active.wait_all(
            patterns,
            timeout,
            || self.check_open(),
            |ps: &[C]| {
                ps.iter()
                    .take_while(|p| s.is_pattern_active(p.as_ref()))
                    .count()
            },
            |p| s.pattern_refusal(p),
        )
    }
}

impl Placement for ClusterPubSub {
    fn front(&self) -> &Front {
        &self.shared.front
    }

    fn lane_of(&self, channel: &[u8]) -> usize {
        self.shared.lane_of(channel)
    }

    fn mark_dirty(&self, lane: usize) {
        self.shared.mark_dirty(lane);
    }

    fn is_active(&self, channel: &[u8]) -> bool {
        self.shared.is_active(channel)
    }

    fn active_prefix<C: AsRef<[u8]>>(&self, channels: &[C]) -> usize {
        self.shared.active_prefix(channels)
    }

    fn check_open(&self) -> Result<(), Error> {
        if self.shut.load(Ordering::Acquire) {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    fn request_fence(&self) {
        self.shared.post(|inbox| inbox.fence = true);
    }
}

impl Drop for ClusterPubSub {
    fn drop(&mut self) {
        self.shutdown();
    }
}
