//! [`ClusterBuilder`]: settings for a [`ClusterPubSub`], checked by `build`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use shardcore::Partitions;
use topology::{Layout, SlotMap};

use crate::cluster::control::Control;
use crate::cluster::hold::Hold;
use crate::cluster::inflight::InFlight;
use crate::cluster::shared::{ClusterCounters, Config, Routes, Shared};
use crate::cluster::ClusterPubSub;
use crate::conn::{Protocol, Role};
use crate::engine::{default_threads, Builder, Engine, Runtime};
use crate::error::Error;
use crate::metrics::Counters;
use crate::pubsub::active::ActiveWait;
use crate::pubsub::mailbox::Mailbox;
use crate::pubsub::registry::Registry;
use crate::pubsub::Handler;
use crate::threads;
use crate::workers::Pool;

/// How subscriptions and publishes use the cluster.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Sharded Pub/Sub over app-level partitions, node-grouped: one
    /// subscribe connection per primary (times the multiplier) carrying
    /// every partition that primary owns. The default.
    Sharded,
    /// Sharded Pub/Sub with one subscribe connection per partition (what
    /// simpler clients do; for comparison).
    PerPartition,
    /// Classic `PUBLISH`/`SUBSCRIBE`: every message is broadcast to every
    /// node; subscriptions sit on one node (for comparison). A message
    /// published on another node than the subscriber's reaches it over the
    /// cluster bus, which drops what is in flight when a bus link is reset
    /// (a node too busy to answer the bus within half the node timeout):
    /// a loss on the server side that no client can see or signal. The
    /// sharded modes do not depend on the bus for delivery.
    Classic,
}

/// How a resubscribe divides its channels into commands.
#[non_exhaustive]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ResubscribeSplit {
    /// Whole partitions per worker: one `SSUBSCRIBE` per partition (split
    /// only past the batch size). The default.
    Partitions,
    /// Channels split over the workers by hash, each worker sending one
    /// command per partition of its share: W times the commands. For
    /// comparison only.
    Channels,
}

/// How node engines are built.
#[derive(Clone, Debug)]
pub(crate) struct NodeSettings {
    pub(crate) protocol: Protocol,
    pub(crate) password: Option<Vec<u8>>,
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff: (Duration, Duration),
    pub(crate) flush_delay: Duration,
    /// The instance's runtime: every node engine's connections run on its
    /// threads (set by [`ClusterBuilder::build`]).
    pub(crate) runtime: Option<Runtime>,
}

impl NodeSettings {
    pub(crate) fn engine(&self, addr: SocketAddr, role: Role, conns: usize) -> Builder {
        let name: &[u8] = match role {
            Role::Subscribe => b"shardsub-sub",
            Role::Command => b"shardsub-pub",
        };
        let mut b = Engine::builder()
            .address(addr.to_string())
            .role(role)
            .connections_per_server(conns)
            .protocol(self.protocol)
            .client_name(name)
            .flush_delay(self.flush_delay)
            .connect_timeout(self.connect_timeout)
            .reconnect_backoff(self.backoff.0, self.backoff.1);
        if let Some(r) = &self.runtime {
            b = b.runtime(r);
        }
        if let Some(p) = &self.password {
            b = b.password(p);
        }
        b
    }
}

/// Settings for a [`ClusterPubSub`]; start with [`ClusterPubSub::builder`].
///
/// Defaults: [`Mode::Sharded`], 128 partitions, one subscribe connection
/// per primary, one worker per core with 4096-message queues, batches of
/// 512 channels, a 30 s topology poll (200 ms retries while degraded), 16
/// resubscribe workers split by partition, at most 5 redirects and a 2 s
/// retry window per publish, a 5 s publish hold of at most 100,000
/// messages and 64 MiB, RESP3.
pub struct ClusterBuilder {
    seeds: Vec<String>,
    partitions: u32,
    mode: Mode,
    multiplier: usize,
    workers: Option<usize>,
    queue_capacity: usize,
    batch_size: usize,
    poll_interval: Duration,
    degraded_retry: Duration,
    probe_interval: Duration,
    split: ResubscribeSplit,
    resubscribe_workers: u32,
    max_redirects: u32,
    retry_window: Duration,
    publish_hold: Duration,
    hold_messages: usize,
    hold_bytes: usize,
    handler: Option<Arc<dyn Handler>>,
    node: NodeSettings,
    io_threads: Option<usize>,
    runtime: Option<Runtime>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder {
            seeds: Vec::new(),
            partitions: 128,
            mode: Mode::Sharded,
            multiplier: 1,
            workers: None,
            queue_capacity: 4096,
            batch_size: 512,
            poll_interval: Duration::from_secs(30),
            degraded_retry: Duration::from_millis(200),
            probe_interval: Duration::from_secs(30),
            split: ResubscribeSplit::Partitions,
            resubscribe_workers: 16,
            max_redirects: 5,
            retry_window: Duration::from_secs(2),
            publish_hold: Duration::from_secs(5),
            hold_messages: 100_000,
            hold_bytes: 64 << 20,
            handler: None,
            node: NodeSettings {
                protocol: Protocol::Resp3,
                password: None,
                connect_timeout: Duration::from_secs(1),
                backoff: (Duration::from_millis(50), Duration::from_secs(2)),
                flush_delay: Duration::from_micros(100),
                runtime: None,
            },
            io_threads: None,
            runtime: None,
        }
    }
}

impl std::fmt::Debug for ClusterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBuilder")
            .field("seeds", &self.seeds)
            .field("partitions", &self.partitions)
            .field("mode", &self.mode)
            .field("multiplier", &self.multiplier)
            .finish_non_exhaustive()
    }
}

impl ClusterBuilder {
    /// Adds a seed node (`host:port`): any node of the cluster, asked for
    /// the topology at start and when every known primary fails to answer.
    pub fn seed(mut self, addr: impl Into<String>) -> Self {
        self.seeds.push(addr.into());
        self
    }

    /// I/O threads of the instance's own runtime, shared by the publish and
    /// subscribe connections of every node (default: available
    /// parallelism). Nodes joining or leaving add or remove connections,
    /// never threads. Not with [`ClusterBuilder::runtime`].
    pub fn io_threads(mut self, n: usize) -> Self {
        self.io_threads = Some(n);
        self
    }

    /// Runs every connection of the instance on `runtime`'s I/O threads,
    /// shared with whatever else uses it (other instances of a fleet),
    /// instead of on a runtime of its own. Not with
    /// [`ClusterBuilder::io_threads`].
    pub fn runtime(mut self, runtime: &Runtime) -> Self {
        self.runtime = Some(runtime.clone());
        self
    }

    /// Adds several seeds (see [`ClusterBuilder::seed`]).
    pub fn seeds<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.seeds.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// App-level partitions (default 128). Every publisher and subscriber
    /// of a fleet must use the same count: it decides channel names.
    pub fn partitions(mut self, n: u32) -> Self {
        self.partitions = n;
        self
    }

    /// Sharded node-grouped (default), per-partition, or classic.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Subscribe connections per primary (default 1); partition `p` uses
    /// connection `p % n`.
    pub fn subscribe_multiplier(mut self, n: usize) -> Self {
        self.multiplier = n;
        self
    }

    /// Worker threads running the handler (default: available parallelism).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// Messages each worker queue holds before further ones are dropped
    /// (default 4096).
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.queue_capacity = n;
        self
    }

    /// Most channels per subscribe command (default 512).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }

    /// How often the slot map is read when nothing else triggers a rebuild
    /// (default 30 s).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d;
        self
    }

    /// How soon a rebuild is retried while the layout is incomplete (a
    /// slot without a reachable owner, a connection not up, a dropped
    /// subscription not yet moved) (default 200 ms).
    pub fn degraded_retry(mut self, d: Duration) -> Self {
        self.degraded_retry = d;
        self
    }

    /// How long a subscribe connection may stay silent before it is sent
    /// a `PING` (default 30 s; zero turns the probe off). A connection that
    /// does not answer within the request timeout (5 s) is restarted and
    /// its partitions resubscribed with a gap event: a black-holed
    /// connection does not lose messages silently.
    pub fn probe_interval(mut self, d: Duration) -> Self {
        self.probe_interval = d;
        self
    }

    /// How resubscribes divide channels into commands (default
    /// [`ResubscribeSplit::Partitions`]).
    pub fn resubscribe_split(mut self, split: ResubscribeSplit) -> Self {
        self.split = split;
        self
    }

    /// Resubscribe workers the planner divides partitions over (default 16).
    pub fn resubscribe_workers(mut self, n: u32) -> Self {
        self.resubscribe_workers = n;
        self
    }

    /// Most `MOVED`/`ASK` redirects one publish follows (default 5).
    pub fn max_redirects(mut self, n: u32) -> Self {
        self.max_redirects = n;
        self
    }

    /// How long a publish is retried on `TRYAGAIN`/`CLUSTERDOWN` or while
    /// its slot has no known owner (default 2 s), counted from its first
    /// such refusal (time held before it, in the publish hold, does not
    /// count).
    pub fn retry_window(mut self, d: Duration) -> Self {
        self.retry_window = d;
        self
    }

    /// How long a publish waits for its slot's owner while that owner
    /// cannot be reached (default 5 s; [`Duration::ZERO`] fails at once,
    /// with the connection's error, as without a hold).
    ///
    /// A publish whose owner's connection is down, broke before the reply
    /// (it may have run: it can then arrive twice), or whose slot has no
    /// known owner, is held, in publish order, with every later publish to
    /// the same slot; once the topology names a reachable owner (the
    /// promoted replica after a `kill -9` of a primary) they are sent there
    /// oldest first and their outcomes reported. A publish still held after
    /// this long fails with [`Error::OwnerUnreachable`]; set it above the
    /// cluster's failover time (`cluster-node-timeout` plus the election)
    /// for no publish to fail across a failover. Memory is bounded by
    /// [`ClusterBuilder::publish_hold_limit`].
    pub fn publish_hold(mut self, d: Duration) -> Self {
        self.publish_hold = d;
        self
    }

    /// Most publishes, and most channel-plus-payload bytes, held at once
    /// over all slots (defaults 100,000 and 64 MiB); a publish that would
    /// pass either fails at once with [`Error::HoldFull`].
    pub fn publish_hold_limit(mut self, messages: usize, bytes: usize) -> Self {
        self.hold_messages = messages;
        self.hold_bytes = bytes;
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
        self.node.protocol = protocol;
        self
    }

    /// Password for `AUTH` (user `default`).
    pub fn password(mut self, password: impl AsRef<[u8]>) -> Self {
        self.node.password = Some(password.as_ref().to_vec());
        self
    }

    /// Limit for TCP connect plus handshake per node (default 1 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.node.connect_timeout = d;
        self
    }

    /// Publish flush delay (default 100 µs; see [`crate::Builder::flush_delay`]).
    pub fn flush_delay(mut self, d: Duration) -> Self {
        self.node.flush_delay = d;
        self
    }

    /// Reconnect delays (defaults 50 ms, 2 s).
    pub fn reconnect_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.node.backoff = (base, max);
        self
    }

    /// Checks the settings, starts the workers and the control thread, and
    /// waits until the first topology has been read and its connections
    /// opened.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for invalid settings (no seed, no handler, a zero
    /// count, a partition count out of range), [`Error::Resolve`] for a
    /// seed that does not resolve, [`Error::Runtime`] when the OS refuses a
    /// worker or control thread, [`Error::Cluster`] when no seed gave a
    /// usable slot map. Nothing is left running.
    pub fn build(self) -> Result<ClusterPubSub, Error> {
        let config = |what: &str| Err(Error::Config(what.into()));
        if self.seeds.is_empty() {
            return config("no seed address given (use ClusterBuilder::seed)");
        }
        let Some(handler) = self.handler.clone() else {
            return config("no handler given (use ClusterBuilder::handler)");
        };
        if self.multiplier == 0 || self.queue_capacity == 0 || self.batch_size == 0 {
            return config(
                "subscribe_multiplier, queue_capacity and batch_size must be at least 1",
            );
        }
        if self.workers == Some(0) || self.resubscribe_workers == 0 {
            return config("workers and resubscribe_workers must be at least 1");
        }
        if self.poll_interval.is_zero() || self.degraded_retry.is_zero() {
            return config("poll_interval and degraded_retry must be above zero");
        }
        let parts = Partitions::new(self.partitions)
            .map_err(|e| Error::Config(format!("partitions: {e}").into()))?;
        let mut seeds = Vec::with_capacity(self.seeds.len());
        for s in &self.seeds {
            let err = |reason: String| Error::Resolve {
                addr: s.as_str().into(),
                reason: reason.into(),
            };
            let a = s
                .to_socket_addrs()
                .map_err(|e| err(e.to_string()))?
                .next()
                .ok_or_else(|| err("no address found".into()))?;
            seeds.push(a);
        }
        let workers = self
            .workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        if self.io_threads == Some(0) {
            return config("io_threads must be at least 1");
        }
        if self.io_threads.is_some() && self.runtime.is_some() {
            return config(
                "io_threads and runtime exclude each other (the runtime sets the threads)",
            );
        }
        let counters = Arc::new(Counters::default());
        let runtime = match &self.runtime {
            Some(r) => {
                let _ = counters.runtime_panics.set(r.panics().clone());
                r.clone()
            }
            None => {
                let threads = self.io_threads.unwrap_or_else(default_threads);
                Runtime::start(threads, counters.thread_panics.clone())?
            }
        };
        let pool = Pool::start(workers, self.queue_capacity, handler, counters.clone())?;
        let cfg = Config {
            mode: self.mode,
            multiplier: self.multiplier,
            batch: self.batch_size,
            poll_interval: self.poll_interval,
            split: self.split,
            resubscribe_workers: self.resubscribe_workers,
            max_redirects: self.max_redirects,
            retry_window: self.retry_window,
            degraded_retry: self.degraded_retry,
            probe_interval: self.probe_interval,
            publish_hold: self.publish_hold,
        };
        let lanes = Shared::lanes(&cfg, &parts);
        let seed = crate::cluster::instance_seed();
        let heads = crate::cluster::shared::wire_heads(cfg.mode, &parts);
        let shared = Arc::new(Shared {
            config: cfg,
            parts,
            heads,
            registry: Registry::new(lanes, seed),
            queues: pool.queues().to_vec(),
            counters,
            cluster: ClusterCounters::default(),
            routes: RwLock::new(Routes::empty()),
            lane_conn: RwLock::new(vec![None; lanes]),
            lane_lost: (0..lanes).map(|_| AtomicBool::new(false)).collect(),
            refusals: Default::default(),
            mail: Mailbox::new(lanes),
            active: ActiveWait::new(false, Duration::from_millis(50)),
            closing: AtomicBool::new(false),
            hold: Hold::new(self.hold_messages, self.hold_bytes),
            next_seq: AtomicU64::new(0),
            inflight: InFlight::default(),
            instance: crate::cluster::instance_seed(),
        });
        let empty = SlotMap::new();
        let control = Control {
            s: shared.clone(),
            node: NodeSettings {
                runtime: Some(runtime),
                ..self.node.clone()
            },
            seeds,
            command: None,
            layout: Layout::compute(&empty, &shared.parts),
            map: empty,
            publ: Default::default(),
            groups: Default::default(),
            by_id: Default::default(),
            lane_at: vec![None; lanes],
            node_numbers: Default::default(),
            classic_node: None,
            next_id: 0,
            next_poll: Instant::now() + self.poll_interval,
            next_rebuild: None,
            stale_rounds: 0,
            delayed: Vec::new(),
            change_at: None,
            last_restore_check: None,
            probes: Default::default(),
            next_probe: Instant::now(),
            next_token: 0,
            gates: Default::default(),
            retiring: Vec::new(),
            enc: Vec::new(),
            name: Vec::new(),
        };
        let panics = shared.counters.thread_panics.clone();
        let handle = threads::spawn("shardsub-cluster-control".into(), panics, move || {
            control.run()
        })
        .map_err(|e| {
            pool.shutdown();
            Error::runtime("control thread", &e)
        });
        let handle = handle?;
        let ps = ClusterPubSub::new(shared, pool, handle);
        ps.wait_started(Duration::from_secs(10))?;
        Ok(ps)
    }
}
