//! Redis Cluster topology for shardsub, without I/O.
//!
//! This crate turns the cluster's own description of itself into the work
//! the engine must do: which primaries to hold subscribe connections to,
//! which app-level partitions each connection carries, and what to change
//! when the cluster moves. It never opens a socket, reads a clock or
//! spawns a thread: the engine sends the commands, hands the replies in as
//! borrowed [`resp::Frame`]s, and carries out the plans.
//!
//! ```text
//!  engine: poll timer (30 s) ─┐    sunsubscribe push for a wanted channel ─┐
//!                             v                                           v
//!        INFO server / HELLO ─> choose_command(version) ─> CLUSTER SLOTS | CLUSTER SHARDS
//!                                                                 │ reply: resp::Frame (borrowed)
//!                             parse_cluster_slots / parse_cluster_shards
//!                                                                 v
//!                  SlotMap: slot 0..16383 → Option<shard>; shard = primary + replicas, health
//!                                                                 │ + shardcore::Partitions (tag → slot)
//!                                                                 v
//!                  Layout::compute: partition → NodeKey (id + addr), node → partitions,
//!                                   unresolved partitions ─> probe_key_for_slot ─> GET ─> MOVED
//!                                                                 │ previous Layout
//!                                                                 v
//!                  plan_rewire(old, new) ─> RewirePlan { open, close, resubscribe, unowned }
//!                                                                 │
//!  engine: open connections ─> SSUBSCRIBE moved partitions (gap events) ─> close the rest
//! ```
//!
//! - [`choose_command`]: `CLUSTER SHARDS` from Redis/Valkey 8 on, where
//!   `CLUSTER SLOTS` can return empty ranges for a failed primary
//!   (redis#13422, valkey#784); `CLUSTER SLOTS` before. The version comes
//!   from [`parse_info_version`] or [`parse_hello_version`].
//! - [`parse_cluster_slots`], [`parse_cluster_shards`]: RESP2 and RESP3
//!   shapes, into a [`SlotMap`]. Slots no one owns are `None`, never a
//!   default. Errors say which field of which entry was wrong.
//! - [`Layout`]: partition → node and node → partitions, plus the
//!   partitions whose slot has no known owner.
//! - [`plan_rewire`]: the difference between two layouts, in a fixed order.
//! - [`probe_key_for_slot`]: a short key in a given slot, for the probe `GET`.
//! - [`parse_cluster_error`]: `MOVED` / `ASK` / `TRYAGAIN` / `CLUSTERDOWN`
//!   from an error reply; [`SlotMap::apply_moved`] records a `MOVED`.
//!
//! It does not decide when to refresh, retry, or back off, and it sends
//! nothing: the engine owns time, connections and retries.
//!
//! ```
//! use topology::{parse_cluster_slots, plan_rewire, Layout, ParseOptions};
//! let reply = b"*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n$1\r\na\r\n";
//! let resp::Status::Complete(parsed) = resp::parse(reply, &resp::Limits::default())? else {
//!     unreachable!()
//! };
//! let map = parse_cluster_slots(&parsed.frame, &ParseOptions::default())?;
//! let parts = shardcore::Partitions::new(128).unwrap();
//! let layout = Layout::compute(&map, &parts);
//! assert_eq!(layout.nodes().len(), 1);
//! assert_eq!(layout.nodes()[0].partitions.len(), 128);
//! let plan = plan_rewire(&Layout::compute(&topology::SlotMap::new(), &parts), &layout);
//! assert_eq!(plan.open.len(), 1);
//! assert_eq!(plan.resubscribe.len(), 128);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

extern crate alloc;

mod error;
mod layout;
mod parse_shards;
mod parse_slots;
mod probe;
mod redirect;
mod render;
mod reply;
mod rewire;
mod slotmap;
mod version;

pub use error::{Field, Problem, ReplyError};
pub use layout::{Layout, LayoutNode, NodeKey, Unresolved, UnresolvedReason};
pub use parse_shards::parse_cluster_shards;
pub use parse_slots::parse_cluster_slots;
pub use probe::probe_key_for_slot;
pub use redirect::{parse_cluster_error, ClusterError};
pub use reply::ParseOptions;
pub use rewire::{plan_rewire, Move, Orphan, RewirePlan};
pub use slotmap::{Health, Node, NodeAddr, Role, Shard, SlotMap};
pub use version::{
    choose_command, parse_hello_version, parse_info_version, Product, ServerVersion,
    TopologyCommand,
};

use resp::Frame;

/// Parses the reply to `command` (see [`parse_cluster_slots`] and
/// [`parse_cluster_shards`]).
///
/// # Errors
///
/// As the parser for `command`.
pub fn parse_topology(
    command: TopologyCommand,
    reply: &Frame<'_>,
    options: &ParseOptions<'_>,
) -> Result<SlotMap, ReplyError> {
    match command {
        TopologyCommand::ClusterSlots => parse_cluster_slots(reply, options),
        TopologyCommand::ClusterShards => parse_cluster_shards(reply, options),
    }
}

/// Parses raw reply bytes (one complete frame) to `command`: a convenience
/// for tests, fixtures and benchmarks. The engine parses frames itself and
/// calls [`parse_topology`].
///
/// # Errors
///
/// [`Problem::NotResp`] or [`Problem::Incomplete`] on [`Field::Reply`] when
/// `bytes` do not hold one complete RESP frame; otherwise as [`parse_topology`].
pub fn parse_topology_bytes(
    command: TopologyCommand,
    bytes: &[u8],
    options: &ParseOptions<'_>,
) -> Result<SlotMap, ReplyError> {
    match resp::parse(bytes, &resp::Limits::default()) {
        Ok(resp::Status::Complete(p)) => parse_topology(command, &p.frame, options),
        Ok(resp::Status::Incomplete) => {
            Err(ReplyError::new(command, Field::Reply, Problem::Incomplete))
        }
        Err(_) => Err(ReplyError::new(command, Field::Reply, Problem::NotResp)),
    }
}
