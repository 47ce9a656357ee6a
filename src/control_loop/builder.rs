//! The cluster placement: its settings (set on the one
//! [`PubSubBuilder`]) and how a cluster instance is started.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use shardcore::Partitions;

use crate::addr::ServerAddr;
use crate::conn::{Protocol, Role};
use crate::control_loop::driver::Driver;
use crate::control_loop::hold::{publish_config, Publishing};
use crate::control_loop::shared::{Config, Routes, Shared};
use crate::control_loop::ClusterPubSub;
use crate::engine::{Builder, Engine, Runtime};
use crate::error::Error;
use crate::front::active::ActiveWait;
use crate::front::mailbox::Mailbox;
use crate::front::registry::Registry;
use crate::front::Front;
use crate::metrics::Counters;
use crate::workers::{Handler, LaneOwners, Pool};

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
    /// `build` fails when a server or primary cannot be reached.
    pub(crate) require_all: bool,
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

/// Refuses `raw_names` where it means nothing or breaks something: with
/// partitions off (every name is kept already), in a mode that keeps
/// names anyway or would open a connection per slot, and where a
/// recoverable channel could keep its name (its history keys need the
/// partition's tag).
///
/// # Errors
///
/// [`Error::Config`] naming the conflict.
fn check_raw_names(c: &ClusterSettings, common: &Common) -> Result<(), Error> {
    let config = |what: String| Err(Error::Config(what.into()));
    if c.raw_names.is_empty() {
        return Ok(());
    }
    if c.partitions == 0 {
        return config(
            "raw_names with partitions(0) is redundant: every channel keeps its name".into(),
        );
    }
    match c.mode {
        Mode::Sharded => {}
        Mode::PerPartition => {
            return config(
                "raw_names with Mode::PerPartition would open a connection per slot; \
                 use Mode::Sharded"
                    .into(),
            )
        }
        Mode::Classic => {
            return config(
                "raw_names with Mode::Classic is redundant: classic Pub/Sub keeps every name"
                    .into(),
            )
        }
    }
    let show = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for raw in &c.raw_names {
        let overlap = common
            .history
            .prefixes()
            .find(|h| h.starts_with(raw) || raw.starts_with(h));
        if let Some(h) = overlap {
            return config(format!(
                "recoverable channels (history prefix {:?}) cannot keep their names \
                 (raw_names {:?}): their history keys need the partition's tag",
                show(h),
                show(raw)
            ));
        }
    }
    Ok(())
}

/// The settings' own consistency, before anything starts.
fn check_settings(c: &ClusterSettings, common: &Common) -> Result<(), Error> {
    let config = |what: &str| Err(Error::Config(what.into()));
    if c.resubscribe_workers == 0 {
        return config("resubscribe_workers must be at least 1");
    }
    if c.poll_interval.is_zero() || c.degraded_retry.is_zero() {
        return config("poll_interval and degraded_retry must be above zero");
    }
    if c.replicas && c.mode == Mode::Classic {
        return config(
            "subscribe_on_replicas applies to sharded modes (Sharded, PerPartition) only",
        );
    }
    if c.replica_seed.is_some() && !c.replicas {
        return config("replica_seed needs subscribe_on_replicas(true)");
    }
    if c.partitions == 0 {
        if c.mode == Mode::PerPartition {
            return config(
                "partitions(0) (names kept) with Mode::PerPartition would open a \
                 connection per slot; use Mode::Sharded",
            );
        }
        if !common.history.is_empty() {
            return config(
                "recoverable channels on a cluster need partitions (their history \
                 keys share the partition's tag); keep partitions on, or history off",
            );
        }
    }
    check_raw_names(c, common)
}

/// Starts a cluster instance on `seeds` (the caller checked the settings
/// every placement shares): workers, the control thread, and a wait until
/// the first topology has been read and its connections opened.
///
/// # Errors
///
/// [`Error::Config`] for invalid cluster settings, [`Error::Resolve`] for a
/// seed that does not resolve, [`Error::Runtime`] when the OS refuses a
/// thread, [`Error::Auth`] / [`Error::Handshake`] when the seeds refuse the
/// credentials, [`Error::Discovery`] when no seed gave a usable slot map.
/// Nothing is left running.
pub(crate) fn build(
    seeds: &[String],
    c: ClusterSettings,
    common: Common,
) -> Result<ClusterPubSub, Error> {
    check_settings(&c, &common)?;
    let multiplier = common.subscribe_connections.unwrap_or(1);
    let parts = match c.partitions {
        0 => Partitions::raw(b""),
        n => Partitions::new(n),
    }
    .map_err(|e| Error::Config(format!("partitions: {e}").into()))?;
    let parts = c
        .raw_names
        .iter()
        .try_fold(parts, |parts, raw| parts.raw_prefix(raw))
        .map_err(|e| Error::Config(format!("raw_names: {e}").into()))?;
    let seed_addrs = node_addrs(seeds, &*common.resolver)?;
    let handler = common
        .handler
        .clone()
        .unwrap_or_else(crate::workers::handler::publish_only);
    let counters = Counters::named(common.client_name.as_deref(), seeds);
    let runtime = Runtime::for_instance(
        common.runtime.as_ref(),
        common.io_threads,
        usize::MAX,
        &counters,
    )?;
    let node = NodeSettings::new(
        &common,
        &runtime,
        Duration::from_secs(1),
        Duration::from_secs(2),
    );
    let pool = common.pool(&runtime, handler, &counters)?;
    let cfg = Config {
        mode: c.mode,
        multiplier,
        batch: common.batch_size,
        poll_interval: c.poll_interval,
        split: c.split,
        resubscribe_workers: c.resubscribe_workers,
        max_redirects: c.max_redirects,
        retry_window: c.retry_window,
        degraded_retry: c.degraded_retry,
        probe_interval: common.probe_interval,
        publish_hold: c.publish_hold,
        fixed_servers: 0,
        envelope: common.envelope,
        history: Arc::new(common.history.clone()),
        coalesce: common.subscribe_delay.unwrap_or(Duration::ZERO),
        replicas: c
            .replicas
            .then(|| c.replica_seed.unwrap_or_else(crate::engine::clock::seed)),
        publish_only: common.handler.is_none(),
    };
    let parts_for = Parts {
        parts,
        active_wait: ActiveWait::new(false, Duration::from_millis(50)),
        name: "shardsub-cluster-control",
    };
    let ps = start(
        cfg,
        parts_for,
        node,
        &common,
        seed_addrs,
        (runtime, pool),
        (c.hold_messages, c.hold_bytes),
        counters,
    )?;
    ps.wait_started(c.discovery_timeout)?;
    if common.require_all {
        let connect = common.connect_timeout.unwrap_or(Duration::from_secs(1));
        ps.wait_all_primaries(connect * 2)?;
    }
    if !common.history.is_empty() {
        let engines = ps.shared.routes.read().engines.clone();
        for e in &engines {
            crate::history::script::preload(e);
        }
        let r: Arc<dyn crate::workers::Reader> =
            Arc::new(crate::control_loop::recover::ClusterReader {
                shared: Arc::downgrade(&ps.shared),
            });
        for q in &ps.shared.queues {
            q.set_reader(r.clone());
        }
    }
    Ok(ps)
}

/// What differs between the placements when the subscribe side starts.
pub(crate) struct Parts {
    pub(crate) parts: Partitions,
    pub(crate) active_wait: ActiveWait,
    /// The control thread's name.
    pub(crate) name: &'static str,
}

/// Starts the subscribe side (and a cluster's publish side) of an
/// instance: the shared state, the control core on `servers` (the seeds,
/// or a fixed placement's servers), and the control thread that drives
/// it. On an error nothing is left running (the pool is stopped).
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    cfg: Config,
    p: Parts,
    node: NodeSettings,
    common: &Common,
    servers: Vec<topology::NodeAddr>,
    (runtime, pool): (Runtime, Pool),
    hold_limits: (usize, usize),
    counters: Arc<Counters>,
) -> Result<ClusterPubSub, Error> {
    let Parts {
        parts,
        active_wait,
        name,
    } = p;
    let lanes = Shared::lanes(&cfg, &parts);
    let seed = crate::engine::clock::seed();
    let heads = crate::control_loop::shared::wire_heads(cfg.mode, &parts);
    let hold = Publishing::new(publish_config(&cfg, parts.slots(), hold_limits));
    let shared = Arc::new(Shared {
        config: cfg,
        parts,
        heads,
        front: Front::new(
            Registry::new(lanes, seed),
            pool.queues().to_vec(),
            counters,
            active_wait,
            common.active_events,
        ),
        core_stats: Default::default(),
        health: Default::default(),
        resolver: common.resolver.clone(),
        routes: RwLock::new(Routes::empty()),
        lane_conn: RwLock::new(vec![None; lanes]),
        lane_owners: Arc::new(LaneOwners::new(lanes)),
        mail: Mailbox::new(lanes),
        seed_errors: Default::default(),
        closing: AtomicBool::new(false),
        engines_closing: Default::default(),
        hold,
        next_seq: AtomicU64::new(0),
        instance: crate::engine::clock::seed(),
    });
    crate::control_loop::fence::install(&shared);
    let core = match crate::control_loop::driver::start_core(core_config(&shared, &node, servers)) {
        Ok(core) => core,
        Err(e) => {
            pool.shutdown();
            return Err(Error::Config(format!("control: {e}").into()));
        }
    };
    let control = Driver {
        names: std::collections::HashMap::new(),
        lookups: Vec::new(),
        s: shared.clone(),
        node,
        core,
        routes_epoch: 0,
        map_seen: false,
        services_due: false,
        publ: Default::default(),
        next_node: 0,
        fetch_engines: Default::default(),
        subs: Default::default(),
        gaps: vec![Vec::new(); shared.queues.len()],
        fence_busy: false,
        enc: Vec::new(),
        name: Vec::new(),
        started: false,
        coalescing: None,
        next_turn: control::Time::ZERO,
    };
    let host = match runtime.control_host() {
        Ok(h) => h,
        Err(e) => {
            pool.shutdown();
            return Err(e);
        }
    };
    let panics = shared.counters.thread_panics.clone();
    let hosted = host.spawn(name, panics, |bell| {
        let _ = shared.mail.bell.set(bell.clone());
        Box::new(control)
    });
    Ok(ClusterPubSub::new(shared, runtime, pool, hosted))
}

/// The control core's settings for this instance.
/// Servers or seeds given as `host:port`, as the core names nodes (a
/// name stays a name: it is looked up again whenever a connection to it
/// opens); each must resolve now.
///
/// # Errors
///
/// [`Error::Resolve`] for one that does not.
pub(crate) fn node_addrs(
    addrs: &[String],
    resolver: &dyn crate::Resolver,
) -> Result<Vec<topology::NodeAddr>, Error> {
    addrs
        .iter()
        .map(|a| {
            let err = |reason: String| Error::Resolve {
                addr: a.as_str().into(),
                reason: reason.into(),
            };
            if let Some(path) = crate::addr::unix_path(a) {
                // A Unix socket: its path as the host, port 0 (printed
                // back as `unix:/path`).
                return Ok(topology::NodeAddr {
                    host: path.to_string_lossy().into_owned(),
                    port: 0,
                });
            }
            crate::engine::resolve::lookup(resolver, a).map_err(err)?;
            let (host, port) =
                crate::engine::resolve::split(a).ok_or_else(|| err("expected host:port".into()))?;
            Ok(topology::NodeAddr {
                host: host.to_string(),
                port,
            })
        })
        .collect()
}

fn core_config(
    shared: &Shared,
    node: &NodeSettings,
    seeds: Vec<topology::NodeAddr>,
) -> control::Config {
    let cfg = &shared.config;
    let mut k = control::Config::new(shared.parts.clone(), seeds);
    k.mode = match cfg.mode {
        _ if cfg.fixed_servers > 0 => control::Mode::Fixed,
        Mode::Sharded => control::Mode::NodeGrouped,
        Mode::PerPartition => control::Mode::PerPartition,
        Mode::Classic => control::Mode::Classic,
    };
    k.multiplier = cfg.multiplier as u32;
    k.batch = cfg.batch;
    k.workers = cfg.resubscribe_workers;
    k.split = match cfg.split {
        ResubscribeSplit::Partitions => control::ResubscribeSplit::Partitions,
        ResubscribeSplit::Channels => control::ResubscribeSplit::Channels,
    };
    k.poll_interval = cfg.poll_interval;
    k.degraded_retry = cfg.degraded_retry;
    k.retry_max = node.backoff.1.max(cfg.degraded_retry);
    k.reconnect_base = node.backoff.0;
    // Connect and handshake, with a margin for a busy I/O thread.
    k.connect_timeout = node.connect_timeout + Duration::from_secs(1);
    // A fetch may open a connection and takes two round trips.
    k.fetch_timeout = node.connect_timeout + Duration::from_secs(2);
    let reply = if node.request_timeout.is_zero() {
        Duration::from_secs(5)
    } else {
        node.request_timeout
    };
    k.reply_timeout = reply;
    k.replicas = cfg.replicas;
    k.ping_interval = cfg.probe_interval;
    // The probe interval bounds the probe too (a black-holed connection
    // is restarted within two intervals of silence).
    if !cfg.probe_interval.is_zero() {
        k.ping_timeout = cfg.probe_interval;
    }
    k
}
