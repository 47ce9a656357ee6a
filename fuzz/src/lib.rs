//! Invariant checks behind the fuzz targets, one module per target family,
//! kept here so that `cargo test` (run inside `fuzz/`) runs them on every
//! committed seed.
//!
//! - [`parse`]: the RESP parser, whole and chunked (`parse_whole`, `parse_chunked`);
//! - [`conn`]: the sans-IO connection core (`conn_core`);
//! - [`topo`]: the `CLUSTER SLOTS` / `CLUSTER SHARDS` parsers (`topology_reply`);
//! - [`rewire`]: layouts, the rewire plan and the resubscribe plan (`rewire_plan`);
//! - [`control`]: the cluster control core in its simulator (`control_core`);
//! - [`history`]: the recoverable channels' header (`history_header`);
//! - [`publish`]: the publish side's route gates and retry bounds (`publish_side`).
//!
//! Every target runs under testkit's counting allocator
//! ([`testkit::alloc::CountingAlloc`]), so a check can bound the heap the
//! code under test holds on its thread.

pub mod conn;
pub mod control;
pub mod history;
pub mod input;
pub mod parse;
pub mod publish;
pub mod rewire;
pub mod topo;

#[cfg(test)]
mod seeds;

pub use parse::{check_chunked, check_whole};

#[global_allocator]
static HEAP: testkit::alloc::CountingAlloc = testkit::alloc::CountingAlloc::new();
