//! The cluster's side of publishes: what a node answers, what its shard
//! delivers (through the bus when a replica took it), service channels,
//! and publish connections that drop.

use alloc::format;
use alloc::vec::Vec;
use core::time::Duration;

use control::publish::NodeId;
use control::Time;
use topology::ClusterError;

use super::{Answer, BusItem, PubEv, Req};
use crate::drive::{Ev, Input, Sim};

impl Sim {
    /// Publish connections to `node` go down (`back`: up again then, if
    /// it still lives); what is on their wire is failed once noticed.
    pub(crate) fn links_down(&mut self, node: usize, back: Option<Time>) {
        let ids: Vec<NodeId> = (self.publ.links.iter())
            .filter(|(_, l)| l.node == Some(node) && l.up)
            .map(|(i, _)| *i)
            .collect();
        for id in ids {
            let Some(l) = self.publ.links.get_mut(&id) else {
                continue;
            };
            l.up = false;
            let pending = core::mem::take(&mut l.pending);
            for r in pending {
                let Some(f) = self.publ.reqs.get_mut(&r) else {
                    continue;
                };
                f.failed = true;
                let answer = match f.req {
                    Req::Publish(..) => Answer::Lost,
                    Req::Barrier(_) => Answer::Barrier(false),
                    Req::Marker(..) => Answer::MarkerRefused,
                };
                let detect = Duration::from_micros(self.publ.rng.range(10, 500));
                self.push(self.now + detect, Ev::Pub(PubEv::Answer(r, answer, true)));
            }
            if let Some(t) = back {
                self.push(t, Ev::Pub(PubEv::LinkUp(id)));
            }
        }
    }

    /// One publish-side event.
    pub(crate) fn pub_event(&mut self, ev: PubEv) {
        self.publ.step += 1;
        match ev {
            PubEv::Publish(seq) => self.publish(seq),
            PubEv::Arrive(r) => self.arrive(r),
            PubEv::Answer(r, answer, forced) => self.answer(r, answer, forced),
            PubEv::Bus(from, item) => {
                if !self.cluster.nodes[from].alive {
                    return; // died with it
                }
                match item {
                    BusItem::Deliver(slot, seq) => self.deliver(slot, seq),
                    BusItem::Marker(token, slot) => self.marker_taken(token, slot),
                }
            }
            PubEv::MarkerBack(token) => self.publ.core.handle_marker(self.now, token),
            PubEv::Converged => self.converged(),
            PubEv::LinkUp(id) => {
                let alive = |n: usize| self.cluster.nodes[n].alive;
                if let Some(l) = self.publ.links.get_mut(&id) {
                    l.up = l.node.is_some_and(alive);
                }
            }
            PubEv::Service(conn, slot) => {
                let Some(node) = self.cluster.conns.get(&conn).map(|c| c.node) else {
                    return; // closed: the reconnect sends it again
                };
                let owner = self.cluster.owner(slot);
                if owner.is_some_and(|o| self.cluster.serves(node, o)) {
                    if let Some(c) = self.cluster.conns.get_mut(&conn) {
                        c.service = Some(slot);
                    }
                } else {
                    self.send_core(Some(node), Some(conn), Input::ServiceLost(conn));
                }
            }
        }
    }

    /// Subscribers of `slot` get publish `seq`.
    pub(super) fn deliver(&mut self, slot: u16, seq: u64) {
        self.publ.delivered.entry(slot).or_default().push(seq);
    }

    /// A marker for the service channel of `slot` was taken on its shard:
    /// it comes back if our service channel is subscribed there.
    pub(super) fn marker_taken(&mut self, token: u64, slot: u16) {
        let Some(owner) = self.cluster.owner(slot) else {
            return;
        };
        let on = (self.cluster.conns.values())
            .find(|c| c.service == Some(slot) && self.cluster.serves(c.node, owner))
            .map(|c| c.node);
        if let Some(node) = on {
            let at = self.now + self.pdelay();
            let hole = self.cluster.nodes[node].hole_until;
            self.push(at.max(hole), Ev::Pub(PubEv::MarkerBack(token)));
        }
    }

    /// Node `node` takes `item` for the shard of primary `owner`: the
    /// owner delivers it at once, a replica forwards it on the cluster
    /// bus; either way after what the node forwarded before (its bus to
    /// the shard is one ordered link).
    pub(super) fn shard_takes(&mut self, node: usize, owner: usize, item: BusItem) {
        let last = self.publ.bus.get(&node).copied().unwrap_or(Time::ZERO);
        if node == owner && last <= self.now {
            match item {
                BusItem::Deliver(slot, seq) => self.deliver(slot, seq),
                BusItem::Marker(token, slot) => self.marker_taken(token, slot),
            }
            return;
        }
        let d = if node == owner {
            Duration::ZERO
        } else {
            self.pdelay()
        };
        let at = last.max(self.now + d);
        self.publ.bus.insert(node, at);
        self.push(at, Ev::Pub(PubEv::Bus(node, item)));
    }

    /// A request reaches its node.
    pub(super) fn arrive(&mut self, r: u64) {
        let Some(f) = self.publ.reqs.get(&r) else {
            return;
        };
        if f.failed {
            return;
        }
        let (id, req) = (f.link, f.req.clone());
        let Some(node) = self.publ.links.get(&id).and_then(|l| l.node) else {
            return;
        };
        if !self.cluster.nodes[node].alive {
            self.pfail(&format!("request {r} reached node {node}, dead"));
        }
        let answer = match req {
            Req::Barrier(_) => Answer::Barrier(true),
            Req::Marker(token, slot) => match self.cluster.owner(slot) {
                Some(o) if self.cluster.serves(node, o) => {
                    self.shard_takes(node, o, BusItem::Marker(token, slot));
                    Answer::MarkerTaken
                }
                _ => Answer::MarkerRefused,
            },
            Req::Publish(m, asking) => {
                let slot = m.slot;
                let owner = self.cluster.owner(slot);
                let moving = (self.migrating.get(&slot))
                    .filter(|m| m.1 > self.now)
                    .map(|m| m.0);
                let addr = |o: usize| Some(self.cluster.nodes[o].addr.clone());
                match (owner, moving) {
                    (Some(o), Some(from)) if from == node => Answer::Routing(ClusterError::Ask {
                        slot,
                        addr: addr(o),
                    }),
                    (Some(o), Some(_)) if o == node && !asking => {
                        Answer::Routing(ClusterError::TryAgain)
                    }
                    (Some(o), _) if self.cluster.serves(node, o) => {
                        if !self.publ.taken.insert(m.seq) {
                            self.pfail(&format!("{} taken twice", m.seq));
                        }
                        self.publ.totals.taken += 1;
                        self.shard_takes(node, o, BusItem::Deliver(slot, m.seq));
                        Answer::Taken
                    }
                    (Some(o), _) => Answer::Routing(ClusterError::Moved {
                        slot,
                        addr: addr(o),
                    }),
                    (None, _) => Answer::Routing(ClusterError::ClusterDown),
                }
            }
        };
        let d = self.pdelay();
        let hole = self.cluster.nodes[node].hole_until;
        let Some(l) = self.publ.links.get_mut(&id) else {
            return;
        };
        let at = (self.now + d).max(l.to_core).max(hole);
        l.to_core = at;
        self.push(at, Ev::Pub(PubEv::Answer(r, answer, false)));
    }
}
