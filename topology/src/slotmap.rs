//! The slot map: for each of the 16384 slots, which shard's primary owns it.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::RangeInclusive;

use shardcore::SLOT_COUNT;

/// Where to reach a node: a host (IP address or host name) and a port.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeAddr {
    /// IP address or host name, as the server announced it (or the host that
    /// was asked, when the server announced an empty address).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

/// A node's role inside its shard.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The primary (`master`), owner of the shard's slots.
    Primary,
    /// A replica of the primary.
    Replica,
}

/// A node's health as the server reports it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Health {
    /// `online`: serving.
    Online,
    /// `fail` / `failed`: the cluster considers the node down.
    Failed,
    /// `loading`: loading its data set, not serving yet.
    Loading,
    /// Not reported (`CLUSTER SLOTS` carries no health), or a value this
    /// version does not know.
    Unknown,
}

/// One node of the cluster, as a topology reply describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node id (40 hex characters on real servers).
    pub id: String,
    /// Where to connect, or `None` when the server announced `?` (unknown
    /// endpoint), or an empty address and no asked host was given.
    pub addr: Option<NodeAddr>,
    /// The announced host name, when the server reports one.
    pub hostname: Option<String>,
    /// The TLS port, when the server reports one (`CLUSTER SHARDS`).
    pub tls_port: Option<u16>,
    /// Primary or replica.
    pub role: Role,
    /// Health (`CLUSTER SHARDS` only; [`Health::Unknown`] from `CLUSTER SLOTS`).
    pub health: Health,
    /// Replication offset (`CLUSTER SHARDS` only).
    pub replication_offset: Option<i64>,
}

/// A primary and its replicas: one entry of the slot map's node table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The primary, owner of the slots mapped to this shard.
    pub primary: Node,
    /// Its replicas, sorted by id.
    pub replicas: Vec<Node>,
}

/// For each of the 16384 hash slots, the index of the shard whose primary
/// owns it, or `None` when no node serves the slot.
///
/// Built by [`parse_cluster_slots`](crate::parse_cluster_slots) or
/// [`parse_cluster_shards`](crate::parse_cluster_shards); those sort the
/// shard table by primary id, so the same cluster gives the same map from
/// either command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotMap {
    /// Shard index per slot, [`NO_OWNER`] for none (half the size of
    /// `Option<u16>`, and runs of it fill and compare as plain memory).
    owners: Vec<u16>,
    shards: Vec<Shard>,
}

/// The owner of a slot nobody serves. Shard indices stay below it: the
/// table holds at most 16384 shards.
const NO_OWNER: u16 = u16::MAX;

impl Default for SlotMap {
    fn default() -> Self {
        SlotMap::new()
    }
}

impl SlotMap {
    /// A map where no slot has an owner.
    pub fn new() -> Self {
        SlotMap {
            owners: vec![NO_OWNER; usize::from(SLOT_COUNT)],
            shards: Vec::new(),
        }
    }

    /// The node table.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// Index into [`shards`](Self::shards) of the owner of `slot`; `None`
    /// when the slot has no owner or `slot` is 16384 or more.
    pub fn owner_index(&self, slot: u16) -> Option<usize> {
        match self.owners.get(usize::from(slot)) {
            Some(&o) if o != NO_OWNER => Some(usize::from(o)),
            _ => None,
        }
    }

    /// The shard that owns `slot`, if any.
    pub fn owner(&self, slot: u16) -> Option<&Shard> {
        self.owner_index(slot).and_then(|i| self.shards.get(i))
    }

    /// Number of slots with no owner.
    pub fn unowned_count(&self) -> usize {
        self.owners.iter().filter(|&&o| o == NO_OWNER).count()
    }

    /// The map as maximal runs of slots with the same owner, in slot order.
    pub fn ranges(&self) -> Vec<(RangeInclusive<u16>, Option<usize>)> {
        let mut out = Vec::new();
        let mut start = 0usize;
        while let Some(&owner) = self.owners.get(start) {
            let len = self
                .owners
                .get(start..)
                .and_then(|rest| rest.iter().position(|&o| o != owner))
                .unwrap_or(self.owners.len() - start);
            let end = start + len - 1;
            let owner = (owner != NO_OWNER).then_some(usize::from(owner));
            // Both ends are below 16384.
            out.push((start as u16..=end as u16, owner));
            start = end + 1;
        }
        out
    }

    /// Appends a shard to the node table and returns its index; `None` when
    /// the table already holds 16384 shards.
    pub fn push_shard(&mut self, shard: Shard) -> Option<usize> {
        if self.shards.len() >= usize::from(SLOT_COUNT) {
            return None;
        }
        self.shards.push(shard);
        Some(self.shards.len() - 1)
    }

    /// Sets the owner of every slot in `slots` (slots past 16383 are
    /// ignored). `owner` must be an index from [`push_shard`](Self::push_shard)
    /// or `None`; another index is ignored and leaves the map unchanged.
    pub fn assign(&mut self, slots: RangeInclusive<u16>, owner: Option<usize>) {
        let owner = match owner {
            Some(i) if i < self.shards.len() => match u16::try_from(i) {
                Ok(o) => o,
                Err(_) => return,
            },
            Some(_) => return,
            None => NO_OWNER,
        };
        let (start, end) = (usize::from(*slots.start()), usize::from(*slots.end()));
        if let Some(run) = self
            .owners
            .get_mut(start..=end.min(usize::from(SLOT_COUNT) - 1))
        {
            run.fill(owner);
        }
    }

    /// Records a `MOVED slot host:port` redirect: the slot now belongs to the
    /// primary at `addr`. When no primary has that address but a replica
    /// does (it was promoted), that replica becomes the primary of a new
    /// shard; when no node has it, a shard with an empty id (not yet known)
    /// is added. The next full refresh replaces the map anyway.
    pub fn apply_moved(&mut self, slot: u16, addr: NodeAddr) {
        let found = self
            .shards
            .iter()
            .position(|s| s.primary.addr.as_ref() == Some(&addr));
        let index = match found {
            Some(i) => Some(i),
            None => {
                let promoted = self
                    .shards
                    .iter()
                    .flat_map(|s| &s.replicas)
                    .find(|r| r.addr.as_ref() == Some(&addr))
                    .cloned();
                let primary = match promoted {
                    Some(r) => Node {
                        role: Role::Primary,
                        ..r
                    },
                    None => Node {
                        id: String::new(),
                        addr: Some(addr),
                        hostname: None,
                        tls_port: None,
                        role: Role::Primary,
                        health: Health::Unknown,
                        replication_offset: None,
                    },
                };
                self.push_shard(Shard {
                    primary,
                    replicas: Vec::new(),
                })
            }
        };
        if index.is_some() {
            self.assign(slot..=slot, index);
        }
    }

    /// A shard of the table, for tests.
    #[cfg(test)]
    pub(crate) fn shard_mut(&mut self, index: usize) -> Option<&mut Shard> {
        self.shards.get_mut(index)
    }

    /// A map from a parsed node table and slot claims (ranges with an index
    /// into `shards`, already checked for overlaps): sorts the table by
    /// primary id then address (replicas by id) so the reply's order does
    /// not matter, renumbers the claims, and fills the owners run by run.
    pub(crate) fn from_parts(
        mut shards: Vec<Shard>,
        claims: &[(RangeInclusive<u16>, usize)],
    ) -> SlotMap {
        for s in &mut shards {
            s.replicas
                .sort_by(|a, b| (&a.id, &a.addr).cmp(&(&b.id, &b.addr)));
        }
        let mut order: Vec<usize> = (0..shards.len()).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (&shards[a].primary, &shards[b].primary);
            (&a.id, &a.addr).cmp(&(&b.id, &b.addr))
        });
        let mut renumber = vec![NO_OWNER; shards.len()];
        for (new, &old) in order.iter().enumerate() {
            renumber[old] = u16::try_from(new).unwrap_or(NO_OWNER);
        }
        let mut old: Vec<Option<Shard>> = shards.into_iter().map(Some).collect();
        let mut map = SlotMap::new();
        map.shards = order.iter().filter_map(|&i| old[i].take()).collect();
        for (range, index) in claims {
            let owner = renumber.get(*index).copied().unwrap_or(NO_OWNER);
            let (a, b) = (usize::from(*range.start()), usize::from(*range.end()));
            if let Some(run) = map.owners.get_mut(a..=b) {
                run.fill(owner);
            }
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, port: u16) -> Shard {
        Shard {
            primary: Node {
                id: id.into(),
                addr: Some(NodeAddr {
                    host: "10.0.0.1".into(),
                    port,
                }),
                hostname: None,
                tls_port: None,
                role: Role::Primary,
                health: Health::Unknown,
                replication_offset: None,
            },
            replicas: Vec::new(),
        }
    }

    #[test]
    fn assign_and_ranges() {
        let mut m = SlotMap::new();
        assert_eq!(m.unowned_count(), 16384);
        let a = m.push_shard(shard("b", 1));
        let b = m.push_shard(shard("a", 2));
        m.assign(0..=99, a);
        m.assign(200..=16383, b);
        m.assign(16000..=20000, b); // clamped, not a panic
        m.assign(5..=6, Some(7)); // unknown index: ignored
        assert_eq!(m.owner_index(0), Some(0));
        assert_eq!(m.owner_index(150), None);
        assert_eq!(m.owner_index(16384), None);
        assert_eq!(m.unowned_count(), 100);
        assert_eq!(
            m.ranges(),
            vec![(0..=99, Some(0)), (100..=199, None), (200..=16383, Some(1))]
        );
        let sorted = SlotMap::from_parts(m.shards().to_vec(), &[(0..=99, 0), (200..=16383, 1)]);
        assert_eq!(sorted.owner(0).unwrap().primary.id, "b");
        assert_eq!(sorted.owner_index(0), Some(1));
        assert_eq!(sorted.owner_index(300), Some(0));
        assert_eq!(sorted.owner_index(150), None);
    }

    #[test]
    fn moved_reuses_or_adds_a_shard() {
        let mut m = SlotMap::new();
        let a = m.push_shard(shard("a", 1));
        m.assign(0..=16383, a);
        m.apply_moved(
            5,
            NodeAddr {
                host: "10.0.0.1".into(),
                port: 9,
            },
        );
        assert_eq!(m.shards().len(), 2);
        assert_eq!(m.owner(5).unwrap().primary.id, "");
        assert_eq!(m.owner_index(4), Some(0));
        m.apply_moved(
            6,
            NodeAddr {
                host: "10.0.0.1".into(),
                port: 9,
            },
        );
        assert_eq!(m.shards().len(), 2);
        assert_eq!(m.owner_index(6), Some(1));
        // A promoted replica keeps its id.
        let mut r = shard("r", 3).primary;
        r.role = Role::Replica;
        m.shard_mut(0).unwrap().replicas.push(r);
        m.apply_moved(
            7,
            NodeAddr {
                host: "10.0.0.1".into(),
                port: 3,
            },
        );
        let owner = m.owner(7).unwrap();
        assert_eq!(
            (owner.primary.id.as_str(), owner.primary.role),
            ("r", Role::Primary)
        );
    }
}
