//! `CLUSTER SHARDS`: `[{slots: [start, end, …], nodes: [{id, port, ip, …}…]}…]`.

use alloc::vec::Vec;

use resp::Frame;

use crate::error::{Field, Problem, ReplyError};
use crate::reply::{int, list, pairs, port, slot, text, Builder, ParseOptions};
use crate::slotmap::{Health, Node, Role, SlotMap};
use crate::version::TopologyCommand;

const CMD: TopologyCommand = TopologyCommand::ClusterShards;

/// Parses a `CLUSTER SHARDS` reply (RESP3 maps or RESP2 flat key-value
/// arrays) into a [`SlotMap`].
///
/// Each shard holds `slots` (flat start, end pairs) and `nodes`, each node a
/// map with `id`, `port` and/or `tls-port`, `ip`, `endpoint`, `hostname`,
/// `role` (`master` / `replica`), `replication-offset` and `health`
/// (`online`, `fail`/`failed`, `loading`). Unknown keys are ignored. The
/// address is the host name when [`ParseOptions::prefer_hostname`] is set and
/// one is announced, else `endpoint` (or `ip` when there is none); `?` means
/// unknown, `""` the asked host. Without a `port`, `tls-port` is the port;
/// with both, `tls-port` when [`ParseOptions::prefer_tls_port`] is set.
///
/// A shard whose nodes include no primary leaves its slots without owner.
/// A failed primary still owns its slots; its [`Health`] says it failed.
/// A shard listing several primaries (Valkey keeps a dead primary in its
/// shard after a failover) is owned by the healthiest of them, then the
/// one with the highest replication offset; the others are dropped.
///
/// # Errors
///
/// A [`ReplyError`] naming the shard, node and field that was wrong: the
/// server's error reply, a missing `slots`, `nodes`, `id`, `role` or port,
/// an odd slot list, a slot out of range or claimed twice.
pub fn parse_cluster_shards(
    reply: &Frame<'_>,
    options: &ParseOptions<'_>,
) -> Result<SlotMap, ReplyError> {
    let top = list(reply).map_err(|p| ReplyError::new(CMD, Field::Reply, p))?;
    let mut b = Builder::new(CMD);
    for (e, shard) in top.iter().enumerate() {
        let at = |field, problem| ReplyError::new(CMD, field, problem).at(e, None);
        let mut slots = None;
        let mut nodes = None;
        for (k, v) in pairs(&shard).map_err(|p| at(Field::Entry, p))? {
            match k.as_bytes() {
                Some(b"slots") => slots = Some(list(&v).map_err(|p| at(Field::Slots, p))?),
                Some(b"nodes") => nodes = Some(list(&v).map_err(|p| at(Field::Nodes, p))?),
                _ => {}
            }
        }
        let slots = slots.ok_or(at(Field::Slots, Problem::Missing))?;
        let nodes = nodes.ok_or(at(Field::Nodes, Problem::Missing))?;
        if slots.len() % 2 != 0 {
            return Err(at(Field::Slots, Problem::OddLength));
        }
        let mut ranges = Vec::with_capacity(slots.len() / 2);
        let mut it = slots.iter();
        while let (Some(s), Some(t)) = (it.next(), it.next()) {
            let start = slot(&s).map_err(|p| at(Field::SlotStart, p))?;
            let end = slot(&t).map_err(|p| at(Field::SlotEnd, p))?;
            if end < start {
                return Err(at(Field::SlotEnd, Problem::OutOfRange));
            }
            ranges.push(start..=end);
        }
        let mut primary: Option<Node> = None;
        let mut replicas = Vec::new();
        for (n, f) in nodes.iter().enumerate() {
            let node = parse_node(&f, options).map_err(|(field, p)| at(field, p).at(e, Some(n)))?;
            match node.role {
                // After a failover, Valkey lists the dead primary (health
                // `fail`) next to the promoted one in the same shard: the
                // slots belong to the healthiest.
                Role::Primary => match &primary {
                    Some(p) if rank(p) >= rank(&node) => {}
                    _ => primary = Some(node),
                },
                Role::Replica => replicas.push(node),
            }
        }
        // No primary: the slots stay without owner (and the replicas, which
        // serve no subscriptions of ours, are not kept).
        if let Some(primary) = primary {
            let index = b.shard(e, primary, replicas)?;
            for r in ranges {
                b.claim(e, r, index);
            }
        }
    }
    b.finish()
}

/// Which of two primaries of one shard owns its slots: online before
/// loading before unknown before failed, then the higher replication offset,
/// then the smaller id (so the choice never depends on the reply's order).
fn rank(n: &Node) -> (u8, i64, core::cmp::Reverse<&str>) {
    let health = match n.health {
        Health::Online => 3,
        Health::Loading => 2,
        Health::Unknown => 1,
        Health::Failed => 0,
    };
    (
        health,
        n.replication_offset.unwrap_or(i64::MIN),
        core::cmp::Reverse(n.id.as_str()),
    )
}

fn parse_node(f: &Frame<'_>, options: &ParseOptions<'_>) -> Result<Node, (Field, Problem)> {
    let (mut id, mut port_no, mut tls_port, mut ip, mut endpoint, mut hostname) =
        (None, None, None, None, None, None);
    let (mut role, mut health, mut offset) = (None, Health::Unknown, None);
    for (k, v) in pairs(f).map_err(|p| (Field::Node, p))? {
        let Some(key) = k.as_bytes() else { continue };
        match key {
            b"id" => id = Some(text(&v).map_err(|p| (Field::Id, p))?),
            b"port" => port_no = Some(port(&v).map_err(|p| (Field::Port, p))?),
            b"tls-port" => tls_port = Some(port(&v).map_err(|p| (Field::TlsPort, p))?),
            b"ip" => ip = Some(text(&v).map_err(|p| (Field::Ip, p))?),
            b"endpoint" => endpoint = Some(text(&v).map_err(|p| (Field::Endpoint, p))?),
            b"hostname" => hostname = Some(text(&v).map_err(|p| (Field::Hostname, p))?),
            b"role" => {
                role = Some(match text(&v).map_err(|p| (Field::Role, p))? {
                    "master" | "primary" => Role::Primary,
                    "replica" | "slave" => Role::Replica,
                    _ => return Err((Field::Role, Problem::OutOfRange)),
                })
            }
            b"health" => {
                health = match text(&v).map_err(|p| (Field::Health, p))? {
                    "online" => Health::Online,
                    "fail" | "failed" => Health::Failed,
                    "loading" => Health::Loading,
                    _ => Health::Unknown,
                }
            }
            b"replication-offset" => {
                offset = Some(int(&v).map_err(|p| (Field::ReplicationOffset, p))?)
            }
            _ => {}
        }
    }
    let id = id.ok_or((Field::Id, Problem::Missing))?;
    let role = role.ok_or((Field::Role, Problem::Missing))?;
    let port_no = if options.prefer_tls_port {
        tls_port.or(port_no)
    } else {
        port_no.or(tls_port)
    }
    .ok_or((Field::Port, Problem::Missing))?;
    let endpoint = endpoint.or(ip).ok_or((Field::Ip, Problem::Missing))?;
    Ok(Node {
        id: id.into(),
        addr: options.address(endpoint, hostname, port_no),
        hostname: hostname.filter(|h| !h.is_empty()).map(Into::into),
        tls_port,
        role,
        health,
        replication_offset: offset,
    })
}
