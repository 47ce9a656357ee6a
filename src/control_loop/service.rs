//! Carrying out the service channels ([`control::Services`] decide which
//! slot's channel each node's connection 0 keeps, and when a dropped one
//! waits for the map): the `SSUBSCRIBE` goes out here, and a drop or a
//! refusal (seen by the connection's dispatch, or by the reply) makes the
//! core reread the map at once, asking the node that knows first. Its
//! name is also where a route gate's marker comes back (see `gate`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use control::{ConnId, ServiceNode};

use crate::conn::{ReplyKind, SubscribeKind};
use crate::control_loop::driver::Driver;
use crate::control_loop::topo::resolve;
use crate::error::Error;

/// Every service channel's name starts so (then `{key}` of its slot).
pub(crate) const SERVICE_PREFIX: &[u8] = b"__shardsub:route:{";

/// The service channel of `slot`.
pub(crate) fn service_name(slot: u16) -> Vec<u8> {
    let key = topology::probe_key_for_slot(slot);
    let mut name = Vec::with_capacity(SERVICE_PREFIX.len() + key.len() + 1);
    name.extend_from_slice(SERVICE_PREFIX);
    name.extend_from_slice(&key);
    name.push(b'}');
    name
}

/// Whether a channel name the server sent is a service channel.
pub(crate) fn is_service(wire: &[u8]) -> bool {
    wire.starts_with(SERVICE_PREFIX)
}

impl Driver {
    /// Keeps one service channel per node, on its connection 0, as the
    /// publish core's [`control::Services`] decide (`map_changed`: a new
    /// map arrived).
    pub(crate) fn ensure_services(&mut self, map_changed: bool) {
        let nodes: Vec<ServiceNode<SocketAddr>> = self
            .core
            .layout()
            .nodes()
            .iter()
            .filter_map(|n| {
                let node = resolve(&*self.s.resolver, &n.key.addr)?;
                let conn = self.core.node_conn(&n.key, 0);
                let sub = conn.and_then(|c| self.subs.get(&c));
                Some(ServiceNode {
                    node,
                    conn,
                    up: sub.is_some() && conn.is_some_and(|c| self.core.is_conn_up(c)),
                    lost: sub.is_some_and(|c| c.service_lost.load(Ordering::Acquire)),
                })
            })
            .collect();
        let r = self.s.resolver.clone();
        let at = move |n: &topology::Node| n.addr.as_ref().and_then(|a| resolve(&*r, a));
        let map = self.core.map().clone();
        // The core sends what it decided (`SendService`, and a refresh
        // soon when the map still shows a dropped channel's slot there).
        self.publish_input(false, None, |core, _| {
            core.handle_services(&map, at, &nodes, map_changed)
        });
    }

    /// Sends the service `SSUBSCRIBE` of `slot` on `conn`.
    pub(crate) fn send_service(&mut self, conn: ConnId, slot: u16) {
        let Some(c) = self.subs.get(&conn) else {
            return;
        };
        c.service_lost.store(false, Ordering::Release);
        let lost = c.service_lost.clone();
        let name = service_name(slot);
        let s = self.s.clone();
        let r = c.engine.submit_to_then(
            0,
            0,
            |buf| resp::encode_command_with(buf, b"SSUBSCRIBE", &[&name]),
            ReplyKind::Subscribe {
                kind: SubscribeKind::Shard,
                confirmations: 1,
            },
            move |r| {
                if let Err(Error::Reply { addr, message }) = r {
                    log::debug!("service channel refused by {addr}: {message}; refreshing");
                    if !lost.swap(true, Ordering::AcqRel) {
                        s.post(|inbox| inbox.services_lost.push(conn));
                    }
                }
            },
        );
        if let Err(e) = r {
            log::debug!("service channel not sent ({e}); the reconnect will send it");
        }
    }

    /// The server dropped (or refused) the service channel on `conn`: the
    /// node's slots moved; the core rereads the map now.
    pub(crate) fn on_service_lost(&mut self, conn: ConnId) {
        if !self.subs.contains_key(&conn) {
            return;
        }
        self.services_due = true;
        self.input(|core, now| core.handle_slot_lost(now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_hash_to_their_slot() {
        for slot in [0u16, 1, 5461, 10923, 16383] {
            let name = service_name(slot);
            assert!(is_service(&name));
            assert_eq!(shardcore::key_slot(&name), slot);
        }
        assert!(!is_service(b"{abc}.news"));
    }
}
