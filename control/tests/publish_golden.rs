//! Golden transcripts of the publish side: named scenarios driven by hand
//! through [`control::Gates`], [`control::Hold`] and
//! [`control::RetryPolicy`] the way the engine's control thread drives
//! them (inputs → what goes on the wire, what is held, what ends),
//! compared with `tests/golden/publish_<name>.txt`. `UPDATE_GOLDEN=1 cargo
//! test -p shardsub-control --test publish_golden` rewrites them; review
//! the diff like code.

use std::fmt::Write as _;
use std::time::Duration;

use control::{Due, GateCommand, Gates, Held, Hold, Offer, Refused, RetryPolicy, Time};

/// One publish in a script: its number and slot, and what the hold and
/// the retry policy keep of it.
#[derive(Debug)]
struct Msg {
    seq: u64,
    slot: u16,
    since: Option<Time>,
    probe: bool,
    refusals: u32,
    first: Option<Time>,
    /// Redirects followed (the publish core counts them).
    redirects: u32,
}

impl Held for Msg {
    fn seq(&self) -> u64 {
        self.seq
    }
    fn slot(&self) -> u16 {
        self.slot
    }
    fn cost(&self) -> usize {
        100
    }
    fn held_since(&self) -> Option<Time> {
        self.since
    }
    fn mark_held(&mut self, now: Time) {
        self.since.get_or_insert(now);
    }
    fn probe(&self) -> bool {
        self.probe
    }
    fn set_probe(&mut self, on: bool) {
        self.probe = on;
    }
    fn refusals(&mut self) -> &mut u32 {
        &mut self.refusals
    }
    fn first_refused(&mut self, now: Time) -> Time {
        *self.first.get_or_insert(now)
    }
    fn redirects(&mut self) -> &mut u32 {
        &mut self.redirects
    }
}

/// A scripted driver of one instance's publish side: slots route to named
/// nodes, publishes are written to a node (logged), held, or end.
struct Script {
    now: Time,
    log: String,
    gates: Gates<&'static str>,
    hold: Hold<Msg>,
    policy: RetryPolicy,
    /// Per slot, the node its publishes go to.
    routes: Vec<(u16, &'static str)>,
    /// Nodes whose connection is down.
    down: Vec<&'static str>,
    /// Publishes written and not answered, by node, in order.
    wire: Vec<(&'static str, Msg)>,
    next_seq: u64,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Script {
    fn new(title: &str, routes: &[(u16, &'static str)]) -> Script {
        let mut log = String::new();
        let _ = writeln!(log, "# {title}");
        Script {
            now: Time::ZERO,
            log,
            gates: Gates::new(ms(1000), ms(20)),
            hold: Hold::new(1000, 1 << 20, ms(5000)),
            policy: RetryPolicy::new(5, ms(2000)),
            routes: routes.to_vec(),
            down: Vec::new(),
            wire: Vec::new(),
            next_seq: 0,
        }
    }

    fn at(&mut self, step: u64, what: &str) {
        self.now = self.now + ms(step);
        let _ = writeln!(self.log, "@{}ms {what}", self.now.as_millis());
    }

    fn out(&mut self, what: String) {
        let _ = writeln!(self.log, "  > {what}");
    }

    fn route(&self, slot: u16) -> &'static str {
        self.routes
            .iter()
            .find(|r| r.0 == slot)
            .map_or("?", |r| r.1)
    }

    fn write(&mut self, msg: Msg) {
        let node = self.route(msg.slot);
        let probe = if msg.probe { " (probe)" } else { "" };
        self.out(format!(
            "spublish #{} s{} -> {node}{probe}",
            msg.seq, msg.slot
        ));
        self.wire.push((node, msg));
    }

    fn offered(&mut self, seq: u64, offer: Offer<Msg>) {
        match offer {
            Offer::Held(evicted) => {
                self.out(format!("held #{seq}"));
                for m in evicted {
                    self.out(format!("fail #{} (hold full)", m.seq));
                }
            }
            Offer::Full(m) => self.out(format!("fail #{} (hold full)", m.seq)),
            Offer::Free(m) => self.write(m),
        }
    }

    /// The application publishes to `slot`.
    fn publish(&mut self, slot: u16) {
        self.next_seq += 1;
        let seq = self.next_seq;
        self.at(1, &format!("publish #{seq} s{slot}"));
        let msg = Msg {
            seq,
            slot,
            since: None,
            probe: false,
            refusals: 0,
            first: None,
            redirects: 0,
        };
        let msg = if self.hold.entries() > 0 {
            match self.hold.offer(self.now, msg) {
                Offer::Free(m) => m,
                offer => return self.offered(seq, offer),
            }
        } else {
            msg
        };
        if self.down.contains(&self.route(slot)) {
            let offer = self.hold.hold(self.now, msg).0;
            self.offered(seq, offer);
        } else {
            self.write(msg);
        }
    }

    /// The oldest publish on `node`'s wire.
    fn answered(&mut self, node: &str) -> Msg {
        let Some(i) = self.wire.iter().position(|w| w.0 == node) else {
            panic!("nothing on {node}'s wire:\n{}", self.log);
        };
        self.wire.remove(i).1
    }

    /// `node` answers its oldest publish: taken.
    fn taken(&mut self, node: &'static str) {
        let m = self.answered(node);
        self.at(1, &format!("{node} takes #{}", m.seq));
        if m.probe {
            self.hold.unpark(m.slot);
            self.out(format!("unpark s{}", m.slot));
        }
        self.out(format!("done #{}", m.seq));
    }

    /// `node` refuses its oldest publish for now (`TRYAGAIN`).
    fn tryagain(&mut self, node: &'static str) {
        let m = self.answered(node);
        let seq = m.seq;
        self.at(1, &format!("{node} refuses #{seq}: TRYAGAIN"));
        match self.hold.refused(self.now, m, &self.policy) {
            Refused::GiveUp(m, e) => self.out(format!("fail #{} ({e})", m.seq)),
            Refused::Later { at, parked } => {
                let p = if parked { ", s parked" } else { "" };
                self.out(format!("retry #{seq} at {}ms{p}", at.as_millis()));
            }
            Refused::Held(offer, _) => self.offered(seq, offer),
        }
    }

    /// `node`'s connection drops: what was on its wire is lost unrun and
    /// held.
    fn conn_down(&mut self, node: &'static str) {
        self.at(1, &format!("{node} connection down"));
        self.down.push(node);
        let lost: Vec<Msg> = {
            let (lost, kept) = std::mem::take(&mut self.wire)
                .into_iter()
                .partition(|w| w.0 == node);
            self.wire = kept;
            lost.into_iter().map(|w| w.1).collect()
        };
        for m in lost {
            let seq = m.seq;
            let offer = self.hold.hold(self.now, m).0;
            self.offered(seq, offer);
        }
    }

    /// The routes move to a new map: each slot leaving a node is gated
    /// until that node is drained (`forwards`: it became the new owner's
    /// replica).
    fn new_map(&mut self, moves: &[(u16, &'static str)], forwards: bool) {
        self.at(1, &format!("map: {moves:?}"));
        for &(slot, to) in moves {
            let from = self.route(slot);
            if let Some(r) = self.routes.iter_mut().find(|r| r.0 == slot) {
                r.1 = to;
            }
            let token = self.gates.close(self.now, from, forwards);
            self.hold.gate(slot, token);
            self.out(format!("gate {token} s{slot} ({from} -> {to})"));
        }
        self.run_gates();
    }

    fn run_gates(&mut self) {
        while let Some(cmd) = self.gates.poll_command() {
            match cmd {
                GateCommand::Barrier { token } => {
                    let from = self.gates.route(token).copied().unwrap_or("?");
                    self.out(format!("ping {from} (barrier {token})"));
                }
                GateCommand::Marker { token } => {
                    let from = self.gates.route(token).copied().unwrap_or("?");
                    self.out(format!("marker {token} on {from}"));
                }
                GateCommand::Open { token, timed_out } => {
                    let why = if timed_out { " (timed out)" } else { "" };
                    self.out(format!("open gate {token}{why}"));
                    self.hold.open(token);
                }
            }
        }
    }

    fn barrier(&mut self, token: u64, ok: bool) {
        let what = if ok { "answered" } else { "failed" };
        self.at(1, &format!("barrier {token} {what}"));
        self.gates.handle_barrier(self.now, token, ok);
        self.run_gates();
    }

    fn marker_back(&mut self, token: u64) {
        self.at(1, &format!("marker {token} back at the new owner"));
        self.gates.handle_marker(token);
        self.run_gates();
    }

    fn marker_refused(&mut self, token: u64) {
        self.at(1, &format!("marker {token} refused (MOVED)"));
        self.gates.handle_marker(token);
        self.run_gates();
    }

    fn conn_up(&mut self, node: &'static str) {
        self.at(1, &format!("{node} connection up"));
        self.down.retain(|d| *d != node);
    }

    /// Time passes by `step`; the driver looks: gates, due retries, the
    /// hold (releases to owners that are up, expiry).
    fn tick(&mut self, step: u64) {
        self.at(step, "look");
        let now = self.now;
        if self.gates.poll_timeout().is_some_and(|t| t <= now) {
            self.gates.handle_timeout(now);
            self.run_gates();
        }
        for (m, parked) in self.hold.take_due(now) {
            let up = !self.down.contains(&self.route(m.slot));
            let seq = m.seq;
            match self.hold.due(now, m, parked, up) {
                Due::Probe(m) => self.write(m),
                Due::Held(offer, _) => self.offered(seq, offer),
                Due::Route(m) => self.write(m),
            }
        }
        for slot in self.hold.releasable() {
            if self.down.contains(&self.route(slot)) {
                continue;
            }
            while let Some(batch) = self.hold.take(slot) {
                for m in batch {
                    self.write(m);
                }
            }
        }
        for m in self.hold.expired(now) {
            self.out(format!("fail #{} (held too long)", m.seq));
        }
    }

    fn check(&mut self, name: &str) {
        let (messages, _) = self.hold.size();
        let _ = writeln!(
            self.log,
            "end: {} on the wire, {messages} held, {} gates closed",
            self.wire.len(),
            self.gates.len()
        );
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
    s.new_map(&[(6144, "n3")], true);
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
    s.new_map(&[(2048, "n2")], true);
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
    s.new_map(&[(14336, "n5")], true);
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
