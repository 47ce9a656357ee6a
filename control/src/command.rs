//! What goes in and out of the core: connection ids, replies, commands.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use topology::{ClusterError, NodeAddr, NodeKey, TopologyCommand};

/// A channel name as the application gave it (without the partition tag;
/// the driver builds the wire name with
/// [`Partitions::redis_channel_into`](shardcore::Partitions::redis_channel_into)).
/// Shared: the wanted set, the subscribes awaiting replies and the
/// commands given out hold the same allocation (a clone is a reference
/// count, not a copy of the name).
pub use crate::channel::Channel;

/// One subscribe connection. Every [`Command::Open`] names a fresh id: a
/// reconnect is a new connection, so a late reply or push for an old one
/// is recognised and ignored.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// The reply to one [`Command::Subscribe`], as the driver classified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubscribeReply {
    /// Every channel confirmed.
    Ok,
    /// An error that is not about routing (an ACL denial): the server's text.
    Refused(Box<str>),
    /// `MOVED`, `ASK`, `TRYAGAIN` or `CLUSTERDOWN`
    /// ([`topology::parse_cluster_error`]).
    Routing(ClusterError),
}

/// Why a topology fetch gave no map.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FetchError {
    /// The node could not be reached or the command failed.
    Unreachable,
    /// The reply did not parse, or described no shard.
    BadReply,
}

/// The outcome of one [`Command::ProbeSlot`] (`GET` of
/// [`topology::probe_key_for_slot`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeReply {
    /// The asked node answered the `GET`: it owns the slot.
    Served,
    /// `MOVED`: the slot's owner.
    Moved(NodeAddr),
    /// Any other outcome (an error, `CLUSTERDOWN`, no connection).
    Failed,
}

/// A command for the driver, from [`Core::poll_command`](crate::Core::poll_command).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Open subscribe connection `conn` to `node`; answer with
    /// [`handle_conn_up`](crate::Core::handle_conn_up) or
    /// [`handle_conn_down`](crate::Core::handle_conn_down).
    Open {
        /// The new connection.
        conn: ConnId,
        /// The primary.
        node: NodeKey,
    },
    /// Close `conn` (its node left, or it stopped answering); nothing more
    /// is reported for it.
    Close {
        /// The connection.
        conn: ConnId,
    },
    /// `PING` on `conn` (a liveness probe: it was silent for the ping
    /// interval); answer with [`handle_pong`](crate::Core::handle_pong).
    Ping {
        /// The connection.
        conn: ConnId,
    },
    /// `SSUBSCRIBE` `channels` (all of `partition`, hence of `slot`; at most
    /// the batch size) on `conn`; answer with
    /// [`handle_subscribe_reply`](crate::Core::handle_subscribe_reply), in
    /// the order the commands were sent on that connection.
    Subscribe {
        /// The connection.
        conn: ConnId,
        /// The partition of every channel.
        partition: u32,
        /// The partition's slot.
        slot: u16,
        /// The channels, not empty.
        channels: Vec<Channel>,
    },
    /// `SUNSUBSCRIBE` `channels` of one partition on `conn`; no reply is
    /// expected by the core.
    Unsubscribe {
        /// The connection.
        conn: ConnId,
        /// The partition of every channel.
        partition: u32,
        /// The partition's slot.
        slot: u16,
        /// The channels, not empty.
        channels: Vec<Channel>,
    },
    /// These channels may have lost messages: tell the application (in
    /// order with their messages) before their resubscribe goes out.
    Gap {
        /// The partition of every channel.
        partition: u32,
        /// The channels, not empty.
        channels: Vec<Channel>,
    },
    /// The server refused the subscription of `channel` alone, or closed
    /// the connection each time it was in flight alone (see the `probes`
    /// module): report it (it stays unsubscribed until it is wanted
    /// again).
    Refused {
        /// Its partition.
        partition: u32,
        /// The channel.
        channel: Channel,
        /// The server's text.
        message: Box<str>,
    },
    /// Ask `node` its version (`INFO server`), the first step of the
    /// first fetch: the version chooses the topology command
    /// ([`topology::choose_command`]) for this fetch and every later one.
    /// Answer with [`handle_version`](crate::Core::handle_version) and the
    /// same `id`; the fetch goes on as [`Command::FetchTopology`] under it.
    AskVersion {
        /// The fetch.
        id: u64,
        /// Whom to ask.
        node: NodeAddr,
    },
    /// Fetch the slot map from `node` with `command`; answer with
    /// [`handle_topology`](crate::Core::handle_topology) and the same `id`.
    FetchTopology {
        /// The request.
        id: u64,
        /// Whom to ask.
        node: NodeAddr,
        /// `CLUSTER SHARDS` or `CLUSTER SLOTS`, as the version chose.
        command: TopologyCommand,
    },
    /// `GET` a key of `slot` on `node` to learn its owner; answer with
    /// [`handle_probe`](crate::Core::handle_probe) and the same `id`.
    ProbeSlot {
        /// The request.
        id: u64,
        /// The slot.
        slot: u16,
        /// Whom to ask.
        node: NodeAddr,
    },
}

struct Names<'a>(&'a [Channel]);

impl fmt::Display for Names<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{}", alloc::string::String::from_utf8_lossy(c))?;
        }
        Ok(())
    }
}

impl fmt::Display for Command {
    /// One line, as golden transcripts print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Open { conn, node } => write!(f, "open {conn} {} {}", node.id, node.addr),
            Command::Close { conn } => write!(f, "close {conn}"),
            Command::Ping { conn } => write!(f, "ping {conn}"),
            Command::Subscribe {
                conn,
                partition,
                slot,
                channels,
            } => write!(
                f,
                "ssubscribe {conn} p{partition} s{slot} [{}]",
                Names(channels)
            ),
            Command::Unsubscribe {
                conn,
                partition,
                slot,
                channels,
            } => write!(
                f,
                "sunsubscribe {conn} p{partition} s{slot} [{}]",
                Names(channels)
            ),
            Command::Gap {
                partition,
                channels,
            } => write!(f, "gap p{partition} [{}]", Names(channels)),
            Command::Refused {
                partition,
                channel,
                message,
            } => write!(
                f,
                "refused p{partition} {} ({message})",
                alloc::string::String::from_utf8_lossy(channel)
            ),
            Command::AskVersion { id, node } => write!(f, "version #{id} {node}"),
            Command::FetchTopology { id, node, command } => {
                write!(f, "fetch #{id} {node} ({})", command.name())
            }
            Command::ProbeSlot { id, slot, node } => write!(f, "probe #{id} s{slot} {node}"),
        }
    }
}
