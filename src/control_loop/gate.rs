//! Carrying out the route gates (the publish core's [`control::Gates`]:
//! when a slot's publish route moves, its publishes are held until the old
//! route has delivered what it was sent): the barrier `PING` and the
//! markers go out on the old route's publish engine.
//!
//! A marker is `SPUBLISH` of the new owner's service channel (see
//! `service`), with this instance's id and the gate's token: it comes back
//! on our service subscription at the new owner once the old node (now its
//! replica) forwarded every earlier publish, or the old node refuses it
//! (`MOVED`: still a primary, it forwards nothing).

use control::publish::NodeId;

use crate::control_loop::driver::Driver;
use crate::control_loop::service::service_name;
use crate::metrics::add;

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
    /// A `PING` on the old route (`node`) after every publish sent there.
    pub(crate) fn send_barrier(&self, token: u64, node: NodeId) {
        let Some(engine) = self.s.hold.engine(node) else {
            return;
        };
        add(&self.s.counters.cluster.gates, 1);
        let s = self.s.clone();
        engine.command_then(0, [&b"PING"[..]], move |r| {
            let ok = r.is_ok();
            log::debug!("cluster: gate {token}: barrier answered ({ok})");
            s.post(|inbox| inbox.barriers.push((token, ok)));
        });
    }

    /// A marker on the old route (`node`) to the new owner's service
    /// channel, the one of `service_slot`.
    pub(crate) fn send_marker(&self, token: u64, node: NodeId, service_slot: u16) {
        let Some(engine) = self.s.hold.engine(node) else {
            return;
        };
        let name = service_name(service_slot);
        let payload = marker_payload(self.s.instance, token);
        let s = self.s.clone();
        // Refused (`MOVED`) or not sent: nothing to wait for. Accepted:
        // it comes back on the service subscription.
        engine.command_then(
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
