//! Carrying out the route gates ([`control::Gates`]: when a slot's
//! publish route moves, its publishes are held until the old route has
//! delivered what it was sent): the barrier `PING` and the markers go out
//! on the old route's publish engine, an open gate releases its slots in
//! the hold (see `hold`) and lets go of an old engine no gate needs.
//!
//! A marker is `SPUBLISH` of the new owner's service channel (see
//! `service`), with this instance's id and the gate's token: it comes back
//! on our service subscription at the new owner once the old node (now its
//! replica) forwarded every earlier publish, or the old node refuses it
//! (`MOVED`: still a primary, it forwards nothing).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use control::{GateCommand, Gates};

use crate::control_loop::driver::Driver;
use crate::control_loop::service::service_name;
use crate::engine::Engine;
use crate::metrics::add;

/// The longest a slot's publishes wait for the old route to drain.
const GATE_TIMEOUT: Duration = Duration::from_secs(1);

/// How often a marker is sent again until one comes back.
const MARKER_EVERY: Duration = Duration::from_millis(20);

/// A gate's old route, and where its slots went.
pub(crate) struct OldRoute {
    pub(crate) old: Arc<Engine>,
    pub(crate) new_addr: Option<SocketAddr>,
    /// One of its slots, to learn the new owner by when none was known.
    pub(crate) slot: u16,
}

/// No gate closed yet.
pub(crate) fn gates() -> Gates<OldRoute> {
    Gates::new(GATE_TIMEOUT, MARKER_EVERY)
}

/// The payload of this instance's marker for `token`.
pub(crate) fn marker_payload(instance: u64, token: u64) -> Vec<u8> {
    format!("{instance:016x}:{token}").into_bytes()
}

/// The token of a marker payload, if it is this instance's.
pub(crate) fn parse_marker(instance: u64, payload: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(payload).ok()?;
    let (id, token) = text.split_once(':')?;
    (u64::from_str_radix(id, 16).ok()? == instance).then_some(())?;
    token.parse().ok()
}

impl Driver {
    /// Closes a gate for slots (`slot` one of them) leaving `old` for
    /// `new_addr`; the caller gates the slots with the returned token,
    /// then lets go of the routes and calls [`Driver::run_gates`] (which
    /// sends the barrier).
    pub(crate) fn close_gate(
        &mut self,
        old: Arc<Engine>,
        new_addr: Option<SocketAddr>,
        slot: u16,
    ) -> u64 {
        let known = new_addr.is_some();
        let route = OldRoute {
            old,
            new_addr,
            slot,
        };
        self.gates.close(self.now(), route, known)
    }

    /// Carries out what the gates decided.
    pub(crate) fn run_gates(&mut self) {
        self.find_new_owners();
        while let Some(cmd) = self.gates.poll_command() {
            match cmd {
                GateCommand::Barrier { token } => self.send_barrier(token),
                GateCommand::Marker { token } => self.send_marker(token),
                GateCommand::Open { token, timed_out } => self.gate_opened(token, timed_out),
            }
        }
    }

    /// Gates closed with no new owner known (a map read mid-change showed
    /// their slots unassigned) learn it from the routes as soon as they
    /// have one: the old node may have become its replica and forward
    /// what it accepted, so markers must go out before the gate opens.
    fn find_new_owners(&mut self) {
        let waiting: Vec<u64> = self.gates.waiting_for_owner().collect();
        for token in waiting {
            let Some(route) = self.gates.route_mut(token) else {
                continue;
            };
            let Some(owner) = self.routes.owner(route.slot) else {
                continue;
            };
            route.new_addr = Some(owner.addr);
            log::debug!("cluster: gate {token}: new owner {}", owner.addr);
            let now = self.now();
            self.gates.handle_owner(now, token);
        }
    }

    /// A `PING` on the old route after every publish sent there.
    fn send_barrier(&self, token: u64) {
        let Some(route) = self.gates.route(token) else {
            return;
        };
        add(&self.s.counters.cluster.gates, 1);
        let s = self.s.clone();
        route.old.command_then(0, [&b"PING"[..]], move |r| {
            let ok = r.is_ok();
            log::debug!("cluster: gate {token}: barrier answered ({ok})");
            s.post(|inbox| inbox.barriers.push((token, ok)));
        });
    }

    /// A marker on the old route, when the new owner's service channel is
    /// known (else the next one goes).
    fn send_marker(&self, token: u64) {
        let Some(route) = self.gates.route(token) else {
            return;
        };
        let Some(slot) = route.new_addr.and_then(|a| self.services.slot_of(&a)) else {
            return;
        };
        let name = service_name(slot);
        let payload = marker_payload(self.s.instance, token);
        let s = self.s.clone();
        // Refused (`MOVED`) or not sent: nothing to wait for. Accepted:
        // it comes back on the service subscription.
        route.old.command_then(
            0,
            [resp::PublishKind::Spublish.command(), &name, &payload],
            move |r| {
                if let Err(e) = &r {
                    log::debug!("cluster: gate {token}: marker refused: {e}");
                    s.post(|inbox| inbox.markers.push(token));
                }
            },
        );
    }

    fn gate_opened(&mut self, token: u64, timed_out: bool) {
        log::debug!("cluster: gate {token} open (timed out: {timed_out})");
        if timed_out {
            add(&self.s.counters.cluster.gate_timeouts, 1);
        }
        self.s.hold.open(token);
        // Old publish engines kept only for their gates.
        let gates = &self.gates;
        self.retiring.retain(|e| {
            let used = gates.routes().any(|r| Arc::ptr_eq(&r.old, e));
            if !used {
                e.shutdown();
            }
            used
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_only_for_their_instance() {
        let p = marker_payload(0xabc, 42);
        assert_eq!(parse_marker(0xabc, &p), Some(42));
        assert_eq!(parse_marker(0xabd, &p), None);
        assert_eq!(parse_marker(0xabc, b"nonsense"), None);
        assert_eq!(parse_marker(0xabc, b""), None);
    }
}
