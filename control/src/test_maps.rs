//! Slot maps and helpers shared by the unit tests.

use alloc::vec::Vec;

use topology::{Health, Node, NodeAddr, Role, Shard, SlotMap};

use crate::{Command, Core, Time};

pub(crate) fn addr(host: &str) -> NodeAddr {
    NodeAddr {
        host: host.into(),
        port: 7000,
    }
}

pub(crate) fn primary(id: &str, host: &str) -> Shard {
    Shard {
        primary: Node {
            id: id.into(),
            addr: Some(addr(host)),
            hostname: None,
            tls_port: None,
            role: Role::Primary,
            health: Health::Online,
            replication_offset: None,
        },
        replicas: Vec::new(),
    }
}

/// `(id, host, first slot, last slot)` per shard.
pub(crate) fn map(shards: &[(&str, &str, u16, u16)]) -> SlotMap {
    let mut m = SlotMap::new();
    for &(id, host, a, b) in shards {
        let i = m.push_shard(primary(id, host));
        m.assign(a..=b, i);
    }
    m
}

/// What a Redis 7 node answers to `INFO server` (its version chooses
/// `CLUSTER SLOTS`).
pub(crate) const REDIS_7_INFO: &[u8] = b"# Server\r\nredis_version:7.2.4\r\n";

/// The core's next command; a version request is answered at `now` (a
/// Redis 7 node) and the command it leads to is returned instead.
pub(crate) fn next_after_version(core: &mut Core, now: Time) -> Option<Command> {
    match core.poll_command() {
        Some(Command::AskVersion { id, .. }) => {
            core.handle_version(now, id, Ok(REDIS_7_INFO));
            core.poll_command()
        }
        other => other,
    }
}

/// What a void subscribe's reply leads to: the channel unsubscribed, its
/// gap event, then subscribed again, all on `conn`.
pub(crate) fn assert_voided(core: &mut Core, conn: crate::ConnId) {
    let cmds = drain(core);
    assert!(
        matches!(&cmds[..], [
            Command::Unsubscribe { conn: u, .. },
            Command::Gap { channels, .. },
            Command::Subscribe { conn: c, .. },
        ] if channels.len() == 1 && *c == conn && *u == conn),
        "{cmds:?}"
    );
}

/// Every command the core has queued.
pub(crate) fn drain(core: &mut Core) -> Vec<Command> {
    core::iter::from_fn(|| core.poll_command()).collect()
}

/// The publish the hold's and the publish core's unit tests use.
pub(crate) use crate::Sample as Msg;

/// Publish `seq` to `slot`, of cost 10.
pub(crate) fn msg(seq: u64, slot: u16) -> Msg {
    Msg::new(seq, slot, 10)
}
