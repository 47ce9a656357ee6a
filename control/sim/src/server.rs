//! The cluster's side of each request: opens, subscribes (with `MOVED`,
//! `ASK`, `TRYAGAIN`, `CLUSTERDOWN` and ACL refusals), fetches, probes.

use alloc::collections::BTreeSet;

use topology::ClusterError;

use crate::cluster::SimConn;
use crate::drive::{Input, ServerMsg, Sim};
use control::{Channel, ConnId, FetchError, ProbeReply, SubscribeReply};

impl Sim {
    /// The server side of one request.
    pub(crate) fn server(&mut self, m: ServerMsg) {
        match m {
            ServerMsg::Open(conn, addr) => {
                let n = self
                    .cluster
                    .node_at(&addr)
                    .filter(|&n| self.cluster.nodes[n].alive);
                match n {
                    Some(n) => {
                        let c = SimConn {
                            node: n,
                            subs: BTreeSet::new(),
                            service: None,
                        };
                        self.cluster.conns.insert(conn, c);
                        self.send_core(Some(n), Some(conn), Input::Up(conn));
                    }
                    None => self.send_core(None, Some(conn), Input::Down(conn)),
                }
            }
            ServerMsg::Close(conn) => {
                if let Some(c) = self.cluster.conns.remove(&conn) {
                    for ch in &c.subs {
                        self.broke(conn, ch);
                    }
                }
            }
            ServerMsg::Ping(conn) => {
                if let Some(node) = self.cluster.conns.get(&conn).map(|c| c.node) {
                    self.send_core(Some(node), Some(conn), Input::Pong(conn));
                }
            }
            ServerMsg::Sub(conn, slot, channels) => {
                let Some(node) = self.cluster.conns.get(&conn).map(|c| c.node) else {
                    return; // dropped: the core hears of it
                };
                let moving = self
                    .migrating
                    .get(&slot)
                    .filter(|m| m.1 > self.now)
                    .map(|m| m.0);
                let owner = match self.cluster.classic {
                    true => Some(node), // any node serves SUBSCRIBE
                    false => self.cluster.owner(slot),
                };
                let moving = moving.filter(|_| !self.cluster.classic);
                let reply = match (owner, moving) {
                    (Some(o), Some(from)) if from == node => {
                        SubscribeReply::Routing(ClusterError::Ask {
                            slot,
                            addr: Some(self.cluster.nodes[o].addr.clone()),
                        })
                    }
                    (Some(o), Some(_)) if o == node => {
                        SubscribeReply::Routing(ClusterError::TryAgain)
                    }
                    _ => match owner {
                        // A replica serves its primary's slots, as real
                        // ones do, whether or not the core subscribes on
                        // replicas (a stale map can send it a subscribe).
                        Some(o) if o == node || self.cluster.serves(node, o) => {
                            if channels.iter().any(|c| self.acl.contains(c)) {
                                SubscribeReply::Refused(
                                    "NOPERM no permissions to access a channel".into(),
                                )
                            } else {
                                if let Some(c) = self.cluster.conns.get_mut(&conn) {
                                    c.subs.extend(channels);
                                }
                                SubscribeReply::Ok
                            }
                        }
                        Some(o) => SubscribeReply::Routing(ClusterError::Moved {
                            slot,
                            addr: Some(self.cluster.nodes[o].addr.clone()),
                        }),
                        None => SubscribeReply::Routing(ClusterError::ClusterDown),
                    },
                };
                if matches!(reply, SubscribeReply::Routing(_)) {
                    self.redirects += 1;
                }
                self.send_core(Some(node), Some(conn), Input::Reply(conn, reply));
            }
            ServerMsg::Unsub(conn, channels) => {
                let Some(c) = self.cluster.conns.get_mut(&conn) else {
                    return;
                };
                let node = c.node;
                for ch in &channels {
                    c.subs.remove(ch);
                }
                // One `sunsubscribe` push answers each channel, subscribed
                // or not; the driver passes on only those wanted again (the
                // core ignores the others), and in classic mode none (it
                // reports no `unsubscribe` push to the core).
                if !self.cluster.classic {
                    for ch in channels {
                        self.send_core(Some(node), Some(conn), Input::Push(conn, ch));
                    }
                }
            }
            ServerMsg::Version(id, addr) => {
                let n = self
                    .cluster
                    .node_at(&addr)
                    .filter(|&n| self.cluster.nodes[n].alive);
                // Redis 7 (`CLUSTER SLOTS`) or Valkey 9 (`CLUSTER
                // SHARDS`): the map reads the same either way here.
                let redis: &'static [u8] = b"# Server\r\nredis_version:7.0.15\r\n";
                let valkey: &'static [u8] =
                    b"# Server\r\nredis_version:7.2.4\r\nvalkey_version:9.1.0\r\n";
                let reply = match n {
                    Some(_) if self.rng.chance(50) => Ok(redis),
                    Some(_) => Ok(valkey),
                    None => Err(FetchError::Unreachable),
                };
                self.send_core(n, None, Input::Version(id, reply));
            }
            ServerMsg::Fetch(id, addr) => {
                let n = self
                    .cluster
                    .node_at(&addr)
                    .filter(|&n| self.cluster.nodes[n].alive);
                let reply = match n {
                    Some(_) if self.now < self.stale_until && self.rng.chance(50) => {
                        let h = &self.cluster.history;
                        let i = self.rng.below(h.len() as u64) as usize;
                        h.get(i).cloned().ok_or(FetchError::BadReply)
                    }
                    Some(_) => Ok(self.cluster.map()),
                    None => Err(FetchError::Unreachable),
                };
                self.send_core(n, None, Input::Topology(id, reply));
            }
            ServerMsg::Probe(id, slot, addr) => {
                let n = self
                    .cluster
                    .node_at(&addr)
                    .filter(|&n| self.cluster.nodes[n].alive);
                let reply = match (n, self.cluster.owner(slot)) {
                    (Some(n), Some(o)) if n == o => ProbeReply::Served,
                    (Some(_), Some(o)) => ProbeReply::Moved(self.cluster.nodes[o].addr.clone()),
                    _ => ProbeReply::Failed,
                };
                self.send_core(n, None, Input::Probe(id, reply));
            }
        }
    }

    /// The server dropped `channel` from `conn`: a loss when it is wanted
    /// and `conn` carries its latest subscribe.
    pub(crate) fn broke(&mut self, conn: ConnId, channel: &Channel) {
        if self.want.contains(channel) && self.last_sub.get(channel) == Some(&conn) {
            self.check.broke(channel);
        }
    }
}
