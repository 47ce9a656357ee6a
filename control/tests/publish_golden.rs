//! Golden transcripts of the publish side: named scenarios that drive
//! [`control::publish::PublishCore`] (inputs → what goes on the wire, what
//! is held, what ends), compared with `tests/golden/publish_<name>.txt`.
//! The script keeps only the world: which node owns each slot in the map,
//! and what is on each node's wire; every decision is the core's.
//! `UPDATE_GOLDEN=1 cargo test -p shardsub-control --test publish_golden`
//! rewrites them; review the diff like code.

use std::fmt::Write as _;
use std::time::Duration;

use control::publish::{
    CmdId, Failure, NodeId, Output, PublishConfig, PublishCore, Reply, Target, Verdict,
};
use control::{ConnId, ServiceNode, Time};
use topology::{Health, Node, NodeAddr, Role, Shard, SlotMap};

/// Every publish costs 100 bytes against the hold.
type Msg = control::Sample;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Node `nK` is `NodeId(K)` (one publish connection per node in these
/// scripts).
fn id(name: &str) -> NodeId {
    NodeId(name[1..].parse().expect("nodes are named nK"))
}

fn name(n: NodeId) -> String {
    format!("n{}", n.0)
}

/// A slot the map shows unassigned (a map read mid-failover).
const NONE: &str = "?";

/// The nodes `routes` name, each once.
fn nodes_of(routes: &[(u16, &'static str)]) -> Vec<&'static str> {
    let mut names: Vec<&str> = routes.iter().map(|r| r.1).filter(|&n| n != NONE).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// A slot map with each of `routes`' slots on its node (a primary at
/// `<name>:7000`); every other slot unassigned.
fn slot_map(routes: &[(u16, &'static str)]) -> SlotMap {
    let mut map = SlotMap::new();
    for n in nodes_of(routes) {
        let primary = Node {
            id: n.to_uppercase(),
            addr: Some(NodeAddr {
                host: n.into(),
                port: 7000,
            }),
            hostname: None,
            tls_port: None,
            role: Role::Primary,
            health: Health::Online,
            replication_offset: None,
        };
        let shard = map.push_shard(Shard {
            primary,
            replicas: vec![],
        });
        for &(slot, owner) in routes {
            if owner == n {
                map.assign(slot..=slot, shard);
            }
        }
    }
    map
}

/// A scripted control thread around one publish core: slots route to
/// named nodes, publishes are written to a node (logged), held, or end.
struct Script {
    now: Time,
    log: String,
    core: PublishCore<String, Msg>,
    /// The slot map: per slot, its owner.
    routes: Vec<(u16, &'static str)>,
    /// Publishes written and not answered, by node, in order.
    wire: Vec<(NodeId, Msg)>,
    /// Commands written and not answered, by node, in order.
    commands: Vec<(NodeId, CmdId)>,
    next_seq: u64,
}

impl Script {
    fn new(title: &str, routes: &[(u16, &'static str)]) -> Script {
        Script::with_hold(title, routes, ms(5000))
    }

    /// `hold`: how long a publish is held for an owner (zero: the hold is
    /// off).
    fn with_hold(title: &str, routes: &[(u16, &'static str)], hold: Duration) -> Script {
        let mut cfg = PublishConfig::new(routes.iter().map(|r| r.0).collect());
        cfg.max_redirects = 5;
        cfg.retry_window = ms(2000);
        cfg.hold_limit = hold;
        cfg.hold_messages = 1000;
        cfg.hold_bytes = 1 << 20;
        let mut s = Script {
            now: Time::ZERO,
            log: format!("# {title}\n"),
            core: PublishCore::new(cfg),
            routes: routes.to_vec(),
            wire: Vec::new(),
            commands: Vec::new(),
            next_seq: 0,
        };
        s.install();
        // The first map: its table and service channels, nothing to log.
        s.core.poll_outputs().for_each(drop);
        s
    }

    /// The map as `routes` stands: a publish connection to each primary
    /// not yet known, the map's routes, then a round of service channels
    /// (a marker goes only once the new owner's is known).
    fn install(&mut self) {
        let map = slot_map(&self.routes);
        let nodes = nodes_of(&self.routes);
        for &node in &nodes {
            if !self.core.is_up(id(node)) {
                self.core.handle_node(id(node), node.into());
            }
        }
        let plan = self
            .core
            .plan_map(&map, |shard| Some(id(&shard.primary.addr.as_ref()?.host)));
        self.core.apply_map(self.now, plan);
        let nodes: Vec<ServiceNode<String>> = nodes
            .into_iter()
            .map(|node| ServiceNode {
                node: node.into(),
                conn: Some(ConnId(id(node).0.into())),
                up: true,
                lost: false,
            })
            .collect();
        self.core.handle_services(
            &map,
            |n| n.addr.as_ref().map(|a| a.host.clone()),
            &nodes,
            true,
        );
    }

    fn at(&mut self, step: u64, what: &str) {
        self.now = self.now + ms(step);
        let _ = writeln!(self.log, "@{}ms {what}", self.now.as_millis());
    }

    fn out(&mut self, what: String) {
        let _ = writeln!(self.log, "  > {what}");
    }

    fn write(&mut self, node: NodeId, msg: Msg, asking: bool) {
        let probe = if msg.probe { " (probe)" } else { "" };
        let asking = if asking { " (asking)" } else { "" };
        self.out(format!(
            "spublish #{} s{} -> {}{probe}{asking}",
            msg.seq,
            msg.slot,
            name(node)
        ));
        self.wire.push((node, msg));
    }

    fn fail(&mut self, msg: Msg, why: Failure) {
        let why = match why {
            Failure::HoldFull { .. } => "hold full".to_string(),
            Failure::Expired { .. } => "held too long".to_string(),
            why => format!("{why:?}"),
        };
        self.out(format!("fail #{} ({why})", msg.seq));
    }

    /// Carries out what the core made of publish `seq`, then its outputs.
    fn verdict(&mut self, seq: u64, v: Verdict<Msg>) {
        match v {
            Verdict::Owner(msg) => {
                let Some(node) = self.core.owner(msg.slot) else {
                    panic!("#{seq} to an owner with none:\n{}", self.log);
                };
                self.write(node, msg, false);
            }
            Verdict::Send { node, msg, asking } => self.write(node, msg, asking),
            Verdict::Done(msg) => self.out(format!("done #{}", msg.seq)),
            Verdict::Held { evicted, .. } => {
                self.out(format!("held #{seq}"));
                for msg in evicted {
                    self.fail(
                        msg,
                        Failure::HoldFull {
                            messages: 0,
                            bytes: 0,
                        },
                    );
                }
            }
            Verdict::Waiting { at, parked, .. } => {
                let p = if parked { ", s parked" } else { "" };
                self.out(format!("retry #{seq} at {}ms{p}", at.as_millis()));
            }
            Verdict::Fail { msg, why } => self.fail(msg, why),
        }
        self.outputs();
    }

    /// Carries out the core's outputs, in order.
    fn outputs(&mut self) {
        let outputs: Vec<Output<Msg>> = self.core.poll_outputs().collect();
        for o in outputs {
            match o {
                Output::Submit { node, msg, asking } => self.write(node, msg, asking),
                Output::Fail { msg, why } => self.fail(msg, why),
                Output::GateClosed {
                    token,
                    from,
                    to,
                    slots,
                } => {
                    let to = to.map_or_else(|| "?".to_string(), name);
                    for s in slots {
                        self.out(format!("gate {token} s{s} ({} -> {to})", name(from)));
                    }
                }
                Output::Barrier { token, node } => {
                    self.out(format!("ping {} (barrier {token})", name(node)));
                }
                Output::Marker { token, node, .. } => {
                    self.out(format!("marker {token} on {}", name(node)));
                }
                Output::GateOpened { token, timed_out } => {
                    let why = if timed_out { " (timed out)" } else { "" };
                    self.out(format!("open gate {token}{why}"));
                }
                Output::Redirected { slot, node } => {
                    self.out(format!("route s{slot} -> {}", name(node)));
                }
                Output::SendCommand { id, node, asking } => {
                    let asking = if asking { " (asking)" } else { "" };
                    self.out(format!("command c{} -> {}{asking}", id.0, name(node)));
                    self.commands.push((node, id));
                }
                Output::CommandFailed { id, why } => {
                    self.out(format!("fail command c{} ({why:?})", id.0));
                }
                // The read table, retired connections, service channels
                // and refreshes are not in these transcripts.
                Output::Table(_)
                | Output::Retire { .. }
                | Output::SendService { .. }
                | Output::RefreshSoon => {}
            }
        }
    }

    /// The application publishes to `slot` (the fast path taken as the
    /// core's `Owner`).
    fn publish(&mut self, slot: u16) {
        self.next_seq += 1;
        let seq = self.next_seq;
        self.at(1, &format!("publish #{seq} s{slot}"));
        let msg = Msg::new(seq, slot, 100);
        let v = self.core.handle_publish(self.now, msg);
        self.verdict(seq, v);
    }

    /// The oldest publish on `node`'s wire.
    fn answered(&mut self, node: &str) -> Msg {
        let Some(i) = self.wire.iter().position(|w| w.0 == id(node)) else {
            panic!("nothing on {node}'s wire:\n{}", self.log);
        };
        self.wire.remove(i).1
    }

    /// `node` answers its oldest publish: taken (a probe's answer goes to
    /// the core; a plain one ends where it was read).
    fn taken(&mut self, node: &'static str) {
        let msg = self.answered(node);
        let seq = msg.seq;
        self.at(1, &format!("{node} takes #{seq}"));
        if !msg.probe {
            return self.out(format!("done #{seq}"));
        }
        self.out(format!("unpark s{}", msg.slot));
        let v = self.core.handle_reply(self.now, msg, Reply::Taken);
        self.verdict(seq, v);
    }

    /// `node` refuses its oldest publish for now (`TRYAGAIN`).
    fn tryagain(&mut self, node: &'static str) {
        let msg = self.answered(node);
        let seq = msg.seq;
        self.at(1, &format!("{node} refuses #{seq}: TRYAGAIN"));
        let v = self.core.handle_reply(self.now, msg, Reply::TryAgain);
        self.verdict(seq, v);
    }

    /// `node` redirects its oldest publish to `to` (`ask`: `ASK`, else
    /// `MOVED`); the control thread opens a publish connection to `to`
    /// first if it has none.
    fn redirect(&mut self, node: &'static str, to: &'static str, ask: bool) {
        let msg = self.answered(node);
        let (seq, slot) = (msg.seq, msg.slot);
        let what = if ask { "ASK" } else { "MOVED" };
        self.at(1, &format!("{node} redirects #{seq}: {what} {slot} {to}"));
        if !self.core.is_up(id(to)) {
            self.core.handle_node(id(to), to.into());
        }
        let to = Target::Node(id(to));
        let reply = if ask {
            Reply::Ask { slot, to }
        } else {
            Reply::Moved { slot, to }
        };
        let v = self.core.handle_reply(self.now, msg, reply);
        self.verdict(seq, v);
    }

    /// The application sends command `id` for a key in `slot`.
    fn command(&mut self, id: u64, slot: u16) {
        self.at(1, &format!("command c{id} s{slot}"));
        self.core.handle_command(self.now, CmdId(id), slot);
        self.outputs();
    }

    /// `node`'s oldest command.
    fn command_answered(&mut self, node: &str) -> CmdId {
        let Some(i) = self.commands.iter().position(|w| w.0 == id(node)) else {
            panic!("no command on {node}'s wire:\n{}", self.log);
        };
        self.commands.remove(i).1
    }

    /// `node` answers its oldest command (the caller's reply: it ends).
    fn command_done(&mut self, node: &'static str) {
        let c = self.command_answered(node);
        self.at(1, &format!("{node} answers command c{}", c.0));
        self.core.handle_command_done(c);
        self.out(format!("done command c{}", c.0));
    }

    /// `node` answers its oldest command `MOVED <slot> <to>`.
    fn command_moved(&mut self, node: &'static str, slot: u16, to: &'static str) {
        let c = self.command_answered(node);
        self.at(
            1,
            &format!("{node} redirects command c{}: MOVED {slot} {to}", c.0),
        );
        if !self.core.is_up(id(to)) {
            self.core.handle_node(id(to), to.into());
        }
        let reply = Reply::Moved {
            slot,
            to: Target::Node(id(to)),
        };
        self.core.handle_command_reply(self.now, c, reply);
        self.outputs();
    }

    /// `node`'s connection drops: what was on its wire was not sent.
    fn conn_down(&mut self, node: &'static str) {
        self.at(1, &format!("{node} connection down"));
        self.core.handle_link(id(node), false);
        while self.wire.iter().any(|w| w.0 == id(node)) {
            let msg = self.answered(node);
            let seq = msg.seq;
            let v = self.core.handle_reply(self.now, msg, Reply::NotConnected);
            self.verdict(seq, v);
        }
    }

    fn conn_up(&mut self, node: &'static str) {
        self.at(1, &format!("{node} connection up"));
        self.core.handle_link(id(node), true);
    }

    /// A new map moves `moves`' slots (the core gates each slot that
    /// leaves a node until that node is drained).
    fn new_map(&mut self, moves: &[(u16, &'static str)]) {
        self.at(1, &format!("map: {moves:?}"));
        for &(slot, to) in moves {
            if let Some(r) = self.routes.iter_mut().find(|r| r.0 == slot) {
                r.1 = to;
            }
        }
        self.install();
        self.outputs();
    }

    fn barrier(&mut self, token: u64, ok: bool) {
        let what = if ok { "answered" } else { "failed" };
        self.at(1, &format!("barrier {token} {what}"));
        self.core.handle_barrier(self.now, token, ok);
        self.outputs();
    }

    fn marker_back(&mut self, token: u64) {
        self.at(1, &format!("marker {token} back at the new owner"));
        self.core.handle_marker(self.now, token);
        self.outputs();
    }

    fn marker_refused(&mut self, token: u64) {
        self.at(1, &format!("marker {token} refused (MOVED)"));
        self.core.handle_marker(self.now, token);
        self.outputs();
    }

    /// Time passes by `step`; the control thread calls the core's timeout
    /// (gates, due retries, releases, expiry).
    fn tick(&mut self, step: u64) {
        self.at(step, "look");
        self.core.handle_timeout(self.now);
        self.outputs();
    }

    fn check(&mut self, name: &str) {
        let stats = self.core.stats();
        let _ = writeln!(
            self.log,
            "end: {} on the wire, {} held, {} gates closed",
            self.wire.len(),
            stats.held_messages,
            stats.gates
        );
        assert!(self.commands.is_empty(), "commands left on the wire");
        assert_eq!(self.core.commands(), 0, "commands the core keeps");
        let path = format!(
            "{}/tests/golden/publish_{name}.txt",
            env!("CARGO_MANIFEST_DIR")
        );
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &self.log).unwrap();
            return;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            self.log, want,
            "transcript publish_{name} differs (UPDATE_GOLDEN=1 rewrites it)"
        );
    }
}

#[test]
fn failover_holds_the_slot_until_the_old_node_forwarded_everything() {
    let mut s = Script::new(
        "failover: slot 6144 moves n2 -> n3, n2 now its replica",
        &[(6144, "n2")],
    );
    s.publish(6144);
    s.publish(6144);
    s.new_map(&[(6144, "n3")]);
    s.publish(6144); // held behind the gate
    s.taken("n2");
    s.taken("n2");
    s.barrier(1, true);
    s.publish(6144);
    s.tick(20); // another marker
    s.marker_back(1);
    s.tick(5);
    s.taken("n3");
    s.taken("n3");
    s.publish(6144);
    s.taken("n3");
    s.check("failover");
}

#[test]
fn migration_opens_the_gate_when_the_old_node_refuses_the_marker() {
    let mut s = Script::new(
        "migration: slot 2048 moves n0 -> n2, n0 still a primary",
        &[(2048, "n0"), (6144, "n2")],
    );
    s.publish(2048);
    s.publish(6144);
    s.new_map(&[(2048, "n2")]);
    s.publish(2048);
    s.publish(6144); // another slot: not held
    s.taken("n0");
    s.barrier(1, true);
    s.marker_refused(1);
    s.tick(5);
    s.taken("n2");
    s.taken("n2");
    s.taken("n2");
    s.check("migration");
}

#[test]
fn kill_9_holds_until_the_new_owner_takes_a_probe() {
    let mut s = Script::new("kill -9 of n4 (slot 14336); n5 promoted", &[(14336, "n4")]);
    s.publish(14336);
    s.conn_down("n4");
    s.publish(14336);
    s.publish(14336);
    s.tick(5); // owner down: nothing goes
    s.new_map(&[(14336, "n5")]);
    s.barrier(1, false); // n4 is gone
    s.tick(5); // the oldest alone, as a probe
    s.publish(14336);
    s.tryagain("n5"); // just promoted: not ready
    s.tick(20);
    s.taken("n5");
    s.tick(5);
    s.taken("n5");
    s.taken("n5");
    s.taken("n5");
    s.check("kill_9");
}

#[test]
fn tryagain_parks_the_slot_and_retries_alone() {
    let mut s = Script::new("TRYAGAIN on slot 10240 of n2", &[(10240, "n2")]);
    s.publish(10240);
    s.publish(10240);
    s.tryagain("n2"); // #1: parked
    s.tryagain("n2"); // #2 was on the wire: joins the queue behind #1
    s.publish(10240); // held
    s.tick(20); // #1 alone
    s.tryagain("n2"); // again: 40 ms
    s.tick(40);
    s.taken("n2");
    s.tick(5); // #2 was refused too: alone first
    s.taken("n2");
    s.tick(5); // then the rest
    s.taken("n2");
    s.check("tryagain");
}

#[test]
fn a_dropped_connection_holds_until_it_is_back_and_takes_a_probe() {
    let mut s = Script::new(
        "n0's publish connection drops and comes back (slot 2048)",
        &[(2048, "n0")],
    );
    s.publish(2048);
    s.publish(2048);
    s.conn_down("n0");
    s.publish(2048);
    s.tick(5);
    s.conn_up("n0");
    s.tick(5); // the oldest alone
    s.taken("n0");
    s.tick(5);
    s.taken("n0");
    s.taken("n0");
    s.check("reconnect");
}

#[test]
fn a_moved_moves_the_route_behind_a_gate_and_an_ask_does_not() {
    let mut s = Script::new(
        "slot 5 migrates n0 -> n1: ASK, then MOVED before the map shows it",
        &[(5, "n0")],
    );
    s.publish(5);
    s.publish(5);
    s.redirect("n0", "n1", true); // #1 once to n1; the route stays
    s.publish(5); // still to n0
    s.redirect("n0", "n1", false); // #2: the route moves, behind a gate
    s.publish(5); // held behind the gate
    s.redirect("n0", "n1", false); // #3 follows: the route is n1 already
    s.barrier(1, true);
    s.tick(20); // no marker: n1's service channel is not known yet
    s.new_map(&[(5, "n1")]);
    s.tick(20); // the marker
    s.marker_refused(1);
    s.tick(5);
    s.taken("n1");
    s.taken("n1");
    s.taken("n1");
    s.taken("n1");
    s.check("moved_ask");
}

#[test]
fn a_publish_with_no_owner_is_held_until_a_map_names_one() {
    let mut s = Script::new(
        "the first map shows slot 7 with no owner (mid-failover); a later one n1",
        &[(7, NONE)],
    );
    s.publish(7); // no owner, nothing held: held
    s.tick(5); // still no owner: nothing goes
    s.new_map(&[(7, "n1")]);
    s.tick(5); // the oldest alone, as a probe
    s.publish(7);
    s.taken("n1");
    s.tick(5);
    s.taken("n1");
    s.check("no_owner");
}

#[test]
fn with_the_hold_off_a_publish_with_no_owner_waits_for_a_retry() {
    let mut s = Script::with_hold(
        "n0 (slot 7) dies, the hold off; a map shows no owner, a later one n1",
        &[(7, "n0")],
        Duration::ZERO,
    );
    s.new_map(&[(7, NONE)]);
    s.barrier(1, false);
    s.tick(5);
    s.publish(7); // no owner: retried after a backoff (and a refresh)
    s.new_map(&[(7, "n1")]);
    s.tick(20); // the retry goes to the new owner
    s.taken("n1");
    s.check("no_owner_no_hold");
}

#[test]
fn a_commands_moved_moves_the_route_and_the_next_publish_follows_it() {
    let mut s = Script::new(
        "slot 5 migrates n0 -> n1: a command's MOVED moves the route before the map shows it",
        &[(5, "n0")],
    );
    s.publish(5);
    s.command(1, 5);
    s.command_moved("n0", 5, "n1"); // the route moves, behind a gate
    s.publish(5); // held behind the gate, for n1
    s.command_done("n1");
    s.taken("n0");
    s.barrier(1, true);
    s.new_map(&[(5, "n1")]);
    s.tick(20); // the marker
    s.marker_refused(1);
    s.tick(5);
    s.taken("n1");
    s.command(2, 5); // straight to n1
    s.command_done("n1");
    s.check("command_moved");
}
