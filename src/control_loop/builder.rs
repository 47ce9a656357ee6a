//! The cluster placement: its settings (set on the one
//! [`PubSubBuilder`]) and how a cluster instance is started.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use shardcore::Partitions;

use crate::control_loop::driver::Driver;
use crate::control_loop::hold::Publishing;
use crate::control_loop::settings::{ClusterSettings, Common, Config, Mode, NodeSettings};
use crate::control_loop::shared::{Routes, Shared};
use crate::control_loop::ClusterPubSub;
use crate::engine::Runtime;
use crate::error::Error;
use crate::front::active::ActiveWait;
use crate::front::mailbox::Mailbox;
use crate::front::registry::Registry;
use crate::front::Front;
use crate::metrics::Counters;
use crate::workers::{LaneOwners, Pool};

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
    let nodes = NodeSettings::new(
        &common,
        &runtime,
        Duration::from_secs(1),
        Duration::from_secs(2),
    );
    let pool = common.pool(&runtime, handler, &counters)?;
    let cfg = Config {
        nodes,
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
        &common,
        seed_addrs,
        (runtime, pool),
        (c.hold_messages, c.hold_bytes),
        counters,
    )?;
    ps.wait_started(c.discovery_timeout)?;
    if common.require_all == Some(true) {
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
    let hold = Publishing::new(cfg.publish_core(parts.slots(), hold_limits));
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
    let core = match crate::control_loop::driver::start_core(core_config(&shared, servers)) {
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
        cmds: Default::default(),
        next_cmd: 0,
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

fn core_config(shared: &Shared, seeds: Vec<topology::NodeAddr>) -> control::Config {
    let cfg = &shared.config;
    let node = &cfg.nodes;
    let mut k = control::Config::new(shared.parts.clone(), seeds);
    k.mode = match cfg.mode {
        _ if cfg.fixed_servers > 0 => control::ConnLayout::Fixed,
        Mode::Sharded => control::ConnLayout::NodeGrouped,
        Mode::PerPartition => control::ConnLayout::PerPartition,
        Mode::Classic => control::ConnLayout::Classic,
    };
    k.multiplier = cfg.multiplier as u32;
    k.batch = cfg.batch;
    k.workers = cfg.resubscribe_workers;
    k.split = cfg.split;
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
