//! Routes, gates, retirement and service channels of the publish core.

use alloc::vec::Vec;

use topology::{Node, Shard, SlotMap};

use super::{GateRoute, NodeId, NodeInfo, Output, PublishCore, TableChange};
use crate::gates::GateCommand;
use crate::hold::Held;
use crate::routes::{RouteMove, Routes};
use crate::services::ServiceNode;
use crate::time::Time;

/// A new slot map's routes, worked out without the core's lock
/// ([`PublishCore::plan_map`]) and installed with it
/// ([`PublishCore::apply_map`]).
#[derive(Debug)]
pub struct MapPlan {
    routes: Routes<NodeId>,
    moves: Vec<RouteMove<NodeId>>,
}

impl<A: Clone + PartialEq, M: Held> PublishCore<A, M> {
    /// The driver opened a publish connection to `addr`: `id` from now on
    /// (up until [`PublishCore::handle_link`] says otherwise).
    pub fn handle_node(&mut self, id: NodeId, addr: A) {
        self.nodes.insert(id, NodeInfo { addr, up: true });
    }

    /// `id`'s publish connection is up or down (held publishes go only to
    /// an owner that is up).
    pub fn handle_link(&mut self, id: NodeId, up: bool) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.up = up;
        }
    }

    /// Whether `id`'s publish connection is up.
    pub fn is_up(&self, id: NodeId) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.up)
    }

    /// The routes of `map`, a shard's primary reached as `reach` says
    /// (`None`: it cannot be, and its slots have no route). Reads the core
    /// only: the driver may work it out before it takes the core's lock.
    pub fn plan_map(&self, map: &SlotMap, reach: impl FnMut(&Shard) -> Option<NodeId>) -> MapPlan {
        let mut routes = self.routes.clone();
        let moves = routes.handle_map(map, reach, &self.cfg.watched);
        MapPlan { routes, moves }
    }

    /// Installs `plan` (under the read table's write lock): the watched
    /// slots whose route moved are gated, the table is derived again,
    /// and nodes no route uses any more are retired (once their gates
    /// opened).
    pub fn apply_map(&mut self, now: Time, plan: MapPlan) {
        self.routes = plan.routes;
        self.out.push_back(Output::Table(TableChange::All));
        self.close_gates(now, plan.moves);
        let routed = self.routes.nodes();
        // Routed again before its gates opened: kept.
        self.retiring.retain(|n| !routed.contains(n));
        let gone: Vec<NodeId> = self
            .nodes
            .keys()
            .filter(|n| !routed.contains(n))
            .copied()
            .collect();
        for node in gone {
            if self.gates.routes().any(|r| r.old == node) {
                self.retiring.insert(node); // markers still go out on it
            } else {
                self.retire(node);
            }
        }
        self.run_gates(now);
        self.commands_due(now);
    }

    /// A `MOVED` for `slot` to `to` (of a publish or a command): its route
    /// now; a watched slot that leaves another route is gated (as a map's
    /// moves are: a command's key may be in a slot no publish goes to).
    pub(super) fn route_slot(&mut self, now: Time, slot: u16, to: NodeId) {
        let moved = self.routes.handle_moved(slot, to);
        let moved = moved.filter(|_| self.cfg.watched.contains(&slot));
        self.retiring.remove(&to);
        self.out.push_back(Output::Table(TableChange::Slot(slot)));
        self.close_gates(now, moved.into_iter().collect());
        self.run_gates(now);
        self.out.push_back(Output::Redirected { slot, node: to });
        self.commands_due(now);
    }

    /// Closes a gate for each route move and holds its slots behind it.
    ///
    /// Slots leaving for no known owner get a gate each: they may go to
    /// different owners later, and each gate marks through the old node
    /// to its own slot's owner (one marker to the wrong owner would be
    /// refused and open the gate while the old node forwards to another).
    fn close_gates(&mut self, now: Time, moves: Vec<RouteMove<NodeId>>) {
        for m in moves {
            let per_gate = match m.to {
                Some(_) => m.slots.len().max(1),
                None => 1,
            };
            for slots in m.slots.chunks(per_gate) {
                let Some(&slot) = slots.first() else {
                    continue;
                };
                let route = GateRoute {
                    old: m.from,
                    new: m.to,
                    slot,
                };
                let token = self.gates.close(now, route, m.to.is_some());
                for &slot in slots {
                    self.hold.gate(slot, token);
                }
                self.out.push_back(Output::GateClosed {
                    token,
                    from: m.from,
                    to: m.to,
                    slots: slots.to_vec(),
                });
            }
        }
    }

    /// Carries out what the gates decided: gates with no new owner learn
    /// it from the routes, then barriers, markers and openings.
    pub(super) fn run_gates(&mut self, now: Time) {
        self.find_new_owners(now);
        while let Some(cmd) = self.gates.poll_command() {
            match cmd {
                GateCommand::Barrier { token } => {
                    if let Some(r) = self.gates.route(token) {
                        let node = r.old;
                        self.out.push_back(Output::Barrier { token, node });
                    }
                }
                GateCommand::Marker { token } => self.marker(token),
                GateCommand::Open { token, timed_out } => self.gate_opened(token, timed_out),
            }
        }
    }

    /// Gates closed with no new owner known (a map read mid-change showed
    /// their slots unassigned) learn it from the routes as soon as they
    /// have one: the old node may have become its replica and forward
    /// what it accepted, so markers must go out before the gate opens.
    fn find_new_owners(&mut self, now: Time) {
        let waiting: Vec<u64> = self.gates.waiting_for_owner().collect();
        for token in waiting {
            let Some(route) = self.gates.route_mut(token) else {
                continue;
            };
            let Some(&owner) = self.routes.owner(route.slot) else {
                continue;
            };
            route.new = Some(owner);
            self.gates.handle_owner(now, token);
        }
    }

    /// A marker on the old route, when the new owner's service channel is
    /// known (else the next one goes).
    fn marker(&mut self, token: u64) {
        let Some(r) = self.gates.route(token) else {
            return;
        };
        let old = r.old;
        let addr = r.new.and_then(|n| self.nodes.get(&n)).map(|n| &n.addr);
        let Some(service_slot) = addr.and_then(|a| self.services.slot_of(a)) else {
            return;
        };
        self.out.push_back(Output::Marker {
            token,
            node: old,
            service_slot,
        });
    }

    fn gate_opened(&mut self, token: u64, timed_out: bool) {
        self.out.push_back(Output::GateOpened { token, timed_out });
        self.hold.open(token);
        // Nodes kept only for their gates.
        let unused: Vec<NodeId> = self
            .retiring
            .iter()
            .filter(|&&n| !self.gates.routes().any(|r| r.old == n))
            .copied()
            .collect();
        for node in unused {
            self.retiring.remove(&node);
            self.retire(node);
        }
    }

    fn retire(&mut self, node: NodeId) {
        self.nodes.remove(&node);
        self.out.push_back(Output::Retire { node });
    }

    /// The barrier of gate `token` was answered (`answered`) or failed.
    pub fn handle_barrier(&mut self, now: Time, token: u64, answered: bool) {
        self.gates.handle_barrier(now, token, answered);
        self.run_gates(now);
    }

    /// A marker of gate `token` came back at the new owner, or the old
    /// route refused it.
    pub fn handle_marker(&mut self, now: Time, token: u64) {
        self.gates.handle_marker(token);
        self.run_gates(now);
    }

    /// One round of service channels over the subscribe side's `nodes`
    /// (`map_changed`: a new map arrived since the last round; a map node
    /// is `A` when `at` says so): [`Output::SendService`] for each channel
    /// to send, [`Output::RefreshSoon`] when the map still shows a dropped
    /// channel's slot on its node. Markers wait for the new owner's.
    pub fn handle_services(
        &mut self,
        map: &SlotMap,
        at: impl Fn(&Node) -> Option<A>,
        nodes: &[ServiceNode<A>],
        map_changed: bool,
    ) {
        let round = self.services.handle_round(map, at, nodes, map_changed);
        for (conn, slot) in round.send {
            self.out.push_back(Output::SendService { conn, slot });
        }
        if round.refresh {
            self.out.push_back(Output::RefreshSoon);
        }
    }
}
