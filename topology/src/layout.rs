//! Partition → node: which primary each app-level partition lives on.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use shardcore::Partitions;

use crate::slotmap::{Health, NodeAddr, SlotMap};

/// A primary as the engine knows it: id and address together. A node that
/// keeps its id but moves to another address, or an address taken over by a
/// node with a new id, is a different node (its connection must be redone).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeKey {
    /// The node id (empty for a node known only from a `MOVED` redirect).
    pub id: alloc::string::String,
    /// Where to connect.
    pub addr: NodeAddr,
}

/// A primary that owns at least one partition, and which ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutNode {
    /// The node.
    pub key: NodeKey,
    /// Its health, as last reported ([`Health::Unknown`] from `CLUSTER SLOTS`).
    pub health: Health,
    /// The partitions it owns, ascending.
    pub partitions: Vec<u32>,
}

/// Why a partition has no node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum UnresolvedReason {
    /// No primary serves the partition's slot in this map. A probe `GET` of
    /// [`probe_key_for_slot`](crate::probe_key_for_slot) provokes a `MOVED`
    /// that names the owner, if the cluster has one.
    NoOwner,
    /// The owner announced no usable endpoint (`?`, or an empty IP without an
    /// asked host).
    UnknownEndpoint,
}

/// A partition that maps to no reachable node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Unresolved {
    /// The partition.
    pub partition: u32,
    /// Its slot.
    pub slot: u16,
    /// Why it has no node.
    pub reason: UnresolvedReason,
}

/// Where every partition lives: partition → node, node → partitions, and
/// the partitions with no node. Nodes that own no partition are not listed
/// (no subscribe connection is needed to them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    slots: Vec<u16>,
    owner: Vec<Option<u32>>,
    nodes: Vec<LayoutNode>,
    unresolved: Vec<Unresolved>,
}

impl Layout {
    /// The layout of `partitions` over the slot map.
    ///
    /// ```
    /// # let map = topology::SlotMap::new();
    /// let parts = shardcore::Partitions::new(128).unwrap();
    /// let layout = topology::Layout::compute(&map, &parts);
    /// assert_eq!(layout.partition_count(), 128);
    /// assert_eq!(layout.unresolved().len(), 128); // an empty map owns nothing
    /// ```
    pub fn compute(map: &SlotMap, partitions: &Partitions) -> Layout {
        Layout::for_slots(map, partitions.slots())
    }

    /// The layout of one "partition" per entry of `slots` (entry `i` is
    /// partition `i`, in slot `slots[i]`), for callers without
    /// [`Partitions`], such as one subscription group per slot.
    pub fn for_slots(map: &SlotMap, slots: &[u16]) -> Layout {
        // Group by shard index first (no per-partition allocation), then by
        // node key (two shards could share one, in a hand-built map).
        let shards = map.shards();
        let mut per_shard: Vec<Vec<u32>> = alloc::vec![Vec::new(); shards.len()];
        let mut unresolved = Vec::new();
        for (p, &slot) in (0u32..).zip(slots) {
            let owner = map
                .owner_index(slot)
                .and_then(|i| Some((i, shards.get(i)?)));
            let reason = match owner {
                None => UnresolvedReason::NoOwner,
                Some((_, shard)) if shard.primary.addr.is_none() => {
                    UnresolvedReason::UnknownEndpoint
                }
                Some((i, _)) => {
                    if let Some(list) = per_shard.get_mut(i) {
                        list.push(p);
                    }
                    continue;
                }
            };
            unresolved.push(Unresolved {
                partition: p,
                slot,
                reason,
            });
        }
        let mut by_node: BTreeMap<NodeKey, (Health, Vec<u32>)> = BTreeMap::new();
        for (shard, partitions) in shards.iter().zip(per_shard) {
            let Some(addr) = &shard.primary.addr else {
                continue;
            };
            if partitions.is_empty() {
                continue;
            }
            let key = NodeKey {
                id: shard.primary.id.clone(),
                addr: addr.clone(),
            };
            let entry = by_node
                .entry(key)
                .or_insert_with(|| (shard.primary.health, Vec::new()));
            if entry.1.is_empty() {
                entry.1 = partitions;
            } else {
                entry.1.extend(partitions);
                entry.1.sort_unstable();
            }
        }
        Layout::assemble(slots.to_vec(), by_node, unresolved)
    }

    /// A layout of `by_node` (each node's health and partitions,
    /// ascending), indexing each partition's node.
    fn assemble(
        slots: Vec<u16>,
        by_node: BTreeMap<NodeKey, (Health, Vec<u32>)>,
        unresolved: Vec<Unresolved>,
    ) -> Layout {
        let nodes: Vec<LayoutNode> = by_node
            .into_iter()
            .map(|(key, (health, partitions))| LayoutNode {
                key,
                health,
                partitions,
            })
            .collect();
        let mut owner = alloc::vec![None; slots.len()];
        for (i, n) in (0u32..).zip(&nodes) {
            for &p in &n.partitions {
                if let Some(o) = owner.get_mut(p as usize) {
                    *o = Some(i);
                }
            }
        }
        Layout {
            slots,
            owner,
            nodes,
            unresolved,
        }
    }

    /// This layout with node `from` called `to` (the same partitions on
    /// it; merged with `to`'s when both are in it). Nothing changes when
    /// `from` owns nothing here. This is how a node first known only by
    /// address (from a `MOVED`) takes the id a later map gives it, without
    /// recomputing which node serves what.
    ///
    /// ```
    /// use topology::{Layout, NodeAddr, NodeKey, SlotMap};
    /// let addr = NodeAddr { host: "10.0.0.1".into(), port: 7000 };
    /// let mut map = SlotMap::new();
    /// map.apply_moved(100, addr.clone());
    /// let layout = Layout::for_slots(&map, &[100, 200]);
    /// let bare = NodeKey { id: String::new(), addr: addr.clone() };
    /// let named = NodeKey { id: "abc".into(), addr };
    /// let renamed = layout.renamed(&bare, &named);
    /// assert_eq!(renamed.node_of(0), Some(&named));
    /// assert_eq!(renamed.node_of(1), None);
    /// assert_eq!(renamed.unresolved(), layout.unresolved());
    /// ```
    #[must_use]
    pub fn renamed(&self, from: &NodeKey, to: &NodeKey) -> Layout {
        if self.node(from).is_none() || from == to {
            return self.clone();
        }
        let mut by_node: BTreeMap<NodeKey, (Health, Vec<u32>)> = BTreeMap::new();
        for n in &self.nodes {
            let key = if n.key == *from { to } else { &n.key };
            let entry = by_node
                .entry(key.clone())
                .or_insert_with(|| (n.health, Vec::new()));
            entry.1.extend(&n.partitions);
            entry.1.sort_unstable();
        }
        Layout::assemble(self.slots.clone(), by_node, self.unresolved.clone())
    }

    /// Number of partitions.
    pub fn partition_count(&self) -> u32 {
        u32::try_from(self.slots.len()).unwrap_or(u32::MAX)
    }

    /// The slot of partition `p`.
    pub fn slot_of(&self, p: u32) -> Option<u16> {
        self.slots.get(p as usize).copied()
    }

    /// The node partition `p` lives on; `None` when it is unresolved or out
    /// of range.
    pub fn node_of(&self, p: u32) -> Option<&NodeKey> {
        self.node_index_of(p)
            .and_then(|i| self.nodes.get(i))
            .map(|n| &n.key)
    }

    /// Index into [`nodes`](Self::nodes) of the node partition `p` lives on.
    pub fn node_index_of(&self, p: u32) -> Option<usize> {
        self.owner
            .get(p as usize)
            .copied()
            .flatten()
            .map(|i| i as usize)
    }

    /// The nodes that own at least one partition, sorted by [`NodeKey`].
    pub fn nodes(&self) -> &[LayoutNode] {
        &self.nodes
    }

    /// The entry for `key`, if that node owns partitions here.
    pub fn node(&self, key: &NodeKey) -> Option<&LayoutNode> {
        self.nodes
            .binary_search_by(|n| n.key.cmp(key))
            .ok()
            .and_then(|i| self.nodes.get(i))
    }

    /// Partitions with no reachable node, ascending.
    pub fn unresolved(&self) -> &[Unresolved] {
        &self.unresolved
    }

    /// The distinct slots whose owner is unknown ([`UnresolvedReason::NoOwner`]),
    /// ascending: the slots to probe.
    pub fn slots_to_probe(&self) -> Vec<u16> {
        let mut s: Vec<u16> = self
            .unresolved
            .iter()
            .filter(|u| u.reason == UnresolvedReason::NoOwner)
            .map(|u| u.slot)
            .collect();
        s.sort_unstable();
        s.dedup();
        s
    }
}
