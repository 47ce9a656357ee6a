//! `CLUSTER SLOTS`: `[[start, end, primary, replica…]…]`, each node
//! `[ip, port, id, metadata?]`.

use alloc::vec::Vec;

use resp::Frame;

use crate::error::{Field, Problem, ReplyError};
use crate::reply::{list, pairs, port, slot, text, Builder, ParseOptions};
use crate::slotmap::{Health, Node, Role, SlotMap};
use crate::version::TopologyCommand;

const CMD: TopologyCommand = TopologyCommand::ClusterSlots;

/// Parses a `CLUSTER SLOTS` reply (RESP2 or RESP3) into a [`SlotMap`].
///
/// Each entry is `[start, end, primary, replica…]`; each node is
/// `[ip, port, id]`, plus on Redis 7+ a metadata map (`hostname`, `ip`), a
/// RESP3 map or a RESP2 flat key-value array. An IP of `""` means the host
/// that was asked ([`ParseOptions::asked_host`]); `?` means the endpoint is
/// unknown, and the node's address is `None`. Slots no entry covers have no
/// owner. Entries of the same primary are merged into one shard.
///
/// # Errors
///
/// A [`ReplyError`] naming the entry, node and field that was wrong: the
/// server's error reply, a non-array, a slot out of range or claimed twice,
/// a missing port or id, a non-UTF-8 string.
pub fn parse_cluster_slots(
    reply: &Frame<'_>,
    options: &ParseOptions<'_>,
) -> Result<SlotMap, ReplyError> {
    let top = list(reply).map_err(|p| ReplyError::new(CMD, Field::Reply, p))?;
    let mut b = Builder::new(CMD);
    for (e, entry) in top.iter().enumerate() {
        let at = |field, problem| ReplyError::new(CMD, field, problem).at(e, None);
        let fields = list(&entry).map_err(|p| at(Field::Entry, p))?;
        let mut it = fields.iter();
        let start = slot(&it.next().ok_or(at(Field::SlotStart, Problem::Missing))?)
            .map_err(|p| at(Field::SlotStart, p))?;
        let end = slot(&it.next().ok_or(at(Field::SlotEnd, Problem::Missing))?)
            .map_err(|p| at(Field::SlotEnd, p))?;
        if end < start {
            return Err(at(Field::SlotEnd, Problem::OutOfRange));
        }
        let primary = match it.next() {
            Some(f) => parse_node(&f, Role::Primary, options)
                .map_err(|(field, p)| at(field, p).at(e, Some(0)))?,
            None => return Err(at(Field::Node, Problem::Missing).at(e, Some(0))),
        };
        let mut replicas = Vec::new();
        for (n, f) in it.enumerate() {
            let node = parse_node(&f, Role::Replica, options)
                .map_err(|(field, p)| at(field, p).at(e, Some(n + 1)))?;
            replicas.push(node);
        }
        let index = b.shard(e, primary, replicas)?;
        b.claim(e, start..=end, index);
    }
    b.finish()
}

fn parse_node(
    f: &Frame<'_>,
    role: Role,
    options: &ParseOptions<'_>,
) -> Result<Node, (Field, Problem)> {
    let fields = list(f).map_err(|p| (Field::Node, p))?;
    let mut it = fields.iter();
    let ip = text(&it.next().ok_or((Field::Ip, Problem::Missing))?).map_err(|p| (Field::Ip, p))?;
    let port =
        port(&it.next().ok_or((Field::Port, Problem::Missing))?).map_err(|p| (Field::Port, p))?;
    let id = text(&it.next().ok_or((Field::Id, Problem::Missing))?).map_err(|p| (Field::Id, p))?;
    let mut hostname = None;
    if let Some(meta) = it.next() {
        // An empty RESP2 metadata list is `*0`, which `pairs` accepts too.
        for (k, v) in pairs(&meta).map_err(|p| (Field::Metadata, p))? {
            if k.as_bytes() == Some(b"hostname") {
                hostname = Some(text(&v).map_err(|p| (Field::Hostname, p))?);
            }
        }
    }
    Ok(Node {
        id: id.into(),
        addr: options.address(ip, hostname, port),
        hostname: hostname.filter(|h| !h.is_empty()).map(Into::into),
        tls_port: None,
        role,
        health: Health::Unknown,
        replication_offset: None,
    })
}
