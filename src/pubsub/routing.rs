//! Which subscribe connection carries which channels, and with which
//! command: the seam a cluster mode plugs into.
//!
//! Connections are numbered `server * per_server + index` ("slots" below),
//! matching the subscribe engine's servers and their connections. Channels
//! are grouped into lanes (the registry's unit); each lane lives on one
//! connection at a time.

use crate::conn::SubscribeKind;

/// Maps channels to lanes and lanes to subscribe connections.
pub(crate) trait Routing: Send + Sync + 'static {
    /// `SUBSCRIBE` ([`SubscribeKind::Channel`]) or `SSUBSCRIBE`
    /// ([`SubscribeKind::Shard`]).
    fn kind(&self) -> SubscribeKind;
    /// Number of lanes.
    fn lanes(&self) -> usize;
    /// The lane of a channel.
    fn lane_of(&self, channel: &[u8]) -> usize;
    /// The connection slot that carries a lane now.
    fn conn_of_lane(&self, lane: usize) -> usize;
    /// The lanes a connection slot carries now.
    fn lanes_of_conn(&self, conn: usize) -> Vec<usize>;
}

/// Client-side sharding: `shard_of(channel, servers)` picks the server, a
/// salted hash of the channel one of its `per_server` connections. One lane
/// per connection.
#[derive(Debug)]
pub(crate) struct ShardRouting {
    pub(crate) servers: usize,
    pub(crate) per_server: usize,
}

/// Salt so the connection choice is independent of the shard and worker.
const CONN_SALT: u64 = 0x2545_f491_4f6c_dd1d;

impl ShardRouting {
    /// The server of a channel.
    pub(crate) fn server_of(&self, channel: &[u8]) -> usize {
        if self.servers <= 1 {
            0
        } else {
            shardcore::shard_of(channel, self.servers as u32) as usize
        }
    }
}

impl Routing for ShardRouting {
    fn kind(&self) -> SubscribeKind {
        SubscribeKind::Channel
    }

    fn lanes(&self) -> usize {
        self.servers * self.per_server
    }

    fn lane_of(&self, channel: &[u8]) -> usize {
        let server = self.server_of(channel);
        let index = if self.per_server <= 1 {
            0
        } else {
            let h = shardcore::channel_hash(channel) ^ CONN_SALT;
            let h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            ((u128::from(h) * self.per_server as u128) >> 64) as usize
        };
        server * self.per_server + index
    }

    fn conn_of_lane(&self, lane: usize) -> usize {
        lane
    }

    fn lanes_of_conn(&self, conn: usize) -> Vec<usize> {
        vec![conn]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_follow_shard_of_and_spread_over_connections() {
        let r = ShardRouting {
            servers: 3,
            per_server: 4,
        };
        let mut counts = vec![0usize; 12];
        for i in 0..12_000u32 {
            let ch = format!("ch:{i}");
            let lane = r.lane_of(ch.as_bytes());
            assert_eq!(
                lane / 4,
                shardcore::shard_of(ch.as_bytes(), 3) as usize,
                "{ch}"
            );
            counts[lane] += 1;
        }
        assert!(
            counts.iter().all(|&c| (700..1300).contains(&c)),
            "{counts:?}"
        );
        let one = ShardRouting {
            servers: 1,
            per_server: 1,
        };
        assert_eq!(one.lane_of(b"x"), 0);
    }
}
