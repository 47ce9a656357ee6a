//! A TCP proxy in front of a real server that can cut, delay or black-hole
//! the traffic: network faults on demand.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::Error;

/// Counters of a [`FaultProxy`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Client connections accepted.
    pub accepted: u64,
    /// Connections currently open (client side).
    pub active: usize,
    /// Bytes forwarded from clients to the server.
    pub bytes_to_server: u64,
    /// Bytes forwarded from the server to clients.
    pub bytes_to_client: u64,
    /// Bytes swallowed while black-holing.
    pub bytes_dropped: u64,
    /// Connections closed by [`FaultProxy::cut_all`].
    pub cut: u64,
}

#[derive(Debug)]
struct Pair {
    id: u64,
    client: TcpStream,
    server: TcpStream,
    /// Set once the black hole swallowed bytes of this connection, per
    /// direction (`[to the server, to the client]`): a stream with a hole
    /// is never resumed.
    tainted: Arc<[AtomicBool; 2]>,
    /// This connection's own black hole, per direction (see
    /// [`FaultProxy::blackhole_connections`]).
    hole: Arc<[AtomicBool; 2]>,
}

/// Which way a fault acts: on the bytes a client sends to the server, on
/// the bytes the server sends back, or both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client to server: requests.
    ToServer,
    /// Server to client: replies and pushes.
    ToClient,
    /// Both ways, as behind a dead link.
    Both,
}

impl Direction {
    /// Whether it acts on bytes going the way `up` says (client to server
    /// when true).
    fn covers(self, up: bool) -> bool {
        match self {
            Direction::Both => true,
            Direction::ToServer => up,
            Direction::ToClient => !up,
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    /// The black hole, per direction (`[to the server, to the client]`).
    blackhole: [AtomicBool; 2],
    delay_us: AtomicU64,
    delay_new_us: AtomicU64,
    next_id: AtomicU64,
    accepted: AtomicU64,
    active: AtomicUsize,
    to_server: AtomicU64,
    to_client: AtomicU64,
    dropped: AtomicU64,
    cut: AtomicU64,
    pairs: Mutex<Vec<Pair>>,
}

/// A proxy on a free loopback port that forwards to `target`.
///
/// By default it passes bytes through. [`FaultProxy::cut_all`] closes every
/// open connection (both sides), [`FaultProxy::delay`] holds each forwarded
/// chunk back, [`FaultProxy::blackhole`] swallows bytes in both directions
/// (or, with [`FaultProxy::blackhole_toward`], one: requests reach the
/// server but its replies are lost) while keeping connections open, and
/// [`FaultProxy::heal`] ends a black hole the way a real partition ends: a
/// connection that lost bytes is closed, never resumed with a hole in its
/// stream. Dropping it closes everything.
///
/// ```
/// use testkit::{FaultProxy, Server, ServerKind, Value};
///
/// let server = Server::start(ServerKind::Redis)?;
/// let proxy = FaultProxy::start(server.addr())?;
/// let mut client = testkit::Client::connect(proxy.addr())?;
/// assert_eq!(client.cmd(&[b"PING"])?, Value::Simple(b"PONG".to_vec()));
/// proxy.cut_all(); // the network drops every connection
/// assert!(client.cmd(&[b"PING"]).is_err());
/// # Ok::<(), testkit::Error>(())
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts forwarding to `target`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the listener cannot be bound.
    pub fn start(target: SocketAddr) -> Result<FaultProxy, Error> {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| Error::io("bind proxy", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("proxy address", e))?;
        let shared = Arc::new(Shared::default());
        let accept_shared = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("fault-proxy-accept".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if accept_shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(client) = client {
                        open(client, target, &accept_shared);
                    }
                }
            })
            .map_err(|e| Error::io("spawn proxy thread", e))?;
        Ok(FaultProxy {
            addr,
            target,
            shared,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address it forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Closes every open connection on both sides; returns how many.
    /// New connections are accepted as before.
    pub fn cut_all(&self) -> usize {
        let pairs = std::mem::take(&mut *self.pairs());
        for pair in &pairs {
            let _ = pair.client.shutdown(Shutdown::Both);
            let _ = pair.server.shutdown(Shutdown::Both);
        }
        self.shared
            .cut
            .fetch_add(pairs.len() as u64, Ordering::SeqCst);
        pairs.len()
    }

    /// Holds each forwarded chunk back by `delay` (zero: no delay).
    pub fn delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::SeqCst);
    }

    /// Holds each forwarded chunk of the connections accepted from now on
    /// back by `delay` (zero: no delay); the open ones keep theirs. A
    /// reconnect is then slower than a connection that stayed up.
    pub fn delay_new(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_new_us.store(us, Ordering::SeqCst);
    }

    /// While on, bytes in both directions are read and dropped; connections
    /// stay open, as behind a dead link. The same as
    /// [`FaultProxy::blackhole_toward`] with [`Direction::Both`].
    pub fn blackhole(&self, on: bool) {
        self.blackhole_toward(Direction::Both, on);
    }

    /// Turns the black hole on or off for the bytes going `direction`
    /// (the other direction keeps its own setting). With
    /// [`Direction::ToClient`] a request reaches the server and runs, but
    /// its reply is lost: the client cannot tell whether it ran. Bytes
    /// still flow the other way, so a connection that lost replies keeps
    /// taking requests until [`FaultProxy::heal`] closes it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use testkit::{Direction, FaultProxy, Server, ServerKind, Value};
    ///
    /// let server = Server::start(ServerKind::Redis)?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let mut client = testkit::Client::connect(proxy.addr())?;
    /// client.set_timeout(Duration::from_millis(200))?;
    /// proxy.blackhole_toward(Direction::ToClient, true);
    /// assert!(client.cmd(&[b"INCR", b"runs"]).is_err()); // no reply...
    /// // ...but it ran (seen on a direct connection).
    /// testkit::wait_for("the INCR", Duration::from_secs(5), || {
    ///     let runs = server.cmd(&[b"GET", b"runs"])?;
    ///     Ok((runs == Value::Bulk(b"1".to_vec())).then_some(()))
    /// })?;
    /// assert_eq!(proxy.heal(), 1); // its replies have a hole: closed
    /// # Ok::<(), testkit::Error>(())
    /// ```
    pub fn blackhole_toward(&self, direction: Direction, on: bool) {
        for (i, up) in [true, false].into_iter().enumerate() {
            if direction.covers(up) {
                self.shared.blackhole[i].store(on, Ordering::SeqCst);
            }
        }
    }

    /// The ids of the connections open now, oldest first: take them
    /// before and after a client connects to tell its connections from
    /// the others (see [`FaultProxy::blackhole_connections`]).
    pub fn connections(&self) -> Vec<u64> {
        self.pairs().iter().map(|p| p.id).collect()
    }

    /// [`FaultProxy::blackhole_toward`] for the open connections `ids`
    /// only (from [`FaultProxy::connections`]): the others, and those
    /// accepted later, pass bytes as before. With [`Direction::ToClient`]
    /// one client's requests run but their replies are lost, while
    /// another client of the same server (a subscriber) still gets
    /// everything. [`FaultProxy::heal`] ends it too.
    pub fn blackhole_connections(&self, ids: &[u64], direction: Direction, on: bool) {
        for pair in self.pairs().iter().filter(|p| ids.contains(&p.id)) {
            for (i, up) in [true, false].into_iter().enumerate() {
                if direction.covers(up) {
                    pair.hole[i].store(on, Ordering::SeqCst);
                }
            }
        }
    }

    /// Ends a black hole: stops swallowing bytes and closes every
    /// connection whose bytes were swallowed (a TCP stream cannot resume
    /// with a hole; without this, a client would read a reply meant for
    /// another request). Returns how many were closed. A connection that
    /// swallowed bytes after this call is closed on its next forward.
    pub fn heal(&self) -> usize {
        self.blackhole_toward(Direction::Both, false);
        let tainted: Vec<Pair> = {
            let mut pairs = self.pairs();
            for p in pairs.iter() {
                for h in p.hole.iter() {
                    h.store(false, Ordering::SeqCst);
                }
            }
            let (tainted, clean) = std::mem::take(&mut *pairs)
                .into_iter()
                .partition(|p| p.tainted.iter().any(|t| t.load(Ordering::SeqCst)));
            *pairs = clean;
            tainted
        };
        for pair in &tainted {
            let _ = pair.client.shutdown(Shutdown::Both);
            let _ = pair.server.shutdown(Shutdown::Both);
        }
        self.shared
            .cut
            .fetch_add(tainted.len() as u64, Ordering::SeqCst);
        tainted.len()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ProxyStats {
        let s = &self.shared;
        ProxyStats {
            accepted: s.accepted.load(Ordering::SeqCst),
            active: s.active.load(Ordering::SeqCst),
            bytes_to_server: s.to_server.load(Ordering::SeqCst),
            bytes_to_client: s.to_client.load(Ordering::SeqCst),
            bytes_dropped: s.dropped.load(Ordering::SeqCst),
            cut: s.cut.load(Ordering::SeqCst),
        }
    }

    fn pairs(&self) -> std::sync::MutexGuard<'_, Vec<Pair>> {
        self.shared
            .pairs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let pairs = std::mem::take(&mut *self.pairs());
        for pair in pairs {
            let _ = pair.client.shutdown(Shutdown::Both);
            let _ = pair.server.shutdown(Shutdown::Both);
        }
    }
}

/// Connects to the target and starts the two forwarding threads.
fn open(client: TcpStream, target: SocketAddr, shared: &Arc<Shared>) {
    shared.accepted.fetch_add(1, Ordering::SeqCst);
    let own_delay = shared.delay_new_us.load(Ordering::SeqCst);
    let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let clone = |s: &TcpStream| s.try_clone().ok();
    let clones = (|| {
        Some((
            clone(&client)?,
            clone(&server)?,
            clone(&server)?,
            clone(&client)?,
        ))
    })();
    let Some((c_read, s_write, s_read, c_write)) = clones else {
        return;
    };
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    let tainted = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    let hole = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    shared
        .pairs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Pair {
            id,
            client,
            server,
            tainted: Arc::clone(&tainted),
            hole: Arc::clone(&hole),
        });
    shared.active.fetch_add(1, Ordering::SeqCst);
    let halves = Arc::new(AtomicUsize::new(2));
    for (from, to, up) in [(c_read, s_write, true), (s_read, c_write, false)] {
        let shared = Arc::clone(shared);
        let halves = Arc::clone(&halves);
        let tainted = Arc::clone(&tainted);
        let hole = Arc::clone(&hole);
        let spawned = thread::Builder::new()
            .name(format!("fault-proxy-{id}"))
            .spawn(move || {
                forward(from, &to, (up, own_delay), &shared, (&tainted, &hole));
                let _ = to.shutdown(Shutdown::Write);
                if halves.fetch_sub(1, Ordering::SeqCst) == 1 {
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                    let mut pairs = shared.pairs.lock().unwrap_or_else(PoisonError::into_inner);
                    pairs.retain(|p| p.id != id);
                }
            });
        if spawned.is_err() {
            return;
        }
    }
}

/// Copies `from` → `to` until EOF or error, obeying black hole and delay
/// (the proxy's, or `own_delay` of this connection if longer; `up`: client
/// to server), and this connection's own black hole `hole`. Bytes
/// swallowed by either black hole taint the connection's
/// stream that way; a tainted stream is closed (both ways) instead of
/// forwarding again.
fn forward(
    mut from: TcpStream,
    mut to: &TcpStream,
    (up, own_delay): (bool, u64),
    shared: &Shared,
    (tainted, hole): (&[AtomicBool; 2], &[AtomicBool; 2]),
) {
    let way = usize::from(!up);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if shared.blackhole[way].load(Ordering::SeqCst) || hole[way].load(Ordering::SeqCst) {
            tainted[way].store(true, Ordering::SeqCst);
            shared.dropped.fetch_add(n as u64, Ordering::SeqCst);
            continue;
        }
        if tainted[way].load(Ordering::SeqCst) {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
        let delay = shared.delay_us.load(Ordering::SeqCst).max(own_delay);
        if delay > 0 {
            thread::sleep(Duration::from_micros(delay));
        }
        // Counted before the write: a peer that has the bytes sees them counted.
        let counter = if up {
            &shared.to_server
        } else {
            &shared.to_client
        };
        counter.fetch_add(n as u64, Ordering::SeqCst);
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}
