//! Small readers over borrowed reply frames, shared by both parsers.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::RangeInclusive;

use resp::{Aggregate, AggregateKind, Frame};

use crate::error::{Field, Problem, ReplyError};
use crate::slotmap::{Node, NodeAddr, Shard, SlotMap};
use crate::version::TopologyCommand;

/// How to turn announced endpoints into addresses.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ParseOptions<'a> {
    /// The host the command was sent to. A node announced with an empty IP
    /// (`""`, "the same host you asked") gets this host; without it, such a
    /// node's address is `None`.
    pub asked_host: Option<&'a str>,
    /// Connect by announced host name where a node reports a non-empty one
    /// (`cluster-announce-hostname`), instead of its IP or preferred endpoint.
    pub prefer_hostname: bool,
    /// Connect to a node's `tls-port` where `CLUSTER SHARDS` names both a
    /// `port` and a `tls-port` (a TLS client of a node that also listens
    /// in plaintext); without it the `port` is used. `CLUSTER SLOTS` and
    /// redirects already name the port for the asking connection's kind.
    pub prefer_tls_port: bool,
}

impl ParseOptions<'_> {
    /// The address for an announced endpoint (`?` = unknown, `""` = asked
    /// host) and optional host name.
    pub(crate) fn address(
        &self,
        endpoint: &str,
        hostname: Option<&str>,
        port: u16,
    ) -> Option<NodeAddr> {
        let host = match hostname {
            Some(h) if self.prefer_hostname && !h.is_empty() => h,
            _ => match endpoint {
                "?" => return None,
                "" => self.asked_host?,
                e => e,
            },
        };
        Some(NodeAddr {
            host: String::from(host),
            port,
        })
    }
}

/// An aggregate holding a list (array or set).
pub(crate) fn list<'a>(f: &Frame<'a>) -> Result<Aggregate<'a>, Problem> {
    match f.as_aggregate() {
        Some(a) if matches!(a.kind(), AggregateKind::Array | AggregateKind::Set) => Ok(a),
        _ if f.is_error() => Err(Problem::ServerError),
        _ => Err(Problem::WrongType),
    }
}

/// The key-value pairs of a RESP3 map or a RESP2 flat key-value array.
pub(crate) fn pairs<'a>(f: &Frame<'a>) -> Result<Vec<(Frame<'a>, Frame<'a>)>, Problem> {
    let a = f.as_aggregate().ok_or(Problem::WrongType)?;
    match a.kind() {
        AggregateKind::Map => {}
        AggregateKind::Array if a.len() % 2 == 0 => {}
        AggregateKind::Array => return Err(Problem::OddLength),
        _ => return Err(Problem::WrongType),
    }
    let mut out = Vec::with_capacity(a.len());
    let mut it = a.iter();
    while let Some(k) = it.next() {
        let v = it.next().ok_or(Problem::OddLength)?;
        out.push((k, v));
    }
    Ok(out)
}

/// A string field as text.
pub(crate) fn text<'a>(f: &Frame<'a>) -> Result<&'a str, Problem> {
    let b = f.as_bytes().ok_or(Problem::WrongType)?;
    core::str::from_utf8(b).map_err(|_| Problem::NotUtf8)
}

/// An integer field (a decimal string is accepted too).
pub(crate) fn int(f: &Frame<'_>) -> Result<i64, Problem> {
    if let Some(i) = f.as_int() {
        return Ok(i);
    }
    text(f)?.parse().map_err(|_| Problem::WrongType)
}

/// A port: an integer from 0 to 65535.
pub(crate) fn port(f: &Frame<'_>) -> Result<u16, Problem> {
    u16::try_from(int(f)?).map_err(|_| Problem::OutOfRange)
}

/// A hash slot: an integer from 0 to 16383.
pub(crate) fn slot(f: &Frame<'_>) -> Result<u16, Problem> {
    match u16::try_from(int(f)?) {
        Ok(s) if s < shardcore::SLOT_COUNT => Ok(s),
        _ => Err(Problem::OutOfRange),
    }
}

/// Builds a [`SlotMap`] entry by entry, merging entries of the same primary
/// and refusing a slot claimed twice.
pub(crate) struct Builder {
    command: TopologyCommand,
    shards: Vec<Shard>,
    by_id: BTreeMap<String, usize>,
    /// (slots, shard index, entry) per claimed range.
    claims: Vec<(RangeInclusive<u16>, usize, usize)>,
}

impl Builder {
    pub(crate) fn new(command: TopologyCommand) -> Self {
        Builder {
            command,
            shards: Vec::new(),
            by_id: BTreeMap::new(),
            claims: Vec::new(),
        }
    }

    /// Adds (or merges into) the shard of `primary`; returns its index.
    pub(crate) fn shard(
        &mut self,
        entry: usize,
        primary: Node,
        replicas: Vec<Node>,
    ) -> Result<usize, ReplyError> {
        let command = self.command;
        if let Some(&i) = self.by_id.get(&primary.id) {
            let conflict =
                ReplyError::new(command, Field::Ip, Problem::Conflict).at(entry, Some(0));
            let known = self.shards.get_mut(i).ok_or(conflict)?;
            if known.primary.addr != primary.addr {
                return Err(conflict);
            }
            for r in replicas {
                if !known.replicas.iter().any(|k| k.id == r.id) {
                    known.replicas.push(r);
                }
            }
            return Ok(i);
        }
        // Every shard owns a slot or is a primary: no more than 16384 of
        // them can be real. (Indices must stay below the map's sentinel.)
        if self.shards.len() >= usize::from(shardcore::SLOT_COUNT) {
            return Err(ReplyError::new(command, Field::Entry, Problem::OutOfRange).at(entry, None));
        }
        self.by_id.insert(primary.id.clone(), self.shards.len());
        self.shards.push(Shard { primary, replicas });
        Ok(self.shards.len() - 1)
    }

    /// Gives `slots` to shard `index` (overlaps are found in `finish`).
    pub(crate) fn claim(&mut self, entry: usize, slots: RangeInclusive<u16>, index: usize) {
        self.claims.push((slots, index, entry));
    }

    /// The map, or an error naming the later of two entries that claim the
    /// same slot.
    pub(crate) fn finish(mut self) -> Result<SlotMap, ReplyError> {
        self.claims
            .sort_by_key(|(r, _, entry)| (*r.start(), *entry));
        for pair in self.claims.windows(2) {
            if let [(a, _, ea), (b, _, eb)] = pair {
                if b.start() <= a.end() {
                    let entry = (*ea).max(*eb);
                    return Err(
                        ReplyError::new(self.command, Field::SlotStart, Problem::Overlap)
                            .at(entry, None),
                    );
                }
            }
        }
        let claims: Vec<(RangeInclusive<u16>, usize)> =
            self.claims.into_iter().map(|(r, i, _)| (r, i)).collect();
        Ok(SlotMap::from_parts(self.shards, &claims))
    }
}
