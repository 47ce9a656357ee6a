//! Publish routes: which node takes each slot's publishes, and which slots'
//! routes a new map or a `MOVED` moves, decided without I/O or a clock.
//!
//! The driver keeps one [`Routes`] over its own node handle `N` (an
//! address). A new slot map ([`Routes::handle_map`]) or a `MOVED`
//! ([`Routes::handle_moved`]) replaces owners and returns the
//! [`RouteMove`]s of the watched slots (the ones publishes go to) whose
//! route left a known node: one per old and new route, each slot in one.
//! The driver closes one route gate ([`crate::Gates::close`]) per move and
//! holds the move's slots behind it, under the same lock as it installs
//! the new table ([`Routes::nodes`], [`Routes::owners`]), so that no
//! publish slips between. A slot with no owner before has nothing in
//! flight to wait for: it moves without a gate.
//!
//! ```
//! use control::Routes;
//! let mut routes: Routes<&str> = Routes::new();
//! assert!(routes.handle_moved(7, "a").is_none()); // unowned before: no gate
//! let m = routes.handle_moved(7, "b").unwrap();
//! assert_eq!((m.from, m.to, m.slots), ("a", Some("b"), vec![7]));
//! assert!(routes.handle_moved(7, "b").is_none()); // no move
//! assert_eq!(routes.owner(7), Some(&"b"));
//! ```

use alloc::vec;
use alloc::vec::Vec;

use topology::{Shard, SlotMap};

/// A slot's owner index when it has none.
pub const NO_ROUTE: u16 = u16::MAX;

/// Watched slots whose route left `from` for `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteMove<N> {
    /// The node that took the slots' publishes.
    pub from: N,
    /// The node that takes them now (`None`: no owner known).
    pub to: Option<N>,
    /// The slots, ascending.
    pub slots: Vec<u16>,
}

/// The publish route of every slot.
#[derive(Clone, Debug)]
pub struct Routes<N> {
    nodes: Vec<N>,
    owner: Vec<u16>,
}

impl<N: Clone + PartialEq> Default for Routes<N> {
    fn default() -> Self {
        Routes::new()
    }
}

impl<N: Clone + PartialEq> Routes<N> {
    /// No slot has a route.
    pub fn new() -> Routes<N> {
        Routes {
            nodes: Vec::new(),
            owner: vec![NO_ROUTE; usize::from(shardcore::SLOT_COUNT)],
        }
    }

    /// The node that takes `slot`'s publishes.
    pub fn owner(&self, slot: u16) -> Option<&N> {
        let i = *self.owner.get(usize::from(slot))?;
        self.nodes.get(usize::from(i))
    }

    /// The nodes the table refers to (indexed by [`Routes::owners`]).
    pub fn nodes(&self) -> &[N] {
        &self.nodes
    }

    /// Each slot's index into [`Routes::nodes`], or [`NO_ROUTE`].
    pub fn owners(&self) -> &[u16] {
        &self.owner
    }

    /// Every slot's route from `map`: a shard's primary is reached as
    /// `node` says (`None`: it cannot be, and its slots have no route).
    /// Returns the moves of the `watched` slots that had a route.
    pub fn handle_map(
        &mut self,
        map: &SlotMap,
        mut node: impl FnMut(&Shard) -> Option<N>,
        watched: &[u16],
    ) -> Vec<RouteMove<N>> {
        let mut nodes: Vec<N> = Vec::new();
        let index: Vec<u16> = map
            .shards()
            .iter()
            .map(|sh| match node(sh) {
                Some(n) => match nodes.iter().position(|m| *m == n) {
                    Some(i) => i as u16,
                    None => {
                        nodes.push(n);
                        (nodes.len() - 1) as u16
                    }
                },
                None => NO_ROUTE,
            })
            .collect();
        let owner: Vec<u16> = (0..shardcore::SLOT_COUNT)
            .map(|slot| {
                map.owner_index(slot)
                    .and_then(|i| index.get(i).copied())
                    .unwrap_or(NO_ROUTE)
            })
            .collect();
        let new = Routes { nodes, owner };
        let mut moves: Vec<RouteMove<N>> = Vec::new();
        let mut slots: Vec<u16> = watched.to_vec();
        slots.sort_unstable();
        slots.dedup();
        for slot in slots {
            let Some(from) = self.owner(slot) else {
                continue;
            };
            let to = new.owner(slot);
            if to == Some(from) {
                continue;
            }
            match moves
                .iter_mut()
                .find(|m| m.from == *from && m.to.as_ref() == to)
            {
                Some(m) => m.slots.push(slot),
                None => moves.push(RouteMove {
                    from: from.clone(),
                    to: to.cloned(),
                    slots: vec![slot],
                }),
            }
        }
        *self = new;
        moves
    }

    /// A `MOVED` for `slot` to `to`: its route now. Returns its move when
    /// it had another one.
    pub fn handle_moved(&mut self, slot: u16, to: N) -> Option<RouteMove<N>> {
        let &old = self.owner.get(usize::from(slot))?;
        let i = match self.nodes.iter().position(|n| *n == to) {
            Some(i) => i,
            None => {
                self.nodes.push(to.clone());
                self.nodes.len() - 1
            }
        };
        let from = self.nodes.get(usize::from(old)).cloned();
        if let Some(o) = self.owner.get_mut(usize::from(slot)) {
            *o = i as u16;
        }
        let from = from.filter(|f| *f != to)?;
        Some(RouteMove {
            from,
            to: Some(to),
            slots: vec![slot],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_maps::map;
    use alloc::string::String;

    fn host(sh: &Shard) -> Option<String> {
        sh.primary.addr.as_ref().map(|a| a.host.clone())
    }

    fn mv(from: &str, to: Option<&str>, slots: &[u16]) -> RouteMove<String> {
        RouteMove {
            from: from.into(),
            to: to.map(String::from),
            slots: slots.to_vec(),
        }
    }

    fn owner(r: &Routes<String>, slot: u16) -> Option<&str> {
        r.owner(slot).map(|s| s.as_str())
    }

    #[test]
    fn a_first_map_moves_nothing() {
        let mut r = Routes::new();
        let moves = r.handle_map(&map(&[("A", "a", 0, 16383)]), host, &[0, 5, 16383]);
        assert!(moves.is_empty());
        assert_eq!(owner(&r, 5), Some("a"));
        assert_eq!(r.nodes(), &[String::from("a")]);
    }

    #[test]
    fn moves_group_slots_by_old_and_new_route() {
        let mut r = Routes::new();
        r.handle_map(
            &map(&[("A", "a", 0, 8191), ("B", "b", 8192, 16383)]),
            host,
            &[],
        );
        let m = map(&[
            ("C", "c", 0, 99),
            ("A", "a", 100, 8191),
            ("C2", "c", 8192, 8199),
            ("A2", "a", 8200, 16383),
        ]);
        let moves = r.handle_map(&m, host, &[9000, 0, 50, 8192, 200, 50]);
        assert_eq!(
            moves,
            vec![
                mv("a", Some("c"), &[0, 50]),
                mv("b", Some("c"), &[8192]),
                mv("b", Some("a"), &[9000]),
            ]
        );
        // Two shards at one address are one node.
        assert_eq!(r.nodes().len(), 2);
        assert_eq!(owner(&r, 200), Some("a"));
        assert_eq!(owner(&r, 16383), Some("a"));
    }

    #[test]
    fn a_slot_that_loses_its_owner_moves_to_none() {
        let mut r = Routes::new();
        r.handle_map(&map(&[("A", "a", 0, 16383)]), host, &[]);
        // Slots past 99 are not in the map; node b cannot be reached.
        let m = map(&[("A", "a", 0, 9), ("B", "b", 10, 99)]);
        let reach = |sh: &Shard| host(sh).filter(|h| h != "b");
        let moves = r.handle_map(&m, reach, &[5, 50, 500]);
        assert_eq!(moves, vec![mv("a", None, &[50, 500])]);
        assert_eq!(owner(&r, 50), None);
        assert_eq!(r.owners()[50], NO_ROUTE);
        // Then owned again: nothing was in flight, so nothing moves.
        assert!(r
            .handle_map(&map(&[("A", "a", 0, 16383)]), host, &[50])
            .is_empty());
    }

    #[test]
    fn a_moved_routes_one_slot_and_joins_a_known_node() {
        let mut r = Routes::new();
        r.handle_map(
            &map(&[("A", "a", 0, 8191), ("B", "b", 8192, 16383)]),
            host,
            &[],
        );
        assert_eq!(
            r.handle_moved(3, "b".into()),
            Some(mv("a", Some("b"), &[3]))
        );
        assert_eq!(r.nodes().len(), 2);
        assert_eq!(owner(&r, 3), Some("b"));
        assert_eq!(owner(&r, 4), Some("a"));
        assert_eq!(
            r.handle_moved(3, "z".into()),
            Some(mv("b", Some("z"), &[3]))
        );
        assert_eq!(r.nodes().len(), 3);
        assert!(r.handle_moved(3, "z".into()).is_none());
        // The next map starts from what the MOVEDs made of the table.
        let moves = r.handle_map(&map(&[("Z", "z", 0, 16383)]), host, &[3, 4]);
        assert_eq!(moves, vec![mv("a", Some("z"), &[4])]);
        assert!(r.handle_moved(u16::MAX, "a".into()).is_none());
        assert_eq!(r.nodes().len(), 1);
    }
}
