//! Subscribing on replicas ([`Config::replicas`](crate::Config::replicas)):
//! which node serves each shard's subscriptions.
//!
//! A replica receives every `SPUBLISH` of its shard (the primary propagates
//! it) and accepts `SSUBSCRIBE` for the shard's slots without `READONLY`;
//! for a slot of another shard it answers `-MOVED`. So the layout the core
//! rewires by is the slot map with each shard's primary replaced by its
//! *serving node*: the replica chosen here, or the primary while the shard
//! has no usable replica. Everything else (connections per node, rewire
//! plans, gaps) follows from that layout unchanged: a serving replica that
//! fails, is promoted, or is re-pointed to another shard changes the
//! layout at the next map, and the partitions it served move, with a gap.
//!
//! What the servers do (Redis 7.0.15, Valkey 9.1, observed): a replica
//! re-pointed with `CLUSTER REPLICATE` keeps its shard subscribers on Redis
//! without any push (they silently receive nothing more) and pushes
//! `sunsubscribe` on Valkey; a promoted replica keeps them on Redis and
//! pushes `sunsubscribe` on Valkey; a demoted primary pushes `sunsubscribe`
//! on both. The map (a poll, or a refresh some other trigger starts) is
//! what catches the silent case. A shard with wanted channels never moves
//! to another of its replicas (see `Core::choose`: a lagging replica could
//! deliver a message twice); when its replica cannot serve, its primary
//! does. A promoted replica can be missing from a map taken during the
//! promotion (Valkey): a serving replica missing from the map is held for
//! a few maps (`Core::note_absent`) before its shard moves.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use topology::{Health, Node, NodeKey, Shard, SlotMap};

use crate::core::Core;
use crate::time::Time;

impl Core {
    /// `map` with each shard's primary replaced by the node that serves
    /// its subscriptions, or `None` when subscribing on replicas is off.
    pub(crate) fn serving_map(&self, map: &SlotMap) -> Option<SlotMap> {
        let seed = self.cfg.replicas?;
        let current = self.current_servers(map);
        let mut out = SlotMap::new();
        let mut index = Vec::with_capacity(map.shards().len());
        let held = self.held_servers(map, &current);
        let left = self.left_shards(map, &current);
        for (i, shard) in map.shards().iter().enumerate() {
            let now = current.get(&i).map(|(k, live)| (k, *live));
            let chosen = match held.get(&i) {
                Some(node) => Some(node.clone()),
                // Its wanted channels lived on a node that left it: its
                // primary takes them (a replica could lag that node).
                None if now.is_none() && left.contains(&i) => None,
                None => self.choose(shard, now, seed).cloned(),
            };
            let mut serving = shard.clone();
            if let Some(node) = chosen {
                serving.primary = node;
            }
            index.push(out.push_shard(serving));
        }
        for (range, owner) in map.ranges() {
            out.assign(range, owner.and_then(|i| index.get(i).copied().flatten()));
        }
        Some(out)
    }

    /// The replica that serves `shard` (`None`: its primary serves), given
    /// the node of the shard that serves it now and whether the
    /// application wants channels of it there.
    ///
    /// A shard with wanted channels never moves to another replica of its
    /// own: the same message reaches the primary first and each replica a
    /// replication lag later (seconds, for a replica resyncing after a
    /// failover), so leaving a node for a replica that is behind it could
    /// deliver messages twice, even with the old subscriptions closed
    /// first. The primary is never behind. So: the current replica serves
    /// while it stays usable; when it cannot (failed, its connection
    /// failed, promoted), the primary serves, and keeps the shard while it
    /// has wanted channels; so does a shard whose node left it (a replica
    /// re-pointed to another shard, or missing from the maps past the
    /// hold of `Core::note_absent`: `serving_map` sees to that). A shard
    /// with no wanted channels goes to the usable replica that ranks
    /// highest for `seed`, or the primary.
    fn choose<'a>(
        &self,
        shard: &'a Shard,
        current: Option<(&NodeKey, bool)>,
        seed: u64,
    ) -> Option<&'a Node> {
        let usable = shard.replicas.iter().filter(|r| self.usable(r));
        if let Some((k, busy)) = current {
            let same = |n: &Node| n.id == k.id && n.addr.as_ref() == Some(&k.addr);
            if let Some(r) = usable.clone().find(|r| same(r)) {
                return Some(r);
            }
            if busy {
                return None;
            }
        }
        usable.max_by_key(|r| (rank(seed, r), r.id.as_bytes()))
    }

    /// Whether replica `r` can serve: an address, not failed, and its
    /// connection has not failed lately. A `loading` replica can: it
    /// accepts `SSUBSCRIBE` and delivers what it buffered once loaded
    /// (Redis 7.0 also reports a replica that never received a write as
    /// `loading`).
    fn usable(&self, r: &Node) -> bool {
        let Some(addr) = &r.addr else {
            return false;
        };
        if r.health == Health::Failed {
            return false;
        }
        let key = NodeKey {
            id: r.id.clone(),
            addr: addr.clone(),
        };
        self.avoid.get(&key).is_none_or(|&until| until <= self.now)
    }

    /// For each shard index of `map`, the node of that shard (primary or
    /// replica) that serves one of its partitions in the current layout,
    /// and whether the application wants channels of those partitions
    /// there. Partitions whose slot kept its primary count
    /// first: when two shards merge, the node that served the slots that
    /// stayed keeps them (the other's may be stale, see
    /// `stale_on_replicas`).
    fn current_servers(&self, map: &SlotMap) -> BTreeMap<usize, (NodeKey, bool)> {
        let mut out: BTreeMap<usize, (NodeKey, bool)> = BTreeMap::new();
        let kept = |slot: u16| {
            let old = self.map.owner(slot).map(|s| &s.primary.id);
            old.is_some() && old == map.owner(slot).map(|s| &s.primary.id)
        };
        for first in [true, false] {
            for (p, &slot) in (0u32..).zip(&self.slots) {
                if first && !kept(slot) {
                    continue;
                }
                let Some(i) = map.owner_index(slot) else {
                    continue;
                };
                let Some(key) = self.layout.node_of(p) else {
                    continue;
                };
                let live = self
                    .parts
                    .get(p as usize)
                    .is_some_and(|part| !part.channels.is_empty());
                if let Some((k, l)) = out.get_mut(&i) {
                    *l |= live && k == key;
                    continue;
                }
                let member = map.shards().get(i).is_some_and(|s| {
                    let at = |n: &Node| n.id == key.id && n.addr.as_ref() == Some(&key.addr);
                    at(&s.primary) || s.replicas.iter().any(at)
                });
                if member {
                    out.insert(i, (key.clone(), live));
                }
            }
        }
        out
    }

    /// Counts, before `map` is applied, the maps in a row that leave out
    /// a node serving subscriptions as a replica: not as a primary, not as
    /// a replica of any shard. A replica being promoted can be missing
    /// from one node's view for a moment (Valkey, `CLUSTER FAILOVER`:
    /// seen here in a map taken 40 ms after the promotion's
    /// `sunsubscribe`), and moving its shard to another replica then
    /// would leave the node it is about to become primary of (and a
    /// replica behind it could deliver messages twice). Such a node is
    /// held (see `Core::held_servers`) for
    /// [`Config::stale_rounds`](crate::Config::stale_rounds) maps, fetched
    /// at the degraded pace; a node still missing after that has left.
    pub(crate) fn note_absent(&mut self, map: &SlotMap) {
        if self.cfg.replicas.is_none() {
            return;
        }
        let listed = |map: &SlotMap, k: &NodeKey| {
            map.shards().iter().any(|s| {
                core::iter::once(&s.primary)
                    .chain(&s.replicas)
                    .any(|n| n.id == k.id && n.addr.as_ref() == Some(&k.addr))
            })
        };
        let was_replica = |k: &NodeKey| {
            self.map.shards().iter().any(|s| {
                s.replicas
                    .iter()
                    .any(|n| n.id == k.id && n.addr.as_ref() == Some(&k.addr))
            })
        };
        let missing: Vec<NodeKey> = self
            .layout
            .nodes()
            .iter()
            .map(|n| &n.key)
            .filter(|k| !k.id.is_empty() && !listed(map, k))
            .filter(|k| self.absent.contains_key(*k) || was_replica(k))
            .cloned()
            .collect();
        self.absent.retain(|k, _| missing.contains(k));
        for k in missing {
            *self.absent.entry(k).or_insert(0) += 1;
        }
    }

    /// Whether `node`, missing from the latest maps, still serves its
    /// shard: for at most `stale_rounds` maps, and not once its connection
    /// failed.
    pub(crate) fn held(&self, node: &NodeKey) -> bool {
        let fresh = self
            .absent
            .get(node)
            .is_some_and(|&n| n <= self.cfg.stale_rounds);
        fresh && self.avoid.get(node).is_none_or(|&until| until <= self.now)
    }

    /// The shard indices of `map` that no node of their own serves now
    /// (`current`), though wanted channels of their partitions are served
    /// (or being subscribed) on some node: one that left the shard (a
    /// replica re-pointed elsewhere or gone from the map), or a node of
    /// another shard whose slots moved to this one.
    fn left_shards(
        &self,
        map: &SlotMap,
        current: &BTreeMap<usize, (NodeKey, bool)>,
    ) -> alloc::collections::BTreeSet<usize> {
        (0u32..)
            .zip(&self.slots)
            .filter(|&(p, _)| self.layout.node_of(p).is_some())
            .filter(|&(p, _)| {
                self.parts
                    .get(p as usize)
                    .is_some_and(|part| !part.channels.is_empty())
            })
            .filter_map(|(_, &slot)| map.owner_index(slot))
            .filter(|i| !current.contains_key(i))
            .collect()
    }

    /// For each shard index of `map` that no node of its own serves now
    /// (`current`), a held node (see [`Core::note_absent`]) that serves
    /// wanted channels of its partitions: it keeps serving them.
    fn held_servers(
        &self,
        map: &SlotMap,
        current: &BTreeMap<usize, (NodeKey, bool)>,
    ) -> BTreeMap<usize, Node> {
        let mut out = BTreeMap::new();
        for (p, &slot) in (0u32..).zip(&self.slots) {
            let Some(i) = map.owner_index(slot) else {
                continue;
            };
            if current.contains_key(&i) || out.contains_key(&i) {
                continue;
            }
            let Some(key) = self.layout.node_of(p) else {
                continue;
            };
            let wanted = self
                .parts
                .get(p as usize)
                .is_some_and(|part| !part.channels.is_empty());
            if wanted && self.held(key) {
                out.insert(
                    i,
                    Node {
                        id: key.id.clone(),
                        addr: Some(key.addr.clone()),
                        hostname: None,
                        tls_port: None,
                        role: topology::Role::Replica,
                        health: Health::Unknown,
                        replication_offset: None,
                    },
                );
            }
        }
        out
    }

    /// Replica mode: the partitions whose slot changed primary since the
    /// last map while the node serving them stays. It may have followed
    /// another primary and its slot migrated there since, or been promoted
    /// after it moved: two maps cannot tell those (Redis re-points a
    /// replica without a word, and its old subscriptions come back to life
    /// once it serves their slot again, after a silent gap) from a plain
    /// promotion or a failover of its primary. So its connection is
    /// restarted ([`Core::restart_conns_of`]): a gap for each channel,
    /// spare after a plain failover, never a silent loss (and the shard
    /// stays on that node, or its primary: see `Core::choose`).
    pub(crate) fn stale_on_replicas(&self, map: &SlotMap, new: &topology::Layout) -> Vec<u32> {
        if self.cfg.replicas.is_none() {
            return Vec::new();
        }
        (0u32..)
            .zip(&self.slots)
            .filter(|&(p, &slot)| {
                let (Some(old), Some(now)) = (
                    self.map.owner(slot).map(|s| &s.primary),
                    map.owner(slot).map(|s| &s.primary),
                ) else {
                    return false;
                };
                let serving = self.layout.node_of(p);
                !old.id.is_empty()
                    && old.id != now.id
                    && serving.is_some()
                    && serving == new.node_of(p)
            })
            .map(|(p, _)| p)
            .collect()
    }

    /// Restarts the connections that carry `parts` (up ones): the server
    /// drops every subscription on them, their channels get a gap and are
    /// subscribed again after the reconnect (on that node, or its
    /// shard's primary). A repeated
    /// `SSUBSCRIBE` on the same connection would race the server's pushes
    /// about the old subscription.
    pub(crate) fn restart_conns_of(&mut self, parts: &[u32], now: Time) {
        let conns: alloc::collections::BTreeSet<crate::ConnId> = parts
            .iter()
            .filter_map(|&p| self.conn_of(p))
            .filter(|&c| self.is_up(c))
            .collect();
        for conn in conns {
            self.emit(crate::Command::Close { conn });
            self.conn_down(conn, now, false);
        }
    }

    /// A connection to `node` failed: in replica mode it is not chosen
    /// again as a serving replica for a poll interval (its shard moves to
    /// another replica, or the primary, at the next map; stickiness keeps
    /// it there after).
    pub(crate) fn avoid_replica(&mut self, node: &NodeKey) {
        if self.cfg.replicas.is_none() {
            return;
        }
        let now = self.now;
        self.avoid.retain(|_, until| *until > now);
        self.avoid
            .insert(node.clone(), now + self.cfg.poll_interval);
    }
}

/// The rendezvous weight of replica `r` for `seed` (FNV-1a over the seed
/// and the node id, then a final mix): each instance ranks a shard's
/// replicas in its own order, and a replica joining or leaving moves only
/// the instances that rank it first.
fn rank(seed: u64, r: &Node) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed.to_le_bytes().iter().chain(r.id.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // A final mix: FNV's low bits alone mix poorly.
    crate::Rng::mix(h)
}
