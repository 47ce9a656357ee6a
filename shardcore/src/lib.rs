//! Where every channel lives. The pure, I/O-free core of shardsub that every
//! node of a fleet must compute identically, forever.
//!
//! ```text
//! channel ──channel_hash──┬─> shard_of(n)       client-side sharding (jump hash)
//!                         ├─> worker_of(w)      a worker by hash (vectors only)
//!                         └─> Partitions::partition_of ─> tag ─> "{TAG}.channel"
//!                                                          └─> slot ─> node (topology)
//! subscribed channels + partition→node + W ──plan_resubscribe──> SSUBSCRIBE batches
//! ```
//!
//! - [`crc16`], [`key_slot`], [`hash_tag`]: the Redis Cluster hash slot of a
//!   key, exactly as the specification defines it.
//! - [`cluster_create_ranges`]: how `redis-cli --cluster create` splits the
//!   slots over N masters.
//! - [`channel_hash`] (FNV-1a 64 + `fmix64`, frozen), [`jump_consistent_hash`],
//!   [`shard_of`], [`worker_of`].
//! - [`Partitions`]: P app-level partitions whose tags are balanced over every
//!   cluster size, from tables baked in at build time.
//! - [`plan`]: the resubscribe planner.
//!
//! It does not talk to servers, track topology, or allocate per message: the
//! engine and the `topology` crate do the I/O and keep the slot map.
//!
//! These functions are a wire contract: golden tests pin their outputs, so a
//! change that would silently move channels across a live fleet fails.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

extern crate alloc;

mod hash;
mod partitions;
pub mod plan;
mod slot;
// `slot_tag_index` is used by build.rs and the tests only.
#[allow(dead_code)]
mod tag_gen;

pub use hash::{channel_hash, fnv1a64, jump_consistent_hash, shard_of, worker_of};
pub use partitions::{PartitionError, Partitions, MAX_PARTITIONS};
pub use plan::plan_resubscribe;
pub use slot::{cluster_create_ranges, crc16, hash_tag, ideal_ranges, key_slot, SLOT_COUNT};
