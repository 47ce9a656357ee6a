//! The service channel: in node-grouped mode every instance, also one
//! that subscribes to nothing, keeps one `SSUBSCRIBE` per primary (per
//! serving replica when subscribing on replicas), on its subscribe
//! connection, to a channel in a slot that node's shard owns. When the
//! node loses that slot (a failover demotes it, or the slot migrates) the
//! server pushes `sunsubscribe` for it, which triggers a rebuild at once:
//! a publish-only instance learns of a failover without waiting for the
//! poll, even though a replica would keep accepting its `SPUBLISH`.
//!
//! The rebuild asks that node first (it knows it lost the slot). While the
//! map still shows the node owning the slot, the channel is not subscribed
//! again (a replica would accept it and never drop it): the rebuild is
//! retried while degraded, and after a few rounds it is subscribed where
//! the map says.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use control::ConnId;
use topology::SlotMap;

use crate::cluster::driver::Driver;
use crate::cluster::topo::resolve;
use crate::conn::{ReplyKind, SubscribeKind};
use crate::error::Error;

/// Every service channel's name starts so (then `{key}` of its slot).
pub(crate) const SERVICE_PREFIX: &[u8] = b"__shardsub:route:{";

/// Maps in a row that may show a dropped service channel's slot still on
/// its node before it is subscribed there again.
const STALE_ROUNDS: u32 = 5;

/// The service channel kept on one node.
#[derive(Debug)]
pub(crate) struct Service {
    /// Its slot (one the node owned when it was sent).
    pub(crate) slot: u16,
    /// The connection it was sent on (the node's connection 0).
    pub(crate) conn: ConnId,
    /// Maps since it was dropped that still showed its slot on the node.
    pub(crate) stale: u32,
}

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

/// Whether `addr` is the node of `shard` that can serve its channels: its
/// primary, or one of its replicas (subscribing on replicas).
fn in_shard(shard: &topology::Shard, addr: SocketAddr) -> bool {
    let at = |n: &topology::Node| n.addr.as_ref().and_then(resolve) == Some(addr);
    at(&shard.primary) || shard.replicas.iter().any(at)
}

/// Whether the shard that owns `slot` in `map` has `addr` as its primary
/// or a replica (either serves the slot's channels).
fn serves(map: &SlotMap, slot: u16, addr: SocketAddr) -> bool {
    map.owner(slot).is_some_and(|sh| in_shard(sh, addr))
}

/// The first slot `addr` serves in `map` (as primary or replica).
fn first_slot_of(map: &SlotMap, addr: SocketAddr) -> Option<u16> {
    map.ranges()
        .into_iter()
        .filter_map(|(r, owner)| Some((*r.start(), owner?)))
        .find(|&(_, i)| map.shards().get(i).is_some_and(|sh| in_shard(sh, addr)))
        .map(|(slot, _)| slot)
}

impl Driver {
    /// Keeps one service channel per node, on its connection 0, in a slot
    /// the node owns (`map_changed`: a new map arrived, which counts a
    /// stale round for a dropped one whose slot it still shows there).
    pub(crate) fn ensure_services(&mut self, map_changed: bool) {
        let nodes: Vec<(topology::NodeKey, SocketAddr)> = self
            .core
            .layout()
            .nodes()
            .iter()
            .filter_map(|n| Some((n.key.clone(), resolve(&n.key.addr)?)))
            .collect();
        self.services
            .retain(|a, _| nodes.iter().any(|(_, addr)| addr == a));
        let mut stale = false;
        for (key, addr) in nodes {
            let Some(conn) = self.core.node_conn(&key, 0) else {
                continue;
            };
            if !self.core.is_conn_up(conn) {
                continue;
            }
            let Some(lost) = self
                .subs
                .get(&conn)
                .map(|c| c.service_lost.load(Ordering::Acquire))
            else {
                continue;
            };
            let map = self.core.map();
            let current = self.services.get_mut(&addr).filter(|sv| sv.conn == conn);
            let owned = current
                .as_ref()
                .map(|sv| sv.slot)
                .filter(|&slot| serves(map, slot, addr));
            let slot = match (owned, lost, current) {
                (Some(_), false, _) => continue,
                (Some(slot), true, Some(sv)) => {
                    sv.stale += u32::from(map_changed);
                    if sv.stale < STALE_ROUNDS {
                        stale = true;
                        continue;
                    }
                    slot
                }
                _ => match first_slot_of(map, addr) {
                    Some(slot) => slot,
                    None => continue, // owns nothing: its connections close
                },
            };
            self.services.insert(
                addr,
                Service {
                    slot,
                    conn,
                    stale: 0,
                },
            );
            self.send_service(conn, slot);
        }
        if stale && map_changed {
            // The node said its slot left; the map we read does not show
            // it yet: read again soon (one request per map).
            self.input(|core, now| core.handle_degraded(now));
        }
    }

    /// Sends the service `SSUBSCRIBE` of `slot` on `conn`.
    fn send_service(&mut self, conn: ConnId, slot: u16) {
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
                    log::info!("service channel refused by {addr}: {message}; refreshing");
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
