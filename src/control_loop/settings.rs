//! The settings of the control loop's layer, built once from the
//! builder: what every placement shares ([`Common`]), how node engines are
//! built ([`NodeSettings`]), what only a cluster has ([`ClusterSettings`]),
//! and the cluster's [`Mode`] and [`ResubscribeSplit`] (public through
//! [`crate::cluster`]).

use std::sync::Arc;
use std::time::Duration;

use crate::addr::ServerAddr;
use crate::conn::{Protocol, Role};
use crate::engine::{Builder, Engine, Runtime};
use crate::error::Error;
use crate::metrics::Counters;
use crate::workers::{Handler, Pool};

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
    /// (a node too busy to answer the bus within half the node timeout),
    /// and on Valkey 8 and 9 what a node publishes over a link its peer has
    /// not bound yet (right after the cluster forms, a node joins or a link
    /// is re-created; `CLUSTER LINKS` then lacks that peer's `from` link):
    /// a loss on the server side that no client can see or signal. The
    /// sharded modes do not depend on the bus for delivery.
    Classic,
}

/// How a resubscribe divides its channels into commands: the control
/// crate's, the one enum for it.
pub use control::ResubscribeSplit;

/// The settings every placement shares (`None`: the placement's default).
#[derive(Clone)]
pub(crate) struct Common {
    pub(crate) handler: Option<Arc<dyn Handler>>,
    pub(crate) workers: Option<usize>,
    pub(crate) queue_capacity: usize,
    pub(crate) delivery_delay: Duration,
    pub(crate) batch_size: usize,
    pub(crate) probe_interval: Duration,
    pub(crate) active_events: bool,
    pub(crate) protocol: Protocol,
    pub(crate) username: Option<Vec<u8>>,
    pub(crate) password: Option<Vec<u8>>,
    pub(crate) client_name: Option<Vec<u8>>,
    pub(crate) io_threads: Option<usize>,
    pub(crate) runtime: Option<Runtime>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) backoff: Option<(Duration, Duration)>,
    pub(crate) flush_delay: Option<Duration>,
    pub(crate) request_timeout: Option<Duration>,
    pub(crate) subscribe_connections: Option<usize>,
    /// `None`: the placement's default (servers 500 µs, a cluster 0).
    pub(crate) subscribe_delay: Option<Duration>,
    pub(crate) envelope: bool,
    /// `build` fails when a server or primary cannot be reached (`None`:
    /// the placement's default: one server yes, N shards and a cluster
    /// no).
    pub(crate) require_all: Option<bool>,
    /// [`PubSubBuilder::max_message_size`]: `None` reads the servers'.
    pub(crate) max_message: Option<usize>,
    /// Looks host names up ([`PubSubBuilder::resolver`]).
    pub(crate) resolver: Arc<dyn crate::Resolver>,
    /// Recoverable prefixes ([`PubSubBuilder::history`]).
    pub(crate) history: crate::history::Rules,
    /// The first invalid [`PubSubBuilder::history`] call, reported by
    /// `build`.
    pub(crate) history_error: Option<Error>,
    /// TLS for every connection (always `None` without the `tls` feature).
    pub(crate) tls: Option<crate::transport::tls::TlsConfig>,
}

impl Common {
    /// Worker threads: as set, or one per core.
    pub(crate) fn workers(&self) -> usize {
        self.workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The instance's worker queues: on the given runtime's shared worker
    /// threads unless `workers` was set, else on threads of its own.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses a thread.
    pub(crate) fn pool(
        &self,
        runtime: &Runtime,
        handler: Arc<dyn crate::workers::Handler>,
        counters: &Arc<Counters>,
    ) -> Result<Pool, Error> {
        match (&self.runtime, self.workers) {
            (Some(_), None) => Ok(Pool::start_on(
                &runtime.worker_hosts()?,
                self.queue_capacity,
                handler,
                counters.clone(),
            )),
            _ => Pool::start(
                self.workers(),
                self.queue_capacity,
                handler,
                counters.clone(),
            ),
        }
    }
}

/// How node engines are built.
#[derive(Clone, Debug)]
pub(crate) struct NodeSettings {
    pub(crate) protocol: Protocol,
    pub(crate) username: Option<Vec<u8>>,
    pub(crate) password: Option<Vec<u8>>,
    /// `CLIENT SETNAME` for every connection; `None` names them by role
    /// (`shardsub-sub`, `shardsub-pub`).
    pub(crate) client_name: Option<Vec<u8>>,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff: (Duration, Duration),
    pub(crate) flush_delay: Duration,
    /// The instance's runtime: every node engine's connections run on its
    /// threads (set when the instance is built).
    pub(crate) runtime: Option<Runtime>,
    /// TLS for every node connection (publish, subscribe, topology).
    pub(crate) tls: Option<crate::transport::tls::TlsConfig>,
    /// Whether publish connections load the history script in their
    /// handshake (recoverable channels are configured).
    pub(crate) history: bool,
    /// How long a busy subscribe connection stops reading
    /// ([`PubSubBuilder::delivery_delay`](crate::PubSubBuilder::delivery_delay)).
    pub(crate) read_pause: Duration,
    /// Looks host names up.
    pub(crate) resolver: Arc<dyn crate::Resolver>,
}

impl NodeSettings {
    /// The settings `common` gives, with the placement's defaults for the
    /// connect timeout and the longest reconnect delay.
    pub(crate) fn new(
        common: &Common,
        runtime: &Runtime,
        connect_timeout: Duration,
        backoff_max: Duration,
    ) -> NodeSettings {
        NodeSettings {
            protocol: common.protocol,
            username: common.username.clone(),
            password: common.password.clone(),
            client_name: common.client_name.clone(),
            request_timeout: common.request_timeout.unwrap_or(Duration::from_secs(5)),
            connect_timeout: common.connect_timeout.unwrap_or(connect_timeout),
            backoff: common
                .backoff
                .unwrap_or((Duration::from_millis(50), backoff_max)),
            flush_delay: common.flush_delay.unwrap_or(Duration::from_micros(100)),
            runtime: Some(runtime.clone()),
            tls: common.tls.clone(),
            history: !common.history.is_empty(),
            read_pause: common.delivery_delay,
            resolver: common.resolver.clone(),
        }
    }

    pub(crate) fn engine(&self, addr: ServerAddr, role: Role, conns: usize) -> Builder {
        let name: &[u8] = match (&self.client_name, role) {
            (Some(name), _) => name,
            (None, Role::Subscribe) => b"shardsub-sub",
            (None, Role::Command) => b"shardsub-pub",
        };
        let mut b = Engine::builder()
            .address(addr.to_string())
            .role(role)
            .connections_per_server(conns)
            .protocol(self.protocol)
            .client_name(name)
            .flush_delay(self.flush_delay)
            .connect_timeout(self.connect_timeout)
            .reconnect_backoff(self.backoff.0, self.backoff.1)
            .tls_option(self.tls.clone())
            .resolver(self.resolver.clone());
        if let Some(r) = &self.runtime {
            b = b.runtime(r);
        }
        if role == Role::Subscribe {
            b = b.read_pause(self.read_pause);
        }
        if self.history && role == Role::Command {
            b = b.load_scripts(vec![crate::history::script::PUBLISH]);
        }
        if let Some(p) = &self.password {
            b = b.password(p);
        }
        if let Some(u) = &self.username {
            b = b.username(u);
        }
        b.request_timeout(self.request_timeout)
    }
}

/// The settings only a cluster placement has (defaults: [`Mode::Sharded`],
/// 128 partitions, a 30 s topology poll with 200 ms retries while
/// degraded, 16 resubscribe workers split by partition, at most 5
/// redirects and a 2 s retry window per publish, a 5 s publish hold of at
/// most 100,000 messages and 64 MiB).
#[derive(Clone, Debug)]
pub(crate) struct ClusterSettings {
    pub(crate) partitions: u32,
    /// Prefixes of channels that keep their names (`raw_names`).
    pub(crate) raw_names: Vec<Vec<u8>>,
    pub(crate) mode: Mode,
    pub(crate) poll_interval: Duration,
    pub(crate) degraded_retry: Duration,
    pub(crate) split: ResubscribeSplit,
    pub(crate) resubscribe_workers: u32,
    pub(crate) max_redirects: u32,
    pub(crate) retry_window: Duration,
    pub(crate) publish_hold: Duration,
    pub(crate) hold_messages: usize,
    pub(crate) hold_bytes: usize,
    /// Subscribe on replicas, and the seed that ranks them (`None`: one
    /// per instance).
    pub(crate) replicas: bool,
    pub(crate) replica_seed: Option<u64>,
    /// How long `build` waits for a usable slot map.
    pub(crate) discovery_timeout: Duration,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            partitions: 128,
            raw_names: Vec::new(),
            mode: Mode::Sharded,
            poll_interval: Duration::from_secs(30),
            discovery_timeout: Duration::from_secs(10),
            degraded_retry: Duration::from_millis(200),
            split: ResubscribeSplit::Partitions,
            resubscribe_workers: 16,
            max_redirects: 5,
            retry_window: Duration::from_secs(2),
            publish_hold: Duration::from_secs(5),
            hold_messages: 100_000,
            hold_bytes: 64 << 20,
            replicas: false,
            replica_seed: None,
        }
    }
}

/// The control loop's settings, built once from the builder's and read
/// through `Shared::config` (the driver's node engines included).
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// How node engines are built.
    pub(crate) nodes: NodeSettings,
    pub(crate) mode: Mode,
    pub(crate) multiplier: usize,
    pub(crate) batch: usize,
    pub(crate) poll_interval: Duration,
    pub(crate) split: ResubscribeSplit,
    pub(crate) resubscribe_workers: u32,
    pub(crate) max_redirects: u32,
    pub(crate) retry_window: Duration,
    pub(crate) degraded_retry: Duration,
    pub(crate) probe_interval: Duration,
    pub(crate) publish_hold: Duration,
    /// Fixed placements (one server or N shards): the number of servers,
    /// with `mode` [`Mode::Classic`] (plain names, `SUBSCRIBE`) and
    /// `multiplier` connections per server; 0 on a cluster.
    pub(crate) fixed_servers: usize,
    /// Payloads carry the envelope (lag measured), in every placement.
    pub(crate) envelope: bool,
    /// The recoverable prefixes and their caps.
    pub(crate) history: Arc<crate::history::Rules>,
    /// How long the control thread waits for more subscribe calls to
    /// share commands with (fixed placements' `subscribe_delay`).
    pub(crate) coalesce: Duration,
    /// Subscribe on replicas: the seed that ranks each shard's replicas
    /// for this instance (`None`: primaries only).
    pub(crate) replicas: Option<u64>,
    /// Built without a handler: it publishes only, and refuses to
    /// subscribe (nothing could take the messages).
    pub(crate) publish_only: bool,
}

impl Config {
    /// The publish core's settings (`watched`: the partitions' slots; the
    /// hold's bounds: publishes and bytes).
    pub(crate) fn publish_core(
        &self,
        watched: &[u16],
        (messages, bytes): (usize, usize),
    ) -> control::publish::PublishConfig {
        control::publish::PublishConfig {
            max_redirects: self.max_redirects,
            retry_window: self.retry_window,
            hold_limit: self.publish_hold,
            hold_messages: messages,
            hold_bytes: bytes,
            ..control::publish::PublishConfig::new(watched.to_vec())
        }
    }
}
