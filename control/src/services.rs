//! Service channels: which slot's channel each node's subscribe connection
//! keeps, decided without I/O or a clock.
//!
//! In node-grouped mode every instance, also one that subscribes to
//! nothing, keeps one `SSUBSCRIBE` per node it subscribes on, on that
//! node's connection 0, to a channel in a slot the node serves. When the
//! node loses the slot (a failover demotes it, the slot migrates) the
//! server pushes `sunsubscribe` for it, and the driver rereads the map at
//! once: a publish-only instance learns of a failover without waiting for
//! the poll, even though a replica would keep accepting its `SPUBLISH`.
//! The channel's return is also how a route gate's marker comes back
//! ([`crate::Gates`]), so [`Services::slot_of`] names the new owner's.
//!
//! [`Services::handle_round`] takes the nodes (their connection 0, whether
//! it is up, whether its channel was dropped or refused since it was sent)
//! and says which channels to send, and whether to read the map again
//! soon. A dropped channel whose slot the map still shows on its node is
//! not sent again at once (a replica would accept it and never drop it):
//! the map is read again, and after [`STALE_ROUNDS`] maps that still show
//! it, it is sent where the map says.
//!
//! ```
//! use control::{ConnId, ServiceNode, Services};
//! # let map = {
//! #     let mut m = topology::SlotMap::new();
//! #     let node = topology::Node {
//! #         id: "a".into(),
//! #         addr: Some(topology::NodeAddr { host: "a".into(), port: 7000 }),
//! #         hostname: None, tls_port: None, role: topology::Role::Primary,
//! #         health: topology::Health::Online, replication_offset: None,
//! #     };
//! #     let i = m.push_shard(topology::Shard { primary: node, replicas: vec![] });
//! #     m.assign(100..=16383, i);
//! #     m
//! # };
//! let at = |n: &topology::Node| n.addr.as_ref().map(|a| a.host.clone());
//! let mut services = Services::new();
//! let node = ServiceNode { node: "a".to_string(), conn: Some(ConnId(1)), up: true, lost: false };
//! let round = services.handle_round(&map, at, &[node.clone()], true);
//! assert_eq!(round.send, vec![(ConnId(1), 100)]); // the node's first slot
//! assert_eq!(services.slot_of(&"a".to_string()), Some(100));
//! assert!(services.handle_round(&map, at, &[node], false).send.is_empty());
//! ```

use alloc::vec::Vec;

use topology::{Node, Shard, SlotMap};

use crate::command::ConnId;

/// Maps in a row that may show a dropped service channel's slot still on
/// its node before it is subscribed there again.
pub const STALE_ROUNDS: u32 = 5;

/// A node's subscribe connection 0, as the driver sees it this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceNode<N> {
    /// The node.
    pub node: N,
    /// Its connection 0 (`None`: it has none now).
    pub conn: Option<ConnId>,
    /// That connection is up.
    pub up: bool,
    /// The server dropped (`sunsubscribe`) or refused the channel sent on
    /// it since it was sent.
    pub lost: bool,
}

/// What a round decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServicesRound {
    /// Send the service `SSUBSCRIBE` of each slot on its connection (and
    /// clear its `lost`).
    pub send: Vec<(ConnId, u16)>,
    /// The map still shows a dropped channel's slot on its node: read it
    /// again soon.
    pub refresh: bool,
}

/// The service channel kept on one node.
#[derive(Clone, Debug)]
struct Service<N> {
    node: N,
    /// A slot the node served when it was sent.
    slot: u16,
    /// The connection it was sent on.
    conn: ConnId,
    /// Maps since it was dropped that still showed its slot on the node.
    stale: u32,
}

/// The service channel of every node.
#[derive(Clone, Debug)]
pub struct Services<N> {
    kept: Vec<Service<N>>,
}

impl<N: Clone + PartialEq> Default for Services<N> {
    fn default() -> Self {
        Services::new()
    }
}

/// Whether `node` is one of `shard`'s: its primary, or a replica (either
/// serves its channels, the replica when subscribing on replicas).
fn in_shard<N: PartialEq>(shard: &Shard, node: &N, at: &impl Fn(&Node) -> Option<N>) -> bool {
    let is = |n: &Node| at(n).as_ref() == Some(node);
    is(&shard.primary) || shard.replicas.iter().any(is)
}

impl<N: Clone + PartialEq> Services<N> {
    /// No channel kept.
    pub fn new() -> Services<N> {
        Services { kept: Vec::new() }
    }

    /// The slot of the channel kept on `node`.
    pub fn slot_of(&self, node: &N) -> Option<u16> {
        self.kept.iter().find(|s| s.node == *node).map(|s| s.slot)
    }

    /// One round over the `nodes` subscribed on (`map_changed`: a new map
    /// arrived since the last round, which counts a stale map for a
    /// dropped channel it still shows on its node). A map node is `node`
    /// when `at` says so.
    pub fn handle_round(
        &mut self,
        map: &SlotMap,
        at: impl Fn(&Node) -> Option<N>,
        nodes: &[ServiceNode<N>],
        map_changed: bool,
    ) -> ServicesRound {
        self.kept.retain(|s| nodes.iter().any(|n| n.node == s.node));
        let mut round = ServicesRound::default();
        for n in nodes.iter().filter(|n| n.up) {
            let Some(conn) = n.conn else {
                continue;
            };
            let i = self
                .kept
                .iter()
                .position(|s| s.node == n.node && s.conn == conn);
            let served = i
                .and_then(|i| self.kept.get(i))
                .map(|s| s.slot)
                .filter(|&slot| map.owner(slot).is_some_and(|sh| in_shard(sh, &n.node, &at)));
            let slot = match (served, n.lost, i) {
                (Some(_), false, _) => continue,
                (Some(slot), true, Some(i)) => {
                    let Some(s) = self.kept.get_mut(i) else {
                        continue;
                    };
                    s.stale += u32::from(map_changed);
                    if s.stale < STALE_ROUNDS {
                        round.refresh |= map_changed;
                        continue;
                    }
                    slot
                }
                _ => match first_slot_of(map, &n.node, &at) {
                    Some(slot) => slot,
                    None => continue, // serves nothing: its connections close
                },
            };
            let service = Service {
                node: n.node.clone(),
                slot,
                conn,
                stale: 0,
            };
            match self.kept.iter_mut().find(|s| s.node == n.node) {
                Some(s) => *s = service,
                None => self.kept.push(service),
            }
            round.send.push((conn, slot));
        }
        round
    }
}

/// The first slot `node` serves in `map` (as primary or replica).
fn first_slot_of<N: PartialEq>(
    map: &SlotMap,
    node: &N,
    at: &impl Fn(&Node) -> Option<N>,
) -> Option<u16> {
    map.ranges()
        .into_iter()
        .filter_map(|(r, owner)| Some((*r.start(), owner?)))
        .find(|&(_, i)| map.shards().get(i).is_some_and(|sh| in_shard(sh, node, at)))
        .map(|(slot, _)| slot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_maps::map;
    use alloc::string::String;
    use alloc::vec;

    fn at(n: &Node) -> Option<String> {
        n.addr.as_ref().map(|a| a.host.clone())
    }

    fn node(host: &str, conn: u64, up: bool, lost: bool) -> ServiceNode<String> {
        ServiceNode {
            node: host.into(),
            conn: Some(ConnId(conn)),
            up,
            lost,
        }
    }

    #[test]
    fn each_node_keeps_one_channel_in_its_first_slot() {
        let m = map(&[
            ("A", "a", 0, 99),
            ("B", "b", 100, 199),
            ("A2", "a", 200, 16383),
        ]);
        let mut s = Services::new();
        let nodes = [
            node("a", 1, true, false),
            node("b", 2, true, false),
            node("c", 3, false, false),
        ];
        let r = s.handle_round(&m, at, &nodes, true);
        assert_eq!(r.send, vec![(ConnId(1), 0), (ConnId(2), 100)]);
        assert!(!r.refresh);
        assert_eq!(s.slot_of(&"b".into()), Some(100));
        assert_eq!(s.slot_of(&"c".into()), None);
        // Kept while served; a node that goes away is forgotten.
        assert!(s.handle_round(&m, at, &nodes, false).send.is_empty());
        s.handle_round(&m, at, &nodes[..1], false);
        assert_eq!(s.slot_of(&"b".into()), None);
    }

    #[test]
    fn a_new_connection_or_a_moved_slot_sends_it_again() {
        let mut s = Services::new();
        let m = map(&[("A", "a", 0, 99), ("B", "b", 100, 16383)]);
        s.handle_round(&m, at, &[node("a", 1, true, false)], true);
        // Reconnected: another connection id.
        let r = s.handle_round(&m, at, &[node("a", 4, true, false)], false);
        assert_eq!(r.send, vec![(ConnId(4), 0)]);
        // Its slot moved away in the map: the node's first slot now.
        let m = map(&[
            ("B", "b", 0, 49),
            ("A", "a", 50, 99),
            ("B", "b", 100, 16383),
        ]);
        let r = s.handle_round(&m, at, &[node("a", 4, true, false)], true);
        assert_eq!(r.send, vec![(ConnId(4), 50)]);
        // It owns nothing: nothing to keep.
        let m = map(&[("B", "b", 0, 16383)]);
        assert!(s
            .handle_round(&m, at, &[node("a", 4, true, true)], true)
            .send
            .is_empty());
    }

    #[test]
    fn a_dropped_channel_the_map_still_shows_waits_for_stale_maps() {
        let mut s = Services::new();
        let m = map(&[("A", "a", 0, 16383)]);
        s.handle_round(&m, at, &[node("a", 1, true, false)], true);
        let lost = [node("a", 1, true, true)];
        // No new map: nothing counts.
        let r = s.handle_round(&m, at, &lost, false);
        assert_eq!(r, ServicesRound::default());
        for _ in 1..STALE_ROUNDS {
            let r = s.handle_round(&m, at, &lost, true);
            assert!(r.send.is_empty() && r.refresh);
        }
        let r = s.handle_round(&m, at, &lost, true);
        assert_eq!(r.send, vec![(ConnId(1), 0)]);
        assert!(!r.refresh);
    }

    #[test]
    fn a_replica_serves_its_shards_slots() {
        let mut shard = crate::test_maps::primary("A", "a");
        shard
            .replicas
            .push(crate::test_maps::primary("R", "r").primary);
        let mut m = topology::SlotMap::new();
        let i = m.push_shard(shard);
        m.assign(10..=16383, i);
        let mut s = Services::new();
        let r = s.handle_round(&m, at, &[node("r", 7, true, false)], true);
        assert_eq!(r.send, vec![(ConnId(7), 10)]);
    }
}
