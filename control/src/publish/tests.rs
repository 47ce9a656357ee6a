//! The publish core against the golden scenarios
//! (`control/tests/golden/publish_*.txt`), as asserts, and the decisions
//! it owns: `MOVED` against `ASK`, the no-owner fallback, gate chunking.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::time::Duration;

use super::*;
use crate::test_maps::{map, msg, Msg};
use crate::ServiceNode;

/// Node `nK` is `NodeId(K)`.
fn id(host: &str) -> NodeId {
    NodeId(host[1..].parse().unwrap())
}

/// A driver of the core: nodes named `n0`, `n1`, ...; what goes on each
/// node's wire; every step's verdict and outputs in words (the read
/// table's and service channels' outputs left out).
struct World {
    core: PublishCore<String, Msg>,
    now: Time,
    wire: Vec<(NodeId, Msg)>,
    seq: u64,
}

impl World {
    fn new(watched: &[u16], shards: &[(&str, u16, u16)]) -> World {
        World::with(PublishConfig::new(watched.to_vec()), shards)
    }

    fn with(cfg: PublishConfig, shards: &[(&str, u16, u16)]) -> World {
        let mut w = World {
            core: PublishCore::new(cfg),
            now: Time::ZERO,
            wire: Vec::new(),
            seq: 0,
        };
        w.map(0, shards);
        w
    }

    fn at(&mut self, step: u64) {
        self.now = self.now + Duration::from_millis(step);
    }

    /// A new map of `(host, first, last)` shards; every node up, with a
    /// service channel.
    fn map(&mut self, step: u64, shards: &[(&str, u16, u16)]) -> Vec<String> {
        self.at(step);
        let ids: Vec<(String, String, u16, u16)> = shards
            .iter()
            .map(|&(h, a, b)| (h.to_uppercase(), h.to_string(), a, b))
            .collect();
        let spec: Vec<(&str, &str, u16, u16)> = ids
            .iter()
            .map(|(i, h, a, b)| (i.as_str(), h.as_str(), *a, *b))
            .collect();
        let m = map(&spec);
        for &(h, _, _) in shards {
            if !self.core.nodes.contains_key(&id(h)) {
                self.core.handle_node(id(h), h.to_string());
            }
        }
        let host = |sh: &topology::Shard| sh.primary.addr.as_ref().map(|a| a.host.clone());
        let plan = self.core.plan_map(&m, |sh| host(sh).map(|h| id(&h)));
        self.core.apply_map(self.now, plan);
        let nodes: Vec<ServiceNode<String>> = shards
            .iter()
            .map(|&(h, _, _)| ServiceNode {
                node: h.to_string(),
                conn: Some(ConnId(u64::from(id(h).0))),
                up: true,
                lost: false,
            })
            .collect();
        let at = |n: &topology::Node| n.addr.as_ref().map(|a| a.host.clone());
        self.core.handle_services(&m, at, &nodes, true);
        self.drain()
    }

    fn publish(&mut self, step: u64, slot: u16) -> Vec<String> {
        self.at(step);
        self.seq += 1;
        let v = self.core.handle_publish(self.now, msg(self.seq, slot));
        let mut said = self.verdict(self.seq, v);
        said.extend(self.drain());
        said
    }

    /// `node` answers its oldest publish with `reply`.
    fn reply(&mut self, step: u64, node: &str, reply: Reply) -> Vec<String> {
        self.at(step);
        let i = self.wire.iter().position(|w| w.0 == id(node)).unwrap();
        let msg = self.wire.remove(i).1;
        let seq = msg.seq;
        let v = self.core.handle_reply(self.now, msg, reply);
        let mut said = self.verdict(seq, v);
        said.extend(self.drain());
        said
    }

    /// `node`'s connection goes down (what was on its wire comes back
    /// unsent) or up.
    fn link(&mut self, step: u64, node: &str, up: bool) -> Vec<String> {
        self.at(step);
        self.core.handle_link(id(node), up);
        let mut said = Vec::new();
        while let Some(i) = self.wire.iter().position(|w| w.0 == id(node)) {
            let msg = self.wire.remove(i).1;
            let seq = msg.seq;
            let v = self.core.handle_reply(self.now, msg, Reply::NotConnected);
            said.extend(self.verdict(seq, v));
        }
        said.extend(self.drain());
        said
    }

    /// A command `id` for `slot`.
    fn command(&mut self, step: u64, id: u64, slot: u16) -> Vec<String> {
        self.at(step);
        self.core.handle_command(self.now, CmdId(id), slot);
        self.drain()
    }

    /// What came back for command `id`.
    fn command_reply(&mut self, step: u64, id: u64, reply: Reply) -> Vec<String> {
        self.at(step);
        self.core.handle_command_reply(self.now, CmdId(id), reply);
        self.drain()
    }

    fn tick(&mut self, step: u64) -> Vec<String> {
        self.at(step);
        self.core.handle_timeout(self.now);
        assert!(self.core.poll_timeout().is_none_or(|t| t > self.now));
        self.drain()
    }

    fn barrier(&mut self, step: u64, token: u64, ok: bool) -> Vec<String> {
        self.at(step);
        self.core.handle_barrier(self.now, token, ok);
        self.drain()
    }

    fn marker(&mut self, step: u64, token: u64) -> Vec<String> {
        self.at(step);
        self.core.handle_marker(self.now, token);
        self.drain()
    }

    fn send(&mut self, node: NodeId, msg: Msg, how: &str) -> String {
        let probe = if msg.probe { " (probe)" } else { "" };
        let said = format!("send #{} n{}{probe}{how}", msg.seq, node.0);
        self.wire.push((node, msg));
        said
    }

    fn verdict(&mut self, seq: u64, v: Verdict<Msg>) -> Vec<String> {
        match v {
            Verdict::Owner(msg) => {
                let node = self.core.owner(msg.slot).unwrap();
                vec![self.send(node, msg, "")]
            }
            Verdict::Send { node, msg, asking } => {
                let how = if asking { " asking" } else { "" };
                vec![self.send(node, msg, how)]
            }
            Verdict::Done(m) => vec![format!("done #{}", m.seq)],
            Verdict::Held { evicted, .. } => {
                let mut said = vec![format!("held #{seq}")];
                said.extend(evicted.iter().map(|m| format!("fail #{} HoldFull", m.seq)));
                said
            }
            Verdict::Waiting { at, parked, .. } => {
                let p = if parked { ", parked" } else { "" };
                vec![format!("wait #{seq} to {}ms{p}", at.as_millis())]
            }
            Verdict::Fail { msg, why } => vec![format!("fail #{} {why:?}", msg.seq)],
        }
    }

    fn drain(&mut self) -> Vec<String> {
        let outputs: Vec<Output<Msg>> = self.core.poll_outputs().collect();
        let mut said = Vec::new();
        for o in outputs {
            said.push(match o {
                Output::Submit { node, msg, asking } => {
                    let how = if asking { " asking" } else { "" };
                    self.send(node, msg, how)
                }
                Output::Fail { msg, why } => format!("fail #{} {why:?}", msg.seq),
                Output::Barrier { token, node } => format!("barrier {token} n{}", node.0),
                Output::Marker {
                    token,
                    node,
                    service_slot,
                } => format!("marker {token} n{} s{service_slot}", node.0),
                Output::GateOpened { token, timed_out } => match timed_out {
                    true => format!("open {token} (timed out)"),
                    false => format!("open {token}"),
                },
                Output::Retire { node } => format!("retire n{}", node.0),
                Output::Redirected { slot, node } => format!("redirected s{slot} n{}", node.0),
                Output::RefreshSoon => "refresh".into(),
                Output::GateClosed {
                    token,
                    from,
                    to,
                    slots,
                } => {
                    let to = to.map_or("none".into(), |n| format!("n{}", n.0));
                    format!("gate {token} {slots:?} n{} -> {to}", from.0)
                }
                Output::SendCommand { id, node, asking } => {
                    let how = if asking { " asking" } else { "" };
                    format!("command c{} n{}{how}", id.0, node.0)
                }
                Output::CommandFailed { id, why } => format!("command c{} fails {why:?}", id.0),
                Output::Table(_) | Output::SendService { .. } => continue,
            });
        }
        said
    }

    fn done(&self) {
        let s = self.core.stats();
        assert!(self.wire.is_empty(), "{:?}", self.wire);
        assert_eq!((s.held_messages, s.gates, s.waiting), (0, 0, 0));
        assert_eq!(self.core.commands(), 0);
        assert!(!self.core.holds_any());
    }
}

#[test]
fn failover_holds_the_slot_until_the_old_node_forwarded_everything() {
    let mut w = World::new(&[6144], &[("n2", 0, 16383)]);
    assert_eq!(w.publish(1, 6144), ["send #1 n2"]);
    assert_eq!(w.publish(1, 6144), ["send #2 n2"]);
    // n3 takes over; n2 (its replica now) routes nothing but marks.
    assert_eq!(
        w.map(1, &[("n3", 0, 16383)]),
        ["gate 1 [6144] n2 -> n3", "barrier 1 n2"]
    );
    assert_eq!(w.publish(1, 6144), ["held #3"]);
    assert_eq!(w.reply(1, "n2", Reply::Taken), ["done #1"]);
    assert_eq!(w.reply(1, "n2", Reply::Taken), ["done #2"]);
    // Answered is not delivered: the marker goes to n3's service channel.
    assert_eq!(w.barrier(1, 1, true), ["marker 1 n2 s0"]);
    assert_eq!(w.publish(1, 6144), ["held #4"]);
    assert_eq!(w.tick(20), ["marker 1 n2 s0"]);
    assert_eq!(w.marker(1, 1), ["open 1", "retire n2"]);
    assert_eq!(w.tick(5), ["send #3 n3", "send #4 n3"]);
    assert_eq!(w.reply(1, "n3", Reply::Taken), ["done #3"]);
    assert_eq!(w.reply(1, "n3", Reply::Taken), ["done #4"]);
    assert_eq!(w.publish(1, 6144), ["send #5 n3"]);
    assert_eq!(w.reply(1, "n3", Reply::Taken), ["done #5"]);
    w.done();
}

#[test]
fn migration_opens_the_gate_when_the_old_node_refuses_the_marker() {
    let mut w = World::new(&[2048, 6144], &[("n0", 0, 4095), ("n2", 4096, 16383)]);
    assert_eq!(w.publish(1, 2048), ["send #1 n0"]);
    assert_eq!(w.publish(1, 6144), ["send #2 n2"]);
    let moved = [("n0", 0, 2047), ("n2", 2048, 16383)];
    assert_eq!(w.map(1, &moved), ["gate 1 [2048] n0 -> n2", "barrier 1 n0"]);
    assert_eq!(w.publish(1, 2048), ["held #3"]);
    assert_eq!(w.publish(1, 6144), ["send #4 n2"]); // another slot
    assert_eq!(w.reply(1, "n0", Reply::Taken), ["done #1"]);
    assert_eq!(w.barrier(1, 1, true), ["marker 1 n0 s4096"]); // n2's channel
    assert_eq!(w.marker(1, 1), ["open 1"]); // refused: n0 is a primary
    assert_eq!(w.tick(5), ["send #3 n2"]);
    for seq in [2, 4, 3] {
        assert_eq!(w.reply(1, "n2", Reply::Taken), [format!("done #{seq}")]);
    }
    w.done();
}

#[test]
fn kill_9_holds_until_the_new_owner_takes_a_probe() {
    let mut w = World::new(&[14336], &[("n4", 0, 16383)]);
    assert_eq!(w.publish(1, 14336), ["send #1 n4"]);
    assert_eq!(w.link(1, "n4", false), ["held #1"]);
    assert_eq!(w.publish(1, 14336), ["held #2"]);
    assert_eq!(w.publish(1, 14336), ["held #3"]);
    assert!(w.tick(5).is_empty()); // owner down: nothing goes
    assert_eq!(
        w.map(1, &[("n5", 0, 16383)]),
        ["gate 1 [14336] n4 -> n5", "barrier 1 n4"]
    );
    assert_eq!(w.barrier(1, 1, false), ["open 1", "retire n4"]);
    assert_eq!(w.tick(5), ["send #1 n5 (probe)"]);
    assert_eq!(w.publish(1, 14336), ["held #4"]);
    assert_eq!(
        w.reply(1, "n5", Reply::TryAgain),
        ["wait #1 to 38ms, parked", "refresh"]
    );
    assert_eq!(w.now, Time::from_millis(18));
    assert_eq!(w.core.poll_timeout(), Some(Time::from_millis(21))); // the look
    assert_eq!(w.tick(20), ["send #1 n5 (probe)"]);
    assert_eq!(w.reply(1, "n5", Reply::Taken), ["done #1"]);
    assert_eq!(w.tick(5), ["send #2 n5", "send #3 n5", "send #4 n5"]);
    for seq in 2..=4 {
        assert_eq!(w.reply(1, "n5", Reply::Taken), [format!("done #{seq}")]);
    }
    w.done();
}

#[test]
fn tryagain_parks_the_slot_and_retries_alone() {
    let mut w = World::new(&[10240], &[("n2", 0, 16383)]);
    assert_eq!(w.publish(1, 10240), ["send #1 n2"]);
    assert_eq!(w.publish(1, 10240), ["send #2 n2"]);
    assert_eq!(
        w.reply(1, "n2", Reply::TryAgain),
        ["wait #1 to 23ms, parked", "refresh"]
    );
    // #2 was on the wire: it joins the queue behind #1.
    assert_eq!(w.reply(1, "n2", Reply::TryAgain), ["held #2", "refresh"]);
    assert_eq!(w.publish(1, 10240), ["held #3"]);
    assert_eq!(w.tick(20), ["send #1 n2 (probe)"]);
    assert_eq!(
        w.reply(1, "n2", Reply::TryAgain),
        ["wait #1 to 66ms, parked", "refresh"]
    );
    // 40 ms this time: not due at the next look.
    assert!(w.tick(5).is_empty());
    assert_eq!(w.tick(35), ["send #1 n2 (probe)"]);
    assert_eq!(w.reply(1, "n2", Reply::Taken), ["done #1"]);
    assert_eq!(w.tick(5), ["send #2 n2 (probe)"]); // refused too: alone
    assert_eq!(w.reply(1, "n2", Reply::Taken), ["done #2"]);
    assert_eq!(w.tick(5), ["send #3 n2"]);
    assert_eq!(w.reply(1, "n2", Reply::Taken), ["done #3"]);
    w.done();
}

#[test]
fn a_dropped_connection_holds_until_it_is_back_and_takes_a_probe() {
    let mut w = World::new(&[2048], &[("n0", 0, 16383)]);
    assert_eq!(w.publish(1, 2048), ["send #1 n0"]);
    assert_eq!(w.publish(1, 2048), ["send #2 n0"]);
    assert_eq!(w.link(1, "n0", false), ["held #1", "held #2"]);
    assert_eq!(w.publish(1, 2048), ["held #3"]);
    assert!(w.tick(5).is_empty());
    assert!(w.link(1, "n0", true).is_empty());
    assert_eq!(w.tick(5), ["send #1 n0 (probe)"]);
    assert_eq!(w.reply(1, "n0", Reply::Taken), ["done #1"]);
    assert_eq!(w.tick(5), ["send #2 n0", "send #3 n0"]);
    assert_eq!(w.reply(1, "n0", Reply::Taken), ["done #2"]);
    assert_eq!(w.reply(1, "n0", Reply::Taken), ["done #3"]);
    w.done();
}

#[test]
fn a_moved_moves_the_route_and_an_ask_does_not() {
    let mut w = World::new(&[5], &[("n0", 0, 16383)]);
    w.core.handle_node(NodeId(1), "n1".into());
    assert_eq!(w.publish(1, 5), ["send #1 n0"]);
    assert_eq!(w.publish(1, 5), ["send #2 n0"]);
    let to = Target::Node(NodeId(1));
    // ASK: this publish goes to n1 once; the route stays, no gate.
    let ask = Reply::Ask { slot: 5, to };
    assert_eq!(w.reply(1, "n0", ask), ["send #1 n1 asking"]);
    assert_eq!(w.core.owner(5), Some(NodeId(0)));
    assert_eq!(w.core.stats().gates, 0);
    // MOVED: the route moves (the table says so), the slot is gated
    // behind n0's barrier, and the subscribe core hears of it.
    let moved = Reply::Moved { slot: 5, to };
    assert_eq!(
        w.reply(1, "n0", moved),
        [
            "send #2 n1",
            "gate 1 [5] n0 -> n1",
            "barrier 1 n0",
            "redirected s5 n1"
        ]
    );
    assert_eq!(w.core.owner(5), Some(NodeId(1)));
    let (owners, nodes) = w.core.table();
    assert_eq!(nodes[usize::from(owners[5])], NodeId(1));
    assert_eq!(w.publish(1, 5), ["held #3"]);
    // Redirects are bounded, and one with no usable address is refused
    // for now (a refresh asked, retried within the window; the route
    // kept).
    let m = Msg {
        redirects: 5,
        ..msg(9, 5)
    };
    let v = w.core.handle_reply(w.now, m, moved);
    assert!(matches!(
        v,
        Verdict::Fail {
            why: Failure::Redirects { count: 5 },
            ..
        }
    ));
    let v = w.core.handle_reply(
        w.now,
        msg(9, 5),
        Reply::Ask {
            slot: 5,
            to: Target::NoAddress,
        },
    );
    assert!(matches!(v, Verdict::Waiting { .. }), "{v:?}");
    assert_eq!(w.drain(), ["refresh"]);
    assert_eq!(w.core.owner(5), Some(NodeId(1)));
}

#[test]
fn a_slot_leaving_for_no_owner_gets_a_gate_of_its_own() {
    let mut w = World::new(&[1, 2, 3, 4], &[("n0", 0, 16383)]);
    // Slots 1 and 2 leave for n1 together: one gate.
    let to_n1 = [("n1", 0, 2), ("n0", 3, 16383)];
    assert_eq!(w.map(1, &to_n1), ["gate 1 [1, 2] n0 -> n1", "barrier 1 n0"]);
    // Slots 3 and 4 leave n0 for no owner known (mid-change): a gate each,
    // so that each marks to its own slot's owner once known.
    let unassigned = [("n1", 0, 2), ("n0", 5, 16383)];
    assert_eq!(
        w.map(1, &unassigned),
        [
            "gate 2 [3] n0 -> none",
            "gate 3 [4] n0 -> none",
            "barrier 2 n0",
            "barrier 3 n0"
        ]
    );
    assert_eq!(w.barrier(1, 2, true), Vec::<String>::new()); // no owner yet
    assert_eq!(w.barrier(1, 3, true), Vec::<String>::new());
    // The next map names them apart: each gate marks to its own owner's
    // channel (n2's once it has one: the next marker).
    let apart = [("n1", 0, 3), ("n2", 4, 4), ("n0", 5, 16383)];
    assert_eq!(w.map(1, &apart), ["marker 2 n0 s0"]);
    assert_eq!(w.marker(1, 2), ["open 2"]);
    assert_eq!(w.tick(20), ["marker 3 n0 s4"]);
    assert_eq!(w.marker(1, 3), ["open 3"]);
    assert_eq!(w.barrier(1, 1, false), ["open 1"]);
    // The gated slots' empty entries go at the next look.
    assert!(w.core.holds_any());
    assert!(w.tick(5).is_empty());
    w.done();
}

#[test]
fn a_publish_with_no_owner_is_held_waits_or_fails() {
    // The hold on: held, and the control thread looks soon.
    let mut w = World::new(&[7], &[("n0", 100, 16383)]);
    let v = w.core.handle_publish(w.now, msg(1, 7));
    assert!(matches!(v, Verdict::Held { wake: true, .. }));
    // Held past the hold's limit: fails as expired.
    w.at(5000);
    w.core.handle_timeout(w.now);
    let out: Vec<_> = w.core.poll_outputs().collect();
    assert!(matches!(
        &out[..],
        [Output::Fail { why: Failure::Expired { held }, .. }] if *held == Duration::from_secs(5)
    ));
    // The hold off: refused for now, with a refresh, until the window.
    let mut cfg = PublishConfig::new(vec![7]);
    cfg.hold_limit = Duration::ZERO;
    let mut w = World::with(cfg, &[("n0", 100, 16383)]);
    let v = w.core.handle_publish(w.now, msg(1, 7));
    assert!(matches!(
        v,
        Verdict::Waiting {
            parked: false,
            wake: true,
            ..
        }
    ));
    assert_eq!(w.drain(), ["refresh"]);
    assert_eq!(w.core.poll_timeout(), Some(Time::from_millis(20)));
    let mut said = Vec::new();
    while let Some(t) = w.core.poll_timeout() {
        w.now = t;
        w.core.handle_timeout(t);
        said.extend(w.drain());
    }
    assert_eq!(
        said.last().map(String::as_str),
        Some("fail #1 Window { tries: 9 }")
    );
    // Closing: fails at once, and so does everything held.
    let mut w = World::new(&[7], &[("n0", 100, 16383)]);
    assert_eq!(w.publish(1, 7), ["held #1"]);
    w.core.handle_closing();
    assert_eq!(w.drain(), ["fail #1 Shutdown", "retire n0"]);
    assert_eq!(w.publish(1, 7), ["fail #2 Shutdown"]);
    assert!(w.core.table().1.is_empty());
}

#[test]
fn a_lost_publish_is_never_sent_again_and_an_unwritten_one_is() {
    let mut w = World::new(&[7], &[("n0", 0, 16383)]);
    assert_eq!(w.publish(1, 7), ["send #1 n0"]);
    assert_eq!(w.reply(1, "n0", Reply::Lost), ["fail #1 Reported"]);
    assert_eq!(w.publish(1, 7), ["send #2 n0"]);
    assert_eq!(w.reply(1, "n0", Reply::NotWritten), ["send #2 n0"]);
    assert_eq!(w.reply(1, "n0", Reply::Other), ["fail #2 Reported"]);
}

#[test]
fn a_node_is_retired_once_no_route_and_no_gate_use_it() {
    let mut w = World::new(&[1], &[("n0", 0, 16383)]);
    assert_eq!(
        w.map(1, &[("n1", 0, 16383)]),
        ["gate 1 [1] n0 -> n1", "barrier 1 n0"]
    );
    // n0 is routed again before its gate opened: kept.
    assert_eq!(
        w.map(1, &[("n0", 0, 16383)]),
        ["gate 2 [1] n1 -> n0", "barrier 2 n1"]
    );
    assert_eq!(w.barrier(1, 1, false), ["open 1"]);
    assert_eq!(w.barrier(1, 2, false), ["open 2", "retire n1"]);
    assert!(w.core.is_up(NodeId(0)) && !w.core.is_up(NodeId(1)));
}

#[test]
fn a_commands_moved_moves_the_route_as_a_publishs_does_and_its_ask_does_not() {
    let mut w = World::new(&[5], &[("n0", 0, 16383)]);
    w.core.handle_node(NodeId(1), "n1".into());
    assert_eq!(w.command(1, 1, 5), ["command c1 n0"]);
    assert_eq!(w.publish(1, 5), ["send #1 n0"]);
    // MOVED: the route moves behind a gate (n0's barrier first), the
    // subscribe core hears of it, and the command follows.
    let n1 = Target::Node(NodeId(1));
    assert_eq!(
        w.command_reply(1, 1, Reply::Moved { slot: 5, to: n1 }),
        [
            "gate 1 [5] n0 -> n1",
            "barrier 1 n0",
            "redirected s5 n1",
            "command c1 n1"
        ]
    );
    assert_eq!(w.core.owner(5), Some(NodeId(1)));
    // The next publish follows the route, behind the gate.
    assert_eq!(w.publish(1, 5), ["held #2"]);
    w.core.handle_command_done(CmdId(1));
    // ASK: once to n0 with ASKING; the route stays on n1, no new gate.
    assert_eq!(w.command(1, 2, 5), ["command c2 n1"]);
    let n0 = Target::Node(NodeId(0));
    assert_eq!(
        w.command_reply(1, 2, Reply::Ask { slot: 5, to: n0 }),
        ["command c2 n0 asking"]
    );
    assert_eq!(w.core.owner(5), Some(NodeId(1)));
    assert_eq!(w.core.stats().gates, 1);
    // Any other reply is the caller's: it ends the command.
    w.command_reply(1, 2, Reply::Other);
    // Redirects are bounded as a publish's.
    assert_eq!(w.command(1, 3, 5), ["command c3 n1"]);
    let ask = Reply::Ask { slot: 5, to: n0 };
    for _ in 0..5 {
        assert_eq!(w.command_reply(1, 3, ask), ["command c3 n0 asking"]);
    }
    assert_eq!(
        w.command_reply(1, 3, ask),
        ["command c3 fails Redirects { count: 5 }"]
    );
    // A slot no publish goes to: the route moves, with no gate (nothing
    // is held for it, so the publishes keep their fast path).
    assert_eq!(w.command(1, 5, 9), ["command c5 n0"]);
    assert_eq!(
        w.command_reply(1, 5, Reply::Moved { slot: 9, to: n1 }),
        ["redirected s9 n1", "command c5 n1"]
    );
    assert_eq!(w.core.owner(9), Some(NodeId(1)));
    assert_eq!(w.core.stats().gates, 1);
    w.core.handle_command_done(CmdId(5));
    // A node that cannot be connected to fails it at once.
    assert_eq!(w.command(1, 4, 5), ["command c4 n1"]);
    let nowhere = Reply::Moved {
        slot: 5,
        to: Target::CannotConnect,
    };
    assert_eq!(
        w.command_reply(1, 4, nowhere),
        ["command c4 fails CannotConnect"]
    );
    assert_eq!(w.core.commands(), 0);
}

#[test]
fn a_command_with_no_owner_waits_for_one_within_the_window() {
    let mut w = World::new(&[7], &[("n0", 100, 16383)]);
    // No owner: a refresh, and a wait up to the window (2 s).
    assert_eq!(w.command(1, 1, 7), ["refresh"]);
    assert_eq!(w.core.poll_timeout(), Some(Time::from_millis(2001)));
    assert!(w.tick(1000).is_empty());
    // A map names one: it goes there at once.
    let mut said = w.map(1, &[("n1", 0, 16383)]);
    said.retain(|s| s.starts_with("command"));
    assert_eq!(said, ["command c1 n1"]);
    w.core.handle_command_done(CmdId(1));
    // None for the whole window: it fails.
    let mut w = World::new(&[7], &[("n0", 100, 16383)]);
    assert_eq!(w.command(1, 2, 7), ["refresh"]);
    assert!(w.tick(1999).is_empty());
    assert_eq!(
        w.tick(1),
        ["command c2 fails NoOwner { waited: 2s }"],
        "at its window's end"
    );
    w.done();
}

#[test]
fn a_command_refused_for_now_goes_again_on_the_core_timer_within_the_window() {
    let mut cfg = PublishConfig::new(vec![7]);
    cfg.retry_window = Duration::from_millis(100);
    let mut w = World::with(cfg, &[("n0", 0, 16383)]);
    assert_eq!(w.command(1, 1, 7), ["command c1 n0"]);
    // TRYAGAIN: again in 20 ms (the publishes' schedule), with a refresh.
    assert_eq!(w.command_reply(0, 1, Reply::TryAgain), ["refresh"]);
    assert_eq!(w.core.poll_timeout(), Some(Time::from_millis(21)));
    assert!(w.tick(19).is_empty());
    assert_eq!(w.tick(1), ["command c1 n0"]);
    // A MOVED with no usable address: refused for now too, the route kept.
    let nowhere = Reply::Moved {
        slot: 7,
        to: Target::NoAddress,
    };
    assert_eq!(w.command_reply(0, 1, nowhere), ["refresh"]);
    assert_eq!(w.core.owner(7), Some(NodeId(0)));
    assert_eq!(w.tick(40), ["command c1 n0"]);
    assert_eq!(w.command_reply(0, 1, Reply::ClusterDown), ["refresh"]);
    assert_eq!(w.tick(80), ["command c1 n0"]);
    // Refused again 140 ms after its first refusal: past the window.
    assert_eq!(
        w.command_reply(0, 1, Reply::TryAgain),
        ["command c1 fails Window { tries: 4 }"]
    );
    // Closing: kept commands fail, and later ones at once.
    assert_eq!(w.command(1, 2, 7), ["command c2 n0"]);
    w.core.handle_closing();
    let said = w.drain();
    assert_eq!(
        said.first().map(String::as_str),
        Some("command c2 fails Shutdown")
    );
    assert_eq!(w.command(1, 3, 7), ["command c3 fails Shutdown"]);
    w.done();
}
