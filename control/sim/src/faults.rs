//! Applying a schedule's faults to the cluster.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use crate::drive::{Ev, Input, Sim};
use crate::schedule::Fault;
use control::{Channel, ConnId};

impl Sim {
    fn slot_of_partition(&self, pick: u32) -> u16 {
        let slots = self.parts.slots();
        slots
            .get(pick as usize % slots.len().max(1))
            .copied()
            .unwrap_or(0)
    }

    /// Subscriptions the server dropped with a push for each.
    fn pushes(&mut self, drops: Vec<(ConnId, Channel)>) {
        for (conn, ch) in drops {
            self.broke(conn, &ch);
            let node = self.cluster.conns.get(&conn).map(|c| c.node);
            self.send_core(node, Some(conn), Input::Push(conn, ch));
        }
    }

    /// Connections of `node` closed by the server (the node died or left).
    fn drop_conns(&mut self, node: usize) {
        for (id, c) in self.cluster.drop_node_conns(node) {
            for ch in &c.subs {
                self.broke(id, ch);
            }
            self.send_core(None, Some(id), Input::Down(id));
        }
    }

    /// Moves `slot` to `to` (none: nobody serves it); a real move has a
    /// migration window of up to 150 ms (`ASK` / `TRYAGAIN`) half the time.
    fn move_slot(&mut self, slot: u16, to: Option<usize>) {
        let parts = self.parts.clone();
        let from = self.cluster.owner(slot);
        let drops = self
            .cluster
            .move_slot(slot, to, |c| shardcore::key_slot(&parts.redis_channel(c)));
        self.pushes(drops);
        if let (Some(from), Some(to)) = (from, to) {
            if from != to && self.rng.chance(50) {
                let until = self.now + core::time::Duration::from_millis(self.rng.below(150));
                self.migrating.insert(slot, (from, until));
            }
        }
    }

    /// Promotes a live replica of primary `x`; false when it has none.
    fn promote(&mut self, x: usize) -> Option<usize> {
        let nodes = &mut self.cluster.nodes;
        let r = (0..nodes.len()).find(|&r| nodes[r].alive && nodes[r].replica_of == Some(x))?;
        for n in nodes.iter_mut() {
            if n.replica_of == Some(x) {
                n.replica_of = Some(r);
            }
        }
        nodes[r].replica_of = None;
        nodes[x].replica_of = Some(r);
        self.cluster.hand_over(x, r);
        Some(r)
    }

    /// A live replica (pick `node`) follows another primary (pick `to`):
    /// its subscriptions of slots it no longer serves end, with a push on
    /// Valkey; on Redis they stay but deliver nothing (a loss the core
    /// must find in the map).
    /// Each replica moves once a run: one that moved back to its old
    /// primary between two map reads would be invisible on Redis (its old
    /// subscriptions come back to life), which no client can detect.
    fn replicate(&mut self, node: u32, to: u32) {
        let replicas: Vec<usize> = (0..self.cluster.nodes.len())
            .filter(|&i| self.cluster.nodes[i].alive && self.cluster.nodes[i].replica_of.is_some())
            .filter(|i| !self.repointed.contains(i))
            .collect();
        let Some(&r) = replicas.get(node as usize % replicas.len().max(1)) else {
            return;
        };
        let old = self.cluster.nodes[r].replica_of;
        let prims: Vec<usize> = self
            .cluster
            .primaries()
            .into_iter()
            .filter(|&p| Some(p) != old)
            .collect();
        let Some(&m) = prims.get(to as usize % prims.len().max(1)) else {
            return;
        };
        self.cluster.nodes[r].replica_of = Some(m);
        self.repointed.insert(r);
        self.cluster.changed();
        let parts = self.parts.clone();
        let gone: Vec<(ConnId, Channel)> = self
            .cluster
            .conns
            .iter()
            .filter(|(_, c)| c.node == r)
            .flat_map(|(id, c)| c.subs.iter().map(move |ch| (*id, ch.clone())))
            .filter(|(_, ch)| {
                let slot = shardcore::key_slot(&parts.redis_channel(ch));
                self.cluster.owner(slot) != Some(m)
            })
            .collect();
        if self.valkey {
            for (id, ch) in &gone {
                if let Some(c) = self.cluster.conns.get_mut(id) {
                    c.subs.remove(ch);
                }
            }
            self.pushes(gone);
        } else {
            // Redis: the subscriptions stay on the server and deliver
            // nothing while it serves other slots (again, if it serves
            // theirs later): a loss, owed a gap, that only the map shows.
            for (conn, ch) in gone {
                self.broke(conn, &ch);
            }
        }
    }

    /// Live nodes, by index.
    fn alive(&self) -> Vec<usize> {
        (0..self.cluster.nodes.len())
            .filter(|&i| self.cluster.nodes[i].alive)
            .collect()
    }

    /// Whether `node` may die: the last live seed stays (with every seed
    /// gone, no client could find the cluster).
    fn may_die(&self, node: usize) -> bool {
        let live = (0..self.seeds).filter(|&i| self.cluster.nodes[i].alive);
        node >= self.seeds || live.filter(|&i| i != node).count() > 0
    }

    /// The application toggles `count` channels from pick `first` on: the
    /// wanted ones are unwanted and the others wanted, each group in one call.
    fn toggle(&mut self, first: u32, count: usize) {
        let n = self.names.len().max(1);
        let picked: BTreeSet<Channel> = (0..count.min(n))
            .filter_map(|k| self.names.get((first as usize + k * 7) % n).cloned())
            .collect();
        let (drop, add): (Vec<Channel>, Vec<Channel>) =
            picked.into_iter().partition(|c| self.want.contains(c));
        for c in drop.iter().chain(&add) {
            self.check.unwanted(c);
        }
        for c in &drop {
            self.want.remove(c);
        }
        self.want.extend(add.iter().cloned());
        self.core
            .handle_unwant(self.now, drop.iter().map(|c| c.as_ref()));
        self.core
            .handle_want(self.now, add.iter().map(|c| c.as_ref()));
    }

    /// Node `x` drops every shard channel, with a push for each.
    fn storm(&mut self, x: usize) {
        let all: Vec<u16> = self.parts.slots().to_vec();
        let parts = self.parts.clone();
        for s in all {
            let d = self
                .cluster
                .drop_slot(x, s, |c| shardcore::key_slot(&parts.redis_channel(c)));
            self.pushes(d);
        }
    }

    /// Messages on `conn` (while the server holds it open), again in 5 s
    /// `left` more times.
    pub(crate) fn chatter(&mut self, conn: ConnId, left: u32) {
        let Some(node) = self.cluster.conns.get(&conn).map(|c| c.node) else {
            return;
        };
        self.send_core(Some(node), Some(conn), Input::Activity(conn));
        if left > 0 {
            let at = self.now + core::time::Duration::from_secs(5);
            self.push(at, Ev::Chatter(conn, left - 1));
        }
    }

    /// Applies one fault at the current time.
    pub(crate) fn fault(&mut self, f: Fault) {
        let prims = self.cluster.primaries();
        let pick = |v: &[usize], i: u32| v.get(i as usize % v.len().max(1)).copied();
        match f {
            Fault::Migrate { partition, to } => {
                if let Some(to) = pick(&prims, to) {
                    self.move_slot(self.slot_of_partition(partition), Some(to));
                }
            }
            Fault::Failover { node } => {
                let Some(x) = pick(&prims, node) else { return };
                if let Some(r) = self.promote(x) {
                    // The demoted primary drops every shard channel (and
                    // on Valkey the promoted replica too).
                    self.storm(x);
                    if self.valkey {
                        self.storm(r);
                    }
                }
            }
            Fault::Storm { node } => {
                if let Some(x) = pick(&prims, node) {
                    self.storm(x);
                }
            }
            Fault::Kill { node } => {
                let alive = self.alive();
                let Some(k) = pick(&alive, node).filter(|&k| self.may_die(k)) else {
                    return;
                };
                let promoted = match self.cluster.nodes[k].replica_of {
                    None => self.promote(k),
                    Some(_) => None,
                };
                if let Some(r) = promoted.filter(|_| self.valkey) {
                    self.storm(r);
                }
                if self.cluster.nodes[k].replica_of.is_none() && promoted.is_none() {
                    let Some(&other) = prims.iter().find(|&&p| p != k) else {
                        return; // the last primary stays
                    };
                    self.cluster.hand_over(k, other);
                    for n in &mut self.cluster.nodes {
                        if n.replica_of == Some(k) {
                            n.replica_of = Some(other);
                        }
                    }
                }
                self.cluster.nodes[k].alive = false;
                self.drop_conns(k);
                self.links_down(k, None);
            }
            Fault::AddNode { partition } => {
                let n = self.cluster.add_node(None);
                self.move_slot(self.slot_of_partition(partition), Some(n));
            }
            Fault::RemoveNode { node } => {
                if prims.len() < 2 {
                    return;
                }
                let Some(x) = pick(&prims, node).filter(|&x| self.may_die(x)) else {
                    return;
                };
                let others: Vec<usize> = prims.iter().copied().filter(|&p| p != x).collect();
                let owned: Vec<u16> = self.cluster.owned_of(x, self.parts.slots()).collect();
                for (i, s) in owned.into_iter().enumerate() {
                    self.move_slot(s, Some(others[i % others.len()]));
                }
                self.cluster.hand_over(x, others[0]);
                for n in &mut self.cluster.nodes {
                    if n.replica_of == Some(x) {
                        n.replica_of = Some(others[0]);
                    }
                }
                self.cluster.nodes[x].alive = false;
                self.drop_conns(x);
                self.links_down(x, None);
            }
            Fault::Bounce { partition } => {
                let slot = self.slot_of_partition(partition);
                if let Some(o) = self.cluster.owner(slot) {
                    let parts = self.parts.clone();
                    let d = self
                        .cluster
                        .drop_slot(o, slot, |c| shardcore::key_slot(&parts.redis_channel(c)));
                    self.pushes(d);
                }
            }
            Fault::DropConn { conn } => {
                let ids: Vec<ConnId> = self.cluster.conns.keys().copied().collect();
                let Some(&id) = ids.get(conn as usize % ids.len().max(1)) else {
                    return;
                };
                if let Some(c) = self.cluster.conns.remove(&id) {
                    for ch in &c.subs {
                        self.broke(id, ch);
                    }
                    self.send_core(Some(c.node), Some(id), Input::Down(id));
                }
            }
            Fault::BlackHole { node, ms } => {
                let alive = self.alive();
                if let Some(n) = pick(&alive, node) {
                    let until = self.now + core::time::Duration::from_millis(u64::from(ms));
                    let h = &mut self.cluster.nodes[n].hole_until;
                    *h = (*h).max(until);
                }
            }
            Fault::Stale { ms } => {
                let until = self.now + core::time::Duration::from_millis(u64::from(ms));
                self.stale_until = self.stale_until.max(until);
            }
            Fault::Orphan { partition, ms } => {
                self.move_slot(self.slot_of_partition(partition), None);
                let to = self.rng.next_u64() as u32;
                let at = self.now + core::time::Duration::from_millis(u64::from(ms));
                self.push(at, Ev::Fault(Fault::Migrate { partition, to }));
            }
            Fault::Chatter { conn } => {
                let ids: Vec<ConnId> = self.cluster.conns.keys().copied().collect();
                if let Some(&id) = ids.get(conn as usize % ids.len().max(1)) {
                    self.chatter(id, 8);
                }
            }
            Fault::Replicate { node, to } => self.replicate(node, to),
            Fault::DropLink { node, ms } => {
                let alive = self.alive();
                if let Some(n) = pick(&alive, node) {
                    let back = self.now + core::time::Duration::from_millis(u64::from(ms));
                    self.links_down(n, Some(back));
                }
            }
            Fault::Toggle { channel } => self.toggle(channel, 1),
            Fault::Burst { channel } => self.toggle(channel, 12),
        }
        let holes = self.cluster.nodes.iter().map(|n| n.hole_until).max();
        let links = match f {
            Fault::DropLink { ms, .. } => self.now + core::time::Duration::from_millis(ms.into()),
            _ => self.now,
        };
        let q = &mut self.publ.quiet;
        *q = (*q)
            .max(self.stale_until)
            .max(holes.unwrap_or(self.now))
            .max(links);
        for conn in core::mem::take(&mut self.cluster.services_dropped) {
            let node = self.cluster.conns.get(&conn).map(|c| c.node);
            self.send_core(node, Some(conn), Input::ServiceLost(conn));
        }
        self.cluster.snapshot();
    }
}
