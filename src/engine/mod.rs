//! The low-level client: [`Engine`], pipelined connections to one or more
//! servers on a [`Runtime`]'s I/O threads, for any command, with
//! [`Observer`] hooks on every connection. [`PubSub`](crate::PubSub) is
//! built on it; use the engine directly for commands beside Pub/Sub, or to
//! publish with explicit [`PublishOptions`] (it does not follow a cluster:
//! see [`PubSub`](crate::PubSub) for that).
//!
//! ```no_run
//! use std::time::Duration;
//! use shardsub::Value;
//! use shardsub::engine::{Engine, PublishOptions};
//!
//! # fn main() -> Result<(), shardsub::Error> {
//! let engine = Engine::builder()
//!     .address("127.0.0.1:6379")
//!     .flush_delay(Duration::from_micros(100))
//!     .build()?;
//!
//! // Fire-and-forget: no allocation, leaves with the next batch.
//! engine.publish(b"news", b"hello")?;
//!
//! // With an outcome: how many subscribers got it.
//! let receivers = engine
//!     .publish_pending(b"news", b"hello again", PublishOptions::sharded())
//!     .wait_timeout(Duration::from_secs(1))?;
//! println!("{receivers} subscribers got it");
//!
//! // Any command, with its owned reply.
//! assert_eq!(engine.command(["PING"])?, Value::Simple(b"PONG".to_vec()));
//! engine.shutdown();
//! # Ok(())
//! # }
//! ```

mod backoff;
mod builder;
pub(crate) mod clock;
mod driver;
pub(crate) mod host;
mod io_thread;
pub(crate) mod kept;
mod lend;
#[cfg(feature = "tokio")]
mod lend_async;
#[cfg(all(test, feature = "tokio"))]
mod lend_async_tests;
#[cfg(test)]
mod lend_tests;
mod pending;
pub(crate) mod resolve;
mod runtime;
mod shared;
#[cfg(test)]
mod tests;
pub(crate) mod wait;

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Token;
use parking_lot::{Condvar, Mutex};
use resp::Value;

pub use crate::observer::{ConnInfo, Observer};
pub use builder::Builder;
pub use pending::Pending;
pub use runtime::Runtime;
pub(crate) use runtime::{default_threads, on_runtime_thread, Closing};
pub use shared::EngineStats;

use crate::addr::ServerAddr;
use crate::conn::{ConnConfig, ReplyKind, Request};
use crate::error::Error;
use crate::metrics::add;
use crate::transport::tls::TlsTarget;
use driver::ConnDriver;
pub(crate) use pending::SlotRef;
use pending::{Completion, Slot};
use runtime::Latch;
use shared::{ConnShared, Control, EngineCounters, Staging, ThreadShared, CONNECTING};

/// A request for one reply of any kind, its handle and its cell.
fn value_request() -> (Pending<Value>, SlotRef<Value>, Request<Completion>) {
    let (pending, slot) = Pending::new();
    let request = Request {
        user: Completion::Value(slot.clone()),
        kind: ReplyKind::Single,
    };
    (pending, slot, request)
}

/// Appends the publish command `options` ask for.
fn encode_publish(buf: &mut Vec<u8>, options: PublishOptions, channel: &[u8], payload: &[u8]) {
    let kind = resp::PublishKind::of(options.sharded);
    resp::encode_publish(buf, kind, &[channel], &[payload]);
}

/// Settings every connection and I/O thread reads.
pub(crate) struct Settings {
    pub(crate) conn: ConnConfig,
    /// Buffered bytes per connection beyond which submitters wait.
    pub(crate) max_buffered: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) observer: Arc<dyn Observer>,
    pub(crate) counters: EngineCounters,
    /// A failed first attempt does not end the connection (it reconnects).
    pub(crate) degraded: bool,
    /// Where kept publishes' outcomes go (a cluster's publish engines).
    pub(crate) kept: Option<kept::AnySink>,
    /// Idle connections may be lent to sequential callers (see `lend.rs`):
    /// no observer, no kept publishes (TLS is checked per connection).
    pub(crate) lendable: bool,
    /// How long a lend may go unused ([`lend::LEASE`]; longer in tests).
    pub(crate) lease: Duration,
    /// After a read turn that took at least [`driver::BUSY_READ`] bytes
    /// and left the socket empty, the connection stops reading for this
    /// long, so the next turn finds more to read: one wake-up of the I/O
    /// thread (and of the workers) per pause instead of one per arriving
    /// segment. Smaller read turns less than a quarter of it apart on
    /// average pause for half of it. Zero: never (every connection but the Pub/Sub
    /// subscribers', which take
    /// [`PubSubBuilder::delivery_delay`](crate::PubSubBuilder::delivery_delay)).
    pub(crate) read_pause: Duration,
}

/// How to publish one message.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishOptions {
    /// `SPUBLISH` (sharded Pub/Sub, Redis 7+) instead of `PUBLISH`.
    pub sharded: bool,
}

impl PublishOptions {
    /// Classic `PUBLISH`.
    pub fn classic() -> Self {
        PublishOptions { sharded: false }
    }

    /// Sharded `SPUBLISH`.
    pub fn sharded() -> Self {
        PublishOptions { sharded: true }
    }
}

struct ServerEntry {
    addr: ServerAddr,
    conns: Vec<Arc<ConnShared>>,
}

struct Inner {
    servers: Vec<ServerEntry>,
    runtime: Runtime,
    /// Whether the runtime was given by the caller (shared with others), so
    /// its panics are added to this engine's count rather than already in it.
    shared_runtime: bool,
    /// Per runtime thread this engine uses: the slots of its connections.
    placed: Vec<(Arc<ThreadShared>, Vec<usize>)>,
    settings: Arc<Settings>,
    next: AtomicUsize,
    shut: AtomicBool,
    /// The shutdown, once started.
    closing: Mutex<Option<runtime::Closing>>,
    shutdown_timeout: Duration,
}

/// A pool of pipelined connections to one or more servers, driven by
/// I/O threads. Share it between threads with an `Arc`; every method takes
/// `&self`. Dropping it shuts it down (see [`Engine::shutdown`]).
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("servers", &self.servers())
            .field("io_threads", &self.inner.runtime.io_threads())
            .finish_non_exhaustive()
    }
}

/// A server as an engine starts it: its address now, its TLS target, and
/// its name when it was given by name (looked up again before reconnects).
pub(crate) type Target = (
    ServerAddr,
    Option<Arc<TlsTarget>>,
    Option<Arc<resolve::Named>>,
);

impl Engine {
    /// Settings for a new engine.
    pub fn builder() -> Builder {
        Builder::default()
    }

    fn start(
        settings: Arc<Settings>,
        addrs: &[Target],
        per_server: usize,
        runtime: (Runtime, bool),
        seed: u64,
        shutdown_timeout: Duration,
        wait: bool,
    ) -> Result<Engine, Error> {
        let (runtime, shared_runtime) = runtime;
        let now = Instant::now();
        let mut placed: Vec<(Arc<ThreadShared>, Vec<ConnDriver>)> = Vec::new();
        let mut servers = Vec::with_capacity(addrs.len());
        let mut initial = Vec::new();
        // Each connection's jitter from its own seed, drawn from the engine's.
        let mut seeds = control::Rng::new(seed);
        for (server, (addr, tls, named)) in addrs.iter().enumerate() {
            let addr = *addr;
            let mut conns = Vec::with_capacity(per_server);
            for index in 0..per_server {
                let thread = match runtime.pick() {
                    Ok(t) => t,
                    Err(e) => {
                        // Nothing was handed to a thread yet.
                        for (_, ds) in placed {
                            for mut d in ds {
                                d.fail_unserved(Error::RuntimeStopped);
                            }
                        }
                        return Err(e);
                    }
                };
                let local = thread.slots.lock().reserve();
                let shared = Arc::new(ConnShared {
                    info: ConnInfo {
                        server,
                        addr,
                        index,
                        role: settings.conn.role,
                    },
                    current: parking_lot::Mutex::new(addr),
                    named: named.clone(),
                    lend: lend::Lend::default(),
                    staging: Mutex::new(Staging::default()),
                    state: AtomicU8::new(CONNECTING),
                    wake_pending: AtomicBool::new(false),
                    thread: thread.clone(),
                    local,
                    space: Condvar::new(),
                    max_buffered: settings.max_buffered,
                    max_wait: Some(settings.conn.request_timeout).filter(|d| !d.is_zero()),
                });
                let (pending, slot) = Pending::<()>::new();
                initial.push(pending);
                let conn_seed = seeds.next_u64();
                let driver = ConnDriver::new(
                    shared.clone(),
                    settings.clone(),
                    Token(local + 1),
                    conn_seed,
                    slot,
                    tls.clone(),
                    now,
                );
                match placed.iter_mut().find(|(t, _)| Arc::ptr_eq(t, &thread)) {
                    Some((_, ds)) => ds.push(driver),
                    None => placed.push((thread, vec![driver])),
                }
                conns.push(shared);
            }
            servers.push(ServerEntry { addr, conns });
        }
        let mut slots_of = Vec::with_capacity(placed.len());
        for (thread, drivers) in placed {
            let slots = drivers.iter().map(|d| d.shared.local).collect();
            thread.send_control(Control::Attach(drivers));
            slots_of.push((thread, slots));
        }
        let engine = Engine {
            inner: Arc::new(Inner {
                servers,
                runtime,
                shared_runtime,
                placed: slots_of,
                settings: settings.clone(),
                next: AtomicUsize::new(0),
                shut: AtomicBool::new(false),
                closing: Mutex::new(None),
                shutdown_timeout,
            }),
        };
        // Each connection reports its first handshake (or why it failed)
        // within the connect timeout; the margin covers a busy thread.
        let limit = settings.connect_timeout + Duration::from_secs(1);
        if !wait {
            return Ok(engine);
        }
        for p in initial {
            match p.wait_timeout(limit) {
                Ok(()) => {}
                // Degraded start: unreachable is fine (it keeps trying);
                // refused credentials or handshake are not.
                Err(e)
                    if settings.degraded
                        && !matches!(e, Error::Auth { .. } | Error::Handshake { .. }) =>
                {
                    log::warn!("starting without a connection ({e}); it keeps trying");
                }
                Err(e) => {
                    engine.shutdown();
                    return Err(e);
                }
            }
        }
        Ok(engine)
    }

    /// The runtime whose I/O threads serve this engine.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// The servers' addresses, in builder order.
    pub fn servers(&self) -> Vec<ServerAddr> {
        self.inner.servers.iter().map(|s| s.addr).collect()
    }

    /// A snapshot of the engine's counters.
    pub fn stats(&self) -> EngineStats {
        let mut stats = self.inner.settings.counters.snapshot();
        if self.inner.shared_runtime {
            stats.thread_panics += self.inner.runtime.thread_panics();
        }
        stats
    }

    /// The connection for a channel: its shard, then a connection picked by
    /// the channel's hash (so one channel's messages stay in order), or
    /// another one of that server that is up.
    fn route_channel(&self, channel: &[u8]) -> &ConnShared {
        let servers = &self.inner.servers;
        let s = if servers.len() == 1 {
            0
        } else {
            shardcore::shard_of(channel, servers.len() as u32) as usize
        };
        let conns = &servers[s].conns;
        if conns.len() == 1 {
            return &conns[0];
        }
        let first = (shardcore::channel_hash(channel) % conns.len() as u64) as usize;
        (0..conns.len())
            .map(|k| &*conns[(first + k) % conns.len()])
            .find(|c| c.is_up())
            .unwrap_or(&conns[first])
    }

    fn route_server(&self, server: usize) -> Result<&ConnShared, Error> {
        let entry = self.inner.servers.get(server).ok_or_else(|| {
            Error::InvalidArgument(
                format!(
                    "server index {server} out of range ({} servers)",
                    self.inner.servers.len()
                )
                .into(),
            )
        })?;
        let conns = &entry.conns;
        let first = self.inner.next.fetch_add(1, Ordering::Relaxed) % conns.len();
        Ok((0..conns.len())
            .map(|k| &*conns[(first + k) % conns.len()])
            .find(|c| c.is_up())
            .unwrap_or(&conns[first]))
    }

    /// Publishes `payload` to `channel` with `PUBLISH`, fire-and-forget.
    /// Allocates nothing in steady state; the message leaves with the next
    /// write of its connection. An error reply is counted in
    /// [`EngineStats::error_replies`].
    ///
    /// When the connection already buffers
    /// [`Builder::max_buffered_bytes`] (the server is not keeping up), the
    /// call waits for room, at most the request timeout.
    ///
    /// # Errors
    ///
    /// Only what is known at once: [`Error::NotConnected`] while the
    /// channel's server is reconnecting, [`Error::Backpressure`] when no
    /// room came in time, [`Error::Shutdown`] after shutdown.
    pub fn publish(&self, channel: &[u8], payload: &[u8]) -> Result<(), Error> {
        self.publish_with(channel, payload, PublishOptions::classic())
    }

    /// [`Engine::publish`] with options (`SPUBLISH` with
    /// [`PublishOptions::sharded`]).
    ///
    /// # Errors
    ///
    /// As [`Engine::publish`].
    pub fn publish_with(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
    ) -> Result<(), Error> {
        self.submit_publish(channel, payload, options, Completion::Publish)
    }

    /// Publishes and returns a handle to the outcome: the number of
    /// subscribers that received the message, or why it failed.
    pub fn publish_pending(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
    ) -> Pending<i64> {
        self.publish_handle(channel, payload, options, false)
    }

    /// [`Engine::publish_pending`]; with `counted`, every failure is also
    /// counted in [`EngineStats::publish_failed`] (a refusal at once
    /// included): the Pub/Sub layer's acknowledged publish. The handle's
    /// slot is pooled.
    pub(crate) fn publish_handle(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
        counted: bool,
    ) -> Pending<i64> {
        let (pending, slot) = Pending::pooled();
        let completion = match counted {
            true => Completion::Acked(slot),
            false => Completion::Integer(slot),
        };
        let refused = self
            .submit_publish(channel, payload, options, completion)
            .is_err();
        if refused && counted {
            add(&self.inner.settings.counters.publish_failed, 1);
        }
        pending
    }

    /// Publishes and waits for the reply: the number of subscribers that
    /// received the message (`SPUBLISH` with [`PublishOptions::sharded`]).
    ///
    /// This is the call for a caller that awaits each publish before its
    /// next. While such callers leave the channel's connection idle, its
    /// I/O thread lends it to them: the caller writes its request and reads
    /// the reply on its own thread (one `write`, one `epoll_wait` and one
    /// `read`, where handing both to the I/O thread costs three context
    /// switches). The first call after a pause, and calls that meet other
    /// traffic on the connection, go through the I/O thread as
    /// [`Engine::publish_pending`] does; order and request timeouts are the
    /// same either way. Engines with an [`Builder::observer`] and TLS
    /// connections always go through the I/O thread.
    ///
    /// Do not call this from an [`Observer`] or a [`Pending::then`]
    /// callback.
    ///
    /// # Errors
    ///
    /// As [`Engine::publish_pending`]'s handle: [`Error::Reply`] for an
    /// error reply, [`Error::Timeout`], [`Error::ConnectionLost`],
    /// [`Error::NotConnected`], [`Error::Shutdown`], ….
    pub fn publish_wait(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
    ) -> Result<i64, Error> {
        self.publish_wait_within(channel, payload, options, None)
    }

    /// Publishes and awaits the reply, as a task on tokio (feature
    /// `tokio`): the number of subscribers that received the message
    /// (`SPUBLISH` with [`PublishOptions::sharded`]).
    ///
    /// This is [`Engine::publish_wait`] for a task that awaits each
    /// publish before its next. While such callers leave the channel's
    /// connection idle, its I/O thread lends it to them: the task writes
    /// its request on its own worker and, when the runtime's reactor says
    /// the reply is in, reads it there (the lend's epoll instance is
    /// registered in the reactor, once per connection); no lock is held
    /// across an await. That is one `write` and one wake of the worker per
    /// publish, where [`Engine::publish_pending`]`.await` hands the write
    /// and the read to the I/O thread (two eventfd wakes, about four
    /// context switches). The first call after a pause, calls that meet
    /// other traffic on the connection, and calls outside a tokio runtime
    /// go through the I/O thread as [`Engine::publish_pending`] does; order
    /// and request timeouts are the same either way. Engines with an
    /// [`Builder::observer`] and TLS connections always go through the I/O
    /// thread. The publish is submitted at the future's first poll:
    /// dropped after that, it stays in flight (its outcome is lost to the
    /// caller); dropped before, nothing is sent. On a lent connection a
    /// request timeout shorter than the lend's lease (20 ms) may fire up to
    /// the lease late: the thread runs it when it takes an unused lend
    /// back. The connection's registration stays with the runtime that
    /// made it (one per connection); tasks of a second runtime are woken
    /// through it while that one is driven, and take the thread's path
    /// once it is gone.
    ///
    /// # Errors
    ///
    /// As [`Engine::publish_wait`].
    #[cfg(feature = "tokio")]
    pub async fn publish_async(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
    ) -> Result<i64, Error> {
        let conn = self.route_channel(channel);
        let (pending, slot) = Pending::pooled();
        let request = Request::single(Completion::Integer(slot));
        let encode = |buf: &mut Vec<u8>| encode_publish(buf, options, channel, payload);
        lend_async::call_async(conn, &self.inner.settings, encode, request, pending).await
    }

    /// [`Engine::publish_wait`], waiting at most `timeout` when given
    /// ([`Error::WaitTimeout`] after it).
    pub(crate) fn publish_wait_within(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
        timeout: Option<Duration>,
    ) -> Result<i64, Error> {
        let conn = self.route_channel(channel);
        let until = timeout.map(|t| (Instant::now() + t, t));
        let (pending, slot) = Pending::pooled();
        let request = Request::single(Completion::Integer(slot.clone()));
        let encode = |buf: &mut Vec<u8>| encode_publish(buf, options, channel, payload);
        let lent = conn.call_lent(
            &self.inner.settings,
            encode,
            request,
            until.map(|(at, _)| at),
            || slot.is_done(),
        );
        if let Err((encode, request)) = lent {
            drop(slot);
            if let Err((req, e)) = conn.submit(encode, request) {
                req.user.fail_unstaged(e);
            }
        }
        match until {
            None => pending.wait(),
            Some((at, t)) => {
                match pending.wait_timeout(at.saturating_duration_since(Instant::now())) {
                    Err(Error::WaitTimeout { .. }) => Err(Error::WaitTimeout { after: t }),
                    other => other,
                }
            }
        }
    }

    /// Sends any command to the first server and waits for its reply.
    ///
    /// A sequential caller: like [`Engine::publish_wait`], it may write and
    /// read on this thread while the connection is lent to it. A blocking
    /// command (`BLPOP`) holds the lent connection only until another
    /// request needs it; that request then waits for the blocking one's
    /// reply, since replies come in order.
    ///
    /// Do not call this from an [`Observer`] or a [`Pending::then`]
    /// callback: those run on the I/O thread that would deliver the reply.
    ///
    /// # Errors
    ///
    /// [`Error::Reply`] for an error reply; otherwise the connection's
    /// failure ([`Error::Timeout`], [`Error::ConnectionLost`],
    /// [`Error::NotConnected`], [`Error::Shutdown`], …).
    pub fn command<I>(&self, args: I) -> Result<Value, Error>
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        // A sequential caller: the lend of `publish_wait` applies.
        let conn = self.route_server(0)?;
        let (pending, slot, request) = value_request();
        let encode = |buf: &mut Vec<u8>| resp::encode_command(buf, args);
        if let Err((encode, request)) =
            conn.call_lent(&self.inner.settings, encode, request, None, || {
                slot.is_done()
            })
        {
            drop(slot);
            if let Err((req, e)) = conn.submit(encode, request) {
                req.user.fail_unstaged(e);
            }
        }
        pending.wait()
    }

    /// [`Engine::command`] as a task on tokio (feature `tokio`): any
    /// command to the first server, its reply awaited. Like
    /// [`Engine::publish_async`], a task that awaits each reply writes and
    /// reads the connection on its own worker while it is lent; the first
    /// call after a pause, calls meeting other traffic and calls outside a
    /// tokio runtime go through the I/O thread. A blocking command
    /// (`BLPOP`) holds up the requests behind it on the connection, since
    /// replies come in order.
    ///
    /// # Errors
    ///
    /// As [`Engine::command`].
    #[cfg(feature = "tokio")]
    pub async fn command_async<I>(&self, args: I) -> Result<Value, Error>
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        let conn = self.route_server(0)?;
        let (pending, _, request) = value_request();
        let encode = |buf: &mut Vec<u8>| resp::encode_command(buf, args);
        lend_async::call_async(conn, &self.inner.settings, encode, request, pending).await
    }

    /// Sends any command to server `server` (index in the builder's list)
    /// and returns a handle to its reply. Connections of that server are
    /// used in turn.
    ///
    /// # Errors
    ///
    /// The handle yields [`Error::InvalidArgument`] when there is no server
    /// `server`; otherwise as [`Engine::command`].
    pub fn command_pending<I>(&self, server: usize, args: I) -> Pending<Value>
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        let (pending, slot) = Pending::new();
        self.submit_value(server, args, slot, false);
        pending
    }

    /// Sends any command to server `server` and runs `f` with its outcome
    /// on the I/O thread, in order with that connection's
    /// [`Observer::on_push`] calls (a push that arrives before the reply is
    /// seen before `f` runs). Keep `f` short; never block in it. If the
    /// command cannot be sent, `f` runs at once on this thread.
    ///
    /// # Errors
    ///
    /// `f` gets the errors [`Engine::command_pending`] yields.
    pub fn command_then<I, F>(&self, server: usize, args: I, f: F)
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
        F: FnOnce(Result<Value, Error>) + Send + 'static,
    {
        let (pending, slot) = Pending::new();
        pending.then(f);
        self.submit_value(server, args, slot, false);
    }

    /// [`Engine::command_pending`] on server 0 with `ASKING` before it
    /// (an `ASK` redirect's retry), both staged under one lock on one
    /// connection: no other submission falls between them, so `ASKING`
    /// applies to this command and no other.
    pub(crate) fn asking_command_pending<I>(&self, args: I) -> Pending<Value>
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        let (pending, slot) = Pending::new();
        self.submit_value(0, args, slot, true);
        pending
    }

    /// Stages one command whose reply completes `slot`, with `ASKING` right
    /// before it under the same lock when `asking`.
    fn submit_value<I>(&self, server: usize, args: I, slot: SlotRef<Value>, asking: bool)
    where
        I: IntoIterator,
        I::IntoIter: ExactSizeIterator,
        I::Item: AsRef<[u8]>,
    {
        let conn = match self.route_server(server) {
            Ok(c) => c,
            Err(e) => return slot.complete(Err(e)),
        };
        let staged = conn.submit_with(slot, |staging, slot| {
            if asking {
                stage_asking(staging);
            }
            resp::encode_command(&mut staging.buf, args);
            Request {
                user: Completion::Value(slot),
                kind: ReplyKind::Single,
            }
        });
        if let Err((slot, e)) = staged {
            slot.complete(Err(e));
        }
    }

    /// [`Engine::publish_pending`] with a callback instead of a handle: `f`
    /// gets the receiver count or the error, on the I/O thread (or at once on
    /// this thread if the message cannot be sent).
    pub fn publish_then<F>(&self, channel: &[u8], payload: &[u8], options: PublishOptions, f: F)
    where
        F: FnOnce(Result<i64, Error>) + Send + 'static,
    {
        let (pending, slot) = Pending::pooled();
        pending.then(f);
        let _ = self.submit_publish(channel, payload, options, Completion::Integer(slot));
    }

    /// Sends a request kept with its bytes until its reply
    /// ([`Completion::Kept`], see [`kept`]): `encode` appends the whole
    /// command to the connection's staged bytes and returns what the layer
    /// above keeps with it (its bytes copied out by the I/O thread when it
    /// takes them, unless it has them already). The outcome completes it,
    /// or goes to the engine's [`KeptSink`](kept::KeptSink). No allocation
    /// in steady state, and nothing shared with the I/O thread but the
    /// staging lock.
    ///
    /// # Errors
    ///
    /// When the connection cannot take it: `state`, unused, with the
    /// reason.
    pub(crate) fn submit_kept<S, M, F>(
        &self,
        state: S,
        asking: bool,
        encode: F,
    ) -> Result<(), (S, Error)>
    where
        M: kept::KeptItem,
        F: FnOnce(&mut Vec<u8>, S) -> M,
    {
        // An engine keeps one kind of request, its sink's (the one user
        // is the cluster's publish path): checked in debug builds only.
        debug_assert!(
            kept::is_sink_of::<M>(self.inner.settings.kept.as_ref()),
            "a kept request of a kind this engine has no sink for"
        );
        // One connection per publish engine. With more, every publish
        // routes by the same (empty) name: one connection while it is up.
        self.route_channel(&[]).submit_with(state, |staging, s| {
            if asking {
                stage_asking(staging);
            }
            let msg = encode(&mut staging.buf, s);
            match staging.kept.stage(msg) {
                Ok(()) => Request::single(Completion::Kept),
                // Not reached: every kept request of an engine is of one
                // kind, so its staged queue is too.
                Err(msg) => {
                    debug_assert!(false, "kept requests of two kinds on one engine");
                    M::orphan(msg.into_whole(&staging.buf));
                    Request::single(Completion::Discard)
                }
            }
        })
    }

    /// Sends `encoded`, one whole command already in RESP whose reply is
    /// an integer (a history publish script), on the connection a publish
    /// to `channel` would take (so it keeps that channel's order), and runs
    /// `f` with the outcome on the I/O thread.
    ///
    /// # Errors
    ///
    /// What is known at once, as [`Engine::publish`]; `f` has then run
    /// with the same error.
    pub(crate) fn submit_encoded_then<F>(
        &self,
        channel: &[u8],
        encoded: &[u8],
        f: F,
    ) -> Result<(), Error>
    where
        F: FnOnce(Result<i64, Error>) + Send + 'static,
    {
        let (pending, slot) = Pending::pooled();
        pending.then(f);
        let conn = self.route_channel(channel);
        conn.submit(
            |buf| buf.extend_from_slice(encoded),
            Request::single(Completion::Integer(slot)),
        )
        .map_err(|(req, e)| {
            req.user.fail_unstaged(e.clone());
            e
        })
    }

    fn submit_publish(
        &self,
        channel: &[u8],
        payload: &[u8],
        options: PublishOptions,
        completion: Completion,
    ) -> Result<(), Error> {
        let conn = self.route_channel(channel);
        conn.submit(
            |buf| encode_publish(buf, options, channel, payload),
            Request::single(completion),
        )
        .map_err(|(req, e)| {
            req.user.fail_unstaged(e.clone());
            e
        })
    }

    fn conn_at(&self, server: usize, index: usize) -> Result<&ConnShared, Error> {
        self.inner
            .servers
            .get(server)
            .and_then(|s| s.conns.get(index))
            .map(|c| &**c)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("no connection {index} on server {server}").into())
            })
    }

    /// Seam for the Pub/Sub layer: encodes commands straight into connection
    /// `index` of server `server`, whose replies `kind` describes; the reply
    /// is only counted (errors in [`EngineStats::error_replies`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a connection that does not exist,
    /// [`Error::NotConnected`] while it reconnects, [`Error::Shutdown`].
    pub(crate) fn submit_to<F>(
        &self,
        server: usize,
        index: usize,
        encode: F,
        kind: ReplyKind,
    ) -> Result<(), Error>
    where
        F: FnOnce(&mut Vec<u8>),
    {
        let conn = self.conn_at(server, index)?;
        conn.submit(
            encode,
            Request {
                user: Completion::Discard,
                kind,
            },
        )
        .map_err(|(_, e)| e)
    }

    /// Seam for the cluster layer: as [`Engine::submit_to`], but `then`
    /// gets the reply (or the failure) on the I/O thread; when the command
    /// cannot be sent, `then` runs at once on this thread with the error,
    /// which is also returned.
    ///
    /// # Errors
    ///
    /// As [`Engine::submit_to`].
    pub(crate) fn submit_to_then<F, G>(
        &self,
        server: usize,
        index: usize,
        encode: F,
        kind: ReplyKind,
        then: G,
    ) -> Result<(), Error>
    where
        F: FnOnce(&mut Vec<u8>),
        G: FnOnce(Result<Value, Error>) + Send + 'static,
    {
        let (pending, slot) = Pending::new();
        pending.then(then);
        let conn = match self.conn_at(server, index) {
            Ok(c) => c,
            Err(e) => {
                slot.complete(Err(e.clone()));
                return Err(e);
            }
        };
        conn.submit(
            encode,
            Request {
                user: Completion::Value(slot),
                kind,
            },
        )
        .map_err(|(req, e)| {
            req.user.fail_unstaged(e.clone());
            e
        })
    }

    /// Seam for the Pub/Sub layer: whether connection `index` of server
    /// `server` has finished its handshake and is open.
    pub(crate) fn is_connection_up(&self, server: usize, index: usize) -> bool {
        self.conn_at(server, index).is_ok_and(ConnShared::is_up)
    }

    /// Makes the I/O thread of this engine's first connection panic (for
    /// the tests of panic reporting).
    #[cfg(test)]
    pub(crate) fn panic_io_thread(&self) {
        if let Some((t, _)) = self.inner.placed.first() {
            t.send_control(Control::Panic);
        }
    }

    /// Closes the connections to server `server` and reconnects them to
    /// where its name leads now, except those connected to `to` already
    /// (the server's new address, when its name moved: a Sentinel
    /// failover). Returns once their I/O threads have done it (at once on
    /// a thread of the runtime, or after shutdown).
    pub(crate) fn restart_server(&self, server: usize, to: ServerAddr) {
        let Some(entry) = self.inner.servers.get(server) else {
            return;
        };
        if self.inner.shut.load(Ordering::Acquire) {
            return;
        }
        let mut per_thread: Vec<(Arc<ThreadShared>, Vec<usize>)> = Vec::new();
        for c in &entry.conns {
            match per_thread
                .iter_mut()
                .find(|(t, _)| Arc::ptr_eq(t, &c.thread))
            {
                Some((_, slots)) => slots.push(c.local),
                None => per_thread.push((c.thread.clone(), vec![c.local])),
            }
        }
        let done = Latch::new(per_thread.len());
        for (t, slots) in per_thread {
            t.send_control(Control::Restart {
                slots,
                to,
                done: done.clone(),
            });
        }
        if !runtime::on_runtime_thread()
            && !done.wait_until(Instant::now() + Duration::from_secs(5))
        {
            log::warn!("restarting the connections to server {server}: an I/O thread is slow");
        }
    }

    /// Stops the engine: new calls fail with [`Error::Shutdown`]; what is
    /// already submitted is written and its replies awaited for up to the
    /// shutdown timeout, after which what is left fails with
    /// [`Error::Shutdown`]. Returns when the runtime's threads have let go
    /// of every connection of this engine, except when called from one of
    /// the runtime's threads (a `Pending::then` callback on an I/O thread,
    /// a Pub/Sub handler, event callback or control turn): those are
    /// shared with every other engine and instance on the runtime, so it
    /// returns at once there and the shutdown finishes in the background
    /// (new calls fail from the start; a later call from another thread
    /// waits for the end). The runtime's threads keep running while other
    /// engines use them. Idempotent; also run on drop.
    pub fn shutdown(&self) {
        self.close();
        if runtime::on_runtime_thread() {
            return;
        }
        // Started here or by an earlier call (perhaps on a runtime thread).
        let closing = self.inner.closing.lock().clone();
        if let Some(c) = closing {
            c.wait();
        }
    }

    /// Starts the shutdown without waiting for it: what
    /// [`Engine::shutdown`] waits for, or `None` when it had started
    /// already.
    pub(crate) fn close(&self) -> Option<runtime::Closing> {
        // Under the lock, so that a `shutdown` that finds `shut` set also
        // finds what to wait for.
        let mut slot = self.inner.closing.lock();
        if self.inner.shut.swap(true, Ordering::AcqRel) {
            return None;
        }
        let deadline = Instant::now() + self.inner.shutdown_timeout;
        let done = Latch::new(self.inner.placed.len());
        for (t, slots) in &self.inner.placed {
            t.send_control(Control::Shutdown {
                slots: slots.clone(),
                deadline,
                done: done.clone(),
            });
        }
        // Threads abort what is left at the deadline.
        let closing = runtime::Closing { done, deadline };
        *slot = Some(closing.clone());
        Some(closing)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Engine>();
    is::<Pending<Value>>();
    let _ = Slot::<()>::new;
}

/// Stages `ASKING`, its reply discarded, ahead of what the caller stages
/// next under the same lock.
fn stage_asking(staging: &mut shared::Staging) {
    resp::encode_command(&mut staging.buf, [&b"ASKING"[..]]);
    staging.requests.push_back(Request {
        user: Completion::Discard,
        kind: ReplyKind::Single,
    });
}
