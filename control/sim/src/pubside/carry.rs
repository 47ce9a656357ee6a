//! The control thread's side of the publish core: connections, the
//! core's inputs, and its verdicts and outputs carried out in order.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::vec::Vec;
use core::time::Duration;

use control::publish::{NodeId, Output, Reply, Target, Verdict};
use control::{ConnId, ServiceNode, Time};
use topology::{ClusterError, NodeAddr};

use super::{Answer, Flight, Link, PubEv, Req, Write};
use crate::drive::{Ev, Sim};
use crate::publish::{msg, Msg};

impl Sim {
    /// The publish connection to `addr`, opened on first use (as the
    /// driver's `publish_engine`).
    pub(super) fn open_link(&mut self, addr: &NodeAddr) -> NodeId {
        if let Some(&id) = self.publ.ids.get(addr) {
            return id;
        }
        self.publ.next_id += 1;
        let id = NodeId(self.publ.next_id);
        let node = self.cluster.node_at(addr);
        let up = node.is_some_and(|n| self.cluster.nodes[n].alive);
        self.publ.ids.insert(addr.clone(), id);
        self.publ.links.insert(
            id,
            Link {
                node,
                up,
                to_server: Time::ZERO,
                to_core: Time::ZERO,
                pending: BTreeSet::new(),
            },
        );
        self.publ.core.handle_node(id, addr.clone());
        id
    }

    /// Writes `req` on `id`'s connection.
    pub(super) fn write(&mut self, id: NodeId, req: Req) {
        let Some(l) = self.publ.links.get(&id) else {
            self.pfail(&format!("{req:?} on {id:?}, retired"));
        };
        let (up, node) = (l.up, l.node);
        self.publ.next_req += 1;
        let r = self.publ.next_req;
        self.publ.reqs.insert(
            r,
            Flight {
                link: id,
                req,
                failed: !up,
            },
        );
        if !up {
            let detect = Duration::from_micros(self.publ.rng.range(10, 500));
            let answer = match self.publ.reqs[&r].req {
                Req::Publish(..) => Answer::NotSent,
                Req::Barrier(_) => Answer::Barrier(false),
                Req::Marker(..) => Answer::MarkerRefused,
            };
            self.push(self.now + detect, Ev::Pub(PubEv::Answer(r, answer, true)));
            return;
        }
        let d = self.pdelay();
        let hole = node.map_or(Time::ZERO, |n| self.cluster.nodes[n].hole_until);
        let Some(l) = self.publ.links.get_mut(&id) else {
            return;
        };
        let at = (self.now + d).max(l.to_server).max(hole);
        l.to_server = at;
        l.pending.insert(r);
        self.push(at, Ev::Pub(PubEv::Arrive(r)));
    }

    /// Sends publish `m` to `id` (`asking` first).
    pub(super) fn submit(&mut self, id: NodeId, m: Msg, asking: bool) {
        if self.publ.lost.contains(&m.seq) {
            self.pfail(&format!("{} submitted again after it was lost", m.seq));
        }
        if let Some(e) = self.publ.ended.get(&m.seq) {
            self.pfail(&format!("{} submitted after it ended {e:?}", m.seq));
        }
        let step = self.publ.step;
        let now = self.now;
        self.publ.flights.entry(m.seq).or_default().push(Write {
            step,
            at: now,
            answer: None,
        });
        if m.probe {
            self.publ.totals.probes += 1;
        }
        if self.trace {
            std::eprintln!(
                "{} > publish {} to {id:?} (probe {}, asking {asking})",
                self.now,
                m.seq,
                m.probe
            );
        }
        self.write(id, Req::Publish(m, asking));
    }

    /// A publish is made.
    pub(super) fn publish(&mut self, seq: u64) {
        let i = self.publ.rng.index(self.publ.hot.len());
        let slot = self.publ.hot[i];
        self.publ.made.insert(seq, self.now);
        self.publ.slot_of.insert(seq, slot);
        self.publ.last_made.insert(slot, self.now);
        self.publ.totals.published += 1;
        let m = msg(seq, slot);
        // The fast path: the read table's owner, while nothing is held.
        let owner = (self.publ.table.0.get(usize::from(slot)))
            .and_then(|&i| self.publ.table.1.get(usize::from(i)).copied());
        if let Some(id) = owner.filter(|_| !self.publ.core.holds_any()) {
            return self.submit(id, m, false);
        }
        let v = self.publ.core.handle_publish(self.now, m);
        self.verdict(v);
    }

    /// Carries out what the core made of a message.
    pub(super) fn verdict(&mut self, v: Verdict<Msg>) {
        if self.trace {
            std::eprintln!("{} > verdict {v:?}", self.now);
        }
        match v {
            Verdict::Owner(m) => {
                let owner = (self.publ.table.0.get(usize::from(m.slot)))
                    .and_then(|&i| self.publ.table.1.get(usize::from(i)).copied());
                match owner {
                    Some(id) => self.submit(id, m, false),
                    None => self.pfail(&format!("{} to an owner with none", m.seq)),
                }
            }
            Verdict::Send { node, msg, asking } => self.submit(node, msg, asking),
            Verdict::Done(m) => self.end(m.seq, true),
            Verdict::Held { evicted, .. } => {
                self.publ.totals.held += 1;
                for m in evicted {
                    self.end(m.seq, false);
                }
            }
            Verdict::Waiting { .. } => {}
            Verdict::Fail { msg, why } => self.failed(msg.seq, why),
        }
    }

    /// Carries out the publish core's outputs, in order, and checks the
    /// derived table and the timer; then the map and service channels,
    /// as the driver's `sync`.
    pub(crate) fn pub_drain(&mut self) {
        if !self.publ.on {
            return;
        }
        self.sync_routes();
        let mut carried = false;
        while let Some(o) = self.publ.core.poll_output() {
            carried = true;
            self.output(o);
        }
        // P4: the derived table is the core's (compared after every step
        // that carried anything out: a route changes only with an input
        // that has outputs, and 16,384 slots a step would dominate the
        // sweep).
        let (owners, nodes) = self.publ.core.table();
        if carried && (self.publ.table.0 != owners || self.publ.table.1 != nodes) {
            self.pfail("the derived read table differs from the core's");
        }
        let held = self.publ.core.stats().held_messages;
        if held > self.publ.max_messages {
            self.pfail(&format!(
                "{held} held, more than {}",
                self.publ.max_messages
            ));
        }
        // After the core's timeout its next one lies later (after an
        // input it may be due at once: the control thread is woken).
        let looked = core::mem::take(&mut self.publ.looked);
        if let Some(t) = self
            .publ
            .core
            .poll_timeout()
            .filter(|&t| looked && t <= self.now)
        {
            self.pfail(&format!("poll_timeout {t} not after {}", self.now));
        }
    }

    /// A new map in the subscribe core: connections to its primaries, then
    /// routes (and gates) from it; service channels when due.
    pub(super) fn sync_routes(&mut self) {
        let epoch = self.core.map_epoch();
        let changed = epoch != self.publ.epoch;
        if changed {
            self.publ.epoch = epoch;
            self.publ.totals.maps += 1;
            let ids = &self.publ.ids;
            let new: Vec<NodeAddr> = (self.core.map().shards().iter())
                .filter_map(|sh| sh.primary.addr.as_ref())
                .filter(|a| !ids.contains_key(*a))
                .cloned()
                .collect();
            for a in new {
                self.open_link(&a);
            }
            let map = self.core.map();
            let ids = &self.publ.ids;
            let plan = (self.publ.core).plan_map(map, |sh| {
                sh.primary.addr.as_ref().and_then(|a| ids.get(a)).copied()
            });
            self.publ.core.apply_map(self.now, plan);
        }
        if changed || core::mem::take(&mut self.publ.services_due) {
            let core = &self.core;
            let lost = &self.publ.lost_services;
            let nodes: Vec<ServiceNode<NodeAddr>> = (core.layout().nodes().iter())
                .map(|n| {
                    let conn = core.node_conn(&n.key, 0);
                    ServiceNode {
                        node: n.key.addr.clone(),
                        conn,
                        up: conn.is_some_and(|c| core.is_conn_up(c)),
                        lost: conn.is_some_and(|c| lost.contains(&c)),
                    }
                })
                .collect();
            (self.publ.core).handle_services(core.map(), |n| n.addr.clone(), &nodes, changed);
        }
    }

    pub(super) fn output(&mut self, o: Output<Msg>) {
        if self.trace {
            std::eprintln!("{} > output {o:?}", self.now);
        }
        match o {
            Output::Submit { node, msg, asking } => self.submit(node, msg, asking),
            Output::Fail { msg, why } => self.failed(msg.seq, why),
            Output::Table(change) => {
                let (owners, nodes) = self.publ.core.table();
                let t = &mut self.publ.table;
                match change {
                    control::publish::TableChange::All => {
                        t.0 = owners.to_vec();
                        t.1 = nodes.to_vec();
                    }
                    control::publish::TableChange::Slot(s) => {
                        t.1.extend_from_slice(nodes.get(t.1.len()..).unwrap_or(&[]));
                        if t.0.len() < owners.len() {
                            t.0.resize(owners.len(), control::NO_ROUTE);
                        }
                        if let (Some(o), Some(&i)) =
                            (t.0.get_mut(usize::from(s)), owners.get(usize::from(s)))
                        {
                            *o = i;
                        }
                    }
                }
            }
            Output::GateClosed {
                token,
                slots,
                from,
                to,
            } => {
                if self.trace {
                    let f = self.addr_of(from);
                    let t = to.and_then(|t| self.addr_of(t));
                    std::eprintln!(
                        "{} > gate {token} closed {f:?} -> {t:?} {slots:?}",
                        self.now
                    );
                }
                self.publ.totals.gates += 1;
                for &s in &slots {
                    self.publ.gate_closes.entry(s).or_default().push(self.now);
                }
                self.publ.gates.insert(token, (self.now, slots));
            }
            Output::Barrier { token, node } => self.write(node, Req::Barrier(token)),
            Output::Marker {
                token,
                node,
                service_slot,
            } => {
                self.publ.totals.markers += 1;
                if self.trace {
                    std::eprintln!("{} > gate {token} marker to slot {service_slot}", self.now);
                }
                self.write(node, Req::Marker(token, service_slot));
            }
            Output::GateOpened { token, timed_out } => {
                let Some((closed, slots)) = self.publ.gates.remove(&token) else {
                    self.pfail(&format!("gate {token} opened, never closed or twice"));
                };
                // P5: at the latest at its timeout.
                let limit = self.publ.core.config().gate_timeout;
                if self.now.since(closed) > limit {
                    self.pfail(&format!(
                        "gate {token} closed at {closed}, opened at {}",
                        self.now
                    ));
                }
                if self.trace {
                    std::eprintln!("{} > gate {token} opened (timed out {timed_out})", self.now);
                }
                if timed_out {
                    self.publ.totals.gate_timeouts += 1;
                    self.publ.timed_out.extend(slots);
                }
            }
            Output::Retire { node } => {
                // Closed: a later connection to the address is a new node.
                self.publ.ids.retain(|_, i| *i != node);
                self.retire_link(node);
            }
            Output::SendService { conn, slot } => {
                self.publ.lost_services.remove(&conn);
                let n = self.conn_node.get(&conn).copied();
                self.send_conn(n, conn, Ev::Pub(PubEv::Service(conn, slot)));
            }
            Output::Redirected { slot, node } => {
                if let Some(addr) = self.addr_of(node) {
                    self.core.handle_redirect(self.now, slot, addr);
                }
            }
            Output::RefreshSoon => self.core.handle_degraded(self.now),
            // The world sends the core no command.
            Output::SendCommand { .. } | Output::CommandFailed { .. } => {
                self.pfail("a command's output, and no command was given")
            }
        }
    }

    /// The engine of a retired node closes: what is on its wire fails.
    pub(super) fn retire_link(&mut self, id: NodeId) {
        let Some(l) = self.publ.links.get_mut(&id) else {
            return;
        };
        let pending = core::mem::take(&mut l.pending);
        l.up = false;
        for r in pending {
            if let Some(f) = self.publ.reqs.get_mut(&r) {
                f.failed = true;
                let answer = match f.req {
                    Req::Publish(..) => Answer::Lost,
                    Req::Barrier(_) => Answer::Barrier(false),
                    Req::Marker(..) => Answer::MarkerRefused,
                };
                self.push(self.now, Ev::Pub(PubEv::Answer(r, answer, true)));
            }
        }
        self.publ.links.remove(&id);
    }

    /// The driver hears that the service channel on `conn` is gone.
    pub(crate) fn service_lost(&mut self, conn: ConnId) {
        if !self.publ.on {
            return;
        }
        self.publ.lost_services.insert(conn);
        self.publ.services_due = true;
        self.core.handle_slot_lost(self.now);
    }

    /// The control thread reads the answer to request `r`.
    pub(super) fn answer(&mut self, r: u64, answer: Answer, forced: bool) {
        let Some(f) = self.publ.reqs.get(&r) else {
            return;
        };
        if f.failed && !forced {
            return; // its connection's failure answers it
        }
        let Some(f) = self.publ.reqs.remove(&r) else {
            return;
        };
        if let Some(l) = self.publ.links.get_mut(&f.link) {
            l.pending.remove(&r);
        }
        let now = self.now;
        match f.req {
            Req::Barrier(token) => {
                let ok = matches!(answer, Answer::Barrier(true));
                if self.trace {
                    std::eprintln!("{} > gate {token} barrier answered {ok}", self.now);
                }
                self.publ.core.handle_barrier(now, token, ok);
            }
            Req::Marker(token, _) => {
                if self.trace {
                    std::eprintln!("{} > gate {token} marker {answer:?}", self.now);
                }
                if matches!(answer, Answer::MarkerRefused) {
                    self.publ.core.handle_marker(now, token);
                }
            }
            Req::Publish(m, _) => {
                let step = self.publ.step;
                if let Some(w) = self.publ.flights.get_mut(&m.seq).and_then(|f| f.last_mut()) {
                    w.answer = Some((step, now));
                }
                let reply = match answer {
                    // A plain reply ends its publish without the core.
                    Answer::Taken if !m.probe => return self.end(m.seq, true),
                    Answer::Taken => Reply::Taken,
                    Answer::NotSent => Reply::NotConnected,
                    Answer::Lost => {
                        self.publ.totals.lost += 1;
                        self.publ.lost.insert(m.seq);
                        Reply::Lost
                    }
                    Answer::Routing(e) => {
                        self.publ.totals.redirects += 1;
                        match e {
                            ClusterError::Moved { slot, addr } => {
                                self.publ.totals.moved += 1;
                                let to = self.target(addr.as_ref());
                                Reply::Moved { slot, to }
                            }
                            ClusterError::Ask { slot, addr } => {
                                self.publ.totals.asked += 1;
                                let to = self.target(addr.as_ref());
                                Reply::Ask { slot, to }
                            }
                            ClusterError::TryAgain => Reply::TryAgain,
                            ClusterError::ClusterDown => Reply::ClusterDown,
                        }
                    }
                    Answer::Barrier(_) | Answer::MarkerRefused | Answer::MarkerTaken => {
                        self.pfail("a marker's answer to a publish")
                    }
                };
                let v = self.publ.core.handle_reply(now, m, reply);
                self.verdict(v);
            }
        }
    }

    /// Where a redirect points (its node's connection opened first).
    pub(super) fn target(&mut self, addr: Option<&NodeAddr>) -> Target {
        match addr {
            Some(a) => Target::Node(self.open_link(a)),
            None => Target::NoAddress,
        }
    }

    /// The core's timeout, with every connection's state first (as the
    /// driver's `publish_timeout`).
    pub(crate) fn pub_timeout(&mut self) {
        let links: Vec<(NodeId, bool)> = self.publ.links.iter().map(|(i, l)| (*i, l.up)).collect();
        for (id, up) in links {
            self.publ.core.handle_link(id, up);
        }
        self.publ.step += 1;
        self.publ.looked = true;
        self.publ.core.handle_timeout(self.now);
    }
}
