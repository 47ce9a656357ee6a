//! [`Builder`]: engine settings, validated and connected by [`Builder::build`].

use std::sync::Arc;
use std::time::Duration;

use crate::addr::ServerAddr;
use crate::conn::{ConnConfig, Protocol, Role};
use crate::engine::resolve::{self, Resolver};
use crate::engine::runtime::default_threads;
use crate::engine::settings::AnySink;
use crate::engine::settings::Settings;
use crate::engine::stats::EngineCounters;
use crate::engine::{Engine, Runtime};
use crate::error::Error;
use crate::observer::{NoObserver, Observer};
use crate::transport::tls::TlsConfig;
use crate::url::UrlSettings;

/// Settings for an [`Engine`]; start with [`Engine::builder`].
///
/// Defaults: RESP3 (falling back to RESP2 when `HELLO` is refused), one
/// I/O thread per core (at most one per connection), one connection per
/// server, a 100 µs flush delay, a 2 s connect timeout, a 5 s request
/// timeout, reconnect backoff from 50 ms up to 5 s, a 2 s shutdown grace.
pub struct Builder {
    addrs: Vec<String>,
    io_threads: Option<usize>,
    runtime: Option<Runtime>,
    connections_per_server: usize,
    flush_delay: Duration,
    connect_timeout: Duration,
    request_timeout: Duration,
    backoff: (Duration, Duration),
    shutdown_timeout: Duration,
    username: Option<Vec<u8>>,
    password: Option<Vec<u8>>,
    client_name: Option<Vec<u8>>,
    load_scripts: Vec<&'static str>,
    protocol: Protocol,
    observer: Option<Arc<dyn Observer>>,
    resolver: Option<Arc<dyn Resolver>>,
    seed: Option<u64>,
    limits: resp::Limits,
    role: Role,
    max_buffered: usize,
    urls: UrlSettings,
    /// TLS for every connection (always `None` without the `tls` feature).
    tls: Option<TlsConfig>,
    /// A connection whose first attempt fails keeps trying (see
    /// `start_degraded`).
    degraded: bool,
    /// See [`Settings::lease`](crate::engine::Settings).
    lease: Duration,
    /// See [`Settings::read_pause`](crate::engine::Settings).
    read_pause: Duration,
    /// Where kept publishes' outcomes go (see `kept_sink`).
    kept: Option<AnySink>,
    /// See [`ConnConfig::require_primary`] (`require_primary`).
    require_primary: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            addrs: Vec::new(),
            io_threads: None,
            runtime: None,
            require_primary: false,
            connections_per_server: 1,
            flush_delay: Duration::from_micros(100),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            backoff: (Duration::from_millis(50), Duration::from_secs(5)),
            shutdown_timeout: Duration::from_secs(2),
            username: None,
            password: None,
            client_name: None,
            load_scripts: Vec::new(),
            protocol: Protocol::Resp3,
            observer: None,
            resolver: None,
            seed: None,
            limits: resp::Limits::default(),
            role: Role::Command,
            max_buffered: 4 << 20,
            urls: UrlSettings::default(),
            tls: None,
            degraded: false,
            lease: crate::engine::lent::LEASE,
            read_pause: Duration::ZERO,
            kept: None,
        }
    }
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("addrs", &self.addrs)
            .field("io_threads", &self.io_threads)
            .field("connections_per_server", &self.connections_per_server)
            .field("flush_delay", &self.flush_delay)
            .field("protocol", &self.protocol)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Adds a server, as `host:port`, or a Unix socket as `unix:/path` (or
    /// the absolute path; never with TLS). With several servers, channels are
    /// spread over them by [`shardcore::shard_of`] (client-side sharding).
    pub fn address(mut self, addr: impl Into<String>) -> Self {
        self.addrs.push(addr.into());
        self
    }

    /// Adds several servers (see [`Builder::address`]).
    pub fn addresses<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.addrs.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// Adds a server from a URL, `redis://user:password@host:port` or
    /// `valkey://…`; with the `tls` feature also `rediss://…` or
    /// `valkeys://…`, which turn TLS on for every server of this builder.
    /// The forms, how URL credentials combine with [`Builder::username`]
    /// and [`Builder::password`], and how a TLS URL combines with a given
    /// TLS config are those of
    /// [`PubSubBuilder::url`](crate::PubSubBuilder::url). An engine does
    /// not follow a cluster: `?cluster=true` is refused (use a
    /// [`PubSub`](crate::PubSub) for that). A URL that cannot be read fails
    /// [`Builder::build`] with [`Error::Config`].
    pub fn url(mut self, url: &str) -> Self {
        if let Some(u) = self.urls.read(url) {
            if !u.sentinels.is_empty() {
                self.urls.errors.push(format!(
                    "URL {}: an Engine does not follow Sentinel; use PubSub::builder().url(..)",
                    crate::url::redacted(url)
                ));
                return self;
            }
            if u.cluster {
                self.urls.errors.push(format!(
                    "URL {}: an Engine does not follow a cluster (cluster=true); \
                     use PubSub::builder().url(..)",
                    crate::url::redacted(url)
                ));
            } else {
                self.addrs.push(u.addr);
            }
        }
        self
    }

    /// Number of I/O threads of the engine's own runtime (default:
    /// available parallelism, and never more than the number of
    /// connections). Not with [`Builder::runtime`].
    pub fn io_threads(mut self, n: usize) -> Self {
        self.io_threads = Some(n);
        self
    }

    /// Runs the engine's connections on `runtime`'s I/O threads, shared with
    /// whatever else uses it, instead of on threads of its own. Not with
    /// [`Builder::io_threads`].
    pub fn runtime(mut self, runtime: &Runtime) -> Self {
        self.runtime = Some(runtime.clone());
        self
    }

    /// Pipelined connections per server (default 1). A channel's publishes
    /// always use the same one, so they stay in order.
    pub fn connections_per_server(mut self, n: usize) -> Self {
        self.connections_per_server = n;
        self
    }

    /// How long commands submitted while earlier ones await replies may be
    /// held so they leave in one write (default 100 µs; zero turns it off).
    /// Commands are held only while two or more written requests await
    /// replies and the pending batch is under 16 KiB, so a caller that waits
    /// for each reply is never delayed, and held commands leave as soon as
    /// the pipeline drains or the batch fills.
    /// The deadline is kept with the poller's millisecond resolution: when
    /// the server stays silent it may stretch to about 1 ms.
    pub fn flush_delay(mut self, d: Duration) -> Self {
        self.flush_delay = d;
        self
    }

    /// Limit for TCP connect plus handshake (default 2 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// The longest a request may wait for its reply, counted from when it
    /// was written (default 5 s; zero disables). Neither replies to other
    /// requests nor pushes extend it, nor does a reply that is still
    /// arriving. When it passes, the waiting requests fail with
    /// [`Error::Timeout`] and the connection restarts.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }

    /// Reconnect delays: `base · 2^attempt` up to `max`, with jitter
    /// (defaults 50 ms and 5 s). A handshake alone does not restart the
    /// schedule, so a server that fails every connection right after it is
    /// still backed off: it restarts once a connection proves healthy (a
    /// request completed on it, or it stayed up for `max`).
    pub fn reconnect_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff = (base, max);
        self
    }

    /// How long [`Engine::shutdown`] waits for pending replies before it
    /// fails them (default 2 s).
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.shutdown_timeout = d;
        self
    }

    /// ACL user name (needs a password too).
    pub fn username(mut self, user: impl AsRef<[u8]>) -> Self {
        self.username = Some(user.as_ref().to_vec());
        self
    }

    /// Password (for `AUTH`, or `HELLO 3 AUTH`; user `default` when no user
    /// name is given).
    pub fn password(mut self, password: impl AsRef<[u8]>) -> Self {
        self.password = Some(password.as_ref().to_vec());
        self
    }

    /// Connection name shown by `CLIENT LIST`.
    pub fn client_name(mut self, name: impl AsRef<[u8]>) -> Self {
        self.client_name = Some(name.as_ref().to_vec());
        self
    }

    /// Scripts every connection loads in its handshake
    /// ([`ConnConfig::load_scripts`](crate::conn::ConnConfig::load_scripts)).
    pub(crate) fn load_scripts(mut self, scripts: Vec<&'static str>) -> Self {
        self.load_scripts = scripts;
        self
    }

    /// RESP3 (default; falls back to RESP2 when the server refuses `HELLO`)
    /// or RESP2.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// How long a connection lent to sequential callers may go unused
    /// before its I/O thread takes it back (tests hold lends longer).
    #[cfg(test)]
    pub(crate) fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long a busy connection stops reading (see
    /// [`Settings::read_pause`](crate::engine::Settings); default zero:
    /// never). Subscribe connections take the instance's delivery delay.
    pub(crate) fn read_pause(mut self, pause: Duration) -> Self {
        self.read_pause = pause;
        self
    }

    /// Looks host names up (default: the system's resolver). A server
    /// given by name is looked up at build and again before every
    /// reconnect, its addresses tried in turn (see [`Resolver`]).
    pub fn resolver(mut self, resolver: Arc<dyn Resolver>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Receives pushes and connection changes.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Seed for reconnect jitter (default: from the clock), for repeatable
    /// runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Bytes of commands a connection may buffer before submitters wait
    /// for the server to catch up (default 4 MiB; at least 64 KiB). A
    /// waiting call gives up after the request timeout with
    /// [`Error::Backpressure`].
    pub fn max_buffered_bytes(mut self, bytes: usize) -> Self {
        self.max_buffered = bytes;
        self
    }

    /// Parser limits for replies (default [`resp::Limits::default`]: 512 MiB
    /// bulk strings, 64 KiB simple lines, 2^24 elements, 128 levels). A
    /// reply past a limit closes the connection: its requests fail with
    /// [`Error::Protocol`] (for an endless line,
    /// [`resp::ErrorKind::LineTooLong`]), and it reconnects.
    pub fn limits(mut self, limits: resp::Limits) -> Self {
        self.limits = limits;
        self
    }

    /// What every connection of this engine carries (default
    /// [`Role::Command`]). The Pub/Sub layer builds its subscribe engine
    /// with [`Role::Subscribe`], so RESP2 Pub/Sub arrays are read as pushes.
    pub fn role(mut self, role: Role) -> Self {
        self.role = role;
        self
    }

    /// Connects every server over TLS with these settings (the `tls`
    /// cargo feature). The server name checked is each address's host
    /// unless [`TlsConfig::server_name`] sets one. Without this call, a
    /// `rediss://` URL uses [`TlsConfig::system_roots`].
    #[cfg(feature = "tls")]
    pub fn tls(mut self, config: TlsConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// Sets or clears TLS (the layers above pass their setting on).
    pub(crate) fn tls_option(mut self, config: Option<TlsConfig>) -> Self {
        self.tls = config;
        self
    }

    /// Validates the settings, starts the I/O threads and connects to every
    /// server (handshake included).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for invalid settings (a URL that cannot be read or
    /// whose credentials contradict the others included), [`Error::Resolve`] for an
    /// address that does not resolve, [`Error::Connect`] or
    /// [`Error::ConnectTimeout`] when a server cannot be reached,
    /// [`Error::Auth`] when it refuses the credentials, [`Error::Handshake`]
    /// when it refuses another handshake step, [`Error::Tls`] when TLS with
    /// it fails (certificate not trusted or not for the name, client
    /// certificate missing or refused), [`Error::Runtime`] when the OS
    /// refuses a poller or an I/O thread. Nothing is left running.
    pub fn build(self) -> Result<Engine, Error> {
        self.start(true)
    }

    /// Lets `build` succeed while some servers cannot be reached: a
    /// connection whose first attempt fails to connect (refused, timed out,
    /// unresolvable at connect time) reports it through the observer and
    /// keeps reconnecting with the usual backoff, and its submissions get
    /// [`Error::NotConnected`] meanwhile. A server that answers but refuses
    /// the handshake ([`Error::Auth`], [`Error::Handshake`]) still fails
    /// `build`: it would go on refusing.
    pub(crate) fn start_degraded(mut self, on: bool) -> Self {
        self.degraded = on;
        self
    }

    /// Where the outcomes of kept publishes ([`Engine::submit_kept`]) go
    /// when they need more than their callback (a cluster instance, held
    /// weakly: its routes hold this engine).
    pub(crate) fn kept_sink(mut self, sink: AnySink) -> Self {
        self.kept = Some(sink);
        self
    }

    /// [`Builder::build`] without waiting for the first handshakes: the
    /// engine returns at once, its connections report through the
    /// observer (`on_connected`, or `on_disconnected` when the first
    /// attempt fails; then the connection stays closed), and requests
    /// submitted meanwhile wait for the connection (or fail with its
    /// error). For control loops that must not block.
    pub(crate) fn build_detached(self) -> Result<Engine, Error> {
        self.start(false)
    }

    /// Each connection asks `ROLE` in its handshake and fails with
    /// [`Error::NotPrimary`] unless the server is a primary (a master
    /// found through Sentinel, given by its address: one given as
    /// `sentinel:NAME` checks by itself).
    pub(crate) fn require_primary(mut self, on: bool) -> Self {
        self.require_primary = on;
        self
    }

    fn start(mut self, wait: bool) -> Result<Engine, Error> {
        let config = |what: &str| Err(Error::Config(what.into()));
        if let Err(e) = self
            .urls
            .merge("Builder", &mut self.username, &mut self.password)
        {
            return config(&e);
        }
        if self.addrs.is_empty() {
            return config("no server address given (use Builder::address)");
        }
        if self.connections_per_server == 0 {
            return config("connections_per_server must be at least 1");
        }
        if self.io_threads == Some(0) {
            return config("io_threads must be at least 1");
        }
        if self.io_threads.is_some() && self.runtime.is_some() {
            return config(
                "io_threads and runtime exclude each other (the runtime sets the threads)",
            );
        }
        if self.username.is_some() && self.password.is_none() {
            return config("a username needs a password");
        }
        if self.connect_timeout.is_zero() {
            return config("connect_timeout must be above zero");
        }
        let tls = match self.urls.wants_tls() {
            Ok(from_url) => crate::transport::tls::prepare(self.tls.take(), from_url),
            Err(e) => Err(e),
        };
        let unix = self
            .addrs
            .iter()
            .find(|a| crate::addr::unix_path(a).is_some());
        let tls = match (tls, unix) {
            (Ok(Some(_)), Some(a)) => Err(format!(
                "TLS over a Unix socket ({a}) is not supported: leave TLS off for it \
                 (the socket never leaves the machine)"
            )),
            (tls, _) => tls.and_then(|t| crate::transport::tls::targets(t.as_ref(), &self.addrs)),
        };
        let tls = match tls {
            Ok(t) => t,
            Err(e) => return config(&e),
        };
        let resolver = self.resolver.unwrap_or_else(resolve::system);
        let mut addrs = Vec::with_capacity(self.addrs.len());
        for (a, tls) in self.addrs.iter().zip(tls) {
            if let Some(path) = crate::addr::unix_path(a) {
                addrs.push((ServerAddr::unix(path), tls, None));
                continue;
            }
            let first = resolve::lookup(&*resolver, a)
                .map_err(|reason| Error::Resolve {
                    addr: a.as_str().into(),
                    reason: reason.into(),
                })?
                .into_iter()
                .next()
                .ok_or_else(|| Error::Resolve {
                    addr: a.as_str().into(),
                    reason: "no address found".into(),
                })?;
            addrs.push((first.into(), tls, resolve::Named::of(a, &resolver)));
        }
        let total = addrs.len() * self.connections_per_server;
        let seed = self.seed.unwrap_or_else(crate::engine::clock::seed);
        let settings = Arc::new(Settings {
            max_buffered: self.max_buffered.max(64 << 10),
            conn: ConnConfig {
                protocol: self.protocol,
                role: self.role,
                username: self.username,
                password: self.password,
                client_name: self.client_name,
                flush_delay: self.flush_delay,
                flush_batch_bytes: 16 * 1024,
                request_timeout: self.request_timeout,
                handshake_timeout: self.connect_timeout,
                limits: self.limits,
                load_scripts: self.load_scripts,
                require_primary: self.require_primary,
            },
            connect_timeout: self.connect_timeout,
            backoff_base: self.backoff.0,
            backoff_max: self.backoff.1,
            lendable: self.observer.is_none() && self.kept.is_none(),
            lease: self.lease,
            read_pause: self.read_pause,
            observer: self.observer.unwrap_or_else(|| Arc::new(NoObserver)),
            counters: EngineCounters::default(),
            degraded: self.degraded,
            kept: self.kept,
        });
        let runtime = match self.runtime {
            Some(r) => (r, true),
            None => {
                let threads = self
                    .io_threads
                    .unwrap_or_else(default_threads)
                    .min(total)
                    .max(1);
                let panics = settings.counters.thread_panics.clone();
                (Runtime::start(threads, 1, panics)?, false)
            }
        };
        Engine::start(
            settings,
            &addrs,
            self.connections_per_server,
            runtime,
            seed,
            self.shutdown_timeout,
            wait,
        )
    }
}

impl Engine {
    /// Settings for a new engine.
    pub fn builder() -> Builder {
        Builder::default()
    }
}
