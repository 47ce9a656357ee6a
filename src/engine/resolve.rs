//! Host names: looked up at build and again before every reconnect, so a
//! server behind a name whose address changes (a restarted container or
//! pod) is reached at its new address.
//!
//! A [`Resolver`] turns a host and port into addresses; the default asks
//! the system (`getaddrinfo`). An address given as an IP is never looked
//! up. The lookups after the first run on a helper thread, one at a time
//! per name, so a slow name server never stalls an I/O thread; the
//! connection waits in its backoff meanwhile. Consecutive attempts go
//! through the addresses in turn.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::addr::ServerAddr;

/// Looks up a host name's addresses. Set one with
/// [`Builder::resolver`](crate::engine::Builder::resolver) or
/// [`PubSubBuilder::resolver`](crate::PubSubBuilder::resolver) to use your
/// own service discovery (or, in tests, to move a name).
pub trait Resolver: Send + Sync + 'static {
    /// The addresses of `host` at `port`, in the order to try them. It may
    /// block (it runs on a helper thread, or during `build`).
    ///
    /// # Errors
    ///
    /// Why the name could not be looked up.
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>>;
}

impl std::fmt::Debug for dyn Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resolver")
    }
}

/// The system's resolver.
#[derive(Debug, Default)]
pub(crate) struct System;

impl Resolver for System {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok((host, port).to_socket_addrs()?.collect())
    }
}

/// The resolver used when none is set.
pub(crate) fn system() -> Arc<dyn Resolver> {
    Arc::new(System)
}

/// Splits `host:port` (`[v6]:port` too); `sentinel:NAME` (a master found
/// through Sentinel) is `NAME` at port 0, which only the instance's
/// Sentinel resolver answers.
pub(crate) fn split(addr: &str) -> Option<(&str, u16)> {
    if let Some(name) = addr.strip_prefix("sentinel:") {
        return Some((name, 0));
    }
    let (host, port) = addr.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host, port.parse().ok()?))
}

/// Whether `host` is a name to look up (not an IP address).
pub(crate) fn is_name(host: &str) -> bool {
    host.parse::<IpAddr>().is_err()
}

/// `addr`'s addresses now, blocking (at build, or on the control thread).
///
/// # Errors
///
/// Why it could not be resolved, in words.
pub(crate) fn lookup(resolver: &dyn Resolver, addr: &str) -> Result<Vec<SocketAddr>, String> {
    let Some((host, port)) = split(addr) else {
        // Not host:port: the system parser says why.
        return match addr.to_socket_addrs() {
            Ok(it) => Ok(it.collect()),
            Err(e) => Err(format!("{e} (expected host:port)")),
        };
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    match resolver.resolve(host, port) {
        Ok(v) if v.is_empty() => Err("no address found".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

/// A server given by name: its lookups before reconnects.
pub(crate) struct Named {
    host: Arc<str>,
    port: u16,
    resolver: Arc<dyn Resolver>,
    state: Mutex<Lookup>,
}

/// The lookup state, and its generation: a lookup's answer counts only in
/// the generation it started in ([`Named::invalidate`] starts a new one).
struct Lookup {
    generation: u64,
    state: State,
}

enum State {
    /// No lookup running.
    Idle,
    /// A helper thread looks the name up.
    Running,
    /// Its answer, for the next attempt, and when it came.
    Done(Result<Vec<SocketAddr>, String>, std::time::Instant),
}

/// An answer older than this is not used: a lookup asked for and not
/// used at once (its connection was closed meanwhile) is asked again.
const ANSWER_KEEP: std::time::Duration = std::time::Duration::from_secs(1);

/// What a connection about to reconnect does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Connect here.
    Connect(ServerAddr),
    /// A lookup runs: look again shortly.
    Wait,
}

impl std::fmt::Debug for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Named({}:{})", self.host, self.port)
    }
}

impl Named {
    /// `addr` when it is a `host:port` whose host is a name.
    pub(crate) fn of(addr: &str, resolver: &Arc<dyn Resolver>) -> Option<Arc<Named>> {
        let (host, port) = split(addr)?;
        is_name(host).then(|| {
            Arc::new(Named {
                host: host.into(),
                port,
                resolver: resolver.clone(),
                state: Mutex::new(Lookup {
                    generation: 0,
                    state: State::Idle,
                }),
            })
        })
    }

    /// Whether it names a master found through Sentinel (`sentinel:NAME`,
    /// port 0): its connections check in their handshake that the server
    /// is a primary ([`crate::conn::ConnConfig::require_primary`]), since a
    /// Sentinel's answer can be stale during a failover.
    pub(crate) fn is_sentinel_master(&self) -> bool {
        self.port == 0
    }

    /// The address for reconnect attempt `attempt` (counted from 1 since
    /// the last success), from a fresh lookup: starts one and says
    /// [`Next::Wait`] when none is done, otherwise takes its answer and
    /// goes through its addresses in turn. A failed lookup keeps `current`.
    pub(crate) fn next(self: &Arc<Self>, attempt: u32, current: ServerAddr) -> Next {
        match self.poll(attempt) {
            None => Next::Wait,
            Some(Ok(addr)) => Next::Connect(addr.into()),
            Some(Err(e)) => {
                log::warn!(
                    "cannot resolve {}:{} ({e}); trying {current}",
                    self.host,
                    self.port
                );
                Next::Connect(current)
            }
        }
    }

    /// A fresh lookup's answer for attempt `attempt` (counted from 1; its
    /// addresses taken in turn), without blocking: `None` while it runs on
    /// a helper thread (one is started when none runs), then the address
    /// or why there is none. The answer is used once: the next call starts
    /// another lookup.
    pub(crate) fn poll(self: &Arc<Self>, attempt: u32) -> Option<Result<SocketAddr, String>> {
        let mut g = self.state.lock();
        match std::mem::replace(&mut g.state, State::Idle) {
            State::Done(_, at) if at.elapsed() > ANSWER_KEEP => {}
            State::Done(Ok(addrs), _) if !addrs.is_empty() => {
                let at = (attempt.saturating_sub(1) as usize) % addrs.len();
                return addrs.get(at).copied().map(Ok);
            }
            State::Done(Ok(_), _) => return Some(Err("no address found".into())),
            State::Done(Err(e), _) => return Some(Err(e)),
            State::Running => {
                g.state = State::Running;
                return None;
            }
            State::Idle => {}
        }
        // A fresh lookup, on a helper thread.
        g.state = State::Running;
        let generation = g.generation;
        drop(g);
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("shardsub-resolve".into())
            .spawn(move || {
                let answer = me
                    .resolver
                    .resolve(&me.host, me.port)
                    .map_err(|e| e.to_string());
                me.answer(generation, answer);
            });
        if let Err(e) = spawned {
            self.answer(generation, Err(format!("no thread for the lookup: {e}")));
        }
        None
    }

    /// Keeps a lookup's answer, unless a newer generation began.
    fn answer(&self, generation: u64, answer: Result<Vec<SocketAddr>, String>) {
        let mut g = self.state.lock();
        if g.generation == generation {
            g.state = State::Done(answer, std::time::Instant::now());
        }
    }

    /// Forgets any answer, and the one of a lookup still running: the
    /// name is known to lead elsewhere now (a Sentinel failover), so the
    /// next connection asks again.
    pub(crate) fn invalidate(&self) {
        let mut g = self.state.lock();
        g.generation = g.generation.wrapping_add(1);
        g.state = State::Idle;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Vec<SocketAddr>);

    impl Resolver for Fixed {
        fn resolve(&self, _host: &str, _port: u16) -> io::Result<Vec<SocketAddr>> {
            Ok(self.0.clone())
        }
    }

    #[test]
    fn names_are_looked_up_again_and_their_addresses_taken_in_turn() {
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let r: Arc<dyn Resolver> = Arc::new(Fixed(vec![a, b]));
        assert!(Named::of("10.0.0.9:6379", &r).is_none(), "an IP is no name");
        assert!(Named::of("[::1]:6379", &r).is_none());
        let n = Named::of("redis.internal:6379", &r).unwrap();
        let current: SocketAddr = "10.0.0.9:6379".parse().unwrap();
        for attempt in 1..=3 {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let got = loop {
                match n.next(attempt, current.into()) {
                    Next::Connect(addr) => break addr,
                    Next::Wait => {
                        assert!(std::time::Instant::now() < deadline, "lookup hangs");
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            };
            assert_eq!(
                got,
                ServerAddr::from(if attempt % 2 == 1 { a } else { b }),
                "attempt {attempt}"
            );
        }
        assert_eq!(
            lookup(&*r, "10.0.0.3:7").unwrap(),
            ["10.0.0.3:7".parse().unwrap()]
        );
        assert_eq!(lookup(&*r, "name:7").unwrap(), [a, b]);
        assert_eq!(split("[::1]:80"), Some(("::1", 80)));
    }

    /// A name whose answer the test changes, counting lookups.
    struct Moving {
        answer: Mutex<SocketAddr>,
        lookups: std::sync::atomic::AtomicU32,
    }

    impl Resolver for Moving {
        fn resolve(&self, _host: &str, _port: u16) -> io::Result<Vec<SocketAddr>> {
            self.lookups
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(vec![*self.answer.lock()])
        }
    }

    /// The address for attempt `attempt`, waiting out the lookup.
    fn connect_to(n: &Arc<Named>, attempt: u32) -> ServerAddr {
        let current: SocketAddr = "10.0.0.9:6379".parse().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match n.next(attempt, current.into()) {
                Next::Connect(addr) => return addr,
                Next::Wait => {
                    assert!(std::time::Instant::now() < deadline, "lookup hangs");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    }

    #[test]
    fn a_name_whose_answer_changes_is_followed_at_the_next_lookup() {
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let moving = Arc::new(Moving {
            answer: Mutex::new(a),
            lookups: 0.into(),
        });
        let r: Arc<dyn Resolver> = moving.clone();
        let n = Named::of("redis.internal:6379", &r).unwrap();
        assert_eq!(connect_to(&n, 1), ServerAddr::from(a));
        // The name moves: the next reconnect, at once, goes to the new
        // address (no answer is kept for it).
        *moving.answer.lock() = b;
        assert_eq!(connect_to(&n, 1), ServerAddr::from(b), "the new address");
        assert_eq!(connect_to(&n, 2), ServerAddr::from(b));
        let lookups = moving.lookups.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(lookups, 3, "one lookup per reconnect");
    }
}
