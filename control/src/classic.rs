//! Classic mode ([`ConnLayout::Classic`]): every lane on one primary, lanes
//! chosen by a channel hash, as the engine's `Shared::lane_of` and
//! `rewire_classic` do.

use alloc::vec::Vec;

use topology::{Layout, NodeKey, SlotMap};

use crate::config::ConnLayout;
use crate::core::Core;

/// Salt of the lane choice (independent of the resubscribe workers).
const LANE_SALT: u64 = 0x2545_f491_4f6c_dd1d;

/// The lane of `channel` among `lanes` (at least 1) in classic mode: the
/// core's and the engine's one choice. With one lane (the default, one
/// subscribe connection per server) it is 0 without hashing: every
/// delivered message asks.
#[inline]
pub fn classic_lane(channel: &[u8], lanes: u32) -> u32 {
    if lanes <= 1 {
        return 0;
    }
    let h = (shardcore::channel_hash(channel) ^ LANE_SALT).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((u128::from(h) * u128::from(lanes.max(1))) >> 64) as u32
}

impl Core {
    /// The lane of `channel`: its partition, or in classic mode its hash lane.
    pub fn lane_of(&self, channel: &[u8]) -> u32 {
        match self.cfg.mode {
            ConnLayout::Classic => classic_lane(channel, self.cfg.multiplier),
            ConnLayout::Fixed => {
                let servers = self.cfg.seeds.len() as u32;
                let server = if servers <= 1 {
                    0
                } else {
                    shardcore::shard_of(channel, servers)
                };
                let mult = self.cfg.multiplier.max(1);
                server * mult + classic_lane(channel, mult)
            }
            ConnLayout::NodeGrouped | ConnLayout::PerPartition => {
                self.cfg.partitions.partition_of(channel)
            }
        }
    }

    /// The pattern lane of server `server` (`PSUBSCRIBE`s): in classic and
    /// fixed mode, one per server (classic: one, server 0), after the
    /// channel lanes, riding on one of the server's connections (lane `l`
    /// on connection `l % multiplier`); `None` in the sharded modes
    /// (sharded Pub/Sub has no patterns) or past the last server.
    pub fn pattern_lane(&self, server: usize) -> Option<u32> {
        pattern_lane_in(&self.cfg, server)
    }

    /// Whether lane `p` is a pattern lane ([`Core::pattern_lane`]).
    pub(crate) fn is_pattern_lane(&self, p: u32) -> bool {
        self.pattern_lane(0).is_some_and(|first| p >= first)
    }

    /// The slot of each lane: the partitions' slots, or (classic) slot 0
    /// for each of the `multiplier` lanes (classic commands have no slot),
    /// and in classic and fixed mode the pattern lanes after them
    /// ([`Core::pattern_lane`]).
    pub(crate) fn lane_slots(config: &crate::Config) -> Vec<u16> {
        let mult = config.multiplier.max(1) as usize;
        match config.mode {
            // The pattern lane last.
            ConnLayout::Classic => alloc::vec![0; mult + 1],
            // Server `i` "owns" slot `i` of the fixed map (`fixed_map`).
            ConnLayout::Fixed => {
                let servers = config.seeds.len();
                let channels = (0..servers * mult).map(|l| (l / mult) as u16);
                channels.chain((0..servers).map(|i| i as u16)).collect()
            }
            ConnLayout::NodeGrouped | ConnLayout::PerPartition => {
                config.partitions.slots().to_vec()
            }
        }
    }

    /// The layout `map` gives the lanes. Classic: every lane on one
    /// primary (one that owns a partition's slot), the current one while
    /// it still is one, else the first by key.
    pub(crate) fn layout_for(&self, map: &SlotMap) -> Layout {
        if self.cfg.mode != ConnLayout::Classic {
            // Replica mode: the nodes that serve each shard.
            if let Some(serving) = self.serving_map(map) {
                return Layout::for_slots(&serving, &self.slots);
            }
            // Fixed: `map` is `fixed_map`, whose slot `i` is server `i`'s.
            return Layout::for_slots(map, &self.slots);
        }
        let real = Layout::for_slots(map, self.cfg.partitions.slots());
        let primaries: Vec<&NodeKey> = real.nodes().iter().map(|n| &n.key).collect();
        let current = self.layout.nodes().first().map(|n| &n.key);
        let same = |k: &&&NodeKey| {
            current.is_some_and(|c| **k == c || (c.id.is_empty() && k.addr == c.addr))
        };
        let target = primaries
            .iter()
            .find(same)
            .or_else(|| primaries.first())
            .copied();
        let mut one = SlotMap::new();
        if let Some(t) = target {
            let shard = map
                .shards()
                .iter()
                .find(|s| s.primary.id == t.id && s.primary.addr.as_ref() == Some(&t.addr));
            if let Some(shard) = shard {
                let i = one.push_shard(shard.clone());
                one.assign(0..=shardcore::SLOT_COUNT - 1, i);
            }
        }
        Layout::for_slots(&one, &self.slots)
    }
}

/// The pattern lane of server `server` of `servers`, each with
/// `multiplier` channel lanes: the pattern lanes come after every channel
/// lane, one per server (the core's and the engine's one rule; `None`
/// past the last server).
pub fn pattern_lane(multiplier: u32, servers: usize, server: usize) -> Option<u32> {
    let channel_lanes = multiplier.max(1) as usize * servers;
    (server < servers).then(|| (channel_lanes + server) as u32)
}

/// [`pattern_lane`] in `cfg`'s layout: none in the sharded modes.
fn pattern_lane_in(cfg: &crate::Config, server: usize) -> Option<u32> {
    let servers = match cfg.mode {
        ConnLayout::Classic => 1,
        ConnLayout::Fixed => cfg.seeds.len(),
        ConnLayout::NodeGrouped | ConnLayout::PerPartition => return None,
    };
    pattern_lane(cfg.multiplier, servers, server)
}

/// The fixed placement's map: server `i` (node id `i`, zero-padded so
/// the ids sort in server order) owns slot `i`.
pub(crate) fn fixed_map(servers: &[topology::NodeAddr]) -> SlotMap {
    let mut map = SlotMap::new();
    for (i, addr) in servers.iter().enumerate() {
        let shard = topology::Shard {
            primary: topology::Node {
                id: alloc::format!("{i:05}"),
                addr: Some(addr.clone()),
                hostname: None,
                tls_port: None,
                role: topology::Role::Primary,
                health: topology::Health::Online,
                replication_offset: None,
            },
            replicas: Vec::new(),
        };
        if let Some(index) = map.push_shard(shard) {
            map.assign(i as u16..=i as u16, Some(index));
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_spread_and_stay_in_range() {
        let mut seen = [0u32; 4];
        for i in 0..4000 {
            let l = classic_lane(alloc::format!("ch{i}").as_bytes(), 4);
            seen[l as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        assert_eq!(classic_lane(b"x", 1), 0);
    }
}
