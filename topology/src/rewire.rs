//! What to change when the layout changes.

use alloc::vec::Vec;

use crate::layout::{Layout, NodeKey};

/// A partition to subscribe on a new node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// The partition.
    pub partition: u32,
    /// Its slot (in the new layout).
    pub slot: u16,
    /// Where it was (`None` when it was unresolved before).
    pub from: Option<NodeKey>,
    /// Where it is now.
    pub to: NodeKey,
}

/// A partition that had a node and now has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// The partition.
    pub partition: u32,
    /// Its slot.
    pub slot: u16,
    /// Where it was.
    pub from: NodeKey,
}

/// The difference between two layouts, as work for the engine: open the
/// connections in `open`, move every partition in `resubscribe` (and signal
/// a gap for its channels), note the `unowned` ones (and probe their slots),
/// then close the connections in `close`.
///
/// Every list is sorted (nodes by [`NodeKey`], partitions ascending), so the
/// same two layouts always give the same plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RewirePlan {
    /// Primaries that own partitions now and did not before.
    pub open: Vec<NodeKey>,
    /// Primaries that owned partitions before and own none now (they left,
    /// failed over, or gave all their partitions away).
    pub close: Vec<NodeKey>,
    /// Partitions whose node changed, with their new node. Partitions that
    /// stayed put are not listed.
    pub resubscribe: Vec<Move>,
    /// Partitions that had a node and now have none.
    pub unowned: Vec<Orphan>,
}

impl RewirePlan {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
            && self.close.is_empty()
            && self.resubscribe.is_empty()
            && self.unowned.is_empty()
    }
}

/// The rewire from `old` to `new`. Both should come from the same
/// [`Partitions`](shardcore::Partitions); partitions present in only one of
/// them count as unresolved in the other.
///
/// ```
/// # let map = topology::SlotMap::new();
/// # let parts = shardcore::Partitions::new(16).unwrap();
/// let a = topology::Layout::compute(&map, &parts);
/// assert!(topology::plan_rewire(&a, &a).is_empty());
/// ```
pub fn plan_rewire(old: &Layout, new: &Layout) -> RewirePlan {
    let mut plan = RewirePlan::default();
    // Both node lists are sorted by key: merge them, noting for each old
    // node its index among the new ones (if it is still there).
    let (a, b) = (old.nodes(), new.nodes());
    let mut same: Vec<Option<usize>> = alloc::vec![None; a.len()];
    let (mut i, mut j) = (0, 0);
    loop {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.key == y.key => {
                if let Some(s) = same.get_mut(i) {
                    *s = Some(j);
                }
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x.key < y.key => {
                plan.close.push(x.key.clone());
                i += 1;
            }
            (Some(x), None) => {
                plan.close.push(x.key.clone());
                i += 1;
            }
            (_, Some(y)) => {
                plan.open.push(y.key.clone());
                j += 1;
            }
            (None, None) => break,
        }
    }
    let count = old.partition_count().max(new.partition_count());
    for p in 0..count {
        let (from, to) = (old.node_index_of(p), new.node_index_of(p));
        if let (Some(f), Some(t)) = (from, to) {
            if same.get(f).copied().flatten() == Some(t) {
                continue;
            }
        }
        let slot = new.slot_of(p).or_else(|| old.slot_of(p)).unwrap_or(0);
        let from = from.and_then(|f| a.get(f)).map(|n| &n.key);
        match (from, to.and_then(|t| b.get(t))) {
            (from, Some(to)) => plan.resubscribe.push(Move {
                partition: p,
                slot,
                from: from.cloned(),
                to: to.key.clone(),
            }),
            (Some(from), None) => plan.unowned.push(Orphan {
                partition: p,
                slot,
                from: from.clone(),
            }),
            (None, None) => {}
        }
    }
    plan
}
