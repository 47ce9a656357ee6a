//! Following the cluster on the publish side: the control core's slot map
//! becomes publish routes (with gates where a slot's route moves), one
//! publish connection per primary; topology replies are parsed here; and
//! after every round the shared state (which connection carries each
//! lane, the core's counters) is brought in line with the core.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use resp::Value;
use topology::{NodeAddr, ParseOptions, SlotMap, TopologyCommand};

use crate::addr::ServerAddr;
use crate::conn::Role;
use control::publish::NodeId;

use crate::control_loop::driver::Driver;
use crate::control_loop::message::KeptMsg;
use crate::control_loop::settings::Mode;
use crate::error::Error;
use crate::metrics::add;

/// A node address as a socket address (its first, when a name has
/// several), looked up with `resolver`.
pub(crate) fn resolve(resolver: &dyn crate::Resolver, addr: &NodeAddr) -> Option<SocketAddr> {
    resolve_nth(resolver, addr, 0)?.tcp()
}

/// A node address's `n`-th address (wrapping), looked up with `resolver`;
/// a Unix socket (a server's, never a cluster node's) as it is.
pub(crate) fn resolve_nth(
    resolver: &dyn crate::Resolver,
    addr: &NodeAddr,
    n: usize,
) -> Option<ServerAddr> {
    if addr.port == 0 && addr.host.starts_with('/') {
        return Some(ServerAddr::unix(&addr.host));
    }
    let all = crate::engine::resolve::lookup(resolver, &addr.to_string()).ok()?;
    all.get(n % all.len().max(1)).copied().map(ServerAddr::from)
}

impl Driver {
    /// The publish (and topology command) engine of a node, opened on
    /// first use without waiting for it (the control thread never waits
    /// for a server), and its node id in the publish core: publishes
    /// routed to a primary that is down meet its connection's
    /// `NotConnected`, and are held or refused as the publish hold says.
    pub(crate) fn publish_engine(&mut self, addr: SocketAddr) -> Result<NodeId, Error> {
        if let Some((id, _)) = self.publ.get(&addr) {
            return Ok(*id);
        }
        let e = Arc::new(
            self.s
                .config
                .nodes
                .engine(addr.into(), Role::Command, 1)
                // Keeps trying after a failed first attempt (a detached
                // engine otherwise stays closed).
                .start_degraded(true)
                .kept_sink(crate::engine::kept::any_sink::<KeptMsg>(
                    Arc::downgrade(&self.s) as _,
                ))
                .build_detached()
                .inspect_err(|_| {
                    add(&self.s.counters.cluster.connect_errors, 1);
                })?,
        );
        self.next_node += 1;
        let id = NodeId(self.next_node);
        self.publ.insert(addr, (id, e.clone()));
        self.s.hold.with(|p| {
            p.engines.insert(id, e);
            p.core.handle_node(id, addr);
        });
        self.count_nodes();
        Ok(id)
    }

    /// The gauge of publish connections.
    pub(crate) fn count_nodes(&self) {
        let nodes = self.publ.len();
        let gauge = &self.s.counters.cluster.nodes;
        gauge.store(nodes, Ordering::Relaxed);
    }

    /// Brings everything outside the core in line with it, after a round:
    /// publish routes when its map changed, the service channels, which
    /// connection carries each lane, and its counters.
    pub(crate) fn sync(&mut self) {
        let s = self.s.clone();
        self.sync_routes();
        let map_changed = std::mem::take(&mut self.map_seen);
        // Only a new map, a connection up or a dropped service channel
        // change what the service channels need.
        let due = std::mem::take(&mut self.services_due) || map_changed;
        if self.mode() == Mode::Sharded && due {
            self.ensure_services(map_changed);
        }
        let lanes = s.lanes_len();
        let mut changed = false;
        {
            let current = s.lane_conn.read();
            for lane in 0..lanes {
                let want = self.lane_state(lane);
                let have = current.get(lane).cloned().flatten();
                let same = match (&want, &have) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    (None, None) => true,
                    _ => false,
                };
                if !same {
                    changed = true;
                    break;
                }
            }
        }
        if changed {
            let mut current = s.lane_conn.write();
            for lane in 0..lanes {
                if let Some(slot) = current.get_mut(lane) {
                    *slot = self.lane_state(lane);
                }
            }
        }
        let stats = self.core.stats();
        s.counters
            .cluster
            .unknown_owners
            .store(stats.unknown_slot_owners, Ordering::Relaxed);
        *s.core_stats.lock() = stats;
        if map_changed || changed {
            s.active.wake();
        }
    }

    /// Publish routes from the core's map when it changed since the last
    /// look (publish connections to new primaries first); notes for
    /// [`Driver::sync`] that a map arrived.
    pub(crate) fn sync_routes(&mut self) {
        let epoch = self.core.map_epoch();
        if epoch == self.routes_epoch {
            return;
        }
        self.routes_epoch = epoch;
        self.map_seen = true;
        if self.s.fixed() {
            // Fixed servers publish on their own engine.
            return;
        }
        let map = self.core.map().clone();
        self.ensure_publish_engines(&map);
        self.set_routes(&map);
        self.s.active.wake();
    }

    /// The connection that carries `lane` in the core's layout.
    fn lane_state(&self, lane: usize) -> Option<Arc<crate::control_loop::shared::ConnState>> {
        let conn = self.core.conn_of(lane as u32)?;
        self.subs.get(&conn).map(|c| c.state.clone())
    }

    /// The addresses the primaries of `map` resolve to (those with one).
    fn primary_addrs<'a>(&'a self, map: &'a SlotMap) -> impl Iterator<Item = SocketAddr> + 'a {
        map.shards()
            .iter()
            .filter_map(|sh| sh.primary.addr.as_ref())
            .filter_map(|a| resolve(&*self.s.resolver, a))
    }

    /// The mode.
    pub(crate) fn mode(&self) -> Mode {
        self.s.config.mode
    }

    /// Opens publish engines to every primary with an address.
    fn ensure_publish_engines(&mut self, map: &SlotMap) {
        let addrs: Vec<SocketAddr> = self.primary_addrs(map).collect();
        for a in addrs {
            if let Err(e) = self.publish_engine(a) {
                log::warn!("cluster: cannot connect to primary {a}: {e}");
            }
        }
    }

    /// Publish routes from the slot map: the core gates the watched slots
    /// whose route moved and retires the nodes no route uses.
    fn set_routes(&mut self, map: &SlotMap) {
        let (publ, r) = (&self.publ, &*self.s.resolver);
        let reach = |sh: &topology::Shard| {
            let addr = sh.primary.addr.as_ref().and_then(|a| resolve(r, a))?;
            publ.get(&addr).map(|(id, _)| *id)
        };
        // Worked out before the read table's write lock is taken (it
        // walks every slot).
        let plan = self.s.hold.with(|p| p.core.plan_map(map, reach));
        self.publish_input(true, None, |core, now| core.apply_map(now, plan));
    }
}

/// The slot map in a topology command's reply from `addr`. With `tls`,
/// nodes that list a `tls-port` as well as a `port` are reached on the
/// TLS one.
pub(crate) fn parse_map(
    command: TopologyCommand,
    reply: &Value,
    addr: SocketAddr,
    tls: bool,
) -> Result<SlotMap, control::FetchError> {
    let mut bytes = Vec::new();
    resp::encode_value(&mut bytes, reply);
    let host = addr.ip().to_string();
    let options = ParseOptions {
        asked_host: Some(&host),
        prefer_hostname: false,
        prefer_tls_port: tls,
    };
    let map = topology::parse_topology_bytes(command, &bytes, &options).map_err(|e| {
        log::warn!("cluster: cannot parse {} from {addr}: {e}", command.name());
        control::FetchError::BadReply
    })?;
    if map.shards().is_empty() {
        return Err(control::FetchError::BadReply);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control_loop::shared::Routes;
    use crate::engine::resolve::System;

    #[test]
    fn resolves_announced_addresses() {
        let v4 = NodeAddr {
            host: "127.0.0.1".into(),
            port: 7000,
        };
        assert_eq!(
            resolve(&System, &v4),
            Some("127.0.0.1:7000".parse().unwrap())
        );
        let v6 = NodeAddr {
            host: "::1".into(),
            port: 7001,
        };
        assert_eq!(resolve(&System, &v6), Some("[::1]:7001".parse().unwrap()));
        let bad = NodeAddr {
            host: "not a host name".into(),
            port: 1,
        };
        assert_eq!(resolve(&System, &bad), None);
    }

    #[test]
    fn empty_routes_know_no_owner() {
        let r = Routes::empty();
        assert_eq!(r.owner.len(), 16384);
        assert!(r.engine_of(0).is_none());
        assert!(r.engine_of(16383).is_none());
        assert!(r.engine_of(u16::MAX).is_none());
    }
}
