//! Publish routes through a run of slot maps and `MOVED`s
//! ([`control::Routes`]), against a plain model of who owns each slot.
//!
//! Each run has 2 to 6 nodes (some maps name a primary that cannot be
//! reached, whose slots then have no route), 1 to 64 watched slots (the
//! partitions' slots, where publishes go) and 8 to 24 inputs: new maps
//! (random ranges, some slots unowned, often a single slot or a range
//! moved from the previous map, as a migration or a failover does) and
//! `MOVED`s (mostly of a watched slot, sometimes to a node no map names).
//!
//! Properties ([`run_routes`] panics with the seed when one fails), after
//! every input:
//!
//! 1. every slot's route is its owner in the model (the last map, with the
//!    `MOVED`s since), and the node table names each node once and holds
//!    every route's index;
//! 2. the moves name exactly the watched slots whose route left a node for
//!    another node or for none, each slot once, with the model's old and
//!    new owner; a slot with no route before is in none (nothing was in
//!    flight to drain behind a gate);
//! 3. one move per old and new route (a gate each), slots ascending.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use control::{Rng, RouteMove, Routes, NO_ROUTE};
use topology::{Health, Node, NodeAddr, Role, Shard, SlotMap};

const SLOTS: u16 = shardcore::SLOT_COUNT;

/// What one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoutesRun {
    /// Maps handled.
    pub maps: u32,
    /// `MOVED`s handled.
    pub moveds: u32,
    /// Moves returned (gates the driver closes).
    pub moves: u32,
    /// Watched slots moved.
    pub slots_moved: u32,
    /// Of them, to no route.
    pub to_none: u32,
}

fn shard(node: u8) -> Shard {
    Shard {
        primary: Node {
            id: format!("n{node}"),
            addr: Some(NodeAddr {
                host: format!("10.0.0.{node}"),
                port: 7000,
            }),
            hostname: None,
            tls_port: None,
            role: Role::Primary,
            health: Health::Online,
            replication_offset: None,
        },
        replicas: Vec::new(),
    }
}

/// The node a map's node is (its address names it).
pub fn node_at(node: &Node) -> Option<u8> {
    let host = &node.addr.as_ref()?.host;
    host.rsplit('.').next()?.parse().ok()
}

/// The node a shard's primary is, when it can be reached.
pub fn node_of(unreachable: Option<u8>) -> impl Fn(&Shard) -> Option<u8> {
    move |sh: &Shard| node_at(&sh.primary).filter(|&n| Some(n) != unreachable)
}

/// A map from per-slot owners (`None`: unowned; slots past the end too).
pub fn build(owners: &[Option<u8>]) -> SlotMap {
    let mut map = SlotMap::new();
    let mut shards: Vec<(u8, usize)> = Vec::new();
    let mut start = 0usize;
    while start < owners.len() {
        let o = owners[start];
        let mut end = start;
        while end + 1 < owners.len() && owners[end + 1] == o {
            end += 1;
        }
        let index = o.and_then(|n| match shards.iter().find(|s| s.0 == n) {
            Some(s) => Some(s.1),
            None => {
                let i = map.push_shard(shard(n))?;
                shards.push((n, i));
                Some(i)
            }
        });
        map.assign(start as u16..=end as u16, index);
        start = end + 1;
    }
    map
}

/// Owners in random ranges over `nodes` nodes, some unowned.
fn random_owners(rng: &mut Rng, nodes: u8) -> Vec<Option<u8>> {
    let mut cuts: Vec<u16> = (0..rng.range(0, 8))
        .map(|_| rng.below(u64::from(SLOTS)) as u16)
        .collect();
    cuts.push(SLOTS);
    cuts.sort_unstable();
    let mut owners = vec![None; usize::from(SLOTS)];
    let mut start = 0u16;
    for cut in cuts {
        let o = (!rng.chance(10)).then(|| rng.below(u64::from(nodes)) as u8);
        for s in start..cut {
            owners[usize::from(s)] = o;
        }
        start = cut;
    }
    owners
}

/// One input to the routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A map with these owners per slot (`None`: unowned), where node
    /// `unreachable` (if any) cannot be reached.
    Map {
        /// Each slot's owner.
        owners: Vec<Option<u8>>,
        /// The node no connection reaches.
        unreachable: Option<u8>,
    },
    /// A `MOVED` of `slot` to node `to`.
    Moved {
        /// The slot.
        slot: u16,
        /// Its new owner.
        to: u8,
    },
}

/// [`control::Routes`] beside a plain model of the owners, checked after
/// every [`Op`] (the properties above; `label` names the run in a
/// failure).
pub struct Model {
    label: String,
    routes: Routes<u8>,
    /// The model's owner of every slot.
    owner: Vec<Option<u8>>,
    watched: Vec<u16>,
    run: RoutesRun,
}

impl Model {
    /// No route yet; `watched`: the slots publishes go to.
    pub fn new(label: String, mut watched: Vec<u16>) -> Model {
        watched.retain(|&s| s < SLOTS);
        watched.sort_unstable();
        watched.dedup();
        Model {
            label,
            routes: Routes::new(),
            owner: vec![None; usize::from(SLOTS)],
            watched,
            run: RoutesRun::default(),
        }
    }

    /// The model's owners now.
    pub fn owners(&self) -> &[Option<u8>] {
        &self.owner
    }

    /// Applies `op` and checks properties 1 to 3 (property 1 on the
    /// watched slots, the moved ones and `also`).
    pub fn apply(&mut self, op: Op, also: &[u16]) {
        let before = self.owner.clone();
        let moves = match op {
            Op::Moved { slot, to } => {
                if let Some(o) = self.owner.get_mut(usize::from(slot)) {
                    *o = Some(to);
                }
                self.run.moveds += 1;
                self.routes.handle_moved(slot, to).into_iter().collect()
            }
            Op::Map {
                mut owners,
                unreachable,
            } => {
                owners.resize(usize::from(SLOTS), None);
                self.owner = owners
                    .iter()
                    .map(|&o| o.filter(|&n| Some(n) != unreachable))
                    .collect();
                self.run.maps += 1;
                let watched = self.watched.clone();
                self.routes
                    .handle_map(&build(&owners), node_of(unreachable), &watched)
            }
        };
        let mut slots = self.watched.clone();
        slots.extend(moves.iter().flat_map(|mv| mv.slots.iter().copied()));
        slots.extend(also.iter().copied().filter(|&s| s < SLOTS));
        self.check(&before, &moves, &slots);
    }

    /// Property 1 on every slot; what the run did.
    pub fn finish(mut self) -> RoutesRun {
        let all: Vec<u16> = (0..SLOTS).collect();
        let now = self.owner.clone();
        self.check(&now, &[], &all);
        self.run
    }

    fn fail(&self, what: &str) -> ! {
        panic!("routes {}: {what}", self.label)
    }

    /// `slots`: the slots whose route property 1 checks.
    fn check(&mut self, before: &[Option<u8>], moves: &[RouteMove<u8>], slots: &[u16]) {
        let nodes = self.routes.nodes();
        let unique: BTreeSet<u8> = nodes.iter().copied().collect();
        if unique.len() != nodes.len() {
            self.fail(&format!("node table {nodes:?} names a node twice"));
        }
        for &slot in slots {
            let i = self.routes.owners()[usize::from(slot)];
            if i != NO_ROUTE && usize::from(i) >= nodes.len() {
                self.fail(&format!(
                    "slot {slot} routed to index {i} of {}",
                    nodes.len()
                ));
            }
            let want = self.owner[usize::from(slot)];
            if self.routes.owner(slot).copied() != want {
                self.fail(&format!(
                    "slot {slot} routed to {:?}, owned by {want:?}",
                    self.routes.owner(slot)
                ));
            }
        }
        let mut seen: BTreeSet<u16> = BTreeSet::new();
        for (k, m) in moves.iter().enumerate() {
            if moves[..k].iter().any(|o| o.from == m.from && o.to == m.to) {
                self.fail(&format!("two moves from {} to {:?}", m.from, m.to));
            }
            if m.slots.is_empty() || m.slots.windows(2).any(|w| w[0] >= w[1]) {
                self.fail(&format!("move's slots {:?} not ascending", m.slots));
            }
            for &slot in &m.slots {
                let (old, new) = (before[usize::from(slot)], self.owner[usize::from(slot)]);
                if !seen.insert(slot) || old != Some(m.from) || new != m.to {
                    self.fail(&format!(
                        "slot {slot} moved {} -> {:?}, owned {old:?} -> {new:?}",
                        m.from, m.to
                    ));
                }
            }
            self.run.moves += 1;
            self.run.slots_moved += m.slots.len() as u32;
            self.run.to_none += u32::from(m.to.is_none()) * m.slots.len() as u32;
        }
        for &slot in &self.watched {
            let (old, new) = (before[usize::from(slot)], self.owner[usize::from(slot)]);
            if old.is_some() && old != new && !seen.contains(&slot) {
                self.fail(&format!(
                    "slot {slot} left {old:?} for {new:?} without a move"
                ));
            }
        }
    }
}

/// One run of seed `seed`.
pub fn run_routes(seed: u64) -> RoutesRun {
    let mut rng = Rng::new(seed);
    let nodes = rng.range(2, 7) as u8;
    let watched: Vec<u16> = (0..rng.range(1, 65))
        .map(|_| rng.below(u64::from(SLOTS)) as u16)
        .collect();
    let mut m = Model::new(format!("seed {seed}"), watched);
    for _ in 0..rng.range(8, 25) {
        let op = if rng.chance(30) {
            // A `MOVED`, mostly of a watched slot; sometimes to a node no
            // map names.
            let slot = match rng.pick(&m.watched) {
                Some(s) if rng.chance(80) => s,
                _ => rng.below(u64::from(SLOTS)) as u16,
            };
            let to = rng.below(u64::from(nodes) + 1) as u8;
            Op::Moved { slot, to }
        } else {
            // A map: all new, or the last one with a slot or a range moved.
            let mut owners = if rng.chance(40) {
                random_owners(&mut rng, nodes)
            } else {
                m.owner.clone()
            };
            let first = match rng.pick(&m.watched) {
                Some(s) if rng.chance(70) => s,
                _ => rng.below(u64::from(SLOTS)) as u16,
            };
            let last = first.saturating_add(rng.below(300) as u16).min(SLOTS - 1);
            let to = (!rng.chance(10)).then(|| rng.below(u64::from(nodes)) as u8);
            for s in first..=last {
                owners[usize::from(s)] = to;
            }
            let unreachable = rng.chance(15).then(|| rng.below(u64::from(nodes)) as u8);
            Op::Map {
                owners,
                unreachable,
            }
        };
        let also: Vec<u16> = (0..32)
            .map(|_| rng.below(u64::from(SLOTS)) as u16)
            .collect();
        m.apply(op, &also);
    }
    m.finish()
}
