//! Connection state per server: what [`PubSub::health`](crate::PubSub::health)
//! reports, what `wait_active` names when it gives up, and when the
//! application hears [`Event::Disconnected`](crate::Event::Disconnected) and
//! [`Event::Connected`](crate::Event::Connected).
//!
//! The control thread is the only writer: it tells this module every
//! subscribe connection it opens, sees up, sees down or closes, and queues
//! the events this module returns. A server is *lost* from the first of its
//! subscribe connections that ends or fails to open until all of them are
//! up again; the two events mark those edges, once each.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use control::{ConnId, Time};

use crate::addr::ServerAddr;
use crate::metrics::ServerHealth;

/// An edge of a server's state, for the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Edge {
    /// The server's first subscribe connection to end or fail to open.
    Lost {
        server: Arc<str>,
        addr: Option<ServerAddr>,
        error: Arc<str>,
        /// It was never up (a degraded start).
        first: bool,
    },
    /// Every subscribe connection to a lost server is up again.
    Restored {
        server: Arc<str>,
        addr: Option<ServerAddr>,
    },
}

#[derive(Debug)]
struct Server {
    name: Arc<str>,
    addr: Option<ServerAddr>,
    conns: BTreeSet<ConnId>,
    up: BTreeSet<ConnId>,
    lost: bool,
    /// A connection to it was up once.
    seen_up: bool,
    failures: u64,
    last_error: Option<Arc<str>>,
    since: Time,
}

/// Every server's subscribe connections, by the address the core names
/// its node by (`host:port`).
#[derive(Debug, Default)]
pub(crate) struct Health {
    servers: BTreeMap<Arc<str>, Server>,
    of_conn: BTreeMap<ConnId, Arc<str>>,
}

impl Health {
    /// `conn` is being opened to `server` (resolved to `addr`, when it
    /// resolved).
    pub(crate) fn opened(
        &mut self,
        now: Time,
        conn: ConnId,
        server: &str,
        addr: Option<ServerAddr>,
    ) {
        let s = match self.servers.get_mut(server) {
            Some(s) => s,
            None => {
                let name: Arc<str> = server.into();
                self.servers.entry(name.clone()).or_insert(Server {
                    name,
                    addr,
                    conns: BTreeSet::new(),
                    up: BTreeSet::new(),
                    lost: false,
                    seen_up: false,
                    failures: 0,
                    last_error: None,
                    since: now,
                })
            }
        };
        if addr.is_some() {
            s.addr = addr;
        }
        s.conns.insert(conn);
        self.of_conn.insert(conn, s.name.clone());
    }

    /// How many connections to `server` ended or failed to open.
    pub(crate) fn failures_of(&self, server: &str) -> u64 {
        self.servers.get(server).map_or(0, |s| s.failures)
    }

    /// `conn` finished its handshake.
    pub(crate) fn up(&mut self, now: Time, conn: ConnId) -> Option<Edge> {
        let s = self.server_of(conn)?;
        s.up.insert(conn);
        s.seen_up = true;
        if s.lost && s.up.len() == s.conns.len() {
            s.lost = false;
            s.since = now;
            return Some(Edge::Restored {
                server: s.name.clone(),
                addr: s.addr,
            });
        }
        None
    }

    /// `conn` ended or could not be opened, because of `error`; the core
    /// opens another in its place.
    pub(crate) fn failed(&mut self, now: Time, conn: ConnId, error: Arc<str>) -> Option<Edge> {
        let name = self.of_conn.remove(&conn)?;
        let s = self.servers.get_mut(&name)?;
        s.conns.remove(&conn);
        s.up.remove(&conn);
        s.failures += 1;
        s.last_error = Some(error.clone());
        if s.lost {
            return None;
        }
        s.lost = true;
        s.since = now;
        Some(Edge::Lost {
            server: s.name.clone(),
            addr: s.addr,
            error,
            first: !s.seen_up,
        })
    }

    /// `conn` was closed for good (its node left the map, its partition
    /// moved). A server left with no connection and not lost is forgotten.
    pub(crate) fn closed(&mut self, now: Time, conn: ConnId) {
        let Some(name) = self.of_conn.remove(&conn) else {
            return;
        };
        let Some(s) = self.servers.get_mut(&name) else {
            return;
        };
        s.conns.remove(&conn);
        s.up.remove(&conn);
        if s.conns.is_empty() && !s.lost {
            self.servers.remove(&name);
        } else if s.lost && !s.conns.is_empty() && s.up.len() == s.conns.len() {
            // Its lost connection's replacement is gone too: what is left
            // is up.
            s.lost = false;
            s.since = now;
        }
    }

    fn server_of(&mut self, conn: ConnId) -> Option<&mut Server> {
        let name = self.of_conn.get(&conn)?;
        self.servers.get_mut(name)
    }

    /// The servers that are lost now, with their last error.
    pub(crate) fn lost(&self) -> Vec<(Arc<str>, Arc<str>)> {
        self.servers
            .values()
            .filter(|s| s.lost)
            .map(|s| {
                let e = s.last_error.clone().unwrap_or_else(|| "unknown".into());
                (s.name.clone(), e)
            })
            .collect()
    }

    /// A snapshot, by server address.
    pub(crate) fn snapshot(&self, now: Time) -> Vec<ServerHealth> {
        self.servers
            .values()
            .map(|s| ServerHealth {
                server: s.name.to_string(),
                addr: s.addr,
                connected: !s.lost && !s.conns.is_empty() && s.up.len() == s.conns.len(),
                subscribe_connections: s.conns.len(),
                subscribe_connections_up: s.up.len(),
                failures: s.failures,
                last_error: s.last_error.as_deref().map(str::to_string),
                since: now.since(s.since),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Time = Time::ZERO;

    fn lost(server: &str, error: &str, first: bool) -> Option<Edge> {
        Some(Edge::Lost {
            server: server.into(),
            addr: None,
            error: error.into(),
            first,
        })
    }

    #[test]
    fn one_lost_and_one_restored_per_incident() {
        let mut h = Health::default();
        h.opened(T, ConnId(1), "a:1", None);
        h.opened(T, ConnId(2), "a:1", None);
        assert_eq!(h.up(T, ConnId(1)), None);
        assert_eq!(h.up(T, ConnId(2)), None, "a first connect is no edge");
        assert_eq!(
            h.failed(T, ConnId(1), "reset".into()),
            lost("a:1", "reset", false)
        );
        assert_eq!(h.failed(T, ConnId(2), "reset".into()), None, "once");
        h.opened(T, ConnId(3), "a:1", None);
        assert_eq!(h.failed(T, ConnId(3), "refused".into()), None);
        h.opened(T, ConnId(4), "a:1", None);
        h.opened(T, ConnId(5), "a:1", None);
        assert_eq!(h.up(T, ConnId(4)), None, "one of two is up");
        let restored = h.up(T, ConnId(5));
        assert!(
            matches!(restored, Some(Edge::Restored { .. })),
            "{restored:?}"
        );
        let snap = h.snapshot(T);
        assert_eq!(snap.len(), 1);
        assert!(snap[0].connected);
        assert_eq!(snap[0].failures, 3);
        assert_eq!(snap[0].last_error.as_deref(), Some("refused"));
        assert!(h.lost().is_empty());
    }

    #[test]
    fn a_degraded_start_is_lost_and_a_node_that_left_is_forgotten() {
        let mut h = Health::default();
        h.opened(T, ConnId(1), "a:1", None);
        assert_eq!(
            h.failed(T, ConnId(1), "refused".into()),
            lost("a:1", "refused", true)
        );
        assert_eq!(h.lost(), vec![("a:1".into(), "refused".into())]);
        h.opened(T, ConnId(2), "b:1", None);
        h.up(T, ConnId(2));
        h.closed(T, ConnId(2));
        assert_eq!(h.snapshot(T).len(), 1, "b left the map");
    }
}
