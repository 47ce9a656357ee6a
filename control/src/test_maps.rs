//! Slot maps and helpers shared by the unit tests.

use alloc::vec::Vec;

use topology::{Health, Node, NodeAddr, Role, Shard, SlotMap};

use crate::{Command, Core};

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

/// Every command the core has queued.
pub(crate) fn drain(core: &mut Core) -> Vec<Command> {
    core::iter::from_fn(|| core.poll_command()).collect()
}
