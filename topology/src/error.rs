//! What was wrong with a topology reply, and where.

use core::fmt;

use crate::version::TopologyCommand;

/// A `CLUSTER SLOTS` / `CLUSTER SHARDS` reply that could not be read.
///
/// It names the command, the entry (slot range or shard, counted from 0),
/// the node inside that entry (0 is the primary in `CLUSTER SLOTS`; the
/// position in the `nodes` list in `CLUSTER SHARDS`), the field, and what was
/// wrong with it. Small and `Copy`, so it can be counted and logged freely.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReplyError {
    /// The command whose reply this was.
    pub command: TopologyCommand,
    /// Index of the top-level entry, when the fault is inside one.
    pub entry: Option<u32>,
    /// Index of the node inside the entry, when the fault is inside one.
    pub node: Option<u32>,
    /// The field that was wrong.
    pub field: Field,
    /// What was wrong with it.
    pub problem: Problem,
}

/// The part of a reply a [`ReplyError`] points at.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// The reply as a whole (not an array, a server error, not RESP at all).
    Reply,
    /// One top-level entry (a slot range or a shard).
    Entry,
    /// The first slot of a range.
    SlotStart,
    /// The last slot of a range.
    SlotEnd,
    /// A shard's `slots` list.
    Slots,
    /// A shard's `nodes` list.
    Nodes,
    /// One node description.
    Node,
    /// A node's IP (or preferred endpoint, in `CLUSTER SLOTS`).
    Ip,
    /// A node's `endpoint` (`CLUSTER SHARDS`).
    Endpoint,
    /// A node's `hostname`.
    Hostname,
    /// A node's plain-text port.
    Port,
    /// A node's TLS port.
    TlsPort,
    /// A node's id.
    Id,
    /// A node's metadata map (`CLUSTER SLOTS`, Redis 7+).
    Metadata,
    /// A node's `role`.
    Role,
    /// A node's `health`.
    Health,
    /// A node's `replication-offset`.
    ReplicationOffset,
}

/// What was wrong with a [`Field`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Problem {
    /// The server answered with an error (for example, cluster support is
    /// disabled). The engine has the error text in the frame it parsed.
    ServerError,
    /// The reply bytes were not valid RESP.
    NotResp,
    /// The reply bytes ended before the reply did.
    Incomplete,
    /// A required field is absent.
    Missing,
    /// The field has the wrong RESP type (for example, a string where an
    /// integer belongs, or a scalar where an array belongs).
    WrongType,
    /// A number is out of its range (a slot past 16383, a port past 65535,
    /// a range whose end is before its start).
    OutOfRange,
    /// A string that must be text is not valid UTF-8.
    NotUtf8,
    /// A key-value list or slot-pair list has an odd number of elements.
    OddLength,
    /// A slot is claimed by two entries.
    Overlap,
    /// Two values that must agree do not (for example, two primaries in one
    /// shard).
    Conflict,
}

impl ReplyError {
    pub(crate) fn new(command: TopologyCommand, field: Field, problem: Problem) -> Self {
        ReplyError {
            command,
            entry: None,
            node: None,
            field,
            problem,
        }
    }

    pub(crate) fn at(mut self, entry: usize, node: Option<usize>) -> Self {
        self.entry = u32::try_from(entry).ok();
        self.node = node.and_then(|n| u32::try_from(n).ok());
        self
    }
}

impl Field {
    /// The field's name as the server spells it (or a description).
    pub fn name(self) -> &'static str {
        match self {
            Field::Reply => "reply",
            Field::Entry => "entry",
            Field::SlotStart => "start slot",
            Field::SlotEnd => "end slot",
            Field::Slots => "slots",
            Field::Nodes => "nodes",
            Field::Node => "node",
            Field::Ip => "ip",
            Field::Endpoint => "endpoint",
            Field::Hostname => "hostname",
            Field::Port => "port",
            Field::TlsPort => "tls-port",
            Field::Id => "id",
            Field::Metadata => "metadata",
            Field::Role => "role",
            Field::Health => "health",
            Field::ReplicationOffset => "replication-offset",
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Problem::ServerError => "the server replied with an error",
            Problem::NotResp => "not valid RESP",
            Problem::Incomplete => "the reply is cut short",
            Problem::Missing => "missing",
            Problem::WrongType => "wrong RESP type",
            Problem::OutOfRange => "out of range",
            Problem::NotUtf8 => "not valid UTF-8",
            Problem::OddLength => "odd number of elements where pairs were expected",
            Problem::Overlap => "slot already owned by an earlier entry",
            Problem::Conflict => "conflicts with another value",
        })
    }
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} reply", self.command.name())?;
        if let Some(e) = self.entry {
            write!(f, ", entry {e}")?;
        }
        if let Some(n) = self.node {
            write!(f, ", node {n}")?;
        }
        write!(f, ": {}: {}", self.field.name(), self.problem)
    }
}

impl core::error::Error for ReplyError {}
