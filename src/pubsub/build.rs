//! [`PubSubBuilder::build`]: checking the settings against the placement
//! and starting its engines (one server, shards, Sentinel or a cluster).

use std::sync::Arc;
use std::time::Duration;

use crate::conn::Role;
use crate::control_loop;
use crate::control_loop::builder::Parts;
use crate::control_loop::settings::{Common, NodeSettings};
use crate::engine::{Engine, Runtime};
use crate::error::Error;
use crate::front::active::ActiveWait;
use crate::metrics::Counters;
use crate::pubsub::limits::{self, Limits, MessageLimit};
use crate::pubsub::{Fixed, PubSub};

use crate::pubsub::builder::{FixedSettings, MAX_DELIVERY_DELAY};
use crate::pubsub::PubSubBuilder;

impl PubSubBuilder {
    /// The awaitable form of [`PubSubBuilder::build`]: connecting, the
    /// checks and (on a cluster) the discovery run on a helper thread, and
    /// the handle completes with the instance. A future for any executor
    /// that never blocks it: `PubSub::builder().url(u).build_pending().await?`.
    ///
    /// # Errors
    ///
    /// Through the handle: as [`PubSubBuilder::build`], and
    /// [`Error::Runtime`] when the OS refused the helper thread.
    pub fn build_pending(self) -> crate::Pending<PubSub> {
        crate::pubsub::awaiting::off_thread("build", move || self.build())
    }

    /// Checks the settings and starts the instance in the placement chosen:
    /// workers, connections, the control thread.
    ///
    /// It blocks the calling thread while it connects: on servers up to
    /// the connect timeout (per server that must be reached, see
    /// [`PubSubBuilder::require_all_servers`]); on a cluster until a seed
    /// gave a slot map and its connections opened, up to
    /// [`PubSubBuilder::discovery_timeout`] (10 s by default) when no seed
    /// answers. The async form: [`PubSubBuilder::build_pending`]. With the
    /// `tokio` feature, a call on a thread of a Tokio runtime (where it
    /// would hold up the executor) logs a warning once per process.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for invalid settings (no placement or two, a
    /// handler and closures both, a zero count, a setting of another
    /// placement, a URL that cannot be read or whose credentials contradict
    /// others),
    /// [`Error::Resolve`] for an address that does not resolve,
    /// [`Error::Runtime`] when the OS refuses a thread; otherwise what
    /// starting the placement returns: [`Error::Auth`] / [`Error::Handshake`]
    /// when a server refuses the credentials; on servers with
    /// [`PubSubBuilder::require_all_servers`] (by default with one server),
    /// the connection error of one that cannot be reached (by default N
    /// shards start degraded); on a
    /// cluster [`Error::Discovery`] when no seed gave a usable slot map within [`PubSubBuilder::discovery_timeout`].
    /// Nothing is left running.
    pub fn build(mut self) -> Result<PubSub, Error> {
        #[cfg(feature = "tokio")]
        let _ = warn_on_runtime_thread();
        let config = |what: String| Err(Error::Config(what.into()));
        let c = &mut self.common;
        if let Err(e) = self
            .urls
            .merge("PubSubBuilder", &mut c.username, &mut c.password)
        {
            return config(e);
        }
        let tls = self.urls.wants_tls();
        match tls.and_then(|from_url| crate::transport::tls::prepare(c.tls.take(), from_url)) {
            Ok(tls) => c.tls = tls,
            Err(e) => return config(e),
        }
        let closures = std::mem::take(&mut self.closures);
        match (&closures.message, &closures.event, &self.common.handler) {
            (None, None, _) => {}
            (_, _, Some(_)) => {
                return config("both a handler and on_message/on_event given; choose one".into())
            }
            (None, Some(_), None) => {
                return config("on_event needs on_message (or a handler)".into())
            }
            (Some(_), _, None) => self.common.handler = Some(Arc::new(closures)),
        }
        let routes = std::mem::take(&mut self.routes);
        if !routes.is_empty() {
            let rest = self.common.handler.take();
            let router = crate::pubsub::router::Router::new(routes, rest);
            self.common.handler = Some(Arc::new(router));
        }
        let c = &self.common;
        if c.queue_capacity == 0 || c.batch_size == 0 || c.workers == Some(0) {
            return config("workers, queue_capacity and batch_size must be at least 1".into());
        }
        if c.delivery_delay > MAX_DELIVERY_DELAY {
            return config(format!("delivery_delay {:?} is over 1 s", c.delivery_delay));
        }
        if c.subscribe_connections == Some(0) {
            return config("subscribe_connections must be at least 1".into());
        }
        if c.username.is_some() && c.password.is_none() {
            return config("a username needs a password".into());
        }
        if let Some(e) = &c.history_error {
            return Err(e.clone());
        }
        let named = |a: &&String| a.contains("://");
        if let Some(url) = self.servers.iter().chain(&self.seeds).find(named) {
            return config(format!(
                "{url:?} is a URL: address and seed take host:port; \
                 use PubSubBuilder::url for a URL"
            ));
        }
        match (self.servers.is_empty(), self.seeds.is_empty()) {
            (true, true) => config(
                "no placement given (use PubSubBuilder::address for servers, \
                 PubSubBuilder::seed for a cluster)"
                    .into(),
            ),
            (false, false) => {
                config("both server addresses and cluster seeds given; choose one placement".into())
            }
            (false, true) => {
                if let Some(name) = self.cluster_only.first() {
                    return config(format!("{name} applies to a cluster (seeds) only"));
                }
                let sentinels = std::mem::take(&mut self.fixed.sentinels);
                let auth = std::mem::take(&mut self.fixed.sentinel_auth);
                let sentinels = match sentinel_resolver(sentinels, auth, &mut self.common) {
                    Ok(s) => s,
                    Err(e) => return config(e),
                };
                let (mut p, limits) = build_fixed(&self.servers, &self.fixed, &self.common)?;
                if let Some(s) = sentinels {
                    p.follow(s, &self.servers)?;
                }
                Ok(PubSub::fixed(p, limits))
            }
            (true, false) => {
                if let Some(name) = self.fixed_only.first() {
                    return config(format!("{name} applies to servers (addresses) only"));
                }
                let max = self.common.max_message;
                let bound = self
                    .common
                    .connect_timeout
                    .unwrap_or(Duration::from_secs(2));
                let p =
                    crate::control_loop::builder::build(&self.seeds, self.cluster, self.common)?;
                let mut limits = cluster_limits(&p, bound);
                if let Some(n) = max {
                    limits.message = MessageLimit::set(n);
                }
                Ok(PubSub::cluster(p, limits))
            }
        }
    }
}

/// With masters found through Sentinel: checks them, and makes the
/// instance's resolver ask their Sentinels for them.
///
/// # Errors
///
/// What is wrong, in words.
fn sentinel_resolver(
    masters: std::collections::BTreeMap<String, Vec<String>>,
    auth: crate::pubsub::sentinel::Auth,
    common: &mut Common,
) -> Result<Option<Arc<crate::pubsub::sentinel::Sentinels>>, String> {
    if masters.is_empty() {
        return match auth.username.is_some() || auth.password.is_some() {
            true => Err("sentinel_password and sentinel_username need Sentinel \
                         (PubSubBuilder::sentinel)"
                .into()),
            false => Ok(None),
        };
    }
    if auth.username.is_some() && auth.password.is_none() {
        return Err("sentinel_username needs sentinel_password".into());
    }
    for (name, list) in &masters {
        if !crate::pubsub::sentinel::valid_name(name) {
            return Err(format!(
                "Sentinel master name {name:?}: use a name without spaces, ':', '/', '@' or ','"
            ));
        }
        if list.is_empty() {
            return Err(format!("no Sentinel given for master {name:?}"));
        }
    }
    if common.tls.is_some() {
        return Err(
            "TLS with Sentinel is not supported: reach the Sentinels and \
                    their masters without TLS, or list the servers' addresses"
                .into(),
        );
    }
    let s = Arc::new(crate::pubsub::sentinel::Sentinels::new(
        common.resolver.clone(),
        masters,
        auth,
    ));
    common.resolver = s.clone();
    Ok(Some(s))
}

/// An engine builder for `addrs` with the shared settings.
fn engine(
    common: &Common,
    addrs: &[String],
    runtime: &Runtime,
    role: Role,
    per_server: usize,
) -> crate::engine::Builder {
    let backoff = common
        .backoff
        .unwrap_or((Duration::from_millis(50), Duration::from_secs(5)));
    let mut b = Engine::builder()
        .runtime(runtime)
        .addresses(addrs.iter().cloned())
        .role(role)
        .connections_per_server(per_server)
        .protocol(common.protocol)
        .connect_timeout(common.connect_timeout.unwrap_or(Duration::from_secs(2)))
        .reconnect_backoff(backoff.0, backoff.1)
        .tls_option(common.tls.clone())
        .resolver(common.resolver.clone());
    if let Some(p) = &common.password {
        b = b.password(p);
    }
    if let Some(u) = &common.username {
        b = b.username(u);
    }
    if let Some(n) = &common.client_name {
        b = b.client_name(n);
    }
    if !common.history.is_empty() && role == Role::Command {
        b = b.load_scripts(vec![crate::history::script::PUBLISH]);
    }
    if let Some(d) = common.flush_delay {
        b = b.flush_delay(d);
    }
    if let Some(d) = common.request_timeout {
        b = b.request_timeout(d);
    }
    b
}

/// Starts one server or N shards: the workers, the publish engine, then
/// the subscribe side on the control core in its fixed mode (the servers
/// are its nodes; it opens their subscribe connections without waiting).
fn build_fixed(
    addrs: &[String],
    f: &FixedSettings,
    common: &Common,
) -> Result<(Fixed, Limits), Error> {
    if f.publish_connections == 0 {
        return Err(Error::Config(
            "publish_connections must be at least 1".into(),
        ));
    }
    let handler = common
        .handler
        .clone()
        .unwrap_or_else(crate::workers::handler::publish_only);
    let per_server = common.subscribe_connections.unwrap_or(1);
    let servers = control_loop::builder::node_addrs(addrs, &*common.resolver)?;
    let counters = Counters::named(common.client_name.as_deref(), addrs);
    let conns = addrs.len() * (per_server + f.publish_connections);
    let runtime =
        Runtime::for_instance(common.runtime.as_ref(), common.io_threads, conns, &counters)?;
    let pool = common.pool(&runtime, handler, &counters)?;
    // The publish engine first: a server that refuses the credentials (or,
    // with `require_all_servers`, by default with one server, one that
    // cannot be reached) fails the build here, before anything else runs.
    let publ = match engine(
        common,
        addrs,
        &runtime,
        Role::Command,
        f.publish_connections,
    )
    .start_degraded(!common.require_all.unwrap_or(addrs.len() == 1))
    .build()
    {
        Ok(e) => Arc::new(e),
        Err(e) => {
            pool.shutdown();
            return Err(e);
        }
    };
    let limits = match servers_allow(common, &publ, addrs) {
        Ok(limits) => limits,
        Err(e) => {
            publ.shutdown();
            pool.shutdown();
            return Err(e);
        }
    };
    let nodes = NodeSettings::new(
        common,
        &runtime,
        Duration::from_secs(2),
        Duration::from_secs(5),
    );
    let cfg = control_loop::settings::Config {
        nodes,
        mode: control_loop::Mode::Classic,
        multiplier: per_server,
        batch: common.batch_size,
        poll_interval: Duration::from_secs(3600),
        split: control_loop::ResubscribeSplit::Partitions,
        resubscribe_workers: 1,
        max_redirects: 0,
        retry_window: Duration::ZERO,
        degraded_retry: Duration::from_millis(100),
        probe_interval: common.probe_interval,
        publish_hold: Duration::ZERO,
        fixed_servers: servers.len(),
        envelope: common.envelope,
        history: Arc::new(common.history.clone()),
        coalesce: common.subscribe_delay.unwrap_or(Duration::from_micros(500)),
        replicas: None,
        publish_only: common.handler.is_none(),
    };
    let parts = Parts {
        parts: shardcore::Partitions::new(1)
            .map_err(|e| Error::Config(format!("partitions: {e}").into()))?,
        active_wait: ActiveWait::new(true, Duration::from_millis(100)),
        name: "shardsub-pubsub-control",
    };
    let sub = control_loop::builder::start(
        cfg,
        parts,
        common,
        servers,
        (runtime, pool),
        (0, 0),
        counters,
    );
    if !common.history.is_empty() {
        crate::history::script::preload(&publ);
    }
    match sub {
        Ok(sub) => {
            if !common.history.is_empty() {
                let r: Arc<dyn crate::workers::Reader> =
                    Arc::new(crate::control_loop::recover::FixedReader {
                        engine: Arc::downgrade(&publ),
                        rules: sub.shared.config.history.clone(),
                        servers: addrs.len(),
                        envelope: common.envelope,
                    });
                for q in &sub.shared.queues {
                    q.set_reader(r.clone());
                }
            }
            let watcher = parking_lot::Mutex::new(None);
            Ok((Fixed { sub, publ, watcher }, limits))
        }
        Err(e) => {
            publ.shutdown();
            Err(e)
        }
    }
}

/// What the servers reached at build allow (see [`crate::pubsub::limits`]):
/// a cluster node given as a server fails the build; each limit is the
/// smallest the servers set, the message limit the builder's where it
/// sets one. Every question is sent at once and each answer waited for at
/// most the connect timeout.
fn servers_allow(common: &Common, publ: &Engine, addrs: &[String]) -> Result<Limits, Error> {
    let bound = common.connect_timeout.unwrap_or(Duration::from_secs(2));
    let asks: Vec<_> = (0..addrs.len())
        .filter(|&i| publ.is_connection_up(i, 0))
        .map(|i| {
            let config = |name: &str| publ.command_pending(i, ["CONFIG", "GET", name]);
            let limits = (
                config("client-output-buffer-limit"),
                config("proto-max-bulk-len"),
            );
            (i, publ.command_pending(i, ["INFO", "cluster"]), limits)
        })
        .collect();
    let mut found = Limits::default();
    for (i, info, (buffers, bulk)) in asks {
        let server = addrs.get(i).map_or("?", String::as_str);
        if let Ok(info) = info.wait_timeout(bound) {
            limits::not_a_cluster_node(server, &info)?;
        }
        let (a, b) = (buffers.wait_timeout(bound), bulk.wait_timeout(bound));
        found = found.min(limits::from_config(
            server,
            a.as_ref().ok(),
            b.as_ref().ok(),
        ));
    }
    if let Some(n) = common.max_message {
        found.message = MessageLimit::set(n);
    }
    Ok(found)
}

/// A cluster's limits: those the first primary connected sets (one
/// configuration is the norm across a cluster), none where they cannot be
/// read; a connection, and each answer, waited for at most `bound`.
fn cluster_limits(p: &crate::control_loop::ClusterPubSub, bound: Duration) -> Limits {
    let Some(engine) = p.first_up_engine(bound) else {
        return Limits::default();
    };
    let ask = |name: &str| engine.command_pending(0, ["CONFIG", "GET", name]);
    let (a, b) = (ask("client-output-buffer-limit"), ask("proto-max-bulk-len"));
    let (a, b) = (a.wait_timeout(bound), b.wait_timeout(bound));
    limits::from_config("the cluster", a.as_ref().ok(), b.as_ref().ok())
}

/// Logs once per process that a blocking `build` runs on a Tokio runtime
/// thread (its executor waits for the connections); whether it did now.
#[cfg(feature = "tokio")]
fn warn_on_runtime_thread() -> bool {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if tokio::runtime::Handle::try_current().is_err()
        || WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        return false;
    }
    log::warn!(
        "PubSubBuilder::build blocks while it connects (a cluster: until a seed gives a slot \
         map, up to the discovery timeout), here on a Tokio runtime thread, whose tasks wait \
         meanwhile; use `build_pending().await` there"
    );
    true
}

#[cfg(all(test, feature = "tokio"))]
mod tests {
    /// Named for the xtask step that runs the lib's tokio tests.
    #[test]
    fn tokio_a_build_on_a_runtime_thread_warns_once() {
        assert!(!super::warn_on_runtime_thread(), "off a runtime");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            assert!(
                super::warn_on_runtime_thread(),
                "the first call on a runtime"
            );
            assert!(!super::warn_on_runtime_thread(), "the second");
        });
    }
}
