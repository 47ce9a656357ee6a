//! Route gates: when a slot's publish route moves, its publishes are held
//! (see `hold`) until the old route has delivered what it was sent.
//!
//! 1. A `PING` goes out on the old route after every publish sent there;
//!    its reply means each of them was answered.
//! 2. An answer is not a delivery when the old node became a replica of
//!    the new owner (a failover): a replica accepts `SPUBLISH` and forwards
//!    it over the cluster bus, which may take longer than a direct publish.
//!    So a marker (`SPUBLISH` of the new owner's service channel, with
//!    this instance's id and the gate's token) is sent on the old route
//!    every 20 ms until it comes back on our service subscription at the
//!    new owner: the bus link carries the forwarded publishes in order, so
//!    every earlier publish has reached the new owner. A marker the old
//!    node refuses (`MOVED`: it is still a primary, a slot migrated, and
//!    it forwards nothing) opens the gate at once.
//! 3. A `PING` that fails (the old node is gone) opens the gate at once;
//!    a gate still closed after `GATE_TIMEOUT` opens anyway (counted).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::driver::Driver;
use crate::cluster::hold::GATE_TIMEOUT;
use crate::cluster::service::service_name;
use crate::engine::Engine;
use crate::metrics::add;

/// How often a marker is sent again until one comes back.
const MARKER_EVERY: Duration = Duration::from_millis(20);

/// A closed gate: the old route and where its slots went.
pub(crate) struct Gate {
    pub(crate) old: Arc<Engine>,
    pub(crate) new_addr: Option<SocketAddr>,
    pub(crate) since: Instant,
    /// When the next marker is due (set once the `PING` was answered).
    pub(crate) marker_due: Option<Instant>,
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
    /// Closes a gate for slots leaving `old` for `new_addr`; the caller
    /// gates the slots with the returned token and then calls
    /// [`Control::send_barrier`].
    pub(crate) fn open_gate_record(
        &mut self,
        old: Arc<Engine>,
        new_addr: Option<SocketAddr>,
    ) -> u64 {
        let token = self.new_token();
        self.gates.insert(
            token,
            Gate {
                old,
                new_addr,
                since: Instant::now(),
                marker_due: None,
            },
        );
        token
    }

    /// The barrier `PING` of `token` was answered (`ok`) or failed.
    pub(crate) fn on_barrier(&mut self, token: u64, ok: bool) {
        match self.gates.get_mut(&token) {
            // Markers next: the old node may forward what it accepted.
            Some(g) if ok && g.new_addr.is_some() => g.marker_due = Some(Instant::now()),
            Some(_) => self.finish_gate(token, false),
            None => {}
        }
    }

    /// Our marker `token` came back at the new owner.
    pub(crate) fn on_marker(&mut self, token: u64) {
        if self.gates.contains_key(&token) {
            self.finish_gate(token, false);
        }
    }

    /// Sends due markers and opens gates past their timeout.
    pub(crate) fn service_gates(&mut self, now: Instant) {
        let stale: Vec<u64> = self
            .gates
            .iter()
            .filter(|(_, g)| now.duration_since(g.since) >= GATE_TIMEOUT)
            .map(|(&t, _)| t)
            .collect();
        for t in stale {
            self.finish_gate(t, true);
        }
        let instance = self.s.instance;
        for (&token, g) in self.gates.iter_mut() {
            if g.marker_due.is_none_or(|t| t > now) {
                continue;
            }
            g.marker_due = Some(now + MARKER_EVERY);
            let Some(slot) = g
                .new_addr
                .and_then(|a| self.services.get(&a))
                .map(|sv| sv.slot)
            else {
                continue; // no service channel there yet: next round
            };
            let name = service_name(slot);
            let payload = marker_payload(instance, token);
            let s = self.s.clone();
            // Refused (`MOVED`: the old node still serves its own slots and
            // forwards nothing) or not sent: nothing to wait for. Accepted:
            // wait for it to come back.
            g.old.command_then(
                0,
                [resp::PublishKind::Spublish.command(), &name, &payload],
                move |r| {
                    if r.is_err() {
                        s.post(|inbox| inbox.markers.push(token));
                    }
                },
            );
        }
    }

    /// When the control loop must look at the gates next.
    pub(crate) fn next_gate_deadline(&self) -> Option<Instant> {
        self.gates
            .values()
            .map(|g| {
                let t = g.since + GATE_TIMEOUT;
                g.marker_due.map_or(t, |m| m.min(t))
            })
            .min()
    }

    fn finish_gate(&mut self, token: u64, timed_out: bool) {
        if timed_out {
            add(&self.s.counters.cluster.gate_timeouts, 1);
        }
        self.gates.remove(&token);
        self.s.hold.open(token);
        // Old publish engines kept only for their gates.
        let gates = &self.gates;
        self.retiring.retain(|e| {
            let used = gates.values().any(|g| Arc::ptr_eq(&g.old, e));
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
