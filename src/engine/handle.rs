//! The engine: its servers' connections on the runtime's I/O threads,
//! how it starts, routes and shuts down.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Token;
use parking_lot::{Condvar, Mutex};
use resp::Value;

use crate::addr::ServerAddr;
use crate::engine::driver::ConnDriver;
use crate::engine::host::on_runtime_thread;
use crate::engine::lent;
use crate::engine::pending::{Pending, Slot};
use crate::engine::runtime::Runtime;
use crate::engine::settings::{Settings, Target};
use crate::engine::shared::{ConnShared, Staging, CONNECTING};
use crate::engine::stats::EngineStats;
use crate::engine::thread::{Control, ThreadShared};
use crate::engine::wait::{Closing, Latch};
use crate::error::Error;
use crate::observer::ConnInfo;

pub(super) struct ServerEntry {
    pub(super) addr: ServerAddr,
    pub(super) conns: Vec<Arc<ConnShared>>,
}

pub(super) struct Inner {
    pub(super) servers: Vec<ServerEntry>,
    pub(super) runtime: Runtime,
    /// Whether the runtime was given by the caller (shared with others), so
    /// its panics are added to this engine's count rather than already in it.
    pub(super) shared_runtime: bool,
    /// Per runtime thread this engine uses: the slots of its connections.
    pub(super) placed: Vec<(Arc<ThreadShared>, Vec<usize>)>,
    pub(super) settings: Arc<Settings>,
    pub(super) next: AtomicUsize,
    pub(super) shut: AtomicBool,
    /// The shutdown, once started.
    pub(super) closing: Mutex<Option<Closing>>,
    pub(super) shutdown_timeout: Duration,
}

/// A pool of pipelined connections to one or more servers, driven by
/// I/O threads. Share it between threads with an `Arc`; every method takes
/// `&self`. Dropping it shuts it down (see [`Engine::shutdown`]).
pub struct Engine {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("servers", &self.servers())
            .field("io_threads", &self.inner.runtime.io_threads())
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub(super) fn start(
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
                    lend: lent::Lend::default(),
                    staging: Mutex::new(Staging::default()),
                    state: AtomicU8::new(CONNECTING),
                    wake_pending: AtomicBool::new(false),
                    ready: thread.ready.clone(),
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
    pub(super) fn route_channel(&self, channel: &[u8]) -> &ConnShared {
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

    pub(super) fn route_server(&self, server: usize) -> Result<&ConnShared, Error> {
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

    pub(super) fn conn_at(&self, server: usize, index: usize) -> Result<&ConnShared, Error> {
        self.inner
            .servers
            .get(server)
            .and_then(|s| s.conns.get(index))
            .map(|c| &**c)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("no connection {index} on server {server}").into())
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
                .find(|(t, _)| Arc::ptr_eq(&t.ready, &c.ready))
            {
                Some((_, slots)) => slots.push(c.local),
                None => {
                    let Some((thread, _)) = self
                        .inner
                        .placed
                        .iter()
                        .find(|(t, _)| Arc::ptr_eq(&t.ready, &c.ready))
                    else {
                        continue;
                    };
                    per_thread.push((thread.clone(), vec![c.local]));
                }
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
        if !on_runtime_thread() && !done.wait_until(Instant::now() + Duration::from_secs(5)) {
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
        if on_runtime_thread() {
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
    pub(crate) fn close(&self) -> Option<Closing> {
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
        let closing = Closing { done, deadline };
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
