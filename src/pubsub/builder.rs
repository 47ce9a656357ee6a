//! [`PubSubBuilder`]: settings for a [`PubSub`], checked by `build`.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::conn::{Protocol, Role};
use crate::engine::{Engine, Runtime};
use crate::error::Error;
use crate::metrics::Counters;
use crate::pubsub::active::ActiveWait;
use crate::pubsub::control::Control;
use crate::pubsub::dispatch::Dispatcher;
use crate::pubsub::front::Front;
use crate::pubsub::mailbox::Mailbox;
use crate::pubsub::registry::Registry;
use crate::pubsub::routing::{Routing, ShardRouting};
use crate::pubsub::shared::{Config, ConnSlot, Shared, PROBE_PREFIX};
use crate::pubsub::{Handler, PubSub};
use crate::threads;
use crate::workers::Pool;

/// Settings for a [`PubSub`]; start with [`PubSub::builder`].
///
/// Defaults: 2 subscribe connections and 1 publish connection per server,
/// one worker per core with 4096-message queues, batches of 512 channels,
/// a 500 µs subscribe delay, a 30 s probe interval, no envelope, no active events, RESP3.
pub struct PubSubBuilder {
    addrs: Vec<String>,
    subscribe_connections: usize,
    publish_connections: usize,
    workers: Option<usize>,
    queue_capacity: usize,
    batch_size: usize,
    subscribe_delay: Duration,
    probe_interval: Duration,
    envelope: bool,
    active_events: bool,
    handler: Option<Arc<dyn Handler>>,
    protocol: Protocol,
    password: Option<Vec<u8>>,
    username: Option<Vec<u8>>,
    client_name: Option<Vec<u8>>,
    io_threads: Option<usize>,
    runtime: Option<Runtime>,
    connect_timeout: Duration,
    backoff: (Duration, Duration),
}

impl Default for PubSubBuilder {
    fn default() -> Self {
        PubSubBuilder {
            addrs: Vec::new(),
            subscribe_connections: 2,
            publish_connections: 1,
            workers: None,
            queue_capacity: 4096,
            batch_size: 512,
            subscribe_delay: Duration::from_micros(500),
            probe_interval: Duration::from_secs(30),
            envelope: false,
            active_events: false,
            handler: None,
            protocol: Protocol::Resp3,
            password: None,
            username: None,
            client_name: None,
            io_threads: None,
            runtime: None,
            connect_timeout: Duration::from_secs(2),
            backoff: (Duration::from_millis(50), Duration::from_secs(5)),
        }
    }
}

impl std::fmt::Debug for PubSubBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PubSubBuilder")
            .field("addrs", &self.addrs)
            .field("subscribe_connections", &self.subscribe_connections)
            .field("workers", &self.workers)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

impl PubSubBuilder {
    /// Adds a server (`host:port`). With N servers, a channel lives on
    /// `shard_of(channel, N)`; every publisher and subscriber must list the
    /// same servers in the same order.
    pub fn address(mut self, addr: impl Into<String>) -> Self {
        self.addrs.push(addr.into());
        self
    }

    /// Adds several servers (see [`PubSubBuilder::address`]).
    pub fn addresses<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.addrs.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// Subscribe connections per server (default 2); a channel's
    /// connection is chosen by a hash of its name.
    pub fn subscribe_connections(mut self, n: usize) -> Self {
        self.subscribe_connections = n;
        self
    }

    /// Pipelined publish connections per server (default 1).
    pub fn publish_connections(mut self, n: usize) -> Self {
        self.publish_connections = n;
        self
    }

    /// Worker threads running the handler (default: available
    /// parallelism).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// Messages each worker queue holds before further ones are dropped
    /// (default 4096). The batch a worker has taken out and is handling
    /// does not count, so up to twice this many can be in a worker's hands.
    /// Each queue starts with min(capacity, 512) pre-sized 512-byte buffers.
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.queue_capacity = n;
        self
    }

    /// Most channels per `SUBSCRIBE`/`UNSUBSCRIBE` (default 512).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }

    /// How long subscribe and unsubscribe calls may wait for others so they
    /// share commands (default 500 µs; zero sends at once).
    pub fn subscribe_delay(mut self, d: Duration) -> Self {
        self.subscribe_delay = d;
        self
    }

    /// How long a subscribe connection may stay silent before it probes
    /// itself, and how long the probe may take before the connection is
    /// restarted (default 30 s; zero turns the probe off).
    pub fn probe_interval(mut self, d: Duration) -> Self {
        self.probe_interval = d;
        self
    }

    /// Prefix each published payload with a 12-byte header carrying the
    /// publish time, strip it on receipt, and keep a lag histogram
    /// (default off). Publishers and subscribers must agree.
    pub fn envelope(mut self, on: bool) -> Self {
        self.envelope = on;
        self
    }

    /// Send [`Event::Active`](crate::pubsub::Event::Active) to the handler
    /// for every confirmed channel (default off).
    pub fn active_events(mut self, on: bool) -> Self {
        self.active_events = on;
        self
    }

    /// The handler (required).
    pub fn handler(mut self, handler: impl Handler) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// The handler, already shared.
    pub fn handler_arc(mut self, handler: Arc<dyn Handler>) -> Self {
        self.handler = Some(handler);
        self
    }

    /// RESP3 (default) or RESP2.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Password for `AUTH` (user `default` unless [`PubSubBuilder::username`]
    /// is set).
    pub fn password(mut self, password: impl AsRef<[u8]>) -> Self {
        self.password = Some(password.as_ref().to_vec());
        self
    }

    /// ACL user name (needs a password too).
    pub fn username(mut self, user: impl AsRef<[u8]>) -> Self {
        self.username = Some(user.as_ref().to_vec());
        self
    }

    /// Connection name shown by `CLIENT LIST` (both engines).
    pub fn client_name(mut self, name: impl AsRef<[u8]>) -> Self {
        self.client_name = Some(name.as_ref().to_vec());
        self
    }

    /// I/O threads of the instance's own runtime, shared by its publish and
    /// subscribe connections (default: available parallelism, at most one
    /// per connection). Not with [`PubSubBuilder::runtime`].
    pub fn io_threads(mut self, n: usize) -> Self {
        self.io_threads = Some(n);
        self
    }

    /// Runs every connection of the instance on `runtime`'s I/O threads,
    /// shared with whatever else uses it (other instances of a fleet),
    /// instead of on a runtime of its own. Not with
    /// [`PubSubBuilder::io_threads`].
    pub fn runtime(mut self, runtime: &Runtime) -> Self {
        self.runtime = Some(runtime.clone());
        self
    }

    /// Limit for TCP connect plus handshake (default 2 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Reconnect delays, `base · 2^attempt` up to `max` (defaults 50 ms,
    /// 5 s).
    pub fn reconnect_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff = (base, max);
        self
    }

    fn engine(&self, runtime: &Runtime, role: Role, per_server: usize) -> crate::engine::Builder {
        let mut b = Engine::builder()
            .runtime(runtime)
            .addresses(self.addrs.iter().cloned())
            .role(role)
            .connections_per_server(per_server)
            .protocol(self.protocol)
            .connect_timeout(self.connect_timeout)
            .reconnect_backoff(self.backoff.0, self.backoff.1);
        if let Some(p) = &self.password {
            b = b.password(p);
        }
        if let Some(u) = &self.username {
            b = b.username(u);
        }
        if let Some(n) = &self.client_name {
            b = b.client_name(n);
        }
        b
    }

    /// Checks the settings, starts the workers, connects both engines and
    /// starts the control thread.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for invalid settings (no server, no handler, a
    /// zero count), [`Error::Runtime`] when the OS refuses a worker or
    /// control thread; otherwise what [`crate::Builder::build`] returns for
    /// either engine. Nothing is left running.
    pub fn build(self) -> Result<PubSub, Error> {
        let config = |what: &str| Err(Error::Config(what.into()));
        if self.addrs.is_empty() {
            return config("no server address given (use PubSubBuilder::address)");
        }
        let Some(handler) = self.handler.clone() else {
            return config("no handler given (use PubSubBuilder::handler)");
        };
        if self.subscribe_connections == 0 || self.publish_connections == 0 {
            return config("subscribe_connections and publish_connections must be at least 1");
        }
        if self.queue_capacity == 0 || self.batch_size == 0 || self.workers == Some(0) {
            return config("workers, queue_capacity and batch_size must be at least 1");
        }
        let workers = self
            .workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let servers = self.addrs.len();
        let per_server = self.subscribe_connections;
        let counters = Arc::new(Counters::default());
        let conns = self.addrs.len() * (self.subscribe_connections + self.publish_connections);
        let runtime =
            Runtime::for_instance(self.runtime.as_ref(), self.io_threads, conns, &counters)?;
        let pool = Pool::start(workers, self.queue_capacity, handler, counters.clone())?;
        let seed = instance_seed();
        let routing = ShardRouting {
            servers,
            per_server,
        };
        let lanes = routing.lanes();
        let conns = (0..servers * per_server)
            .map(|c| {
                let (server, index) = (c / per_server, c % per_server);
                let mut name = PROBE_PREFIX.to_vec();
                name.extend_from_slice(format!("{seed:016x}:{server}:{index}").as_bytes());
                ConnSlot {
                    server,
                    index,
                    probe_channel: name.into(),
                    ready: AtomicBool::new(false),
                    rx: AtomicU64::new(0),
                    received: AtomicU64::new(0),
                    dropped: AtomicU64::new(0),
                    unenveloped: AtomicU64::new(0),
                    connects: AtomicU64::new(0),
                }
            })
            .collect();
        let shared = Arc::new(Shared {
            config: Config {
                servers,
                per_server,
                batch: self.batch_size,
                coalesce: self.subscribe_delay,
                probe_interval: self.probe_interval,
                envelope: self.envelope,
            },
            front: Front::new(
                Registry::new(lanes, seed),
                pool.queues().to_vec(),
                counters,
                ActiveWait::new(true, Duration::from_millis(100)),
                self.active_events,
            ),
            routing: Box::new(routing),
            conns,
            mail: Mailbox::new(lanes),
        });
        let observer = Arc::new(Dispatcher {
            shared: shared.clone(),
        });
        // Resubscribing 1M channels stages ~30 MB of SUBSCRIBE commands at
        // once; let it through instead of applying publish backpressure.
        let sub = match self
            .engine(&runtime, Role::Subscribe, per_server)
            .max_buffered_bytes(64 << 20)
            .observer(observer)
            .build()
        {
            Ok(e) => Arc::new(e),
            Err(e) => {
                pool.shutdown();
                return Err(e);
            }
        };
        let publ = match self
            .engine(&runtime, Role::Command, self.publish_connections)
            .build()
        {
            Ok(e) => Arc::new(e),
            Err(e) => {
                sub.shutdown();
                pool.shutdown();
                return Err(e);
            }
        };
        let control = Control::new(shared.clone(), sub.clone(), publ.clone());
        let handle = threads::spawn(
            "shardsub-pubsub-control".into(),
            shared.counters.thread_panics.clone(),
            move || control.run(),
        );
        let handle = match handle {
            Ok(h) => h,
            Err(e) => {
                sub.shutdown();
                publ.shutdown();
                pool.shutdown();
                return Err(Error::runtime("control thread", &e));
            }
        };
        Ok(PubSub {
            shared,
            sub,
            publ,
            pool,
            control: Mutex::new(Some(handle)),
            shut: AtomicBool::new(false),
        })
    }
}

/// A seed that differs between instances (probe channel names, hash seeds).
fn instance_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut k = t ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^ (k >> 33)
}
