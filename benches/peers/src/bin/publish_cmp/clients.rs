//! The publishers: shardsub (from threads, or from tokio tasks like the
//! peers), the `redis` crate's multiplexed async connection, `fred` 10,
//! and `redis-benchmark` (the C reference).
//!
//! Each run publishes `messages` 256-byte messages round-robin over 10,000
//! channels `bench:%012d` (no subscribers) and returns once every one of
//! them is acknowledged. `conc` submitters: threads for shardsub (each one
//! fire-and-forget, then waits for its last publish: replies come in
//! order), tasks awaiting each publish for the async peers and for
//! shardsub's tasks, and for `conc == 1` a single task keeping `WINDOW`
//! publishes in flight.
//!
//! Sequential mode (`sequential`): every submitter awaits each publish's
//! reply before the next one (shardsub: `publish_wait` on a thread, which
//! writes and reads on the caller's thread while the connection is lent to
//! it; shardsub's tasks and the peers: a spawned task `.await`ing each,
//! shardsub's a `publish_pending`, which its I/O thread completes, or a
//! `publish_async`, which writes and reads a lent connection on the task's
//! worker), `conc == 1` included.

use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use fred::bytes::Bytes;
use fred::bytes_utils::Str;
use fred::prelude::{ClientLike, PubsubInterface};
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::AsyncCommands;
use shardsub::engine::{Engine, PublishOptions};

use crate::measure::Snapshot;

/// Channels the messages are spread over.
pub const CHANNELS: usize = 10_000;
/// Publishes in flight for a single submitting task.
pub const WINDOW: usize = 64;
/// Longest a single run may take before it is abandoned.
pub const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Which publisher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `redis-benchmark -P 64`.
    Reference,
    /// This repository's engine.
    Shardsub,
    /// This repository's engine from tokio tasks, `.await`ing each
    /// `publish_pending` like the peers' tasks do theirs.
    ShardsubTasks,
    /// This repository's engine from tokio tasks, `.await`ing each
    /// `publish_async` (feature `tokio`: a lent connection is written and
    /// read on the task's worker).
    ShardsubAsync,
    /// The `redis` crate, multiplexed async connection.
    RedisRs,
    /// `fred` 10.
    Fred,
}

impl Kind {
    /// Every publisher, the C reference first.
    pub const ALL: [Kind; 6] = [
        Kind::Reference,
        Kind::Shardsub,
        Kind::ShardsubTasks,
        Kind::ShardsubAsync,
        Kind::RedisRs,
        Kind::Fred,
    ];

    /// The publishers that run when `--only` is not given.
    pub const DEFAULT: [Kind; 4] = [Kind::Reference, Kind::Shardsub, Kind::RedisRs, Kind::Fred];

    /// Name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Reference => "redis-benchmark",
            Kind::Shardsub => "shardsub",
            Kind::ShardsubTasks | Kind::ShardsubAsync => "shardsub",
            Kind::RedisRs => "redis 1.8.1",
            Kind::Fred => "fred 10.1.0",
        }
    }

    /// Parses a command-line name (`c`, `shardsub`, `shardsub-tasks`,
    /// `shardsub-async`, `redis`, `fred`).
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "c" | "redis-benchmark" => Some(Kind::Reference),
            "shardsub" => Some(Kind::Shardsub),
            "shardsub-tasks" => Some(Kind::ShardsubTasks),
            "shardsub-async" => Some(Kind::ShardsubAsync),
            "redis" => Some(Kind::RedisRs),
            "fred" => Some(Kind::Fred),
            _ => None,
        }
    }
}

/// Connected clients of every kind, to one server.
pub struct Clients {
    rt: tokio::runtime::Runtime,
    engine: Arc<Engine>,
    redis: redis::aio::MultiplexedConnection,
    fred: fred::prelude::Client,
    port: u16,
    names: Arc<[String]>,
    fred_names: Arc<[Str]>,
    payload: Vec<u8>,
    fred_payload: Bytes,
}

impl Clients {
    /// Connects every client to `server` with RESP3 and TCP_NODELAY.
    ///
    /// # Errors
    ///
    /// When a client cannot connect.
    pub fn connect(addr: std::net::SocketAddr, payload: usize) -> Result<Clients, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        // shardsub: HELLO 3 and TCP_NODELAY are its defaults; one I/O
        // thread and one connection, like the peers' single connection.
        let engine = Engine::builder()
            .address(addr.to_string())
            .io_threads(1)
            .connections_per_server(1)
            .request_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("shardsub: {e}"))?;
        let info = redis::IntoConnectionInfo::into_connection_info(format!(
            "redis://{addr}/?protocol=resp3"
        ))
        .map_err(|e| format!("redis: {e}"))?
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let redis_client = redis::Client::open(info).map_err(|e| format!("redis: {e}"))?;
        let redis = rt
            .block_on(redis_client.get_multiplexed_async_connection())
            .map_err(|e| format!("redis: {e}"))?;
        let config = fred::prelude::Config {
            version: fred::types::RespVersion::RESP3,
            server: fred::prelude::ServerConfig::new_centralized(
                addr.ip().to_string(),
                addr.port(),
            ),
            ..Default::default()
        };
        let fred = fred::prelude::Builder::from_config(config)
            .with_connection_config(|c| {
                c.tcp = fred::prelude::TcpConfig {
                    nodelay: Some(true),
                    ..Default::default()
                };
            })
            .build()
            .map_err(|e| format!("fred: {e}"))?;
        rt.block_on(fred.init()).map_err(|e| format!("fred: {e}"))?;
        let names: Arc<[String]> = (0..CHANNELS).map(|i| format!("bench:{i:012}")).collect();
        let fred_names = names.iter().map(|n| Str::from(n.as_str())).collect();
        let payload = vec![b'x'; payload];
        let fred_payload = Bytes::from(payload.clone());
        Ok(Clients {
            rt,
            engine: Arc::new(engine),
            redis,
            fred,
            port: addr.port(),
            names,
            fred_names,
            payload,
            fred_payload,
        })
    }

    /// The engine (for its write counter).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Publishes `messages` with `conc` submitters and returns the
    /// snapshots taken just before the first and just after the last
    /// acknowledgement (threads and tasks are started before the first).
    ///
    /// # Errors
    ///
    /// A publish that failed, a run past [`RUN_LIMIT`], or a failed snapshot.
    pub fn run(
        &self,
        kind: Kind,
        conc: usize,
        messages: u64,
        sequential: bool,
        snap: &dyn Fn() -> Result<Snapshot, String>,
    ) -> Result<(Snapshot, Snapshot), String> {
        match kind {
            Kind::Reference => self.run_reference(conc, messages, sequential, snap),
            Kind::Shardsub => self.run_shardsub(conc, messages, sequential, snap),
            Kind::ShardsubTasks | Kind::ShardsubAsync | Kind::RedisRs | Kind::Fred => {
                let fut = self.run_async(kind, conc, messages, sequential, snap);
                self.rt.block_on(async {
                    tokio::time::timeout(RUN_LIMIT, fut)
                        .await
                        .map_err(|_| format!("{} run took over {RUN_LIMIT:?}", kind.name()))?
                })
            }
        }
    }

    fn run_shardsub(
        &self,
        threads: usize,
        messages: u64,
        sequential: bool,
        snap: &dyn Fn() -> Result<Snapshot, String>,
    ) -> Result<(Snapshot, Snapshot), String> {
        let per = messages / threads as u64;
        let (ready, go) = (Barrier::new(threads + 1), Barrier::new(threads + 1));
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let (ready, go) = (&ready, &go);
                    s.spawn(move || -> Result<(), String> {
                        ready.wait();
                        go.wait();
                        let deadline = Instant::now() + RUN_LIMIT;
                        for i in 0..per {
                            let channel =
                                self.names[(i as usize * threads + t) % CHANNELS].as_bytes();
                            if sequential {
                                self.engine
                                    .publish_wait(channel, &self.payload, PublishOptions::classic())
                                    .map_err(|e| format!("shardsub: {e}"))?;
                            } else if i + 1 == per {
                                // Replies come in order: this one is the
                                // last.
                                self.engine
                                    .publish_pending(
                                        channel,
                                        &self.payload,
                                        PublishOptions::classic(),
                                    )
                                    .wait()
                                    .map_err(|e| format!("shardsub: {e}"))?;
                            } else {
                                self.engine
                                    .publish(channel, &self.payload)
                                    .map_err(|e| format!("shardsub: {e}"))?;
                            }
                            if i % 4096 == 0 && Instant::now() > deadline {
                                return Err(format!("shardsub run took over {RUN_LIMIT:?}"));
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            ready.wait();
            let before = snap();
            go.wait();
            let mut result = Ok(());
            for w in workers {
                let r = w
                    .join()
                    .unwrap_or_else(|_| Err("shardsub thread panicked".into()));
                result = result.and(r);
            }
            result?;
            Ok((before?, snap()?))
        })
    }

    async fn run_async(
        &self,
        kind: Kind,
        conc: usize,
        messages: u64,
        sequential: bool,
        snap: &dyn Fn() -> Result<Snapshot, String>,
    ) -> Result<(Snapshot, Snapshot), String> {
        if conc == 1 && !sequential {
            let before = snap()?;
            match kind {
                Kind::RedisRs => self.redis_window(messages).await?,
                Kind::ShardsubTasks | Kind::ShardsubAsync => self.shardsub_window(messages).await?,
                _ => self.fred_window(messages).await?,
            }
            return Ok((before, snap()?));
        }
        let per = messages / conc as u64;
        let ready = Arc::new(tokio::sync::Barrier::new(conc + 1));
        let go = Arc::new(tokio::sync::Barrier::new(conc + 1));
        let mut tasks = Vec::with_capacity(conc);
        for t in 0..conc {
            let (ready, go) = (ready.clone(), go.clone());
            let (names, fred_names) = (self.names.clone(), self.fred_names.clone());
            let (mut redis, fred) = (self.redis.clone(), self.fred.clone());
            let engine = self.engine.clone();
            let (payload, fred_payload) = (self.payload.clone(), self.fred_payload.clone());
            tasks.push(tokio::spawn(async move {
                ready.wait().await;
                go.wait().await;
                for i in 0..per as usize {
                    let c = (i * conc + t) % CHANNELS;
                    if kind == Kind::ShardsubAsync {
                        engine
                            .publish_async(names[c].as_bytes(), &payload, PublishOptions::classic())
                            .await
                            .map_err(|e| format!("shardsub: {e}"))?;
                    } else if kind == Kind::ShardsubTasks {
                        engine
                            .publish_pending(
                                names[c].as_bytes(),
                                &payload,
                                PublishOptions::classic(),
                            )
                            .await
                            .map_err(|e| format!("shardsub: {e}"))?;
                    } else if kind == Kind::RedisRs {
                        let _: i64 = redis
                            .publish(names[c].as_str(), payload.as_slice())
                            .await
                            .map_err(|e| format!("redis: {e}"))?;
                    } else {
                        let _: i64 = fred
                            .publish(fred_names[c].clone(), fred_payload.clone())
                            .await
                            .map_err(|e| format!("fred: {e}"))?;
                    }
                }
                Ok::<(), String>(())
            }));
        }
        ready.wait().await;
        let before = snap()?;
        go.wait().await;
        for task in tasks {
            task.await.map_err(|e| format!("task: {e}"))??;
        }
        Ok((before, snap()?))
    }

    async fn redis_window(&self, messages: u64) -> Result<(), String> {
        window("redis", messages, |i| {
            let mut conn = self.redis.clone();
            let (name, payload) = (self.names[i % CHANNELS].as_str(), self.payload.as_slice());
            async move { conn.publish::<_, _, i64>(name, payload).await }
        })
        .await
    }

    async fn shardsub_window(&self, messages: u64) -> Result<(), String> {
        window("shardsub", messages, |i| {
            let name = self.names[i % CHANNELS].as_bytes();
            self.engine
                .publish_pending(name, &self.payload, PublishOptions::classic())
        })
        .await
    }

    async fn fred_window(&self, messages: u64) -> Result<(), String> {
        window("fred", messages, |i| {
            let name = self.fred_names[i % CHANNELS].clone();
            self.fred
                .publish::<i64, _, _>(name, self.fred_payload.clone())
        })
        .await
    }

    /// `redis-benchmark -3 -c CONC -P 64 -n N -r 10000 PUBLISH bench:__rand_int__ <payload>`.
    fn run_reference(
        &self,
        conc: usize,
        messages: u64,
        sequential: bool,
        snap: &dyn Fn() -> Result<Snapshot, String>,
    ) -> Result<(Snapshot, Snapshot), String> {
        let payload = String::from_utf8_lossy(&self.payload).into_owned();
        // Sequential: one request in flight per connection.
        let pipeline = if sequential { 1 } else { WINDOW };
        let mut cmd = Command::new("redis-benchmark");
        // -3: RESP3 like the Rust clients (HELLO 3 at connect).
        cmd.args(["-3", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-c", &conc.to_string(), "-P", &pipeline.to_string()])
            .args([
                "-n",
                &messages.to_string(),
                "-r",
                &CHANNELS.to_string(),
                "-q",
            ])
            .args(["PUBLISH", "bench:__rand_int__", &payload])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let before = snap()?;
        let child = cmd.spawn().map_err(|e| format!("redis-benchmark: {e}"))?;
        // A watchdog kills it past the run limit; it hears of the exit first
        // in every normal run.
        let pid = child.id() as libc::pid_t;
        let (done, exited) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if exited.recv_timeout(RUN_LIMIT).is_err() {
                // SAFETY: kill(2) on our own, not yet reaped child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        let out = child.wait_with_output();
        let _ = done.send(());
        let _ = watchdog.join();
        let out = out.map_err(|e| format!("redis-benchmark: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-benchmark failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok((before, snap()?))
    }
}

/// Keeps [`WINDOW`] of `publish(i)` in flight, `i` counting up, until
/// `messages` of them are acknowledged; `who` names the client in errors.
async fn window<F, E>(who: &str, messages: u64, publish: impl Fn(usize) -> F) -> Result<(), String>
where
    F: std::future::Future<Output = Result<i64, E>>,
    E: std::fmt::Display,
{
    let mut in_flight: FuturesUnordered<F> = FuturesUnordered::new();
    for i in 0..messages as usize {
        if in_flight.len() == WINDOW {
            if let Some(r) = in_flight.next().await {
                r.map_err(|e| format!("{who}: {e}"))?;
            }
        }
        in_flight.push(publish(i));
    }
    while let Some(r) = in_flight.next().await {
        r.map_err(|e| format!("{who}: {e}"))?;
    }
    Ok(())
}
