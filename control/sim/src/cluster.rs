//! The in-memory cluster: nodes, slot ownership, subscribe connections and
//! their subscriptions, and slot maps as `CLUSTER SHARDS` would give them.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;

use shardcore::{cluster_create_ranges, SLOT_COUNT};
use topology::{Health, Node as MapNode, NodeAddr, Role, Shard, SlotMap};

use control::Time;
use control::{Channel, ConnId};

/// Slot with no owner.
const NONE: u16 = u16::MAX;
/// Old maps kept for stale replies.
const HISTORY: usize = 8;

/// A simulated node.
#[derive(Clone, Debug)]
pub struct SimNode {
    /// Where it listens.
    pub addr: NodeAddr,
    /// Its id.
    pub id: String,
    /// False once killed or removed.
    pub alive: bool,
    /// The primary it replicates, `None` for a primary.
    pub replica_of: Option<usize>,
    /// Nothing reaches or leaves it before this time.
    pub hole_until: Time,
}

/// A subscribe connection as the server sees it.
#[derive(Clone, Debug, Default)]
pub struct SimConn {
    /// The node.
    pub node: usize,
    /// Its shard channels (application names).
    pub subs: BTreeSet<Channel>,
    /// The slot of the service channel the driver keeps on it.
    pub service: Option<u16>,
}

/// The cluster's state.
#[derive(Debug)]
pub struct Cluster {
    /// Every node ever started.
    pub nodes: Vec<SimNode>,
    /// Owner node of slot runs (`NONE`: nobody), from the initial split.
    base: Vec<(u16, u16, u16)>,
    /// Owners of single slots moved since (they override `base`).
    moved: BTreeMap<u16, u16>,
    /// Open subscribe connections.
    pub conns: BTreeMap<ConnId, SimConn>,
    version: u64,
    cache: Option<(u64, SlotMap)>,
    /// Maps as they were, oldest first.
    pub history: Vec<SlotMap>,
    /// Subscriptions are classic (`SUBSCRIBE`): slot moves and demotions
    /// drop none, and any node serves them.
    pub classic: bool,
    /// Connections whose service channel was dropped since last taken
    /// (each gets a push).
    pub services_dropped: Vec<ConnId>,
}

impl Cluster {
    /// `primaries` primaries over the `redis-cli` split, each with a replica.
    pub fn new(primaries: u32) -> Cluster {
        let mut c = Cluster {
            nodes: Vec::new(),
            base: Vec::new(),
            moved: BTreeMap::new(),
            conns: BTreeMap::new(),
            version: 0,
            cache: None,
            history: Vec::new(),
            classic: false,
            services_dropped: Vec::new(),
        };
        let ranges = cluster_create_ranges(primaries.clamp(1, 64) as u16);
        for range in ranges {
            let p = c.add_node(None);
            c.add_node(Some(p));
            c.base.push((*range.start(), *range.end(), p as u16));
        }
        c.snapshot();
        c
    }

    /// Starts a node (a replica of `of`, or a primary without slots).
    pub fn add_node(&mut self, of: Option<usize>) -> usize {
        let i = self.nodes.len();
        self.nodes.push(SimNode {
            addr: NodeAddr {
                host: alloc::format!("n{i}"),
                port: 7000,
            },
            id: alloc::format!("id{i:02}"),
            alive: true,
            replica_of: of,
            hole_until: Time::ZERO,
        });
        i
    }

    /// The node at `addr`.
    pub fn node_at(&self, addr: &NodeAddr) -> Option<usize> {
        self.nodes.iter().position(|n| &n.addr == addr)
    }

    /// The owner of `slot`.
    pub fn owner(&self, slot: u16) -> Option<usize> {
        let o = match self.moved.get(&slot) {
            Some(&o) => o,
            None => self
                .base
                .iter()
                .find(|r| r.0 <= slot && slot <= r.1)
                .map_or(NONE, |r| r.2),
        };
        (o != NONE).then_some(usize::from(o))
    }

    /// Whether `node` serves the shard channels of primary `owner`'s
    /// slots: it is `owner`, or a live replica of it (a replica accepts
    /// `SSUBSCRIBE` for its primary's slots and gets every `SPUBLISH`).
    pub fn serves(&self, node: usize, owner: usize) -> bool {
        node == owner
            || self
                .nodes
                .get(node)
                .is_some_and(|n| n.alive && n.replica_of == Some(owner))
    }

    /// Live primaries, by index.
    pub fn primaries(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].alive && self.nodes[i].replica_of.is_none())
            .collect()
    }

    /// Gives `slot` to `to` (`None`: nobody); returns the subscriptions dropped on the old
    /// owner's connections (each with its connection, for the push).
    pub fn move_slot(
        &mut self,
        slot: u16,
        to: Option<usize>,
        slot_of: impl Fn(&[u8]) -> u16,
    ) -> Vec<(ConnId, Channel)> {
        let old = self.owner(slot);
        if slot < SLOT_COUNT {
            self.moved.insert(slot, to.map_or(NONE, |t| t as u16));
        }
        self.changed();
        match old {
            Some(old) if Some(old) != to => {
                // The old owner and its replicas drop the slot's channels.
                let mut out = self.drop_slot(old, slot, &slot_of);
                let replicas: Vec<usize> = (0..self.nodes.len())
                    .filter(|&r| r != old && self.serves(r, old))
                    .collect();
                for r in replicas {
                    out.extend(self.drop_slot(r, slot, &slot_of));
                }
                out
            }
            _ => Vec::new(),
        }
    }

    /// Removes node `node`'s subscriptions in `slot` (the server lost it).
    pub fn drop_slot(
        &mut self,
        node: usize,
        slot: u16,
        slot_of: impl Fn(&[u8]) -> u16,
    ) -> Vec<(ConnId, Channel)> {
        let mut out = Vec::new();
        if self.classic {
            return out;
        }
        for (id, c) in self.conns.iter_mut().filter(|(_, c)| c.node == node) {
            if c.service == Some(slot) {
                c.service = None;
                self.services_dropped.push(*id);
            }
            let gone: Vec<Channel> = c
                .subs
                .iter()
                .filter(|n| slot_of(n) == slot)
                .cloned()
                .collect();
            for n in gone {
                c.subs.remove(&n);
                out.push((*id, n));
            }
        }
        out
    }

    /// Every slot of `from` goes to `to`.
    pub fn hand_over(&mut self, from: usize, to: usize) {
        let (from, to) = (from as u16, to as u16);
        for r in &mut self.base {
            if r.2 == from {
                r.2 = to;
            }
        }
        for o in self.moved.values_mut() {
            if *o == from {
                *o = to;
            }
        }
        self.changed();
    }

    /// Slots of partitions (from `slots`) owned by `node`.
    pub fn owned_of<'a>(&'a self, node: usize, slots: &'a [u16]) -> impl Iterator<Item = u16> + 'a {
        slots
            .iter()
            .copied()
            .filter(move |&s| self.owner(s) == Some(node))
    }

    /// Closes every connection to `node`; returns them with their channels.
    pub fn drop_node_conns(&mut self, node: usize) -> Vec<(ConnId, SimConn)> {
        let ids: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.node == node)
            .map(|(i, _)| *i)
            .collect();
        ids.into_iter()
            .filter_map(|i| Some((i, self.conns.remove(&i)?)))
            .collect()
    }

    pub(crate) fn changed(&mut self) {
        self.version += 1;
    }

    /// Records the current map in the history (after a change).
    pub fn snapshot(&mut self) {
        let m = self.map();
        if self.history.last() != Some(&m) {
            self.history.push(m);
            if self.history.len() > HISTORY {
                self.history.remove(0);
            }
        }
    }

    /// The current map, as `CLUSTER SHARDS` describes it.
    pub fn map(&mut self) -> SlotMap {
        if let Some((v, m)) = &self.cache {
            if *v == self.version {
                return m.clone();
            }
        }
        let m = self.build();
        self.cache = Some((self.version, m.clone()));
        m
    }

    fn map_node(&self, i: usize, role: Role) -> MapNode {
        let n = &self.nodes[i];
        MapNode {
            id: n.id.clone(),
            addr: Some(n.addr.clone()),
            hostname: None,
            tls_port: None,
            role,
            health: Health::Online,
            replication_offset: None,
        }
    }

    fn build(&self) -> SlotMap {
        let mut map = SlotMap::new();
        let mut index: BTreeMap<u16, usize> = BTreeMap::new();
        let runs = self.base.iter().copied();
        let singles = self.moved.iter().map(|(&s, &o)| (s, s, o));
        for (a, b, o) in runs.chain(singles) {
            let shard = match index.get(&o) {
                _ if o == NONE => None,
                Some(&s) => Some(s),
                None => {
                    let p = usize::from(o);
                    let replicas = (0..self.nodes.len())
                        .filter(|&r| self.nodes[r].alive && self.nodes[r].replica_of == Some(p))
                        .map(|r| self.map_node(r, Role::Replica))
                        .collect();
                    let s = map.push_shard(Shard {
                        primary: self.map_node(p, Role::Primary),
                        replicas,
                    });
                    if let Some(s) = s {
                        index.insert(o, s);
                    }
                    s
                }
            };
            map.assign(a..=b, shard);
        }
        map
    }
}
