//! The service channel: in node-grouped mode every instance, also one
//! that subscribes to nothing, keeps one `SSUBSCRIBE` per primary, on its
//! subscribe connection, to a channel in a slot that primary owns. When the
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

use topology::SlotMap;

use crate::cluster::control::Control;
use crate::cluster::shared::Trigger;
use crate::cluster::topo::resolve;
use crate::conn::{ReplyKind, SubscribeKind};
use crate::error::Error;

/// Every service channel's name starts so (then `{key}` of its slot).
pub(crate) const SERVICE_PREFIX: &[u8] = b"__shardsub:route:{";

/// Rebuilds in a row that may see a dropped service channel's slot still
/// on its node before it is subscribed there again.
const STALE_ROUNDS: u32 = 5;

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

/// The primary that owns `slot` in `map`.
fn owner_addr(map: &SlotMap, slot: u16) -> Option<SocketAddr> {
    map.owner(slot)?.primary.addr.as_ref().and_then(resolve)
}

impl Control {
    /// Whether the node dropped our service channel (not yet restored).
    pub(crate) fn service_lost(&self, addr: SocketAddr) -> bool {
        self.groups
            .get(&(addr, None))
            .is_some_and(|g| g.service_lost.load(Ordering::Acquire))
    }

    /// Keeps one service channel per node group in a slot the node owns.
    /// Returns true while one was dropped and the map does not show why.
    pub(crate) fn ensure_services(&mut self, map: &SlotMap) -> bool {
        let mut degraded = false;
        let keys: Vec<_> = self
            .groups
            .keys()
            .filter(|k| k.1.is_none())
            .copied()
            .collect();
        for key in keys {
            let Some(g) = self.groups.get_mut(&key) else {
                continue;
            };
            let lost = g.service_lost.load(Ordering::Acquire);
            let owned = g
                .service
                .filter(|&slot| owner_addr(map, slot) == Some(key.0));
            let slot = match (owned, lost) {
                (Some(_), false) => continue,
                (Some(slot), true) => {
                    g.service_stale += 1;
                    if g.service_stale < STALE_ROUNDS {
                        degraded = true;
                        continue;
                    }
                    slot
                }
                (None, _) => {
                    let first = map
                        .ranges()
                        .into_iter()
                        .filter_map(|(r, owner)| Some((*r.start(), owner?)))
                        .find(|&(_, i)| {
                            map.shards()
                                .get(i)
                                .and_then(|sh| sh.primary.addr.as_ref())
                                .and_then(resolve)
                                == Some(key.0)
                        });
                    match first {
                        Some((slot, _)) => slot,
                        None => continue, // owns nothing: the group closes
                    }
                }
            };
            g.service = Some(slot);
            g.service_stale = 0;
            g.service_lost.store(false, Ordering::Release);
            self.send_service(key);
        }
        degraded
    }

    /// Sends the service `SSUBSCRIBE` of group `key` on its connection 0
    /// (if that is not up, its reconnect sends it).
    pub(crate) fn send_service(&mut self, key: (SocketAddr, Option<u32>)) {
        let Some(g) = self.groups.get(&key) else {
            return;
        };
        let Some(slot) = g.service else { return };
        let engine = g.engine.clone();
        let lost = g.service_lost.clone();
        let name = service_name(slot);
        let s = self.s.clone();
        let r = engine.submit_to_then(
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
                    lost.store(true, Ordering::Release);
                    s.request_rebuild(Trigger::SubscribeError);
                }
            },
        );
        if let Err(e) = r {
            log::debug!("service channel not sent ({e}); the reconnect will send it");
        }
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
