//! Driving the publish core ([`control::publish::PublishCore`]) on the
//! control thread: each input under the core's lock (and, for one that may
//! move a route, under the read table's write lock, so the table and the
//! gating of the slots it moved change together for every publisher), then
//! its outputs carried out: releases submitted before the lock is let go
//! (a publish that finds its slot free after that follows them), the read
//! table derived again from the core's, and the rest in order after it.

use std::net::SocketAddr;

use control::publish::{NodeId, Output, PublishCore, Reply, TableChange, Target};
use control::Time;

use crate::control_loop::driver::Driver;
use crate::control_loop::hold::PubState;
use crate::control_loop::publish::{self, PubMsg};
use crate::control_loop::shared::{Retry, Routes};
use crate::engine::Room;
use crate::error::Error;
use crate::metrics::add;

/// The core as the control thread drives it.
pub(crate) type Core = PublishCore<SocketAddr, PubMsg>;

impl Driver {
    /// Gives the publish core one input now and carries out what it
    /// decided. `moves_routes`: the input may move a route (a new map, a
    /// `MOVED`, the close), so it runs under the read table's write lock.
    /// `redirect`: the node a `MOVED` named, as the server named it (for
    /// the subscribe core's [`control::Core::handle_redirect`]).
    pub(crate) fn publish_input<R>(
        &mut self,
        moves_routes: bool,
        redirect: Option<&topology::NodeAddr>,
        f: impl FnOnce(&mut Core, Time) -> R,
    ) -> R {
        let s = self.s.clone();
        let now = self.now();
        let mut table = moves_routes.then(|| s.routes.write());
        let mut unsent = Vec::new();
        let mut late_table = false;
        let (r, outputs) = s.hold.with(|p| {
            let r = f(&mut p.core, now);
            let mut rest = Vec::new();
            while let Some(o) = p.core.poll_output() {
                match o {
                    Output::Table(change) => match table.as_deref_mut() {
                        Some(t) => install(t, p, change),
                        None => late_table = true,
                    },
                    // Under the lock: the slot's entry may be gone once
                    // it is let go, and a publish that then finds the slot
                    // free must follow these.
                    Output::Submit { node, msg, asking } => match p.engines.get(&node) {
                        Some(e) => {
                            if let Err(failed) = publish::try_submit(msg, e, asking, Room::Past) {
                                unsent.push(failed);
                            }
                        }
                        None => unsent.push((msg, Error::Shutdown)),
                    },
                    o => rest.push(o),
                }
            }
            (r, rest)
        });
        drop(table);
        if late_table {
            // Not reached: only inputs that move routes change the table.
            debug_assert!(false, "a table change without the write lock");
            let mut t = s.routes.write();
            s.hold.with(|p| install(&mut t, p, TableChange::All));
        }
        for (msg, e) in unsent {
            let _ = publish::on_reply(&s, msg, Err(e), Room::Past);
        }
        for o in outputs {
            self.carry_output(o, redirect);
        }
        r
    }

    /// Carries out one output of the publish core (not a release or a
    /// table change: see [`Driver::publish_input`]).
    fn carry_output(&mut self, o: Output<PubMsg>, redirect: Option<&topology::NodeAddr>) {
        match o {
            Output::Fail { msg, why } => {
                let e = publish::failure(&self.s, msg.slot, why, &Ok(0), "");
                msg.finish(&self.s, Err(e));
            }
            Output::GateClosed {
                token,
                from,
                to,
                slots,
            } => log::debug!(
                "cluster: gate {token} closed: {} slots from {:?} to {:?}",
                slots.len(),
                self.addr_of(from),
                to.map(|n| self.addr_of(n)),
            ),
            Output::Barrier { token, node } => self.send_barrier(token, node),
            Output::Marker {
                token,
                node,
                service_slot,
            } => self.send_marker(token, node, service_slot),
            Output::GateOpened { token, timed_out } => {
                log::debug!("cluster: gate {token} open (timed out: {timed_out})");
                if timed_out {
                    add(&self.s.counters.cluster.gate_timeouts, 1);
                }
            }
            Output::Retire { node } => self.retire_node(node),
            Output::SendService { conn, slot } => self.send_service(conn, slot),
            Output::Redirected { slot, node } => {
                // The server's name for it when the `MOVED` gave one.
                let addr = redirect.cloned().or_else(|| {
                    let a = self.addr_of(node)?;
                    Some(topology::NodeAddr {
                        host: a.ip().to_string(),
                        port: a.port(),
                    })
                });
                if let Some(addr) = addr {
                    // The core rereads the map unless it already says so.
                    self.input(|core, now| core.handle_redirect(now, slot, addr));
                }
            }
            Output::RefreshSoon => self.input(|core, now| core.handle_degraded(now)),
            Output::SendCommand { id, node, asking } => self.send_command(id, node, asking),
            Output::CommandFailed { id, why } => self.command_failed(id, why),
            // Carried out under the lock.
            Output::Submit { .. } | Output::Table(_) => {}
        }
    }

    /// The address of a publish node.
    fn addr_of(&self, node: NodeId) -> Option<SocketAddr> {
        self.publ
            .iter()
            .find(|(_, (id, _))| *id == node)
            .map(|(a, _)| *a)
            .or_else(|| self.s.hold.engine(node)?.servers().first()?.tcp())
    }

    /// No route and no gate use `node` any more: its engine closes.
    fn retire_node(&mut self, node: NodeId) {
        self.publ.retain(|_, (id, _)| *id != node);
        if let Some(e) = self.s.hold.with(|p| p.engines.remove(&node)) {
            self.close_engine(&e);
        }
        self.count_nodes();
    }

    /// A publish the server redirected or refused for now: the core
    /// decides, with the node a redirect names opened first.
    pub(crate) fn retry(&mut self, r: Retry) {
        let Retry {
            msg,
            error,
            message,
        } = r;
        let (reply, named) = self.cluster_reply(error);
        let moves = matches!(reply, Reply::Moved { .. });
        let redirect = named.as_ref().map(|(_, a)| a);
        let own = Err(Error::Cluster {
            slot: msg.slot,
            reason: message.to_string().into(),
        });
        let verdict = self.publish_input(moves, redirect, |core, now| {
            core.handle_reply(now, *msg, reply)
        });
        let context = match named {
            Some((Err(e), _)) => format!("{message}; cannot connect: {e}"),
            _ => message.to_string(),
        };
        let _ = publish::carry_out(&self.s, verdict, own, &context, Room::Past);
    }

    /// A cluster error as the core's reply (of a publish or a command):
    /// the node a redirect names opened first; with the connect result
    /// and the server's name for that node.
    pub(crate) fn cluster_reply(
        &mut self,
        error: topology::ClusterError,
    ) -> (Reply, Option<Named>) {
        match error {
            topology::ClusterError::Moved { slot, addr } => {
                let to = self.target(addr.as_ref());
                (Reply::Moved { slot, to: to.0 }, to.1.zip(addr))
            }
            topology::ClusterError::Ask { slot, addr } => {
                let to = self.target(addr.as_ref());
                (Reply::Ask { slot, to: to.0 }, to.1.zip(addr))
            }
            topology::ClusterError::TryAgain => (Reply::TryAgain, None),
            topology::ClusterError::ClusterDown => (Reply::ClusterDown, None),
        }
    }

    /// Where a redirect points: a node the core knows (its publish engine
    /// opened now if need be), or why not; and the connect error.
    fn target(
        &mut self,
        addr: Option<&topology::NodeAddr>,
    ) -> (Target, Option<Result<NodeId, Error>>) {
        let Some(to) = addr.and_then(|a| crate::control_loop::topo::resolve(&*self.s.resolver, a))
        else {
            return (Target::NoAddress, None);
        };
        match self.publish_engine(to) {
            Ok(id) => (Target::Node(id), Some(Ok(id))),
            Err(e) => (Target::CannotConnect, Some(Err(e))),
        }
    }

    /// Time passed (or the hold needs a look): the core looks at its
    /// gates, due retries, releases and expiry, knowing which publish
    /// connections are up.
    pub(crate) fn publish_timeout(&mut self) {
        let links: Vec<(NodeId, bool)> = self
            .publ
            .values()
            .map(|(id, e)| (*id, e.is_connection_up(0, 0)))
            .collect();
        self.publish_input(false, None, |core, now| {
            for (id, up) in links {
                core.handle_link(id, up);
            }
            core.handle_timeout(now);
        });
    }
}

/// The node a redirect named: the connection to it (or why not), and the
/// server's name for it.
pub(crate) type Named = (Result<NodeId, Error>, topology::NodeAddr);

/// Derives the read table from the core's (the caller holds its write
/// lock): one slot's owner, with the nodes added at the end, or all of it.
fn install(t: &mut Routes, p: &PubState, change: TableChange) {
    let (owners, nodes) = p.core.table();
    let engine = |n: &NodeId| p.engines.get(n).cloned();
    match change {
        TableChange::Slot(slot) => {
            for n in nodes.get(t.engines.len()..).unwrap_or(&[]) {
                t.engines.extend(engine(n));
            }
            if let (Some(o), Some(&i)) = (
                t.owner.get_mut(usize::from(slot)),
                owners.get(usize::from(slot)),
            ) {
                *o = i;
            }
        }
        TableChange::All => {
            t.owner = owners.to_vec();
            t.engines = nodes.iter().filter_map(engine).collect();
        }
    }
    debug_assert_eq!(
        t.engines.len(),
        nodes.len(),
        "a routed node without an engine"
    );
    debug_assert!(t.owner == owners, "the read table differs from the core's");
}
