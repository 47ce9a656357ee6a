//! [`PubSubBuilder`]: the settings of a [`PubSub`], the placement among
//! them (one server, N client-side shards, or a cluster), checked by
//! `build`. The cluster placement's own setters live with the cluster code
//! (`cluster::builder`); every other setter is here, once, for every
//! placement.

use std::sync::Arc;
use std::time::Duration;

use crate::conn::Protocol;
use crate::control_loop::settings::{ClusterSettings, Common};
use crate::engine::Runtime;
use crate::pubsub::{Event, Handler, PubSub};
use crate::url::UrlSettings;

/// Settings for a [`PubSub`]; start with [`PubSub::builder`].
///
/// The placement is chosen here: [`PubSubBuilder::address`] (one server,
/// or N client-side shards when called N times) or
/// [`PubSubBuilder::seed`] (a Redis/Valkey Cluster, found from its
/// seeds), or by URL ([`PubSubBuilder::url`]: `redis://…` adds a server,
/// `redis://…?cluster=true` a seed). Every other setting means the same in every placement, except
/// the few that say they apply to one placement only; `build` refuses
/// those in another placement rather than ignore them. Switching a
/// deployment from shards to a cluster is a change of addresses to seeds.
///
/// Defaults, every placement: one worker per core with 4096-message
/// queues, batches of 512 channels, a 30 s probe interval, no active
/// events, no envelope, RESP3, a 5 s request timeout, a 100 µs publish
/// flush delay. Servers: 1 subscribe connection and 1 publish connection
/// per server, a 500 µs subscribe delay, a 2 s connect timeout, reconnects
/// from 50 ms up to 5 s. A cluster: 1 subscribe connection per primary, no
/// subscribe delay, a 1 s connect timeout, reconnects from 50 ms up to 2 s,
/// and the cluster
/// settings (see [`PubSubBuilder::partitions`] and the setters after it).
pub struct PubSubBuilder {
    pub(crate) servers: Vec<String>,
    pub(crate) seeds: Vec<String>,
    pub(crate) common: Common,
    pub(crate) fixed: FixedSettings,
    pub(crate) cluster: ClusterSettings,
    /// Setters called that apply to one placement only (checked by
    /// `build` against the placement).
    pub(crate) fixed_only: Vec<&'static str>,
    pub(crate) cluster_only: Vec<&'static str>,
    /// What `url` calls left: credentials to merge, refusals.
    pub(crate) urls: UrlSettings,
    /// [`PubSubBuilder::on_message`] and [`PubSubBuilder::on_event`].
    pub(crate) closures: Closures,
    /// [`PubSubBuilder::receiver_for`]: prefixes and their receivers.
    pub(crate) routes: Vec<(Vec<u8>, crate::pubsub::ReceiverHandler)>,
}

type MessageFn = Box<dyn Fn(&[u8], &[u8]) + Send + Sync>;
type EventFn = Box<dyn Fn(Event<'_>) + Send + Sync>;

/// The handler closures given to the builder, made into a handler by
/// `build`.
#[derive(Default)]
pub(crate) struct Closures {
    pub(super) message: Option<MessageFn>,
    pub(super) event: Option<EventFn>,
}

impl Handler for Closures {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        if let Some(f) = &self.message {
            f(channel, payload);
        }
    }

    fn on_event(&self, event: Event<'_>) {
        if let Some(f) = &self.event {
            f(event);
        }
    }
}

/// [`PubSubBuilder::delivery_delay`]'s default.
const DEFAULT_DELIVERY_DELAY: Duration = Duration::from_millis(1);
/// The longest [`PubSubBuilder::delivery_delay`].
pub(super) const MAX_DELIVERY_DELAY: Duration = Duration::from_secs(1);

/// The settings only servers (one, or N shards) have.
#[derive(Clone, Debug)]
pub(crate) struct FixedSettings {
    pub(crate) publish_connections: usize,
    /// Masters found through Sentinel: name → its Sentinels.
    pub(crate) sentinels: std::collections::BTreeMap<String, Vec<String>>,
    /// `AUTH` for the Sentinels themselves: a user (none: the default
    /// user) and a password.
    pub(crate) sentinel_auth: crate::pubsub::sentinel::Auth,
}

impl PubSub {
    /// Settings for a new instance; the placement is one of them.
    pub fn builder() -> PubSubBuilder {
        PubSubBuilder::default()
    }
}

impl Default for PubSubBuilder {
    fn default() -> Self {
        PubSubBuilder {
            servers: Vec::new(),
            seeds: Vec::new(),
            common: Common {
                handler: None,
                workers: None,
                queue_capacity: 4096,
                delivery_delay: DEFAULT_DELIVERY_DELAY,
                batch_size: 512,
                probe_interval: Duration::from_secs(30),
                active_events: false,
                protocol: Protocol::Resp3,
                username: None,
                password: None,
                client_name: None,
                io_threads: None,
                runtime: None,
                connect_timeout: None,
                backoff: None,
                flush_delay: None,
                request_timeout: None,
                subscribe_connections: None,
                subscribe_delay: None,
                envelope: false,
                require_all: None,
                max_message: None,
                resolver: crate::engine::resolve::system(),
                history: crate::history::Rules::default(),
                history_error: None,
                tls: None,
            },
            fixed: FixedSettings {
                publish_connections: 1,
                sentinels: Default::default(),
                sentinel_auth: Default::default(),
            },
            cluster: ClusterSettings::default(),
            fixed_only: Vec::new(),
            cluster_only: Vec::new(),
            urls: UrlSettings::default(),
            closures: Closures::default(),
            routes: Vec::new(),
        }
    }
}

impl std::fmt::Debug for PubSubBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PubSubBuilder")
            .field("servers", &self.servers)
            .field("seeds", &self.seeds)
            .field("workers", &self.common.workers)
            .field("delivery_delay", &self.common.delivery_delay)
            .field("batch_size", &self.common.batch_size)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl PubSubBuilder {
    /// Adds a server: `host:port`, or a Unix socket as `unix:/path` (or
    /// the absolute path). With N servers, a channel lives on
    /// `shard_of(channel, N)`; every publisher and subscriber must list the
    /// same servers in the same order. Not with [`PubSubBuilder::seed`].
    pub fn address(mut self, addr: impl Into<String>) -> Self {
        self.servers.push(addr.into());
        self
    }

    /// Adds a server found through Sentinel: the master the Sentinels at
    /// `sentinels` (`host:port`, any number, asked in turn) know as
    /// `master`. It takes the next place in the server list (one server,
    /// or one of N shards, mixed with plain addresses as you like); events
    /// and health name it `sentinel:MASTER`.
    ///
    /// Its address is asked of the Sentinels at `build` and again
    /// whenever a connection to it opens. A failover is followed: the
    /// instance subscribes to `+switch-master` (on one Sentinel at a time,
    /// and checks every master itself every few seconds), then moves its
    /// publish connections and its subscribe connections to the new
    /// master, in that order; every channel subscribed there gets a gap
    /// event, in order with its messages. Publishes in flight on the old
    /// master fail ([`Error::ConnectionLost`](crate::Error::ConnectionLost)), and publishes while no
    /// connection is up fail at once ([`Error::NotConnected`](crate::Error::NotConnected)): on servers
    /// nothing is held. Credentials (`password`, URLs) apply to the
    /// master; the Sentinels' own are [`PubSubBuilder::sentinel_password`]
    /// and [`PubSubBuilder::sentinel_username`]. Each connection to the
    /// master checks with `ROLE` that it is one (a Sentinel's answer can
    /// be stale during a failover): a replica is refused and the Sentinels
    /// are asked again. Not with TLS. URL form: [`PubSubBuilder::url`] with
    /// `redis+sentinel://host:26379,host2:26379/MASTER`.
    ///
    /// [`Error::ConnectionLost`](crate::Error::ConnectionLost): crate::Error::ConnectionLost
    /// [`Error::NotConnected`](crate::Error::NotConnected): crate::Error::NotConnected
    pub fn sentinel<I, S>(mut self, sentinels: I, master: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let master = master.into();
        // A Sentinel given without a port is at 26379, as in URLs.
        let list: Vec<String> = sentinels
            .into_iter()
            .map(Into::into)
            .map(|s: String| match crate::engine::resolve::split(&s) {
                Some(_) => s,
                None => format!("{s}:26379"),
            })
            .collect();
        self.servers
            .push(format!("{}{master}", crate::pubsub::sentinel::PREFIX));
        self.fixed.sentinels.entry(master).or_default().extend(list);
        self
    }

    /// Password the Sentinels themselves ask for (their `requirepass`),
    /// sent as `AUTH` on every connection to a Sentinel (user `default`
    /// unless [`PubSubBuilder::sentinel_username`] is set). The master's
    /// own credentials are [`PubSubBuilder::password`] and
    /// [`PubSubBuilder::username`]. Only with [`PubSubBuilder::sentinel`].
    pub fn sentinel_password(mut self, password: impl AsRef<[u8]>) -> Self {
        self.fixed.sentinel_auth.password = Some(password.as_ref().to_vec());
        self.fixed_only("sentinel_password")
    }

    /// ACL user for the Sentinels (needs
    /// [`PubSubBuilder::sentinel_password`] too).
    pub fn sentinel_username(mut self, user: impl AsRef<[u8]>) -> Self {
        self.fixed.sentinel_auth.username = Some(user.as_ref().to_vec());
        self.fixed_only("sentinel_username")
    }

    /// Adds several servers (see [`PubSubBuilder::address`]).
    pub fn addresses<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.servers.extend(addrs.into_iter().map(Into::into));
        self
    }

    pub(crate) fn fixed_only(mut self, name: &'static str) -> Self {
        self.fixed_only.push(name);
        self
    }

    pub(crate) fn cluster_only(mut self, name: &'static str) -> Self {
        self.cluster_only.push(name);
        self
    }

    /// Subscribe connections per server, or per cluster primary (default
    /// 1 in both). Servers: a channel's connection is chosen by a hash of
    /// its name. Cluster: partition `p` uses connection `p % n`.
    ///
    /// A connection's channels are handled on one worker: each connection
    /// gets a worker when it opens (round robin), and the channels it
    /// carries first stay on that worker for the instance's life, whatever
    /// connection carries them later. One connection's handler calls thus
    /// use one [`worker`](Self::workers) thread; more connections spread
    /// the channels over more workers.
    ///
    /// One is right for the common case: every connection is one more
    /// stream the server writes and the client reads, so two cost the
    /// subscriber about 1.3–1.9 times the CPU per delivered message of one
    /// (BENCHMARKS.md, the subscriber side by side with the `redis` crate).
    /// Raise it when one connection is the limit: a burst that would pass
    /// the server's `client-output-buffer-limit pubsub` for one connection
    /// (the server cuts the connection off; more connections split the
    /// backlog), resubscribing very many channels after a reconnect (each
    /// connection resubscribes its own share in parallel), or several
    /// [`io_threads`](Self::io_threads) to spread the reading over, or
    /// handlers that need more than one core.
    pub fn subscribe_connections(mut self, n: usize) -> Self {
        self.common.subscribe_connections = Some(n);
        self
    }

    /// Pipelined publish connections per server (default 1). Servers only.
    pub fn publish_connections(mut self, n: usize) -> Self {
        self.fixed.publish_connections = n;
        self.fixed_only("publish_connections")
    }

    /// Worker threads running the handler (default: available
    /// parallelism). On a shared [`PubSubBuilder::runtime`], the default is
    /// the runtime's worker threads; setting this gives the instance
    /// threads of its own. Each subscribe connection's channels are handled
    /// on one of them ([`subscribe_connections`](Self::subscribe_connections)).
    pub fn workers(mut self, n: usize) -> Self {
        self.common.workers = Some(n);
        self
    }

    /// Messages each worker queue holds before further ones are dropped
    /// (default 4096). The batch a worker has taken out and is handling
    /// does not count, so up to twice this many can be in a worker's hands.
    /// Each queue starts with min(capacity, 512) pre-sized 512-byte buffers.
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.common.queue_capacity = n;
        self
    }

    /// How long a busy subscribe connection lets messages gather before it
    /// reads them (default 1 ms; at most 1 s; zero: never).
    ///
    /// A subscribe connection is busy when one read took 8 KiB or more and
    /// emptied the socket, which happens at high rates only (roughly
    /// 10,000 messages a second and more, depending on how the server's
    /// writes fall). It then stops reading for this long (the kernel holds
    /// what arrives meanwhile) and reads it all in one go: one wake-up of
    /// its I/O thread, and of each worker it brings messages, per delay
    /// instead of one per segment the server writes. A steady stream of
    /// small messages (reads less than a quarter of this apart on average:
    /// about 4,000 messages a second and more on the connection) pauses
    /// for half of it, and again after each pause that gathered two
    /// reads' worth. (Whatever the delay, a read wakes each worker once,
    /// at its end, or when it fills a quarter of the worker's queue.)
    ///
    /// In BENCHMARKS.md's subscriber side by side with the `redis` crate
    /// this takes shardsub's CPU per delivered message to well under half
    /// of the `redis` crate's; its row with the delay at zero shows the
    /// difference in the same run. What it costs: while busy, a message may
    /// wait up to this long more before its handler runs. Nothing is
    /// dropped for it (a 1 ms pause at 100 MB/s holds 100 KB in the
    /// kernel's buffers, far below any server's output buffer limit), and
    /// at lower rates nothing waits. Set zero where each message's latency
    /// under load matters more than the CPU.
    pub fn delivery_delay(mut self, d: Duration) -> Self {
        self.common.delivery_delay = d;
        self
    }

    /// Most channels per subscribe or unsubscribe command (default 512).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.common.batch_size = n;
        self
    }

    /// How long subscribe and unsubscribe calls may wait for others so they
    /// share commands (default 500 µs on servers; 0 on a cluster, where
    /// commands are grouped by partition anyway; zero sends at once).
    pub fn subscribe_delay(mut self, d: Duration) -> Self {
        self.common.subscribe_delay = Some(d);
        self
    }

    /// How long a subscribe connection may stay silent before it probes
    /// itself, and how long the probe may take before the connection is
    /// restarted with a gap for its channels (default 30 s; zero turns the
    /// probe off): a black-holed connection does not lose messages
    /// silently.
    pub fn probe_interval(mut self, d: Duration) -> Self {
        self.common.probe_interval = d;
        self
    }

    /// Prefix each published payload with a 12-byte header carrying the
    /// publish time, strip it on receipt, and keep a lag histogram
    /// (default off; the format is in `WIRE_FORMAT.md`). Publishers and
    /// subscribers must agree.
    pub fn envelope(mut self, on: bool) -> Self {
        self.common.envelope = on;
        self
    }

    /// Makes every channel that starts with `prefix` recoverable: each
    /// publish to it appends to a history stream capped by `options`
    /// (length and age) and publishes, atomically, in one server-side
    /// script on the channel's server; every message carries its epoch and
    /// offset (stripped before the handler), and
    /// [`PubSub::history`](crate::PubSub::history) reads what was missed.
    /// Call it once per prefix; a channel matching several takes the
    /// longest. Every instance of a fleet must agree (the format is in
    /// `WIRE_FORMAT.md`; the design in [`crate::history`]).
    ///
    /// Such a publish costs the server an `HGET`, `HINCRBY`, `XADD` and two
    /// `EXPIRE`s besides the publish, and keeps up to about `max_len`
    /// messages per channel in memory for `max_age` after its last publish.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use shardsub::{history::HistoryOptions, PubSub};
    /// let b = PubSub::builder().address("127.0.0.1:6379").history(
    ///     "room:",
    ///     HistoryOptions { max_len: 1000, max_age: Duration::from_secs(300) },
    /// );
    /// # let _ = b;
    /// ```
    ///
    /// `build` fails with [`Error::Config`](crate::Error::Config) for a zero cap or a prefix
    /// given twice.
    pub fn history(
        mut self,
        prefix: impl AsRef<[u8]>,
        options: crate::history::HistoryOptions,
    ) -> Self {
        if let Err(e) = self.common.history.add(prefix.as_ref(), options) {
            self.common.history_error.get_or_insert(e);
        }
        self
    }

    /// Whether `build` fails when a server (on a cluster: a primary of the
    /// first slot map) cannot be reached within the connect timeout. By
    /// default one server must be reached (nothing can work without it:
    /// a refused connection fails `build` at once with
    /// [`Error::Connect`](crate::Error::Connect)), while N shards and a
    /// cluster start degraded (one node down must not stop a fleet from
    /// starting); `false` lets one server start degraded too.
    ///
    /// Degraded, an unreachable server's connections keep trying with the
    /// reconnect backoff: its channels become active, with the usual
    /// events, once it comes up, [`Metrics::active_connections`](crate::Metrics::active_connections)
    /// shows which servers are connected, and a `publish` to one of its
    /// channels fails meanwhile with [`Error::NotConnected`](crate::Error::NotConnected). A server
    /// that answers but refuses the credentials or the handshake fails
    /// `build` either way. A cluster starts degraded as soon as a seed
    /// gives a slot map; its unreachable primaries are followed the same
    /// way ([`ClusterMetrics::subscribe_connections`](crate::metrics::ClusterMetrics::subscribe_connections)
    /// counts the subscribe connections up).
    pub fn require_all_servers(mut self, on: bool) -> Self {
        self.common.require_all = Some(on);
        self
    }

    /// Looks host names up (default: the system's resolver). A server, seed
    /// or node given by name is looked up at build and again whenever a
    /// connection to it opens (every reconnect), its addresses tried in
    /// turn, so a server whose address changes behind its name (a
    /// restarted container or pod) is followed. See [`crate::Resolver`].
    pub fn resolver(mut self, resolver: Arc<dyn crate::Resolver>) -> Self {
        self.common.resolver = resolver;
        self
    }

    /// The largest message (channel, payload and about 64 bytes of frame)
    /// a publish may send, and so the longest channel name or pattern
    /// (with the same frame: its subscribe reply carries it); larger ones
    /// fail at once with [`Error::TooLarge`](crate::Error::TooLarge), nothing sent. By default
    /// `build` reads it from the servers it reaches: the hard
    /// `client-output-buffer-limit` for Pub/Sub clients (a subscriber sent
    /// more is disconnected by the server, losing every message queued for
    /// it, on every channel it carries) and `proto-max-bulk-len`, the
    /// smaller of the two on any server (none where `CONFIG GET` is
    /// refused, or on a server down at build). Redis cuts a subscriber off
    /// as soon as one message is over its hard limit; Valkey 9 was seen to
    /// deliver such a message, so there the check errs on the safe side.
    /// A value here replaces what the servers say; 0 turns the check off.
    /// Either way no argument (a name, a payload, a command's) longer than
    /// the servers' `proto-max-bulk-len` is sent: a server closes the
    /// connection on one.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.common.max_message = Some(bytes);
        self
    }

    /// Send [`Event::Active`](crate::pubsub::Event::Active) to the handler
    /// for every confirmed channel: after its first subscribe, and after
    /// every resubscribe that followed a gap (default off).
    pub fn active_events(mut self, on: bool) -> Self {
        self.common.active_events = on;
        self
    }

    /// The handler: a type implementing [`Handler`], a closure with its
    /// parameter types written out (`|channel: &[u8], payload: &[u8]| …`),
    /// or [`handler_fn`](crate::handler_fn)`(|channel, payload| …)`, which
    /// infers them. An instance built with none (nor
    /// [`on_message`](PubSubBuilder::on_message) or
    /// [`receiver`](PubSubBuilder::receiver)) publishes only:
    /// [`PubSub::subscribe`] refuses it.
    ///
    /// A closure with its parameter types left out does not type-check
    /// here (Rust infers a closure's parameters only from an `Fn` bound,
    /// and this one is `Handler`; the error says "FnOnce is not general
    /// enough"). Use [`on_message`](PubSubBuilder::on_message) for such a
    /// closure:
    ///
    /// ```compile_fail
    /// let b = shardsub::PubSub::builder().handler(|channel, payload| {
    ///     let _ = (channel, payload);
    /// });
    /// ```
    ///
    /// ```
    /// let b = shardsub::PubSub::builder().on_message(|channel, payload| {
    ///     let _ = (channel, payload);
    /// });
    /// ```
    pub fn handler(mut self, handler: impl Handler) -> Self {
        self.common.handler = Some(Arc::new(handler));
        self
    }

    /// Handles messages with a closure whose parameter types are inferred
    /// (`.on_message(|channel, payload| …)`): the handler, instead of
    /// [`PubSubBuilder::handler`]. Add [`PubSubBuilder::on_event`] for
    /// events (ignored otherwise).
    pub fn on_message<F>(mut self, f: F) -> Self
    where
        F: Fn(&[u8], &[u8]) + Send + Sync + 'static,
    {
        self.closures.message = Some(Box::new(f));
        self
    }

    /// Handles events with a closure (`.on_event(|event| …)`), beside
    /// [`PubSubBuilder::on_message`].
    pub fn on_event<F>(mut self, f: F) -> Self
    where
        F: Fn(Event<'_>) + Send + Sync + 'static,
    {
        self.closures.event = Some(Box::new(f));
        self
    }

    /// Delivers to a [`Receiver`](crate::pubsub::Receiver) an async task
    /// reads, through one queue of `capacity` messages: sets the handler
    /// to [`receiver`](crate::pubsub::receiver)'s and returns the
    /// receiver with the builder.
    pub fn receiver(self, capacity: usize) -> (Self, crate::pubsub::Receiver) {
        let (handler, rx) = crate::pubsub::receiver(capacity);
        (self.handler(handler), rx)
    }

    /// A [`Receiver`](crate::pubsub::Receiver) of its own, with a queue of
    /// `capacity` messages, for the channels that start with `prefix`:
    /// their messages and events go there (the longest matching prefix
    /// wins), the other channels' to the instance's handler or
    /// [`receiver`](PubSubBuilder::receiver) (or nowhere, without one).
    /// Each receiver has its own bound and the same rule: a full one drops
    /// the message and names its channel in a
    /// [`Delivery::Dropped`](crate::pubsub::Delivery::Dropped) before that
    /// channel's next message. [`Event::Disconnected`] and
    /// [`Event::Connected`] reach every receiver; a gap or worker-queue
    /// drop event is split by channel (each part of a drop event carries
    /// the batch's total count). An empty prefix takes every channel no
    /// longer prefix matches.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), shardsub::Error> {
    /// let (builder, mut rooms) = shardsub::PubSub::builder()
    ///     .address("127.0.0.1:6379")
    ///     .receiver_for("room:", 10_000);
    /// let (builder, mut alerts) = builder.receiver_for("alert:", 100);
    /// let ps = builder.build_pending().await?;
    /// ps.subscribe(["room:1", "alert:disk"])?;
    /// # let _ = (rooms.recv(), alerts.recv());
    /// # Ok(()) }
    /// ```
    pub fn receiver_for(
        mut self,
        prefix: impl AsRef<[u8]>,
        capacity: usize,
    ) -> (Self, crate::pubsub::Receiver) {
        let (handler, rx) = crate::pubsub::receiver(capacity);
        self.routes.push((prefix.as_ref().to_vec(), handler));
        (self, rx)
    }

    /// The handler, already shared.
    pub fn handler_arc(mut self, handler: Arc<dyn Handler>) -> Self {
        self.common.handler = Some(handler);
        self
    }

    /// RESP3 (default) or RESP2.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.common.protocol = protocol;
        self
    }

    /// Password for `AUTH` (user `default` unless [`PubSubBuilder::username`]
    /// is set).
    pub fn password(mut self, password: impl AsRef<[u8]>) -> Self {
        self.common.password = Some(password.as_ref().to_vec());
        self
    }

    /// ACL user name (needs a password too).
    pub fn username(mut self, user: impl AsRef<[u8]>) -> Self {
        self.common.username = Some(user.as_ref().to_vec());
        self
    }

    /// Connection name shown by `CLIENT LIST`, on every connection
    /// (default: none on servers; `shardsub-sub` and `shardsub-pub` on a
    /// cluster's nodes).
    pub fn client_name(mut self, name: impl AsRef<[u8]>) -> Self {
        self.common.client_name = Some(name.as_ref().to_vec());
        self
    }

    /// I/O threads of the instance's own runtime, shared by all of its
    /// connections, publish and subscribe, on every server or node
    /// (default: available parallelism; on servers at most one per
    /// connection). Nodes joining or leaving add or remove connections,
    /// never threads. Not with [`PubSubBuilder::runtime`].
    pub fn io_threads(mut self, n: usize) -> Self {
        self.common.io_threads = Some(n);
        self
    }

    /// Runs the instance on `runtime`'s threads, shared with whatever else
    /// uses it (other instances of a fleet), instead of on threads of its
    /// own: every connection on its I/O threads, the control loop on its
    /// control thread, and (unless [`PubSubBuilder::workers`] is set) the
    /// handler on its shared worker threads
    /// ([`Runtime::with_workers`]; queue `i` of every instance on worker
    /// `i`). Instances added to a runtime add no threads. Not with
    /// [`PubSubBuilder::io_threads`].
    pub fn runtime(mut self, runtime: &Runtime) -> Self {
        self.common.runtime = Some(runtime.clone());
        self
    }

    /// Limit for TCP connect plus handshake (defaults: 2 s on servers, 1 s
    /// per cluster node).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.common.connect_timeout = Some(d);
        self
    }

    /// Reconnect delays, `base · 2^attempt` up to `max` (defaults 50 ms and
    /// 5 s on servers, 50 ms and 2 s on a cluster).
    pub fn reconnect_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.common.backoff = Some((base, max));
        self
    }

    /// Publish flush delay (default 100 µs; see
    /// [`crate::engine::Builder::flush_delay`]).
    pub fn flush_delay(mut self, d: Duration) -> Self {
        self.common.flush_delay = Some(d);
        self
    }

    /// The longest a command may wait for its reply (default 5 s; zero
    /// disables; see [`crate::engine::Builder::request_timeout`]). A publish that
    /// times out fails with [`Error::Timeout`](crate::Error::Timeout).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.common.request_timeout = Some(d);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn refused(b: PubSubBuilder) -> String {
        match b.handler(|_: &[u8], _: &[u8]| {}).build() {
            Err(Error::Config(what)) => what.to_string(),
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn the_placement_is_one_and_its_settings_belong_to_it() {
        assert!(refused(PubSub::builder()).starts_with("no placement given"));
        let both = PubSub::builder().address("127.0.0.1:1").seed("127.0.0.1:2");
        assert!(refused(both).starts_with("both server addresses and cluster seeds"));
        let b = PubSub::builder().address("127.0.0.1:1").partitions(64);
        assert_eq!(refused(b), "partitions applies to a cluster (seeds) only");
        let b = PubSub::builder().seed("127.0.0.1:1").publish_connections(2);
        assert_eq!(
            refused(b),
            "publish_connections applies to servers (addresses) only"
        );
        let b = PubSub::builder().seed("127.0.0.1:1").username("app");
        assert_eq!(refused(b), "a username needs a password");
        let b = PubSub::builder()
            .address("127.0.0.1:1")
            .subscribe_connections(0);
        assert_eq!(refused(b), "subscribe_connections must be at least 1");
        let b = PubSub::builder()
            .address("127.0.0.1:1")
            .delivery_delay(Duration::from_millis(1001));
        assert_eq!(refused(b), "delivery_delay 1.001s is over 1 s");
        let b = PubSub::builder().address("redis://127.0.0.1:6379");
        assert_eq!(
            refused(b),
            "\"redis://127.0.0.1:6379\" is a URL: address and seed take host:port; \
             use PubSubBuilder::url for a URL"
        );
        let b = PubSub::builder().seed("rediss://node:7000");
        assert!(refused(b).contains("use PubSubBuilder::url"));
        let b = PubSub::builder().address("127.0.0.1:1").on_event(|_| {});
        assert!(matches!(b.build(), Err(Error::Config(w)) if w.starts_with("on_event needs")));
        let b = PubSub::builder()
            .address("127.0.0.1:1")
            .on_message(|_, _| {})
            .handler(|_: &[u8], _: &[u8]| {});
        assert!(matches!(b.build(), Err(Error::Config(w)) if w.starts_with("both a handler")));
    }
}
